"""The gather plan against the position-by-position oracle (SPEC G1-G10).

``plan_mm_gather`` is checked on everything a plan exposes: the mask, the slots, the
rows (copied block by block for long pieces, selected from the arena's copies for
short ones) and the pieces as views, planned pair by pair and with whole-array
operations. Decode sequences run the same runner step after step, as engines use it.
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Iterator, Mapping
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.cache_snapshot import ArraySnapshot, CacheSnapshot
from support.gather_check import assert_matches_oracle, model_for
from support.profiles import example_budget

from rtmm_protocol import (
    EncoderCache,
    EncoderOutputMissingError,
    MultiModalFeature,
    PlaceholderRange,
)
from rtmm_protocol.reference import ArenaFullError, EncoderRunner, MMGatherPlan, gather_planner
from rtmm_protocol.testing.oracle import OracleResult, oracle_gather
from rtmm_protocol.testing.scenario import (
    FeatureSpec,
    GatherScenario,
    RequestSpec,
)
from rtmm_protocol.testing.strategies import gather_scenarios
from rtmm_protocol.types import IntArray

_INT_DTYPES = st.sampled_from([np.int32, np.int64])
#: The planner's ways, forced by its limits (requests, pairs): one by one, with
#: whole-array operations, and one by one until a third pair, then again at once.
PLANNERS = {"one_by_one": (10**9, 10**9), "at_once": (-1, -1), "switching": (10**9, 2)}


@contextlib.contextmanager
def planned(way: str) -> Iterator[None]:
    """Plan every step inside the block the way ``way`` names."""
    requests, pairs = PLANNERS[way]
    with (
        mock.patch.object(gather_planner, "_FEW_REQUESTS", requests),
        mock.patch.object(gather_planner, "_FEW_PAIRS", pairs),
    ):
        yield


@pytest.fixture(params=sorted(PLANNERS))
def planner(request: pytest.FixtureRequest) -> Iterator[str]:
    """Plan every step of a (non-hypothesis) test the way the parameter names."""
    with planned(request.param):
        yield request.param


def _runner(
    scenario: GatherScenario,
    cache: EncoderCache,
    realtime: bool,
    *,
    validate: bool = False,
    arena_rows: int | None = None,
) -> EncoderRunner:
    return EncoderRunner(
        model_for(realtime, scenario.hidden_size),
        max(1, scenario.num_tokens),
        scenario.hidden_size,
        cache,
        torch.float32,
        "cpu",
        validate=validate,
        arena_rows=arena_rows,
    )


def _output_rows(scenario: GatherScenario) -> int:
    """Rows of all the scenario's outputs: an arena this size holds every one."""
    return max(1, sum(f.num_embeds for r in scenario.requests for f in r.features))


def _expected(
    cache: EncoderCache,
    realtime: bool,
    req_ids: list[str],
    arrays: Mapping[str, IntArray],
    lookahead: int,
) -> OracleResult:
    return oracle_gather(
        dict(cache.mm_features),
        dict(cache.encoder_outputs),
        is_realtime=realtime,
        req_ids=req_ids,
        num_scheduled_tokens=arrays["num_scheduled_tokens"],
        query_start_loc=arrays["query_start_loc"],
        prefill_lens=arrays["prefill_lens"],
        num_computed_tokens=arrays["num_computed_tokens"],
        draft_lookahead=lookahead,
    )


def _plan(
    runner: EncoderRunner, req_ids: list[str], arrays: Mapping[str, IntArray], lookahead: int
) -> MMGatherPlan:
    return runner.plan_mm_gather(
        req_ids,
        int(arrays["num_scheduled_tokens"].sum()),
        arrays["num_scheduled_tokens"],
        arrays["query_start_loc"],
        arrays["prefill_lens"],
        arrays["num_computed_tokens"],
        lookahead,
    )


