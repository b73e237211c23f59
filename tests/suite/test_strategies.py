"""The scenario families keep their promises; scenarios print as Python that rebuilds them."""

from __future__ import annotations

import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from rtmm_protocol.testing.oracle import oracle_gather
from rtmm_protocol.testing.scenario import FeatureSpec, GatherScenario, RequestSpec, distinct_output
from rtmm_protocol.testing.strategies import (
    gather_scenarios,
    lookahead_only_misses,
    non_embed_only_misses,
    prefill_first,
    with_zero_scheduled,
)

_FEW = settings(max_examples=60, deadline=None, database=None)


def _starts(scenario: GatherScenario) -> list[tuple[int, int]]:
    return [
        (r.num_computed_tokens + scenario.draft_lookahead, r.prefill_len) for r in scenario.requests
    ]


@_FEW
@given(gather_scenarios(windows="prefill", masks=False))
def test_prefill_family(scenario: GatherScenario) -> None:
    assert all(start < prefill for start, prefill in _starts(scenario))
    assert all(f.is_embed is None for r in scenario.requests for f in r.features)


@_FEW
@given(gather_scenarios(windows="decode", min_requests=1, max_requests=1, lookaheads=(0,)))
def test_decode_family(scenario: GatherScenario) -> None:
    assert len(scenario.requests) == 1
    assert scenario.draft_lookahead == 0
    assert all(start >= prefill for start, prefill in _starts(scenario))


@_FEW
@given(gather_scenarios(windows="mixed").map(prefill_first))
def test_prefill_first_orders_requests(scenario: GatherScenario) -> None:
    decodes = [start >= prefill for start, prefill in _starts(scenario)]
    assert decodes == sorted(decodes)


@_FEW
@given(with_zero_scheduled(gather_scenarios(min_requests=1)))
def test_zero_scheduled_family(scenario: GatherScenario) -> None:
    assert any(r.num_scheduled_tokens == 0 for r in scenario.requests)


@_FEW
@given(gather_scenarios(windows="mixed", max_scheduled=1))
def test_scenarios_are_in_the_domain_by_default(scenario: GatherScenario) -> None:
    """An engine's scheduler never schedules a request without new tokens."""
    assert all(r.num_scheduled_tokens >= 1 for r in scenario.requests)


def test_zero_scheduled_draws_requests_without_tokens() -> None:
    zero = find(
        gather_scenarios(zero_scheduled=True, min_requests=1),
        lambda s: any(r.num_scheduled_tokens == 0 for r in s.requests),
        settings=settings(database=None),
    )
    assert zero.requests


def test_mixed_steps_include_every_request_decoding_and_every_request_in_its_prompt() -> None:
    """The steady state of realtime serving (every request decoding) is drawn often."""
    kinds = set()

    @settings(max_examples=200, deadline=None, database=None)
    @given(gather_scenarios(windows="mixed", min_requests=3, max_requests=3))
    def draw(scenario: GatherScenario) -> None:
        decoding = {start >= prefill for start, prefill in _starts(scenario)}
        kinds.add("decode" if decoding == {True} else "prefill" if decoding == {False} else "mix")

    draw()
    assert kinds == {"decode", "prefill", "mix"}


def test_contract_checks_hand_placed_cases_are_in_the_domain() -> None:
    """Only robustness checks place a request without scheduled tokens by hand."""
    from rtmm_conformance.checks import cases

    for name in cases.__all__:
        if name == "ZERO_SCHEDULED_CASES":
            continue
        for scenario in getattr(cases, name):
            assert all(r.num_scheduled_tokens >= 1 for r in scenario.requests), name


def _oracle(scenario: GatherScenario, realtime: bool) -> object:
    arrays = scenario.arrays()
    cache = scenario.build_cache()
    return oracle_gather(
        cache.mm_features,
        cache.encoder_outputs,
        is_realtime=realtime,
        req_ids=scenario.req_ids,
        num_scheduled_tokens=arrays["num_scheduled_tokens"],
        query_start_loc=arrays["query_start_loc"],
        prefill_lens=arrays["prefill_lens"],
        num_computed_tokens=arrays["num_computed_tokens"],
        draft_lookahead=scenario.draft_lookahead,
    )


@_FEW
@given(
    lookahead_only_misses(
        gather_scenarios(windows="prefill", cache_miss_rate=0.0, lookaheads=(1, 2))
    ),
    st.booleans(),
)
def test_lookahead_only_misses_never_need_a_missing_output(
    scenario: GatherScenario, realtime: bool
) -> None:
    assert not _oracle(scenario, realtime).raises  # type: ignore[attr-defined]


@_FEW
@given(non_embed_only_misses(gather_scenarios(cache_miss_rate=0.0)), st.booleans())
def test_non_embed_only_misses_never_need_a_missing_output(
    scenario: GatherScenario, realtime: bool
) -> None:
    assert not _oracle(scenario, realtime).raises  # type: ignore[attr-defined]


@_FEW
@given(gather_scenarios())
def test_distinct_outputs_have_distinct_rows(scenario: GatherScenario) -> None:
    outputs = scenario.distinct_outputs()
    firsts = [float(v) for output in outputs.values() for v in output[:, 0]]
    assert len(firsts) == len(set(firsts))


@_FEW
@given(gather_scenarios())
def test_to_python_rebuilds_the_scenario(scenario: GatherScenario) -> None:
    namespace: dict[str, object] = {}
    exec(scenario.to_python(), namespace)
    assert namespace["scenario"] == scenario


def test_distinct_output_rejects_long_outputs() -> None:
    assert distinct_output(2, 3, 4)[1, 0] == 3001.0
    with pytest.raises(ValueError, match="num_embeds"):
        distinct_output(0, 1000, 4)


@settings(max_examples=1, deadline=None, database=None)
@given(st.data())
def test_bad_family_arguments_are_named(data: st.DataObject) -> None:
    with pytest.raises(ValueError, match="windows"):
        data.draw(gather_scenarios(windows="sideways"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="min_requests"):
        data.draw(gather_scenarios(min_requests=3, max_requests=2))


def test_feature_specs_lists_extra_requests_too() -> None:
    scenario = GatherScenario(
        requests=(RequestSpec("a", 4, 0, 2, (FeatureSpec("a0", 0, 2),)),),
        extra_requests=(RequestSpec("b", 4, 0, 0, (FeatureSpec("b0", 0, 1),)),),
    )
    assert [f.identifier for f in scenario.feature_specs()] == ["a0", "b0"]
