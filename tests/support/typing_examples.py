"""Example classes for the typecheck command and the signature check: some conform, some not.

Each class's docstring says what is wrong with it, and which checks catch it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import torch

from rtmm_protocol import InputBatch, IntArray


class KeywordOnlyGatherer:
    """Conforms: the two post-rename arguments are keyword-only, as in the Protocol."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        *,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 0,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return [], torch.zeros(total_num_scheduled_tokens, dtype=torch.bool)


class OldNameGatherer:
    """Pre-rename signature: ``computed_prefill_lens`` and no look-ahead (every check)."""

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


class LookaheadDefaultOneGatherer(KeywordOnlyGatherer):
    """``draft_lookahead`` defaults to 1: only the run-time check sees default values."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        *,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 1,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return [], torch.zeros(total_num_scheduled_tokens, dtype=torch.bool)


class TextOnlyState:
    """Conforms: a text-only model state, no ``inputs_embeds`` path."""

    def __init__(self, hidden_size: int = 8, max_num_tokens: int = 16) -> None:
        self.is_realtime = False
        self.supports_mm_inputs = False
        self.hidden_size = hidden_size
        self.max_num_tokens = max_num_tokens
        self.dtype = torch.float32
        self.device = torch.device("cpu")

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor | None:
        return None

    def gather_mm_embeddings(
        self, input_batch: InputBatch, draft_lookahead: int = 0
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return [], torch.zeros(input_batch.num_tokens, dtype=torch.bool)

    def get_mm_embeddings(
        self, scheduled_encoder_inputs: Mapping[str, Sequence[int]], input_batch: InputBatch
    ) -> torch.Tensor | None:
        return None


class NumpyDummyState(TextOnlyState):
    """``dummy_inputs_embeds`` returns a numpy array: a type error only the checkers see."""

    def dummy_inputs_embeds(self, num_tokens: int) -> npt.NDArray[np.float32]:  # type: ignore[override]
        return np.zeros((num_tokens, self.hidden_size), dtype=np.float32)


class NoLookaheadDefaultState(TextOnlyState):
    """``draft_lookahead`` lost its default: every check rejects it."""

    def gather_mm_embeddings(  # type: ignore[override]
        self, input_batch: InputBatch, draft_lookahead: int
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return [], torch.zeros(input_batch.num_tokens, dtype=torch.bool)


class NeitherStateNorGatherer:
    """Has none of the contract's methods, so no Protocol can be chosen for it."""

    def forward(self) -> None:
        return None
