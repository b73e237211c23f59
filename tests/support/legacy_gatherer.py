"""A gatherer written against the contract as it was before the rename, for the compat tests.

It names its last argument ``computed_prefill_lens``, knows no look-ahead and, like every
gatherer of that time, gathers only while a request is still in its prompt. Any missing
encoder output is an error for it.
"""

from __future__ import annotations

import torch

from rtmm_protocol import EncoderCache
from rtmm_protocol.types import IntArray

__all__ = ["PrefillOnlyLegacyGatherer"]


class PrefillOnlyLegacyGatherer:
    """Gathers cached encoder outputs for prompt tokens, with the pre-rename signature."""

    def __init__(self, encoder_cache: EncoderCache) -> None:
        self.encoder_cache = encoder_cache
        self.calls: list[IntArray] = []

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        computed_prefill_lens: IntArray,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Return ``(mm_embeds, is_mm_embed)`` for the prompt tokens of the batch."""
        self.calls.append(computed_prefill_lens)
        is_mm_embed = torch.zeros(total_num_scheduled_tokens, dtype=torch.bool)
        mm_embeds: list[torch.Tensor] = []
        for i, req_id in enumerate(req_ids):
            first_pos = int(computed_prefill_lens[i])
            if first_pos >= int(prefill_lens[i]):
                continue
            stop_pos = first_pos + int(num_scheduled_tokens[i])
            for feature in self.encoder_cache.mm_features.get(req_id, []):
                placeholder = feature.mm_position
                lo = max(first_pos, placeholder.offset)
                hi = min(stop_pos, placeholder.offset + placeholder.length)
                if lo >= hi:
                    continue
                rel_lo, rel_hi = lo - placeholder.offset, hi - placeholder.offset
                row_lo, row_hi = placeholder.get_embeds_indices_in_range(rel_lo, rel_hi)
                if row_lo == row_hi:
                    continue
                output = self.encoder_cache.encoder_outputs.get(feature.identifier)
                if output is None:
                    raise RuntimeError(f"no encoder output cached for {feature.identifier!r}")
                piece = output[row_lo:row_hi]
                piece.modality = feature.modality  # type: ignore[attr-defined]
                mm_embeds.append(piece)
                slot = int(query_start_loc[i]) + lo - first_pos
                if placeholder.is_embed is None:
                    is_mm_embed[slot : slot + hi - lo] = True
                else:
                    is_mm_embed[slot : slot + hi - lo] = placeholder.is_embed[rel_lo:rel_hi]
        return mm_embeds, is_mm_embed
