"""The result of planning a gather: which slots get which encoder-output rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import torch

from rtmm_protocol.reference.feature_table import FeatureTable
from rtmm_protocol.reference.output_pool import EncoderOutputPool
from rtmm_protocol.reference.pool_locator import PoolLocator
from rtmm_protocol.validation import check_encoder_output

__all__ = ["MMGatherPlan"]

_I64 = npt.NDArray[np.int64]


class MMGatherPlan:
    """One step's gather, computed once and materialized in the form the caller needs.

    ``is_mm_embed`` is the SPEC G4 mask (CPU bool tensor over the scheduled tokens) and
    ``slots`` the flat slots that receive a row (int64 CPU tensor, increasing). The rows
    themselves come as one tensor from :meth:`rows` (a single copy; a single
    ``index_select`` when the outputs live in an :class:`EncoderOutputPool`) or as the
    SPEC G6 list of views from :meth:`pieces`.

    Internally a plan is a list of *pieces*, one per (request, feature) pair that
    contributes: the cached output, the feature's table entry (``source_ids``, the
    outputs' identifiers, are read from the table when not given) and the rows
    ``[row_start, row_end)`` of the output it uses (always contiguous). Row ``j`` of
    :meth:`rows` is row ``j`` of the pieces' concatenation, which lands in ``slots[j]``.

    A plan reads the cache (and the runner's feature table) as they were when planned:
    use it before either changes.
    """

    __slots__ = (
        "_device",
        "_dtype",
        "_entries",
        "_hidden_size",
        "_live",
        "_locator",
        "_pool",
        "_row_end",
        "_row_start",
        "_single_rows",
        "_slots",
        "_slots_tensor",
        "_source_ids",
        "_sources",
        "_table",
        "is_mm_embed",
    )

    def __init__(
        self,
        *,
        is_mm_embed: torch.Tensor,
        slots: _I64,
        sources: Sequence[torch.Tensor],
        source_ids: Sequence[str] | None,
        entries: _I64,
        row_start: _I64,
        row_end: _I64,
        table: FeatureTable,
        hidden_size: int,
        dtype: torch.dtype,
        device: torch.device,
        pool: EncoderOutputPool | None = None,
        live: Mapping[str, torch.Tensor] | None = None,
        locator: PoolLocator | None = None,
        single_rows: bool = False,
    ) -> None:
        #: SPEC G4: True at the slots that receive an encoder-output row.
        self.is_mm_embed = is_mm_embed
        self._slots = slots
        self._slots_tensor: torch.Tensor | None = None
        self._sources = sources
        self._source_ids = source_ids
        self._entries = entries
        self._row_start = row_start
        self._row_end = row_end
        self._table = table
        self._hidden_size = hidden_size
        self._dtype = dtype
        self._device = device
        self._pool = pool
        self._live = live
        self._locator = PoolLocator() if locator is None else locator
        self._single_rows = single_rows  # every piece is one row

    @property
    def slots(self) -> torch.Tensor:
        """The True slots of :attr:`is_mm_embed`, increasing (int64, CPU)."""
        if self._slots_tensor is None:
            self._slots_tensor = torch.from_numpy(self._slots)
        return self._slots_tensor

    @property
    def num_rows(self) -> int:
        """Rows gathered: the number of True slots."""
        return int(self._slots.shape[0])

    @property
    def num_pieces(self) -> int:
        """Entries of :meth:`pieces`: (request, feature) pairs that contribute rows."""
        return len(self._sources)

    @property
    def pool(self) -> EncoderOutputPool | None:
        """The pool :meth:`rows` reads from, if any."""
        return self._pool

    def pieces(self) -> list[torch.Tensor]:
        """SPEC G6: one view per contributing (request, feature) pair, with ``.modality``.

        Raises ``ValueError`` naming the identifier if an output is not
        ``(num_embeds, hidden_size)``: slicing a short output would drop rows silently,
        and a model merging rows of another width would misplace values.
        """
        pieces = []
        hidden_size = self._hidden_size
        entries = self._entries
        for source, start, end, feature, num_embeds in zip(
            self._sources,
            self._row_start.tolist(),
            self._row_end.tolist(),
            self._table.feature[entries],
            self._table.num_embeds[entries].tolist(),
            strict=True,
        ):
            if source.shape != (num_embeds, hidden_size):
                check_encoder_output(feature, source, hidden_size)
            piece = source[start:end]
            piece.modality = feature.modality  # type: ignore[attr-defined]  # SPEC G6 attribute
            pieces.append(piece)
        return pieces

    def pool_rows(self) -> _I64:
        """Pool row of each gathered row, in slot order (int64).

        Outputs not yet in the pool (cached directly in the dict) are mirrored into it
        first. Raises ``ValueError`` when the plan has no pool, or naming the identifier
        when an output's row count does not match its feature.
        """
        pool = self._pool
        if pool is None:
            raise ValueError("this plan has no encoder-output pool; use rows() or pieces()")
        if self._source_ids is None:
            self._source_ids = self._table.identifier[self._entries].tolist()
        starts = self._locator.locate(
            pool, self._table, self._entries, self._source_ids, self._sources, self._live
        )
        if self._single_rows:
            return starts + self._row_start
        counts = self._row_end - self._row_start
        before = np.cumsum(counts) - counts
        # Row j of piece k is pool row start_k + row_start_k + (j - rows before piece k).
        first_rows: _I64 = np.repeat(starts + self._row_start - before, counts)
        return np.arange(first_rows.shape[0], dtype=np.int64) + first_rows

    def rows(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """All gathered rows in slot order, ``(num_rows, hidden_size)``, in one copy.

        With a pool this is one ``index_select`` over the pool; without, the pieces
        are concatenated. Equals ``torch.cat(self.pieces())`` either way. ``out``, a
        contiguous tensor of exactly that shape (and the pool's dtype and device, with
        a pool), receives the rows instead of a new tensor: reusing one buffer saves
        the allocation, which for large steps costs as much as the copy.
        """
        if out is not None:
            expected = (self.num_rows, self._hidden_size)
            if tuple(out.shape) != expected or not out.is_contiguous():
                raise ValueError(
                    f"out must be a contiguous tensor of shape {expected}, got "
                    f"{tuple(out.shape)}{'' if out.is_contiguous() else ' (not contiguous)'}"
                )
        pool = self._pool
        if pool is not None:
            index = torch.from_numpy(self.pool_rows())
            if pool.device.type != "cpu":
                index = index.to(pool.device, non_blocking=True)
            return pool.gather(index, out=out)
        if not self._sources:
            empty = torch.empty(0, self._hidden_size, dtype=self._dtype, device=self._device)
            return empty if out is None else out
        if out is None:
            return torch.cat(self.pieces())
        return torch.cat(self.pieces(), out=out)
