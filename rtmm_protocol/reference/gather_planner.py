"""Plans a gather (SPEC §3) for a whole batch with array operations.

No Python code runs per request or per feature on this path: a batch's windows are
matched against every request's features with one ``np.searchsorted`` over the
:class:`FeatureTable`, the (request, feature) pairs and then the positions are expanded
with ``np.repeat``, and the cached outputs are looked up with C-level ``map`` calls over
the pairs that need one. Windows of a single position (realtime decode: one token per
request) take a shorter route that skips the expansions.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import torch

from rtmm_protocol.errors import EncoderOutputMissingError
from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.reference.feature_table import MAX_POSITION, FeatureTable
from rtmm_protocol.reference.gather_plan import MMGatherPlan
from rtmm_protocol.reference.output_pool import EncoderOutputPool
from rtmm_protocol.types import IntArray
from rtmm_protocol.validation import check_encoder_output

__all__ = ["GatherPlanner"]

_I64 = npt.NDArray[np.int64]
_EMPTY = np.zeros(0, dtype=np.int64)


class _Pairs:
    """(request, feature) pairs of a batch and the rows each needs, as parallel arrays."""

    __slots__ = (
        "feature",
        "request",
        "row_end",
        "row_start",
        "slot_base",
        "window_end",
        "window_start",
    )

    def __init__(
        self,
        request: _I64,
        feature: _I64,
        window_start: _I64,
        window_end: _I64,
        row_start: _I64,
        row_end: _I64,
        slot_base: _I64,
    ) -> None:
        self.request = request  # batch index
        self.feature = feature  # table entry
        # The window's part of the placeholder, as placeholder indices [start, end).
        self.window_start = window_start
        self.window_end = window_end
        self.row_start = row_start  # encoder-output rows used: [row_start, row_end)
        self.row_end = row_end
        self.slot_base = slot_base  # placeholder index q lands in slot slot_base + q

    def take(self, keep: npt.NDArray[np.intp] | npt.NDArray[np.bool_]) -> _Pairs:
        return _Pairs(
            self.request[keep],
            self.feature[keep],
            self.window_start[keep],
            self.window_end[keep],
            self.row_start[keep],
            self.row_end[keep],
            self.slot_base[keep],
        )


class GatherPlanner:
    """Turns a batch into an :class:`MMGatherPlan`, keeping a :class:`FeatureTable` in sync.

    One planner serves one encoder cache (its table mirrors that cache's features).
    """

    def __init__(
        self,
        *,
        is_realtime: bool,
        hidden_size: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        self.is_realtime = is_realtime
        self.hidden_size = hidden_size
        self.dtype = dtype
        self.device = device
        self.table = FeatureTable()

    def plan(
        self,
        mm_features: Mapping[str, Sequence[MultiModalFeature]],
        encoder_outputs: Mapping[str, torch.Tensor],
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 0,
        *,
        pool: EncoderOutputPool | None = None,
        validate: bool = False,
    ) -> MMGatherPlan:
        """Plan the gather of SPEC §3; raise like the gather would (G7, E2).

        The arguments are those of ``gather_mm_embeddings``; they are assumed to be
        consistent (the caller validates them when asked). Nothing passed in is changed.
        """
        num_reqs = len(req_ids)
        scheduled = num_scheduled_tokens[:num_reqs].astype(np.int64)
        window_start = num_computed_tokens[:num_reqs].astype(np.int64)
        window_start += draft_lookahead
        gathers = scheduled > 0
        if not self.is_realtime:
            gathers &= window_start < prefill_lens[:num_reqs]
        requests = np.flatnonzero(gathers)
        if requests.shape[0] == 0:
            return self._empty_plan(int(total_num_scheduled_tokens), pool, encoder_outputs)
        key_bases = self.table.key_bases(mm_features, req_ids, refresh=validate)[requests]
        starts = window_start[requests]
        counts = scheduled[requests]
        first_slots = query_start_loc[:num_reqs][requests].astype(np.int64)
        single = int(counts.max()) == 1
        if single:
            pairs = self._single_positions(requests, key_bases, starts, first_slots)
        else:
            pairs = self._windows(requests, key_bases, starts, starts + counts, first_slots)
        pairs, sources, ids = self._resolve(
            pairs, encoder_outputs, req_ids, num_computed_tokens, scheduled, validate
        )
        if single:  # one row per pair
            slots = pairs.slot_base + pairs.window_start
            row_piece = np.arange(slots.shape[0], dtype=np.int64)
            row_index = pairs.row_start
        else:
            slots, row_piece, row_index = self._positions(pairs)
        mask = np.zeros(int(total_num_scheduled_tokens), dtype=np.bool_)
        mask[slots] = True
        return MMGatherPlan(
            is_mm_embed=torch.from_numpy(mask),
            slots=slots,
            row_piece=row_piece,
            row_index=row_index,
            sources=sources,
            source_ids=ids,
            piece_start=pairs.row_start,
            piece_end=pairs.row_end,
            features=self.table.feature[pairs.feature],
            hidden_size=self.hidden_size,
            dtype=self.dtype,
            device=self.device,
            pool=pool,
            live=encoder_outputs,
        )

    # ------------------------------------------------------------------ pairs

    def _single_positions(
        self, requests: _I64, key_bases: _I64, positions: _I64, first_slots: _I64
    ) -> _Pairs:
        """Pairs for windows of exactly one position: at most one feature covers it."""
        table = self.table
        keys = key_bases + np.clip(positions, 0, MAX_POSITION)
        # The first feature that ends after the position covers it iff it starts at or before.
        entries = np.searchsorted(table.end_key, keys, side="right")
        hit = np.flatnonzero(table.start_key[entries] <= keys)
        entries = entries[hit]
        index = positions[hit] - table.start[entries]
        rows = index.copy()
        mask_base = table.mask_base[entries]
        masked = np.flatnonzero(mask_base >= 0)
        if masked.shape[0]:
            at = mask_base[masked] + index[masked]
            rows[masked] = table.prefix[at]
            embeds = np.ones(hit.shape[0], dtype=np.bool_)
            embeds[masked] = table.prefix[at + 1] > rows[masked]
            hit, entries, index, rows = hit[embeds], entries[embeds], index[embeds], rows[embeds]
        return _Pairs(
            requests[hit], entries, index, index + 1, rows, rows + 1, first_slots[hit] - index
        )

    def _windows(
        self, requests: _I64, key_bases: _I64, starts: _I64, ends: _I64, first_slots: _I64
    ) -> _Pairs:
        """Every (request, feature) pair whose window holds at least one embed position."""
        table = self.table
        first = np.searchsorted(
            table.end_key, key_bases + np.clip(starts, 0, MAX_POSITION), side="right"
        )
        last = np.searchsorted(
            table.start_key, key_bases + np.clip(ends, 0, MAX_POSITION + 1), side="left"
        )
        counts = np.maximum(last - first, 0)
        num_pairs = int(counts.sum())
        if num_pairs == 0:
            return _Pairs(_EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY)
        owner = np.repeat(np.arange(requests.shape[0]), counts)
        entries = np.arange(num_pairs, dtype=np.int64) + np.repeat(
            first - (np.cumsum(counts) - counts), counts
        )
        feature_start = table.start[entries]
        lo = np.maximum(starts[owner], feature_start) - feature_start
        hi = np.minimum(ends[owner], table.end[entries]) - feature_start
        row_start, row_end = lo.copy(), hi.copy()
        mask_base = table.mask_base[entries]
        masked = np.flatnonzero(mask_base >= 0)
        if masked.shape[0]:
            row_start[masked] = table.prefix[mask_base[masked] + lo[masked]]
            row_end[masked] = table.prefix[mask_base[masked] + hi[masked]]
        slot_base = first_slots[owner] + feature_start - starts[owner]
        pairs = _Pairs(requests[owner], entries, lo, hi, row_start, row_end, slot_base)
        needed = row_end > row_start
        return pairs if needed.all() else pairs.take(needed)

    def _resolve(
        self,
        pairs: _Pairs,
        encoder_outputs: Mapping[str, torch.Tensor],
        req_ids: list[str],
        num_computed_tokens: IntArray,
        scheduled: _I64,
        validate: bool,
    ) -> tuple[_Pairs, list[torch.Tensor], list[str]]:
        """Look up the pairs' outputs; drop look-ahead misses, raise for the others (G7)."""
        table = self.table
        ids: list[str] = table.identifier[pairs.feature].tolist()
        sources: list[torch.Tensor | None] = list(map(encoder_outputs.get, ids))
        found = np.fromiter(
            map(operator.is_not, sources, itertools.repeat(None)),
            dtype=np.bool_,
            count=len(sources),
        )
        if not found.all():
            missing = np.flatnonzero(~found)
            owners = pairs.request[missing]
            scheduled_end = num_computed_tokens[owners].astype(np.int64) + scheduled[owners]
            # A miss is tolerated only where the feature starts past the scheduled tokens:
            # such features are reached by the drafter's look-ahead alone.
            inside = np.flatnonzero(table.start[pairs.feature[missing]] < scheduled_end)
            if inside.shape[0]:
                k = int(missing[inside[0]])
                raise EncoderOutputMissingError(ids[k], req_ids[int(pairs.request[k])])
            pairs = pairs.take(found)
            sources = list(itertools.compress(sources, found))
            ids = list(itertools.compress(ids, found))
        outputs: list[torch.Tensor] = sources  # type: ignore[assignment]  # None removed above
        self._check_outputs(pairs, outputs, validate)
        return pairs, outputs, ids

    def _check_outputs(self, pairs: _Pairs, outputs: list[torch.Tensor], validate: bool) -> None:
        """Raise ``ValueError`` naming the identifier for an output of the wrong shape (E2).

        Row counts are always compared (a short output would otherwise be sliced
        short); validation also checks dimensions and hidden size.
        """
        suspects: list[int]
        if validate:
            suspects = list(range(len(outputs)))
        else:
            expected = self.table.num_embeds[pairs.feature]
            try:
                rows = np.fromiter(map(len, outputs), dtype=np.int64, count=len(outputs))
                suspects = np.flatnonzero(rows != expected).tolist()
            except TypeError:  # a 0-d tensor has no len(): check each one properly
                suspects = list(range(len(outputs)))
        features = self.table.feature
        hidden_size = self.hidden_size if validate else None
        for k in suspects:
            check_encoder_output(features[int(pairs.feature[k])], outputs[k], hidden_size)

    # ------------------------------------------------------------------ positions

    def _positions(self, pairs: _Pairs) -> tuple[_I64, _I64, _I64]:
        """Expand pairs into their embed positions: slot, pair and output row of each."""
        table = self.table
        counts = pairs.window_end - pairs.window_start
        owner = np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts)
        index = np.arange(owner.shape[0], dtype=np.int64) + np.repeat(
            pairs.window_start - (np.cumsum(counts) - counts), counts
        )
        slots = pairs.slot_base[owner] + index
        mask_base = table.mask_base[pairs.feature][owner]
        masked = np.flatnonzero(mask_base >= 0)
        if masked.shape[0] == 0:
            return slots, owner, index
        at = mask_base[masked] + index[masked]
        rows = index.copy()
        rows[masked] = table.prefix[at]
        embeds = np.ones(owner.shape[0], dtype=np.bool_)
        embeds[masked] = table.prefix[at + 1] > rows[masked]
        return slots[embeds], owner[embeds], rows[embeds]

    def _empty_plan(
        self,
        total: int,
        pool: EncoderOutputPool | None,
        encoder_outputs: Mapping[str, torch.Tensor],
    ) -> MMGatherPlan:
        return MMGatherPlan(
            is_mm_embed=torch.zeros(total, dtype=torch.bool),
            slots=_EMPTY,
            row_piece=_EMPTY,
            row_index=_EMPTY,
            sources=[],
            source_ids=[],
            piece_start=_EMPTY,
            piece_end=_EMPTY,
            features=[],
            hidden_size=self.hidden_size,
            dtype=self.dtype,
            device=self.device,
            pool=pool,
            live=encoder_outputs,
        )
