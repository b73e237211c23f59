"""Regression tests for the kinds of bad input that once crashed, misled or poisoned.

Grouped by kind (SPEC E1-E3): a clean error poisoning the next call; integer dtypes of
any width; batches whose offsets disagree; positions past the supported range on the
single-token route; outputs that are not tensors; meta-device tensors; bad token ids
in the toy models; constructor sizes no object can use. Each bad input must give a
``ValueError`` (or ``TypeError``) naming the field and the value, and every object must
stay usable: the next valid call gives exactly the oracle's result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from support.gather_check import GatherCall, assert_matches_oracle, model_for

from rtmm_protocol import EncoderCache, MultiModalFeature, PlaceholderRange
from rtmm_protocol.reference import EncoderRunner, ReferenceModelState
from rtmm_protocol.testing import ReferenceInputBatch, ToyRealtimeModel, ToyReplaceModel
from rtmm_protocol.validation import MAX_POSITION

HIDDEN = 3
MAX = 16
_MASK = (True, False, True, True)

_IntArray = np.ndarray[Any, np.dtype[Any]]


def _feature(
    identifier: str, offset: int, length: int, mask: tuple[bool, ...] | None = None
) -> MultiModalFeature:
    is_embed = None if mask is None else torch.tensor(mask, dtype=torch.bool)
    return MultiModalFeature(identifier, "audio", PlaceholderRange(offset, length, is_embed))


def _outputs() -> dict[str, torch.Tensor]:
    return {
        "a0": torch.arange(3 * HIDDEN, dtype=torch.float32).reshape(3, HIDDEN),
        "b0": 100 + torch.arange(2 * HIDDEN, dtype=torch.float32).reshape(2, HIDDEN),
    }


def _good_features() -> dict[str, list[MultiModalFeature]]:
    # a: a masked feature at [1, 5) (3 embeds); b: a plain one at [0, 2).
    return {"a": [_feature("a0", 1, 4, _MASK)], "b": [_feature("b0", 0, 2)]}


def _cache() -> EncoderCache:
    cache = EncoderCache(HIDDEN)
    for req_id, features in _good_features().items():
        cache.add_request(req_id, features)
    for identifier, output in _outputs().items():
        cache.encoder_outputs[identifier] = output
    return cache


def _runner(cache: EncoderCache, *, validate: bool, realtime: bool = False) -> EncoderRunner:
    return EncoderRunner(
        model_for(realtime, HIDDEN), MAX, HIDDEN, cache, torch.float32, "cpu", validate=validate
    )


def _state(cache: EncoderCache, *, validate: bool, realtime: bool = False) -> ReferenceModelState:
    model = ToyRealtimeModel(HIDDEN) if realtime else ToyReplaceModel(HIDDEN)
    return ReferenceModelState(
        model,
        cache,
        hidden_size=HIDDEN,
        max_num_tokens=MAX,
        dtype=torch.float32,
        device="cpu",
        validate=validate,
    )


def _arrays(
    scheduled: list[int], computed: list[int], prefill: list[int], dtype: Any = np.int32
) -> dict[str, _IntArray]:
    qsl = np.concatenate([[0], np.cumsum(scheduled)]).astype(dtype)
    return {
        "num_scheduled_tokens": np.array(scheduled, dtype=dtype),
        "query_start_loc": qsl,
        "prefill_lens": np.array(prefill, dtype=dtype),
        "num_computed_tokens": np.array(computed, dtype=dtype),
    }


#: A valid call: a gathers [0, 4) (slots 1, 3 embed), b gathers [0, 2).
_VALID = GatherCall(["a", "b"], _arrays([4, 2], [0, 0], [8, 8]))


def _assert_valid_gather_is_exact(runner: EncoderRunner, cache: EncoderCache) -> None:
    expected = _VALID.expected(cache, runner.is_realtime)
    assert_matches_oracle(_VALID.run(runner), expected, cache.encoder_outputs, HIDDEN)


def _batch(call: GatherCall, **fields: Any) -> ReferenceInputBatch:
    """The call's batch, built without the builder's checks; ``fields`` override."""
    total = call.total
    values: dict[str, Any] = {
        "req_ids": call.req_ids,
        "num_reqs": len(call.req_ids),
        "num_tokens": total,
        "num_tokens_after_padding": total + 1,
        "input_ids": torch.arange(total + 1, dtype=torch.long) % 32,
        "num_scheduled_tokens": call.arrays["num_scheduled_tokens"],
        "query_start_loc_np": call.arrays["query_start_loc"],
        "prefill_len_np": call.arrays["prefill_lens"],
        "num_computed_tokens_np": call.arrays["num_computed_tokens"],
    }
    values.update(fields)
    return ReferenceInputBatch(**values)


def _assert_real_path_is_exact(state: ReferenceModelState, cache: EncoderCache) -> None:
    batch = _batch(_VALID)
    got = state.get_mm_embeddings({}, batch, None)
    assert got is not None
    expected = _VALID.expected(cache, state.is_realtime)
    rows = expected.rows_tensor(cache.encoder_outputs, HIDDEN)
    want = state.model.embed_input_ids(
        batch.input_ids[: batch.num_tokens], [rows], expected.mask_tensor()
    )
    assert torch.equal(got[: batch.num_tokens], want)


# ---------------------------------------------------------------- 1. poisoned after an error


def _past_the_range() -> list[MultiModalFeature]:
    return [_feature("a0", 1, 4, _MASK), _feature("far", MAX_POSITION - 1, 4)]


def _meta_mask() -> list[MultiModalFeature]:
    position = PlaceholderRange(1, 4)
    object.__setattr__(position, "is_embed", torch.ones(4, dtype=torch.bool, device="meta"))
    return [MultiModalFeature("a0", "audio", position)]


_BROKEN_LISTS: dict[str, tuple[Callable[[], list[MultiModalFeature]], str]] = {
    "feature past the supported range": (_past_the_range, r"'far'.*largest supported position"),
    "meta is_embed": (_meta_mask, r"'a0'.*is_embed.*meta"),
}


@pytest.mark.parametrize("kind", list(_BROKEN_LISTS))
def test_class1_registration_refuses_a_feature_no_gather_can_use(kind: str) -> None:
    make, pattern = _BROKEN_LISTS[kind]
    cache = EncoderCache(HIDDEN)
    with pytest.raises(ValueError, match=pattern):
        cache.add_request("a", make())
    assert "a" not in cache.mm_features
    cache.add_request("a", _good_features()["a"])
    cache.add_request("b", _good_features()["b"])
    cache.encoder_outputs.update(_outputs())
    _assert_valid_gather_is_exact(_runner(cache, validate=False), cache)


@pytest.mark.parametrize("validate", [False, True])
@pytest.mark.parametrize("kind", list(_BROKEN_LISTS))
def test_class1_a_clean_error_does_not_poison_the_next_gather(kind: str, validate: bool) -> None:
    make, pattern = _BROKEN_LISTS[kind]
    cache = _cache()
    runner = _runner(cache, validate=validate)
    state = _state(cache, validate=validate)
    _assert_valid_gather_is_exact(runner, cache)  # the runner has seen the request
    cache.mm_features["a"] = make()  # stored directly, as engines may
    with pytest.raises(ValueError, match=pattern):
        _VALID.run(runner)
    with pytest.raises(ValueError, match=pattern):
        state.get_mm_embeddings({}, _batch(_VALID), None)
    # Put right by a new list, or by removing and registering the request again.
    cache.mm_features["a"] = _good_features()["a"]
    _assert_valid_gather_is_exact(runner, cache)
    _assert_real_path_is_exact(state, cache)
    cache.mm_features["a"] = make()
    with pytest.raises(ValueError, match=pattern):
        _VALID.run(runner)
    cache.remove_request("a")
    cache.add_request("a", _good_features()["a"])
    _assert_valid_gather_is_exact(runner, cache)
    _assert_real_path_is_exact(state, cache)


@pytest.mark.parametrize("validate", [False, True])
def test_class1_batch_errors_leave_runner_and_state_usable(validate: bool) -> None:
    cache = _cache()
    runner = _runner(cache, validate=validate)
    state = _state(cache, validate=validate)
    broken = [
        GatherCall(["a", "b"], {**_VALID.arrays, "query_start_loc": np.array([0, 3, 6])}),
        GatherCall(["a", "b"], {**_VALID.arrays, "num_computed_tokens": np.array([0, -1])}),
        GatherCall(["a", "b"], _VALID.arrays, draft_lookahead=2**63),
    ]
    for call in broken:
        with pytest.raises(
            ValueError, match=r"query_start_loc|num_computed_tokens|draft_lookahead"
        ):
            call.run(runner)
        if not call.draft_lookahead:  # the real path has no look-ahead
            with pytest.raises(ValueError, match=r"query_start_loc|num_computed_tokens"):
                state.get_mm_embeddings({}, _batch(call), None)
        _assert_valid_gather_is_exact(runner, cache)
        _assert_real_path_is_exact(state, cache)


# ---------------------------------------------------------------- 2. integer dtypes of any width


@pytest.mark.parametrize("validate", [False, True])
@pytest.mark.parametrize(
    "dtype",
    [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64],
    ids=lambda d: np.dtype(d).name,
)
def test_class2_every_integer_width_gives_the_oracle_result(dtype: Any, validate: bool) -> None:
    cache = _cache()
    runner = _runner(cache, validate=validate)
    call = GatherCall(["a", "b"], _arrays([4, 2], [0, 0], [8, 8], dtype))
    expected = call.expected(cache, False)
    assert_matches_oracle(call.run(runner), expected, cache.encoder_outputs, HIDDEN)
    plan = runner.plan_mm_gather(*_plan_args(call))
    assert torch.equal(plan.rows(), expected.rows_tensor(cache.encoder_outputs, HIDDEN))


def _plan_args(call: GatherCall) -> tuple[Any, ...]:
    arrays = call.arrays
    return (
        call.req_ids,
        call.total,
        arrays["num_scheduled_tokens"],
        arrays["query_start_loc"],
        arrays["prefill_lens"],
        arrays["num_computed_tokens"],
        call.draft_lookahead,
    )


@pytest.mark.parametrize("validate", [False, True])
@pytest.mark.parametrize(
    "lookahead", [np.uint64(1), np.int64(1), np.int8(1), np.uint8(0)], ids=repr
)
def test_class2_numpy_integer_lookahead_gives_the_oracle_result(
    lookahead: Any, validate: bool
) -> None:
    cache = _cache()
    call = GatherCall(["a", "b"], _arrays([3, 1], [0, 0], [8, 8]), draft_lookahead=lookahead)
    expected = call.expected(cache, True)
    runner = _runner(cache, validate=validate, realtime=True)
    assert_matches_oracle(call.run(runner), expected, cache.encoder_outputs, HIDDEN)


@pytest.mark.parametrize("validate", [False, True])
@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ({"draft_lookahead": 2**63}, r"draft_lookahead=9223372036854775808"),
        ({"draft_lookahead": 2**64}, r"draft_lookahead=18446744073709551616"),
        (
            {"num_scheduled_tokens": np.array([4, 2**64 - 1], dtype=np.uint64)},
            r"num_scheduled_tokens\[1\] = 18446744073709551615",
        ),
        (
            {"prefill_lens": np.array([8, 2**64 - 1], dtype=np.uint64)},
            r"prefill_lens\[1\] = 18446744073709551615",
        ),
        (
            {"query_start_loc": np.array([0, 4, 2**63 + 6], dtype=np.uint64)},
            r"query_start_loc.*9223372036854775814",
        ),
    ],
    ids=["lookahead 2**63", "lookahead 2**64", "uint64 max count", "uint64 max prefill", "qsl"],
)
def test_class2_values_beyond_int64_are_refused_by_name(
    change: dict[str, Any], pattern: str, validate: bool
) -> None:
    cache = _cache()
    runner = _runner(cache, validate=validate)
    arrays = {k: v for k, v in change.items() if k != "draft_lookahead"}
    lookahead = change.get("draft_lookahead", 0)
    call = GatherCall(["a", "b"], {**_VALID.arrays, **arrays}, draft_lookahead=lookahead)
    with pytest.raises(ValueError, match=pattern):
        call.run(runner)
    _assert_valid_gather_is_exact(runner, cache)


def test_class2_dummy_run_takes_a_numpy_integer() -> None:
    state = _state(_cache(), validate=False)
    view = state.dummy_inputs_embeds(np.int64(3))  # a numpy integer is an integer
    full = state.dummy_inputs_embeds(MAX)
    assert view is not None
    assert full is not None
    assert tuple(view.shape) == (3, HIDDEN)
    assert view.untyped_storage().data_ptr() == full.untyped_storage().data_ptr()


def _target_call(
    target: str, runner: EncoderRunner, state: ReferenceModelState, call: GatherCall, total: int
) -> Callable[[], object]:
    """The call ``target`` names, on ``call``'s arrays with ``total`` scheduled tokens."""
    args = (call.req_ids, total, *_plan_args(call)[2:])
    batch = _batch(call, num_tokens=total, num_tokens_after_padding=max(total, 0) + 1)
    calls: dict[str, Callable[[], object]] = {
        "runner": lambda: runner.gather_mm_embeddings(*args),
        "plan": lambda: runner.plan_mm_gather(*args).rows(),
        "state gather": lambda: state.gather_mm_embeddings(batch),
        "real path": lambda: state.get_mm_embeddings({}, batch, None),
    }
    return calls[target]


