"""The migration adapter for gatherers that still say ``computed_prefill_lens`` (SPEC T2)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.cache_snapshot import ArraySnapshot
from support.gather_check import assert_same_result, call_runner, model_for, scenario_arrays
from support.legacy_gatherer import PrefillOnlyLegacyGatherer
from support.profiles import example_budget

from rtmm_protocol import MMEmbeddingGatherer
from rtmm_protocol.compat import LegacyGathererAdapter, adapt_legacy_gatherer
from rtmm_protocol.reference import EncoderRunner
from rtmm_protocol.testing.scenario import FeatureSpec, GatherScenario, RequestSpec
from rtmm_protocol.testing.strategies import gather_scenarios, lookahead_only_misses


def _fresh_legacy_class() -> type[PrefillOnlyLegacyGatherer]:
    """A legacy class the adapter has never seen, so its one warning is still due."""
    return type("FreshLegacyGatherer", (PrefillOnlyLegacyGatherer,), {})


def _adapt_quietly(legacy: PrefillOnlyLegacyGatherer) -> LegacyGathererAdapter:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return adapt_legacy_gatherer(legacy)


def _both(scenario: GatherScenario) -> tuple[LegacyGathererAdapter, EncoderRunner]:
    cache = scenario.build_cache()
    adapter = _adapt_quietly(PrefillOnlyLegacyGatherer(cache))
    model = model_for(False, scenario.hidden_size)
    runner = EncoderRunner(model, 64, scenario.hidden_size, cache, torch.float32, "cpu")
    return adapter, runner


_SCENARIO = GatherScenario(
    requests=(
        RequestSpec(
            "a", 8, 0, 5, (FeatureSpec("a0", 1, 3), FeatureSpec("a1", 5, 3, (True, False, True)))
        ),
        RequestSpec("b", 4, 3, 2, (FeatureSpec("b0", 3, 3),)),
        RequestSpec("c", 2, 5, 1, (FeatureSpec("c0", 5, 2),)),
    ),
    hidden_size=3,
)


@pytest.mark.parametrize("lookahead", [0, 1, 2])
def test_adapter_equals_the_reference(lookahead: int) -> None:
    scenario = GatherScenario(_SCENARIO.requests, hidden_size=3, draft_lookahead=lookahead)
    adapter, runner = _both(scenario)
    arrays = scenario_arrays(scenario)
    got = call_runner(adapter, scenario, arrays)
    assert_same_result(got, call_runner(runner, scenario, arrays))


def test_adapter_shifts_the_window_start_for_the_prefill_check() -> None:
    # computed 3 of a 4-token prompt: L=0 gathers, L=1 starts at 4 >= 4 and is skipped (G2).
    scenario = GatherScenario(
        (RequestSpec("a", 4, 3, 2, (FeatureSpec("a0", 3, 4),)),), hidden_size=3
    )
    adapter, _ = _both(scenario)
    arrays = scenario_arrays(scenario)
    _, mask = call_runner(adapter, scenario, arrays)
    assert mask.tolist() == [True, True]
    shifted = GatherScenario(scenario.requests, hidden_size=3, draft_lookahead=1)
    mm_embeds, mask = call_runner(adapter, shifted, arrays)
    assert mm_embeds == []
    assert mask.tolist() == [False, False]
    legacy = adapter.legacy
    assert isinstance(legacy, PrefillOnlyLegacyGatherer)
    assert legacy.calls[-1].tolist() == [4]


@settings(max_examples=example_budget(ci=200, dev=40))
@given(
    scenario=gather_scenarios(cache_miss_rate=0.0, zero_scheduled=True),
    int_dtype=st.sampled_from([np.int32, np.int64]),
)
def test_adapter_equals_the_reference_on_random_batches(
    scenario: GatherScenario, int_dtype: type[np.integer]
) -> None:
    adapter, runner = _both(scenario)
    arrays = scenario_arrays(scenario, int_dtype)
    before = ArraySnapshot(arrays)
    got = call_runner(adapter, scenario, arrays)
    before.assert_unchanged(arrays)
    assert_same_result(got, call_runner(runner, scenario, arrays))


def test_adapter_accepts_num_computed_tokens_by_keyword_and_fits_the_protocol() -> None:
    adapter, runner = _both(_SCENARIO)
    arrays = scenario_arrays(_SCENARIO)
    assert isinstance(adapter, MMEmbeddingGatherer)
    got = adapter.gather_mm_embeddings(
        _SCENARIO.req_ids,
        _SCENARIO.num_tokens,
        arrays["num_scheduled_tokens"],
        arrays["query_start_loc"],
        arrays["prefill_lens"],
        num_computed_tokens=arrays["num_computed_tokens"],
        draft_lookahead=0,
    )
    assert_same_result(got, call_runner(runner, _SCENARIO, arrays))


def test_deprecation_warning_is_emitted_once_per_legacy_class() -> None:
    first_class, second_class = _fresh_legacy_class(), _fresh_legacy_class()
    cache = _SCENARIO.build_cache()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        adapt_legacy_gatherer(first_class(cache))
        adapt_legacy_gatherer(first_class(cache))
        LegacyGathererAdapter(first_class(cache))
        adapt_legacy_gatherer(second_class(cache))
        adapt_legacy_gatherer(second_class(cache))
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 2
    assert all("computed_prefill_lens" in str(w.message) for w in deprecations)
    assert all("num_computed_tokens" in str(w.message) for w in deprecations)
    assert all(w.filename == __file__ for w in deprecations)  # points at the caller


def test_current_gatherer_needs_no_adapter() -> None:
    runner = _both(_SCENARIO)[1]
    with pytest.raises(TypeError, match="no computed_prefill_lens parameter"):
        adapt_legacy_gatherer(runner)


def test_object_without_a_gather_method_is_rejected() -> None:
    with pytest.raises(TypeError, match="object has no gather_mm_embeddings"):
        LegacyGathererAdapter(object())  # type: ignore[arg-type]


def test_negative_lookahead_is_rejected() -> None:
    adapter, _ = _both(_SCENARIO)
    arrays = scenario_arrays(_SCENARIO)
    with pytest.raises(ValueError, match="draft_lookahead must be >= 0, got -1"):
        call_runner(adapter, GatherScenario(_SCENARIO.requests, draft_lookahead=-1), arrays)


@settings(max_examples=example_budget(ci=200, dev=40))
@given(
    scenario=lookahead_only_misses(
        gather_scenarios(windows="prefill", cache_miss_rate=0.0, lookaheads=(1, 2))
    )
)
def test_adapter_lets_lookahead_only_misses_fall_back(scenario: GatherScenario) -> None:
    """G7 through the adapter: a miss only the look-ahead reaches gives token embeddings,
    although the legacy gatherer raises for any miss in the window it is handed."""
    adapter, runner = _both(scenario)
    arrays = scenario_arrays(scenario)
    assert_same_result(
        call_runner(adapter, scenario, arrays), call_runner(runner, scenario, arrays)
    )


def test_adapter_still_raises_for_a_miss_inside_the_scheduled_tokens() -> None:
    scenario = GatherScenario(
        requests=(RequestSpec("a", 20, 0, 4, (FeatureSpec("a0", 1, 2, cached=False),)),),
        draft_lookahead=1,
    )
    adapter, _ = _both(scenario)
    with pytest.raises(RuntimeError, match="a0"):
        call_runner(adapter, scenario, scenario_arrays(scenario))
