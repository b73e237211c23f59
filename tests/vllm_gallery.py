"""vLLM ModelRunner V2 subclasses for the adapter's and the gallery's tests: one bug of their
own each, or none.

Importable only where vLLM is (the tests that use it skip elsewhere). The adapter builds
them by name, ``vllm:vllm_gallery:CLASS``, in the suite's worker process (or the calling
one), which finds this module because the tests' folder is on ``sys.path``.

* :class:`CopyingDummyState` hands dummy runs a copy of the persistent ``inputs_embeds``
  buffer instead of a view of it: a CUDA graph captured on the copy would never see the
  embeddings of the real step (SPEC D2). Every other deviation it shows is inherited from
  vLLM's ``DefaultModelState``.
* :class:`PromptExtendingRunner` extends ``prefill_lens`` to cover each step's scheduled
  tokens in the caller's own array before gathering, on top of vLLM's ``EncoderRunner``:
  the engine's batch is changed under it (SPEC G9).
* :class:`PlainSubclassState` changes nothing: all its failures are inherited.
* :class:`OwnHiddenSizeState` assigns ``hidden_size`` in its ``__init__`` (to a wrong
  value): the adapter must show the class's own attribute, not replace it.

The rest is a gallery of own faults, one each, in one clause each, written as a model-state
author would write them: overriding vLLM's methods and post-processing what ``super()``
returns, or reimplementing a piece. :data:`GALLERY` names each class with the check that
must catch it; the suite must report that failure as the class's own, and no check of the
clause as inherited from vLLM's class (tests/test_vllm_gallery.py):

* :class:`ShortDraftWindowRunner` reimplements vLLM's gather but takes each window's end
  before the drafter's look-ahead shift (SPEC G1).
* :class:`FirstDecodeGatheringRunner` counts a request whose window starts at
  ``prefill_len`` as still in its prompt (SPEC G2).
* :class:`PromptOnlyRunner` pins ``is_realtime`` to ``False``: a realtime model's decode
  steps gather nothing (SPEC G3).
* :class:`LateMaskState` shifts every mask bit one slot later (SPEC G1 and G4 both speak of
  the slots; the window check judges it).
* :class:`BufferWideMaskRunner` pads the mask to ``max_num_tokens`` (SPEC G4).
* :class:`DecodeTrimmingState` drops one row when every request of a realtime step decodes
  (SPEC G5).
* :class:`CopiedPiecesRunner` copies the pieces out of the cache (SPEC G6).
* :class:`MissTolerantRunner` answers a cache miss with an empty result instead of an error
  (SPEC G7).
* :class:`FreeingRunner` frees the encoder outputs of placeholders a step finishes (SPEC G8).
* :class:`LookaheadDroppingState` calls the runner-level gather without the look-ahead
  (SPEC G10).
* :class:`UnpaddedEmbedsState` returns ``num_tokens`` rows instead of
  ``num_tokens_after_padding`` (SPEC R2).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from vllm.v1.worker.gpu.mm.encoder_runner import (  # type: ignore[import-not-found, unused-ignore]
    EncoderRunner,
)
from vllm.v1.worker.gpu.model_states.default import (  # type: ignore[import-not-found, unused-ignore]
    DefaultModelState,
)

__all__ = [
    "GALLERY",
    "BufferWideMaskRunner",
    "CopiedPiecesRunner",
    "CopyingDummyState",
    "DecodeTrimmingState",
    "FirstDecodeGatheringRunner",
    "FreeingRunner",
    "LateMaskState",
    "LookaheadDroppingState",
    "MissTolerantRunner",
    "OwnHiddenSizeState",
    "PlainSubclassState",
    "PromptExtendingRunner",
    "PromptOnlyRunner",
    "ShortDraftWindowRunner",
    "UnpaddedEmbedsState",
]

IntArray = npt.NDArray[np.int64]
Gathered = tuple[list[torch.Tensor], torch.Tensor]


class CopyingDummyState(DefaultModelState):  # type: ignore[misc, unused-ignore]
    """vLLM's default model state whose dummy runs get a copy of the buffer (breaks D2)."""

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor:
        buffer: torch.Tensor = super().dummy_inputs_embeds(num_tokens)
        return buffer.clone()


class PromptExtendingRunner(EncoderRunner):  # type: ignore[misc, unused-ignore]
    """vLLM's encoder runner that extends the caller's ``prefill_lens`` in place."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: npt.NDArray[np.int64],
        query_start_loc: npt.NDArray[np.int64],
        prefill_lens: npt.NDArray[np.int64],
        num_computed_tokens: npt.NDArray[np.int64],
        draft_lookahead: int = 0,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        end = num_computed_tokens + num_scheduled_tokens
        np.maximum(prefill_lens, end, out=prefill_lens)  # the bug: the caller's array
        result: tuple[list[torch.Tensor], torch.Tensor] = super().gather_mm_embeddings(
            req_ids,
            total_num_scheduled_tokens,
            num_scheduled_tokens,
            query_start_loc,
            prefill_lens,
            num_computed_tokens,
            draft_lookahead,
        )
        return result


class PlainSubclassState(DefaultModelState):  # type: ignore[misc, unused-ignore]
    """vLLM's default model state under another name: nothing of its own."""


