"""ScratchModelState: one persistent buffer, and a gather that reads the cache afresh."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from from_scratch_state.window import RequestWindow, gather_window
from rtmm_protocol import EncoderCache, InputBatch, MultiModalFeature, supports_realtime
from rtmm_protocol.protocols import MultiModalModel, TextModel
from rtmm_protocol.validation import (
    check_batch_bounds,
    check_encoder_output,
    check_feature_list,
    check_gather_args,
)

__all__ = ["ScratchModelState"]


class ScratchModelState:
    """Prepares the multimodal rows of ``inputs_embeds`` for each engine step.

    It keeps no per-request data between steps: every call reads the feature lists and
    encoder outputs from the cache as they are now, so whatever the engine changed
    since the last step is seen (C1, C2).
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
        self._model = model
        # MultiModalModel is a runtime-checkable Protocol: isinstance narrows the union.
        self._encoder = model if isinstance(model, MultiModalModel) else None
        self._cache = encoder_cache
        self.hidden_size = hidden_size
        self.max_num_tokens = max_num_tokens
        self.dtype = dtype
        self.device = torch.device(device)
        self.validate = validate
        self.is_realtime = supports_realtime(model)  # class-level `True` only (T3)
        self.supports_mm_inputs = self._encoder is not None
        # Allocated once: dummy runs hand out its first rows, real steps write them (D2).
        self._buffer = (
            torch.zeros(max_num_tokens, hidden_size, dtype=dtype, device=self.device)
            if self._encoder is not None
            else None
        )

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor | None:
        """The buffer's first ``num_tokens`` rows; no encoder, no cache (D1 to D5)."""
        if not 0 <= num_tokens <= self.max_num_tokens:
            raise ValueError(
                f"a dummy run of num_tokens={num_tokens} does not fit "
                f"max_num_tokens={self.max_num_tokens}"
            )
        return None if self._buffer is None else self._buffer[:num_tokens]

    def gather_mm_embeddings(
        self, input_batch: InputBatch, draft_lookahead: int = 0
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The cached rows the scheduled tokens need, and the mask of their slots (G1-G9)."""
        self._check_batch(input_batch, draft_lookahead)
        batch = input_batch
        is_mm_embed = torch.zeros(int(batch.num_tokens), dtype=torch.bool)
        pieces: list[torch.Tensor] = []
        for i, req_id in enumerate(batch.req_ids):
            computed = int(batch.num_computed_tokens_np[i])
            scheduled = int(batch.num_scheduled_tokens[i])
            window = RequestWindow(
                req_id=req_id,
                start=computed + draft_lookahead,
                num_tokens=scheduled,
                first_slot=int(batch.query_start_loc_np[i]),
                scheduled_end=computed + scheduled,
            )
            if scheduled == 0:
                continue  # legal, and contributes nothing (G1)
            if not self.is_realtime and window.start >= int(batch.prefill_len_np[i]):
                continue  # a non-realtime model past the prompt: the cache is not read (G2)
            features = self._features_of(req_id)
            gather_window(
                window, features, self._cache.encoder_outputs, self.hidden_size, is_mm_embed, pieces
            )
        return pieces, is_mm_embed

    def get_mm_embeddings(
        self,
        scheduled_encoder_inputs: Mapping[str, Sequence[int]],
        input_batch: InputBatch,
        req_states: Any,  # the engine's request states: the contract reads nothing from them
    ) -> torch.Tensor | None:
        """Encode the scheduled items, gather, merge into the buffer; return its first rows."""
        if self._buffer is None:
            return None  # a text-only model: no inputs_embeds path (D1)
        num_tokens = int(input_batch.num_tokens)
        padded = int(input_batch.num_tokens_after_padding)
        if not 0 <= num_tokens <= padded <= self.max_num_tokens:
            raise ValueError(
                f"a batch of num_tokens={num_tokens} padded to "
                f"num_tokens_after_padding={padded} does not fit "
                f"max_num_tokens={self.max_num_tokens}"
            )
        self._check_batch(input_batch, 0)  # before encoding: a bad batch changes nothing
        self._encode(scheduled_encoder_inputs)
        pieces, is_mm_embed = self.gather_mm_embeddings(input_batch)
        merged = self._model.embed_input_ids(
            input_batch.input_ids[:num_tokens], pieces, is_mm_embed.to(self.device)
        )
        self._buffer[:num_tokens].copy_(merged)  # R2
        return self._buffer[:padded]

    def _check_batch(self, batch: InputBatch, draft_lookahead: int) -> None:
        """Every E1 check when validating; otherwise only the constant-time bounds."""
        if self.validate:
            check_gather_args(
                batch.req_ids,
                batch.num_tokens,
                batch.num_scheduled_tokens,
                batch.query_start_loc_np,
                batch.prefill_len_np,
                batch.num_computed_tokens_np,
                draft_lookahead,
                known_req_ids=self._cache.mm_features,
            )
        else:
            check_batch_bounds(
                len(batch.req_ids),
                batch.num_tokens,
                draft_lookahead,
                num_scheduled_tokens=batch.num_scheduled_tokens,
                query_start_loc=batch.query_start_loc_np,
                prefill_lens=batch.prefill_len_np,
                num_computed_tokens=batch.num_computed_tokens_np,
            )

    def _features_of(self, req_id: str) -> Sequence[MultiModalFeature]:
        """The request's features as the cache holds them now (checked when validating)."""
        features = self._cache.mm_features.get(req_id)
        if features is None:
            raise ValueError(f"req_ids holds {req_id!r}, which is not in the encoder cache")
        if self.validate:
            check_feature_list(req_id, features)  # the suite may have assigned this list
        return features

    def _encode(self, scheduled_encoder_inputs: Mapping[str, Sequence[int]]) -> None:
        """Run the encoder for each scheduled item not cached yet, and cache it (R1)."""
        encoder = self._encoder
        outputs = self._cache.encoder_outputs
        for req_id, indices in scheduled_encoder_inputs.items():
            features = self._features_of(req_id)
            for index in indices:
                if not 0 <= index < len(features):
                    raise ValueError(
                        f"scheduled_encoder_inputs[{req_id!r}] holds index {index}, but the "
                        f"request has {len(features)} features"
                    )
                feature = features[index]
                if feature.identifier in outputs or feature.data is None:
                    continue  # cached already, or provided without the encoder
                if not isinstance(feature.data, Mapping):
                    raise ValueError(
                        f"feature {feature.identifier!r}: data must be a mapping of encoder "
                        f"inputs, got {type(feature.data).__name__}"
                    )
                assert encoder is not None  # a text-only state returned before encoding
                encoded = encoder.embed_multimodal(**feature.data)
                if len(encoded) != 1:
                    raise ValueError(
                        f"feature {feature.identifier!r}: the encoder returned {len(encoded)} "
                        "outputs for one item"
                    )
                output = encoded[0].to(device=self.device, dtype=self.dtype)
                check_encoder_output(feature, output, self.hidden_size)
                outputs[feature.identifier] = output
