"""The result of planning a step's gather: which slots get which encoder-output rows."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import torch

from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.reference.output_arena import EncoderOutputArena
from rtmm_protocol.validation import (
    check_encoder_output,
    check_encoder_outputs,
    check_out_disjoint,
    check_rows_out,
)

__all__ = ["MMGatherPlan", "PlannedPieces"]

_I64 = npt.NDArray[np.int64]
# Pieces of at least this many rows on average are copied block by block (torch.cat)
# rather than row by row from the arena: see MMGatherPlan.rows.
_BLOCK_ROWS = 8


class PlannedPieces(NamedTuple):
    """A plan's pieces in slot order: piece ``k`` is ``outputs[k][row_start[k]:row_end[k]]``,
    ``outputs[k]`` what the cache held under ``identifiers[k]`` for ``features[k]`` when
    planned, checked (E2, E3) against its ``num_embeds[k]`` rows when its rows are read;
    ``entries[k]`` is its feature's entry in the feature table."""

    outputs: list[torch.Tensor]
    identifiers: list[str]
    modalities: Sequence[str] | npt.NDArray[np.object_]
    row_start: _I64
    row_end: _I64
    features: Sequence[MultiModalFeature] | npt.NDArray[np.object_]
    num_embeds: _I64
    entries: _I64  # the feature table's entries: where the arena remembers each output


class MMGatherPlan:
    """One step's gather, planned once and handed out in the form the caller needs.

    :attr:`is_mm_embed` is the SPEC G4 mask and :attr:`slots` its True slots; the rows
    come as the G6 list of views (:meth:`pieces`) or as one tensor in slot order
    (:meth:`rows`). A plan reads the cache as planned: use it before the cache changes.
    """

    def __init__(
        self,
        is_mm_embed: npt.NDArray[np.bool_],
        pieces: PlannedPieces,
        arena: EncoderOutputArena,
        num_rows: int | None = None,
    ) -> None:
        #: SPEC G4: a CPU bool tensor over the scheduled tokens, True where a row lands.
        self.is_mm_embed = torch.from_numpy(is_mm_embed)
        self._pieces, self._arena = pieces, arena
        if num_rows is not None:  # known to the planner (a decode step: one row a piece)
            self.__dict__["num_rows"] = num_rows

    @property
    def slots(self) -> torch.Tensor:
        """The True slots of :attr:`is_mm_embed`, increasing (int64, CPU)."""
        return self.is_mm_embed.nonzero().flatten()

    @functools.cached_property
    def num_rows(self) -> int:
        """Rows gathered: the number of True slots (G5: each piece's rows fill its slots)."""
        return int((self._pieces.row_end - self._pieces.row_start).sum())

    def pieces(self) -> list[torch.Tensor]:
        """SPEC G6: a view of each piece's rows of its cached output, with ``.modality``;
        ``ValueError`` naming the identifier of an output no gather can use (E2, E3)."""
        _check_outputs(self._pieces, self._arena)
        views = self._views()
        modalities = self._pieces.modalities
        if isinstance(modalities, np.ndarray):  # listed here: rows() never needs them
            modalities = modalities.tolist()
        for view, modality in zip(views, modalities, strict=True):
            view.modality = modality  # type: ignore[attr-defined]  # SPEC G6 attribute
        return views

    def rows(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """SPEC G5: every gathered row in slot order, ``(num_rows, hidden_size)``.

        Equals ``torch.cat(self.pieces())``, as plain values (no autograd history), and
        raises as it does. ``out``, a contiguous tensor of that shape, dtype and device,
        receives them; anything else raises ``ValueError`` naming ``out``. Raises
        :class:`~rtmm_protocol.reference.output_arena.ArenaFullError` when the arena
        cannot hold the outputs of short pieces together.
        """
        storage = self._arena.storage
        shape = (self.num_rows, self._arena.hidden_size)
        if out is None:
            out = torch.empty(shape, dtype=storage.dtype, device=storage.device)
            return self.rows_into(out)
        check_rows_out(out, shape, storage)
        return self.rows_into(out, disjoint=False)

    def rows_into(self, out: torch.Tensor, *, disjoint: bool = True) -> torch.Tensor:
        """:meth:`rows` into an ``out`` its caller made to fit (contiguous, of
        ``(num_rows, hidden_size)``, the arena's dtype and device, no grad): a state's
        own buffer, which it need not check every step. ``disjoint``: ``out`` shares no
        memory with the arena (else that is checked; long pieces' outputs always are)."""
        arena, pieces = self._arena, self._pieces
        storage = arena.storage
        block = self.num_rows >= _BLOCK_ROWS * len(pieces.outputs)
        starts = None if block or not self.num_rows else self._arena_starts()
        if block:
            _check_outputs(pieces, arena)
        if not self.num_rows:
            return out
        if block:
            # Long pieces: one block copy each, from the outputs (no arena copy); on 8 image
            # chunks (11 pieces, 3,921 rows) 10% faster than selecting rows from the arena.
            check_out_disjoint(out, pieces.outputs)
            with torch.no_grad():
                return torch.cat(self._views(), out=out)
        # Short pieces (decode): one index_select from the arena's copies. G5: piece k
        # fills rows [before_k, before_k + count_k) of the result with rows row_start_k, ...
        # of its output, which its copy holds from arena row start_k + row_start_k on.
        if not disjoint:
            check_out_disjoint(out, [storage])
        assert starts is not None  # short pieces with rows: their arena copies were found
        index = starts + pieces.row_start
        if self.num_rows > len(pieces.outputs):  # pieces of several rows: expand them
            counts = pieces.row_end - pieces.row_start
            index = np.repeat(index - (np.cumsum(counts) - counts), counts)
            index += np.arange(self.num_rows, dtype=np.int64)
        positions = torch.from_numpy(index)
        if not storage.is_cpu:
            positions = positions.to(storage.device)
        return torch.index_select(storage, 0, positions, out=out)

    def _arena_starts(self) -> _I64:
        """Where each piece's output starts in the arena, copied in (checked) if needed."""
        pieces, arena = self._pieces, self._arena
        identifiers, outputs, device = pieces.identifiers, pieces.outputs, arena.storage.device

        def check(k: int) -> None:  # E2, E3: what a copy is taken from
            check_encoder_output(pieces.features[k], outputs[k], arena.hidden_size, device=device)

        starts, rows = arena.locate(identifiers, outputs, check, slots=pieces.entries)
        if np.count_nonzero(rows == pieces.num_embeds) != rows.shape[0]:  # not .all()
            k = int(np.flatnonzero(rows != pieces.num_embeds)[0])
            check(k)  # E3; else a current copy of another length: the data was swapped
            raise RuntimeError(f"encoder output of {identifiers[k]!r} changed without a write")
        return starts

    def _views(self) -> list[torch.Tensor]:
        pieces = self._pieces
        starts, ends = pieces.row_start.tolist(), pieces.row_end.tolist()
        return [output[a:b] for output, a, b in zip(pieces.outputs, starts, ends, strict=True)]


def _check_outputs(pieces: PlannedPieces, arena: EncoderOutputArena) -> None:
    """E2, E3: each output read is a ``(num_embeds, hidden_size)`` tensor on the device."""
    e, hidden, device = pieces.num_embeds.tolist(), arena.hidden_size, arena.storage.device
    check_encoder_outputs(pieces.features, pieces.outputs, e, hidden, device)
