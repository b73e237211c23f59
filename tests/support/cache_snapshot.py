"""Snapshots of an encoder cache and of batch arrays, to check that a call changed nothing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from rtmm_protocol import EncoderCache, MultiModalFeature

__all__ = ["ArraySnapshot", "CacheSnapshot"]


def _clone_or_none(tensor: torch.Tensor | None) -> torch.Tensor | None:
    return None if tensor is None else tensor.detach().clone()


@dataclass(frozen=True)
class _FeatureState:
    obj_id: int
    identifier: str
    modality: str
    data_id: int
    position_id: int
    offset: int
    length: int
    is_embed_id: int
    is_embed: torch.Tensor | None
    num_embeds: int


@dataclass(frozen=True)
class _OutputState:
    obj_id: int
    data_ptr: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    values: torch.Tensor


class CacheSnapshot:
    """Everything observable about an :class:`~rtmm_protocol.EncoderCache` at one moment.

    Compares the dict objects themselves, their keys and order, every feature's fields
    (including the ``is_embed`` values and the embed count) and every output's identity,
    storage, layout and values. Memoized derived values on a feature are not compared:
    the contract allows them (SPEC G8).
    """

    def __init__(self, cache: EncoderCache) -> None:
        # dict.items / dict.keys avoid the read log of an instrumented dict.
        self._features_dict_id = id(cache.mm_features)
        self._outputs_dict_id = id(cache.encoder_outputs)
        self._features = {
            req_id: (id(features), [self._feature_state(f) for f in features])
            for req_id, features in dict.items(cache.mm_features)
        }
        self._outputs = {
            identifier: self._output_state(output)
            for identifier, output in dict.items(cache.encoder_outputs)
        }

    @staticmethod
    def _feature_state(feature: MultiModalFeature) -> _FeatureState:
        pos = feature.mm_position
        return _FeatureState(
            obj_id=id(feature),
            identifier=feature.identifier,
            modality=feature.modality,
            data_id=id(feature.data),
            position_id=id(pos),
            offset=pos.offset,
            length=pos.length,
            is_embed_id=id(pos.is_embed),
            is_embed=_clone_or_none(pos.is_embed),
            num_embeds=pos.get_num_embeds(),
        )

    @staticmethod
    def _output_state(output: torch.Tensor) -> _OutputState:
        return _OutputState(
            obj_id=id(output),
            data_ptr=output.data_ptr(),
            shape=tuple(output.shape),
            stride=tuple(output.stride()),
            dtype=output.dtype,
            values=output.detach().clone(),
        )

    def assert_unchanged(self, cache: EncoderCache) -> None:
        """Fail with a precise message if ``cache`` differs from this snapshot."""
        assert id(cache.mm_features) == self._features_dict_id, "mm_features dict was replaced"
        assert id(cache.encoder_outputs) == self._outputs_dict_id, (
            "encoder_outputs dict was replaced"
        )
        assert list(dict.keys(cache.mm_features)) == list(self._features), (
            "mm_features keys changed"
        )
        for req_id, (list_id, states) in self._features.items():
            features = dict.__getitem__(cache.mm_features, req_id)
            assert id(features) == list_id, f"feature list of {req_id!r} was replaced"
            assert len(features) == len(states), f"feature list of {req_id!r} changed length"
            for feature, before in zip(features, states, strict=True):
                after = self._feature_state(feature)
                _assert_same_feature(req_id, before, after)
        assert list(dict.keys(cache.encoder_outputs)) == list(self._outputs), (
            "encoder_outputs keys changed"
        )
        for identifier, was in self._outputs.items():
            output = dict.__getitem__(cache.encoder_outputs, identifier)
            now = self._output_state(output)
            where = f"encoder output {identifier!r}"
            assert now.obj_id == was.obj_id, f"{where} was replaced"
            assert (now.data_ptr, now.shape, now.stride, now.dtype) == (
                was.data_ptr,
                was.shape,
                was.stride,
                was.dtype,
            ), f"{where} changed storage or layout"
            assert torch.equal(now.values, was.values), f"{where} changed values"


def _assert_same_feature(req_id: str, before: _FeatureState, after: _FeatureState) -> None:
    where = f"feature {before.identifier!r} of {req_id!r}"
    plain = ("obj_id", "identifier", "modality", "data_id", "position_id", "offset", "length")
    for name in (*plain, "is_embed_id", "num_embeds"):
        assert getattr(after, name) == getattr(before, name), f"{where}: {name} changed"
    if before.is_embed is not None:
        assert after.is_embed is not None
        assert torch.equal(after.is_embed, before.is_embed), f"{where}: is_embed changed"


class ArraySnapshot:
    """Copies of the numpy arrays passed to a call, to check they were not mutated (G9)."""

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        self._arrays = {name: (id(a), a.dtype, a.copy()) for name, a in arrays.items()}

    def assert_unchanged(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Fail naming the array whose identity, dtype or values changed."""
        for name, (obj_id, dtype, values) in self._arrays.items():
            array = arrays[name]
            assert id(array) == obj_id, f"{name} was replaced"
            assert array.dtype == dtype, f"{name} changed dtype to {array.dtype}"
            assert np.array_equal(array, values), f"{name} was mutated: {values} -> {array}"
