"""Bad input (SPEC E1-E3): malformed batches (E1) and features (E2) get a ``ValueError`` naming
the field or identifier and the value; nothing is truncated or written out of bounds (E3)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.cache_snapshot import ArraySnapshot, CacheSnapshot
from support.gather_check import model_for
from support.malformed_batches import GatherArgs, MalformedCase, malformed_cases
from support.profiles import example_budget
from support.toy_state import FEATURE_DIM, encodable_feature, make_state

from rtmm_protocol import EncoderCache, MultiModalFeature, PlaceholderRange
from rtmm_protocol.reference import EncoderRunner, ReferenceModelState
from rtmm_protocol.testing import ReferenceInputBatch
from rtmm_protocol.validation import (
    MAX_POSITION,
    VALIDATE_ENV_VAR,
    check_batch,
    validation_enabled,
)

HIDDEN = 3
MAX = 16


def _i32(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int32)


def _valid_args() -> GatherArgs:
    # a: prompt 10, tokens [0, 3); b: prompt 4, tokens [1, 3).
    return GatherArgs(
        req_ids=["a", "b"],
        total_num_scheduled_tokens=5,
        num_scheduled_tokens=_i32(3, 2),
        query_start_loc=_i32(0, 3, 5),
        prefill_lens=_i32(10, 4),
        num_computed_tokens=_i32(0, 1),
    )


def _cache() -> EncoderCache:
    cache = EncoderCache(HIDDEN)
    cache.add_request("a", [MultiModalFeature("a0", "image", PlaceholderRange(1, 2))])
    cache.add_request("b", [MultiModalFeature("b0", "audio", PlaceholderRange(0, 2))])
    cache.put_encoder_output("a0", torch.ones(2, HIDDEN))
    cache.put_encoder_output("b0", torch.zeros(2, HIDDEN))
    return cache


def _runner(cache: EncoderCache, validate: bool | None = True) -> EncoderRunner:
    model = model_for(False, HIDDEN)
    return EncoderRunner(model, MAX, HIDDEN, cache, torch.float32, "cpu", validate=validate)


def _state(cache: EncoderCache, validate: bool | None = True) -> ReferenceModelState:
    return ReferenceModelState(
        model_for(False, HIDDEN),
        cache,
        hidden_size=HIDDEN,
        max_num_tokens=MAX,
        dtype=torch.float32,
        device="cpu",
        validate=validate,
    )


_Breaker = Callable[[GatherArgs], GatherArgs]

#: (what is broken, how, a pattern naming the field and the offending value)
_E1_CASES: list[tuple[str, _Breaker, str]] = [
    (
        "num_scheduled_tokens too short",
        lambda a: replace(a, num_scheduled_tokens=_i32(3)),
        r"num_scheduled_tokens has 1 entries, expected 2",
    ),
    (
        "prefill_lens too long",
        lambda a: replace(a, prefill_lens=_i32(10, 4, 4)),
        r"prefill_lens has 3 entries, expected 2",
    ),
    (
        "num_computed_tokens too short",
        lambda a: replace(a, num_computed_tokens=_i32()),
        r"num_computed_tokens has 0 entries, expected 2",
    ),
    (
        "query_start_loc too short",
        lambda a: replace(a, query_start_loc=_i32(0, 3)),
        r"query_start_loc has 2 entries, expected at least 3",
    ),
    (
        "query_start_loc not starting at 0",
        lambda a: replace(a, query_start_loc=_i32(1, 4, 6)),
        r"query_start_loc must start at 0, got 1",
    ),
    (
        "query_start_loc step differs",
        lambda a: replace(a, query_start_loc=_i32(0, 2, 5)),
        r"query_start_loc.*= 2 but num_scheduled_tokens\[0\] = 3",
    ),
    (
        "negative num_scheduled_tokens",
        lambda a: replace(a, num_scheduled_tokens=_i32(3, -2), query_start_loc=_i32(0, 3, 1)),
        r"num_scheduled_tokens must be non-negative, got minimum -2",
    ),
    (
        "negative prefill_lens",
        lambda a: replace(a, prefill_lens=_i32(-4, 4)),
        r"prefill_lens must be non-negative, got minimum -4",
    ),
    (
        "negative num_computed_tokens",
        lambda a: replace(a, num_computed_tokens=_i32(0, -1)),
        r"num_computed_tokens must be non-negative, got minimum -1",
    ),
    (
        "negative draft_lookahead",
        lambda a: replace(a, draft_lookahead=-1),
        r"draft_lookahead must be >= 0, got -1",
    ),
    (
        "total disagrees with the sum",
        lambda a: replace(a, total_num_scheduled_tokens=6),
        r"total_num_scheduled_tokens is 6 but num_scheduled_tokens sums to 5",
    ),
    (
        "unknown req_id",
        lambda a: replace(a, req_ids=["a", "ghost"]),
        r"req_ids holds 'ghost', which is not registered",
    ),
    (
        "duplicate req_id",
        lambda a: replace(a, req_ids=["a", "a"]),
        r"req_ids holds duplicates: \['a', 'a'\]",
    ),
    (
        "non-str req_id",
        lambda a: replace(a, req_ids=["a", 2]),
        r"req_ids must hold str, got 2",
    ),
    (
        "float array",
        lambda a: replace(a, prefill_lens=np.array([10.0, 4.0])),
        r"prefill_lens must be a numpy integer array, got dtype float64",
    ),
    (
        "two-dimensional array",
        lambda a: replace(a, num_computed_tokens=np.zeros((2, 1), dtype=np.int64)),
        r"num_computed_tokens must be one-dimensional, got shape \(2, 1\)",
    ),
]
_E1_IDS = [case[0] for case in _E1_CASES]
#: Cases that an input batch can carry (the look-ahead is an argument of the call).
_BATCH_CASES = [case for case in _E1_CASES if "draft_lookahead" not in case[2]]


def test_valid_arguments_pass_validation() -> None:
    mm_embeds, mask = _valid_args().call(_runner(_cache()))
    assert mask.tolist() == [False, True, True, True, False]
    assert len(mm_embeds) == 2


# ---------------------------------------------------------------- E1 at the runner level


@pytest.mark.parametrize(("name", "breaker", "pattern"), _E1_CASES, ids=_E1_IDS)
def test_e1_runner_rejects_malformed_batch_with_validation_argument(
    name: str, breaker: _Breaker, pattern: str
) -> None:
    cache = _cache()
    before = CacheSnapshot(cache)
    args = breaker(_valid_args())
    with pytest.raises(ValueError, match=pattern):
        args.call(_runner(cache, validate=True))
    before.assert_unchanged(cache)


@pytest.mark.parametrize(("name", "breaker", "pattern"), _E1_CASES, ids=_E1_IDS)
def test_e1_runner_rejects_malformed_batch_with_validation_env_var(
    name: str, breaker: _Breaker, pattern: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(VALIDATE_ENV_VAR, "1")
    with pytest.raises(ValueError, match=pattern):
        breaker(_valid_args()).call(_runner(_cache(), validate=None))


@pytest.mark.parametrize("value", ["1", "true", "YES", " on "])
def test_env_var_switches_validation_on(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VALIDATE_ENV_VAR, value)
    assert validation_enabled() is True
    assert validation_enabled(False) is False  # an explicit argument wins
    assert _runner(_cache(), validate=None).validate is True
    assert _state(_cache(), validate=None).validate is True


@pytest.mark.parametrize("value", ["", "0", "false", "off", "no"])
def test_validation_is_off_by_default_and_for_falsy_env_values(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(VALIDATE_ENV_VAR, value)
    assert validation_enabled() is False
    assert validation_enabled(True) is True
    assert _runner(_cache(), validate=None).validate is False


def test_negative_lookahead_is_rejected_even_without_validation() -> None:
    args = replace(_valid_args(), draft_lookahead=-2)
    with pytest.raises(ValueError, match="draft_lookahead must be >= 0, got -2"):
        args.call(_runner(_cache(), validate=False))


# ---------------------------------------------------------------- E1 at the state level


@pytest.mark.parametrize(("name", "breaker", "pattern"), _E1_CASES, ids=_E1_IDS)
def test_e1_state_gather_rejects_malformed_batch(
    name: str, breaker: _Breaker, pattern: str
) -> None:
    args = breaker(_valid_args())
    with pytest.raises(ValueError, match=pattern):
        _state(_cache()).gather_mm_embeddings(args.input_batch(), args.draft_lookahead)


@pytest.mark.parametrize(
    ("name", "breaker", "pattern"), _BATCH_CASES, ids=[case[0] for case in _BATCH_CASES]
)
def test_e1_get_mm_embeddings_rejects_malformed_batch_and_writes_nothing(
    name: str, breaker: _Breaker, pattern: str
) -> None:
    # Both items wait to be encoded: a rejected batch must not run the encoder either.
    state, model, cache = make_state(
        realtime=False, max_num_tokens=MAX, hidden_size=HIDDEN, validate=True
    )
    cache.add_request("a", [encodable_feature("a0", 1, 2, seed=1)])
    cache.add_request("b", [encodable_feature("b0", 0, 2, seed=2)])
    buffer = state.dummy_inputs_embeds(MAX)
    assert buffer is not None
    buffer.fill_(1.5)
    before = CacheSnapshot(cache)
    batch = breaker(_valid_args()).input_batch(padding=2)
    with pytest.raises(ValueError, match=pattern):
        state.get_mm_embeddings({"a": [0], "b": [0]}, batch)
    assert bool((buffer == 1.5).all())
    assert model.encoder_calls == []
    before.assert_unchanged(cache)


# ---------------------------------------------------------------- E1 at random


@settings(max_examples=example_budget(ci=300, dev=60))
@given(case=malformed_cases())
def test_e1_random_malformed_batches_raise_only_documented_errors(case: MalformedCase) -> None:
    cache = case.scenario.build_cache()
    cache_before = CacheSnapshot(cache)
    arrays = {k: v for k, v in case.args.arrays().items() if isinstance(v, np.ndarray)}
    arrays_before = ArraySnapshot(arrays)
    runner = EncoderRunner(
        model_for(True, case.scenario.hidden_size),
        64,
        case.scenario.hidden_size,
        cache,
        torch.float32,
        "cpu",
        validate=True,
    )
    with pytest.raises((ValueError, TypeError)):
        case.args.call(runner)
    cache_before.assert_unchanged(cache)
    arrays_before.assert_unchanged(arrays)

    if case.corruption == "negative_lookahead":
        return
    state = ReferenceModelState(
        model_for(True, case.scenario.hidden_size),
        cache,
        hidden_size=case.scenario.hidden_size,
        max_num_tokens=64,
        dtype=torch.float32,
        device="cpu",
        validate=True,
    )
    buffer = state.dummy_inputs_embeds(64)
    assert buffer is not None
    buffer.fill_(-7.0)
    every_item = {r.req_id: range(len(r.features)) for r in case.scenario.requests}
    with pytest.raises((ValueError, TypeError)):
        state.get_mm_embeddings(every_item, case.args.input_batch(case.scenario.padding))
    assert bool((buffer == -7.0).all()), f"{case.corruption}: the buffer was written"
    cache_before.assert_unchanged(cache)


# ---------------------------------------------------------------- E2 features and outputs


def _feature(identifier: str, offset: int, length: int) -> MultiModalFeature:
    return MultiModalFeature(identifier, "image", PlaceholderRange(offset, length))


def _corrupt_mask(feature: MultiModalFeature, mask: torch.Tensor) -> MultiModalFeature:
    """Bypass the range's own checks, as a buggy producer mutating it in place would."""
    object.__setattr__(feature.mm_position, "is_embed", mask)
    return feature


