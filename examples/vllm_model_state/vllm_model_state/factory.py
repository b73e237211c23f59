"""The conformance factory: ``pytest --conformance=vllm_model_state.factory:make_model_state``."""

from __future__ import annotations

from vllm_encoder_runner import unpin_host_memory_on_cpu, vllm_encoder_cache

from rtmm_protocol.conformance import ConformanceContext
from vllm_model_state.encoder_inputs import vllm_model_view
from vllm_model_state.model_config import ToyModelConfig, vllm_config_for
from vllm_model_state.state import VllmDefaultModelState

__all__ = ["make_model_state"]


def make_model_state(ctx: ConformanceContext) -> VllmDefaultModelState:
    """vLLM's model state, built as its model runner builds one, around the suite's model."""
    unpin_host_memory_on_cpu(ctx.device)
    multimodal = callable(getattr(ctx.model, "embed_multimodal", None))
    model_config = ToyModelConfig(ctx.hidden_size, ctx.dtype, ctx.max_num_tokens, multimodal)
    config = vllm_config_for(model_config, ctx.max_num_reqs, ctx.max_num_tokens, ctx.device)
    cache = vllm_encoder_cache(ctx.encoder_cache) if multimodal else None
    return VllmDefaultModelState(config, vllm_model_view(ctx.model), cache, ctx.device)
