"""Before-and-after pictures of an encoder cache, to tell whether a call changed it (G8, E3).

The picture holds the dicts' identities and key order, each feature's object and
declared fields (including the ``is_embed`` values and the embed count) and each
output's object, storage, layout and values. Values memoized on a feature (an
embed-count prefix sum) are not part of it: the contract allows them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rtmm_protocol.encoder_cache import EncoderCache
from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.testing import comparisons

__all__ = ["CacheSnapshot", "tensor_changes"]


def _num_embeds(feature: MultiModalFeature) -> int | None:
    """The embed count, or ``None`` for a malformed ``is_embed`` the count cannot handle."""
    try:
        return feature.mm_position.get_num_embeds()
    except Exception:
        return None


@dataclass(frozen=True)
class _Feature:
    obj: int
    identifier: str
    modality: str
    data: int
    position: int
    offset: int
    length: int
    is_embed: torch.Tensor | None
    num_embeds: int | None

    @classmethod
    def of(cls, feature: MultiModalFeature) -> _Feature:
        pos = feature.mm_position
        mask = pos.is_embed
        return cls(
            obj=id(feature),
            identifier=feature.identifier,
            modality=feature.modality,
            data=id(feature.data),
            position=id(pos),
            offset=pos.offset,
            length=pos.length,
            is_embed=None if mask is None else mask.detach().to("cpu", copy=True),
            num_embeds=_num_embeds(feature),
        )

    def differences(self, other: _Feature) -> list[str]:
        names = ("obj", "identifier", "modality", "data", "position", "offset", "length")
        found = [n for n in names if getattr(self, n) != getattr(other, n)]
        if (self.is_embed is None) != (other.is_embed is None) or (
            self.is_embed is not None
            and other.is_embed is not None
            and not comparisons.equal(self.is_embed, other.is_embed)
        ):
            found.append("is_embed")
        if self.num_embeds != other.num_embeds:
            found.append("num_embeds")
        return found


@dataclass(frozen=True)
class _Output:
    obj: int
    storage: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    values: torch.Tensor

    @classmethod
    def of(cls, output: torch.Tensor) -> _Output:
        return cls(
            obj=id(output),
            storage=output.untyped_storage().data_ptr(),
            shape=tuple(output.shape),
            stride=tuple(output.stride()),
            dtype=output.dtype,
            values=output.detach().to("cpu", copy=True),
        )


def tensor_changes(before: torch.Tensor, after: torch.Tensor) -> str | None:
    """A description of how two snapshots of one tensor differ, or ``None``."""
    if before.shape != after.shape or before.dtype != after.dtype:
        return f"shape/dtype {tuple(before.shape)}/{before.dtype} -> {tuple(after.shape)}/{after.dtype}"
    if comparisons.equal(before, after):
        return None
    changed = comparisons.nonzero(
        comparisons.ne(before, after).reshape(before.shape[0], -1).any(dim=1)
    )
    return f"rows {changed.flatten().tolist()[:6]} changed"


class CacheSnapshot:
    """Everything observable about an encoder cache at one moment."""

    def __init__(
        self,
        features_dict: int,
        outputs_dict: int,
        features: dict[str, tuple[int, list[_Feature]]],
        outputs: dict[str, _Output],
    ) -> None:
        self._features_dict = features_dict
        self._outputs_dict = outputs_dict
        self._features = features
        self._outputs = outputs

    @classmethod
    def take(cls, cache: EncoderCache) -> CacheSnapshot:
        """Picture ``cache`` now (plain dict access: an instrumented dict records nothing)."""
        return cls(
            features_dict=id(cache.mm_features),
            outputs_dict=id(cache.encoder_outputs),
            features={
                req_id: (id(features), [_Feature.of(f) for f in features])
                for req_id, features in dict.items(cache.mm_features)
            },
            outputs={k: _Output.of(v) for k, v in dict.items(cache.encoder_outputs)},
        )

    def changes(self, cache: EncoderCache) -> list[str]:
        """How ``cache`` differs from this picture, in words; empty when it does not."""
        now = CacheSnapshot.take(cache)
        found: list[str] = []
        if now._features_dict != self._features_dict:
            found.append("the mm_features dict was replaced")
        if now._outputs_dict != self._outputs_dict:
            found.append("the encoder_outputs dict was replaced")
        if list(now._features) != list(self._features):
            found.append(f"mm_features keys {list(self._features)} -> {list(now._features)}")
        for req_id, (list_id, features) in self._features.items():
            if req_id not in now._features:
                continue
            now_list, now_features = now._features[req_id]
            if now_list != list_id:
                found.append(f"the feature list of {req_id!r} was replaced")
            if len(now_features) != len(features):
                found.append(f"{req_id!r} has {len(now_features)} features, had {len(features)}")
                continue
            for old, new in zip(features, now_features, strict=True):
                fields = old.differences(new)
                if fields:
                    found.append(f"feature {old.identifier!r} changed: {', '.join(fields)}")
        if list(now._outputs) != list(self._outputs):
            found.append(f"encoder_outputs keys {list(self._outputs)} -> {list(now._outputs)}")
        for identifier, old_out in self._outputs.items():
            new_out = now._outputs.get(identifier)
            if new_out is None:
                continue
            if (old_out.obj, old_out.storage, old_out.shape, old_out.stride, old_out.dtype) != (
                new_out.obj,
                new_out.storage,
                new_out.shape,
                new_out.stride,
                new_out.dtype,
            ):
                found.append(f"the encoder output of {identifier!r} was replaced or re-laid out")
                continue
            values = tensor_changes(old_out.values, new_out.values)
            if values is not None:
                found.append(f"the encoder output of {identifier!r} was written: {values}")
        return found