def _check_step(
    runner: EncoderRunner,
    realtime: bool,
    req_ids: list[str],
    arrays: Mapping[str, IntArray],
    lookahead: int,
    hidden_size: int,
) -> None:
    """Plan one step and compare every form of it with the oracle."""
    cache = runner.encoder_cache
    expected = _expected(cache, realtime, req_ids, arrays, lookahead)
    if expected.raises:
        with pytest.raises(EncoderOutputMissingError) as info:
            _plan(runner, req_ids, arrays, lookahead)
        assert any(identifier in str(info.value) for identifier, _ in expected.missing)
        return
    plan = _plan(runner, req_ids, arrays, lookahead)
    mask = plan.is_mm_embed
    assert mask.dtype == torch.bool
    assert mask.device.type == "cpu"
    assert plan.slots.dtype == torch.int64
    assert torch.equal(plan.slots, torch.nonzero(mask).flatten())
    assert plan.num_rows == len(expected.rows)
    assert len(plan.pieces()) == len(expected.pieces)
    assert_matches_oracle((plan.pieces(), mask), expected, cache.encoder_outputs, hidden_size)
    rows = plan.rows()
    assert torch.equal(rows, expected.rows_tensor(cache.encoder_outputs, hidden_size))


def _shifted(arrays: Mapping[str, IntArray], step: int) -> dict[str, IntArray]:
    """The arrays of ``step`` decode steps later: every window moved on by ``step``."""
    shifted = dict(arrays)
    shifted["num_computed_tokens"] = arrays["num_computed_tokens"] + step
    return shifted


def _reordered(
    req_ids: list[str], arrays: Mapping[str, IntArray], order: list[int]
) -> tuple[list[str], dict[str, IntArray]]:
    """The same batch with its requests in another order (query_start_loc rebuilt)."""
    picked = {
        name: arrays[name][order]
        for name in ("num_scheduled_tokens", "prefill_lens", "num_computed_tokens")
    }
    qsl = np.zeros(len(order) + 1, dtype=arrays["query_start_loc"].dtype)
    np.cumsum(picked["num_scheduled_tokens"], out=qsl[1:])
    picked["query_start_loc"] = qsl
    return [req_ids[i] for i in order], picked


@settings(max_examples=example_budget(ci=600, dev=60))
@given(
    scenario=gather_scenarios(zero_scheduled=True),
    realtime=st.booleans(),
    validate=st.booleans(),
    int_dtype=_INT_DTYPES,
    way=st.sampled_from(sorted(PLANNERS)),
)
def test_plan_matches_oracle(
    way: str,
    scenario: GatherScenario,
    realtime: bool,
    validate: bool,
    int_dtype: type[np.integer],
) -> None:
    cache = scenario.build_cache()
    runner = _runner(scenario, cache, realtime, validate=validate)
    arrays = {name: a.astype(int_dtype) for name, a in scenario.arrays().items()}
    before, cache_before = ArraySnapshot(arrays), CacheSnapshot(cache)
    with planned(way):
        _check_step(
            runner,
            realtime,
            scenario.req_ids,
            arrays,
            scenario.draft_lookahead,
            scenario.hidden_size,
        )
    before.assert_unchanged(arrays)
    cache_before.assert_unchanged(cache)


@settings(max_examples=example_budget(ci=300, dev=40))
@given(
    scenario=gather_scenarios(max_requests=6, max_scheduled=1, max_features=6, zero_scheduled=True),
    realtime=st.booleans(),
    steps=st.integers(2, 8),
    ways=st.lists(st.sampled_from(sorted(PLANNERS)), min_size=8, max_size=8),
)
def test_decode_steps_match_oracle(
    ways: list[str], scenario: GatherScenario, realtime: bool, steps: int
) -> None:
    """One runner over consecutive decode steps, the batch reordered now and then, each
    step planned one way or the other."""
    cache = scenario.build_cache()
    runner = _runner(scenario, cache, realtime)
    req_ids, arrays = scenario.req_ids, scenario.arrays()
    for step in range(steps):
        if step % 3 == 2:  # the same requests in another order
            req_ids, arrays = _reordered(req_ids, arrays, list(reversed(range(len(req_ids)))))
        with planned(ways[step]):
            _check_step(
                runner,
                realtime,
                req_ids,
                _shifted(arrays, step),
                scenario.draft_lookahead,
                scenario.hidden_size,
            )


