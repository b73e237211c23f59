"""gather_mm_embeddings returns (mm_embeds, is_mm_embed) in that order."""

from __future__ import annotations

import torch

from rtmm_protocol import IntArray, MMEmbeddingGatherer


class MaskFirst:
    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 0,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        return torch.zeros(total_num_scheduled_tokens, dtype=torch.bool), []


gatherer: MMEmbeddingGatherer = MaskFirst()  # E: assignment  # P: reportAssignmentType
