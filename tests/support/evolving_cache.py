"""An encoder cache that changes between steps the way an engine changes it.

Gatherers may keep derived state across steps (tables of features, remembered output
locations). These helpers drive one cache through a sequence of steps, changing it in
between (streams growing, outputs freed, cached or replaced, requests leaving and
coming back), so that state kept by a gatherer is checked against the oracle after
every change.
"""

from __future__ import annotations

import itertools

import torch
from hypothesis import strategies as st

from rtmm_protocol import EncoderCache, MultiModalFeature, PlaceholderRange
from rtmm_protocol.testing.scenario import encoder_output_for
from support.recording_dict import RecordingDict

__all__ = ["CACHE_CHANGES", "EvolvingCache"]

#: The changes :meth:`EvolvingCache.change` can make.
CACHE_CHANGES = (
    "nothing",
    "append_feature",
    "free_output",
    "cache_output",
    "replace_output",
    "replace_feature_list",
    "re_add_request",
    "add_request",
    "remove_request",
)


class EvolvingCache:
    """An :class:`EncoderCache` (outputs in a :class:`RecordingDict`) and the changes to it.

    Every feature gets a fresh identifier, so an output freed or replaced under one
    identifier can never be confused with another feature's.
    """

    def __init__(self, data: st.DataObject, hidden_size: int, *, max_length: int = 5) -> None:
        self.data = data
        self.hidden_size = hidden_size
        self.max_length = max_length
        self.cache = EncoderCache()
        self.outputs: RecordingDict[str, torch.Tensor] = RecordingDict()
        self.cache.encoder_outputs = self.outputs
        self._ids = itertools.count()
        self._versions = itertools.count(1)

    @property
    def req_ids(self) -> list[str]:
        """The registered requests, in registration order."""
        return list(dict.keys(self.cache.mm_features))

    def span(self, req_id: str) -> int:
        """One past the last placeholder position of a request (0 without features)."""
        features = dict.__getitem__(self.cache.mm_features, req_id)
        return features[-1].mm_position.end if features else 0

    def new_features(self, start: int, count: int) -> list[MultiModalFeature]:
        """``count`` sorted features from ``start`` on, each cached or not at random."""
        draw = self.data.draw
        features = []
        cursor = start
        for _ in range(count):
            offset = cursor + draw(st.integers(0, 3))
            length = draw(st.integers(1, self.max_length))
            flags = draw(
                st.one_of(st.none(), st.lists(st.booleans(), min_size=length, max_size=length))
            )
            mask = None if flags is None else torch.tensor(flags, dtype=torch.bool)
            identifier = f"item{next(self._ids)}"
            modality = draw(st.sampled_from(["audio", "image"]))
            feature = MultiModalFeature(
                identifier, modality, PlaceholderRange(offset, length, mask)
            )
            if draw(st.integers(0, 4)) > 0:
                self._store(feature)
            features.append(feature)
            cursor = offset + length
        return features

    def add_request(self, req_id: str, max_features: int = 3) -> None:
        """Register ``req_id`` with up to ``max_features`` features."""
        count = self.data.draw(st.integers(0, max_features))
        self.cache.add_request(req_id, self.new_features(self.data.draw(st.integers(0, 4)), count))

    def change(self, kind: str) -> None:
        """Make one change of the given kind (a no-op where it does not apply)."""
        draw = self.data.draw
        req_ids = self.req_ids
        features = [f for r in req_ids for f in dict.__getitem__(self.cache.mm_features, r)]
        cached = [f for f in features if dict.__contains__(self.outputs, f.identifier)]
        uncached = [f for f in features if not dict.__contains__(self.outputs, f.identifier)]
        if kind == "append_feature" and req_ids:
            req_id = draw(st.sampled_from(req_ids))
            (feature,) = self.new_features(self.span(req_id), 1)
            self.cache.append_feature(req_id, feature)
        elif kind == "free_output" and cached:
            self.cache.free_encoder_output(draw(st.sampled_from(cached)).identifier)
        elif kind == "cache_output" and uncached:
            self._store(draw(st.sampled_from(uncached)))
        elif kind == "replace_output" and cached:
            self._store(draw(st.sampled_from(cached)), version=next(self._versions))
        elif kind == "replace_feature_list" and req_ids:
            # A new list of the same length: only its identity says that it changed.
            req_id = draw(st.sampled_from(req_ids))
            count = len(dict.__getitem__(self.cache.mm_features, req_id))
            new_list = self.new_features(draw(st.integers(0, 4)), count)
            self.cache.mm_features[req_id] = new_list
        elif kind == "re_add_request" and req_ids:
            req_id = draw(st.sampled_from(req_ids))
            count = len(dict.__getitem__(self.cache.mm_features, req_id))
            self.cache.remove_request(req_id)
            self.cache.add_request(req_id, self.new_features(draw(st.integers(0, 4)), count))
        elif kind == "add_request":
            self.add_request(f"late-{next(self._ids)}")
        elif kind == "remove_request" and len(req_ids) > 1:
            self.cache.remove_request(draw(st.sampled_from(req_ids)))

    def _store(self, feature: MultiModalFeature, version: int = 0) -> None:
        num_embeds = feature.mm_position.get_num_embeds()
        tag = feature.identifier if version == 0 else f"{feature.identifier}~{version}"
        dict.__setitem__(
            self.outputs, feature.identifier, encoder_output_for(tag, num_embeds, self.hidden_size)
        )