_BAD_LISTS: list[tuple[str, Callable[[], list[MultiModalFeature]], str]] = [
    (
        "unsorted",
        lambda: [_feature("late", 6, 2), _feature("early", 1, 2)],
        r"not sorted by offset: 'early' at offset 1 follows 'late' at offset 6",
    ),
    (
        "overlapping",
        lambda: [_feature("first", 1, 4), _feature("second", 3, 2)],
        r"overlap: 'second' at \[3, 5\) overlaps 'first' at \[1, 5\)",
    ),
    (
        "is_embed of the wrong length",
        lambda: [_corrupt_mask(_feature("short-mask", 0, 3), torch.ones(2, dtype=torch.bool))],
        r"feature 'short-mask'.*shape \(3,\).*shape \(2,\)",
    ),
    (
        "is_embed of the wrong dtype",
        lambda: [_corrupt_mask(_feature("int-mask", 0, 3), torch.ones(3, dtype=torch.int64))],
        r"feature 'int-mask'.*bool.*torch.int64",
    ),
]


@pytest.mark.parametrize(
    ("name", "make", "pattern"), _BAD_LISTS, ids=[case[0] for case in _BAD_LISTS]
)
def test_e2_malformed_features_are_rejected_at_registration(
    name: str, make: Callable[[], list[MultiModalFeature]], pattern: str
) -> None:
    cache = EncoderCache()
    with pytest.raises(ValueError, match=pattern):
        cache.add_request("r", make())
    assert "r" not in cache.mm_features


