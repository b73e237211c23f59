"""The conformance factory: ``pytest --conformance=vllm_encoder_runner.factory:make_encoder_runner``."""

from __future__ import annotations

import torch
import vllm.v1.worker.gpu.mm.encoder_runner as vllm_encoder_runner
from vllm.v1.worker.gpu.mm.encoder_runner import EncoderRunner

from rtmm_protocol.conformance import ConformanceContext
from vllm_encoder_runner.feature_view import vllm_encoder_cache

__all__ = ["make_encoder_runner"]


def make_encoder_runner(ctx: ConformanceContext) -> EncoderRunner:
    """vLLM's own ``EncoderRunner`` around the suite's model and encoder cache."""
    if torch.device(ctx.device).type == "cpu":
        # vLLM pins the host mask buffer for fast copies to a GPU; there is none here.
        vllm_encoder_runner.PIN_MEMORY = False
    return EncoderRunner(
        ctx.model,  # type: ignore[arg-type]  # the suite's toy multimodal model
        ctx.max_num_tokens,
        ctx.hidden_size,
        vllm_encoder_cache(ctx.encoder_cache),
        ctx.dtype,
        ctx.device,
    )
