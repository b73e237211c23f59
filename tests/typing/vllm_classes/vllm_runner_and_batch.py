"""vLLM's own encoder runner and batch satisfy the contract's Protocols (vLLM 0.28 to 0.33;
tests/test_vllm_typing.py runs mypy --strict and pyright on this file)."""

from __future__ import annotations

from vllm.v1.worker.gpu.input_batch import InputBatch
from vllm.v1.worker.gpu.mm.encoder_runner import EncoderRunner

from rtmm_protocol import InputBatch as ContractBatch
from rtmm_protocol import MMEmbeddingGatherer, VllmInputBatch


def runner(candidate: EncoderRunner) -> MMEmbeddingGatherer:
    return candidate


def vllm_batch(candidate: InputBatch) -> VllmInputBatch:
    return candidate


def contract_batch(candidate: InputBatch) -> ContractBatch:
    return candidate
