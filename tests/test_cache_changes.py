"""Changes between steps (SPEC C1, C2): the reference never answers from stale state.

Each test warms a state over a few steps (so its feature table and output arena hold
what they derived), makes one change an engine may make, and then compares every form
of the answer (the list form, the plan's rows, the real path) with a state built fresh
on a copy of the cache. Validation is off (the engine's hot path), but for writes into a
cached output's storage: outside C1, caught with validation on only (SPEC C2a).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch

from rtmm_protocol import (
    EncoderCache,
    EncoderOutputMissingError,
    MultiModalFeature,
    PlaceholderRange,
)
from rtmm_protocol.reference import ReferenceModelState
from rtmm_protocol.testing import ReferenceInputBatch, ToyRealtimeModel, make_input_features

HIDDEN = 4
MAX_TOKENS = 32


def _frame(req_id: str, k: int, *, length: int = 2, masked: bool = False) -> MultiModalFeature:
    """Feature ``k`` of a request: ``length`` positions at ``3 * k`` (gaps between them)."""
    is_embed = None
    if masked:
        is_embed = torch.tensor([True, False, True][:length], dtype=torch.bool)
    data = {"input_features": make_input_features(hash((req_id, k)) % 1000, length, 8)}
    placeholder = PlaceholderRange(3 * k, length, is_embed)
    return MultiModalFeature(f"{req_id}-{k}", "audio", placeholder, data)


def _output(feature: MultiModalFeature, value: float) -> torch.Tensor:
    rows = feature.mm_position.get_num_embeds()
    return torch.arange(rows * HIDDEN, dtype=torch.float32).reshape(rows, HIDDEN) + value


def _cache() -> EncoderCache:
    cache = EncoderCache(HIDDEN)
    cache.add_request("a", [_frame("a", 0), _frame("a", 1, length=3, masked=True), _frame("a", 2)])
    cache.mm_features["b"] = [_frame("b", 0, length=3), _frame("b", 1)]  # as engines assign
    for req_id, features in cache.mm_features.items():
        for k, feature in enumerate(features):
            cache.encoder_outputs[feature.identifier] = _output(feature, 10.0 * k + ord(req_id))
    return cache


def _state(cache: EncoderCache, *, validate: bool = False) -> ReferenceModelState:
    return ReferenceModelState(
        ToyRealtimeModel(HIDDEN),
        cache,
        hidden_size=HIDDEN,
        max_num_tokens=MAX_TOKENS,
        dtype=torch.float32,
        device="cpu",
        validate=validate,
        arena_rows=64,
    )


def _copy(cache: EncoderCache) -> EncoderCache:
    copied = EncoderCache(cache.hidden_size)
    copied.mm_features = {req_id: list(features) for req_id, features in cache.mm_features.items()}
    copied.encoder_outputs = {key: t.clone() for key, t in cache.encoder_outputs.items()}
    return copied


def _batches(req_ids: list[str]) -> list[ReferenceInputBatch]:
    """Decode steps (one position per request) at every position, and 4-token windows."""
    n = len(req_ids)
    batches = [
        ReferenceInputBatch.from_requests(req_ids, [0] * n, [p + i for i in range(n)], [1] * n)
        for p in range(10)
    ]
    batches += [
        ReferenceInputBatch.from_requests(req_ids, [0] * n, [p] * n, [4] * n) for p in (0, 2, 5)
    ]
    return batches


def _answer(state: ReferenceModelState, batch: ReferenceInputBatch) -> object:
    """Everything a step gives, or the type of the error it raises."""
    try:
        pieces, mask = state.gather_mm_embeddings(batch)
        plan = state.encoder_runner.plan_mm_gather(
            batch.req_ids,
            batch.num_tokens,
            batch.num_scheduled_tokens,
            batch.query_start_loc_np,
            batch.prefill_len_np,
            batch.num_computed_tokens_np,
        )
        real = state.get_mm_embeddings({}, batch)
    except (EncoderOutputMissingError, ValueError) as error:
        return type(error)
    assert real is not None
    return (
        [(p.clone(), p.modality) for p in pieces],  # type: ignore[attr-defined]
        mask.clone(),
        plan.rows().clone(),
        real[: batch.num_tokens].clone(),
    )


def _same(got: object, want: object) -> bool:
    if isinstance(got, tuple) and isinstance(want, tuple):
        pieces, mask, rows, real = got
        want_pieces, want_mask, want_rows, want_real = want
        return (
            len(pieces) == len(want_pieces)
            and all(
                m == wm and torch.equal(p, wp)
                for (p, m), (wp, wm) in zip(pieces, want_pieces, strict=True)
            )
            and torch.equal(mask, want_mask)
            and torch.equal(rows, want_rows)
            and torch.equal(real, want_real)
        )
    return got == want


def _assert_fresh(state: ReferenceModelState, req_ids: list[str]) -> None:
    """Every step over ``req_ids`` equals what a fresh state on a copy of the cache says."""
    for batch in _batches(req_ids):
        want = _answer(_state(_copy(state.encoder_cache)), batch)
        got = _answer(state, batch)
        assert _same(got, want), (batch.num_computed_tokens_np, batch.num_scheduled_tokens)


def _warmed(
    req_ids: tuple[str, ...] = ("a", "b"), *, validate: bool = False
) -> ReferenceModelState:
    state = _state(_cache(), validate=validate)
    for batch in _batches(list(req_ids)):
        _answer(state, batch)
    return state


# ---------------------------------------------------------------------- the stale cases


def test_an_item_replaced_in_a_plain_list_is_seen() -> None:
    """A same-length, same-list edit with another feature: never the old feature's rows."""
    state = _warmed()
    features = state.encoder_cache.mm_features["b"]
    other = MultiModalFeature("b-x", "image", PlaceholderRange(1, 2))
    state.encoder_cache.encoder_outputs["b-x"] = _output(other, -50.0)
    features[0] = other
    _assert_fresh(state, ["a", "b"])


