"""A gatherer that still calls the argument computed_prefill_lens is rejected (SPEC T2)."""

from __future__ import annotations

import numpy as np
from support.typing_examples import (
    OldNameGatherer,
    PreRenameGatherer,
    RenamedWithoutLookaheadGatherer,
)

from rtmm_protocol import MMEmbeddingGatherer

old_name: MMEmbeddingGatherer = OldNameGatherer()  # E: assignment  # P: reportAssignmentType
pre_rename: MMEmbeddingGatherer = PreRenameGatherer()  # E: assignment  # P: reportAssignmentType
no_lookahead: MMEmbeddingGatherer = RenamedWithoutLookaheadGatherer()  # E: assignment  # P: reportAssignmentType


def positional_call_through_protocol(gatherer: MMEmbeddingGatherer) -> None:
    # The cost of the keyword-only Protocol parameters: callers typed against the
    # Protocol pass num_computed_tokens and draft_lookahead by keyword.
    a = np.zeros(1, dtype=np.int64)
    gatherer.gather_mm_embeddings(["r"], 1, a, a, a, a)  # E: call-arg  # P: reportCallIssue
