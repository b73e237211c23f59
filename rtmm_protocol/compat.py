"""Migration help for gatherers that still call the argument ``computed_prefill_lens`` (SPEC T2)."""

from __future__ import annotations

import inspect
import warnings
from typing import Protocol

import torch

from rtmm_protocol.types import IntArray

__all__ = ["LegacyGatherer", "LegacyGathererAdapter", "adapt_legacy_gatherer"]

_warned: set[type[object]] = set()


class LegacyGatherer(Protocol):
    """The gather signature before the rename: ``computed_prefill_lens`` and no look-ahead."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        computed_prefill_lens: IntArray,
    ) -> tuple[list[torch.Tensor], torch.Tensor]: ...


class LegacyGathererAdapter:
    """Presents a legacy gatherer through the current :class:`~rtmm_protocol.MMEmbeddingGatherer`.

    The wrapped gatherer knows no look-ahead, so the adapter shifts the computed counts
    by ``draft_lookahead`` into a new array before calling it (the inputs are never
    modified). Its prefill check therefore sees the shifted window start, as SPEC G2
    requires. Legacy gatherers that raise on the shifted position of a boundary miss
    (G7) keep that behaviour; migrate to the new signature to get the tolerance.
    """

    def __init__(self, legacy: LegacyGatherer) -> None:
        if not callable(getattr(legacy, "gather_mm_embeddings", None)):
            raise TypeError(f"{type(legacy).__name__} has no gather_mm_embeddings method to adapt")
        self.legacy = legacy
        _warn_once(type(legacy), stacklevel=3)

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 0,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Call the legacy gatherer with ``num_computed_tokens + draft_lookahead``."""
        if draft_lookahead < 0:
            raise ValueError(f"draft_lookahead must be >= 0, got {draft_lookahead}")
        shifted = num_computed_tokens + draft_lookahead
        return self.legacy.gather_mm_embeddings(
            req_ids,
            total_num_scheduled_tokens,
            num_scheduled_tokens,
            query_start_loc,
            prefill_lens,
            shifted,
        )


def adapt_legacy_gatherer(gatherer: LegacyGatherer) -> LegacyGathererAdapter:
    """Wrap ``gatherer`` if it still uses ``computed_prefill_lens``; warn once per class."""
    params = inspect.signature(gatherer.gather_mm_embeddings).parameters
    if "computed_prefill_lens" not in params:
        raise TypeError(
            f"{type(gatherer).__name__}.gather_mm_embeddings has no computed_prefill_lens "
            "parameter; it needs no adapter"
        )
    _warn_once(type(gatherer), stacklevel=3)
    return LegacyGathererAdapter(gatherer)


def _warn_once(cls: type[object], stacklevel: int) -> None:
    """Emit the rename's ``DeprecationWarning`` the first time ``cls`` is adapted.

    ``stacklevel`` counts from this function, so that the warning points at the code
    that asked for the adapter rather than at this module.
    """
    if cls in _warned:
        return
    _warned.add(cls)
    warnings.warn(
        f"{cls.__qualname__}.gather_mm_embeddings uses the pre-rename signature "
        "(computed_prefill_lens, no draft_lookahead); rename the argument to "
        "num_computed_tokens and add draft_lookahead: int = 0",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
