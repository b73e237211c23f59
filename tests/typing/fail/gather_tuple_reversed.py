"""gather_mm_embeddings returns (mm_embeds, is_mm_embed) in that order."""

from __future__ import annotations

from support.typing_examples import MaskFirstGatherer

from rtmm_protocol import MMEmbeddingGatherer

gatherer: MMEmbeddingGatherer = MaskFirstGatherer()  # E: assignment  # P: reportAssignmentType
