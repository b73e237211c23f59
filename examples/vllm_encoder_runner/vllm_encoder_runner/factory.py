"""The conformance factory: ``pytest --conformance=vllm_encoder_runner.factory:make_encoder_runner``."""

from __future__ import annotations

import torch
import vllm.v1.worker.gpu.mm.encoder_runner as vllm_encoder_runner
from vllm.v1.worker.gpu.mm.encoder_runner import EncoderRunner

from rtmm_protocol.conformance import ConformanceContext
from vllm_encoder_runner.feature_view import vllm_encoder_cache

__all__ = ["make_encoder_runner", "unpin_host_memory_on_cpu"]


def unpin_host_memory_on_cpu(device: torch.device | str) -> None:
    """Switch off vLLM's pinned host buffers when the target runs on CPU.

    vLLM pins the gather mask (and batched encoder inputs) for fast copies to a GPU;
    without one, pinning fails. This sets a module global of vLLM's encoder runner.
    """
    if torch.device(device).type == "cpu":
        # The runner reads the name from its own module (imported there, not re-exported).
        vllm_encoder_runner.PIN_MEMORY = False  # type: ignore[attr-defined]


def make_encoder_runner(ctx: ConformanceContext) -> EncoderRunner:
    """vLLM's own ``EncoderRunner`` around the suite's model and encoder cache."""
    unpin_host_memory_on_cpu(ctx.device)
    return EncoderRunner(
        ctx.model,  # type: ignore[arg-type]  # the suite's toy multimodal model
        ctx.max_num_tokens,
        ctx.hidden_size,
        vllm_encoder_cache(ctx.encoder_cache),
        ctx.dtype,
        ctx.device,
    )
