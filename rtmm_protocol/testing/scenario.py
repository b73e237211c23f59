"""Gather scenarios: everything one gather call depends on, in plain numbers.

A :class:`GatherScenario` holds the requests' features and cached encoder outputs, the
batch arrays and the look-ahead. It fills a fresh :class:`~rtmm_protocol.EncoderCache`
for each target, builds the step's input batch, and prints itself as ready-to-run
Python, which is how failing conformance checks show the smallest batch. Random ones
come from :mod:`rtmm_protocol.testing.strategies`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from rtmm_protocol.encoder_cache import EncoderCache
from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.placeholder import PlaceholderRange
from rtmm_protocol.testing.input_batch import ReferenceInputBatch
from rtmm_protocol.types import IntArray

__all__ = [
    "FeatureSpec",
    "GatherScenario",
    "RequestSpec",
    "distinct_output",
    "encoder_output_for",
]

# Rows of one output are told apart by ``tag + row`` in the first column; outputs of
# one scenario get tags this far apart (the strategies never draw longer placeholders).
_DISTINCT_TAG_STRIDE = 1000


def encoder_output_for(identifier: str, num_embeds: int, hidden_size: int) -> torch.Tensor:
    """A deterministic output whose every row is distinct, so a wrong row is visible.

    Row ``r`` holds ``tag + r`` in its first column and small fractions elsewhere, where
    ``tag`` is derived from the identifier.
    """
    tag = float(sum((k + 1) * ord(c) for k, c in enumerate(identifier)) % 9973) * 100.0
    rows = torch.arange(num_embeds, dtype=torch.float32).unsqueeze(1)
    cols = torch.arange(hidden_size, dtype=torch.float32).unsqueeze(0)
    return tag + rows + cols / (hidden_size + 1)


def distinct_output(ordinal: int, num_embeds: int, hidden_size: int) -> torch.Tensor:
    """The output of the ``ordinal``-th feature of a scenario: no two rows of a scenario agree.

    The first column holds ``(ordinal + 1) * 1000 + row``, an integer float32 holds
    exactly, so a row taken from the wrong feature or the wrong position always shows (G5),
    and a row can be traced back to its feature from its value alone.
    """
    if not 0 <= num_embeds < _DISTINCT_TAG_STRIDE:
        raise ValueError(
            f"num_embeds must be in [0, {_DISTINCT_TAG_STRIDE}) to keep rows distinct, "
            f"got {num_embeds}"
        )
    tag = float((ordinal + 1) * _DISTINCT_TAG_STRIDE)
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

    def feature_specs(self) -> list[FeatureSpec]:
        """Every feature of the scenario (batch requests, then extra ones) in order."""
        return [spec for r in (*self.requests, *self.extra_requests) for spec in r.features]

    def distinct_outputs(self, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        """The cached outputs of this scenario, built with :func:`distinct_output`."""
        return {
            spec.identifier: distinct_output(ordinal, spec.num_embeds, self.hidden_size).to(device)
            for ordinal, spec in enumerate(self.feature_specs())
            if spec.cached
        }

    def build_cache(self) -> EncoderCache:
        """A fresh cache holding this scenario's features and outputs."""
        cache = EncoderCache()
        self.fill_cache(cache)
        return cache

    def load_into(self, cache: EncoderCache, device: torch.device | str = "cpu") -> None:
        """Register every request and cache the :meth:`distinct_outputs` in ``cache``.

        Goes through the dicts' plain ``dict`` methods, so an instrumented cache records
        none of it: only what a target does afterwards counts.
        """
        for request in (*self.requests, *self.extra_requests):
            dict.__setitem__(
                cache.mm_features, request.req_id, [spec.build() for spec in request.features]
            )
        for identifier, output in self.distinct_outputs(device).items():
            dict.__setitem__(cache.encoder_outputs, identifier, output)

    def input_batch(self, device: torch.device | str = "cpu") -> ReferenceInputBatch:
        """The scenario as an ``InputBatch``, padded by :attr:`padding` tokens."""
        return ReferenceInputBatch.from_requests(
            self.req_ids,
            [r.prefill_len for r in self.requests],
            [r.num_computed_tokens for r in self.requests],
            [r.num_scheduled_tokens for r in self.requests],
            num_tokens_after_padding=self.num_tokens + self.padding,
            device=device,
        )

    def to_python(self) -> str:
        """Ready-to-run Python that rebuilds this scenario."""
        lines = [
            "from rtmm_protocol.testing import FeatureSpec, GatherScenario, RequestSpec",
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