@pytest.mark.parametrize(
    ("name", "make", "pattern"), _BAD_LISTS, ids=[case[0] for case in _BAD_LISTS]
)
@pytest.mark.parametrize("level", ["runner", "state"])
def test_e2_malformed_features_placed_directly_are_rejected_when_validating(
    name: str, make: Callable[[], list[MultiModalFeature]], pattern: str, level: str
) -> None:
    cache = EncoderCache()
    cache.mm_features["r"] = make()  # bypasses add_request's checks
    args = GatherArgs(["r"], 8, _i32(8), _i32(0, 8), _i32(8), _i32(0))
    if level == "runner":
        runner = _runner(cache, validate=True)
        with pytest.raises(ValueError, match=pattern):
            args.call(runner)
    else:
        state = _state(cache, validate=True)
        with pytest.raises(ValueError, match=pattern):
            state.gather_mm_embeddings(args.input_batch())


def test_e2_is_embed_of_wrong_length_or_dtype_is_rejected_at_construction() -> None:
    with pytest.raises(ValueError, match=r"is_embed must have shape \(3,\).*length=3.*\(4,\)"):
        PlaceholderRange(0, 3, torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"is_embed must have dtype torch.bool, got torch.uint8"):
        PlaceholderRange(0, 3, torch.ones(3, dtype=torch.uint8))


