"""Gatherers that satisfy MMEmbeddingGatherer, and what calls through the Protocol return."""

from __future__ import annotations

import numpy as np
import torch
from support.typing_examples import KeywordOnlyGatherer, PositionalGatherer
from typing_extensions import assert_type

from rtmm_protocol import EncoderCache, IntArray, MMEmbeddingGatherer
from rtmm_protocol.reference import EncoderRunner
from rtmm_protocol.testing import ToyReplaceModel


def reference_runner() -> EncoderRunner:
    model = ToyReplaceModel(hidden_size=8)
    return EncoderRunner(model, 16, 8, EncoderCache(8), torch.float32, "cpu")


runner: MMEmbeddingGatherer = reference_runner()
keyword_only: MMEmbeddingGatherer = KeywordOnlyGatherer()
positional: MMEmbeddingGatherer = PositionalGatherer()


def gather_through_protocol(gatherer: MMEmbeddingGatherer) -> None:
    counts = np.array([2, 1], dtype=np.int32)
    starts = np.array([0, 2, 3], dtype=np.int64)
    prefill = np.array([4, 4], dtype=np.int32)
    computed = np.array([0, 3], dtype=np.int64)
    mm_embeds, is_mm_embed = gatherer.gather_mm_embeddings(
        ["a", "b"], 3, counts, starts, prefill, num_computed_tokens=computed, draft_lookahead=1
    )
    assert_type(mm_embeds, list[torch.Tensor])
    assert_type(is_mm_embed, torch.Tensor)


def gather_through_reference(runner: EncoderRunner, counts: IntArray) -> None:
    # The concrete class keeps the positional form the Protocol lists.
    result = runner.gather_mm_embeddings(["a"], 2, counts, counts, counts, counts, 0)
    assert_type(result, tuple[list[torch.Tensor], torch.Tensor])
