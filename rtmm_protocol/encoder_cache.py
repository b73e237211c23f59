"""The per-request feature lists and the cached encoder outputs a gather reads."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.validation import check_encoder_output, check_feature_list, check_size

__all__ = ["EncoderCache"]


class EncoderCache:
    """Features per request and encoder outputs per feature identifier.

    ``mm_features`` maps a ``req_id`` to that request's features sorted by offset;
    ``encoder_outputs`` maps a feature identifier to its ``(num_embeds, hidden_size)``
    output. Both are plain dicts that engines may read and write directly; the methods
    below are the checked way to change them (they raise ``ValueError`` naming the
    identifier for malformed features, SPEC E2).

    Between two steps an engine may make these changes (SPEC C1), by method or directly:

    * add a request with a new feature list (:meth:`add_request`, or assigning a new list
      to ``mm_features[req_id]``);
    * append a feature to a request's list (:meth:`append_feature`, or ``append``);
    * replace a list item by a feature with the same identifier and placeholder (a data
      update: ``features[k] = dataclasses.replace(features[k], data=...)``);
    * remove a request (:meth:`remove_request`, or ``del``);
    * store, replace or delete an encoder output (:meth:`put_encoder_output`,
      :meth:`free_encoder_output`, or assigning into / deleting from ``encoder_outputs``).

    Features and placeholders are frozen values, and a cached output is a value too: a
    change is a new object, never an in-place edit. Anything else (reordering a list in
    place, replacing an item by one with another placeholder without assigning a new
    list, writing into a cached tensor) is outside the contract (SPEC C2).

    Registration refuses what no gather could use: features with an ``is_embed`` on the
    meta device or a placeholder past the largest supported position, outputs that are
    not 2-D tensors holding data. A cache may be read by several runners or states in
    several threads at once; changes to it must not overlap with their calls.
    """

    def __init__(self, hidden_size: int | None = None) -> None:
        if hidden_size is not None:
            hidden_size = check_size("EncoderCache.hidden_size", hidden_size)
        #: When set, outputs stored through :meth:`put_encoder_output` must have this width.
        self.hidden_size = hidden_size
        self.mm_features: dict[str, list[MultiModalFeature]] = {}
        self.encoder_outputs: dict[str, torch.Tensor] = {}

    def add_request(self, req_id: str, features: Iterable[MultiModalFeature] = ()) -> None:
        """Register a request and its features (sorted by offset, non-overlapping)."""
        if not isinstance(req_id, str):
            raise ValueError(f"req_id must be a str, got {req_id!r}")
        if req_id in self.mm_features:
            raise ValueError(f"request {req_id!r} is already registered in the encoder cache")
        feature_list = list(features)
        check_feature_list(req_id, feature_list)
        self.mm_features[req_id] = feature_list

    def append_feature(self, req_id: str, feature: MultiModalFeature) -> None:
        """Add a feature after the request's last one (a realtime stream growing)."""
        features = self._features_of(req_id)
        check_feature_list(req_id, [*features[-1:], feature])
        features.append(feature)

    def remove_request(self, req_id: str) -> None:
        """Forget a request's features; its encoder outputs stay until freed."""
        self._features_of(req_id)
        del self.mm_features[req_id]

    def put_encoder_output(self, identifier: str, output: torch.Tensor) -> None:
        """Cache ``output`` under ``identifier`` after checking its shape against the feature."""
        feature = self.find_feature(identifier)
        if feature is None:
            raise ValueError(
                f"no registered feature has identifier {identifier!r}; add its request first"
            )
        check_encoder_output(feature, output, self.hidden_size)
        self.encoder_outputs[identifier] = output

    def free_encoder_output(self, identifier: str) -> None:
        """Drop the cached output of ``identifier`` (no error if it is not cached)."""
        self.encoder_outputs.pop(identifier, None)

    def find_feature(self, identifier: str) -> MultiModalFeature | None:
        """Return a registered feature with this identifier, or ``None``."""
        for features in self.mm_features.values():
            for feature in features:
                if feature.identifier == identifier:
                    return feature
        return None

    def _features_of(self, req_id: str) -> list[MultiModalFeature]:
        try:
            return self.mm_features[req_id]
        except KeyError:
            raise ValueError(f"request {req_id!r} is not registered in the encoder cache") from None