def test_e2_appending_an_overlapping_feature_is_rejected() -> None:
    cache = EncoderCache()
    cache.add_request("r", [_feature("r0", 0, 4)])
    with pytest.raises(ValueError, match=r"'r1'.*overlaps 'r0'"):
        cache.append_feature("r", _feature("r1", 3, 2))
    assert [f.identifier for f in cache.mm_features["r"]] == ["r0"]


@pytest.mark.parametrize(
    ("output", "pattern"),
    [
        (
            torch.ones(3, HIDDEN),
            r"encoder output of 'a0' has 3 rows but its placeholder has num_embeds=2",
        ),
        (torch.ones(2, HIDDEN + 1), r"encoder output of 'a0' has hidden size 4, expected 3"),
        (torch.ones(2), r"encoder output of 'a0' must be 2-D"),
    ],
    ids=["rows", "hidden size", "one-dimensional"],
)
def test_e2_misshaped_encoder_output_is_rejected_when_cached(
    output: torch.Tensor, pattern: str
) -> None:
    cache = EncoderCache(HIDDEN)
    cache.add_request("a", [_feature("a0", 1, 2)])
    with pytest.raises(ValueError, match=pattern):
        cache.put_encoder_output("a0", output)
    assert "a0" not in cache.encoder_outputs


