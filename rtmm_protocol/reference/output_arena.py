"""Copies of encoder outputs in one pre-allocated tensor, so a step's rows are one ``index_select``.

A step reading a row or two from each of many outputs (realtime decode) would otherwise
copy once per output. The arena copies each output such a step reads the first time it
is needed and reuses the copy while it is current: a copy remembers its tensor (by a
weak reference: it keeps no freed output alive) and the tensor's version, which torch
bumps on every in-place write. An output replaced in the cache (C1) is another tensor:
it is copied anew (C2). One written in place keeps its identity; with ``versions`` on
(the runner's validation) its new version gets it copied anew too, and with it off a
step reads no version and serves the copy it made (C2a: such a write is outside C1).
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
import torch

__all__ = ["ArenaFullError", "EncoderOutputArena"]

# torch's count of in-place writes to a tensor (shared by the views of one base).
_VERSION = operator.attrgetter("_version")


class ArenaFullError(RuntimeError):
    """The arena cannot hold an output beside the others a step needs."""

    def __init__(self, identifier: str, rows_needed: int, rows_free: int) -> None:
        super().__init__(
            f"the encoder-output arena cannot hold the output of {identifier!r}: it needs "
            f"{rows_needed} rows and {rows_free} rows are free beside the other outputs of "
            "the step. Build the state with a larger arena_rows"
        )
        self.identifier = identifier
        self.rows_needed = rows_needed
        self.rows_free = rows_free


class EncoderOutputArena:
    """A fixed ``(rows, hidden_size)`` block holding copies of encoder outputs, in a row."""

    def __init__(
        self, rows: int, hidden_size: int, *, dtype: torch.dtype, device: torch.device
    ) -> None:
        if isinstance(rows, bool) or not isinstance(rows, int) or rows <= 0:
            raise ValueError(f"arena_rows must be a positive int, got {rows!r}")
        self.capacity, self.hidden_size = rows, hidden_size
        #: C2a: whether :meth:`locate` reads each output's version on every call and
        #: copies anew an output written in place (the runner's validation switch).
        self.versions = True
        self.storage = torch.zeros(rows, hidden_size, dtype=dtype, device=device)
        # By the id of the tensor copied (dropped when it dies: a reused id never
        # matches): its weak reference, the version copied, and [start, start + rows)
        # packed as start * stride + rows. Reading these by id, not a record by
        # identifier, took the check on 1,024 decode pieces from 0.5 to 0.2 ms (warm).
        self._refs: dict[int, weakref.ref[torch.Tensor]] = {}
        self._versions: dict[int, int] = {}
        self._spans: dict[int, int] = {}
        self._moves = 0  # how often copies were moved to make room
        self._stride, self._end = rows + 1, 0  # copies are laid out before row _end
        # Each caller's slots (the planner's feature-table entries) remember, as arrays,
        # the tensor last found there by id, its version and its copy's packed span: a
        # step that finds the same tensors at the same versions reads these arrays and
        # no record by id (see locate). A slot is forgotten when its tensor dies (the id
        # may come back as another tensor's), all of them when copies move.
        self._slot_key = np.zeros(0, dtype=np.int64)
        self._slot_version = np.zeros(0, dtype=np.int64)
        self._slot_start = np.zeros(0, dtype=np.int64)  # the copy's first row
        self._slot_rows = np.zeros(0, dtype=np.int64)  # and its rows
        self._slots_of: dict[int, set[int]] = {}  # by tensor id: the slots that name it

    @property
    def rows_free(self) -> int:
        """Rows held by no copy of a live tensor."""
        return self.capacity - sum(span % self._stride for span in self._spans.values())

    def locate(
        self,
        identifiers: Sequence[str],
        outputs: Sequence[torch.Tensor],
        check: Callable[[int], object] | None = None,
        *,
        slots: npt.NDArray[np.int64] | None = None,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The first arena row and the rows of each output's copy, copying in those
        without a current one after ``check(k)`` (which raises for a bad ``outputs[k]``,
        cached under ``identifiers[k]``; a 2-D tensor on the arena's device when no
        check is given). Raises :class:`ArenaFullError` if they cannot all be held at once.

        ``slots`` (non-negative, one per output) are numbers under which the answers are
        remembered: a later call that brings the same tensor (unwritten, with
        :attr:`versions` on) under the same slot gets its answer from arrays instead of
        a record read by the tensor's id."""
        if slots is None or not len(outputs):
            return self._locate_by_id(identifiers, outputs, check)
        n = len(outputs)
        keys = np.fromiter(map(id, outputs), dtype=np.int64, count=n)
        # The dicts by id cost two reads of scattered objects per output; the slots'
        # arrays, one numpy pass each (and each kind of numpy call, 5-30 us cold).
        try:
            hit = self._slot_key[slots] == keys
        except IndexError:  # a slot past the arrays: they grow
            self._grow_slots(int(slots.max()) + 1)
            hit = self._slot_key[slots] == keys
        versions = None
        if self.versions:  # C2a: every output's version, read on every call (torch bumps it)
            try:  # two cache misses per output in torch's objects: 0.3-0.4 ms at 1,024
                versions = np.fromiter(map(_VERSION, outputs), dtype=np.int64, count=n)
            except AttributeError:  # not a tensor: check(k) refuses it below
                return self._locate_by_id(identifiers, outputs, check)
            hit &= self._slot_version[slots] == versions
        if np.count_nonzero(hit) == n:  # not hit.all(): with cold caches a reduction costs more
            return self._slot_start[slots], self._slot_rows[slots]
        # Only the outputs the slots did not answer are looked up by id (continuous decode
        # misses the streams entering a new feature, not the others).
        missed, moves = np.flatnonzero(~hit), self._moves
        listed = keys.tolist()
        needed = set(listed)
        for k in map(int, missed):
            copied = self._versions.get(listed[k])
            if copied is None or (versions is not None and copied != versions[k]):
                if check is not None:
                    check(k)
                self._copy_in(identifiers[k], outputs[k], needed)
        if self._moves != moves:  # copies moved: every slot was forgotten (_copy_in)
            missed = np.arange(n)
        missed_keys, missed_slots = keys[missed], slots[missed]
        found = missed_keys.tolist()
        spans = np.array([self._spans[key] for key in found], dtype=np.int64)
        self._slot_start[missed_slots], self._slot_rows[missed_slots] = divmod(spans, self._stride)
        self._slot_key[missed_slots] = missed_keys
        self._slot_version[missed_slots] = [self._versions[key] for key in found]
        for key, slot in zip(found, missed_slots.tolist(), strict=True):
            self._slots_of.setdefault(key, set()).add(slot)
        return self._slot_start[slots], self._slot_rows[slots]

    def _locate_by_id(
        self,
        identifiers: Sequence[str],
        outputs: Sequence[torch.Tensor],
        check: Callable[[int], object] | None,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """:meth:`locate` from the records by the tensors' ids."""
        keys = list(map(id, outputs))
        # The spans first: read after the versions, they took twice as long (measured).
        spans = list(map(self._spans.get, keys))
        try:
            current = (
                list(map(self._versions.get, keys)) == list(map(_VERSION, outputs))
                if self.versions  # C2a, as in locate
                else None not in spans
            )
        except AttributeError:  # not a tensor: check(k) refuses it below
            current = False
        if not current:
            needed = set(keys)
            for k, output in enumerate(outputs):
                copied = self._versions.get(keys[k])
                if copied is None or (self.versions and copied != getattr(output, "_version", -1)):
                    if check is not None:
                        check(k)
                    self._copy_in(identifiers[k], output, needed)
            spans = list(map(self._spans.get, keys))  # making room moves copies
        return np.divmod(np.array(spans, dtype=np.int64), self._stride)

    def _grow_slots(self, size: int) -> None:
        size = max(size, 2 * self._slot_key.shape[0], 1024)
        for name in ("_slot_key", "_slot_version", "_slot_start", "_slot_rows"):
            column = getattr(self, name)
            grown = np.zeros(size, dtype=np.int64)
            grown[: column.shape[0]] = column
            setattr(self, name, grown)

    def _copy_in(self, identifier: str, output: torch.Tensor, needed: set[int]) -> None:
        """Copy ``output``, cached under ``identifier``, after the last copy. When the rows
        run out, only the copies of the tensors ``needed`` stay, moved to the front."""
        key, rows = id(output), int(output.shape[0])
        self._drop(key)
        if self._end + rows > self.capacity:
            for gone in [k for k in self._spans if k not in needed]:
                self._drop(gone)
            self._end, self._moves = 0, self._moves + 1
            self._slot_key[:] = 0  # every slot's span may be stale now, even if this
            self._slots_of.clear()  # call fails for want of room
            for kept, span in sorted(self._spans.items(), key=lambda item: item[1]):
                start, length = divmod(span, self._stride)  # moving down: a clone first,
                moved = self.storage[start : start + length].clone()  # rows may overlap
                self.storage[self._end : self._end + length] = moved
                self._spans[kept] = self._end * self._stride + length
                self._end += length
        if self._end + rows > self.capacity:
            raise ArenaFullError(identifier, rows, self.capacity - self._end)
        # A copy holds plain values: an output that requires grad must not make the arena
        # part of an autograd graph (every later index_select into out= would fail).
        self.storage[self._end : self._end + rows].copy_(output.detach())
        refs = self._refs

        def died(ref: weakref.ref[torch.Tensor]) -> None:
            if refs.get(key) is ref:
                self._drop(key)
            for slot in self._slots_of.pop(key, ()):  # its id may name another tensor
                if self._slot_key[slot] == key:
                    self._slot_key[slot] = 0

        self._refs[key] = weakref.ref(output, died)
        self._versions[key], self._spans[key] = _VERSION(output), self._end * self._stride + rows
        self._end += rows

    def _drop(self, key: int) -> None:
        for by_id in (self._refs, self._versions, self._spans):
            by_id.pop(key, None)
