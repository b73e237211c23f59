"""Reference states over toy models whose encoder calls are counted, for the dummy-run (D1-D5) and real-path (R1-R4) tests."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rtmm_protocol import EncoderCache, MultiModalFeature, PlaceholderRange
from rtmm_protocol.reference import ReferenceModelState
from rtmm_protocol.testing import ToyRealtimeModel, ToyReplaceModel, make_input_features

__all__ = [
    "FEATURE_DIM",
    "CountingRealtimeModel",
    "CountingReplaceModel",
    "encodable_feature",
    "make_state",
]

FEATURE_DIM = 5


class _CountsEncoderCalls:
    """Mixin recording the keyword arguments of every ``embed_multimodal`` call."""

    encoder_calls: list[dict[str, object]]

    def embed_multimodal(self, **kwargs: object) -> list[torch.Tensor]:
        if not hasattr(self, "encoder_calls"):
            self.encoder_calls = []
        self.encoder_calls.append(kwargs)
        return super().embed_multimodal(**kwargs)  # type: ignore[misc, no-any-return]


class CountingReplaceModel(_CountsEncoderCalls, ToyReplaceModel):
    """:class:`ToyReplaceModel` that records its encoder calls."""


class CountingRealtimeModel(_CountsEncoderCalls, ToyRealtimeModel):
    """:class:`ToyRealtimeModel` that records its encoder calls."""


def encodable_feature(
    identifier: str,
    offset: int,
    length: int,
    *,
    is_embed: Sequence[bool] | None = None,
    seed: int = 0,
    modality: str = "audio",
    with_data: bool = True,
) -> MultiModalFeature:
    """A feature whose ``data`` the toy encoder accepts (or ``None`` if ``with_data`` is off)."""
    mask = None if is_embed is None else torch.tensor(list(is_embed), dtype=torch.bool)
    position = PlaceholderRange(offset, length, mask)
    data = None
    if with_data:
        data = {"input_features": make_input_features(seed, position.get_num_embeds(), FEATURE_DIM)}
    return MultiModalFeature(identifier, modality, position, data)


def make_state(
    *,
    realtime: bool,
    max_num_tokens: int = 16,
    hidden_size: int = 4,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    validate: bool | None = None,
) -> tuple[ReferenceModelState, CountingReplaceModel | CountingRealtimeModel, EncoderCache]:
    """A reference state over a counting toy model and an empty cache."""
    model_cls = CountingRealtimeModel if realtime else CountingReplaceModel
    model = model_cls(hidden_size, feature_dim=FEATURE_DIM, dtype=dtype, device=device)
    model.encoder_calls = []
    cache = EncoderCache(hidden_size)
    state = ReferenceModelState(
        model,
        cache,
        hidden_size=hidden_size,
        max_num_tokens=max_num_tokens,
        dtype=dtype,
        device=device,
        validate=validate,
    )
    return state, model, cache
