"""The bundled targets (``pytest --conformance`` with no value checks the first): the one
module of the suite that imports the reference."""

from __future__ import annotations

from rtmm_conformance.driving.context import ConformanceContext
from rtmm_protocol.reference.encoder_runner import EncoderRunner
from rtmm_protocol.reference.model_state import ReferenceModelState

__all__ = ["reference_gatherer", "reference_model_state"]


def reference_model_state(ctx: ConformanceContext) -> ReferenceModelState:
    """The bundled :class:`~rtmm_protocol.reference.ReferenceModelState`, built for ``ctx``."""
    return ReferenceModelState(
        ctx.model,
        ctx.encoder_cache,
        hidden_size=ctx.hidden_size,
        max_num_tokens=ctx.max_num_tokens,
        dtype=ctx.dtype,
        device=ctx.device,
        validate=ctx.validate,
    )


def reference_gatherer(ctx: ConformanceContext) -> EncoderRunner:
    """The bundled runner-level :class:`~rtmm_protocol.reference.EncoderRunner`."""
    if not callable(getattr(ctx.model, "embed_multimodal", None)):
        raise TypeError("the reference gatherer needs a multimodal model")
    return EncoderRunner(
        ctx.model,  # type: ignore[arg-type]  # checked just above
        ctx.max_num_tokens,
        ctx.hidden_size,
        ctx.encoder_cache,
        ctx.dtype,
        ctx.device,
        validate=ctx.validate,
    )