class OwnHiddenSizeState(DefaultModelState):  # type: ignore[misc, unused-ignore]
    """Sets ``hidden_size`` itself, one more than vLLM's ``inputs_embeds_size``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hidden_size = self.inputs_embeds_size + 1


# ---------------------------------------------------------------------- the gallery


class ShortDraftWindowRunner(EncoderRunner):  # type: ignore[misc, unused-ignore]
    """vLLM's gather reimplemented with each window's end taken before the look-ahead (breaks G1)."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 0,
    ) -> Gathered:
        query_end = (num_computed_tokens + num_scheduled_tokens).tolist()  # the bug: unshifted
        query_start = (num_computed_tokens + draft_lookahead).tolist()
        is_mm_embed = torch.zeros(total_num_scheduled_tokens, dtype=torch.bool)
        mm_embeds: list[torch.Tensor] = []
        outputs = self.encoder_cache.encoder_outputs
        for i, req_id in enumerate(req_ids):
            start, end = query_start[i], query_end[i]
            if not self.is_realtime and start >= prefill_lens[i]:
                continue  # a non-realtime request past its prompt
            for feature in self.encoder_cache.mm_features[req_id]:
                position = feature.mm_position
                start_idx = max(start - position.offset, 0)
                end_idx = min(end - position.offset, position.length)
                if start_idx >= end_idx:
                    continue  # the feature lies outside the window
                first, last = position.get_embeds_indices_in_range(start_idx, end_idx)
                if first == last:
                    continue  # no embed position in the window
                output = outputs.get(feature.identifier)
                if output is None:
                    raise RuntimeError(f"Encoder cache miss for {feature.identifier}.")
                piece = output[first:last]
                piece.modality = feature.modality
                slot = int(query_start_loc[i]) + position.offset - start
                is_embed = position.is_embed
                is_mm_embed[slot + start_idx : slot + end_idx] |= (
                    True if is_embed is None else is_embed[start_idx:end_idx]
                )
                mm_embeds.append(piece)
        return mm_embeds, is_mm_embed


class FirstDecodeGatheringRunner(EncoderRunner):  # type: ignore[misc, unused-ignore]
    """vLLM's encoder runner that counts a window starting at prefill_len as prompt (breaks G2)."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 0,
    ) -> Gathered:
        result: Gathered = super().gather_mm_embeddings(
            req_ids,
            total_num_scheduled_tokens,
            num_scheduled_tokens,
            query_start_loc,
            prefill_lens + 1,  # the bug: "the last prompt token's step is still prompt"
            num_computed_tokens,
            draft_lookahead,
        )
        return result


class PromptOnlyRunner(EncoderRunner):  # type: ignore[misc, unused-ignore]
    """vLLM's encoder runner pinned to the prompt-only path, realtime model or not (breaks G3)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.is_realtime = False  # the bug: vLLM's guard is overruled


class LateMaskState(DefaultModelState):  # type: ignore[misc, unused-ignore]
    """vLLM's default model state whose mask bits land one slot late (breaks G1's slots)."""

    def gather_mm_embeddings(self, input_batch: Any, draft_lookahead: int = 0) -> Gathered:
        mm_embeds, is_mm_embed = super().gather_mm_embeddings(input_batch, draft_lookahead)
        shifted = torch.zeros_like(is_mm_embed)
        shifted[1:] = is_mm_embed[:-1]  # the bug: one slot for a BOS token that is not there
        return mm_embeds, shifted


class BufferWideMaskRunner(EncoderRunner):  # type: ignore[misc, unused-ignore]
    """vLLM's encoder runner whose mask covers max_num_tokens, not the scheduled tokens (breaks G4)."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 0,
    ) -> Gathered:
        mm_embeds, is_mm_embed = super().gather_mm_embeddings(
            req_ids,
            total_num_scheduled_tokens,
            num_scheduled_tokens,
            query_start_loc,
            prefill_lens,
            num_computed_tokens,
            draft_lookahead,
        )
        # The bug: a mask as long as the persistent buffer, "for a CUDA graph".
        wide = torch.zeros(self.max_num_tokens, dtype=torch.bool)
        wide[:total_num_scheduled_tokens] = is_mm_embed
        return mm_embeds, wide


class DecodeTrimmingState(DefaultModelState):  # type: ignore[misc, unused-ignore]
    """vLLM's default model state that drops a row when a realtime step only decodes (breaks G5)."""

    def gather_mm_embeddings(self, input_batch: Any, draft_lookahead: int = 0) -> Gathered:
        mm_embeds, is_mm_embed = super().gather_mm_embeddings(input_batch, draft_lookahead)
        start = input_batch.num_computed_tokens_np + draft_lookahead
        decoding = bool((start >= input_batch.prefill_len_np).all())
        if self.encoder_runner.is_realtime and decoding and mm_embeds:
            last = mm_embeds[-1]
            if last.shape[0] > 1:
                mm_embeds[-1] = last[:-1]  # the bug: "the newest row belongs to the next step"
        return mm_embeds, is_mm_embed