# ---------------------------------------------------------------- 3. inconsistent offsets

#: (num_scheduled_tokens, query_start_loc): each disagrees; total = query_start_loc[-1].
_INCONSISTENT = [
    ([4, 2], [0, 3, 5]),  # steps differ, the end agrees with a plausible total
    ([3, 2], [1, 4, 6]),  # shifted
    ([3, 2], [-1, 2, 4]),  # negative start
    ([3, 2], [2, 0, 5]),  # b's slots overlap a's
    ([3, 2], [0, 5, 5]),  # a step too long
]


@pytest.mark.parametrize("target", ["runner", "plan", "state gather", "real path"])
@pytest.mark.parametrize(("scheduled", "starts"), _INCONSISTENT, ids=str)
def test_class3_offsets_that_disagree_are_refused_without_validation(
    scheduled: list[int], starts: list[int], target: str
) -> None:
    cache = _cache()
    runner = _runner(cache, validate=False)
    state = _state(cache, validate=False)
    arrays = {
        **_arrays(scheduled, [0, 0], [8, 8]),
        "query_start_loc": np.array(starts, dtype=np.int32),
    }
    call = GatherCall(["a", "b"], arrays)
    total = starts[-1]
    pattern = r"query_start_loc|num_scheduled_tokens"
    with pytest.raises(ValueError, match=pattern):
        _target_call(target, runner, state, call, total)()
    _assert_valid_gather_is_exact(runner, cache)
    _assert_real_path_is_exact(state, cache)


