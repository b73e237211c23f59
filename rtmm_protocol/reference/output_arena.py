"""Copies of encoder outputs in one pre-allocated tensor, so a step's rows are one ``index_select``.

A step reading a row or two from each of many outputs (realtime decode) would otherwise
copy once per output. The arena copies each output such a step reads the first time it
is needed and reuses the copy while it is current: a copy remembers its tensor (by a
weak reference: it keeps no freed output alive) and the tensor's version, which torch
bumps on every in-place write. An output replaced in the cache (C1) is another tensor,
one written in place has another version: either way it is copied anew (C2).
"""

from __future__ import annotations

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


class _Copy(NamedTuple):
    """An output's copy: rows ``[start, start + rows)``, taken from ``source`` at ``version``."""

    source: weakref.ref[torch.Tensor]
    version: int
    start: int
    rows: int


class EncoderOutputArena:
    """A fixed ``(rows, hidden_size)`` block holding copies of encoder outputs, in a row."""

    def __init__(
        self, rows: int, hidden_size: int, *, dtype: torch.dtype, device: torch.device
    ) -> None:
        if isinstance(rows, bool) or not isinstance(rows, int) or rows <= 0:
            raise ValueError(f"arena_rows must be a positive int, got {rows!r}")
        self.capacity, self.hidden_size = rows, hidden_size
        self.storage = torch.zeros(rows, hidden_size, dtype=dtype, device=device)
        self._copies: dict[str, _Copy] = {}  # by the identifier the output is cached under
        self._end = 0  # copies are laid out before this row

    @property
    def rows_free(self) -> int:
        """Rows held by no copy of a live tensor."""
        live = (c.rows for c in self._copies.values() if c.source() is not None)
        return self.capacity - sum(live)

    def locate(
        self, identifiers: Sequence[str], outputs: Sequence[torch.Tensor]
    ) -> npt.NDArray[np.int64]:
        """The first arena row of each output's copy, copying in those without a current
        one; ``outputs[k]``, cached under ``identifiers[k]``, is a checked 2-D tensor on the
        arena's device. Raises :class:`ArenaFullError` if they cannot all be held at once."""
        copies = list(map(self._copies.get, identifiers))
        if None in copies or not (
            all(map(operator.is_, map(_DEREFERENCE, map(_SOURCE, copies)), outputs))
            and list(map(_COPIED_VERSION, copies)) == list(map(_VERSION, outputs))
        ):
            needed = set(identifiers)
            for identifier, output in zip(identifiers, outputs, strict=True):
                copy = self._copies.get(identifier)
                if copy is None or copy.source() is not output or copy.version != _VERSION(output):
                    self._copy_in(identifier, output, needed)
            copies = list(map(self._copies.get, identifiers))  # making room moves copies
        return np.fromiter(map(_START, copies), np.int64, len(copies))

    def _copy_in(self, identifier: str, output: torch.Tensor, needed: set[str]) -> None:
        """Copy ``output`` in under ``identifier`` after the last copy. When the rows run
        out, only the copies ``needed`` stay, moved to the front, the others dropped."""
        self._copies.pop(identifier, None)
        rows = int(output.shape[0])
        if self._end + rows > self.capacity:
            kept = sorted(
                (item for item in self._copies.items() if item[0] in needed),
                key=lambda i: i[1].start,
            )
            self._copies, self._end = {}, 0
            for name, copy in kept:  # moving down: a clone first, as the rows may overlap
                moved = self.storage[copy.start : copy.start + copy.rows].clone()
                self.storage[self._end : self._end + copy.rows] = moved
                self._copies[name] = copy._replace(start=self._end)
                self._end += copy.rows
        if self._end + rows > self.capacity:
            raise ArenaFullError(identifier, rows, self.capacity - self._end)
        # A copy holds plain values: an output that requires grad must not make the arena
        # part of an autograd graph (every later index_select into out= would fail).
        self.storage[self._end : self._end + rows].copy_(output.detach())
        self._copies[identifier] = _Copy(weakref.ref(output), _VERSION(output), self._end, rows)
        self._end += rows
