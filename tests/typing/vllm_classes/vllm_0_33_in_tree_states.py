"""vLLM 0.33's in-tree model states satisfy VllmModelState[InputBatch], among them the two
whose hooks hand the model inputs of their own (LongcatNgramModelState's buffer,
DiffusionGemmaModelState's merge in prepare_inputs) and the cross-attention state
(tests/test_vllm_typing.py runs mypy --strict and pyright on this file)."""

from __future__ import annotations

from vllm.model_executor.models.diffusion_gemma import DiffusionGemmaModelState
from vllm.model_executor.models.longcat_flash_ngram import LongcatNgramModelState
from vllm.v1.worker.gpu.input_batch import InputBatch
from vllm.v1.worker.gpu.model_states.encoder_decoder import EncoderDecoderModelState
from vllm.v1.worker.gpu.model_states.encoder_only import EncoderOnlyModelState
from vllm.v1.worker.gpu.model_states.mamba_hybrid import MambaHybridModelState

from rtmm_protocol import VllmModelState


def longcat(candidate: LongcatNgramModelState) -> VllmModelState[InputBatch]:
    return candidate


def diffusion_gemma(candidate: DiffusionGemmaModelState) -> VllmModelState[InputBatch]:
    return candidate


def encoder_decoder(candidate: EncoderDecoderModelState) -> VllmModelState[InputBatch]:
    return candidate


def encoder_only(candidate: EncoderOnlyModelState) -> VllmModelState[InputBatch]:
    return candidate


def mamba_hybrid(candidate: MambaHybridModelState) -> VllmModelState[InputBatch]:
    return candidate