# ---------------------------------------------------------------- 4. the single-token route


@pytest.mark.parametrize(
    ("computed", "lookahead", "validate", "pattern"),
    [
        (2**63 - 1, 1, True, r"draft_lookahead|num_computed_tokens\[0\]"),
        (2**63 - 1, 1, False, r"draft_lookahead|num_computed_tokens\[0\]"),
        (MAX_POSITION, 1, False, r"num_computed_tokens\[0\].*largest supported position"),
        (-3, 0, False, r"num_computed_tokens must be non-negative, got minimum -3"),
        (-3, 0, True, r"num_computed_tokens must be non-negative, got minimum -3"),
    ],
)
def test_class4_single_token_windows_out_of_range_are_refused_not_clamped(
    computed: int, lookahead: int, validate: bool, pattern: str
) -> None:
    cache = _cache()
    runner = _runner(cache, validate=validate, realtime=True)
    call = GatherCall(
        ["a", "b"],
        {
            "num_scheduled_tokens": np.array([1, 1], dtype=np.int64),
            "query_start_loc": np.array([0, 1, 2], dtype=np.int64),
            "prefill_lens": np.array([8, 8], dtype=np.int64),
            "num_computed_tokens": np.array([computed, 0], dtype=np.int64),
        },
        draft_lookahead=lookahead,
    )
    with pytest.raises(ValueError, match=pattern):
        call.run(runner)
    _assert_valid_gather_is_exact(runner, cache)


