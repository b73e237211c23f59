"""draft_lookahead must keep its default, at both levels (its value is not checked statically)."""

from __future__ import annotations

from support.typing_examples import (
    LookaheadDefaultOneGatherer,
    LookaheadWithoutDefaultGatherer,
    NoLookaheadDefaultState,
)

from rtmm_protocol import MMEmbeddingGatherer, ModelState

gatherer: MMEmbeddingGatherer = LookaheadWithoutDefaultGatherer()  # E: assignment  # P: reportAssignmentType
state: ModelState = NoLookaheadDefaultState()  # E: assignment  # P: reportAssignmentType
# A default of 1 instead of 0 passes both checkers: only the run-time check catches it.
default_one: MMEmbeddingGatherer = LookaheadDefaultOneGatherer()
