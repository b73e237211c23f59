"""The feature table follows the cache's ``mm_features`` however it is changed (SPEC C1, C2).

Changes through the cache's methods, direct edits of the dict and of its lists, growth
past a lane's room, and relayout are each checked against the lists themselves;
a property runs random sequences of such changes between gathers and compares every
gather with the oracle.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.gather_check import assert_matches_oracle, model_for
from support.profiles import example_budget

from rtmm_protocol import (
    EncoderCache,
    MultiModalFeature,
    PlaceholderRange,
)
from rtmm_protocol.reference import EncoderRunner
from rtmm_protocol.reference.feature_table import LANE_WIDTH, FeatureTable
from rtmm_protocol.testing.oracle import oracle_gather
from rtmm_protocol.validation import MAX_POSITION

HIDDEN = 2


def _frame(
    req_id: str, k: int, *, length: int = 1, mask: tuple[bool, ...] | None = None
) -> MultiModalFeature:
    """Feature ``k`` of a stream: ``length`` positions at ``3 * k`` (gaps of at least 2)."""
    is_embed = None if mask is None else torch.tensor(mask, dtype=torch.bool)
    return MultiModalFeature(f"{req_id}-{k}", "audio", PlaceholderRange(3 * k, length, is_embed))


def _lane_of(table: FeatureTable, cache: EncoderCache, req_id: str) -> tuple[int, int]:
    """``(first entry, feature count)`` of ``req_id``'s lane, synced with the cache."""
    lanes = table.sync(cache.mm_features, [req_id])
    return int(lanes.first[0]), int(lanes.length[0])


def _assert_mirrors(table: FeatureTable, req_id: str, features: list[MultiModalFeature]) -> None:
    """The table's lane of ``req_id`` holds exactly ``features``."""
    lanes = table.sync({req_id: features}, [req_id])
    first, count, origin = int(lanes.first[0]), int(lanes.length[0]), int(lanes.origin[0])
    assert count == len(features)
    entries = slice(first, first + count)
    assert table.identifier[entries].tolist() == [f.identifier for f in features]
    assert table.offset[entries].tolist() == [f.mm_position.offset for f in features]
    assert table.end[entries].tolist() == [f.mm_position.end for f in features]
    assert table.num_embeds[entries].tolist() == [f.mm_position.get_num_embeds() for f in features]
    assert all(a is b for a, b in zip(table.feature[entries], features, strict=True))
    # Lane coordinates are the positions shifted by the lane's origin, sorted.
    assert (table.lane_start[entries] - origin).tolist() == table.offset[entries].tolist()
    assert origin % LANE_WIDTH == 0
    assert np.all(np.diff(table.lane_end[: first + count]) >= 0)


def _sync(table: FeatureTable, cache: EncoderCache, *req_ids: str) -> np.ndarray:
    origins: np.ndarray = table.sync(cache.mm_features, list(req_ids)).origin.copy()
    return origins


def test_added_request_is_mirrored() -> None:
    cache = EncoderCache()
    features = [_frame("a", k, length=2) for k in range(5)]
    cache.add_request("a", features)
    table = FeatureTable()
    (key_base,) = _sync(table, cache, "a")
    assert key_base > 0
    _assert_mirrors(table, "a", features)


def test_masked_features_store_embed_ranks_and_flags() -> None:
    cache = EncoderCache()
    mask = (True, False, True, True)
    cache.add_request("a", [_frame("a", 0, length=4, mask=mask)])
    table = FeatureTable()
    _sync(table, cache, "a")
    base, _ = _lane_of(table, cache, "a")
    first = int(table.embed_base[base])
    assert table.embed_rank[first : first + 5].tolist() == [0, 1, 1, 2, 3]
    assert table.embed_flag[first : first + 4].tolist() == list(mask)
    assert int(table.num_embeds[base]) == 3


@pytest.mark.parametrize("how", ["append_feature", "list.append"])
def test_appended_frames_are_added_in_place(how: str) -> None:
    cache = EncoderCache()
    cache.add_request("a", [_frame("a", 0)])
    table = FeatureTable()
    first_key = _sync(table, cache, "a")[0]
    base = _lane_of(table, cache, "a")[0]
    for k in range(1, 4):  # within the lane's spare room: no move
        frame = _frame("a", k)
        if how == "append_feature":
            cache.append_feature("a", frame)
        else:
            cache.mm_features["a"].append(frame)
        assert _sync(table, cache, "a")[0] == first_key
        assert _lane_of(table, cache, "a")[0] == base
    _assert_mirrors(table, "a", cache.mm_features["a"])


