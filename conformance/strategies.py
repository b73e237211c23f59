"""Hypothesis strategies for gather scenarios: the one place random batches come from.

A :class:`GatherScenario` is everything one gather call depends on: the requests'
features and cached encoder outputs, the batch arrays and the look-ahead. It can
rebuild a fresh :class:`~rtmm_protocol.EncoderCache` for each target and print itself
as ready-to-run Python, which is how failing checks show the smallest batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from hypothesis import strategies as st

from rtmm_protocol.encoder_cache import EncoderCache
from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.placeholder import PlaceholderRange
from rtmm_protocol.types import IntArray

__all__ = [
    "FeatureSpec",
    "GatherScenario",
    "RequestSpec",
    "encoder_output_for",
    "gather_scenarios",
]


def encoder_output_for(identifier: str, num_embeds: int, hidden_size: int) -> torch.Tensor:
    """A deterministic output whose every row is distinct, so a wrong row is visible.

    Row ``r`` holds ``tag + r`` in its first column and small fractions elsewhere, where
    ``tag`` is derived from the identifier.
    """
    tag = float(sum((k + 1) * ord(c) for k, c in enumerate(identifier)) % 9973) * 100.0
    rows = torch.arange(num_embeds, dtype=torch.float32).unsqueeze(1)
    cols = torch.arange(hidden_size, dtype=torch.float32).unsqueeze(0)
    return tag + rows + cols / (hidden_size + 1)


@dataclass(frozen=True)
class FeatureSpec:
    """A feature in plain numbers: placeholder, mask, and whether its output is cached."""

    identifier: str
    offset: int
    length: int
    is_embed: tuple[bool, ...] | None = None
    cached: bool = True
    modality: str = "audio"

    @property
    def num_embeds(self) -> int:
        """Rows of this feature's encoder output."""
        return self.length if self.is_embed is None else sum(self.is_embed)

    def build(self) -> MultiModalFeature:
        """The contract object for this feature (``data`` left ``None``)."""
        mask = None if self.is_embed is None else torch.tensor(self.is_embed, dtype=torch.bool)
        return MultiModalFeature(
            identifier=self.identifier,
            modality=self.modality,
            mm_position=PlaceholderRange(self.offset, self.length, mask),
        )


@dataclass(frozen=True)
class RequestSpec:
    """One request of a scenario and its place in the batch."""

    req_id: str
    prefill_len: int
    num_computed_tokens: int
    num_scheduled_tokens: int
    features: tuple[FeatureSpec, ...] = ()


@dataclass(frozen=True)
class GatherScenario:
    """One gather call's inputs, reproducible and printable."""

    requests: tuple[RequestSpec, ...]
    hidden_size: int = 4
    draft_lookahead: int = 0
    padding: int = 0
    extra_requests: tuple[RequestSpec, ...] = field(default=())

    @property
    def req_ids(self) -> list[str]:
        """Request ids in batch order."""
        return [r.req_id for r in self.requests]

    def arrays(self) -> dict[str, IntArray]:
        """The batch arrays, as int32 numpy arrays keyed by gather argument name."""
        scheduled = np.array([r.num_scheduled_tokens for r in self.requests], dtype=np.int32)
        qsl = np.zeros(len(self.requests) + 1, dtype=np.int32)
        np.cumsum(scheduled, out=qsl[1:])
        return {
            "num_scheduled_tokens": scheduled,
            "query_start_loc": qsl,
            "prefill_lens": np.array([r.prefill_len for r in self.requests], dtype=np.int32),
            "num_computed_tokens": np.array(
                [r.num_computed_tokens for r in self.requests], dtype=np.int32
            ),
        }

    @property
    def num_tokens(self) -> int:
        """Total scheduled tokens of the batch."""
        return sum(r.num_scheduled_tokens for r in self.requests)

    def fill_cache(self, cache: EncoderCache) -> None:
        """Register every request (batch and extra) and cache the outputs marked cached."""
        for request in (*self.requests, *self.extra_requests):
            cache.add_request(request.req_id, [f.build() for f in request.features])
            for spec in request.features:
                if spec.cached:
                    cache.encoder_outputs[spec.identifier] = encoder_output_for(
                        spec.identifier, spec.num_embeds, self.hidden_size
                    )

    def build_cache(self) -> EncoderCache:
        """A fresh cache holding this scenario's features and outputs."""
        cache = EncoderCache()
        self.fill_cache(cache)
        return cache

    def to_python(self) -> str:
        """Ready-to-run Python that rebuilds this scenario."""
        lines = [
            "from rtmm_protocol.conformance.strategies import FeatureSpec, GatherScenario, RequestSpec",
            "scenario = GatherScenario(",
            "    requests=(",
        ]
        for request in self.requests:
            lines.append(f"        {request!r},")
        lines.append("    ),")
        lines.append(
            f"    hidden_size={self.hidden_size}, draft_lookahead={self.draft_lookahead}, "
            f"padding={self.padding},"
        )
        if self.extra_requests:
            lines.append(f"    extra_requests={self.extra_requests!r},")
        lines.append(")")
        return "\n".join(lines)


