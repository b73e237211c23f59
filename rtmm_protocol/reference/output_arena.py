"""Encoder outputs in one pre-allocated ``(rows, hidden_size)`` tensor.

With every output a step needs in one tensor, its rows are one ``index_select`` away,
whatever features they come from. The arena holds two kinds of entries, both keyed by
the identity of the tensor they stand for:

* *owned*: an output the state's encoder produced, copied in once; the cache entry is
  the arena's view of those rows (no second copy);
* *mirrors*: a copy of an output the engine assigned to the cache directly, made the
  first time a step needs its rows.

Tensors are tracked through weak references: when the cache drops an output (freed,
or replaced by another tensor) and nothing else holds it, its rows come back. A
replaced output is a new tensor, so it is never mistaken for the copy of the old one.
"""

from __future__ import annotations

import bisect
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

__all__ = ["ArenaFullError", "EncoderOutputArena"]


class ArenaFullError(RuntimeError):
    """The arena cannot hold an output: too few rows free, or none contiguous enough."""

    def __init__(self, identifier: str, rows_needed: int, rows_free: int) -> None:
        super().__init__(
            f"the encoder-output arena cannot hold the output of {identifier!r}: it needs "
            f"{rows_needed} contiguous rows and {rows_free} rows are free. Free outputs that "
            "are no longer needed, or build the state with a larger arena_rows"
        )
        self.identifier = identifier
        self.rows_needed = rows_needed
        self.rows_free = rows_free


@dataclass
class _Entry:
    identifier: str
    start: int
    rows: int
    ref: weakref.ref[torch.Tensor]
    owned: bool


class EncoderOutputArena:
    """A fixed block of ``rows`` rows for encoder outputs, with first-fit allocation."""

    def __init__(
        self, rows: int, hidden_size: int, *, dtype: torch.dtype, device: torch.device
    ) -> None:
        if isinstance(rows, bool) or not isinstance(rows, int) or rows <= 0:
            raise ValueError(f"arena_rows must be a positive int, got {rows!r}")
        self.capacity = rows
        self.hidden_size = hidden_size
        self.storage = torch.zeros(rows, hidden_size, dtype=dtype, device=device)
        self._stride = rows + 1
        self._span: dict[int, int] = {}  # id(tensor) -> start * stride + rows
        self._entries: dict[int, _Entry] = {}
        self._dead: list[_Entry] = []  # dropped by their owners, rows not yet given back
        self._free_starts: list[int] = [0]  # sorted free extents
        self._free_rows: list[int] = [rows]

    @property
    def rows_free(self) -> int:
        """Rows held by no live entry."""
        self._bury()
        return sum(self._free_rows)

    def store(self, identifier: str, output: torch.Tensor) -> torch.Tensor:
        """Copy an encoded ``output`` in; return the view to cache in its place (owned)."""
        start = self._place(identifier, int(output.shape[0]), ())
        view = self.storage[start : start + output.shape[0]]
        view.copy_(output)
        self._track(identifier, view, start, owned=True)
        return view

    def locate(
        self,
        identifiers: Sequence[str],
        tensors: Sequence[torch.Tensor],
        keys: Sequence[int] | None = None,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """First arena row and row count of each tensor, mirroring those not held yet.

        ``keys``, when given, are the tensors' ``id`` values (saves computing them). The
        tensors of the call are kept while room is made for the others. Raises
        :class:`ArenaFullError` when they cannot all be held at once.
        """
        keys = list(map(id, tensors)) if keys is None else keys
        spans = list(map(self._span.get, keys))
        if None in spans:
            keep = set(keys)
            for k in [k for k, span in enumerate(spans) if span is None]:
                spans[k] = self._adopt(identifiers[k], tensors[k], keep)
        packed = np.fromiter(spans, dtype=np.int64, count=len(spans))
        return np.divmod(packed, self._stride)

    def gather(self, index: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """The rows at ``index`` (int64, on the arena's device), by one ``index_select``."""
        if out is None:
            return self.storage.index_select(0, index)
        return torch.index_select(self.storage, 0, index, out=out)

    # ------------------------------------------------------------------ entries

    def _adopt(self, identifier: str, tensor: torch.Tensor, keep: set[int]) -> int:
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(
                f"encoder output of {identifier!r} must be a torch.Tensor, "
                f"got {type(tensor).__name__}"
            )
        if tensor.dim() != 2 or tensor.shape[1] != self.hidden_size:
            raise ValueError(
                f"encoder output of {identifier!r} has shape {tuple(tensor.shape)}, expected "
                f"(num_embeds, {self.hidden_size})"
            )
        if tensor.device != self.storage.device:  # a meta tensor has no rows to copy
            raise ValueError(
                f"encoder output of {identifier!r} is on device {tensor.device}, expected "
                f"{self.storage.device}"
            )
        rows = int(tensor.shape[0])
        start = self._place(identifier, rows, keep)
        self.storage[start : start + rows].copy_(tensor)
        self._track(identifier, tensor, start, owned=False)
        return start * self._stride + rows

    def _track(self, identifier: str, tensor: torch.Tensor, start: int, *, owned: bool) -> None:
        key = id(tensor)
        rows = int(tensor.shape[0])

        def dropped(ref: weakref.ref[torch.Tensor], key: int = key) -> None:
            entry = self._entries.get(key)
            if entry is not None and entry.ref is ref:
                del self._entries[key], self._span[key]
                self._dead.append(entry)

        self._entries[key] = _Entry(identifier, start, rows, weakref.ref(tensor, dropped), owned)
        self._span[key] = start * self._stride + rows

    def _release(self, key: int) -> None:
        entry = self._entries.pop(key)
        del self._span[key]
        self._give_back(entry.start, entry.rows)

    def _bury(self) -> None:
        while self._dead:
            entry = self._dead.pop()
            self._give_back(entry.start, entry.rows)

    def _place(self, identifier: str, rows: int, keep: set[int] | tuple[()]) -> int:
        """Allocate ``rows`` rows, evicting mirrors not in ``keep`` when needed."""
        self._bury()
        start = self._take(rows)
        if start is None:
            for key in [k for k, e in self._entries.items() if not e.owned and k not in keep]:
                self._release(key)
            start = self._take(rows)
        if start is None:
            raise ArenaFullError(identifier, rows, sum(self._free_rows))
        return start

    # ------------------------------------------------------------------ free extents

    def _take(self, rows: int) -> int | None:
        if rows == 0:
            return 0
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
        if rows == 0:
            return
        k = bisect.bisect_left(self._free_starts, start)
        starts, lengths = self._free_starts, self._free_rows
        if k < len(starts) and starts[k] == start + rows:  # merge with the next extent
            starts[k] = start
            lengths[k] += rows
        else:
            starts.insert(k, start)
            lengths.insert(k, rows)
        if k > 0 and starts[k - 1] + lengths[k - 1] == start:  # and with the previous one
            lengths[k - 1] += lengths[k]
            del starts[k], lengths[k]
