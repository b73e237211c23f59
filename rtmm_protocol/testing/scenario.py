"""Gather scenarios: everything one gather call depends on, in plain numbers.

A :class:`GatherScenario` holds the requests' features and cached encoder outputs, the
batch arrays and the look-ahead. It fills a fresh :class:`~rtmm_protocol.EncoderCache`
for each target, builds the step's input batch, and prints itself as ready-to-run
Python, which is how failing conformance checks show the smallest batch. Random ones
come from :mod:`rtmm_protocol.testing.strategies`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch

from rtmm_protocol.encoder_cache import EncoderCache
from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.placeholder import PlaceholderRange
from rtmm_protocol.testing.input_batch import ReferenceInputBatch
from rtmm_protocol.types import IntArray

__all__ = [
    "CaseKind",
    "FeatureSpec",
    "GatherScenario",
    "RequestSpec",
    "distinct_output",
    "encoder_output_for",
]

#: What sort of step a scenario is (:meth:`GatherScenario.kind`): the number of requests
#: and the sorted kinds of their windows, for example ``(1, ("realtime-decode",))``.
CaseKind = tuple[int, tuple[str, ...]]

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

    def window_kinds(self, request: RequestSpec, realtime: bool) -> frozenset[str]:
        """The kinds of ``request``'s window in this step: ``prefill``, ``chunked-prefill``,
        ``decode`` (past the prompt: ``realtime-decode`` for a realtime model, a skipped
        step otherwise) or ``zero-token``; with ``look-ahead``, and ``masked`` or ``miss``
        when it gathers over a feature with an ``is_embed`` mask or without a cached output."""
        start = request.num_computed_tokens + self.draft_lookahead
        kinds = {"look-ahead"} if self.draft_lookahead else set()
        if request.num_scheduled_tokens == 0:
            return frozenset({*kinds, "zero-token"})
        if start >= request.prefill_len:
            kinds.add("realtime-decode" if realtime else "decode")
            if not realtime:
                return frozenset(kinds)  # skipped: its features are not gathered
        else:
            kinds.add("prefill" if request.num_computed_tokens == 0 else "chunked-prefill")
        for spec in _features_in(request, start, start + request.num_scheduled_tokens):
            kinds |= {"masked"} if spec.is_embed is not None else set()
            kinds |= {"miss"} if not spec.cached else set()
        return frozenset(kinds)

    def kind(self, realtime: bool) -> CaseKind:
        """What sort of step this is, as a hashable signature: the number of requests and
        the sorted kinds of their windows (see :meth:`window_kinds`)."""
        kinds = set().union(*(self.window_kinds(r, realtime) for r in self.requests))
        return len(self.requests), tuple(sorted(kinds))

    def describe(self, realtime: bool) -> str:
        """The step in plain words: each request's kind of window, the placeholders it
        meets, and the look-ahead; for example ``1 request: a realtime request decoding past
        its prompt (window [5, 7) starts inside the placeholder of a0), look-ahead 1``."""
        look = self.draft_lookahead
        parts = [_describe_request(self, r, realtime) for r in self.requests]
        count = f"{len(self.requests)} request" + ("" if len(self.requests) == 1 else "s")
        text = f"{count}: " + "; ".join(parts) if parts else "no request"
        return text + (f", look-ahead {look}" if look else "")

    def simpler(self) -> list[GatherScenario]:
        """Simpler steps to try in place of this one, simplest first: each request with
        scheduled tokens alone in the batch (the others stay in the cache, as requests not
        scheduled this step), then the step without those, without ``is_embed`` masks,
        then without the look-ahead."""
        singles = [
            replace(self, requests=(r,), extra_requests=(*others, *self.extra_requests))
            for i, r in enumerate(self.requests)
            for others in [self.requests[:i] + self.requests[i + 1 :]]
            if r.num_scheduled_tokens > 0 and len(self.requests) > 1
        ]
        unmasked = tuple(
            replace(r, features=tuple(replace(f, is_embed=None) for f in r.features))
            for r in self.requests
        )
        return [
            *singles,
            *([replace(self, extra_requests=())] if self.extra_requests else []),
            *([replace(self, requests=unmasked)] if unmasked != self.requests else []),
            *([replace(self, draft_lookahead=0)] if self.draft_lookahead else []),
        ]

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


def _features_in(request: RequestSpec, start: int, end: int) -> list[FeatureSpec]:
    """The features of ``request`` whose placeholder meets the window ``[start, end)``."""
    return [f for f in request.features if f.offset < end and start < f.offset + f.length]


_REQUEST_WORDS = {
    "prefill": "a request in its prompt's first chunk",
    "chunked-prefill": "a request in a later chunk of its prompt",
    "realtime-decode": "a realtime request decoding past its prompt",
    "decode": "a request decoding past its prompt (skipped by a non-realtime model)",
    "zero-token": "a request with 0 scheduled tokens",
}


def _describe_request(scenario: GatherScenario, request: RequestSpec, realtime: bool) -> str:
    """One request of :meth:`GatherScenario.describe`."""
    start = request.num_computed_tokens + scenario.draft_lookahead
    end = start + request.num_scheduled_tokens
    kinds = scenario.window_kinds(request, realtime)
    words = next(w for k, w in _REQUEST_WORDS.items() if k in kinds)
    meets = []
    for spec in request.features:
        if spec.offset < start < spec.offset + spec.length:
            place = f"starts inside the placeholder of {spec.identifier}"
        elif spec in _features_in(request, start, end):
            place = f"covers placeholder {spec.identifier}"
        else:
            continue
        notes = [
            n
            for n, on in (("masked", spec.is_embed is not None), ("not cached", not spec.cached))
            if on
        ]
        meets.append(place + (f" ({', '.join(notes)})" if notes else ""))
    where = ", ".join(meets) if meets else "meets no placeholder"
    return f"{words} (window [{start}, {end}) {where})"