def test_a_growing_stream_moves_to_a_bigger_lane() -> None:
    cache = EncoderCache()
    cache.add_request("a", [_frame("a", 0)])
    cache.add_request("b", [_frame("b", 0)])
    table = FeatureTable()
    keys = _sync(table, cache, "a", "b")
    for k in range(1, 40):
        cache.append_feature("a", _frame("a", k))
        _sync(table, cache, "a", "b")
    moved = _sync(table, cache, "a", "b")
    assert moved[0] != keys[0]  # the stream moved (a new lane), ...
    assert moved[1] == keys[1]  # ... the other request did not
    _assert_mirrors(table, "a", cache.mm_features["a"])
    _assert_mirrors(table, "b", cache.mm_features["b"])


def test_replaced_and_shortened_lists_are_rebuilt() -> None:
    cache = EncoderCache()
    cache.add_request("a", [_frame("a", k) for k in range(4)])
    table = FeatureTable()
    _sync(table, cache, "a")
    cache.mm_features["a"] = [_frame("a", k, length=2) for k in range(2)]  # a new list
    _sync(table, cache, "a")
    _assert_mirrors(table, "a", cache.mm_features["a"])
    cache.mm_features["a"].pop()  # the same list, shorter
    _sync(table, cache, "a")
    _assert_mirrors(table, "a", cache.mm_features["a"])
    last = cache.mm_features["a"][-1]
    cache.mm_features["a"][-1:] = [
        _frame("a", 1, length=2),
        _frame("a", 2),
    ]  # last replaced, longer
    assert cache.mm_features["a"][0] is not last
    _sync(table, cache, "a")
    _assert_mirrors(table, "a", cache.mm_features["a"])


def test_removed_and_unknown_requests_get_the_empty_lane() -> None:
    cache = EncoderCache()
    cache.add_request("a", [_frame("a", 0)])
    table = FeatureTable()
    assert _sync(table, cache, "a", "nobody")[1] == 0
    assert _lane_of(table, cache, "nobody") == (0, 0)
    cache.remove_request("a")
    assert _sync(table, cache, "a")[0] == 0
    assert _lane_of(table, cache, "a") == (0, 0)


def test_dropped_and_moved_lanes_let_go_of_their_features() -> None:
    """Garbage entries must not keep features (and their encoder inputs) alive."""
    cache = EncoderCache()
    cache.add_request("a", [_frame("a", 0)])
    cache.add_request("b", [_frame("b", 0)])
    table = FeatureTable()
    _sync(table, cache, "a", "b")
    gone = weakref.ref(cache.mm_features["a"][0])
    moved = weakref.ref(cache.mm_features["b"][0])
    cache.remove_request("a")
    cache.mm_features["b"] = [_frame("b", 1)]  # replaced: the old lane is garbage
    _sync(table, cache, "a", "b")
    gc.collect()
    assert gone() is None
    assert moved() is None


def test_relayout_renumbers_and_keeps_every_request() -> None:
    cache = EncoderCache()
    table = FeatureTable(capacity=8)
    streams = [f"s{r}" for r in range(3)]
    for name in streams:
        cache.add_request(name, [_frame(name, 0)])
    for k in range(1, 120):  # streams grow while short requests come and go
        for name in streams:
            cache.mm_features[name].append(_frame(name, k))
        visitor = f"v{k}"
        cache.add_request(visitor, [_frame(visitor, j) for j in range(100)])
        _sync(table, cache, *streams, visitor)
        cache.remove_request(visitor)
    # Without relayout every visitor's 125-entry lane would still take room.
    assert table.lane_start.shape[0] < 119 * 125 // 2
    keys = _sync(table, cache, *streams)
    assert sorted(keys.tolist()) == keys.tolist()  # renumbered in layout order
    for name in streams:
        _assert_mirrors(table, name, cache.mm_features[name])


def test_unsorted_features_edited_in_directly_are_rejected_by_name() -> None:
    cache = EncoderCache()
    cache.mm_features["a"] = [_frame("a", 2), _frame("a", 1)]
    with pytest.raises(ValueError, match=r"'a-1' at offset 3 follows 'a-2' at offset 6"):
        FeatureTable().sync(cache.mm_features, ["a"])