class CopiedPiecesRunner(EncoderRunner):  # type: ignore[misc, unused-ignore]
    """vLLM's encoder runner that hands out copies of the cached rows, not views (breaks G6)."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 0,
    ) -> Gathered:
        mm_embeds, is_mm_embed = super().gather_mm_embeddings(
            req_ids,
            total_num_scheduled_tokens,
            num_scheduled_tokens,
            query_start_loc,
            prefill_lens,
            num_computed_tokens,
            draft_lookahead,
        )
        # The bug: "so that freeing an output cannot pull rows from under the merge".
        return [piece.clone() for piece in mm_embeds], is_mm_embed


class MissTolerantRunner(EncoderRunner):  # type: ignore[misc, unused-ignore]
    """vLLM's encoder runner that answers a cache miss with an empty result, not an error (breaks G7)."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 0,
    ) -> Gathered:
        try:
            result: Gathered = super().gather_mm_embeddings(
                req_ids,
                total_num_scheduled_tokens,
                num_scheduled_tokens,
                query_start_loc,
                prefill_lens,
                num_computed_tokens,
                draft_lookahead,
            )
        except RuntimeError:
            # The bug: "fall back to token embeddings", for every miss of the step.
            return [], torch.zeros(total_num_scheduled_tokens, dtype=torch.bool)
        return result


class FreeingRunner(EncoderRunner):  # type: ignore[misc, unused-ignore]
    """vLLM's encoder runner that frees the outputs of placeholders a step finishes (breaks G8)."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 0,
    ) -> Gathered:
        result: Gathered = super().gather_mm_embeddings(
            req_ids,
            total_num_scheduled_tokens,
            num_scheduled_tokens,
            query_start_loc,
            prefill_lens,
            num_computed_tokens,
            draft_lookahead,
        )
        # The bug: freeing is the scheduler's decision, not the gather's.
        starts = (num_computed_tokens + draft_lookahead).tolist()
        ends = (num_computed_tokens + draft_lookahead + num_scheduled_tokens).tolist()
        for i, req_id in enumerate(req_ids):
            if not self.is_realtime and starts[i] >= prefill_lens[i]:
                continue
            for feature in self.encoder_cache.mm_features[req_id]:
                position = feature.mm_position
                if starts[i] < position.offset + position.length <= ends[i]:
                    self.encoder_cache.encoder_outputs.pop(feature.identifier, None)
        return result


class LookaheadDroppingState(DefaultModelState):  # type: ignore[misc, unused-ignore]
    """vLLM's default model state whose gather does not pass the look-ahead on (breaks G10)."""

    def gather_mm_embeddings(self, input_batch: Any, draft_lookahead: int = 0) -> Gathered:
        result: Gathered = self.encoder_runner.gather_mm_embeddings(
            input_batch.req_ids,
            input_batch.num_tokens,
            input_batch.num_scheduled_tokens,
            input_batch.query_start_loc_np,
            input_batch.prefill_len_np,
            input_batch.num_computed_tokens_np,
        )  # the bug: draft_lookahead=draft_lookahead is missing
        return result


#: What vLLM's runner calls for one step: ``prepare_inputs_embeds`` since vLLM 0.29,
#: ``get_mm_embeddings`` in 0.28.
_STEP_METHOD = (
    "prepare_inputs_embeds"
    if hasattr(DefaultModelState, "prepare_inputs_embeds")
    else "get_mm_embeddings"
)


class UnpaddedEmbedsState(DefaultModelState):  # type: ignore[misc, unused-ignore]
    """vLLM's default model state that returns num_tokens rows, not the padded count (breaks R2)."""

    def prepare_inputs_embeds(
        self, scheduled_encoder_inputs: Any, input_batch: Any, req_states: Any
    ) -> torch.Tensor:
        embeds: torch.Tensor = getattr(super(), _STEP_METHOD)(
            scheduled_encoder_inputs, input_batch, req_states
        )
        return embeds[: input_batch.num_tokens]  # the bug: the padding rows are cut off

    if _STEP_METHOD == "get_mm_embeddings":  # vLLM 0.28 calls the step by this name
        get_mm_embeddings = prepare_inputs_embeds


#: Each gallery class and the check that must catch its one fault, as the class's own.
GALLERY: dict[str, str] = {
    "ShortDraftWindowRunner": "G1-window-slots",
    "LateMaskState": "G1-window-slots",
    "FirstDecodeGatheringRunner": "G2-nonrealtime-decode-skipped",
    "PromptOnlyRunner": "G3-realtime-decode-gathers",
    "BufferWideMaskRunner": "G4-mask-type-shape",
    "DecodeTrimmingState": "G5-rows-match-mask",
    "CopiedPiecesRunner": "G6-pieces-are-views",
    "MissTolerantRunner": "G7-missing-output-raises",
    "FreeingRunner": "G8-cache-unchanged",
    "PromptExtendingRunner": "G9-inputs-unchanged",
    "LookaheadDroppingState": "G10-state-matches-oracle",
    "CopyingDummyState": "D2-dummy-views-share-storage",
    "UnpaddedEmbedsState": "R2-returns-padded-buffer-slice",
}
