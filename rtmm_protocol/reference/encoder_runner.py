"""The reference encoder runner: runs the encoder and gathers cached outputs (SPEC §3, R1)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import torch

from rtmm_protocol.encoder_cache import EncoderCache
from rtmm_protocol.errors import EncoderOutputMissingError
from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.protocols import MultiModalModel
from rtmm_protocol.realtime import supports_realtime
from rtmm_protocol.types import IntArray
from rtmm_protocol.validation import (
    check_encoder_output,
    check_feature_list,
    check_gather_args,
    validation_enabled,
)

__all__ = ["EncoderRunner"]


def _feature_end(feature: MultiModalFeature) -> int:
    return feature.mm_position.offset + feature.mm_position.length


class EncoderRunner:
    """Encoder-runner level implementation of :class:`~rtmm_protocol.MMEmbeddingGatherer`.

    ``validate`` switches on the batch and feature checks of SPEC E1/E2 (``None`` reads
    the ``RTMM_PROTOCOL_VALIDATE`` environment variable); they are off on the hot path.
    """

    def __init__(
        self,
        model: MultiModalModel,
        max_num_tokens: int,
        hidden_size: int,
        encoder_cache: EncoderCache,
        dtype: torch.dtype,
        device: torch.device | str,
        *,
        validate: bool | None = None,
    ) -> None:
        if max_num_tokens <= 0:
            raise ValueError(f"max_num_tokens must be positive, got {max_num_tokens}")
        if hidden_size <= 0:
            raise ValueError(f"hidden_size must be positive, got {hidden_size}")
        self.model = model
        self.max_num_tokens = max_num_tokens
        self.hidden_size = hidden_size
        self.encoder_cache = encoder_cache
        self.dtype = dtype
        self.device = torch.device(device)
        self.validate = validation_enabled(validate)
        self.is_realtime = supports_realtime(model)

    # ------------------------------------------------------------------ encoder (R1)

    def execute_encoder(self, scheduled_encoder_inputs: Mapping[str, Sequence[int]]) -> int:
        """Encode the scheduled items that are not cached yet; return how many were encoded.

        Items whose output is already cached, or whose ``data`` is ``None``, are skipped.
        Each output is checked against its feature (rows and hidden size) before caching.
        """
        cache = self.encoder_cache
        encoded = 0
        for req_id, indices in scheduled_encoder_inputs.items():
            features = cache.mm_features.get(req_id)
            if features is None:
                raise ValueError(
                    f"scheduled_encoder_inputs names request {req_id!r}, which is not in the "
                    "encoder cache"
                )
            for index in indices:
                if isinstance(index, bool) or not 0 <= index < len(features):
                    raise ValueError(
                        f"scheduled_encoder_inputs[{req_id!r}] holds index {index!r}, but the "
                        f"request has {len(features)} features"
                    )
                feature = features[index]
                if feature.identifier in cache.encoder_outputs or feature.data is None:
                    continue
                if not isinstance(feature.data, Mapping):
                    raise ValueError(
                        f"data of feature {feature.identifier!r} must be a mapping of encoder "
                        f"keyword arguments, got {type(feature.data).__name__}"
                    )
                outputs = self.model.embed_multimodal(**feature.data)
                if len(outputs) != 1:
                    raise ValueError(
                        f"embed_multimodal returned {len(outputs)} outputs for the single item "
                        f"{feature.identifier!r}"
                    )
                output = outputs[0].to(device=self.device, dtype=self.dtype)
                check_encoder_output(feature, output, self.hidden_size)
                cache.encoder_outputs[feature.identifier] = output
                encoded += 1
        return encoded

    # ------------------------------------------------------------------ gather (§3)

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
        """Return ``(mm_embeds, is_mm_embed)`` for the scheduled tokens (SPEC G1-G9)."""
        cache = self.encoder_cache
        if self.validate:
            check_gather_args(
                req_ids,
                total_num_scheduled_tokens,
                num_scheduled_tokens,
                query_start_loc,
                prefill_lens,
                num_computed_tokens,
                draft_lookahead,
                known_req_ids=cache.mm_features,
            )
        elif draft_lookahead < 0:
            # A negative look-ahead would shift windows before the computed tokens.
            raise ValueError(f"draft_lookahead must be >= 0, got {draft_lookahead}")
        is_mm_embed = np.zeros(int(total_num_scheduled_tokens), dtype=np.bool_)
        mm_embeds: list[torch.Tensor] = []
        for i, req_id in enumerate(req_ids):
            num_sched = int(num_scheduled_tokens[i])
            if num_sched == 0:
                continue
            computed = int(num_computed_tokens[i])
            start = computed + draft_lookahead
            if not self.is_realtime and start >= int(prefill_lens[i]):
                continue
            features = cache.mm_features.get(req_id, ())
            if self.validate:
                check_feature_list(req_id, features)
            self._gather_request(
                req_id,
                features,
                start,
                start + num_sched,
                computed + num_sched,
                int(query_start_loc[i]),
                is_mm_embed,
                mm_embeds,
            )
        return mm_embeds, torch.from_numpy(is_mm_embed)

    def _gather_request(
        self,
        req_id: str,
        features: Sequence[MultiModalFeature],
        start: int,
        end: int,
        scheduled_end: int,
        slot_base: int,
        is_mm_embed: np.ndarray,
        mm_embeds: list[torch.Tensor],
    ) -> None:
        outputs = self.encoder_cache.encoder_outputs
        # Features are sorted and disjoint, so their ends are sorted too: skip those that
        # end at or before the window start.
        first = bisect.bisect_right(features, start, key=_feature_end)
        for feature in _take_until(features, first, end):
            pos = feature.mm_position
            lo = max(start, pos.offset) - pos.offset
            hi = min(end, pos.offset + pos.length) - pos.offset
            row_start, row_end = pos.get_embeds_indices_in_range(lo, hi)
            if row_start == row_end:
                continue  # only non-embed positions in the window: nothing needed (G7)
            output = outputs.get(feature.identifier)
            if output is None:
                if pos.offset >= scheduled_end:
                    continue  # reached only by the drafter's look-ahead: token embeddings
                raise EncoderOutputMissingError(feature.identifier, req_id)
            # Cheap and always on: a mis-shaped output would otherwise be sliced short.
            check_encoder_output(feature, output, self.hidden_size)
            piece = output[row_start:row_end]
            piece.modality = feature.modality  # type: ignore[attr-defined]
            mm_embeds.append(piece)
            first_slot = slot_base + pos.offset + lo - start
            if pos.is_embed is None:
                is_mm_embed[first_slot : first_slot + hi - lo] = True
            else:
                is_mm_embed[first_slot : first_slot + hi - lo] = pos.is_embed[lo:hi].cpu().numpy()


def _take_until(
    features: Sequence[MultiModalFeature], first: int, end: int
) -> Iterable[MultiModalFeature]:
    """Yield ``features[first:]`` while they start before ``end``."""
    for index in range(first, len(features)):
        feature = features[index]
        if feature.mm_position.offset >= end:
            return
        yield feature