@settings(max_examples=example_budget(ci=300, dev=40))
@given(scenario=gather_scenarios(zero_scheduled=True), realtime=st.booleans())
def test_rows_from_the_arena_copies_match_oracle(scenario: GatherScenario, realtime: bool) -> None:
    """Outputs placed in the cache's dict are copied into the arena when rows() needs them,
    and the copies serve the next step."""
    cache = scenario.build_cache()
    runner = _runner(scenario, cache, realtime, arena_rows=_output_rows(scenario))
    snapshot = CacheSnapshot(cache)
    for _ in range(2):  # the second time from the copies made the first time
        _check_step(
            runner,
            realtime,
            scenario.req_ids,
            scenario.arrays(),
            scenario.draft_lookahead,
            scenario.hidden_size,
        )
    snapshot.assert_unchanged(cache)


def _decode_scenario(num_requests: int, frames: int) -> GatherScenario:
    """Realtime streams of one-position frames plus an 8-position chunk, decoding."""
    requests = []
    for r in range(num_requests):
        features = [FeatureSpec(f"s{r}f{k}", 4 + k, 1) for k in range(frames)]
        features.append(FeatureSpec(f"s{r}chunk", 4 + frames + r % 3, 8, cached=True))
        requests.append(RequestSpec(f"s{r}", 4, 4 + r % 5, 1, tuple(features)))
    return GatherScenario(requests=tuple(requests), hidden_size=4)


def test_many_streams_decoding_match_oracle(planner: str) -> None:
    """Many requests over steps that cross features."""
    scenario = _decode_scenario(80, frames=12)
    runner = _runner(scenario, scenario.build_cache(), True)
    arrays = scenario.arrays()
    for step in range(16):
        _check_step(runner, True, scenario.req_ids, _shifted(arrays, step), 0, 4)


def test_an_earlier_plan_keeps_its_answer_after_later_steps_are_planned() -> None:
    """The table's state is never shared with a plan."""
    scenario = _decode_scenario(80, frames=12)
    cache = scenario.build_cache()
    runner = _runner(scenario, cache, True)
    arrays = scenario.arrays()
    plans = [_plan(runner, scenario.req_ids, _shifted(arrays, step), 0) for step in range(6)]
    for step, plan in enumerate(plans):
        expected = _expected(cache, True, scenario.req_ids, _shifted(arrays, step), 0)
        assert_matches_oracle((plan.pieces(), plan.is_mm_embed), expected, cache.encoder_outputs, 4)


def test_freed_outputs_are_not_kept_alive_by_the_table_nor_the_arena() -> None:
    cache = EncoderCache(4)
    features = [MultiModalFeature(f"f{k}", "audio", PlaceholderRange(2 * k, 2)) for k in range(2)]
    cache.add_request("a", features)
    for feature in features:
        cache.encoder_outputs[feature.identifier] = torch.ones(2, 4)
    runner = EncoderRunner(model_for(True, 4), 8, 4, cache, torch.float32, "cpu", arena_rows=4)
    one = np.ones(1, dtype=np.int32)
    qsl = np.array([0, 1], dtype=np.int32)
    for position in (0, 1, 2):
        runner.plan_mm_gather(["a"], 1, one, qsl, one, np.array([position], dtype=np.int32)).rows()
    assert runner.arena.rows_free == 0  # both outputs copied
    freed = weakref.ref(cache.encoder_outputs["f0"])
    cache.free_encoder_output("f0")
    plan = runner.plan_mm_gather(["a"], 1, one, qsl, one, np.array([3], dtype=np.int32))
    assert plan.num_rows == 1
    gc.collect()
    assert freed() is None
    assert runner.arena.rows_free == 2  # its copy holds no live rows


def test_replaced_output_is_gathered_anew() -> None:
    scenario = GatherScenario(
        requests=(
            RequestSpec("a", 0, 4, 1, (FeatureSpec("a0", 4, 1),)),
            RequestSpec("b", 0, 5, 1, (FeatureSpec("b0", 3, 4),)),
        )
    )
    cache = scenario.build_cache()
    runner = _runner(scenario, cache, True, arena_rows=64)
    arrays = scenario.arrays()
    first = _plan(runner, scenario.req_ids, arrays, 0).rows()
    assert first.shape == (2, 4)
    cache.encoder_outputs["a0"] = torch.full((1, 4), -7.0)
    second = _plan(runner, scenario.req_ids, arrays, 0).rows()
    assert torch.equal(second[0], torch.full((4,), -7.0))
    assert torch.equal(second[1], first[1])


