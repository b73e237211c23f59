"""Every request's features as flat sorted arrays, so one search serves a whole batch.

Each request owns a *segment* of entries; an entry's sort key is the segment's key in
the high bits plus a position (``key << 40 | position``). Segments are laid out in key
order, so the concatenation is sorted and ``np.searchsorted`` answers "which features
of request ``i`` overlap its window" for every request of a batch at once.

The encoder cache's ``mm_features`` stays the source of truth, and engines change it
only in the ways SPEC C1 lists. Each lookup compares, for the batch's requests, the list
object and its length with what the table saw last: a longer list (appended features)
extends the segment, any other difference rebuilds it. Items replaced in place are
caught by :meth:`FeatureTable.changed_items`, which the planner runs over the entries a
step's windows touch.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.validation import MAX_POSITION, check_feature_list

__all__ = ["MAX_POSITION", "FeatureTable"]

_I64 = npt.NDArray[np.int64]
_Lists = list[Sequence[MultiModalFeature]]
_POSITION_BITS = 40
# In-segment position of padding entries: above every real position, below the next key.
_PAD = (1 << _POSITION_BITS) - 1
# The contract's largest position fits below the padding value.
assert MAX_POSITION == _PAD - 1
_MAX_KEY = (1 << (63 - _POSITION_BITS)) - 1
_SENTINEL = np.iinfo(np.int64).max
_NONE: tuple[MultiModalFeature, ...] = ()
_COLUMNS = ("start", "end", "num_embeds", "mask_base", "identifier", "feature")


@dataclass
class _Segment:
    key_base: int
    base: int  # first entry
    capacity: int
    features: Sequence[MultiModalFeature]  # the list object last synced
    count: int = 0


class FeatureTable:
    """Flat feature arrays over all requests, synced with ``mm_features`` per batch.

    Arrays, indexed by entry: ``start_key``/``end_key`` (sort keys; padding entries
    hold the key base plus a value above every position, entries past the end the
    int64 maximum), ``start``/``end`` (placeholder positions), ``num_embeds``,
    ``mask_base`` (``-1`` without ``is_embed``, else where the feature's embed-count
    prefix sums start in ``prefix``), ``identifier`` and ``feature`` (the objects, for
    identity checks).
    ``prefix[mask_base + q]`` counts the embed positions among placeholder indices
    ``[0, q)``; ``embeds[mask_base + q]`` says whether index ``q`` embeds.
    """

    def __init__(self, capacity: int = 1024) -> None:
        self._allocate(max(capacity, 2))
        self.prefix = np.zeros(1024, dtype=np.int64)
        self.embeds = np.zeros(1024, dtype=np.bool_)
        self._prefix_used = 0
        self._next_key = 1
        self._live = 1
        self._segments: dict[str, _Segment] = {}
        # The batch of the last lookup, per batch index.
        self._batch_ids: list[str] | None = None
        self._batch_lists: _Lists = []
        self._batch_lens: list[int] = []
        self.batch_key_base: _I64 = np.zeros(0, dtype=np.int64)
        self.batch_base: _I64 = np.zeros(0, dtype=np.int64)
        self._batch_counts: _I64 = np.zeros(0, dtype=np.int64)

    def _allocate(self, size: int) -> None:
        self.start_key = np.full(size, _SENTINEL, dtype=np.int64)
        self.end_key = np.full(size, _SENTINEL, dtype=np.int64)
        self.start = np.zeros(size, dtype=np.int64)
        self.end = np.zeros(size, dtype=np.int64)
        self.num_embeds = np.zeros(size, dtype=np.int64)
        self.mask_base = np.full(size, -1, dtype=np.int64)
        self.identifier = np.full(size, None, dtype=object)
        self.feature = np.full(size, None, dtype=object)
        # Entry 0 is the empty segment (key 0) that requests without features point at.
        self.start_key[0] = self.end_key[0] = _PAD
        self._used = 1

    @property
    def has_masks(self) -> bool:
        """Whether any entry may have an ``is_embed`` mask (lets callers skip mask work)."""
        return self._prefix_used > 0

    def lookup(
        self, mm_features: Mapping[str, Sequence[MultiModalFeature]], req_ids: list[str]
    ) -> _Lists:
        """Sync the batch's requests; return their feature lists, in batch order.

        Afterwards :attr:`batch_key_base` and :attr:`batch_base` hold each request's key
        base and first entry. A request missing from ``mm_features`` has no features.
        Raises ``ValueError`` naming the identifier for unsorted or overlapping features.
        """
        if len(self._segments) > 2 * len(mm_features) + 8:  # requests gone from the cache
            for req_id in [r for r in self._segments if r not in mm_features]:
                self.forget(req_id)
        if req_ids != self._batch_ids:
            self._load_batch(req_ids)
        lists = list(map(mm_features.get, req_ids, itertools.repeat(_NONE)))
        lens = list(map(len, lists))
        if lens != self._batch_lens or not all(map(operator.is_, lists, self._batch_lists)):
            same = map(operator.is_, lists, self._batch_lists)
            kept = np.fromiter(same, dtype=np.bool_, count=len(lists))
            kept &= np.asarray(lens) == np.asarray(self._batch_lens)
            for i in np.flatnonzero(~kept).tolist():
                self._sync(req_ids[i], lists[i])
            self._load_batch(req_ids)
        return lists

    def segment_of(self, req_id: str) -> tuple[int, int] | None:
        """``(first entry, feature count)`` of a request's segment, or ``None``."""
        segment = self._segments.get(req_id)
        return None if segment is None else (segment.base, segment.count)

    def forget(self, req_id: str) -> None:
        """Drop ``req_id``'s segment; the next lookup rebuilds it from its list."""
        segment = self._segments.pop(req_id, None)
        if segment is not None:
            self._live -= segment.capacity
            self.feature[segment.base : segment.base + segment.count] = None
        self._batch_ids = None

    def changed_items(
        self, lists: _Lists, requests: _I64, first: _I64, last: _I64, *, inside: bool = False
    ) -> _I64:
        """Those of ``requests`` whose list items at entries ``[first, last]`` changed.

        ``lists`` are the batch's lists as :meth:`lookup` returned them; ``requests`` are
        batch indices, with ``first`` and ``last`` (inclusive) clipped to each segment
        here (``inside``: they are equal and within the segments already). An item counts
        as changed when it is not the object synced into the table.
        """
        if not inside:
            base = self.batch_base[requests]
            first = np.maximum(first, base)
            last = np.minimum(last, base + self._batch_counts[requests] - 1)
            inside = bool((last == first).all())
        if inside and requests.shape[0] == len(lists):
            # Every request checks one item (decode windows inside a feature).
            owners, entries, owner_lists = requests, first, lists
        else:
            counts = np.maximum(last - first + 1, 0)
            owners = np.repeat(requests, counts)
            entries = np.arange(owners.shape[0], dtype=np.int64)
            entries += np.repeat(first - (np.cumsum(counts) - counts), counts)
            owner_lists = np.fromiter(lists, dtype=object, count=len(lists))[owners].tolist()
        indices = (entries - self.batch_base[owners]).tolist()
        synced = self.feature[entries].tolist()
        if all(map(operator.is_, map(operator.getitem, owner_lists, indices), synced)):
            return np.zeros(0, dtype=np.int64)
        found = map(operator.getitem, owner_lists, indices)
        differs = np.fromiter(map(operator.is_not, found, synced), np.bool_, len(synced))
        return np.unique(owners[differs])

    # ------------------------------------------------------------------ syncing

    def _load_batch(self, req_ids: list[str]) -> None:
        segments = list(map(self._segments.get, req_ids))
        self._batch_ids = list(req_ids)
        self._batch_lists = [_NONE if s is None else s.features for s in segments]
        self._batch_lens = [0 if s is None else s.count for s in segments]
        self.batch_key_base = np.array([0 if s is None else s.key_base for s in segments], np.int64)
        self.batch_base = np.array([0 if s is None else s.base for s in segments], np.int64)
        self._batch_counts = np.array(self._batch_lens, dtype=np.int64)

    def _sync(self, req_id: str, features: Sequence[MultiModalFeature]) -> None:
        segment = self._segments.get(req_id)
        if (
            segment is not None
            and segment.features is features
            and segment.count < len(features)
            # Appended to, not rewritten: the last synced item is still in its place.
            and (
                segment.count == 0
                or features[segment.count - 1] is self.feature[segment.base + segment.count - 1]
            )
        ):
            tail = features[segment.count :]
            check_feature_list(req_id, features[max(segment.count - 1, 0) :])
            if len(features) > segment.capacity:  # move to the end, with room to double
                old = segment
                segment = self._new_segment(req_id, 2 * len(features), features)
                self._copy(old, segment)
                self._live -= old.capacity
                self.feature[old.base : old.base + old.count] = None
            self._write(segment, tail)
            return
        self.forget(req_id)
        if features is _NONE:
            return
        check_feature_list(req_id, features)
        segment = self._new_segment(req_id, len(features) + max(4, len(features) // 4), features)
        self._write(segment, features)

    def _new_segment(
        self, req_id: str, capacity: int, features: Sequence[MultiModalFeature]
    ) -> _Segment:
        if self._next_key > _MAX_KEY or self._used + capacity + 1 > self.start_key.shape[0]:
            self._compact(capacity + 1)
        key_base = self._next_key << _POSITION_BITS
        self._next_key += 1
        segment = _Segment(key_base, self._used, capacity, features)
        self.start_key[segment.base : segment.base + capacity] = key_base + _PAD
        self.end_key[segment.base : segment.base + capacity] = key_base + _PAD
        self._used += capacity
        self._live += capacity
        self._segments[req_id] = segment
        self._batch_ids = None
        return segment

    def _copy(self, old: _Segment, new: _Segment) -> None:
        source = slice(old.base, old.base + old.count)
        target = slice(new.base, new.base + old.count)
        for name in _COLUMNS:
            column = getattr(self, name)
            column[target] = column[source]
        self.start_key[target] = self.start[target] + new.key_base
        self.end_key[target] = self.end[target] + new.key_base
        new.count = old.count

    def _write(self, segment: _Segment, features: Sequence[MultiModalFeature]) -> None:
        """Fill the entries after the segment's last one from ``features``."""
        n = len(features)
        positions = [f.mm_position for f in features]
        starts = np.array([p.offset for p in positions], dtype=np.int64)
        ends = starts + np.array([p.length for p in positions], dtype=np.int64)
        if n and int(ends.max()) > MAX_POSITION:
            k = int(ends.argmax())
            raise ValueError(
                f"feature {features[k].identifier!r} ends at position {int(ends[k])}, beyond "
                f"the largest position the gather supports ({MAX_POSITION})"
            )
        embeds = ends - starts
        mask_bases = np.full(n, -1, dtype=np.int64)
        for k, position in enumerate(positions):
            if position.is_embed is not None:
                prefix = position.embed_prefix()
                mask_bases[k] = self._store_prefix(prefix)
                embeds[k] = prefix[-1]
        entries = slice(segment.base + segment.count, segment.base + segment.count + n)
        self.start[entries], self.end[entries] = starts, ends
        self.start_key[entries] = starts + segment.key_base
        self.end_key[entries] = ends + segment.key_base
        self.num_embeds[entries], self.mask_base[entries] = embeds, mask_bases
        self.identifier[entries] = [f.identifier for f in features]
        cells = self.feature[entries]
        for k, feature in enumerate(features):
            cells[k] = feature
        segment.count += n

    def _store_prefix(self, prefix: _I64) -> int:
        base, end = self._prefix_used, self._prefix_used + prefix.shape[0]
        if end > self.prefix.shape[0]:
            size = max(2 * self.prefix.shape[0], end)
            self.prefix = np.concatenate(
                [self.prefix, np.zeros(size - self.prefix.shape[0], np.int64)]
            )
            self.embeds = np.concatenate(
                [self.embeds, np.zeros(size - self.embeds.shape[0], np.bool_)]
            )
        self.prefix[base:end] = prefix
        self.embeds[base : end - 1] = prefix[1:] > prefix[:-1]
        self._prefix_used = end
        return base

    def _compact(self, room: int) -> None:
        """Rewrite the live segments at the front, renumbered from key 1, with ``room`` spare."""
        old = {name: getattr(self, name) for name in _COLUMNS}
        old_prefix, self._prefix_used = self.prefix, 0
        self.prefix, self.embeds = np.zeros_like(old_prefix), np.zeros_like(self.embeds)
        self._allocate(max(2 * (self._live + room), 1024))
        self._next_key = 1
        for segment in sorted(self._segments.values(), key=operator.attrgetter("base")):
            moved = _Segment(self._next_key << _POSITION_BITS, self._used, segment.capacity, ())
            self._next_key += 1
            capacity = slice(moved.base, moved.base + moved.capacity)
            self.start_key[capacity] = self.end_key[capacity] = moved.key_base + _PAD
            source = slice(segment.base, segment.base + segment.count)
            target = slice(moved.base, moved.base + segment.count)
            for name in _COLUMNS:
                getattr(self, name)[target] = old[name][source]
            self.start_key[target] = self.start[target] + moved.key_base
            self.end_key[target] = self.end[target] + moved.key_base
            for entry in (np.flatnonzero(self.mask_base[target] >= 0) + moved.base).tolist():
                first = int(self.mask_base[entry])
                length = int(self.end[entry] - self.start[entry]) + 1
                self.mask_base[entry] = self._store_prefix(old_prefix[first : first + length])
            segment.key_base, segment.base = moved.key_base, moved.base
            self._used += segment.capacity
        self._batch_ids = None
