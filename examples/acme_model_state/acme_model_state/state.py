"""AcmeModelState: one persistent ``inputs_embeds`` buffer, gathering request by request.

Written against the contract only (the Protocols, the cache, the validation helpers),
the way a serving engine's own state would be. The conformance suite checks it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from rtmm_protocol import (
    EncoderCache,
    EncoderOutputMissingError,
    InputBatch,
    MultiModalFeature,
    supports_realtime,
)
from rtmm_protocol.modality import with_modality
from rtmm_protocol.protocols import MultiModalModel, TextModel
from rtmm_protocol.validation import check_encoder_output, check_feature_list, check_gather_args

__all__ = ["AcmeModelState"]


class AcmeModelState:
    """Prepares the multimodal part of ``inputs_embeds`` for a (possibly streaming) model.

    The buffer of ``max_num_tokens`` rows is allocated here, once: dummy runs hand out
    its first rows and the real path writes into them, so a CUDA graph captured during
    a dummy run reads the real embeddings when it is replayed.
    """

    def __init__(
        self,
        model: MultiModalModel | TextModel,
        encoder_cache: EncoderCache,
        *,
        hidden_size: int,
        max_num_tokens: int,
        dtype: torch.dtype,
        device: torch.device | str,
        validate: bool = False,
    ) -> None:
        self.model = model
        self.encoder_cache = encoder_cache
        self.hidden_size = hidden_size
        self.max_num_tokens = max_num_tokens
        self.dtype = dtype
        self.device = torch.device(device)
        self.validate = validate
        # Only a class-level ``supports_realtime = True`` counts; the guard knows the rules.
        self.is_realtime = supports_realtime(model)
        self.supports_mm_inputs = callable(getattr(model, "embed_multimodal", None))
        self._buffer = (
            torch.zeros(max_num_tokens, hidden_size, dtype=dtype, device=self.device)
            if self.supports_mm_inputs
            else None
        )

    # ------------------------------------------------------------------ dummy runs

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor | None:
        """The first ``num_tokens`` rows of the buffer; ``None`` for a text-only model."""
        if not 0 <= num_tokens <= self.max_num_tokens:
            raise ValueError(
                f"dummy run of num_tokens={num_tokens} does not fit max_num_tokens="
                f"{self.max_num_tokens}"
            )
        return None if self._buffer is None else self._buffer[:num_tokens]

    # ------------------------------------------------------------------ gather

    def _validate_batch(self, batch: InputBatch, draft_lookahead: int) -> None:
        check_gather_args(
            batch.req_ids,
            batch.num_tokens,
            batch.num_scheduled_tokens,
            batch.query_start_loc_np,
            batch.prefill_len_np,
            batch.num_computed_tokens_np,
            draft_lookahead,
            known_req_ids=self.encoder_cache.mm_features,
        )

    def gather_mm_embeddings(
        self, input_batch: InputBatch, draft_lookahead: int = 0
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The cached encoder rows the scheduled tokens need, and where they go."""
        if draft_lookahead < 0:
            raise ValueError(f"draft_lookahead must be >= 0, got {draft_lookahead}")
        if self.validate:
            self._validate_batch(input_batch, draft_lookahead)
        batch = input_batch
        window_starts = batch.num_computed_tokens_np + draft_lookahead  # a new array
        is_mm_embed = np.zeros(batch.num_tokens, dtype=np.bool_)
        mm_embeds: list[torch.Tensor] = []
        for i, req_id in enumerate(batch.req_ids):
            count = int(batch.num_scheduled_tokens[i])
            start = int(window_starts[i])
            if count == 0 or (not self.is_realtime and start >= int(batch.prefill_len_np[i])):
                continue  # nothing scheduled, or a non-realtime model past the prompt
            features = self.encoder_cache.mm_features.get(req_id, [])
            if self.validate:
                check_feature_list(req_id, features)
            scheduled_end = int(batch.num_computed_tokens_np[i]) + count
            for feature in features:
                self._gather_feature(
                    req_id,
                    feature,
                    start,
                    count,
                    scheduled_end,
                    int(batch.query_start_loc_np[i]),
                    is_mm_embed,
                    mm_embeds,
                )
        return mm_embeds, torch.from_numpy(is_mm_embed)

    def _gather_feature(
        self,
        req_id: str,
        feature: MultiModalFeature,
        start: int,
        count: int,
        scheduled_end: int,
        first_slot: int,
        is_mm_embed: np.ndarray,
        mm_embeds: list[torch.Tensor],
    ) -> None:
        pos = feature.mm_position
        lo = max(start, pos.offset) - pos.offset
        hi = min(start + count, pos.offset + pos.length) - pos.offset
        if lo >= hi:
            return
        first_row, end_row = pos.get_embeds_indices_in_range(lo, hi)
        if first_row == end_row:
            return  # the window holds no embed position of this feature
        output = self.encoder_cache.encoder_outputs.get(feature.identifier)
        if output is None:
            if pos.offset >= scheduled_end:
                return  # reached only through the drafter's look-ahead
            raise EncoderOutputMissingError(feature.identifier, req_id)
        check_encoder_output(feature, output, self.hidden_size)  # never slice a short output
        mm_embeds.append(with_modality(output[first_row:end_row], feature.modality))
        slot = first_slot + pos.offset + lo - start
        if pos.is_embed is None:
            is_mm_embed[slot : slot + hi - lo] = True
        else:
            is_mm_embed[slot : slot + hi - lo] = pos.is_embed[lo:hi].cpu().numpy()

    # ------------------------------------------------------------------ real path

    def _encode(self, scheduled_encoder_inputs: Mapping[str, Sequence[int]]) -> None:
        encode = getattr(self.model, "embed_multimodal", None)
        outputs = self.encoder_cache.encoder_outputs
        for req_id, indices in scheduled_encoder_inputs.items():
            features = self.encoder_cache.mm_features.get(req_id)
            if features is None:
                raise ValueError(f"scheduled_encoder_inputs names unknown request {req_id!r}")
            for index in indices:
                feature = features[index]
                if feature.identifier in outputs or not isinstance(feature.data, Mapping):
                    continue  # cached already, or nothing to encode
                assert encode is not None
                output = encode(**feature.data)[0].to(device=self.device, dtype=self.dtype)
                check_encoder_output(feature, output, self.hidden_size)
                outputs[feature.identifier] = output

    def get_mm_embeddings(
        self,
        scheduled_encoder_inputs: Mapping[str, Sequence[int]],
        input_batch: InputBatch,
        req_states: object = None,
    ) -> torch.Tensor | None:
        """Encode, gather, merge through the model into the buffer; return its first rows.

        ``req_states`` is the engine's per-request state; this state needs nothing from it.
        """
        if self._buffer is None:
            return None
        num_tokens = int(input_batch.num_tokens)
        padded = int(input_batch.num_tokens_after_padding)
        if not num_tokens <= padded <= self.max_num_tokens:
            raise ValueError(
                f"a batch of num_tokens={num_tokens} padded to {padded} does not fit "
                f"max_num_tokens={self.max_num_tokens}"
            )
        if self.validate:
            self._validate_batch(input_batch, 0)
        self._encode(scheduled_encoder_inputs)
        mm_embeds, is_mm_embed = self.gather_mm_embeddings(input_batch)
        merged = self.model.embed_input_ids(
            input_batch.input_ids[:num_tokens], mm_embeds, is_mm_embed.to(self.device)
        )
        self._buffer[:num_tokens].copy_(merged)
        return self._buffer[:padded]
