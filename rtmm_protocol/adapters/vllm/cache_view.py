"""vLLM's view of the suite's encoder cache: the same dicts, vLLM's own feature types.

The suite fills and instruments a contract :class:`~rtmm_protocol.EncoderCache` and
changes it between calls (new lists, appended features, replaced items, direct writes
into ``encoder_outputs``). vLLM's ModelRunner V2 reads a vLLM ``EncoderCache`` whose
lists hold ``MultiModalFeatureSpec`` values. :func:`vllm_encoder_cache` builds one of
vLLM's caches whose ``encoder_outputs`` *is* the suite's dict and whose ``mm_features``
reads through to the suite's dict on every access, translating each feature into vLLM's
types as it is read. Nothing is kept between reads, so every change the suite makes is
seen at once and every read still reaches (and is recorded by) the suite's dict.

The translation changes types only: offsets, lengths, masks, identifiers, modalities and
encoder inputs are passed on as they are, malformed ones included, so that what the suite
measures is vLLM's own behaviour (vLLM's ``PlaceholderRange`` does its own index
arithmetic, for one).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch

from rtmm_protocol.adapters.vllm.availability import import_vllm
from rtmm_protocol.encoder_cache import EncoderCache
from rtmm_protocol.feature import MultiModalFeature

__all__ = ["FeatureListView", "to_vllm_feature", "to_vllm_inputs", "vllm_encoder_cache"]


def to_vllm_inputs(data: object) -> object:
    """One item's encoder inputs as vLLM's ``MultiModalKwargsItem``.

    The contract passes a feature's ``data`` mapping as ``model.embed_multimodal(**data)``.
    vLLM batches items field by field, so each value becomes a *batched* field (one entry
    per item along a new first dimension, as vLLM hands audio features to a model).
    ``None`` (no inputs: the output is provided) stays ``None``, and a value that is not a
    mapping is passed on untouched for vLLM to meet.
    """
    if not isinstance(data, Mapping):
        return data
    inputs = import_vllm("vllm.multimodal.inputs")
    return inputs.MultiModalKwargsItem(
        {
            str(key): inputs.MultiModalFieldElem(data=value, field=inputs.MultiModalBatchedField())
            for key, value in data.items()
        }
    )


def to_vllm_feature(feature: MultiModalFeature) -> Any:
    """A contract feature as vLLM's ``MultiModalFeatureSpec`` (typed ``Any``: vLLM's type)."""
    inputs = import_vllm("vllm.multimodal.inputs")
    position = feature.mm_position
    return inputs.MultiModalFeatureSpec(
        data=to_vllm_inputs(feature.data),
        modality=feature.modality,
        identifier=feature.identifier,
        mm_position=inputs.PlaceholderRange(
            offset=position.offset, length=position.length, is_embed=position.is_embed
        ),
    )


class FeatureListView(Mapping[str, list[Any]]):
    """``req_id -> [MultiModalFeatureSpec]``, read through to the suite's feature lists.

    Read-only: vLLM's gather and encoder paths only read this dict, and a write would
    raise ``TypeError`` rather than be lost.
    """

    def __init__(self, features: Mapping[str, list[MultiModalFeature]]) -> None:
        self._features = features

    def __getitem__(self, req_id: str) -> list[Any]:
        return [to_vllm_feature(feature) for feature in self._features[req_id]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._features)

    def __len__(self) -> int:
        return len(self._features)


def vllm_encoder_cache(cache: EncoderCache) -> Any:
    """vLLM's ``EncoderCache`` over the dicts of a contract cache (typed ``Any``: vLLM's type)."""
    vllm_cache = import_vllm("vllm.v1.worker.gpu.mm.encoder_cache").EncoderCache()
    vllm_cache.mm_features = FeatureListView(cache.mm_features)
    outputs: dict[str, torch.Tensor] = cache.encoder_outputs
    vllm_cache.encoder_outputs = outputs
    return vllm_cache
