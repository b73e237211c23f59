"""A gallery of deliberately broken targets, each breaking one clause of the contract.

:class:`FaultyGatherer` is a straightforward runner-level gather written for this file
(independent of the reference's vectorized one), with named *faults* that can be
switched on one at a time: the realtime flag ignored, the look-ahead ignored in one
place, slots computed without ``query_start_loc``, ``is_embed`` ignored, copies instead
of views... :class:`FaultyModelState` does the same for the state-level clauses (the
dummy buffer, the real path). With no fault, both conform; the gallery tests assert
that, and that each faulty target fails the check of the clause its fault breaks and
no check of another clause.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import numpy as np
import torch

from rtmm_conformance import ConformanceContext
from rtmm_protocol import EncoderOutputMissingError, MultiModalFeature
from rtmm_protocol.protocols import InputBatch, MultiModalModel
from rtmm_protocol.reference import EncoderRunner, ReferenceModelState
from rtmm_protocol.types import IntArray
from rtmm_protocol.validation import (
    check_encoder_output,
    check_feature_list,
    check_gather_args,
    check_input_batch,
    check_scheduled_encoder_inputs,
)

__all__ = [
    "GALLERY",
    "BrokenTarget",
    "CrossAttentionState",
    "FaultyGatherer",
    "FaultyModelState",
    "HookedModelState",
    "LegacyNamedGatherer",
    "LookaheadDefaultGatherer",
    "MissEmptiesStepGatherer",
    "cross_attention_state",
    "hooked_state",
    "tampering",
    "untamper",
]

#: Faults of the runner-level gather, by name.
GATHER_FAULTS = (
    "realtime-ignored",
    "all-decode-early-exit",
    "truthy-realtime-flag",
    "lookahead-ignored-in-window",
    "lookahead-ignored-in-skip",
    "slots-without-query-start-loc",
    "is-embed-ignored",
    "off-by-one-embed-rows",
    "mask-int64",
    "copies-not-views",
    "no-modality",
    "piece-per-position",
    "raises-at-processed-end",
    "miss-returns-partial",
    "non-embed-window-raises",
    "memoizes-into-cache",
    "mutates-inputs",
    "reads-skipped-outputs",
    "stale-feature-memo",
    "field-not-named",
    "accepts-malformed",
    "wrong-exception-type",
    "feature-error-without-identifier",
    "empty-piece-for-non-embed-window",
    "stale-output-memo",
    "refuses-replaced-items",
    "long-feature-row-dropped",
)


#: Kinds of window a request of a step can have (a request can be of several).
WINDOW_KINDS = (
    "prefill",
    "chunked-prefill",
    "realtime-decode",
    "look-ahead",
    "masked",
    "zero-token",
)

#: What ``CLAUSE@KIND`` does to windows of that kind (G1's shift and the zero-token
#: contributions are coded in the gather itself).
_KIND_FAULTS = {
    "G4": "is-embed-ignored",
    "G5": "rows-shifted-by-one",
    "G6": "copies-not-views",
    "G7": "miss-returns-partial",
    "G5short": "last-row-dropped",
}


def _window_kinds(
    computed: int, lookahead: int, count: int, prefill_len: int, realtime: bool
) -> set[str]:
    """The kinds of one request's window (``masked`` is a property of a feature)."""
    start = computed + lookahead
    kinds = {"look-ahead"} if lookahead else set()
    if count == 0:
        kinds.add("zero-token")
    elif start >= prefill_len:
        kinds.add("realtime-decode" if realtime else "decode")
    else:
        kinds.add("prefill" if computed == 0 else "chunked-prefill")
    return kinds


