"""Hypothesis strategies for gather scenarios: the one place random batches come from.

:func:`gather_scenarios` draws batches of mixed prefill and decode requests whose windows
sit on feature edges, with ``is_embed`` masks, look-ahead, padding and cache misses. It
can be narrowed to one *family* (windows all in the prompt, all past it, no masks, one
request...): the conformance checks use the narrowing so that each check exercises its
own clause, and a fault in another clause cannot make it fail. By default every batch is
in the contract's *domain*, what an engine's scheduler produces: each request has at least
one scheduled token; ``zero_scheduled=True`` (or :func:`with_zero_scheduled`) draws the
zero-token requests that robustness speaks of. Needs ``hypothesis``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Literal

from hypothesis import strategies as st

from rtmm_protocol.testing.scenario import FeatureSpec, GatherScenario, RequestSpec

__all__ = [
    "WINDOW_KINDS",
    "WindowKind",
    "gather_scenarios",
    "lookahead_only_misses",
    "non_embed_only_misses",
    "prefill_first",
    "with_non_embed_windows",
    "with_zero_scheduled",
]

#: Where request windows start relative to the prompt: ``prefill`` keeps every window
#: start before ``prefill_len``, ``decode`` at or past it, ``mixed`` draws steps of every
#: kind (every request in its prompt, every request decoding, or each request either way)
#: and ``any`` draws ``prefill_len`` freely.
WindowKind = Literal["any", "prefill", "decode", "mixed"]
WINDOW_KINDS: tuple[WindowKind, ...] = ("any", "prefill", "decode", "mixed")


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
    draw: st.DrawFn,
    req_index: int,
    max_features: int,
    cache_miss_rate: float,
    masks: bool = True,
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
                is_embed=draw(_embed_masks(length)) if masks else None,
                cached=cached,
                modality=draw(st.sampled_from(["audio", "image"])),
            )
        )
        cursor = offset + length
    return tuple(specs)


# Where a window is placed relative to one feature of its request: free, or with its
# start or its scheduled end exactly on, inside or just past the feature's edges.
_ANCHORS = (
    "free",
    "free",
    "start_at_offset",
    "start_inside",
    "start_at_end",
    "scheduled_end_at_offset",
    "scheduled_end_inside",
)


@st.composite
def _window(
    draw: st.DrawFn,
    features: tuple[FeatureSpec, ...],
    lookahead: int,
    max_scheduled: int,
    min_scheduled: int,
) -> tuple[int, int]:
    """``(num_computed_tokens, num_scheduled_tokens)``, often on a feature's edge."""
    span = max((f.offset + f.length for f in features), default=0)
    scheduled = draw(st.integers(min_scheduled, max(min_scheduled, max_scheduled)))
    anchor = draw(st.sampled_from(_ANCHORS)) if features else "free"
    if anchor == "free":
        return draw(st.integers(0, span + 6)), scheduled
    feature = draw(st.sampled_from(features))
    end = feature.offset + feature.length
    if anchor == "start_at_offset":
        start = feature.offset
    elif anchor == "start_inside":
        start = draw(st.integers(feature.offset, end - 1))
    elif anchor == "start_at_end":
        start = end
    elif anchor == "scheduled_end_at_offset":
        # computed + scheduled == offset: a miss there is reached only by the look-ahead.
        start = feature.offset - scheduled + lookahead
    else:
        scheduled = max(scheduled, 1)
        start = draw(st.integers(feature.offset + 1, end)) - scheduled + lookahead
    return max(start - lookahead, 0), scheduled


@st.composite
def _prefill_len(
    draw: st.DrawFn, windows: WindowKind, start: int, scheduled_end: int, span: int
) -> int:
    """A prompt length that puts the window start ``start`` where ``windows`` asks."""
    kind = windows
    if kind == "mixed":
        kind = draw(st.sampled_from(["prefill", "decode"]))
    if kind == "any":
        return draw(st.integers(0, span + 4))
    if kind == "prefill":
        # Often the last prompt chunk exactly; else anywhere past the window start.
        last_chunk = scheduled_end if scheduled_end > start else start + 1
        return draw(
            st.sampled_from([last_chunk, start + 1])
            | st.integers(start + 1, max(start + 1, span + 6))
        )
    return draw(st.sampled_from([start, 0]) | st.integers(0, start))