@pytest.mark.parametrize("validate", [False, True])
def test_e2_output_with_too_few_rows_placed_directly_is_never_sliced_short(validate: bool) -> None:
    cache = _cache()
    cache.encoder_outputs["a0"] = torch.ones(1, HIDDEN)  # bypasses put_encoder_output
    pattern = r"encoder output of 'a0' has 1 rows but its placeholder has num_embeds=2"
    with pytest.raises(ValueError, match=pattern):
        _valid_args().call(_runner(cache, validate=validate))


def test_e2_output_of_the_wrong_width_placed_directly_is_rejected_when_validating() -> None:
    cache = _cache()
    cache.encoder_outputs["a0"] = torch.ones(2, HIDDEN + 2)  # bypasses put_encoder_output
    with pytest.raises(ValueError, match=r"encoder output of 'a0' has hidden size 5, expected 3"):
        _valid_args().call(_runner(cache, validate=True))


def test_e2_encoder_returning_the_wrong_row_count_is_rejected_and_not_cached() -> None:
    state, _, cache = make_state(realtime=False, max_num_tokens=MAX, hidden_size=HIDDEN)
    data = {"input_features": torch.ones(3, FEATURE_DIM)}  # 3 rows for 2 embed positions
    cache.add_request("a", [MultiModalFeature("bad-enc", "audio", PlaceholderRange(0, 2), data)])
    buffer = state.dummy_inputs_embeds(MAX)
    assert buffer is not None
    buffer.fill_(2.5)
    batch = ReferenceInputBatch.from_requests(["a"], [4], [0], [4])
    with pytest.raises(ValueError, match=r"'bad-enc' has 3 rows.*num_embeds=2"):
        state.get_mm_embeddings({"a": [0]}, batch)
    assert "bad-enc" not in cache.encoder_outputs
    assert bool((buffer == 2.5).all())


@pytest.mark.parametrize(
    ("scheduled", "pattern"),
    [
        ({"ghost": [0]}, r"names request 'ghost'"),
        ({"a": [3]}, r"scheduled_encoder_inputs\['a'\] holds index 3, but the request has 1"),
        ({"a": [-1]}, r"holds index -1"),
    ],
    ids=["unknown request", "index past the end", "negative index"],
)
def test_e2_bad_scheduled_encoder_inputs_are_rejected(
    scheduled: dict[str, list[int]], pattern: str
) -> None:
    state, model, cache = make_state(realtime=False, max_num_tokens=MAX, hidden_size=HIDDEN)
    cache.add_request("a", [encodable_feature("a0", 0, 2)])
    batch = ReferenceInputBatch.from_requests(["a"], [4], [0], [4])
    with pytest.raises(ValueError, match=pattern):
        state.get_mm_embeddings(scheduled, batch)
    assert model.encoder_calls == []


# ---------------------------------------------------------------- E3 bounds


