"""A gatherer that still calls the argument computed_prefill_lens is rejected (SPEC T2)."""

from __future__ import annotations

import numpy as np
import torch

from rtmm_protocol import IntArray, MMEmbeddingGatherer


class StillOldName:
    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        computed_prefill_lens: IntArray,
        draft_lookahead: int = 0,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return [], torch.zeros(total_num_scheduled_tokens, dtype=torch.bool)


class RenamedButNoLookahead:
    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return [], torch.zeros(total_num_scheduled_tokens, dtype=torch.bool)


old_name: MMEmbeddingGatherer = StillOldName()  # E: assignment  # P: reportAssignmentType
no_lookahead: MMEmbeddingGatherer = RenamedButNoLookahead()  # E: assignment  # P: reportAssignmentType


def positional_call_through_protocol(gatherer: MMEmbeddingGatherer) -> None:
    # The cost of the keyword-only Protocol parameters: callers typed against the
    # Protocol pass num_computed_tokens and draft_lookahead by keyword.
    a = np.zeros(1, dtype=np.int64)
    gatherer.gather_mm_embeddings(["r"], 1, a, a, a, a)  # E: call-arg  # P: reportCallIssue