@st.composite
def _embed_masks(draw: st.DrawFn, length: int) -> tuple[bool, ...] | None:
    kind = draw(st.sampled_from(["none", "none", "all_true", "all_false", "random"]))
    if kind == "none":
        return None
    if kind == "all_true":
        return (True,) * length
    if kind == "all_false":
        return (False,) * length
    return tuple(draw(st.lists(st.booleans(), min_size=length, max_size=length)))


@st.composite
def _features(
    draw: st.DrawFn, req_index: int, max_features: int, cache_miss_rate: float
) -> tuple[FeatureSpec, ...]:
    count = draw(st.integers(0, max_features))
    cursor = draw(st.integers(0, 6))
    specs = []
    for k in range(count):
        length = draw(st.integers(1, 8))
        offset = cursor + draw(st.integers(0, 4))
        cached = draw(st.floats(0, 1)) >= cache_miss_rate
        specs.append(
            FeatureSpec(
                identifier=f"r{req_index}f{k}",
                offset=offset,
                length=length,
                is_embed=draw(_embed_masks(length)),
                cached=cached,
                modality=draw(st.sampled_from(["audio", "image"])),
            )
        )
        cursor = offset + length
    return tuple(specs)


@st.composite
def gather_scenarios(
    draw: st.DrawFn,
    *,
    max_requests: int = 5,
    max_features: int = 4,
    max_scheduled: int = 12,
    cache_miss_rate: float = 0.1,
    lookaheads: tuple[int, ...] = (0, 1, 2),
) -> GatherScenario:
    """Random gather scenarios: mixed prefill and decode, chunks crossing features, masks.

    Windows are drawn near the features (just before, across, just after, and past the
    prompt) so boundaries are hit often; prompts sometimes end inside a feature and
    realtime-style features sit past the prompt.
    """
    num_requests = draw(st.integers(0, max_requests))
    requests = []
    for i in range(num_requests):
        features = draw(_features(i, max_features, cache_miss_rate))
        span = max((f.offset + f.length for f in features), default=0)
        prefill_len = draw(st.integers(0, span + 4))
        computed = draw(st.integers(0, span + 6))
        scheduled = draw(st.integers(0, max_scheduled))
        requests.append(
            RequestSpec(
                req_id=f"req-{i}",
                prefill_len=prefill_len,
                num_computed_tokens=computed,
                num_scheduled_tokens=scheduled,
                features=features,
            )
        )
    return GatherScenario(
        requests=tuple(requests),
        hidden_size=draw(st.sampled_from([1, 4])),
        draft_lookahead=draw(st.sampled_from(lookaheads)),
        padding=draw(st.integers(0, 3)),
    )
