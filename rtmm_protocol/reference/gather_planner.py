"""Plans a gather (SPEC G1-G10) for a whole batch with array operations.

No Python code runs per request or per feature on this path: the batch's windows are
matched against every request's features with ``np.searchsorted`` over the
:class:`FeatureTable`, (request, feature) pairs and positions are expanded with
``np.repeat``, and the cached outputs are looked up with C-level ``map`` calls over the
pairs that need one. Windows of a single position (realtime decode) take a shorter route.

Before trusting the table for a step, the planner checks that the list items around
each window are the objects the table was built from (SPEC C2): in a sorted,
non-overlapping list the features a window overlaps form an index range ``[lo, hi)``,
and any item replaced in place that changes what the window sees sits in
``[lo - 1, hi]``; the neighbours ``lo - 1`` and ``hi`` matter only where the window
reaches past the features it overlaps (an unchanged feature covering a position leaves
no room for another). A request that fails the check is rebuilt from its list, so an
item replaced in place never gives a stale answer.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping, Sequence
from typing import NamedTuple, cast

import numpy as np
import numpy.typing as npt
import torch

from rtmm_protocol.errors import EncoderOutputMissingError
from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.reference.feature_table import FeatureTable
from rtmm_protocol.reference.gather_plan import MMGatherPlan
from rtmm_protocol.reference.output_arena import EncoderOutputArena
from rtmm_protocol.validation import CheckedBatch, check_encoder_output

__all__ = ["GatherPlanner"]

_I64 = npt.NDArray[np.int64]
_BOOL = npt.NDArray[np.bool_]
_EMPTY = np.zeros(0, dtype=np.int64)
_NONE_KEY = id(None)
_HINT_MIN = 256  # smaller batches search directly: a small table is as quick to search


class _Pairs(NamedTuple):
    """(request, feature) pairs that need rows, as parallel arrays."""

    request: _I64  # batch index
    entry: _I64  # table entry
    row_start: _I64  # encoder-output rows used: [row_start, row_end)
    row_end: _I64
    first_slot: _I64  # slot of the pair's first window position
    window_start: _I64  # placeholder indices of the window: [window_start, window_end)
    window_end: _I64

    def take(self, keep: _BOOL | _I64) -> _Pairs:
        return _Pairs(*(column[keep] for column in self))


_NO_PAIRS = _Pairs(*([_EMPTY] * 7))


class GatherPlanner:
    """Turns a batch into an :class:`MMGatherPlan`, keeping a :class:`FeatureTable` in sync.

    One planner serves one encoder cache; ``arena`` is where :meth:`MMGatherPlan.rows`
    reads the outputs from.
    """

    def __init__(self, *, is_realtime: bool, arena: EncoderOutputArena) -> None:
        self.is_realtime = is_realtime
        self.arena = arena
        self.table = FeatureTable()
        # Per request of the batch _hint_ids, its entry in the last single-position plan.
        self._hint_ids: list[str] | None = None
        self._hint, self._hint_size = _EMPTY, 0  # and the table size it was found in

    def plan(
        self,
        mm_features: Mapping[str, Sequence[MultiModalFeature]],
        encoder_outputs: Mapping[str, torch.Tensor],
        req_ids: list[str],
        batch: CheckedBatch,
        *,
        validate: bool = False,
    ) -> MMGatherPlan:
        """Plan the gather of SPEC G1-G10; raise for missing outputs like the gather (G7).

        ``batch`` holds the call's arrays as :func:`~rtmm_protocol.validation.check_batch`
        returned them: consistent, ``int64``, every window within the supported
        positions. Nothing passed in is changed, and nothing is kept from a call that
        raises except what a later call would rebuild anyway (the feature table's
        segments of requests whose lists were read).
        """
        num_reqs = batch.num_reqs
        scheduled = batch.num_scheduled_tokens
        starts = batch.window_starts
        if self.is_realtime and batch.min_scheduled > 0:  # every request gathers (G3)
            requests = np.arange(num_reqs, dtype=np.int64)
        else:
            gathers = scheduled > 0
            if not self.is_realtime:
                gathers &= starts < batch.prefill_lens
            requests = np.flatnonzero(gathers)
        single = num_reqs > 0 and batch.max_scheduled <= 1
        if requests.shape[0] == 0:
            pairs = _NO_PAIRS
        else:
            first_slots = batch.query_start_loc[requests] - starts[requests]
            pairs = self._pairs(
                mm_features, req_ids, requests, starts[requests], scheduled, first_slots, single
            )
        needed = pairs.row_end > pairs.row_start
        if not needed.all():
            pairs = pairs.take(needed)
        pairs, sources, names, keys = self._resolve(
            pairs, encoder_outputs, req_ids, batch.num_computed_tokens, scheduled
        )
        features = cast(list[MultiModalFeature], self.table.feature[pairs.entry].tolist())
        if validate:
            device = self.arena.storage.device
            for feature, source in zip(features, sources, strict=True):
                check_encoder_output(feature, source, self.arena.hidden_size, device=device)
        mask, slots = self._mask(pairs, batch.total, single)
        return MMGatherPlan(
            is_mm_embed=mask,
            slots=slots,
            sources=sources,
            source_keys=keys,
            identifiers=names,
            features=features,
            row_start=pairs.row_start,
            row_end=pairs.row_end,
            num_embeds=self.table.num_embeds[pairs.entry],
            arena=self.arena,
            single_rows=single,
        )

    def _pairs(
        self,
        mm_features: Mapping[str, Sequence[MultiModalFeature]],
        req_ids: list[str],
        requests: _I64,
        starts: _I64,
        scheduled: _I64,
        first_slots: _I64,
        single: bool,
    ) -> _Pairs:
        """Every (request, feature) pair of the gathering ``requests`` with a window overlap."""
        table = self.table
        ends = starts + scheduled[requests]
        for _ in range(2):
            lists = table.lookup(mm_features, req_ids)
            key_base = table.batch_key_base[requests]
            # check_batch bounds every window by MAX_POSITION + 1, and a gathering
            # window holds a position: its keys stay inside the request's key range.
            keys = key_base + starts
            # A neighbour matters only where the window reaches past the features it
            # overlaps: an unchanged feature covering a position blocks every other one.
            every = False
            if single:
                first, hit = self._single_entries(keys, requests, req_ids)
                every = bool(hit.all())  # each window inside a feature: one item to check
                last, left, right = first + hit, first if every else first - ~hit, first
            else:
                first = table.end_key.searchsorted(keys, side="right")
                last = table.start_key.searchsorted(key_base + ends)
                empty = first == last
                left = first - (empty | (table.start[first] > starts))
                right = last - 1 + (empty | (table.end[last - 1] < ends))
            changed = table.changed_items(lists, requests, left, right, inside=every)
            if changed.shape[0] == 0:
                break
            for index in changed.tolist():
                table.forget(req_ids[index])
        else:  # pragma: no cover - a rebuilt request holds exactly its list's items
            raise RuntimeError("the feature table does not match the cache after a rebuild")
        counts = last - first
        owner: _I64 | slice
        if single:  # at most one feature per window
            owner = slice(None) if every else np.flatnonzero(counts)
            entries = first[owner]
        else:
            owner = np.repeat(np.arange(requests.shape[0]), counts)
            entries = np.arange(owner.shape[0], dtype=np.int64)
            entries += np.repeat(first - (np.cumsum(counts) - counts), counts)
        feature_start = table.start[entries]
        window_start = np.maximum(starts[owner], feature_start) - feature_start
        window_end = np.minimum(ends[owner], table.end[entries]) - feature_start
        row_start, row_end = window_start, window_end
        if table.has_masks:
            mask_base = table.mask_base[entries]
            masked = np.flatnonzero(mask_base >= 0)
            if masked.shape[0]:
                row_start, row_end = window_start.copy(), window_end.copy()
                row_start[masked] = table.prefix[mask_base[masked] + window_start[masked]]
                row_end[masked] = table.prefix[mask_base[masked] + window_end[masked]]
        first_slot = first_slots[owner] + feature_start + window_start
        return _Pairs(
            requests[owner], entries, row_start, row_end, first_slot, window_start, window_end
        )

    def _single_entries(self, keys: _I64, requests: _I64, req_ids: list[str]) -> tuple[_I64, _BOOL]:
        """``end_key.searchsorted(keys, "right")`` and whether each key lies in that entry.

        Decode windows mostly stay in last step's feature or enter the next one, so large
        batches try those entries first and search for the rest. An entry whose key range
        holds the key is the search's answer (sorted keys, no two ranges overlap).
        """
        table = self.table
        start_key, end_key = table.start_key, table.end_key
        if requests.shape[0] < _HINT_MIN:
            first = end_key.searchsorted(keys, side="right")
            return first, start_key[first] <= keys
        if req_ids != self._hint_ids or self._hint_size != end_key.shape[0]:
            self._hint_ids, self._hint_size = list(req_ids), end_key.shape[0]
            self._hint = np.zeros(len(req_ids), dtype=np.int64)  # entry 0 holds no key
        first = self._hint[requests]
        hit = (start_key[first] <= keys) & (keys < end_key[first])
        if not hit.all():  # a window that left its feature is mostly in the next one
            miss = np.flatnonzero(~hit)
            near, missed = np.minimum(first[miss] + 1, end_key.shape[0] - 1), keys[miss]
            inside = (start_key[near] <= missed) & (missed < end_key[near])
            far = np.flatnonzero(~inside)
            if far.shape[0]:
                near[far] = end_key.searchsorted(missed[far], side="right")
                inside[far] = start_key[near[far]] <= missed[far]
            first[miss], hit[miss] = near, inside
        self._hint[requests] = first
        return first, hit

    def _resolve(
        self,
        pairs: _Pairs,
        encoder_outputs: Mapping[str, torch.Tensor],
        req_ids: list[str],
        num_computed_tokens: _I64,
        scheduled: _I64,
    ) -> tuple[_Pairs, list[torch.Tensor], list[str], list[int]]:
        """Look up the pairs' outputs; drop look-ahead misses, raise for the others (G7).

        Returns the kept pairs, their outputs, identifiers and outputs' ``id`` (the
        arena's key; a miss shows as ``id(None)``, cheaper to find than comparing
        tensors with ``None``).
        """
        names: list[str] = self.table.identifier[pairs.entry].tolist()
        sources = list(map(encoder_outputs.get, names))
        keys = list(map(id, sources))
        if _NONE_KEY not in keys:
            return pairs, cast(list[torch.Tensor], sources), names, keys
        found = np.fromiter(
            map(operator.ne, keys, itertools.repeat(_NONE_KEY)), np.bool_, len(keys)
        )
        missing = np.flatnonzero(~found)
        owners = pairs.request[missing]
        scheduled_end = num_computed_tokens[owners] + scheduled[owners]
        # A miss is tolerated only where the feature starts past the scheduled tokens:
        # such features are reached by the drafter's look-ahead alone.
        inside = np.flatnonzero(self.table.start[pairs.entry[missing]] < scheduled_end)
        if inside.shape[0]:
            k = int(missing[inside[0]])
            raise EncoderOutputMissingError(names[k], req_ids[int(pairs.request[k])])
        kept = cast(list[torch.Tensor], list(itertools.compress(sources, found)))
        names, keys = list(itertools.compress(names, found)), list(itertools.compress(keys, found))
        return pairs.take(found), kept, names, keys

    def _mask(self, pairs: _Pairs, total: int, single: bool) -> tuple[_BOOL, _I64]:
        """The G4 mask over ``total`` slots and its True slots, increasing."""
        table = self.table
        mask = np.zeros(total, dtype=np.bool_)
        if single:  # one row per pair, at its first slot
            mask[pairs.first_slot] = True
            return mask, pairs.first_slot
        length = pairs.window_end - pairs.window_start
        plain = table.mask_base[pairs.entry] < 0 if table.has_masks else None
        # Each window without is_embed fills a run of slots: +1 at its first slot and -1
        # after its last, then a running sum (windows do not overlap).
        first, run = pairs.first_slot, length
        if plain is not None:
            first, run = first[plain], run[plain]
        marks = np.zeros(total + 1, dtype=np.int8)
        marks[first] = 1
        marks[first + run] -= 1
        mask = np.cumsum(marks[:total], dtype=np.int8).view(np.bool_)
        if plain is not None and not plain.all():  # masked windows copy their flags
            masked = np.flatnonzero(~plain)
            counts = length[masked]
            offset = np.arange(int(counts.sum()), dtype=np.int64)
            offset -= np.repeat(np.cumsum(counts) - counts, counts)
            base = table.mask_base[pairs.entry[masked]] + pairs.window_start[masked]
            flags = table.embeds[np.repeat(base, counts) + offset]
            mask[np.repeat(pairs.first_slot[masked], counts) + offset] = flags
        return mask, np.flatnonzero(mask)
