"""vLLM's view of the suite's encoder cache: the same dicts, vLLM's own feature types.

The conformance suite fills and instruments an ``rtmm_protocol`` encoder cache and
changes it between calls (new lists, appends, replaced items, direct writes into
``encoder_outputs``). vLLM's ``EncoderRunner`` reads a ``vllm`` ``EncoderCache`` whose
lists hold ``MultiModalFeatureSpec`` objects. :func:`vllm_encoder_cache` builds one of
vLLM's caches whose ``encoder_outputs`` *is* the suite's dict and whose ``mm_features``
reads through to the suite's dict on every access, translating each feature into vLLM's
types. Nothing is cached between reads, so every change the suite makes is seen at once,
and every read still reaches (and is recorded by) the suite's dict.

The translation changes types only: offsets, lengths, masks, identifiers, modalities and
encoder inputs are passed on as they are, malformed ones included, so that what the
suite measures is vLLM's own behaviour.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from vllm.multimodal.inputs import (
    MultiModalBatchedField,
    MultiModalFeatureSpec,
    MultiModalFieldElem,
    MultiModalKwargsItem,
    PlaceholderRange,
)
from vllm.v1.worker.gpu.mm.encoder_cache import EncoderCache

__all__ = ["FeatureListView", "to_vllm_feature", "to_vllm_kwargs_item", "vllm_encoder_cache"]


def to_vllm_kwargs_item(data: object) -> object:
    """One item's encoder inputs as vLLM's ``MultiModalKwargsItem``.

    The contract passes a feature's ``data`` mapping as ``model.embed_multimodal(**data)``;
    vLLM batches items field by field, so each tensor becomes a *batched* field (one
    entry per item along a new leading dimension, which is how vLLM hands audio
    ``input_features`` to a model). ``None`` (no inputs: the output is provided) stays
    ``None``; anything that is not a mapping is passed on untouched.
    """
    if data is None or not isinstance(data, Mapping):
        return data
    return MultiModalKwargsItem(
        {
            str(key): MultiModalFieldElem(data=value, field=MultiModalBatchedField())
            for key, value in data.items()
        }
    )


def to_vllm_feature(feature: Any) -> MultiModalFeatureSpec:
    """A contract ``MultiModalFeature`` as vLLM's ``MultiModalFeatureSpec``."""
    position = feature.mm_position
    return MultiModalFeatureSpec(
        data=to_vllm_kwargs_item(feature.data),  # type: ignore[arg-type]  # passed on as is
        modality=feature.modality,
        identifier=feature.identifier,
        mm_position=PlaceholderRange(
            offset=position.offset, length=position.length, is_embed=position.is_embed
        ),
    )


class FeatureListView(Mapping[str, list[MultiModalFeatureSpec]]):
    """``req_id -> [MultiModalFeatureSpec]``, read through to the suite's feature lists.

    Read-only: vLLM's gather and encoder paths only read this dict; a write would raise
    ``TypeError`` rather than be lost.
    """

    def __init__(self, features: Mapping[str, list[Any]]) -> None:
        self._features = features

    def __getitem__(self, req_id: str) -> list[MultiModalFeatureSpec]:
        return [to_vllm_feature(feature) for feature in self._features[req_id]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._features)

    def __len__(self) -> int:
        return len(self._features)


def vllm_encoder_cache(cache: Any) -> EncoderCache:
    """vLLM's ``EncoderCache`` over the dicts of a contract ``EncoderCache``."""
    vllm_cache = EncoderCache()  # type: ignore[no-untyped-call]  # vLLM leaves it unannotated
    vllm_cache.mm_features = FeatureListView(cache.mm_features)  # type: ignore[assignment]
    outputs: dict[str, torch.Tensor] = cache.encoder_outputs
    vllm_cache.encoder_outputs = outputs
    return vllm_cache
