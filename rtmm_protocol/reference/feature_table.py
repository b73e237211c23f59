"""Every registered request's features as flat numpy arrays, kept up to date incrementally.

The gather plan looks features up for a whole batch with one ``np.searchsorted``. That
needs the features of all requests in sorted arrays, which this module maintains: each
request owns a *segment* of entries, and every entry's sort key carries the request's
key in its high bits (``key << 40 | position``). Segments are laid out in key order, so
the concatenation is sorted and one search over it answers "which features of request
``i`` overlap its window" for all requests at once.

The source of truth stays the encoder cache's ``mm_features`` dict, which engines and
tests may change directly. Each lookup therefore compares, for the requests asked about,
the list object and its length with what the table saw last (C-level ``map`` calls, a
few tens of nanoseconds per request) and re-syncs only the requests that changed: an
appended feature (a realtime stream growing) costs ``O(1)`` amortized, a replaced or
shortened list rebuilds that request's segment. The cache's own tracked lists
(:class:`~rtmm_protocol.encoder_cache.FeatureList`) also stamp every edit that is not an
append, so an item replaced in place (``features[k] = x``) rebuilds that segment too.
For a plain list assigned directly, edits that keep its identity and length (assigning
``features[k]``), and for any list a new ``mm_position`` on a registered feature, are
not visible; call :meth:`FeatureTable.forget` for that request. Validation mode rebuilds
every looked-up request on every call, so checked runs never miss them.

When ``mm_features`` is the cache's own :class:`~rtmm_protocol.encoder_cache.FeatureListDict`
holding only its tracked lists, even those per-request comparisons are skipped while the
dict's version and the batch are those of the previous lookup (any edit of the dict or
of one of its lists changes the version). Any other mapping gets the comparisons.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from rtmm_protocol.encoder_cache import FeatureListDict
from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.validation import check_feature_list

__all__ = ["MAX_POSITION", "FeatureTable"]

_POSITION_BITS = 40
# In-segment position of padding entries: above every real position, below the next key.
_PAD = (1 << _POSITION_BITS) - 1
#: Largest placeholder end a table accepts; a feature ending later is rejected by name.
MAX_POSITION = _PAD - 1
_MAX_KEY = (1 << (63 - _POSITION_BITS)) - 1
_SENTINEL = np.iinfo(np.int64).max
_NO_FEATURES: tuple[MultiModalFeature, ...] = ()
# Key 0 is an empty segment: requests without features (or unknown ones) point at it.
_EMPTY_KEY_BASE = 0
_COLUMNS = ("start", "end", "num_embeds", "mask_base", "identifier", "feature")


@dataclass
class _Segment:
    key_base: int
    base: int  # index of the segment's first entry
    capacity: int
    count: int
    features: Sequence[MultiModalFeature]  # the list object last synced
    last: MultiModalFeature | None  # its last element then, to recognise an append
    rewritten_at: int = 0  # the list's FeatureList.rewritten_at when synced


_Item = TypeVar("_Item", bound=np.generic)


def _grown(array: npt.NDArray[_Item], size: int, fill: float | None) -> npt.NDArray[_Item]:
    bigger = np.full(size, fill, dtype=array.dtype)
    bigger[: array.shape[0]] = array
    return bigger


class FeatureTable:
    """Flat, sorted feature arrays over all requests, synced lazily with ``mm_features``.

    Public arrays (index = entry; only the entries of live segments are meaningful):
    ``start_key``/``end_key`` (sort keys: key base plus offset/end; padding entries hold
    the key base plus a value above every position, entries past the end hold the int64
    maximum), ``start``/``end`` (placeholder positions), ``num_embeds``, ``mask_base``
    (``-1`` without ``is_embed``, else where the feature's embed-count prefix sums start
    in ``prefix``), and the object arrays ``identifier`` and ``feature``.
    ``prefix[mask_base + q]`` is the number of embed positions among placeholder
    indices ``[0, q)`` and ``embeds[mask_base + q]`` whether index ``q`` embeds.
    """

    def __init__(self, initial_capacity: int = 1024) -> None:
        #: Bumped whenever entries move (compaction), so remembered entry indices expire.
        self.generation = 0
        self._allocate(max(int(initial_capacity), 2))
        self.prefix = np.zeros(1024, dtype=np.int64)
        self.embeds = np.zeros(1024, dtype=np.bool_)
        self._prefix_used = 0
        self._next_key = 1
        self._segments: dict[str, _Segment] = {}
        self._live_entries = 1
        # Per request, for C-level ``map`` lookups when a new batch comes in.
        self._key_base_of: dict[str, int] = {}
        self._list_of: dict[str, Sequence[MultiModalFeature]] = {}
        self._count_of: dict[str, int] = {}
        # The last batch looked up, so that a repeated batch skips even those lookups.
        self._batch_ids: list[str] = []
        self._batch_lists: list[Sequence[MultiModalFeature]] = []
        self._batch_lens: list[int] = []
        self._batch_key_base = np.zeros(0, dtype=np.int64)
        # The versioned ``mm_features`` dict and its version when the batch memo was
        # last checked against it: while both hold, the batch's lists are unchanged.
        self._checked_dict: object = None
        self._checked_version = -1
        # ``rewrite_stamp`` of the mapping at the last lookup: while it holds, no tracked
        # list was edited in place other than by appends.
        self._checked_rewrite_stamp = 0

    def _allocate(self, size: int) -> None:
        self.start_key = np.full(size, _SENTINEL, dtype=np.int64)
        self.end_key = np.full(size, _SENTINEL, dtype=np.int64)
        self.start = np.zeros(size, dtype=np.int64)
        self.end = np.zeros(size, dtype=np.int64)
        self.num_embeds = np.zeros(size, dtype=np.int64)
        self.mask_base = np.full(size, -1, dtype=np.int64)
        self.identifier = np.full(size, None, dtype=object)
        self.feature = np.full(size, None, dtype=object)
        # Entry 0: the empty segment's padding.
        self.start_key[0] = self.end_key[0] = _EMPTY_KEY_BASE + _PAD
        self._used = 1
        self.generation += 1

    # ------------------------------------------------------------------ lookups

    @property
    def num_requests(self) -> int:
        """Requests that currently own a segment."""
        return len(self._segments)

    @property
    def has_masks(self) -> bool:
        """Whether any entry may have an ``is_embed`` mask (lets callers skip mask work)."""
        return self._prefix_used > 0

    @property
    def num_entries(self) -> int:
        """Entries in use, garbage from moved or dropped segments included."""
        return self._used

    def key_bases(
        self,
        mm_features: Mapping[str, Sequence[MultiModalFeature]],
        req_ids: list[str],
        *,
        refresh: bool = False,
    ) -> npt.NDArray[np.int64]:
        """Return each request's key base (``int64``), syncing the requests that changed.

        A request missing from ``mm_features`` gets the empty segment. ``refresh``
        rebuilds every named request from its list (validation mode uses it). Raises
        ``ValueError`` naming the identifier for unsorted or overlapping features. The
        returned array belongs to the table: read it, do not keep or modify it.
        """
        version = -1
        if type(mm_features) is FeatureListDict and mm_features.fully_tracked and not refresh:
            version = mm_features.version
            if (
                version == self._checked_version
                and mm_features is self._checked_dict
                and req_ids == self._batch_ids
            ):
                return self._batch_key_base
        rewrite_stamp = getattr(mm_features, "rewrite_stamp", 0)
        if rewrite_stamp != self._checked_rewrite_stamp:
            self._drop_rewritten()
            self._checked_rewrite_stamp = rewrite_stamp
        if len(self._segments) > 2 * len(mm_features) + 64:
            self._drop_unregistered(mm_features)
        if refresh:
            for req_id in req_ids:
                self.forget(req_id)
        if req_ids != self._batch_ids:
            self._load_batch(req_ids)
        lists = list(map(mm_features.get, req_ids, itertools.repeat(_NO_FEATURES)))
        lens = list(map(len, lists))
        if lens != self._batch_lens or not all(map(operator.is_, lists, self._batch_lists)):
            self._resync(req_ids, lists, lens)
        self._checked_dict, self._checked_version = mm_features, version
        return self._batch_key_base

    def segment_of(self, req_id: str) -> tuple[int, int] | None:
        """``(first entry, feature count)`` of a request's segment, or ``None``."""
        segment = self._segments.get(req_id)
        return None if segment is None else (segment.base, segment.count)

    def forget(self, req_id: str) -> None:
        """Drop ``req_id``'s segment; the next lookup rebuilds it from its list."""
        segment = self._segments.pop(req_id, None)
        if segment is not None:
            self._release(segment)
            del self._key_base_of[req_id], self._list_of[req_id], self._count_of[req_id]
        self._batch_ids = []  # the batch memo may name the dropped segment

    def _drop_rewritten(self) -> None:
        """Forget the segments of tracked lists edited other than by appends since synced."""
        for req_id, segment in list(self._segments.items()):
            if getattr(segment.features, "rewritten_at", 0) != segment.rewritten_at:
                self.forget(req_id)

    def _load_batch(self, req_ids: list[str]) -> None:
        self._batch_ids = list(req_ids)
        self._batch_lists = list(map(self._list_of.get, req_ids, itertools.repeat(_NO_FEATURES)))
        self._batch_lens = list(map(self._count_of.get, req_ids, itertools.repeat(0)))
        self._batch_key_base = np.fromiter(
            map(self._key_base_of.get, req_ids, itertools.repeat(_EMPTY_KEY_BASE)),
            dtype=np.int64,
            count=len(req_ids),
        )

    def _resync(
        self,
        req_ids: list[str],
        lists: list[Sequence[MultiModalFeature]],
        lens: list[int],
    ) -> None:
        same = np.fromiter(
            map(operator.is_, lists, self._batch_lists), dtype=np.bool_, count=len(lists)
        )
        grown = np.asarray(lens, dtype=np.int64) != np.asarray(self._batch_lens, dtype=np.int64)
        for index in np.flatnonzero(~same | grown).tolist():
            self._sync(req_ids[index], lists[index])
        # One reload covers every change, including a compaction's renumbering.
        self._load_batch(req_ids)

    def _sync(self, req_id: str, features: Sequence[MultiModalFeature]) -> None:
        """Bring ``req_id``'s segment in line with ``features``."""
        segment = self._segments.get(req_id)
        if features is _NO_FEATURES:
            self.forget(req_id)
            return
        count = len(features)
        if (
            segment is not None
            and segment.features is features
            and segment.count < count
            and (segment.count == 0 or features[segment.count - 1] is segment.last)
        ):
            self._append(req_id, segment, features)
        else:
            self.forget(req_id)
            check_feature_list(req_id, features)
            segment = self._new_segment(req_id, count + max(4, count // 4), features)
            self._write(segment, features)
        self._publish(req_id, self._segments[req_id])

    def _publish(self, req_id: str, segment: _Segment) -> None:
        self._key_base_of[req_id] = segment.key_base
        self._list_of[req_id] = segment.features
        self._count_of[req_id] = segment.count

    # ------------------------------------------------------------------ segment writes

    def _append(
        self, req_id: str, segment: _Segment, features: Sequence[MultiModalFeature]
    ) -> None:
        tail = features[segment.count :]
        check_feature_list(req_id, tail if segment.last is None else [segment.last, *tail])
        if len(features) > segment.capacity:
            # Move to the end with room to double; the old entries become garbage.
            old = segment
            segment = self._new_segment(req_id, 2 * len(features), features)
            self._copy_entries(old, segment)
            self._release(old)
        self._write(segment, tail)

    def _new_segment(
        self, req_id: str, capacity: int, features: Sequence[MultiModalFeature]
    ) -> _Segment:
        if self._next_key > _MAX_KEY or self._used + capacity > 2 * self._live_entries + 4096:
            self._compact()
        self._reserve(capacity + 1)  # + 1 keeps a sentinel after the last entry
        key_base = self._next_key << _POSITION_BITS
        self._next_key += 1
        segment = _Segment(
            key_base, self._used, capacity, 0, features, None, getattr(features, "rewritten_at", 0)
        )
        entries = slice(segment.base, segment.base + capacity)
        self.start_key[entries] = key_base + _PAD
        self.end_key[entries] = key_base + _PAD
        self._used += capacity
        self._live_entries += capacity
        self._segments[req_id] = segment
        return segment

    def _release(self, segment: _Segment) -> None:
        """Turn a segment into garbage, dropping its references to features (and their data)."""
        self._live_entries -= segment.capacity
        entries = slice(segment.base, segment.base + segment.count)
        self.identifier[entries] = None
        self.feature[entries] = None

    def _copy_entries(self, old: _Segment, new: _Segment) -> None:
        source = slice(old.base, old.base + old.count)
        target = slice(new.base, new.base + old.count)
        self.start_key[target] = self.start[source] + new.key_base
        self.end_key[target] = self.end[source] + new.key_base
        for name in _COLUMNS:
            column = getattr(self, name)
            column[target] = column[source]
        new.count = old.count
        new.last = old.last

    def _write(self, segment: _Segment, features: Sequence[MultiModalFeature]) -> None:
        """Fill the entries after the segment's last one from ``features``."""
        n = len(features)
        if n == 0:
            return
        starts = np.empty(n, dtype=np.int64)
        ends = np.empty(n, dtype=np.int64)
        embeds = np.empty(n, dtype=np.int64)
        mask_bases = np.full(n, -1, dtype=np.int64)
        for k, feature in enumerate(features):
            position = feature.mm_position
            end = position.offset + position.length
            if end > MAX_POSITION:
                raise ValueError(
                    f"feature {feature.identifier!r} ends at position {end}, beyond the "
                    f"largest position the gather supports ({MAX_POSITION})"
                )
            starts[k] = position.offset
            ends[k] = end
            if position.is_embed is None:
                embeds[k] = position.length
            else:
                prefix = position.embed_prefix()
                mask_bases[k] = self._store_prefix(prefix)
                embeds[k] = int(prefix[-1])
        entries = slice(segment.base + segment.count, segment.base + segment.count + n)
        self.start[entries] = starts
        self.end[entries] = ends
        self.start_key[entries] = starts + segment.key_base
        self.end_key[entries] = ends + segment.key_base
        self.num_embeds[entries] = embeds
        self.mask_base[entries] = mask_bases
        self.identifier[entries] = [f.identifier for f in features]
        feature_cells = self.feature[entries]
        for k, feature in enumerate(features):
            feature_cells[k] = feature
        segment.count += n
        segment.last = features[-1]

    def _store_prefix(self, prefix: npt.NDArray[np.int64]) -> int:
        base = self._prefix_used
        end = base + prefix.shape[0]
        if end > self.prefix.shape[0]:
            size = max(2 * self.prefix.shape[0], end)
            self.prefix = _grown(self.prefix, size, 0)
            self.embeds = _grown(self.embeds, size, False)
        self.prefix[base:end] = prefix
        self.embeds[base : end - 1] = prefix[1:] > prefix[:-1]
        self._prefix_used = end
        return base

    def _reserve(self, entries: int) -> None:
        needed = self._used + entries
        size = self.start_key.shape[0]
        if needed <= size:
            return
        size = max(2 * size, needed)
        self.start_key = _grown(self.start_key, size, _SENTINEL)
        self.end_key = _grown(self.end_key, size, _SENTINEL)
        for name, fill in zip(_COLUMNS, (0, 0, 0, -1, None, None), strict=True):
            setattr(self, name, _grown(getattr(self, name), size, fill))

    # ------------------------------------------------------------------ housekeeping

    def _drop_unregistered(self, mm_features: Mapping[str, Sequence[MultiModalFeature]]) -> None:
        for req_id in [r for r in self._segments if r not in mm_features]:
            self.forget(req_id)

    def _compact(self) -> None:
        """Rewrite the live segments at the front, renumbered from key 1, without garbage."""
        old = {name: getattr(self, name) for name in _COLUMNS}
        old_prefix = self.prefix[: self._prefix_used]
        segments = sorted(self._segments.items(), key=lambda item: item[1].base)
        self._allocate(max(1024, 2 * self._live_entries))
        self.prefix = np.zeros(max(1024, old_prefix.shape[0]), dtype=np.int64)
        self.embeds = np.zeros(self.prefix.shape[0], dtype=np.bool_)
        self._prefix_used = 0
        self._next_key = 1
        for req_id, segment in segments:
            source = slice(segment.base, segment.base + segment.count)
            key_base = self._next_key << _POSITION_BITS
            self._next_key += 1
            segment.key_base, segment.base = key_base, self._used
            target = slice(segment.base, segment.base + segment.count)
            for name in _COLUMNS:
                getattr(self, name)[target] = old[name][source]
            self.start_key[segment.base : segment.base + segment.capacity] = key_base + _PAD
            self.end_key[segment.base : segment.base + segment.capacity] = key_base + _PAD
            self.start_key[target] = self.start[target] + key_base
            self.end_key[target] = self.end[target] + key_base
            masked = np.flatnonzero(self.mask_base[target] >= 0)
            for entry in (masked + segment.base).tolist():
                length = int(self.end[entry] - self.start[entry]) + 1
                first = int(self.mask_base[entry])
                self.mask_base[entry] = self._store_prefix(old_prefix[first : first + length])
            self._used += segment.capacity
            self._publish(req_id, segment)
        self._batch_ids = []
