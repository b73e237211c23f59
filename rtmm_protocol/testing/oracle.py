"""An executable statement of the gather semantics (SPEC G1-G10), one position at a time.

This is the independent side of every differential check: it walks every scheduled
position of every request and asks, in the plainest terms, which feature covers it,
whether it embeds, and which encoder-output row it takes. It shares no code with the
reference implementation (it does not even use ``PlaceholderRange``'s helpers) so
that a mistake in one is not repeated in the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.types import IntArray

__all__ = ["ExpectedPiece", "ExpectedRow", "OracleResult", "oracle_gather"]


@dataclass(frozen=True)
class ExpectedRow:
    """One True slot of the mask and the encoder-output row it receives."""

    slot: int
    req_index: int
    feature_index: int
    identifier: str
    row: int


@dataclass(frozen=True)
class ExpectedPiece:
    """One entry of ``mm_embeds``: rows ``[row_start, row_end)`` of a feature's output."""

    req_index: int
    feature_index: int
    identifier: str
    modality: str
    row_start: int
    row_end: int


@dataclass
class OracleResult:
    """What a conforming gather returns for one call, or the misses that make it raise."""

    mask: list[bool]
    rows: list[ExpectedRow] = field(default_factory=list)
    pieces: list[ExpectedPiece] = field(default_factory=list)
    #: ``(identifier, req_id)`` of each needed output that is missing inside the
    #: scheduled tokens. Non-empty means the call must raise (G7).
    missing: list[tuple[str, str]] = field(default_factory=list)

    @property
    def raises(self) -> bool:
        """Whether a conforming gather must raise for this call."""
        return bool(self.missing)

    def mask_tensor(self) -> torch.Tensor:
        """The expected ``is_mm_embed`` as a CPU bool tensor."""
        return torch.tensor(self.mask, dtype=torch.bool)

    def rows_tensor(
        self, encoder_outputs: Mapping[str, torch.Tensor], hidden_size: int
    ) -> torch.Tensor:
        """The expected ``torch.cat(mm_embeds)``: the gathered rows in slot order."""
        if not self.rows:
            return torch.empty(0, hidden_size)
        return torch.stack([encoder_outputs[r.identifier][r.row].detach().cpu() for r in self.rows])


def _embed_flags(feature: MultiModalFeature) -> list[bool]:
    pos = feature.mm_position
    if pos.is_embed is None:
        return [True] * pos.length
    return [bool(flag) for flag in pos.is_embed.detach().cpu().tolist()]


def oracle_gather(
    mm_features: Mapping[str, Sequence[MultiModalFeature]],
    encoder_outputs: Mapping[str, torch.Tensor],
    *,
    is_realtime: bool,
    req_ids: Sequence[str],
    num_scheduled_tokens: IntArray | Sequence[int],
    query_start_loc: IntArray | Sequence[int],
    prefill_lens: IntArray | Sequence[int],
    num_computed_tokens: IntArray | Sequence[int],
    draft_lookahead: int = 0,
) -> OracleResult:
    """Compute the expected result of a gather call, position by position."""
    total = sum(int(n) for n in num_scheduled_tokens)
    result = OracleResult(mask=[False] * total)
    for i, req_id in enumerate(req_ids):
        computed = int(num_computed_tokens[i])
        scheduled = int(num_scheduled_tokens[i])
        window_start = computed + draft_lookahead
        if not is_realtime and window_start >= int(prefill_lens[i]):
            continue  # G2: a non-realtime request past its prompt gathers nothing
        features = list(mm_features.get(req_id, []))
        flags = [_embed_flags(f) for f in features]
        for k in range(scheduled):
            position = window_start + k
            slot = int(query_start_loc[i]) + k
            for j, feature in enumerate(features):
                offset = feature.mm_position.offset
                if not offset <= position < offset + feature.mm_position.length:
                    continue
                index = position - offset
                if not flags[j][index]:
                    break  # a non-embed position keeps its token embedding
                if feature.identifier not in encoder_outputs:
                    if offset < computed + scheduled:
                        miss = (feature.identifier, req_id)
                        if miss not in result.missing:
                            result.missing.append(miss)
                    break  # a look-ahead-only miss falls back to the token embedding
                # G5: embed position q takes row q, or the count of embed positions before q.
                row = sum(1 for flag in flags[j][:index] if flag)
                result.mask[slot] = True
                result.rows.append(ExpectedRow(slot, i, j, feature.identifier, row))
                break
    result.pieces = _group_pieces(result.rows, mm_features, req_ids)
    return result


def _group_pieces(
    rows: Sequence[ExpectedRow],
    mm_features: Mapping[str, Sequence[MultiModalFeature]],
    req_ids: Sequence[str],
) -> list[ExpectedPiece]:
    pieces: list[ExpectedPiece] = []
    for r in rows:
        last = pieces[-1] if pieces else None
        if last is not None and (last.req_index, last.feature_index) == (
            r.req_index,
            r.feature_index,
        ):
            pieces[-1] = ExpectedPiece(
                last.req_index,
                last.feature_index,
                last.identifier,
                last.modality,
                last.row_start,
                r.row + 1,
            )
        else:
            modality = mm_features[req_ids[r.req_index]][r.feature_index].modality
            pieces.append(
                ExpectedPiece(
                    r.req_index, r.feature_index, r.identifier, modality, r.row, r.row + 1
                )
            )
    return pieces
