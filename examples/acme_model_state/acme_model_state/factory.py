"""The conformance factory: ``pytest --conformance=acme_model_state.factory:make_state``."""

from __future__ import annotations

from acme_model_state.state import AcmeModelState
from rtmm_conformance import ConformanceContext

__all__ = ["make_state"]


def make_state(ctx: ConformanceContext) -> AcmeModelState:
    """Build the state around the suite's toy model and encoder cache."""
    return AcmeModelState(
        ctx.model,
        ctx.encoder_cache,
        hidden_size=ctx.hidden_size,
        max_num_tokens=ctx.max_num_tokens,
        dtype=ctx.dtype,
        device=ctx.device,
        validate=ctx.validate,
    )
