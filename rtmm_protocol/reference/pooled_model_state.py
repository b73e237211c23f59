"""The reference ModelState with its encoded outputs kept in a pre-allocated pool.

It works with any :class:`~rtmm_protocol.EncoderCache`, including one that someone
else fills and instruments (the conformance suite's): the cache's dicts stay the source
of truth and are never replaced. What the state encodes itself is copied into its
:class:`EncoderOutputPool` and the cache receives the pool's view of those rows; a tensor
placed in the cache directly is gathered as it is (SPEC G6 pieces are views of it) and
mirrored into the pool only when :meth:`MMGatherPlan.rows` asks for it.

Check it with the conformance suite::

    pytest --conformance=rtmm_protocol.reference.pooled_model_state:make_pooled_model_state
"""

from __future__ import annotations

from typing import Protocol

import torch

from rtmm_protocol.encoder_cache import EncoderCache
from rtmm_protocol.protocols import MultiModalModel, TextModel
from rtmm_protocol.reference.model_state import ReferenceModelState
from rtmm_protocol.reference.output_pool import EncoderOutputPool

__all__ = ["PooledReferenceModelState", "StateContext", "make_pooled_model_state"]


class StateContext(Protocol):
    """The fields of a conformance context that a state factory reads (SPEC §8)."""

    @property
    def model(self) -> MultiModalModel | TextModel: ...
    @property
    def encoder_cache(self) -> EncoderCache: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def max_num_tokens(self) -> int: ...
    @property
    def dtype(self) -> torch.dtype: ...
    @property
    def device(self) -> torch.device: ...
    @property
    def validate(self) -> bool: ...


class PooledReferenceModelState(ReferenceModelState):
    """:class:`ReferenceModelState` whose encoder runner stores outputs in a pool.

    ``pool_capacity_rows`` sizes the pool (default: 16 steps' worth of tokens, at least
    4,096 rows). A text-only model gets no pool.
    """

    def __init__(
        self,
        model: MultiModalModel | TextModel,
        encoder_cache: EncoderCache,
        *,
        hidden_size: int,
        max_num_tokens: int,
        dtype: torch.dtype,
        device: torch.device | str,
        validate: bool | None = None,
        pool_capacity_rows: int | None = None,
    ) -> None:
        pool = None
        if callable(getattr(model, "embed_multimodal", None)):
            capacity = (
                max(4096, 16 * max_num_tokens) if pool_capacity_rows is None else pool_capacity_rows
            )
            pool = EncoderOutputPool(capacity, hidden_size, dtype=dtype, device=device)
        super().__init__(
            model,
            encoder_cache,
            hidden_size=hidden_size,
            max_num_tokens=max_num_tokens,
            dtype=dtype,
            device=device,
            validate=validate,
            output_pool=pool,
        )


def make_pooled_model_state(ctx: StateContext) -> PooledReferenceModelState:
    """Conformance factory: a :class:`PooledReferenceModelState` around ``ctx``'s model and cache."""
    return PooledReferenceModelState(
        ctx.model,
        ctx.encoder_cache,
        hidden_size=ctx.hidden_size,
        max_num_tokens=ctx.max_num_tokens,
        dtype=ctx.dtype,
        device=ctx.device,
        validate=ctx.validate,
    )