def test_an_appended_feature_overlapping_the_last_is_rejected_by_name() -> None:
    cache = EncoderCache()
    cache.add_request("a", [_frame("a", 1, length=2)])
    table = FeatureTable()
    _sync(table, cache, "a")
    cache.mm_features["a"].append(MultiModalFeature("a-x", "audio", PlaceholderRange(4, 1)))
    with pytest.raises(ValueError, match=r"overlap: 'a-x' at \[4, 5\) overlaps 'a-1'"):
        _sync(table, cache, "a")


def test_positions_beyond_the_supported_range_are_rejected_by_name() -> None:
    cache = EncoderCache()
    far = [MultiModalFeature("far", "audio", PlaceholderRange(MAX_POSITION, 2))]
    with pytest.raises(ValueError, match=r"feature 'far'.*largest supported position"):
        cache.add_request("a", far)
    cache.mm_features["a"] = far  # assigned directly, as engines may
    with pytest.raises(ValueError, match=r"feature 'far'.*largest supported position"):
        FeatureTable().sync(cache.mm_features, ["a"])


# ---------------------------------------------------------------------- property

_OPS = st.sampled_from(
    ["append_feature", "list.append", "replace_list", "pop", "remove", "add", "replace_in_place"]
)


def _check_gather(
    runner: EncoderRunner, cache: EncoderCache, req_ids: list[str], computed: int
) -> None:
    """Gather one decode position per request (realtime) and compare with the oracle."""
    n = len(req_ids)
    scheduled = np.ones(n, dtype=np.int32)
    qsl = np.arange(n + 1, dtype=np.int32)
    prefill = np.zeros(n, dtype=np.int32)
    positions = np.array([computed + 2 * i for i in range(n)], dtype=np.int32)
    expected = oracle_gather(
        dict(cache.mm_features),
        dict(cache.encoder_outputs),
        is_realtime=True,
        req_ids=req_ids,
        num_scheduled_tokens=scheduled,
        query_start_loc=qsl,
        prefill_lens=prefill,
        num_computed_tokens=positions,
    )
    result = runner.gather_mm_embeddings(req_ids, n, scheduled, qsl, prefill, positions)
    assert_matches_oracle(result, expected, cache.encoder_outputs, HIDDEN)


@settings(max_examples=example_budget(ci=200, dev=30))
@given(
    ops=st.lists(st.tuples(_OPS, st.integers(0, 3), st.integers(0, 40)), min_size=1, max_size=25),
)
def test_random_edits_between_gathers_match_oracle(ops: list[tuple[str, int, int]]) -> None:
    """C1 changes, and one outside it (an item replaced in place by one with another
    placeholder and modality), between gathers: every gather is the fresh answer (C2)."""
    cache = EncoderCache()
    names = [f"s{r}" for r in range(4)]
    counter = 0

    def frame(name: str) -> MultiModalFeature:
        nonlocal counter
        counter += 1
        features = cache.mm_features.get(name, [])
        offset = features[-1].mm_position.end if features else 0
        feature = MultiModalFeature(
            f"{name}-{counter}", "audio", PlaceholderRange(offset, 1 + counter % 3)
        )
        cache.encoder_outputs[feature.identifier] = torch.full(
            (feature.mm_position.length, HIDDEN), float(counter)
        )
        return feature

    for name in names:
        cache.add_request(name, [frame(name)])
    runner = EncoderRunner(model_for(True, HIDDEN), 16, HIDDEN, cache, torch.float32, "cpu")
    for op, who, position in ops:
        name = names[who]
        present = name in cache.mm_features
        if op == "append_feature" and present:
            cache.append_feature(name, frame(name))
        elif op == "list.append" and present:
            cache.mm_features[name].append(frame(name))
        elif op == "replace_list" and present:
            cache.mm_features[name] = list(cache.mm_features[name][: position % 3])
        elif op == "pop" and present and cache.mm_features[name]:
            cache.mm_features[name].pop()
        elif op == "remove" and present:
            cache.remove_request(name)
        elif op == "add" and not present:
            cache.add_request(name, [])
            cache.mm_features[name].append(frame(name))
        elif op == "replace_in_place" and present and cache.mm_features[name]:
            last = cache.mm_features[name][-1]
            cache.mm_features[name][-1] = MultiModalFeature(
                last.identifier, "image", PlaceholderRange(last.mm_position.offset, 1)
            )
            cache.encoder_outputs[last.identifier] = torch.full((1, HIDDEN), -1.0)
        _check_gather(runner, cache, names, position)
