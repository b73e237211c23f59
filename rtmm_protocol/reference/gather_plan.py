"""The result of planning a gather: which slots get which encoder-output rows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import torch

from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.reference.output_pool import EncoderOutputPool
from rtmm_protocol.validation import check_encoder_output

__all__ = ["MMGatherPlan"]


class MMGatherPlan:
    """One step's gather, computed once and materialized in the form the caller needs.

    ``is_mm_embed`` is the SPEC G4 mask (CPU bool tensor over the scheduled tokens) and
    ``slots`` the flat slots that receive a row (int64 CPU tensor, increasing). The rows
    themselves come as one tensor from :meth:`rows` (a single copy; a single
    ``index_select`` when the outputs live in an :class:`EncoderOutputPool`) or as the
    SPEC G6 list of views from :meth:`pieces`.

    A plan reads the cache as it was when planned: use it before the cache changes.
    """

    __slots__ = (
        "_device",
        "_dtype",
        "_features",
        "_hidden_size",
        "_live",
        "_piece_end",
        "_piece_start",
        "_pool",
        "_row_index",
        "_row_piece",
        "_source_ids",
        "_sources",
        "is_mm_embed",
        "slots",
    )

    def __init__(
        self,
        *,
        is_mm_embed: torch.Tensor,
        slots: npt.NDArray[np.int64],
        row_piece: npt.NDArray[np.int64],
        row_index: npt.NDArray[np.int64],
        sources: Sequence[torch.Tensor],
        source_ids: Sequence[str],
        piece_start: npt.NDArray[np.int64],
        piece_end: npt.NDArray[np.int64],
        features: Sequence[MultiModalFeature] | npt.NDArray[np.object_],
        hidden_size: int,
        dtype: torch.dtype,
        device: torch.device,
        pool: EncoderOutputPool | None = None,
        live: Mapping[str, torch.Tensor] | None = None,
    ) -> None:
        #: SPEC G4: True at the slots that receive an encoder-output row.
        self.is_mm_embed = is_mm_embed
        #: The True slots of :attr:`is_mm_embed`, increasing (int64, CPU).
        self.slots = torch.from_numpy(slots)
        self._row_piece = row_piece
        self._row_index = row_index
        self._sources = sources
        self._source_ids = source_ids
        self._piece_start = piece_start
        self._piece_end = piece_end
        self._features = features
        self._hidden_size = hidden_size
        self._dtype = dtype
        self._device = device
        self._pool = pool
        self._live = live

    @property
    def num_rows(self) -> int:
        """Rows gathered: the number of True slots."""
        return int(self._row_index.shape[0])

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
        ``(rows, hidden_size)``: a model merging rows of another width would misplace
        values silently.
        """
        pieces = []
        hidden_size = self._hidden_size
        for source, start, end, feature in zip(
            self._sources,
            self._piece_start.tolist(),
            self._piece_end.tolist(),
            self._features,
            strict=True,
        ):
            if source.dim() != 2 or source.shape[1] != hidden_size:
                check_encoder_output(feature, source, hidden_size)
            piece = source[start:end]
            piece.modality = feature.modality  # type: ignore[attr-defined]  # SPEC G6 attribute
            pieces.append(piece)
        return pieces

    def pool_rows(self) -> npt.NDArray[np.int64]:
        """Pool row of each gathered row, in slot order (int64).

        Outputs not yet in the pool (cached directly in the dict) are mirrored into it
        first. Raises ``ValueError`` when the plan has no pool.
        """
        if self._pool is None:
            raise ValueError("this plan has no encoder-output pool; use rows() or pieces()")
        starts = self._pool.ensure_resident(self._source_ids, self._sources, live=self._live)
        return starts[self._row_piece] + self._row_index

    def rows(self) -> torch.Tensor:
        """All gathered rows in slot order, ``(num_rows, hidden_size)``, as one new tensor.

        With a pool this is one ``index_select`` over the pool; without, the pieces
        are concatenated. Equals ``torch.cat(self.pieces())`` either way.
        """
        if self._pool is not None:
            index = torch.from_numpy(self.pool_rows()).to(self._pool.device, non_blocking=True)
            return self._pool.gather(index)
        if not self._sources:
            return torch.empty(0, self._hidden_size, dtype=self._dtype, device=self._device)
        return torch.cat(self.pieces())
