"""One request's window (clause G1) and what gathering over it adds (G4 to G7)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from rtmm_protocol import EncoderOutputMissingError, MultiModalFeature
from rtmm_protocol.modality import with_modality
from rtmm_protocol.validation import check_encoder_output

__all__ = ["RequestWindow", "gather_window"]


@dataclass(frozen=True)
class RequestWindow:
    """The positions request ``req_id`` covers this step, and the flat slots they fill."""

    req_id: str
    start: int  # num_computed_tokens[i] + draft_lookahead
    num_tokens: int  # num_scheduled_tokens[i]
    first_slot: int  # query_start_loc[i]
    scheduled_end: int  # num_computed_tokens[i] + num_scheduled_tokens[i], without look-ahead

    @property
    def end(self) -> int:
        """One past the last position of the window."""
        return self.start + self.num_tokens

    def slot(self, position: int) -> int:
        """The flat batch slot of ``position`` (G1)."""
        return self.first_slot + position - self.start


def gather_window(
    window: RequestWindow,
    features: Sequence[MultiModalFeature],
    encoder_outputs: Mapping[str, torch.Tensor],
    hidden_size: int,
    is_mm_embed: torch.Tensor,
    pieces: list[torch.Tensor],
) -> None:
    """Append this window's pieces, in feature order, and set their slots in the mask."""
    for feature in features:
        pos = feature.mm_position
        lo = max(window.start, pos.offset)
        hi = min(window.end, pos.offset + pos.length)
        if lo >= hi:
            continue  # the placeholder and the window do not meet
        first_row, end_row = pos.get_embeds_indices_in_range(lo - pos.offset, hi - pos.offset)
        if first_row == end_row:
            continue  # only non-embed positions in the window: no output needed (G7)
        output = encoder_outputs.get(feature.identifier)
        if output is None:
            if pos.offset >= window.scheduled_end:
                continue  # reached only through the look-ahead: token embeddings (G7)
            raise EncoderOutputMissingError(feature.identifier, window.req_id)
        # The suite (like an engine) writes outputs into the dict directly, so check here
        # that this one fits its feature before slicing it (E2, E3).
        check_encoder_output(feature, output, hidden_size)
        pieces.append(with_modality(output[first_row:end_row], feature.modality))  # G5, G6
        slots = slice(window.slot(lo), window.slot(hi))
        if pos.is_embed is None:
            is_mm_embed[slots] = True
        else:
            is_mm_embed[slots] = pos.is_embed[lo - pos.offset : hi - pos.offset].cpu()