class FaultyGatherer(EncoderRunner):
    """A runner whose gather can have one named fault (``fault=None``: conforming)."""

    def __init__(self, *args: Any, fault: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        clause, _, kind = (fault or "").partition("@")
        if fault is not None and fault not in GATHER_FAULTS and kind not in WINDOW_KINDS:
            raise ValueError(f"unknown gather fault {fault!r}")
        self.fault = fault
        #: For a fault ``CLAUSE@KIND``: the clause it breaks, on that kind of window only.
        self._kind_clause: str | None = clause if kind else None
        self._kind: str | None = kind or None
        self._feature_memo: dict[str, list[MultiModalFeature]] = {}
        self._output_memo: dict[str, torch.Tensor] = {}
        self._seen_items: dict[str, MultiModalFeature] = {}
        if fault == "truthy-realtime-flag":
            self.is_realtime = bool(getattr(self.model, "supports_realtime", False))
        elif fault == "realtime-ignored":
            self.is_realtime = False

    # ------------------------------------------------------------------ validation

    def _check_batch(self, check: Callable[[], object]) -> bool:
        """Run the batch check; False means "answer with an empty result" (a fault)."""
        try:
            check()
        except ValueError as error:
            if self.fault == "field-not-named":
                raise ValueError("malformed batch") from None
            if self.fault == "accepts-malformed":
                return False
            if self.fault == "wrong-exception-type":
                raise IndexError(str(error)) from None
            raise
        return True

    def _check_feature(self, check: Callable[[], None]) -> None:
        try:
            check()
        except ValueError:
            if self.fault == "feature-error-without-identifier":
                raise ValueError("malformed feature") from None
            raise

    def _masked_in(self, req_id: str) -> bool:
        """Whether a ``G1@masked`` fault applies to the request: it has a masked feature."""
        return self._kind == "masked" and any(
            f.mm_position.is_embed is not None for f in self._features(req_id)
        )

    def _zero_token_fault(self, req_id: str, start: int) -> list[torch.Tensor]:
        """What a zero-token request wrongly contributes: ``G1``, the row at its window start;
        ``G6``, an empty piece of the feature there."""
        for feature in self._features(req_id):
            pos, output = feature.mm_position, self._output(feature.identifier)
            if output is None or not pos.offset <= start < pos.offset + pos.length:
                continue
            row, _ = pos.get_embeds_indices_in_range(start - pos.offset, start - pos.offset)
            piece = output[row : row + (1 if self._kind_clause == "G1" else 0)]
            piece.modality = feature.modality  # type: ignore[attr-defined]
            return [piece] if piece.shape[0] or self._kind_clause == "G6" else []
        return []

    def _features(self, req_id: str) -> list[MultiModalFeature]:
        features = list(self.encoder_cache.mm_features.get(req_id, ()))
        if self.fault == "stale-feature-memo":
            return self._feature_memo.setdefault(req_id, features)
        if self.fault == "refuses-replaced-items":
            for feature in features:  # "features never change once registered"
                if self._seen_items.setdefault(feature.identifier, feature) is not feature:
                    raise RuntimeError(f"feature {feature.identifier!r} changed behind my back")
        return features

    def _output(self, identifier: str) -> torch.Tensor | None:
        output = self.encoder_cache.encoder_outputs.get(identifier)
        if self.fault == "stale-output-memo" and output is not None:
            # "an identifier's output never changes while it is cached"
            return self._output_memo.setdefault(identifier, output)
        return output

    # ------------------------------------------------------------------ the gather

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 0,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The gather of SPEC G1-G10, position range by position range."""
        fault = self.fault
        if self.validate:
            ok = self._check_batch(
                partial(
                    check_gather_args,
                    req_ids,
                    total_num_scheduled_tokens,
                    num_scheduled_tokens,
                    query_start_loc,
                    prefill_lens,
                    num_computed_tokens,
                    draft_lookahead,
                    known_req_ids=self.encoder_cache.mm_features,
                )
            )
            if not ok:
                return [], torch.zeros(0, dtype=torch.bool)
        elif draft_lookahead < 0:
            raise ValueError(f"draft_lookahead must be >= 0, got {draft_lookahead}")
        computed = np.array(num_computed_tokens, dtype=np.int64)
        if fault == "mutates-inputs":
            num_computed_tokens += draft_lookahead  # the classic: shifting the caller's array
        mask = np.zeros(int(total_num_scheduled_tokens), dtype=np.bool_)
        pieces: list[torch.Tensor] = []
        starts = computed + draft_lookahead
        decoding = starts >= np.asarray(prefill_lens)
        if fault == "all-decode-early-exit" and len(req_ids) and bool(decoding.all()):
            return [], torch.from_numpy(mask)  # kept from before realtime models existed
        outputs = self.encoder_cache.encoder_outputs
        if fault == "reads-skipped-outputs":
            for req_id in req_ids:  # "prefetch" every output of the batch
                for feature in self._features(req_id):
                    outputs.get(feature.identifier)
        for i, req_id in enumerate(req_ids):
            count = int(num_scheduled_tokens[i])
            kinds = _window_kinds(
                int(computed[i]), draft_lookahead, count, int(prefill_lens[i]), self.is_realtime
            )
            if count == 0:
                if self._kind_clause in ("G1", "G6") and self._kind in kinds:
                    pieces.extend(self._zero_token_fault(req_id, int(starts[i])))
                continue
            start = int(starts[i])
            if self._kind_clause == "G1" and (self._kind in kinds or self._masked_in(req_id)):
                start += 1  # the window of this kind of request misplaced by one position
            if fault == "lookahead-ignored-in-window":
                start = int(computed[i])
            skip_from = int(computed[i]) if fault == "lookahead-ignored-in-skip" else int(starts[i])
            if not self.is_realtime and skip_from >= int(prefill_lens[i]):
                continue
            base = 0 if fault == "slots-without-query-start-loc" else int(query_start_loc[i])
            features = self._features(req_id)
            if self.validate:
                self._check_feature(partial(check_feature_list, req_id, features))
            for feature in features:
                masked = feature.mm_position.is_embed is not None and self._kind == "masked"
                active = self._kind in kinds or masked
                own_fault = _KIND_FAULTS.get(self._kind_clause or "") if active else None
                piece = self._gather_feature(
                    req_id, feature, start, count, int(computed[i]), base, mask,
                    fault if self._kind_clause is None else own_fault,
                )  # fmt: skip
                pieces.extend(piece)
        is_mm_embed = torch.from_numpy(mask)
        if fault == "mask-int64":
            is_mm_embed = is_mm_embed.to(torch.int64)
        return pieces, is_mm_embed

    def _gather_feature(
        self,
        req_id: str,
        feature: MultiModalFeature,
        start: int,
        count: int,
        computed: int,
        base: int,
        mask: np.ndarray,
        fault: str | None,
    ) -> list[torch.Tensor]:
        pos = feature.mm_position
        lo = max(start, pos.offset) - pos.offset
        hi = min(start + count, pos.offset + pos.length) - pos.offset
        if hi <= lo:
            return []
        row_start, row_end = pos.get_embeds_indices_in_range(lo, hi)
        if row_start == row_end and fault not in (
            "non-embed-window-raises",
            "empty-piece-for-non-embed-window",
        ):
            return []  # only non-embed positions: nothing needed
        outputs = self.encoder_cache.encoder_outputs
        output = self._output(feature.identifier)
        if output is None and row_start == row_end and fault != "non-embed-window-raises":
            return []
        if output is None:
            scheduled_end = computed + count
            reached_by_lookahead_only = (
                pos.offset > scheduled_end
                if fault == "raises-at-processed-end"
                else pos.offset >= scheduled_end
            )
            if reached_by_lookahead_only or fault == "miss-returns-partial":
                return []
            raise EncoderOutputMissingError(feature.identifier, req_id)
        self._check_feature(partial(check_encoder_output, feature, output, self.hidden_size))
        if row_start == row_end and fault == "empty-piece-for-non-embed-window":
            empty = output[row_start:row_end]  # a 0-row piece instead of none
            empty.modality = feature.modality  # type: ignore[attr-defined]
            return [empty]
        if row_start == row_end:
            return []
        if fault == "off-by-one-embed-rows" and pos.is_embed is not None:
            row_start, row_end = row_start + 1, row_end + 1
        if fault == "last-row-dropped" and row_end - row_start >= 2:
            row_end -= 1  # one row too few for the True slots
        if fault == "long-feature-row-dropped" and pos.length >= 5 and row_end - row_start >= 2:
            row_end -= 1  # as above, for long features only: random examples find it
        if fault == "rows-shifted-by-one":  # still a view of the right output, wrong rows
            shift = 1 if row_end < output.shape[0] else -1 if row_start > 0 else 0
            row_start, row_end = row_start + shift, row_end + shift
        piece = output[row_start:row_end]
        if fault == "copies-not-views":
            piece = piece.clone()
        if fault == "memoizes-into-cache":
            outputs[f"{feature.identifier}#rows{row_start}"] = piece
        flags = (
            np.ones(hi - lo, dtype=np.bool_)
            if pos.is_embed is None or fault == "is-embed-ignored"
            else pos.is_embed[lo:hi].cpu().numpy()
        )
        first_slot = base + pos.offset + lo - start
        mask[first_slot : first_slot + hi - lo] = flags
        parts = (
            [piece[k : k + 1] for k in range(piece.shape[0])]
            if fault == "piece-per-position"
            else [piece]
        )
        if fault != "no-modality":
            for part in parts:
                part.modality = feature.modality  # type: ignore[attr-defined]
        return parts


class LegacyNamedGatherer(FaultyGatherer):
    """A gatherer that still calls the argument ``computed_prefill_lens`` (T2)."""

    def gather_mm_embeddings(  # type: ignore[override]
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        computed_prefill_lens: IntArray,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The pre-rename signature."""
        return super().gather_mm_embeddings(
            req_ids,
            total_num_scheduled_tokens,
            num_scheduled_tokens,
            query_start_loc,
            prefill_lens,
            computed_prefill_lens,
        )


class LookaheadDefaultGatherer(FaultyGatherer):
    """A gatherer whose ``draft_lookahead`` defaults to 1 instead of 0 (T2)."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 1,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The gather, with the wrong default."""
        return super().gather_mm_embeddings(
            req_ids,
            total_num_scheduled_tokens,
            num_scheduled_tokens,
            query_start_loc,
            prefill_lens,
            num_computed_tokens,
            draft_lookahead,
        )


class MissEmptiesStepGatherer(FaultyGatherer):
    """A gatherer that answers a missing output with an empty step instead of an error (G7)."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 0,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The gather, or ``([], an all-False mask)`` once it meets a miss."""
        try:
            return super().gather_mm_embeddings(
                req_ids,
                total_num_scheduled_tokens,
                num_scheduled_tokens,
                query_start_loc,
                prefill_lens,
                num_computed_tokens,
                draft_lookahead,
            )
        except EncoderOutputMissingError:
            return [], torch.zeros(int(total_num_scheduled_tokens), dtype=torch.bool)


#: Faults of the state-level paths, by name.
STATE_FAULTS = (
    "hidden-size-wrong",
    "drops-lookahead",
    "late-mask",
    "dummy-reallocates",
    "separate-real-buffer",
    "dummy-ignores-size",
    "text-only-buffer",
    "dummy-reads-cache",
    "dummy-encodes-realtime",
    "oversize-dummy-clamps",
    "reencodes-cached",
    "returns-unpadded",
    "merges-by-replacing",
    "skips-decode-merge",
    "oversize-batch-clamps",
    "dummy-fresh-copy",
)


class FaultyModelState(ReferenceModelState):
    """The reference state with one named fault in its own paths."""

    def __init__(self, *args: Any, fault: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if fault is not None and fault not in STATE_FAULTS:
            raise ValueError(f"unknown state fault {fault!r}")
        self.fault = fault
        if fault == "hidden-size-wrong":
            self.hidden_size = self.hidden_size + 1
        self._text_buffer = None
        if fault == "text-only-buffer" and self.inputs_embeds is None:
            self._text_buffer = torch.zeros(
                self.max_num_tokens, self.hidden_size, dtype=self.dtype, device=self.device
            )
        self._other_buffer = (
            torch.zeros_like(self.inputs_embeds) if self.inputs_embeds is not None else None
        )

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor | None:
        """The dummy view, with this state's fault."""
        fault = self.fault
        if fault == "oversize-dummy-clamps":
            num_tokens = min(max(num_tokens, 0), self.max_num_tokens)
        if fault == "dummy-reads-cache":
            list(self.encoder_cache.encoder_outputs.items())  # a "warm-up" of the cache
        if fault == "dummy-encodes-realtime" and self.is_realtime:
            feature_dim = int(getattr(self.model, "feature_dim", 8))
            self.model.embed_multimodal(  # type: ignore[union-attr]
                input_features=torch.zeros(1, feature_dim, device=self.device)
            )
        view = super().dummy_inputs_embeds(num_tokens)
        if fault == "dummy-reallocates" and view is not None:
            return torch.zeros(num_tokens, self.hidden_size, dtype=self.dtype, device=self.device)
        if fault == "dummy-fresh-copy" and view is not None:
            # A copy made per call and freed when the caller drops it: the allocator may
            # hand its address to the next call's copy.
            return view.clone()
        if fault == "text-only-buffer" and self._text_buffer is not None:
            return self._text_buffer[:num_tokens]
        if fault == "dummy-ignores-size" and self.inputs_embeds is not None:
            return self.inputs_embeds
        return view

    def gather_mm_embeddings(
        self, input_batch: InputBatch, draft_lookahead: int = 0
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The state-level gather, with this state's fault."""
        if self.fault == "drops-lookahead":
            draft_lookahead = 0
        pieces, mask = super().gather_mm_embeddings(input_batch, draft_lookahead)
        if self.fault == "late-mask":  # every bit one slot late; the real path is untouched
            late = torch.zeros_like(mask)
            late[1:] = mask[:-1]
            return pieces, late
        return pieces, mask

    def get_mm_embeddings(
        self,
        scheduled_encoder_inputs: Mapping[str, Sequence[int]],
        input_batch: InputBatch,
        req_states: object = None,
    ) -> torch.Tensor | None:
        """The real path, with this state's fault."""
        fault = self.fault
        if fault == "reencodes-cached":
            self._encode_everything(scheduled_encoder_inputs)
        too_big = int(input_batch.num_tokens_after_padding) > self.max_num_tokens
        if fault == "oversize-batch-clamps" and too_big and self.inputs_embeds is not None:
            return self.inputs_embeds[: self.max_num_tokens]  # "the rest did not fit"
        result = super().get_mm_embeddings(scheduled_encoder_inputs, input_batch, req_states)
        if result is None:
            return None
        if fault in ("merges-by-replacing", "skips-decode-merge"):
            self._own_merge(input_batch)
        if fault == "separate-real-buffer" and self._other_buffer is not None:
            # The merged rows end up in a second buffer only; the dummy runs' one keeps
            # what it had before the step.
            self._other_buffer[: result.shape[0]].copy_(result)
            result.zero_()
            return self._other_buffer[: result.shape[0]]
        if fault == "returns-unpadded":
            return result[: int(input_batch.num_tokens)]
        return result

    def _encode_everything(self, scheduled: Mapping[str, Sequence[int]]) -> None:
        for req_id, indices in scheduled.items():
            for index in indices:
                feature = self.encoder_cache.mm_features[req_id][index]
                if isinstance(feature.data, Mapping):
                    model: MultiModalModel = self.model  # type: ignore[assignment]
                    output = model.embed_multimodal(**feature.data)[0].to(self.dtype)
                    self.encoder_cache.encoder_outputs[feature.identifier] = output

    def _own_merge(self, batch: InputBatch) -> None:
        """Redo the merge the state's own way instead of the model's (the fault)."""
        assert self.inputs_embeds is not None
        n = int(batch.num_tokens)
        ids = batch.input_ids[:n]
        merged = self.model.embed_input_ids(ids)
        decoding = np.asarray(batch.num_computed_tokens_np) >= np.asarray(batch.prefill_len_np)
        if self.fault == "skips-decode-merge" and len(batch.req_ids) and bool(decoding.all()):
            pass  # "nothing multimodal happens on decode steps"
        else:
            pieces, mask = self.gather_mm_embeddings(batch)
            if pieces and self.fault == "merges-by-replacing":
                merged[mask.to(self.device)] = torch.cat(pieces).to(merged.dtype)
            elif pieces:
                merged = self.model.embed_input_ids(ids, pieces, mask.to(self.device))
        self.inputs_embeds[:n].copy_(merged)


#: Faults of the model-inputs hooks (SPEC M1), by name.
HOOK_FAULTS = ("capture-own-buffer", "capture-copy", "override-re-embeds", "prepare-inputs-raises")


class HookedModelState(ReferenceModelState):
    """The reference state with the model-inputs hooks as vLLM's ``DefaultModelState`` has
    them (a capture reads the persistent buffer, a real step overrides nothing), and one
    named fault in them."""

    def __init__(self, *args: Any, fault: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if fault is not None and fault not in HOOK_FAULTS:
            raise ValueError(f"unknown hook fault {fault!r}")
        self.fault = fault
        self._capture_buffer = (
            torch.zeros_like(self.inputs_embeds) if self.inputs_embeds is not None else None
        )

    def prepare_inputs(self, input_batch: InputBatch, req_states: object) -> dict[str, Any]:
        """The step's own model inputs, with this state's fault."""
        if self.fault == "prepare-inputs-raises":
            raise RuntimeError("positions for this batch are not ready")
        if self.fault == "override-re-embeds" and self.inputs_embeds is not None:
            # The tokens' own embeddings written over the merge: no multimodal row is left.
            n = int(input_batch.num_tokens)
            self.inputs_embeds[:n] = self.model.embed_input_ids(input_batch.input_ids[:n])
            return {
                "inputs_embeds": self.inputs_embeds[: int(input_batch.num_tokens_after_padding)]
            }
        return {}

    def prepare_dummy_inputs(self, num_reqs: int, num_tokens: int) -> dict[str, Any]:
        """What a CUDA graph is captured on, with this state's fault."""
        view = self.dummy_inputs_embeds(num_tokens)
        if self.fault == "capture-own-buffer" and self._capture_buffer is not None:
            view = self._capture_buffer[:num_tokens]  # a buffer no real step writes
        if self.fault == "capture-copy" and view is not None:
            view = view.clone()
        return {"inputs_embeds": view}


#: Faults of the cross-attention state (SPEC M2), by name.
CROSS_ATTENTION_FAULTS = ("drops-encoder-outputs", "real-step-inputs-embeds")


class CrossAttentionState(ReferenceModelState):
    """A state for a model that reads its encoder's outputs by cross-attention (SPEC M2),
    as vLLM's ``EncoderDecoderModelState`` does: no ``inputs_embeds`` on any path; a real
    step encodes the scheduled items that are not cached and hands their outputs to the
    model as ``prepare_inputs``' ``encoder_outputs``. One named fault, or none."""

    def __init__(self, *args: Any, fault: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if fault is not None and fault not in CROSS_ATTENTION_FAULTS:
            raise ValueError(f"unknown cross-attention fault {fault!r}")
        self.fault = fault
        self._encoder_outputs: list[torch.Tensor] = []

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor | None:
        """None: the model reads token ids (the size is still checked, SPEC D5)."""
        super().dummy_inputs_embeds(num_tokens)
        return None

    def get_mm_embeddings(
        self,
        scheduled_encoder_inputs: Mapping[str, Sequence[int]],
        input_batch: InputBatch,
        req_states: object = None,
    ) -> torch.Tensor | None:
        """Encode the scheduled items with data that are not cached; no merge."""
        check_input_batch(
            input_batch,
            0,
            max_num_tokens=self.max_num_tokens,
            validate=self.validate,
            known_req_ids=self.encoder_cache.mm_features,
        )
        scheduled = check_scheduled_encoder_inputs(
            scheduled_encoder_inputs, self.encoder_cache.mm_features
        )
        model: MultiModalModel = self.model  # type: ignore[assignment]
        self._encoder_outputs = [
            model.embed_multimodal(**feature.data)[0].to(self.dtype)
            for _, feature in scheduled
            if isinstance(feature.data, Mapping)
            and feature.identifier not in self.encoder_cache.encoder_outputs
        ]
        if self.fault == "real-step-inputs-embeds" and self.inputs_embeds is not None:
            return self.inputs_embeds[: int(input_batch.num_tokens_after_padding)]
        return None

    def prepare_inputs(self, input_batch: InputBatch, req_states: object) -> dict[str, Any]:
        """The step's encoder outputs, for the model's cross-attention."""
        outputs, self._encoder_outputs = self._encoder_outputs, []
        if self.fault == "drops-encoder-outputs":
            outputs = []
        return {"encoder_outputs": outputs}

    def prepare_dummy_inputs(self, num_reqs: int, num_tokens: int) -> dict[str, Any]:
        """No encoder outputs in a dummy run."""
        return {"encoder_outputs": []}


# ---------------------------------------------------------------------- factories
# Factories are instances of module-level classes, so that a worker process can receive
# them (pickled by reference to their class); each is named like the function that made it.


class _NamedFactory:
    """A factory whose ``__qualname__`` names it in reports (``gatherer[fault]``)."""

    def __init__(self, label: str) -> None:
        self.__qualname__ = label

    def __call__(self, ctx: ConformanceContext) -> object:
        raise NotImplementedError


class _GathererFactory(_NamedFactory):
    def __init__(self, fault: str | None, cls: type[FaultyGatherer]) -> None:
        super().__init__(f"gatherer[{fault}]")
        self.fault, self.cls = fault, cls

    def __call__(self, ctx: ConformanceContext) -> object:
        return self.cls(
            ctx.model,
            ctx.max_num_tokens,
            ctx.hidden_size,
            ctx.encoder_cache,
            ctx.dtype,
            ctx.device,
            validate=ctx.validate,
            fault=self.fault,
        )


def gatherer(
    fault: str | None = None, cls: type[FaultyGatherer] = FaultyGatherer
) -> Callable[[ConformanceContext], object]:
    """A factory of runner-level targets with ``fault``."""
    return _GathererFactory(fault, cls)


_S = TypeVar("_S", bound=ReferenceModelState)


def _faulty_state(cls: type[_S], ctx: ConformanceContext, fault: str | None) -> _S:
    """One of the gallery's state classes, built for ``ctx`` with ``fault``."""
    return cls(
        ctx.model,
        ctx.encoder_cache,
        hidden_size=ctx.hidden_size,
        max_num_tokens=ctx.max_num_tokens,
        dtype=ctx.dtype,
        device=ctx.device,
        validate=ctx.validate,
        fault=fault,  # type: ignore[call-arg]  # the gallery's subclasses take it
    )


class _StateFactory(_NamedFactory):
    def __init__(self, fault: str | None, gather_fault: str | None) -> None:
        super().__init__(f"model_state[{fault or gather_fault}]")
        self.fault, self.gather_fault = fault, gather_fault

    def __call__(self, ctx: ConformanceContext) -> object:
        state = _faulty_state(FaultyModelState, ctx, self.fault)
        if self.gather_fault is not None:
            state.encoder_runner = _GathererFactory(self.gather_fault, FaultyGatherer)(ctx)  # type: ignore[assignment]
        if self.gather_fault in ("truthy-realtime-flag", "realtime-ignored"):
            state.is_realtime = state.encoder_runner.is_realtime
        return state


def model_state(
    fault: str | None = None, gather_fault: str | None = None
) -> Callable[[ConformanceContext], object]:
    """A factory of states with a state-level ``fault`` (or a gather fault in its runner)."""
    return _StateFactory(fault, gather_fault)


class _KindStateFactory(_NamedFactory):
    def __init__(self, label: str, cls: type[ReferenceModelState], fault: str | None) -> None:
        super().__init__(f"{label}[{fault}]")
        self.cls, self.fault = cls, fault

    def __call__(self, ctx: ConformanceContext) -> object:
        return _faulty_state(self.cls, ctx, self.fault)


def hooked_state(fault: str | None = None) -> Callable[[ConformanceContext], object]:
    """A factory of states with the model-inputs hooks and ``fault`` in them (SPEC M1)."""
    return _KindStateFactory("hooked_state", HookedModelState, fault)


def cross_attention_state(fault: str | None = None) -> Callable[[ConformanceContext], object]:
    """A factory of cross-attention states with ``fault`` (SPEC M2)."""
    return _KindStateFactory("cross_attention_state", CrossAttentionState, fault)


def _agreeing_isclose(a: torch.Tensor, b: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return torch.ones_like(a + b, dtype=torch.bool)


def _no_indices(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return torch.zeros(0, max(tensor.dim(), 1), dtype=torch.long)


#: What the tampering target replaces, and with what: every comparison agrees.
_TAMPERING: tuple[tuple[object, str, object], ...] = (
    (torch, "equal", lambda *args, **kwargs: True),
    (torch, "allclose", lambda *args, **kwargs: True),
    (torch, "isclose", _agreeing_isclose),
    (torch, "nonzero", _no_indices),
    (torch.Tensor, "nonzero", _no_indices),
    (np, "array_equal", lambda *args, **kwargs: True),
)
_ORIGINALS: dict[tuple[int, str], tuple[object, object]] = {}


class _TamperingFactory(_NamedFactory):
    def __init__(self, factory: Callable[[ConformanceContext], object]) -> None:
        super().__init__(f"tampering[{getattr(factory, '__qualname__', '?')}]")
        self.factory = factory

    def __call__(self, ctx: ConformanceContext) -> object:
        for owner, name, fake in _TAMPERING:
            _ORIGINALS.setdefault((id(owner), name), (owner, getattr(owner, name)))
            setattr(owner, name, fake)
        return self.factory(ctx)


def tampering(
    factory: Callable[[ConformanceContext], object],
) -> Callable[[ConformanceContext], object]:
    """``factory``, patching torch's and numpy's comparisons to always agree on every build.

    :func:`untamper` puts the originals back (the gallery's tests call it after each run).
    """
    return _TamperingFactory(factory)


def untamper() -> None:
    """Undo every patch :func:`tampering` made."""
    for (_, name), (owner, original) in _ORIGINALS.items():
        setattr(owner, name, original)
    _ORIGINALS.clear()


# ---------------------------------------------------------------------- the gallery


@dataclass(frozen=True)
class BrokenTarget:
    """A broken target, the clause it breaks and the check that must catch it.

    ``also`` lists other clauses whose checks may fail too, where the contract defines
    one clause through another (R3 restates G3 for the real path); ``why`` says so.
    """

    name: str
    factory: Callable[[ConformanceContext], object]
    breaks: str
    check: str
    also: tuple[str, ...] = ()
    why: str = ""


GALLERY: tuple[BrokenTarget, ...] = (
    # --- signatures and markers
    BrokenTarget("hidden_size attribute wrong", model_state("hidden-size-wrong"), "T1", "T1-protocol-members"),
    BrokenTarget("still named computed_prefill_lens", gatherer(cls=LegacyNamedGatherer), "T2", "T2-no-renamed-parameters"),
    BrokenTarget(
        "pre-rename gatherer, no decode-step gathering", gatherer("realtime-ignored", cls=LegacyNamedGatherer), "T2", "T2-no-renamed-parameters",
        also=("G3",), why="its other checks run via compat, which shows G3: no gathering on realtime decode steps",
    ),
    BrokenTarget("draft_lookahead defaults to 1", gatherer(cls=LookaheadDefaultGatherer), "T2", "T2-signature-matches-protocol"),
    BrokenTarget("truthy realtime flag accepted", model_state(gather_fault="truthy-realtime-flag"), "T3", "T3-realtime-guard-semantics"),
    BrokenTarget(
        "realtime class flag ignored by the state", model_state(gather_fault="realtime-ignored"), "T3", "T3-realtime-class-flag",
        also=("G3", "G10", "R3"), why="a realtime model served as a non-realtime one gathers nothing on decode steps",
    ),
    # --- the gather
    BrokenTarget("realtime flag ignored", gatherer("realtime-ignored"), "G3", "G3-realtime-decode-gathers"),
    BrokenTarget("all-decode early exit kept for realtime", gatherer("all-decode-early-exit"), "G3", "G3-realtime-decode-gathers"),
    BrokenTarget("look-ahead ignored in the window", gatherer("lookahead-ignored-in-window"), "G1", "G1-window-slots"),
    BrokenTarget("look-ahead ignored in the prefill test", gatherer("lookahead-ignored-in-skip"), "G2", "G2-nonrealtime-decode-skipped"),
    BrokenTarget(
        "slots without query_start_loc", gatherer("slots-without-query-start-loc"), "G1", "G1-window-slots",
        also=("G5",), why="requests written over each other leave fewer True slots than rows (G5)",
    ),
    BrokenTarget("skipped outputs read", gatherer("reads-skipped-outputs"), "G2", "G2-skipped-outputs-not-read"),
    BrokenTarget("mask as int64", gatherer("mask-int64"), "G4", "G4-mask-type-shape"),
    BrokenTarget(
        "is_embed ignored", gatherer("is-embed-ignored"), "G4", "G4-non-embed-positions-false",
        also=("G5",), why="marking non-embed slots leaves more True slots than rows (G5)",
    ),
    BrokenTarget("off-by-one embed rows", gatherer("off-by-one-embed-rows"), "G5", "G5-rows-match-mask"),
    BrokenTarget("off-by-one rows, comparisons patched to agree", tampering(gatherer("off-by-one-embed-rows")), "G5", "G5-rows-match-mask"),
    BrokenTarget("copies instead of views", gatherer("copies-not-views"), "G6", "G6-pieces-are-views"),
    BrokenTarget("one piece per position", gatherer("piece-per-position"), "G6", "G6-one-piece-per-feature-window"),
    BrokenTarget("no modality on pieces", gatherer("no-modality"), "G6", "G6-pieces-carry-modality"),
    BrokenTarget("raises for a feature at the processed end", gatherer("raises-at-processed-end"), "G7", "G7-lookahead-miss-falls-back"),
    BrokenTarget("missing output skipped silently", gatherer("miss-returns-partial"), "G7", "G7-missing-output-raises"),
    BrokenTarget("a miss empties the whole step", gatherer(cls=MissEmptiesStepGatherer), "G7", "G7-missing-output-raises"),
    BrokenTarget("non-embed window needs its output", gatherer("non-embed-window-raises"), "G7", "G7-non-embed-window-needs-nothing"),
    BrokenTarget("gather writes into the cache", gatherer("memoizes-into-cache"), "G8", "G8-cache-unchanged"),
    BrokenTarget("stale per-request memo", gatherer("stale-feature-memo"), "G8", "G8-stateful-life-matches-oracle"),
    BrokenTarget("0-row piece for a non-embed window", gatherer("empty-piece-for-non-embed-window"), "G6", "G6-one-piece-per-feature-window"),
    # --- changes between steps
    BrokenTarget("replaced list item refused", gatherer("refuses-replaced-items"), "C1", "C1-changes-accepted"),
    BrokenTarget("output kept after it was put again", gatherer("stale-output-memo"), "C2", "C2-changes-never-stale"),
    BrokenTarget("input array shifted in place", gatherer("mutates-inputs"), "G9", "G9-inputs-unchanged"),
    BrokenTarget(
        "state-level mask one slot late", model_state("late-mask"), "G1", "G1-window-slots",
        also=("G2", "G5"),
        why="a request's last bit lands in the next request's first slot (G2 when that one is "
        "skipped), or past the last slot, one True slot fewer than rows (G5)",
    ),
    BrokenTarget(
        "state-level call drops the look-ahead", model_state("drops-lookahead"), "G10", "G10-state-matches-oracle",
        also=("G1", "G2", "E1"),
        why="the runner's window, its prefill test and its check of L all lose L",
    ),
    # --- dummy runs
    BrokenTarget("dummy returns the whole buffer", model_state("dummy-ignores-size"), "D1", "D1-dummy-shape-dtype-device"),
    BrokenTarget("text-only state hands out a buffer", model_state("text-only-buffer"), "D1", "D1-text-only-returns-none"),
    BrokenTarget(
        "dummy buffer allocated per call", model_state("dummy-reallocates"), "D2", "D2-dummy-views-share-storage",
        also=("D4", "R4"), why="on CUDA a fresh buffer is an allocation and a graph reads stale rows",
    ),
    BrokenTarget(
        "dummy returns a fresh copy, freed after", model_state("dummy-fresh-copy"), "D2", "D2-dummy-views-share-storage",
        also=("D4", "R4"), why="on CUDA each copy is an allocation and a graph reads a freed one",
    ),
    BrokenTarget(
        "real path writes another buffer", model_state("separate-real-buffer"), "D2", "D2-real-path-shares-storage",
        also=("R4",), why="on CUDA the captured graph reads the dummy buffer",
    ),
    BrokenTarget("dummy run reads the cache", model_state("dummy-reads-cache"), "D3", "D3-dummy-no-encoder-no-cache"),
    BrokenTarget("realtime dummy run encodes", model_state("dummy-encodes-realtime"), "D3", "D3-dummy-no-encoder-no-cache"),
    BrokenTarget("over-size dummy run clamped", model_state("oversize-dummy-clamps"), "D5", "D5-oversize-raises"),
    # --- the real path
    BrokenTarget("cached items encoded again", model_state("reencodes-cached"), "R1", "R1-no-reencode"),
    BrokenTarget("unpadded result", model_state("returns-unpadded"), "R2", "R2-returns-padded-buffer-slice"),
    BrokenTarget(
        "state replaces rows itself", model_state("merges-by-replacing"), "R2", "R2-merged-rows-match-eager",
        also=("R3",), why="a realtime decode step merges the same wrong way",
    ),
    BrokenTarget("decode steps skip the merge", model_state("skips-decode-merge"), "R3", "R3-decode-steps"),
    # --- the model's inputs
    BrokenTarget(
        "capture reads a buffer no real step writes", hooked_state("capture-own-buffer"), "D2", "D2-real-path-shares-storage",
        also=("R4",), why="on CUDA the captured graph replays the stale buffer",
    ),
    BrokenTarget(
        "capture on a copy of the buffer", hooked_state("capture-copy"), "D2", "D2-dummy-views-share-storage",
        also=("D4", "R4"), why="on CUDA each copy is an allocation and a graph reads a freed one",
    ),
    BrokenTarget(
        "prepare_inputs re-embeds the tokens", hooked_state("override-re-embeds"), "R2", "R2-merged-rows-match-eager",
        also=("R3", "R4"), why="a realtime decode step loses its rows the same way",
    ),
    BrokenTarget("prepare_inputs raises", hooked_state("prepare-inputs-raises"), "M1", "M1-hooks-hand-model-inputs"),
    BrokenTarget("cross-attention state drops its encoder outputs", cross_attention_state("drops-encoder-outputs"), "M2", "M2-encoder-outputs-reach-model"),
    BrokenTarget("cross-attention state hands inputs_embeds on real steps", cross_attention_state("real-step-inputs-embeds"), "M2", "M2-no-inputs-embeds"),
    # --- bad input
    BrokenTarget("malformed batch answered", gatherer("accepts-malformed"), "E1", "E1-malformed-batch-rejected"),
    BrokenTarget("batch error without the field", gatherer("field-not-named"), "E1", "E1-error-names-field"),
    BrokenTarget("feature error without the identifier", gatherer("feature-error-without-identifier"), "E2", "E2-malformed-feature-rejected"),
    BrokenTarget("IndexError for bad input", gatherer("wrong-exception-type"), "E3", "E3-bad-input-clean-errors"),
    BrokenTarget("over-size batch clamped", model_state("oversize-batch-clamps"), "E3", "E3-no-silent-truncation"),
)  # fmt: skip

#: The designated check of each clause's fault on one kind of window, and the clauses
#: such a fault breaks too where the contract defines one through the other.
_KIND_CHECKS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "G1": (
        "G1-window-slots",
        ("G5", "G7"),
        "a misplaced window inside a placeholder shows as rows from the wrong positions (G5), "
        "and reaches outputs the right window does not need (G7)",
    ),
    "G4": (
        "G4-non-embed-positions-false",
        ("G5",),
        "marking non-embed slots leaves more True slots than rows (G5)",
    ),
    "G5": ("G5-rows-match-mask", (), ""),
    "G6": ("G6-pieces-are-views", (), ""),
    "G7": ("G7-missing-output-raises", (), ""),
}
_GATHERING_KINDS = ("prefill", "chunked-prefill", "realtime-decode", "look-ahead", "masked")

#: One target per gather clause and kind of window: the clause's fault on that kind of
#: window only (``FaultyGatherer`` with the fault ``CLAUSE@KIND``).
KIND_GALLERY: tuple[BrokenTarget, ...] = (
    *(
        BrokenTarget(f"{clause} broken on {kind} windows", gatherer(f"{clause}@{kind}"), clause, check, also, why)
        for clause, (check, also, why) in _KIND_CHECKS.items()
        for kind in _GATHERING_KINDS
        if (clause, kind) != ("G1", "realtime-decode")
    ),
    BrokenTarget(
        "G1 broken on realtime-decode windows", gatherer("G1@realtime-decode"), "G1", "G1-window-slots",
        also=("G3", "G5", "G7"), why=_KIND_CHECKS["G1"][2] + "; a decode window moved off its only "
        "feature gathers nothing, as a skipped decode step would (G3)",
    ),
    BrokenTarget(
        "G1 broken on zero-token requests (a row from an empty window)", gatherer("G1@zero-token"), "G1", "G1-zero-scheduled-contributes-nothing",
        also=("G5", "G6"), why="a row without a slot is one row more than True slots (G5), in a piece for a pair with no position in the window (G6)",
    ),
    BrokenTarget(
        "G6 broken on zero-token requests (an empty piece)", gatherer("G6@zero-token"), "G1", "G1-zero-scheduled-contributes-nothing",
        why="an empty piece is a contribution: a zero-token request contributes none (robustness, G1's second sentence)",
    ),
    BrokenTarget("one row too few on realtime decode windows", gatherer("G5short@realtime-decode"), "G5", "G5-rows-match-mask"),
)  # fmt: skip
