"""The result of planning a gather: which slots get which encoder-output rows."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import torch

from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.reference.output_arena import EncoderOutputArena
from rtmm_protocol.validation import check_encoder_output

__all__ = ["MMGatherPlan"]

_I64 = npt.NDArray[np.int64]


class MMGatherPlan:
    """One step's gather, computed once and materialized in the form the caller needs.

    ``is_mm_embed`` is the SPEC G4 mask (CPU bool tensor over the scheduled tokens) and
    :attr:`slots` the flat slots that receive a row, increasing. The rows come as one
    tensor from :meth:`rows` (one ``index_select`` over the runner's output arena) or as
    the SPEC G6 list of views of the cached outputs from :meth:`pieces`.

    Internally a plan is a list of *pieces*, one per contributing (request, feature)
    pair: the cached output (``sources``), the feature, and the rows
    ``[row_start, row_end)`` of the output it uses. Row ``j`` of :meth:`rows` is row
    ``j`` of the pieces' concatenation and lands in ``slots[j]``. A plan reads the
    cache as it was when planned: use it before the cache changes.
    """

    def __init__(
        self,
        *,
        is_mm_embed: npt.NDArray[np.bool_],
        slots: _I64,
        sources: Sequence[torch.Tensor],
        source_keys: list[int],
        identifiers: list[str],
        features: Sequence[MultiModalFeature],
        row_start: _I64,
        row_end: _I64,
        num_embeds: _I64,
        arena: EncoderOutputArena,
        single_rows: bool,
    ) -> None:
        #: SPEC G4: True at the slots that receive an encoder-output row.
        self.is_mm_embed = torch.from_numpy(is_mm_embed)
        self._slots = slots
        self._sources = sources
        self._source_keys = source_keys
        self._identifiers = identifiers
        self._features = features
        self._row_start = row_start
        self._row_end = row_end
        self._num_embeds = num_embeds
        self._arena = arena
        self._single_rows = single_rows  # every piece is one row

    @property
    def slots(self) -> torch.Tensor:
        """The True slots of :attr:`is_mm_embed`, increasing (int64, CPU)."""
        return torch.from_numpy(self._slots)

    @property
    def num_rows(self) -> int:
        """Rows gathered: the number of True slots."""
        return int(self._slots.shape[0])

    @property
    def num_pieces(self) -> int:
        """Entries of :meth:`pieces`: (request, feature) pairs that contribute rows."""
        return len(self._sources)

    def pieces(self) -> list[torch.Tensor]:
        """SPEC G6: one view of the cached output per contributing pair, with ``.modality``.

        Raises ``ValueError`` naming the identifier for an output that is not a
        ``(num_embeds, hidden_size)`` tensor on the runner's device: slicing a short one
        would drop rows silently, and a numpy array or a meta tensor has no view to give.
        """
        pieces = []
        hidden_size = self._arena.hidden_size
        device = self._arena.storage.device
        for source, start, end, feature, num_embeds in zip(
            self._sources,
            self._row_start.tolist(),
            self._row_end.tolist(),
            self._features,
            self._num_embeds.tolist(),
            strict=True,
        ):
            if (
                not isinstance(source, torch.Tensor)
                or source.shape != (num_embeds, hidden_size)
                or source.device != device
            ):
                check_encoder_output(feature, source, hidden_size, device=device)
            piece = source[start:end]
            piece.modality = feature.modality  # type: ignore[attr-defined]  # SPEC G6 attribute
            pieces.append(piece)
        return pieces

    def arena_rows(self) -> _I64:
        """The arena row of each gathered row, in slot order (int64).

        Outputs the arena does not hold yet are copied in first. Raises ``ValueError``
        naming the identifier for an output whose shape does not match its feature, and
        :class:`~rtmm_protocol.reference.output_arena.ArenaFullError` when the step's
        outputs do not fit the arena together.
        """
        starts, rows = self._arena.locate(self._identifiers, self._sources, self._source_keys)
        bad = rows != self._num_embeds
        if bad.any():
            k = int(bad.argmax())
            check_encoder_output(self._features[k], self._sources[k], self._arena.hidden_size)
        if self._single_rows:
            return starts + self._row_start
        counts = self._row_end - self._row_start
        before = np.cumsum(counts) - counts
        # Row j of piece k is arena row start_k + row_start_k + (j - rows before piece k).
        first = np.repeat(starts + self._row_start - before, counts)
        index: _I64 = np.arange(first.shape[0], dtype=np.int64) + first
        return index

    def rows(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """All gathered rows in slot order, ``(num_rows, hidden_size)``, by one ``index_select``.

        Equals ``torch.cat(self.pieces())``. ``out``, a contiguous tensor of exactly that
        shape on the arena's dtype and device, receives the rows instead of a new tensor.
        """
        arena = self._arena
        if out is not None:
            expected = (self.num_rows, arena.hidden_size)
            if tuple(out.shape) != expected or not out.is_contiguous():
                raise ValueError(
                    f"out must be a contiguous tensor of shape {expected}, got "
                    f"{tuple(out.shape)}{'' if out.is_contiguous() else ' (not contiguous)'}"
                )
        index = torch.from_numpy(self.arena_rows())
        if not arena.storage.is_cpu:
            index = index.to(arena.storage.device)
        return arena.gather(index, out=out)