# ---------------------------------------------------------------- 5. outputs that are not tensors


@pytest.mark.parametrize("validate", [False, True])
@pytest.mark.parametrize("target", ["runner", "plan", "state gather", "real path"])
@pytest.mark.parametrize("kind", ["numpy", "list"])
def test_class5_outputs_stored_as_arrays_or_lists_are_refused_by_identifier(
    kind: str, target: str, validate: bool
) -> None:
    cache = _cache()
    runner = _runner(cache, validate=validate)
    state = _state(cache, validate=validate)
    good = cache.encoder_outputs["a0"]
    bad = good.numpy().copy() if kind == "numpy" else good.tolist()
    cache.encoder_outputs["a0"] = bad  # type: ignore[assignment]  # what a buggy engine stores
    with pytest.raises(ValueError, match=r"'a0'.*torch.Tensor"):
        _target_call(target, runner, state, _VALID, _VALID.total)()
    cache.encoder_outputs["a0"] = good
    _assert_valid_gather_is_exact(runner, cache)
    _assert_real_path_is_exact(state, cache)


# ---------------------------------------------------------------- 6. meta-device tensors


def test_class6_meta_is_embed_is_refused_at_construction_or_registration() -> None:
    cache = EncoderCache(HIDDEN)
    mask = torch.ones(4, dtype=torch.bool, device="meta")
    with pytest.raises(ValueError, match=r"is_embed.*meta"):
        cache.add_request("a", [MultiModalFeature("a0", "audio", PlaceholderRange(1, 4, mask))])
    assert "a" not in cache.mm_features