def test_a_full_arena_names_the_identifier_the_rows_needed_and_free() -> None:
    scenario = GatherScenario(
        requests=(RequestSpec("a", 0, 0, 6, (FeatureSpec("a0", 0, 3), FeatureSpec("a1", 3, 3))),)
    )
    runner = _runner(scenario, scenario.build_cache(), True, arena_rows=5)
    plan = _plan(runner, scenario.req_ids, scenario.arrays(), 0)
    with pytest.raises(ArenaFullError, match=r"'a1'.* needs 3 rows and 2 rows are free"):
        plan.rows()
    assert isinstance(ArenaFullError("x", 1, 0), RuntimeError)


def test_rows_into_a_given_buffer() -> None:
    scenario = _decode_scenario(3, frames=4)
    runner = _runner(scenario, scenario.build_cache(), True)
    plan = _plan(runner, scenario.req_ids, scenario.arrays(), 0)
    out = torch.empty(plan.num_rows, 4)
    assert plan.rows(out=out) is out
    assert torch.equal(out, torch.cat(plan.pieces()))
    wanted = r"out must be a contiguous torch.float32 tensor of shape \(3, 4\) on cpu, got "
    with pytest.raises(ValueError, match=wanted + r"a torch.float32 tensor of shape \(2, 4\)"):
        plan.rows(out=torch.empty(2, 4))


def test_empty_batch_gives_an_empty_plan() -> None:
    scenario = GatherScenario(requests=())
    runner = _runner(scenario, scenario.build_cache(), True)
    plan = _plan(runner, [], scenario.arrays(), 0)
    assert plan.is_mm_embed.shape == (0,)
    assert plan.num_rows == len(plan.pieces()) == 0
    assert plan.pieces() == []
    assert plan.rows().shape == (0, 4)


def test_output_with_too_few_rows_placed_directly_is_never_sliced_short(planner: str) -> None:
    scenario = GatherScenario(requests=(RequestSpec("a", 8, 0, 4, (FeatureSpec("a0", 1, 3),)),))
    cache = scenario.build_cache()
    runner = _runner(scenario, cache, False)
    _plan(runner, scenario.req_ids, scenario.arrays(), 0).rows()
    cache.encoder_outputs["a0"] = torch.ones(2, 4)  # bypasses the checked way in
    pattern = r"encoder output of 'a0' has 2 rows but its placeholder has num_embeds=3"
    plan = _plan(runner, scenario.req_ids, scenario.arrays(), 0)  # reading the rows checks
    with pytest.raises(ValueError, match=pattern):
        plan.rows()
    with pytest.raises(ValueError, match=pattern):
        plan.pieces()


def test_a_step_past_the_pair_limit_is_planned_again_at_once() -> None:
    """The one-by-one planner gives up on the request that takes the step past
    ``_FEW_PAIRS`` pairs, after planning those before it; the whole step is then
    planned at once, and nothing of the abandoned work shows in the result."""
    requests = tuple(
        RequestSpec(f"r{r}", 32, 0, 8, tuple(FeatureSpec(f"r{r}f{k}", 2 * k, 2) for k in range(r)))
        for r in range(1, 4)
    )  # 1, 2 and 3 pairs: the third request takes the step to 6
    scenario = GatherScenario(requests=requests, hidden_size=4)
    runner = _runner(scenario, scenario.build_cache(), False)
    one_by_one_gave: list[object] = []
    plan_one_by_one = gather_planner._plan_one_by_one

    def one_by_one(*args: Any) -> object:
        one_by_one_gave.append(plan_one_by_one(*args))
        return one_by_one_gave[-1]

    at_once = mock.Mock(wraps=gather_planner._plan_at_once)
    with (
        mock.patch.object(gather_planner, "_plan_one_by_one", one_by_one),
        mock.patch.object(gather_planner, "_plan_at_once", at_once),
    ):
        with mock.patch.object(gather_planner, "_FEW_PAIRS", 4):
            _check_step(runner, False, scenario.req_ids, scenario.arrays(), 0, 4)
        assert one_by_one_gave == [None]
        assert at_once.call_count == 1
        _check_step(runner, False, scenario.req_ids, scenario.arrays(), 0, 4)  # 6 pairs are few
        assert isinstance(one_by_one_gave[-1], MMGatherPlan)
        assert at_once.call_count == 1
