"""Migration help for gatherers that still call the argument ``computed_prefill_lens`` (SPEC T2)."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch

from rtmm_protocol.encoder_cache import EncoderCache
from rtmm_protocol.types import IntArray

__all__ = ["LegacyGatherer", "LegacyGathererAdapter", "adapt_legacy_gatherer", "is_legacy_gatherer"]

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


def is_legacy_gatherer(target: object) -> bool:
    """Whether ``target``'s gather still names ``computed_prefill_lens`` (and can be adapted)."""
    gather = getattr(target, "gather_mm_embeddings", None)
    try:
        return callable(gather) and "computed_prefill_lens" in inspect.signature(gather).parameters
    except (TypeError, ValueError):  # no signature to read
        return False


class LegacyGathererAdapter:
    """Presents a legacy gatherer through the current :class:`~rtmm_protocol.MMEmbeddingGatherer`.

    The wrapped gatherer knows no look-ahead, so the adapter shifts the computed counts by
    ``draft_lookahead`` into a new array before calling it (the inputs are never
    modified); its prefill check therefore sees the shifted window start, as SPEC G2
    requires. A legacy gatherer raises for any missing output in the window it is given,
    while SPEC G7 lets a miss that only the look-ahead reaches (a feature starting at or
    after ``num_computed_tokens + num_scheduled_tokens``) fall back to token embeddings:
    when the adapter can see the encoder cache (``encoder_cache``, else the wrapped
    gatherer's own ``encoder_cache``), it leaves such features out of the windows it hands
    on, calling the legacy gatherer once per stretch between them, and merges the results.
    """

    def __init__(self, legacy: LegacyGatherer, encoder_cache: EncoderCache | None = None) -> None:
        if not callable(getattr(legacy, "gather_mm_embeddings", None)):
            raise TypeError(f"{type(legacy).__name__} has no gather_mm_embeddings method to adapt")
        self.legacy = legacy
        self.encoder_cache: EncoderCache | None = (
            encoder_cache if encoder_cache is not None else getattr(legacy, "encoder_cache", None)
        )
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
        scheduled = np.asarray(num_scheduled_tokens)
        stretches = self._stretches(req_ids, scheduled, prefill_lens, shifted, draft_lookahead)
        if all(s == [(0, int(n))] for s, n in zip(stretches, scheduled, strict=True)):
            return self.legacy.gather_mm_embeddings(
                req_ids,
                total_num_scheduled_tokens,
                num_scheduled_tokens,
                query_start_loc,
                prefill_lens,
                shifted,
            )
        return self._gather_stretches(
            req_ids,
            int(total_num_scheduled_tokens),
            query_start_loc,
            prefill_lens,
            shifted,
            stretches,
        )

    def _stretches(
        self,
        req_ids: Sequence[str],
        scheduled: IntArray,
        prefill_lens: IntArray,
        shifted: IntArray,
        lookahead: int,
    ) -> list[list[tuple[int, int]]]:
        """Per request, the parts ``[a, b)`` of its window (window-relative) to hand on.

        A window loses the placeholders of missing outputs that only the look-ahead
        reaches (G7). Only requests still in their prompt are looked at: any gatherer
        gathers those, and reading a skipped request's outputs would break G2.
        """
        cache = self.encoder_cache
        stretches = [[(0, int(n))] for n in scheduled]
        lengths = {len(req_ids), len(scheduled), len(prefill_lens), len(shifted)}
        if lookahead == 0 or cache is None or len(lengths) > 1:
            return stretches  # a malformed batch is the legacy gatherer's to refuse
        for i, req_id in enumerate(req_ids):
            start, count = int(shifted[i]), int(scheduled[i])
            if count == 0 or start >= int(prefill_lens[i]):
                continue
            scheduled_end = start - lookahead + count  # num_computed_tokens + scheduled
            cuts = [
                (f.mm_position.offset - start, f.mm_position.offset + f.mm_position.length - start)
                for f in cache.mm_features.get(req_id, ())
                if scheduled_end <= f.mm_position.offset < start + count
                and f.identifier not in cache.encoder_outputs
            ]
            kept, at = [], 0
            for lo, hi in cuts:
                if lo > at:
                    kept.append((at, lo))
                at = max(at, hi)
            if at < count:
                kept.append((at, count))
            stretches[i] = kept
        return stretches

    def _gather_stretches(
        self,
        req_ids: list[str],
        total: int,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        shifted: IntArray,
        stretches: list[list[tuple[int, int]]],
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """One legacy call per k-th stretch of every request, merged in slot order."""
        mask = torch.zeros(total, dtype=torch.bool)
        pieces: list[list[torch.Tensor]] = [[] for _ in req_ids]
        for k in range(max(len(s) for s in stretches)):
            part = [s[k] if k < len(s) else (0, 0) for s in stretches]
            counts = np.array([b - a for a, b in part], dtype=np.int64)
            starts = np.array([a for a, _ in part], dtype=np.int64) + np.asarray(shifted)
            qsl = np.concatenate([[0], np.cumsum(counts)])
            got, got_mask = self.legacy.gather_mm_embeddings(
                req_ids, int(counts.sum()), counts, qsl, prefill_lens, starts
            )
            got_mask = got_mask.to("cpu", torch.bool)
            queue = list(got)
            for i, (a, b) in enumerate(part):
                flags = got_mask[int(qsl[i]) : int(qsl[i + 1])]
                slot = int(query_start_loc[i]) + a
                mask[slot : slot + b - a] = flags
                rows = int(flags.sum())
                while rows > 0 and queue:  # this request's pieces come next, in order
                    rows -= queue[0].shape[0]
                    pieces[i].append(queue.pop(0))
        return [p for request in pieces for p in request], mask


def adapt_legacy_gatherer(
    gatherer: LegacyGatherer, encoder_cache: EncoderCache | None = None
) -> LegacyGathererAdapter:
    """Wrap ``gatherer`` if it still uses ``computed_prefill_lens``; warn once per class."""
    if not is_legacy_gatherer(gatherer):
        raise TypeError(
            f"{type(gatherer).__name__}.gather_mm_embeddings has no computed_prefill_lens "
            "parameter; it needs no adapter"
        )
    _warn_once(type(gatherer), stacklevel=3)
    return LegacyGathererAdapter(gatherer, encoder_cache)


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
