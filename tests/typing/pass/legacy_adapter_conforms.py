"""The compat adapter turns a pre-rename gatherer into an MMEmbeddingGatherer."""

from __future__ import annotations

import torch
from typing_extensions import assert_type

from rtmm_protocol import IntArray, MMEmbeddingGatherer
from rtmm_protocol.compat import LegacyGathererAdapter, adapt_legacy_gatherer


class PreRenameGatherer:
    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        computed_prefill_lens: IntArray,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return [], torch.zeros(total_num_scheduled_tokens, dtype=torch.bool)


adapted = adapt_legacy_gatherer(PreRenameGatherer())
assert_type(adapted, LegacyGathererAdapter)
gatherer: MMEmbeddingGatherer = adapted