@pytest.mark.parametrize("validate", [False, True])
@pytest.mark.parametrize(
    ("num_tokens", "padded", "input_len", "pattern"),
    [
        (
            4,
            MAX + 1,
            MAX + 1,
            rf"num_tokens_after_padding={MAX + 1} is outside \[0, max_num_tokens={MAX}\]",
        ),
        (MAX + 2, MAX + 2, MAX + 2, rf"num_tokens_after_padding={MAX + 2} is outside"),
        (4, 3, 4, r"num_tokens_after_padding=3 is smaller than num_tokens=4"),
        (4, -1, 4, r"num_tokens_after_padding=-1 is outside"),
        (4, 6, 3, r"input_ids has 3 entries, fewer than num_tokens=4"),
    ],
    ids=[
        "padded over max",
        "tokens over max",
        "padded under tokens",
        "negative",
        "short input_ids",
    ],
)
def test_e3_out_of_bounds_sizes_always_raise_and_write_nothing(
    num_tokens: int, padded: int, input_len: int, pattern: str, validate: bool
) -> None:
    state, model, cache = make_state(
        realtime=True, max_num_tokens=MAX, hidden_size=HIDDEN, validate=validate
    )
    cache.add_request("a", [encodable_feature("a0", 0, 2)])
    buffer = state.dummy_inputs_embeds(MAX)
    assert buffer is not None
    buffer.fill_(0.25)
    batch = ReferenceInputBatch(
        req_ids=["a"],
        num_reqs=1,
        num_tokens=num_tokens,
        num_tokens_after_padding=padded,
        input_ids=torch.zeros(input_len, dtype=torch.long),
        num_scheduled_tokens=_i32(num_tokens),
        query_start_loc_np=_i32(0, num_tokens),
        prefill_len_np=_i32(num_tokens),
        num_computed_tokens_np=_i32(0),
    )
    with pytest.raises(ValueError, match=pattern):
        state.get_mm_embeddings({"a": [0]}, batch)
    assert bool((buffer == 0.25).all())
    assert model.encoder_calls == []


def test_e3_builder_rejects_padding_below_the_token_count() -> None:
    with pytest.raises(
        ValueError, match=re.escape("num_tokens_after_padding=2 is smaller than num_tokens=3")
    ):
        ReferenceInputBatch.from_requests(["a"], [3], [0], [3], num_tokens_after_padding=2)
    with pytest.raises(
        ValueError, match=r"num_scheduled_tokens has 2 entries, expected one per request \(1\)"
    ):
        ReferenceInputBatch.from_requests(["a"], [3], [0], [3, 1])
    with pytest.raises(ValueError, match=r"num_computed_tokens must be non-negative, got \[-1\]"):
        ReferenceInputBatch.from_requests(["a"], [3], [-1], [3])


@pytest.mark.parametrize("total", [3, 9])
def test_e3_runner_rejects_a_total_that_disagrees_with_query_start_loc_without_validation(
    total: int,
) -> None:
    cache = EncoderCache()
    cache.add_request("a", [encodable_feature("a0", 0, 8)])
    cache.encoder_outputs["a0"] = torch.zeros(8, HIDDEN)
    runner = EncoderRunner(
        model_for(True, HIDDEN), MAX, HIDDEN, cache, torch.float32, "cpu", validate=False
    )
    with pytest.raises(ValueError, match=rf"total_num_scheduled_tokens is {total} but"):
        runner.gather_mm_embeddings(["a"], total, _i32(6), _i32(0, 6), _i32(10), _i32(0))


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        (
            {"num_computed_tokens": _i32(0)},
            r"num_computed_tokens has 1 entries, expected at least 2",
        ),
        ({"num_scheduled_tokens": [3, 3]}, r"num_scheduled_tokens must be a numpy integer array"),
        ({"prefill_lens": np.array([9.0, 9.0])}, r"prefill_lens must be a numpy integer array"),
        ({"query_start_loc": _i32(0, 3)}, r"query_start_loc has 2 entries, expected at least 3"),
        ({"draft_lookahead": 1.0}, r"draft_lookahead must be an int, got 1.0"),
        (
            {"total_num_scheduled_tokens": "6"},
            r"total_num_scheduled_tokens must be an int, got '6'",
        ),
    ],
    ids=["short array", "list", "float array", "short query_start_loc", "float L", "str total"],
)
def test_e3_runner_rejects_malformed_arguments_by_name_without_validation(
    change: dict[str, object], pattern: str
) -> None:
    cache = EncoderCache()
    for name in ("a", "b"):
        cache.add_request(name, [encodable_feature(f"{name}0", 0, 8)])
        cache.encoder_outputs[f"{name}0"] = torch.zeros(8, HIDDEN)
    runner = EncoderRunner(
        model_for(True, HIDDEN), MAX, HIDDEN, cache, torch.float32, "cpu", validate=False
    )
    args: dict[str, object] = {
        "req_ids": ["a", "b"],
        "total_num_scheduled_tokens": 6,
        "num_scheduled_tokens": _i32(3, 3),
        "query_start_loc": _i32(0, 3, 6),
        "prefill_lens": _i32(9, 9),
        "num_computed_tokens": _i32(0, 0),
        "draft_lookahead": 0,
    }
    with pytest.raises(ValueError, match=pattern):
        runner.gather_mm_embeddings(**{**args, **change})  # type: ignore[arg-type]


