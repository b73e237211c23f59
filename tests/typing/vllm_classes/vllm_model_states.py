"""vLLM's DefaultModelState satisfies VllmModelState[InputBatch] (vLLM 0.29 to 0.33), and
not VllmModelState[VllmInputBatch]: its methods take vLLM's InputBatch, not any batch
(tests/test_vllm_typing.py runs mypy --strict and pyright on this file)."""

from __future__ import annotations

from vllm.v1.worker.gpu.input_batch import InputBatch
from vllm.v1.worker.gpu.model_states.default import DefaultModelState

from rtmm_protocol import ModelInputsHooks, VllmInputBatch, VllmModelState


def default_state(candidate: DefaultModelState) -> VllmModelState[InputBatch]:
    return candidate


def hooks(candidate: DefaultModelState) -> ModelInputsHooks[InputBatch]:
    return candidate


def any_batch(candidate: DefaultModelState) -> VllmModelState[VllmInputBatch]:
    return candidate  # E: return-value  # P: reportReturnType


def any_batch_hooks(candidate: DefaultModelState) -> ModelInputsHooks[VllmInputBatch]:
    return candidate  # E: return-value  # P: reportReturnType
