"""Property: the reference gather equals the position-by-position oracle (SPEC G1-G10).

Every example also checks the side conditions: G2 reads (instrumented cache), G8 (cache
snapshot), G9 (array snapshot) and G10 (the state-level call agrees). Under the CI
profile these tests run well over 2,000 examples in total.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support.anchored_scenarios import anchored_scenarios
from support.decode_streams import DecodeStreams
from support.evolving_cache import CACHE_CHANGES, EvolvingCache
from support.gather_check import GatherCall, check_gather_call, check_scenario, model_for
from support.profiles import example_budget

from rtmm_protocol.reference import EncoderRunner
from rtmm_protocol.testing.scenario import FeatureSpec, GatherScenario, RequestSpec
from rtmm_protocol.testing.strategies import gather_scenarios

_Test = TypeVar("_Test", bound=Callable[..., None])

_INT_DTYPES = st.sampled_from([np.int32, np.int64])

# Hand-placed cases the random strategies might reach only rarely.
_EMPTY_BATCH = GatherScenario(requests=())
_BOUNDARY_MISS_VIA_LOOKAHEAD = GatherScenario(
    requests=(RequestSpec("a", 20, 2, 3, (FeatureSpec("a0", 5, 4, cached=False),)),),
    draft_lookahead=1,
)
_INTERIOR_MISS = GatherScenario(
    requests=(RequestSpec("a", 20, 2, 4, (FeatureSpec("a0", 5, 4, cached=False),)),),
    draft_lookahead=1,
)
_ZERO_SCHEDULED_INSIDE = GatherScenario(
    requests=(
        RequestSpec("a", 20, 6, 0, (FeatureSpec("a0", 5, 4, cached=False),)),
        RequestSpec("b", 20, 0, 3, (FeatureSpec("b0", 1, 4),)),
    ),
)
_LAST_PREFILL_CHUNK_PAST_PROMPT = GatherScenario(
    requests=(
        RequestSpec(
            "a", 6, 4, 5, (FeatureSpec("a0", 3, 3, (True, False, True)), FeatureSpec("a1", 7, 2))
        ),
    ),
    padding=3,
)
_NO_FEATURES_AND_DECODE = GatherScenario(
    requests=(
        RequestSpec("a", 4, 0, 4),
        RequestSpec("b", 3, 7, 1, (FeatureSpec("b0", 7, 2),)),
    ),
    draft_lookahead=2,
)
_EXAMPLES = (
    _EMPTY_BATCH,
    _BOUNDARY_MISS_VIA_LOOKAHEAD,
    _INTERIOR_MISS,
    _ZERO_SCHEDULED_INSIDE,
    _LAST_PREFILL_CHUNK_PAST_PROMPT,
    _NO_FEATURES_AND_DECODE,
)


def _with_examples(test: _Test) -> _Test:
    """Add the hand-placed scenarios as explicit examples of a property."""
    for scenario in _EXAMPLES:
        test = example(scenario=scenario, int_dtype=np.int32, validate=False)(test)
    return test


@settings(max_examples=example_budget(ci=1000, dev=100))
@given(
    scenario=gather_scenarios(zero_scheduled=True), int_dtype=_INT_DTYPES, validate=st.booleans()
)
@_with_examples
def test_non_realtime_reference_matches_oracle(
    scenario: GatherScenario, int_dtype: type[np.integer], validate: bool
) -> None:
    check_scenario(scenario, realtime=False, int_dtype=int_dtype, validate=validate)


@settings(max_examples=example_budget(ci=1000, dev=100))
@given(
    scenario=gather_scenarios(zero_scheduled=True), int_dtype=_INT_DTYPES, validate=st.booleans()
)
@_with_examples
def test_realtime_reference_matches_oracle(
    scenario: GatherScenario, int_dtype: type[np.integer], validate: bool
) -> None:
    check_scenario(scenario, realtime=True, int_dtype=int_dtype, validate=validate)


@settings(max_examples=example_budget(ci=600, dev=80))
@given(
    scenario=anchored_scenarios(),
    realtime=st.booleans(),
    int_dtype=_INT_DTYPES,
    validate=st.booleans(),
)
def test_reference_matches_oracle_on_anchored_windows(
    scenario: GatherScenario, realtime: bool, int_dtype: type[np.integer], validate: bool
) -> None:
    check_scenario(scenario, realtime=realtime, int_dtype=int_dtype, validate=validate)


@settings(max_examples=example_budget(ci=300, dev=40))
@given(
    scenario=gather_scenarios(cache_miss_rate=0.5, max_requests=3, zero_scheduled=True),
    realtime=st.booleans(),
)
def test_reference_matches_oracle_with_frequent_misses(
    scenario: GatherScenario, realtime: bool
) -> None:
    check_scenario(scenario, realtime=realtime)


# ---------------------------------------------------------------- one gatherer, many steps


def _draw_call(data: st.DataObject, evolving: EvolvingCache) -> GatherCall:
    """A batch over some of the registered requests, in a random order."""
    draw = data.draw
    everyone = draw(st.permutations(evolving.req_ids))
    req_ids = list(everyone[: draw(st.integers(0, len(everyone)))])
    spans = [evolving.span(r) for r in req_ids]
    scheduled = np.array([draw(st.integers(0, 6)) for _ in req_ids], dtype=np.int32)
    qsl = np.zeros(len(req_ids) + 1, dtype=np.int32)
    np.cumsum(scheduled, out=qsl[1:])
    arrays = {
        "num_scheduled_tokens": scheduled,
        "query_start_loc": qsl,
        "prefill_lens": np.array([draw(st.integers(0, s + 3)) for s in spans], dtype=np.int32),
        "num_computed_tokens": np.array(
            [draw(st.integers(0, s + 4)) for s in spans], dtype=np.int32
        ),
    }
    return GatherCall(req_ids, arrays, draw(st.sampled_from([0, 1, 2])))


@settings(max_examples=example_budget(ci=200, dev=30))
@given(data=st.data(), realtime=st.booleans(), validate=st.booleans())
def test_one_runner_matches_oracle_while_the_cache_changes_between_steps(
    data: st.DataObject, realtime: bool, validate: bool
) -> None:
    _check_steps_of_a_changing_cache(data, realtime, validate)


def _check_steps_of_a_changing_cache(data: st.DataObject, realtime: bool, validate: bool) -> None:
    hidden = 2
    evolving = EvolvingCache(data, hidden)
    for i in range(data.draw(st.integers(1, 4))):
        evolving.add_request(f"req-{i}")
    model = model_for(realtime, hidden)
    cache = evolving.cache
    runner = EncoderRunner(model, 256, hidden, cache, torch.float32, "cpu", validate=validate)
    for _ in range(data.draw(st.integers(2, 8))):
        evolving.change(data.draw(st.sampled_from(CACHE_CHANGES)))
        call = _draw_call(data, evolving)
        check_gather_call(runner, cache, call, realtime=realtime, hidden_size=hidden)


@settings(max_examples=example_budget(ci=40, dev=8))
@given(
    seed=st.integers(0, 2**32 - 1),
    num_streams=st.sampled_from([3, 70]),
    lookahead=st.sampled_from([0, 1, 2]),
)
def test_decode_streams_match_oracle_step_after_step(
    seed: int, num_streams: int, lookahead: int
) -> None:
    hidden = 2
    streams = DecodeStreams(seed, num_streams, hidden)
    model = model_for(True, hidden)
    runner = EncoderRunner(model, 256, hidden, streams.cache, torch.float32, "cpu")
    for _ in range(6):
        call = streams.next_call(lookahead)
        check_gather_call(runner, streams.cache, call, realtime=True, hidden_size=hidden)
        streams.advance(call)
