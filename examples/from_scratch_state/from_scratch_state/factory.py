"""The conformance factory: ``pytest --conformance=from_scratch_state.factory:make_state``."""

from __future__ import annotations

from from_scratch_state.state import ScratchModelState
from rtmm_conformance import ConformanceContext
from rtmm_protocol import ModelState

__all__ = ["make_state"]


def make_state(ctx: ConformanceContext) -> ModelState:
    """Build the state around the suite's model and cache; mypy checks it is a ModelState."""
    return ScratchModelState(
        ctx.model,
        ctx.encoder_cache,
        hidden_size=ctx.hidden_size,
        max_num_tokens=ctx.max_num_tokens,
        dtype=ctx.dtype,
        device=ctx.device,
        validate=ctx.validate,
    )
