"""Encoder outputs kept in one pre-allocated ``[capacity_rows + 1, hidden_size]`` tensor.

With every output in one tensor, the rows a step needs are one ``index_select`` away,
whatever features they come from, and their addresses never change, which is what a
CUDA graph needs. The pool tracks which identifier owns which rows and which tensor
they were copied from, so it can tell when a cache entry was replaced behind its back.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from rtmm_protocol.reference.row_allocator import PoolCapacityError, RowExtentAllocator

__all__ = ["EncoderOutputPool"]


@dataclass
class _Resident:
    start: int
    rows: int
    serial: int
    #: The tensor this entry stands for: the pool view handed out by :meth:`store`
    #: (``owned``), or the caller's tensor that :meth:`adopt` copied in (a mirror).
    source: torch.Tensor
    owned: bool


class EncoderOutputPool:
    """A fixed block of rows that holds encoder outputs, with a free list.

    Row ``capacity_rows`` (the last one) is the *null row*: always zero and never
    handed out, so fixed-size index buffers can point their unused entries at it.

    Two kinds of entries live here. :meth:`store` copies an output in and returns a
    view of its rows, which the caller caches in place of the output (the pool owns
    those rows until :meth:`release`). :meth:`adopt` copies a tensor that stays cached
    elsewhere (a *mirror*); mirrors can be evicted whenever the rows are needed.
    """

    def __init__(
        self,
        capacity_rows: int,
        hidden_size: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        if isinstance(capacity_rows, bool) or not isinstance(capacity_rows, int):
            raise ValueError(f"capacity_rows must be an int, got {capacity_rows!r}")
        if capacity_rows <= 0:
            raise ValueError(f"capacity_rows must be positive, got {capacity_rows}")
        if isinstance(hidden_size, bool) or not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError(f"hidden_size must be a positive int, got {hidden_size!r}")
        self.capacity_rows = capacity_rows
        self.hidden_size = hidden_size
        self.dtype = dtype
        self.device = torch.device(device)
        #: All rows, the null row last.
        self.storage = torch.zeros(capacity_rows + 1, hidden_size, dtype=dtype, device=self.device)
        self._allocator = RowExtentAllocator(capacity_rows)
        self._residents: dict[str, _Resident] = {}
        #: ``owner[start]`` is the serial of the entry whose rows begin at ``start`` (0 when
        #: none): a remembered ``(start, serial)`` is still valid iff it matches.
        self.owner = np.zeros(capacity_rows + 1, dtype=np.int64)
        self._next_serial = 1
        # Per identifier, for lookups done with C-level ``map`` on the hot path: the
        # source tensor, and start and row count packed in one int (start * stride + rows).
        self._stride = capacity_rows + 1
        self._span_of: dict[str, int] = {}
        self._source_of: dict[str, torch.Tensor] = {}

    @property
    def null_row(self) -> int:
        """Index of the always-zero row that is never handed out."""
        return self.capacity_rows

    @property
    def rows_free(self) -> int:
        """Rows not held by any entry."""
        return self._allocator.rows_free

    @property
    def rows_used(self) -> int:
        """Rows held by entries."""
        return self.capacity_rows - self._allocator.rows_free

    def __len__(self) -> int:
        return len(self._residents)

    def __contains__(self, identifier: object) -> bool:
        return identifier in self._residents

    def _check_output(self, identifier: str, output: torch.Tensor) -> None:
        if not isinstance(output, torch.Tensor):
            raise ValueError(
                f"encoder output of {identifier!r} must be a torch.Tensor, "
                f"got {type(output).__name__}"
            )
        if output.dim() != 2 or output.shape[1] != self.hidden_size:
            raise ValueError(
                f"encoder output of {identifier!r} has shape {tuple(output.shape)}, but the "
                f"pool holds rows of hidden_size={self.hidden_size}"
            )

    def _place(
        self,
        identifier: str,
        rows: int,
        keep: Collection[str],
        live: Mapping[str, torch.Tensor] | None,
    ) -> int:
        start = self._allocator.allocate(rows)
        if start is None:
            # Make room: first entries whose cache entry is gone, then mirrors.
            if live is not None:
                self.reclaim(live, keep=keep)
            self._evict_mirrors(keep)
            start = self._allocator.allocate(rows)
        if start is None:
            raise PoolCapacityError(
                identifier, rows, self._allocator.rows_free, self._allocator.largest_free
            )
        return start

    def _register(
        self, identifier: str, start: int, rows: int, source: torch.Tensor, *, owned: bool
    ) -> None:
        entry = _Resident(start, rows, self._next_serial, source, owned)
        self._next_serial += 1
        if rows:
            self.owner[start] = entry.serial
        self._residents[identifier] = entry
        self._span_of[identifier] = entry.start * self._stride + entry.rows
        self._source_of[identifier] = entry.source

    def store(
        self,
        identifier: str,
        output: torch.Tensor,
        *,
        keep: Collection[str] = (),
        live: Mapping[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Copy ``output`` into the pool and return the view of its rows.

        Replaces any earlier entry of ``identifier`` (whose rows may be reused). When
        the pool is full, entries that ``live`` (the cache's outputs dict) no longer
        holds are reclaimed and mirrors evicted, except those named in ``keep``. Raises
        :class:`PoolCapacityError` (a ``RuntimeError``) naming the identifier, the rows
        needed and the rows free when the output does not fit; the earlier entry then
        stays as it was.
        """
        self._check_output(identifier, output)
        earlier = self._residents.get(identifier)
        self.release(identifier)
        rows = int(output.shape[0])
        try:
            start = self._place(identifier, rows, keep, live)
        except PoolCapacityError:
            if earlier is not None:  # nothing was placed since: its rows are still free
                self._allocator.claim(earlier.start, earlier.rows)
                self._register(
                    identifier, earlier.start, earlier.rows, earlier.source, owned=earlier.owned
                )
            raise
        view = self.storage[start : start + rows]
        view.copy_(output)
        self._register(identifier, start, rows, view, owned=True)
        return view

    def adopt(
        self,
        identifier: str,
        tensor: torch.Tensor,
        *,
        keep: Collection[str] = (),
        live: Mapping[str, torch.Tensor] | None = None,
    ) -> int:
        """Mirror ``tensor`` (cached elsewhere under ``identifier``); return its first row.

        A no-op returning the existing start when ``tensor`` is already the entry's
        source. The mirror holds a reference to ``tensor``, so the identity check stays
        sound; it assumes, as every encoder cache does, that cached outputs are not
        modified in place.
        """
        entry = self._residents.get(identifier)
        if entry is not None and entry.source is tensor:
            return entry.start
        self._check_output(identifier, tensor)
        self.release(identifier)
        rows = int(tensor.shape[0])
        start = self._place(identifier, rows, keep, live)
        self.storage[start : start + rows].copy_(tensor)
        self._register(identifier, start, rows, tensor, owned=False)
        return start

    def release(self, identifier: str) -> bool:
        """Free the rows of ``identifier``; return whether it had any."""
        entry = self._residents.pop(identifier, None)
        if entry is None:
            return False
        del self._span_of[identifier], self._source_of[identifier]
        if entry.rows:
            self.owner[entry.start] = 0
        self._allocator.release(entry.start, entry.rows)
        return True

    def reclaim(self, live: Mapping[str, torch.Tensor], *, keep: Collection[str] = ()) -> int:
        """Free the entries whose identifier no longer maps to their tensor in ``live``.

        This is how rows come back when a cache entry is deleted or replaced directly
        in the cache's dict instead of through its methods. Entries named in ``keep``
        stay. Returns the rows freed.
        """
        stale = [
            identifier
            for identifier, entry in self._residents.items()
            if identifier not in keep and live.get(identifier) is not entry.source
        ]
        freed = sum(self._residents[identifier].rows for identifier in stale)
        for identifier in stale:
            self.release(identifier)
        return freed

    def _evict_mirrors(self, keep: Collection[str]) -> None:
        victims = [
            identifier
            for identifier, entry in self._residents.items()
            if not entry.owned and identifier not in keep
        ]
        for identifier in victims:
            self.release(identifier)

    def locate(
        self, identifiers: Sequence[str], tensors: Sequence[torch.Tensor]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
        """First pool row and row count of each ``(identifier, tensor)``, or ``None``.

        ``None`` means some pair is not resident: an entry counts only if it stands for
        exactly that tensor object (a replaced cache entry is not resident). Runs as
        C-level maps, no per-item Python code.
        """
        if not all(map(operator.is_, map(self._source_of.get, identifiers), tensors)):
            return None
        spans = np.fromiter(
            map(self._span_of.__getitem__, identifiers), dtype=np.int64, count=len(identifiers)
        )
        return np.divmod(spans, self._stride)

    def serials(self, identifiers: Sequence[str]) -> npt.NDArray[np.int64]:
        """The serial of each resident identifier (``KeyError`` for one not resident)."""
        residents = self._residents
        return np.fromiter(
            (residents[identifier].serial for identifier in identifiers),
            dtype=np.int64,
            count=len(identifiers),
        )

    def ensure_resident(
        self,
        identifiers: Sequence[str],
        tensors: Sequence[torch.Tensor],
        *,
        live: Mapping[str, torch.Tensor] | None = None,
        keep: Collection[str] = (),
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Like :meth:`locate`, mirroring the tensors that are not resident yet.

        The identifiers of the call, and those in ``keep``, are protected from eviction
        while it makes room. Raises :class:`PoolCapacityError` if they cannot all be
        held at once.
        """
        found = self.locate(identifiers, tensors)
        if found is not None:
            return found
        keep = {*identifiers, *keep}
        for identifier, tensor in zip(identifiers, tensors, strict=True):
            self.adopt(identifier, tensor, keep=keep, live=live)
        found = self.locate(identifiers, tensors)
        assert found is not None
        return found

    def gather(self, pool_rows: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """The rows at ``pool_rows`` (int64 indices), by one ``index_select``.

        Into ``out`` when given (it must have the right shape, dtype and device).
        """
        if out is None:
            return self.storage.index_select(0, pool_rows)
        return torch.index_select(self.storage, 0, pool_rows, out=out)

    def free_extents(self) -> list[tuple[int, int]]:
        """The free ``(start, rows)`` extents, in increasing order."""
        return self._allocator.free_extents()