def test_class6_meta_output_is_refused_when_cached() -> None:
    cache = EncoderCache(HIDDEN)
    cache.add_request("b", [_feature("b0", 0, 2)])
    with pytest.raises(ValueError, match=r"'b0'.*meta"):
        cache.put_encoder_output("b0", torch.ones(2, HIDDEN, device="meta"))
    assert "b0" not in cache.encoder_outputs


@pytest.mark.parametrize("validate", [False, True])
@pytest.mark.parametrize("target", ["runner", "plan", "real path"])
def test_class6_meta_output_stored_directly_is_refused_by_identifier(
    target: str, validate: bool
) -> None:
    cache = _cache()
    runner = _runner(cache, validate=validate)
    state = _state(cache, validate=validate)
    good = cache.encoder_outputs["b0"]
    cache.encoder_outputs["b0"] = torch.ones(2, HIDDEN, device="meta")
    with pytest.raises(ValueError, match=r"'b0'.*meta"):
        _target_call(target, runner, state, _VALID, _VALID.total)()
    cache.encoder_outputs["b0"] = good
    _assert_valid_gather_is_exact(runner, cache)
    _assert_real_path_is_exact(state, cache)


@pytest.mark.cuda
def test_class6_output_on_another_device_is_refused_by_identifier(
    cuda_device: torch.device,
) -> None:
    cache = _cache()
    state = _state(cache, validate=False)
    good = cache.encoder_outputs["b0"]
    cache.encoder_outputs["b0"] = good.to(cuda_device)
    with pytest.raises(ValueError, match=r"'b0'.*device"):
        state.get_mm_embeddings({}, _batch(_VALID), None)
    cache.encoder_outputs["b0"] = good
    _assert_real_path_is_exact(state, cache)


# ---------------------------------------------------------------- 7. token ids of the toy models


_BAD_IDS = {
    "float": (torch.tensor([1.0, 2.0]), r"input_ids must hold integer token ids, got dtype torch.float32"),
    "2-D": (torch.zeros(2, 2, dtype=torch.long), r"input_ids must be one-dimensional, got shape \(2, 2\)"),
    "negative": (torch.tensor([3, -1]), r"input_ids holds token -1 outside \[0, vocab_size=32\)"),
    "out of vocab": (torch.tensor([3, 32]), r"input_ids holds token 32 outside \[0, vocab_size=32\)"),
    "bool": (torch.tensor([True, False]), r"input_ids must hold integer token ids, got dtype torch.bool"),
}  # fmt: skip


@pytest.mark.parametrize("realtime", [False, True])
@pytest.mark.parametrize("kind", list(_BAD_IDS))
def test_class7_toy_models_refuse_bad_token_ids_by_name(kind: str, realtime: bool) -> None:
    ids, pattern = _BAD_IDS[kind]
    model = ToyRealtimeModel(HIDDEN) if realtime else ToyReplaceModel(HIDDEN)
    with pytest.raises(ValueError, match=pattern):
        model.embed_input_ids(ids)


