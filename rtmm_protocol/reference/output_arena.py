"""Copies of encoder outputs in one pre-allocated tensor, so a step's rows are one ``index_select``.

A step that reads a row or two from each of many outputs (realtime decode) would
otherwise copy once per output. The arena keeps a copy of each output such a step reads,
made the first time it is needed and reused while it is current: a copy remembers the
tensor it was taken from (through a weak reference, so it keeps no freed output alive)
and that tensor's version counter, which torch bumps on every in-place write. An output
replaced in the cache is another tensor, and one written in place has another version:
either way it is copied anew, never served stale (SPEC C2).
"""

from __future__ import annotations

import bisect
import operator
import weakref
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import torch

__all__ = ["ArenaFullError", "EncoderOutputArena"]

# torch's count of in-place writes to a tensor (shared by the views of one base).
_VERSION = operator.attrgetter("_version")
_SOURCE, _COPIED_VERSION, _START = (operator.attrgetter(n) for n in ("source", "version", "start"))
_DEREFERENCE = operator.methodcaller("__call__")  # of a weak reference


class ArenaFullError(RuntimeError):
    """The arena cannot hold an output: too few rows free, or none contiguous enough."""

    def __init__(self, identifier: str, rows_needed: int, rows_free: int) -> None:
        super().__init__(
            f"the encoder-output arena cannot hold the output of {identifier!r}: it needs "
            f"{rows_needed} contiguous rows and {rows_free} rows are free beside the other "
            "outputs of the step. Build the state with a larger arena_rows"
        )
        self.identifier = identifier
        self.rows_needed = rows_needed
        self.rows_free = rows_free


class _Copy(NamedTuple):
    """An output's copy: rows ``[start, start + rows)``, taken from ``source`` at ``version``."""

    source: weakref.ref[torch.Tensor]
    version: int
    start: int
    rows: int


class EncoderOutputArena:
    """A fixed ``(rows, hidden_size)`` block holding copies of encoder outputs, first fit."""

    def __init__(
        self, rows: int, hidden_size: int, *, dtype: torch.dtype, device: torch.device
    ) -> None:
        if isinstance(rows, bool) or not isinstance(rows, int) or rows <= 0:
            raise ValueError(f"arena_rows must be a positive int, got {rows!r}")
        self.capacity = rows
        self.hidden_size = hidden_size
        self.storage = torch.zeros(rows, hidden_size, dtype=dtype, device=device)
        self._copies: dict[str, _Copy] = {}  # by the identifier the output is cached under
        self._free_starts: list[int] = [0]  # free extents, sorted, never adjacent
        self._free_rows: list[int] = [rows]

    @property
    def rows_free(self) -> int:
        """Rows held by no copy of a live tensor."""
        live = (c.rows for c in self._copies.values() if c.source() is not None)
        return self.capacity - sum(live)

    def locate(
        self, identifiers: Sequence[str], outputs: Sequence[torch.Tensor]
    ) -> npt.NDArray[np.int64]:
        """The first arena row of each output's copy, copying in those without a current one.

        ``outputs[k]`` is what the cache holds under ``identifiers[k]``, already checked
        to be a ``(rows, hidden_size)`` tensor on the arena's device. Raises
        :class:`ArenaFullError` when they cannot all be held at once.
        """
        copies = list(map(self._copies.get, identifiers))
        if None in copies or not (
            all(map(operator.is_, map(_DEREFERENCE, map(_SOURCE, copies)), outputs))
            and list(map(_COPIED_VERSION, copies)) == list(map(_VERSION, outputs))
        ):
            needed = set(identifiers)
            for k, (identifier, output) in enumerate(zip(identifiers, outputs, strict=True)):
                copy = copies[k]
                if copy is None or copy.source() is not output or copy.version != _VERSION(output):
                    copies[k] = self._copy_in(identifier, output, needed)
        return np.fromiter(map(_START, copies), np.int64, len(copies))

    def _copy_in(self, identifier: str, output: torch.Tensor, needed: set[str]) -> _Copy:
        """Copy ``output`` in under ``identifier``; make room by dropping copies not ``needed``."""
        old = self._copies.pop(identifier, None)
        if old is not None:
            self._give_back(old.start, old.rows)
        rows = int(output.shape[0])
        start = self._take(rows)
        if start is None:
            for name in [n for n in self._copies if n not in needed]:
                dropped = self._copies.pop(name)
                self._give_back(dropped.start, dropped.rows)
            start = self._take(rows)
        if start is None:
            raise ArenaFullError(identifier, rows, sum(self._free_rows))
        # A copy holds plain values: an output that requires grad must not make the arena
        # part of an autograd graph (every later index_select into out= would fail).
        self.storage[start : start + rows].copy_(output.detach())
        copy = _Copy(weakref.ref(output), _VERSION(output), start, rows)
        self._copies[identifier] = copy
        return copy

    def _take(self, rows: int) -> int | None:
        """The start of ``rows`` free rows (the first extent that fits), or ``None``."""
        for k, length in enumerate(self._free_rows):
            if length >= rows:
                start = self._free_starts[k]
                if length == rows:
                    del self._free_starts[k], self._free_rows[k]
                else:
                    self._free_starts[k] += rows
                    self._free_rows[k] -= rows
                return start
        return None

    def _give_back(self, start: int, rows: int) -> None:
        """Free ``[start, start + rows)``, merging it with the free extents around it."""
        starts, lengths = self._free_starts, self._free_rows
        k = bisect.bisect_left(starts, start)
        if k < len(starts) and starts[k] == start + rows:
            starts[k], lengths[k] = start, lengths[k] + rows
        else:
            starts.insert(k, start)
            lengths.insert(k, rows)
        if k > 0 and starts[k - 1] + lengths[k - 1] == start:
            lengths[k - 1] += lengths[k]
            del starts[k], lengths[k]
