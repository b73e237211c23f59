"""draft_lookahead must keep its default of 0, at both levels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from rtmm_protocol import InputBatch, IntArray, MMEmbeddingGatherer, ModelState


class GathererWithoutDefault:
    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
        draft_lookahead: int,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return [], torch.zeros(total_num_scheduled_tokens, dtype=torch.bool)


class StateWithoutDefault:
    is_realtime = False
    supports_mm_inputs = False
    hidden_size = 8
    max_num_tokens = 16
    dtype = torch.float32
    device = torch.device("cpu")

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor | None:
        return None

    def gather_mm_embeddings(
        self, input_batch: InputBatch, draft_lookahead: int
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return [], torch.zeros(input_batch.num_tokens, dtype=torch.bool)

    def get_mm_embeddings(
        self, scheduled_encoder_inputs: Mapping[str, Sequence[int]], input_batch: InputBatch
    ) -> torch.Tensor | None:
        return None


gatherer: MMEmbeddingGatherer = GathererWithoutDefault()  # E: assignment  # P: reportAssignmentType
state: ModelState = StateWithoutDefault()  # E: assignment  # P: reportAssignmentType