@st.composite
def gather_scenarios(
    draw: st.DrawFn,
    *,
    max_requests: int = 5,
    max_features: int = 4,
    max_scheduled: int = 12,
    cache_miss_rate: float = 0.1,
    lookaheads: tuple[int, ...] = (0, 1, 2),
    windows: WindowKind = "any",
    masks: bool = True,
    min_requests: int = 0,
    max_padding: int = 3,
    zero_scheduled: bool = False,
) -> GatherScenario:
    """Random gather scenarios: mixed prefill and decode, chunks crossing features, masks.

    Windows are drawn near the features (just before, across, just after, and past the
    prompt) so boundaries are hit often; prompts sometimes end inside a feature and
    realtime-style features sit past the prompt. ``windows`` places every window start
    in the prompt, past it, or mixes steps of every kind (see :data:`WindowKind`);
    ``masks=False`` leaves every ``is_embed`` unset; ``cache_miss_rate`` is the chance that a
    feature's output is not cached; ``zero_scheduled`` lets requests have no scheduled
    token, which an engine's scheduler never sends (robustness, not the contract's domain).
    """
    if windows not in WINDOW_KINDS:
        raise ValueError(f"windows must be one of {WINDOW_KINDS}, got {windows!r}")
    if not 0 <= min_requests <= max_requests:
        raise ValueError(
            f"need 0 <= min_requests <= max_requests, got {min_requests} and {max_requests}"
        )
    lookahead = draw(st.sampled_from(lookaheads))
    num_requests = draw(st.integers(min_requests, max_requests))
    # A mixed step is, in turn, all prompt chunks, all decode steps (the steady state of
    # realtime serving), or a mix request by request.
    step: WindowKind = windows
    if windows == "mixed":
        step = draw(st.sampled_from(("prefill", "decode", "mixed")))
    requests = []
    for i in range(num_requests):
        features = draw(_features(i, max_features, cache_miss_rate, masks))
        span = max((f.offset + f.length for f in features), default=0)
        computed, scheduled = draw(
            _window(features, lookahead, max_scheduled, 0 if zero_scheduled else 1)
        )
        start = computed + lookahead
        prefill_len = draw(_prefill_len(step, start, computed + scheduled, span))
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
        draft_lookahead=lookahead,
        padding=draw(st.integers(0, max_padding)),
    )


# ---------------------------------------------------------------------- narrowed families


def prefill_first(scenario: GatherScenario) -> GatherScenario:
    """The same batch with the requests whose window starts in the prompt moved first."""
    look = scenario.draft_lookahead

    def decodes(request: RequestSpec) -> bool:
        return request.num_computed_tokens + look >= request.prefill_len

    return replace(scenario, requests=tuple(sorted(scenario.requests, key=decodes)))


@st.composite
def with_zero_scheduled(draw: st.DrawFn, base: st.SearchStrategy[GatherScenario]) -> GatherScenario:
    """Scenarios from ``base`` where at least one request has zero scheduled tokens."""
    scenario = draw(base)
    if not scenario.requests:
        return scenario
    count = len(scenario.requests)
    flags = draw(st.lists(st.booleans(), min_size=count, max_size=count))
    if not any(flags):
        flags[draw(st.integers(0, count - 1))] = True
    requests = tuple(
        replace(r, num_scheduled_tokens=0) if zero else r
        for r, zero in zip(scenario.requests, flags, strict=True)
    )
    return replace(scenario, requests=requests)


def _uncache(
    draw: st.DrawFn,
    scenario: GatherScenario,
    chosen: Callable[[FeatureSpec, RequestSpec, int], bool],
) -> GatherScenario:
    """Mark some of the features ``chosen`` picks as not cached (each with chance 1/2)."""
    look = scenario.draft_lookahead
    requests = tuple(
        replace(
            r,
            features=tuple(
                replace(f, cached=False) if chosen(f, r, look) and draw(st.booleans()) else f
                for f in r.features
            ),
        )
        for r in scenario.requests
    )
    return replace(scenario, requests=requests)


def _starts_past_scheduled_end(spec: FeatureSpec, request: RequestSpec, lookahead: int) -> bool:
    return spec.offset >= request.num_computed_tokens + request.num_scheduled_tokens


def _no_embed_in_window(spec: FeatureSpec, request: RequestSpec, lookahead: int) -> bool:
    start = request.num_computed_tokens + lookahead
    lo = max(start, spec.offset) - spec.offset
    hi = min(start + request.num_scheduled_tokens, spec.offset + spec.length) - spec.offset
    if hi <= lo:
        return True
    return spec.is_embed is not None and not any(spec.is_embed[lo:hi])


@st.composite
def with_non_embed_windows(
    draw: st.DrawFn, base: st.SearchStrategy[GatherScenario]
) -> GatherScenario:
    """Scenarios in which some (request, feature) pairs see only non-embed positions.

    For each feature that overlaps its request's window, with chance 1/2, every
    position of the overlap gets ``is_embed`` False (the rest of the mask is kept), so
    the pair must contribute no piece at all (SPEC G6) although its output is cached.
    """
    scenario = draw(base)
    look = scenario.draft_lookahead
    requests = []
    for request in scenario.requests:
        start = request.num_computed_tokens + look
        end = start + request.num_scheduled_tokens
        features = []
        for spec in request.features:
            lo = max(start, spec.offset) - spec.offset
            hi = min(end, spec.offset + spec.length) - spec.offset
            if hi > lo and draw(st.booleans()):
                flags = list(spec.is_embed) if spec.is_embed is not None else [True] * spec.length
                flags[lo:hi] = [False] * (hi - lo)
                spec = replace(spec, is_embed=tuple(flags))
            features.append(spec)
        requests.append(replace(request, features=tuple(features)))
    return replace(scenario, requests=tuple(requests))


@st.composite
def lookahead_only_misses(
    draw: st.DrawFn, base: st.SearchStrategy[GatherScenario]
) -> GatherScenario:
    """Scenarios whose only missing outputs belong to features that start at or after the
    scheduled end, where only the drafter's look-ahead reaches (SPEC G7)."""
    return _uncache(draw, draw(base), _starts_past_scheduled_end)


@st.composite
def non_embed_only_misses(
    draw: st.DrawFn, base: st.SearchStrategy[GatherScenario]
) -> GatherScenario:
    """Scenarios whose only missing outputs belong to features with no embed position in
    their request's window: outputs nobody needs (SPEC G7)."""
    return _uncache(draw, draw(base), _no_embed_in_window)