@pytest.mark.parametrize("kind", ["float", "negative", "out of vocab"])
def test_class7_real_path_with_bad_token_ids_raises_and_writes_nothing(kind: str) -> None:
    cache = _cache()
    state = _state(cache, validate=False)
    buffer = state.dummy_inputs_embeds(MAX)
    assert buffer is not None
    buffer.fill_(0.5)
    ids = torch.arange(_VALID.total + 1) % 32
    ids = ids.to(torch.float32) if kind == "float" else ids
    if kind != "float":
        ids[2] = -1 if kind == "negative" else 32
    with pytest.raises(ValueError, match=r"input_ids"):
        state.get_mm_embeddings({}, _batch(_VALID, input_ids=ids), None)
    assert bool((buffer == 0.5).all())
    _assert_real_path_is_exact(state, cache)


# ---------------------------------------------------------------- 8. constructor sizes


@pytest.mark.parametrize("value", [1.5, True, "4", 0, -2], ids=repr)
def test_class8_encoder_cache_refuses_a_non_integer_or_non_positive_width(value: object) -> None:
    with pytest.raises(ValueError, match=rf"hidden_size.*{value!r}|hidden_size must be"):
        EncoderCache(hidden_size=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("argument", ["max_num_tokens", "hidden_size"])
@pytest.mark.parametrize("value", [1.5, True, "4", 0, -2], ids=repr)
def test_class8_runner_refuses_bad_sizes_by_name(argument: str, value: object) -> None:
    sizes: dict[str, Any] = {"max_num_tokens": MAX, "hidden_size": HIDDEN, argument: value}
    with pytest.raises(ValueError, match=rf"{argument}"):
        EncoderRunner(
            model_for(False, HIDDEN),
            sizes["max_num_tokens"],
            sizes["hidden_size"],
            _cache(),
            torch.float32,
            "cpu",
        )


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("max_num_tokens", 2**40),
        ("max_num_tokens", 2**62),
        ("hidden_size", 2**40),
        ("max_num_tokens", 1.5),
        ("hidden_size", 1.5),
        ("max_num_tokens", 0),
    ],
    ids=str,
)
def test_class8_state_refuses_sizes_no_allocator_can_give(argument: str, value: object) -> None:
    sizes: dict[str, Any] = {"max_num_tokens": MAX, "hidden_size": HIDDEN, argument: value}
    with pytest.raises(ValueError, match=rf"{argument}"):
        ReferenceModelState(
            ToyReplaceModel(HIDDEN), _cache(), dtype=torch.float32, device="cpu", **sizes
        )


@pytest.mark.parametrize(
    ("argument", "value", "pattern"),
    [
        ("max_num_tokens", 2**40, r"max_num_tokens=1099511627776 asks for a buffer"),
        ("arena_rows", 2**42, r"arena_rows=4398046511104 asks for a buffer"),
        ("arena_rows", 1.5, r"arena_rows must be an int, got 1.5"),
        ("device", "meta", r"device must be a device that holds data, got meta"),
    ],
    ids=str,
)
def test_class8_runner_refuses_an_arena_or_device_no_allocator_can_give(
    argument: str, value: object, pattern: str
) -> None:
    arguments: dict[str, Any] = {"max_num_tokens": MAX, "device": "cpu", argument: value}
    with pytest.raises(ValueError, match=pattern):
        EncoderRunner(
            model_for(False, HIDDEN),
            arguments.pop("max_num_tokens"),
            HIDDEN,
            _cache(),
            torch.float32,
            arguments.pop("device"),
            **arguments,
        )


def test_class8_state_refuses_the_meta_device() -> None:
    with pytest.raises(ValueError, match=r"device must be a device that holds data, got meta"):
        ReferenceModelState(
            ToyReplaceModel(HIDDEN),
            _cache(),
            hidden_size=HIDDEN,
            max_num_tokens=MAX,
            dtype=torch.float32,
            device="meta",
        )


def test_class8_numpy_integer_sizes_are_accepted() -> None:
    cache = EncoderCache(hidden_size=np.int64(HIDDEN))
    for req_id, features in _good_features().items():
        cache.add_request(req_id, features)
    cache.encoder_outputs.update(_outputs())
    runner = EncoderRunner(
        model_for(False, HIDDEN),
        np.int64(MAX),
        np.int32(HIDDEN),
        cache,
        torch.float32,
        "cpu",
    )
    _assert_valid_gather_is_exact(runner, cache)
    state = ReferenceModelState(
        ToyReplaceModel(HIDDEN),
        cache,
        hidden_size=np.int64(HIDDEN),
        max_num_tokens=np.int64(MAX),
        dtype=torch.float32,
        device="cpu",
    )
    _assert_real_path_is_exact(state, cache)