# ---------------------------------------------------------------- the always-on check


def _plain_consistency(
    scheduled: list[int], starts: list[int], computed: list[int], total: int, lookahead: int
) -> bool:
    """E1's batch conditions, position by position, for comparison with ``check_batch``."""
    if min([*scheduled, *computed, 0]) < 0 or starts[0] != 0 or total != starts[-1]:
        return False
    if any(starts[i + 1] - starts[i] != count for i, count in enumerate(scheduled)):
        return False
    return all(
        c + lookahead + s <= MAX_POSITION + 1 for c, s in zip(computed, scheduled, strict=True)
    )


@settings(max_examples=example_budget(ci=600, dev=100))
@given(data=st.data())
def test_check_batch_accepts_exactly_the_consistent_batches(data: st.DataObject) -> None:
    draw = data.draw
    n = draw(st.sampled_from([0, 1, 2, 5, 16, 47, 48, 49, 64, 200]))
    ones = draw(st.booleans())  # decode steps take their own route
    scheduled = [1] * n if ones else draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
    computed = draw(st.lists(st.integers(0, 10**6), min_size=n, max_size=n))
    starts = [0, *itertools.accumulate(scheduled)]
    lookahead = draw(st.sampled_from([0, 1, 3]))
    total = starts[-1]
    corruption = draw(st.sampled_from(["none", "count", "start", "position", "total"]))
    if corruption == "count" and n:
        scheduled[draw(st.integers(0, n - 1))] += draw(st.sampled_from([-2, -1, 1]))
    elif corruption == "start":
        starts[draw(st.integers(0, n))] += draw(st.sampled_from([-1, 1]))
    elif corruption == "position" and n:
        computed[draw(st.integers(0, n - 1))] = draw(
            st.sampled_from([-1, MAX_POSITION, MAX_POSITION + 1 - lookahead, 2**62])
        )
    elif corruption == "total":
        total += draw(st.sampled_from([-1, 1]))
    consistent = _plain_consistency(scheduled, starts, computed, total, lookahead)
    dtype = draw(st.sampled_from([np.int64, np.int32, np.uint64]))
    if dtype is not np.int64 and min([*scheduled, *starts, *computed, 0]) < 0:
        dtype = np.int64
    if dtype is np.int32 and max([*computed, *starts, 0]) >= 2**31:
        dtype = np.int64
    counts, offsets, prefill, positions = (
        np.array(v, dtype=dtype) for v in (scheduled, starts, [5] * n, computed)
    )
    req_ids = [f"r{i}" for i in range(n)]
    if consistent:
        checked = check_batch(req_ids, total, counts, offsets, prefill, positions, lookahead)
        assert checked.num_scheduled_tokens.dtype == np.int64
        assert checked.num_scheduled_tokens.tolist() == scheduled
        assert checked.query_start_loc.tolist() == starts
        assert checked.window_starts.tolist() == [c + lookahead for c in computed]
        assert (checked.min_scheduled, checked.max_scheduled) == (
            (min(scheduled), max(scheduled)) if n else (0, 0)
        )
    else:
        with pytest.raises(ValueError, match=r"num_scheduled_tokens|query_start_loc|num_computed"):
            check_batch(req_ids, total, counts, offsets, prefill, positions, lookahead)