def test_features_and_placeholders_are_frozen() -> None:
    feature = _cache().mm_features["a"][0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        feature.mm_position = PlaceholderRange(1, 2)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        feature.data = None  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        feature.mm_position.offset = 5  # type: ignore[misc]


# ---------------------------------------------------------------------- C1, one by one

_Change = Callable[[EncoderCache], None]


def _add_request_by_method(cache: EncoderCache) -> None:
    cache.add_request("c", [_frame("c", 0), _frame("c", 1, length=3)])
    for feature in cache.mm_features["c"]:
        cache.encoder_outputs[feature.identifier] = _output(feature, 70.0)


def _add_request_by_assignment(cache: EncoderCache) -> None:
    cache.mm_features["c"] = [_frame("c", 1), _frame("c", 2, masked=True, length=3)]
    for feature in cache.mm_features["c"]:
        cache.encoder_outputs[feature.identifier] = _output(feature, 80.0)


def _new_list_for_a_request(cache: EncoderCache) -> None:
    cache.mm_features["a"] = [_frame("a", 1, length=1), _frame("a", 3)]
    for feature in cache.mm_features["a"]:
        cache.encoder_outputs[feature.identifier] = _output(feature, 90.0)


def _append(cache: EncoderCache) -> None:
    feature = _frame("b", 2, length=3, masked=True)
    cache.mm_features["b"].append(feature)
    cache.encoder_outputs[feature.identifier] = _output(feature, 100.0)


def _append_feature(cache: EncoderCache) -> None:
    feature = _frame("a", 3)
    cache.encoder_outputs[feature.identifier] = _output(feature, 110.0)
    cache.append_feature("a", feature)


def _remove_request(cache: EncoderCache) -> None:
    cache.remove_request("a")


def _delete_request(cache: EncoderCache) -> None:
    del cache.mm_features["b"]


def _put_output(cache: EncoderCache) -> None:
    cache.put_encoder_output("a-1", _output(cache.mm_features["a"][1], -1.0))


def _assign_output(cache: EncoderCache) -> None:
    cache.encoder_outputs["b-0"] = _output(cache.mm_features["b"][0], -2.0)


def _free_output(cache: EncoderCache) -> None:
    cache.free_encoder_output("a-0")


def _delete_output(cache: EncoderCache) -> None:
    del cache.encoder_outputs["b-1"]


def _free_and_put_again(cache: EncoderCache) -> None:
    cache.free_encoder_output("a-2")
    cache.put_encoder_output("a-2", _output(cache.mm_features["a"][2], -3.0))


@pytest.mark.parametrize(
    "change",
    [
        _add_request_by_method,
        _add_request_by_assignment,
        _new_list_for_a_request,
        _append,
        _append_feature,
        _remove_request,
        _delete_request,
        _put_output,
        _assign_output,
        _free_output,
        _delete_output,
        _free_and_put_again,
    ],
    ids=lambda change: change.__name__.strip("_"),
)
def test_each_allowed_change_gives_the_fresh_answer(change: _Change) -> None:
    state = _warmed()
    change(state.encoder_cache)
    _assert_fresh(state, ["a", "b", "c"])


def test_a_data_update_in_place_gives_the_fresh_answer() -> None:
    """``features[k] = dataclasses.replace(features[k], data=...)``, as vLLM updates inputs."""
    state = _warmed()
    cache = state.encoder_cache
    features = cache.mm_features["a"]
    updated = dataclasses.replace(
        features[1], data={"input_features": make_input_features(999, 2, 8)}
    )
    features[1] = updated
    _assert_fresh(state, ["a", "b"])
    # The new data is what the encoder sees once the output has to be computed again.
    cache.free_encoder_output("a-1")
    batch = ReferenceInputBatch.from_requests(["a"], [0], [3], [3])
    got = state.get_mm_embeddings({"a": [1]}, batch)
    fresh = _state(_copy(cache))
    want = fresh.get_mm_embeddings({"a": [1]}, batch)
    assert got is not None
    assert want is not None
    assert torch.equal(got[:3], want[:3])
    encoded = ToyRealtimeModel(HIDDEN).embed_multimodal(**updated.data)[0]  # type: ignore[arg-type]
    assert torch.equal(cache.encoder_outputs["a-1"], encoded)


# ---------------------------------------------------------------------- outside C1


def test_a_list_reordered_in_place_raises_rather_than_answering_stale() -> None:
    state = _warmed()
    state.encoder_cache.mm_features["a"].reverse()
    batch = ReferenceInputBatch.from_requests(["a"], [0], [0], [1])
    with pytest.raises(ValueError, match="not sorted by offset"):
        state.gather_mm_embeddings(batch)


def test_an_item_moved_to_another_placeholder_in_place_is_seen() -> None:
    state = _warmed()
    features = state.encoder_cache.mm_features["a"]
    moved = MultiModalFeature("a-2", "audio", PlaceholderRange(7, 2))  # was [6, 8)
    state.encoder_cache.encoder_outputs["a-2"] = _output(moved, -9.0)
    features[2] = moved
    _assert_fresh(state, ["a", "b"])


# ---------------------------------------------------------------------- writes into an output

#: Writes into a cached output's storage: the dict still holds the same tensor (C2a).
_WRITES: dict[str, Callable[[torch.Tensor], object]] = {
    "+=": lambda output: output.add_(100.0),
    "a row through a view": lambda output: output[-1].fill_(-5.0),
    "copy_": lambda output: output.copy_(torch.full_like(output, 3.0)),
    "through .detach()": lambda output: output.detach().mul_(-1.0),
}


@pytest.mark.parametrize("write", sorted(_WRITES))
def test_with_validation_on_an_output_written_in_place_is_never_served_stale(write: str) -> None:
    """C2a: with validation on, every form of the answer after a write into a cached
    output's storage is what a fresh state says, decode steps (rows from the output
    arena's copies) and several-token windows alike, on every later step too."""
    state = _warmed(validate=True)
    outputs = state.encoder_cache.encoder_outputs
    for identifier in ("a-0", "a-2", "b-1"):
        _WRITES[write](outputs[identifier])
        _assert_fresh(state, ["a", "b"])


def test_validation_switched_on_catches_a_write_made_while_it_was_off() -> None:
    state = _warmed()
    state.encoder_cache.encoder_outputs["a-2"].add_(1.0)
    state.validate = True
    _assert_fresh(state, ["a", "b"])


class _VersionSpy(torch.Tensor):
    """A tensor that counts the reads of its version (torch's count of in-place writes)."""

    reads = 0

    @property
    def _version(self) -> int:  # type: ignore[override]
        _VersionSpy.reads += 1
        return int(super()._version)


def _decode_step(state: ReferenceModelState, position: int) -> torch.Tensor:
    req_ids = ["a", "b"]
    batch = ReferenceInputBatch.from_requests(req_ids, [0, 0], [position, position], [1, 1])
    got = state.get_mm_embeddings({}, batch)
    assert got is not None
    return got[:2].clone()


def test_with_validation_off_the_step_reads_no_version_and_serves_the_copy() -> None:
    """C2a, as the docs say it: with validation off a step reads no output's version once
    the arena holds the copies it needs, and a write into an output's storage is not seen
    until the cache holds another tensor there (which C1 allows, and which is seen)."""
    cache = _cache()
    for key, output in cache.encoder_outputs.items():
        cache.encoder_outputs[key] = output.as_subclass(_VersionSpy)
    state = _state(cache)
    first = _decode_step(state, 0)  # copies a-0 and b-0 into the arena
    fresh = _decode_step(_state(_copy(cache)), 1)
    _VersionSpy.reads = 0
    assert torch.equal(_decode_step(state, 1), fresh)
    assert _VersionSpy.reads == 0
    cache.encoder_outputs["a-0"].add_(100.0)
    assert torch.equal(_decode_step(state, 0), first)  # the copy made before the write
    assert _VersionSpy.reads == 0
    cache.encoder_outputs["a-0"] = cache.encoder_outputs["a-0"].clone()  # C1: a new tensor
    fresh = _decode_step(_state(_copy(cache)), 0)
    assert torch.equal(_decode_step(state, 0), fresh)
    state.validate = True  # the same step, validating: every output's version is read
    _VersionSpy.reads = 0
    _decode_step(state, 0)
    assert _VersionSpy.reads >= 2