# ---------------------------------------------------------------- errors that name no field


@pytest.mark.parametrize(
    "scheduled",
    [{"a": ["0"]}, {"a": [0.0]}, {"a": [True]}, {"a": 0}, {"a": None}, ["a"], {"a": [[0]]}],
    ids=repr,
)
def test_bad_scheduled_encoder_inputs_are_refused_by_name(scheduled: Any) -> None:
    cache = _cache()
    state = _state(cache, validate=False)
    with pytest.raises((ValueError, TypeError), match=r"scheduled_encoder_inputs"):
        state.get_mm_embeddings(scheduled, _batch(_VALID), None)
    _assert_real_path_is_exact(state, cache)


def test_numpy_integer_indices_of_scheduled_encoder_inputs_are_accepted() -> None:
    cache = _cache()
    state = _state(cache, validate=True)
    scheduled: Any = {"a": [np.int64(0)], "b": np.array([0])}
    state.get_mm_embeddings(scheduled, _batch(_VALID), None)
    _assert_real_path_is_exact(state, cache)


# ---------------------------------------------------------------------- class 9: outputs
# that require grad, outputs written in place, and the rows' ``out`` buffer

_SHORT, _LONG = 3, 12  # rows of a piece selected from the arena, and of one copied whole


def _one_output_world(
    rows: int, output: torch.Tensor, validate: bool | None = None
) -> tuple[EncoderCache, EncoderRunner, ReferenceModelState, ReferenceInputBatch]:
    """A request whose first ``rows`` positions are one plain feature ``"a"``, with
    ``output`` cached directly; a runner and a state over the cache; the prefill batch."""
    cache = EncoderCache(HIDDEN)
    cache.add_request("r", [_feature("a", 0, rows)])
    cache.encoder_outputs["a"] = output
    model = ToyRealtimeModel(HIDDEN)
    runner = EncoderRunner(model, MAX, HIDDEN, cache, torch.float32, "cpu", validate=validate)
    state = ReferenceModelState(
        ToyRealtimeModel(HIDDEN),
        cache,
        hidden_size=HIDDEN,
        max_num_tokens=MAX,
        dtype=torch.float32,
        device="cpu",
        validate=validate,
    )
    batch = ReferenceInputBatch.from_requests(["r"], [rows], [0], [rows])
    return cache, runner, state, batch


def _args_of(batch: ReferenceInputBatch) -> tuple[Any, ...]:
    return (
        batch.req_ids,
        batch.num_tokens,
        batch.num_scheduled_tokens,
        batch.query_start_loc_np,
        batch.prefill_len_np,
        batch.num_computed_tokens_np,
    )


def _eager_merge(batch: ReferenceInputBatch, rows: torch.Tensor) -> torch.Tensor:
    """The eager merge of R2 for ``rows`` gathered at every scheduled position."""
    mask = torch.ones(batch.num_tokens, dtype=torch.bool)
    return ToyRealtimeModel(HIDDEN).embed_input_ids(
        batch.input_ids[: batch.num_tokens], [rows], mask
    )


def _numbered(rows: int, value: float) -> torch.Tensor:
    return value + torch.arange(rows * HIDDEN, dtype=torch.float32).reshape(rows, HIDDEN)


@pytest.mark.parametrize("rows", [_SHORT, _LONG], ids=["arena", "block-copy"])
def test_class9_an_output_that_requires_grad_gives_its_values_and_poisons_nothing(
    rows: int,
) -> None:
    """C1 allows storing any output directly; one that requires grad once made the state
    fail for good (a raw RuntimeError from index_select(out=), on every later call)."""
    cache, runner, state, batch = _one_output_world(rows, _numbered(rows, 1.0).requires_grad_())
    got = state.get_mm_embeddings({}, batch, None)
    assert got is not None
    assert torch.equal(got[:rows], _eager_merge(batch, _numbered(rows, 1.0)).detach())
    assert torch.equal(runner.plan_mm_gather(*_args_of(batch)).rows(), _numbered(rows, 1.0))
    cache.encoder_outputs["a"] = _numbered(rows, 5.0)  # replaced by a plain tensor
    got = state.get_mm_embeddings({}, batch, None)
    assert got is not None
    assert torch.equal(got[:rows], _eager_merge(batch, _numbered(rows, 5.0)))
    assert torch.equal(runner.plan_mm_gather(*_args_of(batch)).rows(), _numbered(rows, 5.0))


