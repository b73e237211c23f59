"""Plans a gather (SPEC §3) for a whole batch with array operations.

No Python code runs per request or per feature on this path: a batch's windows are
matched against every request's features with one ``np.searchsorted`` over the
:class:`FeatureTable`, the (request, feature) pairs and then the positions are expanded
with ``np.repeat``, and the cached outputs are looked up with C-level ``map`` calls over
the pairs that need one. Windows of a single position (realtime decode: one token per
request) take a shorter route without the expansions. Each numpy call costs about a
microsecond whatever its size, so the code keeps their number small.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping, Sequence
from typing import cast

import numpy as np
import numpy.typing as npt
import torch

from rtmm_protocol.encoder_cache import VersionedDict
from rtmm_protocol.errors import EncoderOutputMissingError
from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.reference.feature_table import MAX_POSITION, FeatureTable
from rtmm_protocol.reference.gather_plan import MMGatherPlan
from rtmm_protocol.reference.output_pool import EncoderOutputPool
from rtmm_protocol.reference.pool_locator import PoolLocator
from rtmm_protocol.types import IntArray
from rtmm_protocol.validation import check_encoder_output

__all__ = ["GatherPlanner"]

_I64 = npt.NDArray[np.int64]
_EMPTY = np.zeros(0, dtype=np.int64)
_NO_OUTPUTS: npt.NDArray[np.object_] = np.zeros(0, dtype=object)
# numpy scalars: ufuncs convert Python ints on every call.
_ZERO = np.int64(0)
_MAX_POSITION = np.int64(MAX_POSITION)
_MAX_END = np.int64(MAX_POSITION + 1)
# Up to this size, reductions run faster in Python on the array's list than as numpy
# methods (about a microsecond of overhead each).
_SMALL = 48


def _all(flags: npt.NDArray[np.bool_]) -> bool:
    """Whether every flag is set, by the faster route for the size."""
    if flags.shape[0] <= _SMALL:
        return all(flags.tolist())
    return bool(flags.all())


def _any(flags: npt.NDArray[np.bool_]) -> bool:
    """Whether some flag is set, by the faster route for the size."""
    if flags.shape[0] <= _SMALL:
        return any(flags.tolist())
    return bool(flags.any())


def _bounds(values: IntArray) -> tuple[int, int]:
    """``(min, max)`` of a non-empty array, by the faster route for the size."""
    if values.shape[0] <= _SMALL:
        listed: list[int] = values.tolist()
        return min(listed), max(listed)
    return int(values.min()), int(values.max())


class _Pairs:
    """(request, feature) pairs that need rows, as parallel arrays.

    ``first_slot`` is the slot of the pair's first window position; ``window_start`` and
    ``window_end`` (placeholder indices, general windows only) bound its positions.
    """

    __slots__ = (
        "feature",
        "first_slot",
        "request",
        "row_end",
        "row_start",
        "window_end",
        "window_start",
    )

    def __init__(
        self,
        request: _I64,
        feature: _I64,
        row_start: _I64,
        row_end: _I64,
        first_slot: IntArray,
        window_start: _I64 | None = None,
        window_end: _I64 | None = None,
    ) -> None:
        self.request = request  # batch index
        self.feature = feature  # table entry
        self.row_start = row_start  # encoder-output rows used: [row_start, row_end)
        self.row_end = row_end
        self.first_slot = first_slot
        self.window_start = window_start
        self.window_end = window_end

    def take(self, keep: npt.NDArray[np.bool_]) -> _Pairs:
        return _Pairs(
            self.request[keep],
            self.feature[keep],
            self.row_start[keep],
            self.row_end[keep],
            self.first_slot[keep],
            None if self.window_start is None else self.window_start[keep],
            None if self.window_end is None else self.window_end[keep],
        )


class GatherPlanner:
    """Turns a batch into an :class:`MMGatherPlan`, keeping a :class:`FeatureTable` in sync.

    One planner serves one encoder cache (its table mirrors that cache's features).
    ``cursor_min_windows``: from this many single-position windows on, each request's
    last-found feature is checked first and the batch-wide search runs only for the
    windows it does not cover (below it, one search is cheaper than the checks).
    """

    def __init__(
        self,
        *,
        is_realtime: bool,
        hidden_size: int,
        dtype: torch.dtype,
        device: torch.device,
        cursor_min_windows: int = 64,
    ) -> None:
        self.is_realtime = is_realtime
        self.hidden_size = hidden_size
        self.dtype = dtype
        self.device = device
        self.table = FeatureTable()
        #: Where the table's outputs sit in the pool, remembered across steps.
        self.locator = PoolLocator()
        self.cursor_min_windows = cursor_min_windows
        # Per batch index, the table entry found for the request's last single-position
        # window: decode windows move one position a step, so it is usually still right.
        self._cursor = np.zeros(0, dtype=np.int64)
        self._cursor_start = np.zeros(0, dtype=np.int64)
        self._cursor_end = np.zeros(0, dtype=np.int64)
        self._cursor_generation = -1
        # Per table entry, the output a versioned ``encoder_outputs`` dict held for it
        # (``None``: none) and that dict's version then (negated when it held none);
        # valid while the version holds. Versions are positive.
        self._outputs: npt.NDArray[np.object_] = np.zeros(0, dtype=object)
        self._outputs_version = np.zeros(0, dtype=np.int64)
        self._range = np.arange(0, dtype=np.int64)
        self._outputs_dict: object = None
        # The last lookup: its entries, their outputs and whether each exists, and the
        # version it was made at (-1: none).
        self._last_entries = _EMPTY
        self._last_outputs = _NO_OUTPUTS
        self._last_found = np.zeros(0, dtype=np.bool_)
        self._last_version = -1
        # The entries given an output at version ``_filled_version``.
        self._filled: list[_I64] = []
        self._filled_version = -1
        self._outputs_generation = -1

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
        """Plan the gather of SPEC §3; raise for missing outputs like the gather (G7).

        The arguments are those of ``gather_mm_embeddings``, assumed consistent (the
        caller validates them when asked). Nothing passed in is changed. Output shapes
        are checked when the plan's rows or pieces are taken, or here when validating.
        """
        num_reqs = len(req_ids)
        total = int(total_num_scheduled_tokens)
        if num_reqs == 0:
            return self._plan(
                _empty_pairs(),
                [],
                [],
                np.zeros(total, dtype=np.bool_),
                _EMPTY,
                pool,
                encoder_outputs,
            )
        scheduled = num_scheduled_tokens[:num_reqs]
        starts = num_computed_tokens[:num_reqs].astype(np.int64)
        if draft_lookahead:
            starts += draft_lookahead
        first_slots = query_start_loc[:num_reqs]
        key_bases = self.table.key_bases(mm_features, req_ids, refresh=validate)
        fewest, most = _bounds(scheduled)
        single = most <= 1
        requests: _I64 | None = None  # None: every request gathers
        if not (single and fewest == 1 and self.is_realtime):
            gathers = scheduled > 0
            if not self.is_realtime:
                gathers &= starts < prefill_lens[:num_reqs]
            if not (single and _all(gathers)):
                requests = gathers.nonzero()[0]
                key_bases, starts, first_slots = (
                    key_bases[requests],
                    starts[requests],
                    first_slots[requests],
                )
        if single:
            pairs = self._single_positions(requests, num_reqs, key_bases, starts, first_slots)
        else:
            assert requests is not None
            ends = starts + scheduled[requests]
            pairs = self._windows(requests, key_bases, starts, ends, first_slots)
        pairs, sources, ids = self._resolve(
            pairs, encoder_outputs, req_ids, num_computed_tokens, scheduled
        )
        if validate:
            self._check_outputs(pairs, sources)
        if single:  # one row per pair
            slots = pairs.first_slot.astype(np.int64)
            mask = np.zeros(total, dtype=np.bool_)
            mask[slots] = True
        elif not self.table.has_masks:
            slots = _runs(pairs)
            if slots.shape[0] == total:  # every scheduled token takes a row
                mask = np.ones(total, dtype=np.bool_)
            else:
                mask = np.zeros(total, dtype=np.bool_)
                mask[slots] = True
        else:
            mask = self._mark(pairs, total)
            slots = mask.nonzero()[0]
        return self._plan(
            pairs, sources, ids, mask, slots, pool, encoder_outputs, single_rows=single
        )

    def _plan(
        self,
        pairs: _Pairs,
        sources: list[torch.Tensor],
        ids: list[str] | None,
        mask: npt.NDArray[np.bool_],
        slots: _I64,
        pool: EncoderOutputPool | None,
        encoder_outputs: Mapping[str, torch.Tensor],
        *,
        single_rows: bool = False,
    ) -> MMGatherPlan:
        return MMGatherPlan(
            is_mm_embed=torch.from_numpy(mask),
            slots=slots,
            sources=sources,
            source_ids=ids,
            entries=pairs.feature,
            row_start=pairs.row_start,
            row_end=pairs.row_end,
            table=self.table,
            hidden_size=self.hidden_size,
            dtype=self.dtype,
            device=self.device,
            pool=pool,
            live=encoder_outputs,
            locator=self.locator,
            single_rows=single_rows,
        )

    # ------------------------------------------------------------------ pairs

    def _single_positions(
        self,
        requests: _I64 | None,
        num_reqs: int,
        key_bases: _I64,
        positions: _I64,
        first_slots: IntArray,
    ) -> _Pairs:
        """Pairs for windows of exactly one position: at most one feature covers it."""
        table = self.table
        keys = key_bases + np.minimum(np.maximum(positions, _ZERO), _MAX_POSITION)
        entries, hit, start_keys = self._covering(keys, requests, num_reqs)
        every = _all(hit)
        if not every:
            entries, keys, first_slots = entries[hit], keys[hit], first_slots[hit]
            start_keys = start_keys[hit]
        # Placeholder index (the output row when there is no is_embed mask).
        rows = keys - start_keys
        if table.has_masks:
            mask_base = table.mask_base[entries]
            masked = mask_base >= 0
            if _any(masked):
                at = mask_base[masked] + rows[masked]
                embeds = np.ones(rows.shape[0], dtype=np.bool_)
                embeds[masked] = table.embeds[at]
                rows[masked] = table.prefix[at]
                if not _all(embeds):
                    hit[hit] = embeds
                    every = False
                    entries, rows, first_slots = entries[embeds], rows[embeds], first_slots[embeds]
        if every:
            batch_index = self._arange(num_reqs) if requests is None else requests
        else:
            batch_index = hit.nonzero()[0] if requests is None else requests[hit]
        return _Pairs(batch_index, entries, rows, rows + 1, first_slots)

    def _arange(self, size: int) -> _I64:
        """``np.arange(size)``, sliced from a kept array (read only)."""
        if self._range.shape[0] < size:
            self._range = np.arange(2 * size, dtype=np.int64)
        return self._range[:size]

    def _covering(
        self, keys: _I64, requests: _I64 | None, num_reqs: int
    ) -> tuple[_I64, npt.NDArray[np.bool_], _I64]:
        """Per key, the first entry ending after it, whether that entry covers it, and the
        entry's start key."""
        table = self.table
        if keys.shape[0] < self.cursor_min_windows:
            entries = table.end_key.searchsorted(keys, side="right")
            start_keys = table.start_key[entries]
            return entries, start_keys <= keys, start_keys
        if self._cursor.shape[0] != num_reqs or self._cursor_generation != table.generation:
            self._cursor = np.zeros(num_reqs, dtype=np.int64)
            self._cursor_start = table.start_key[self._cursor]
            self._cursor_end = table.end_key[self._cursor]
            self._cursor_generation = table.generation
        if requests is None:
            guess, start_keys, end_keys = self._cursor, self._cursor_start, self._cursor_end
        else:
            guess = self._cursor[requests]
            start_keys, end_keys = self._cursor_start[requests], self._cursor_end[requests]
        # The entry found last step, or the next one once the position has passed it. A
        # guess that covers its key is right (features do not overlap); a stale one (the
        # batch or the table changed) covers nothing, since keys carry the request. The
        # guesses' keys are kept next to them: the table itself is read only where a
        # guess moves, which keeps a large step's memory traffic small.
        moved = (end_keys <= keys).nonzero()[0]
        if moved.shape[0]:
            guess[moved] += 1
            start_keys[moved] = table.start_key[guess[moved]]
            end_keys[moved] = table.end_key[guess[moved]]
        hit = (start_keys <= keys) & (keys < end_keys)
        if not _all(hit):
            redo = (~hit).nonzero()[0]
            found = table.end_key.searchsorted(keys[redo], side="right")
            guess[redo] = found
            start_keys[redo] = table.start_key[found]
            end_keys[redo] = table.end_key[found]
            hit[redo] = start_keys[redo] <= keys[redo]
        # The returned entries go into the plan: the kept cursor must be another array.
        if requests is None:
            self._cursor = guess.copy()
        else:
            self._cursor[requests] = guess
            self._cursor_start[requests] = start_keys
            self._cursor_end[requests] = end_keys
        return guess, hit, start_keys

    def _windows(
        self,
        requests: _I64,
        key_bases: _I64,
        starts: _I64,
        ends: IntArray,
        first_slots: IntArray,
    ) -> _Pairs:
        """Every (request, feature) pair whose window holds at least one embed position."""
        table = self.table
        first = table.end_key.searchsorted(
            key_bases + np.minimum(np.maximum(starts, _ZERO), _MAX_POSITION), side="right"
        )
        last = table.start_key.searchsorted(
            key_bases + np.minimum(np.maximum(ends, _ZERO), _MAX_END)
        )
        counts = last - first
        np.maximum(counts, _ZERO, out=counts)
        runs_end = counts.cumsum()
        num_pairs = int(runs_end[-1]) if runs_end.shape[0] else 0
        if num_pairs == 0:
            return _empty_pairs()
        owner = np.repeat(self._arange(requests.shape[0]), counts)
        # Pair j of request i's run is entry first_i + (j - pairs before request i).
        entries = self._arange(num_pairs) + np.repeat(first - runs_end + counts, counts)
        request_start = starts[owner]
        feature_start = table.start[entries]
        window_start = np.maximum(request_start, feature_start)
        first_slot = np.repeat(first_slots - starts, counts) + window_start
        window_start -= feature_start
        window_end = np.minimum(ends[owner], table.end[entries]) - feature_start
        row_start, row_end = window_start, window_end
        if table.has_masks:
            mask_base = table.mask_base[entries]
            masked = mask_base >= 0
            if _any(masked):
                row_start, row_end = window_start.copy(), window_end.copy()
                row_start[masked] = table.prefix[mask_base[masked] + window_start[masked]]
                row_end[masked] = table.prefix[mask_base[masked] + window_end[masked]]
        pairs = _Pairs(
            requests[owner], entries, row_start, row_end, first_slot, window_start, window_end
        )
        needed = row_end > row_start
        return pairs if _all(needed) else pairs.take(needed)

    def _resolve(
        self,
        pairs: _Pairs,
        encoder_outputs: Mapping[str, torch.Tensor],
        req_ids: list[str],
        num_computed_tokens: IntArray,
        scheduled: IntArray,
    ) -> tuple[_Pairs, list[torch.Tensor], list[str] | None]:
        """Look up the pairs' outputs; drop look-ahead misses, raise for the others (G7).

        Returns the kept pairs, their outputs and, when at hand, their identifiers.
        """
        table = self.table
        ids: list[str] | None = None  # the plan derives them from the entries when needed
        sources: list[torch.Tensor | None]
        found: npt.NDArray[np.bool_] | None = None  # None: every output was found
        if type(encoder_outputs) is VersionedDict:
            sources, found = self._remembered_outputs(encoder_outputs, pairs.feature)
        else:
            names: list[str] = table.identifier[pairs.feature].tolist()
            ids = names
            sources = list(map(encoder_outputs.get, names))
            if not all(map(operator.is_not, sources, itertools.repeat(None))):
                found = np.fromiter(
                    map(operator.is_not, sources, itertools.repeat(None)),
                    dtype=np.bool_,
                    count=len(sources),
                )
        if found is not None:
            names = table.identifier[pairs.feature].tolist() if ids is None else ids
            missing = (~found).nonzero()[0]
            owners = pairs.request[missing]
            scheduled_end = num_computed_tokens[owners].astype(np.int64) + scheduled[owners]
            # A miss is tolerated only where the feature starts past the scheduled tokens:
            # such features are reached by the drafter's look-ahead alone.
            inside = (table.start[pairs.feature[missing]] < scheduled_end).nonzero()[0]
            if inside.shape[0]:
                k = int(missing[inside[0]])
                raise EncoderOutputMissingError(names[k], req_ids[int(pairs.request[k])])
            pairs = pairs.take(found)
            sources = list(itertools.compress(sources, found))
            ids = list(itertools.compress(names, found))
        return pairs, cast(list[torch.Tensor], sources), ids  # the None entries were dropped

    def _remembered_outputs(
        self, encoder_outputs: VersionedDict[str, torch.Tensor], entries: _I64
    ) -> tuple[list[torch.Tensor | None], npt.NDArray[np.bool_] | None]:
        """``encoder_outputs.get`` of each entry's identifier, read only where it may differ.

        An entry's remembered output is reused while the dict's version is the one it
        was read at: no mutation since means the same lookup would give the same object.
        Also returns which entries have an output (``None`` when all do).
        """
        table = self.table
        size = table.start_key.shape[0]
        if (
            self._outputs_dict is not encoder_outputs
            or self._outputs_generation != table.generation
            or self._outputs.shape[0] < size
        ):
            # Entries are renumbered by a compaction; a new dict shares no versions.
            self._outputs = np.full(size, None, dtype=object)
            self._outputs_version = np.zeros(size, dtype=np.int64)
            self._outputs_dict, self._outputs_generation = encoder_outputs, table.generation
            self._last_version = -1
            self._filled = []
        version = encoder_outputs.version
        if version != self._filled_version:
            # Outputs remembered at an older version are never used again: let go of them,
            # so that a freed output is not kept alive here.
            if self._filled:
                self._outputs[np.concatenate(self._filled)] = None
                self._filled = []
            self._last_outputs = _NO_OUTPUTS
            self._filled_version = version
        last = self._last_entries
        if (
            self._last_version == version
            and last.shape[0] == entries.shape[0]
            and entries.shape[0] > _SMALL
        ):
            # Consecutive decode steps mostly ask for the entries of the step before, in
            # the same order: those come from this small array, not the table-sized ones
            # (whose scattered reads cost most of a large step when the caches are cold).
            same = last == entries
            if _all(same):
                outputs, found = self._last_outputs, self._last_found
            else:
                changed = (~same).nonzero()[0]
                outputs, found = self._last_outputs.copy(), self._last_found.copy()
                outputs[changed], found[changed] = self._outputs_of(
                    encoder_outputs, entries[changed], version
                )
        else:
            outputs, found = self._outputs_of(encoder_outputs, entries, version)
        self._last_entries, self._last_outputs, self._last_found = entries, outputs, found
        self._last_version = version
        remembered: list[torch.Tensor | None] = outputs.tolist()
        return remembered, None if _all(found) else found

    def _outputs_of(
        self, encoder_outputs: VersionedDict[str, torch.Tensor], entries: _I64, version: int
    ) -> tuple[npt.NDArray[np.object_], npt.NDArray[np.bool_]]:
        """The outputs of ``entries`` (object array) and which exist, via the table memo."""
        table = self.table
        # An entry read at this version holds it if an output was found, else its negative.
        seen = self._outputs_version[entries]
        found: npt.NDArray[np.bool_] = seen == version
        if _all(found):
            return self._outputs[entries], found
        stale = (~found & (seen != -version)).nonzero()[0]
        if stale.shape[0]:
            stale_entries = entries[stale]
            count = stale.shape[0]
            outputs = list(map(encoder_outputs.get, table.identifier[stale_entries].tolist()))
            self._outputs[stale_entries] = np.fromiter(outputs, dtype=object, count=count)
            found_now = np.fromiter(
                map(operator.is_not, outputs, itertools.repeat(None)), dtype=np.bool_, count=count
            )
            self._outputs_version[stale_entries] = np.where(found_now, version, -version)
            self._filled.append(stale_entries)
            found = self._outputs_version[entries] == version
        return self._outputs[entries], found

    def _check_outputs(self, pairs: _Pairs, outputs: list[torch.Tensor]) -> None:
        """Validation: raise ``ValueError`` naming the identifier for a mis-shaped output."""
        features = self.table.feature[pairs.feature].tolist()
        for feature, output in zip(features, outputs, strict=True):
            check_encoder_output(feature, output, self.hidden_size)

    # ------------------------------------------------------------------ mask

    def _mark(self, pairs: _Pairs, total: int) -> npt.NDArray[np.bool_]:
        """The mask over ``total`` slots for pairs of general windows.

        A window without ``is_embed`` mask sets a run of slots: +1 at its first slot,
        -1 after its last, and a running sum (windows do not overlap) gives the mask with
        no per-position work. Windows of masked features copy their flags position by
        position.
        """
        table = self.table
        assert pairs.window_start is not None
        assert pairs.window_end is not None
        length = pairs.window_end - pairs.window_start
        first, length_plain = pairs.first_slot, length
        masked, mask_base = _EMPTY, _EMPTY
        if table.has_masks:
            mask_base = table.mask_base[pairs.feature]
            plain = mask_base < 0
            if not _all(plain):
                first, length_plain = first[plain], length[plain]
                masked = (~plain).nonzero()[0]
        marks = np.zeros(total + 1, dtype=np.int8)
        marks[first] = 1
        marks[first + length_plain] -= 1
        mask = np.cumsum(marks[:total], dtype=np.int8).view(np.bool_)
        if masked.shape[0]:
            counts = length[masked]
            offset = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(
                np.cumsum(counts) - counts, counts
            )
            flags = np.repeat(mask_base[masked] + pairs.window_start[masked], counts) + offset
            slots = np.repeat(pairs.first_slot[masked], counts) + offset
            mask[slots] = table.embeds[flags]
        return mask


def _runs(pairs: _Pairs) -> _I64:
    """The slots of pairs without ``is_embed`` masks: each fills a run from its first slot.

    Pairs come in slot order and do not overlap, so the runs' concatenation is
    increasing: slot ``j`` is its pair's first slot plus ``j`` minus the rows before it.
    """
    counts = pairs.row_end - pairs.row_start
    total = int(counts.sum())
    before = counts.cumsum() - counts
    slots: _I64 = np.arange(total, dtype=np.int64) + np.repeat(pairs.first_slot - before, counts)
    return slots


def _empty_pairs() -> _Pairs:
    return _Pairs(_EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY)