@pytest.mark.parametrize("rows", [_SHORT, _LONG], ids=["arena", "block-copy"])
@pytest.mark.parametrize("how", ["+=", "slice"])
def test_class9_an_output_written_in_place_is_never_served_stale(rows: int, how: str) -> None:
    """rows() and the real path once returned the arena's old copy of an output written
    in place, while pieces() showed the new values. Such a write is outside C1 (C2a):
    with validation on, it is never served stale."""
    output = torch.zeros(rows, HIDDEN)
    _, runner, state, batch = _one_output_world(rows, output, validate=True)
    runner.plan_mm_gather(*_args_of(batch)).rows()  # copies the output in
    state.get_mm_embeddings({}, batch, None)
    if how == "+=":
        output += 7
    else:
        output[1:].fill_(7.0)
    plan = runner.plan_mm_gather(*_args_of(batch))
    assert torch.equal(plan.rows(), torch.cat(plan.pieces()))
    assert torch.equal(plan.rows(), output)
    got = state.get_mm_embeddings({}, batch, None)
    assert got is not None
    assert torch.equal(got[:rows], _eager_merge(batch, output))


_BAD_OUT: dict[str, Callable[[int], object]] = {
    "dtype": lambda n: torch.empty(n, HIDDEN, dtype=torch.float64),
    "device": lambda n: torch.empty(n, HIDDEN, device="meta"),
    "list": lambda n: [[0.0] * HIDDEN for _ in range(n)],
    "numpy": lambda n: np.zeros((n, HIDDEN), dtype=np.float32),
    "not contiguous": lambda n: torch.empty(HIDDEN, n).T,
    "shape": lambda n: torch.empty(n + 1, HIDDEN),
    "requires grad": lambda n: torch.empty(n, HIDDEN, requires_grad=True),
}


@pytest.mark.parametrize("rows", [_SHORT, _LONG], ids=["arena", "block-copy"])
@pytest.mark.parametrize("kind", sorted(_BAD_OUT))
def test_class9_a_wrong_out_buffer_is_refused_by_name(rows: int, kind: str) -> None:
    """rows(out=...) with the wrong dtype, device or type once failed with a raw torch
    error (or an AttributeError for a list) that did not name ``out``."""
    _, runner, _, batch = _one_output_world(rows, _numbered(rows, 2.0))
    plan = runner.plan_mm_gather(*_args_of(batch))
    with pytest.raises(ValueError, match=r"^out "):
        plan.rows(out=_BAD_OUT[kind](rows))  # type: ignore[arg-type]
    out = torch.empty(rows, HIDDEN)
    assert plan.rows(out=out) is out
    assert torch.equal(out, _numbered(rows, 2.0))


@pytest.mark.parametrize("rows", [_SHORT, _LONG], ids=["arena", "block-copy"])
def test_class9_an_out_buffer_that_requires_grad_is_refused_by_name(rows: int) -> None:
    """rows(out=t) with t a leaf that requires grad once raised torch's raw RuntimeError
    from index_select (or cat), which did not name ``out``; t is left untouched."""
    _, runner, _, batch = _one_output_world(rows, _numbered(rows, 2.0))
    plan = runner.plan_mm_gather(*_args_of(batch))
    out = torch.zeros(rows, HIDDEN, requires_grad=True)
    with pytest.raises(ValueError, match=r"^out must be .* not require grad, got .* requires grad"):
        plan.rows(out=out)
    assert out.grad_fn is None
    assert not out.detach().any()


@pytest.mark.parametrize("rows", [_SHORT, _LONG], ids=["arena", "block-copy"])
def test_class9_an_out_buffer_that_shares_memory_with_what_is_read_is_refused(rows: int) -> None:
    cache, runner, _, batch = _one_output_world(rows, _numbered(rows, 2.0))
    plan = runner.plan_mm_gather(*_args_of(batch))
    source = runner.arena.storage if rows == _SHORT else cache.encoder_outputs["a"]
    with pytest.raises(ValueError, match="out shares memory"):
        plan.rows(out=source[:rows])
