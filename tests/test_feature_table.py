"""The feature table follows the cache's ``mm_features`` however it is changed.

Changes through the cache's methods, direct edits of the dict and of its lists, growth
past a segment's room, and compaction are each checked against the lists themselves;
a property runs random sequences of such changes between gathers and compares every
gather with the oracle.
"""

from __future__ import annotations

import copy
import gc
import pickle
import weakref
from collections.abc import Callable

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.gather_check import assert_matches_oracle, model_for
from support.profiles import example_budget

from rtmm_protocol import (
    EncoderCache,
    EncoderOutputMissingError,
    MultiModalFeature,
    PlaceholderRange,
)
from rtmm_protocol.conformance.oracle import oracle_gather
from rtmm_protocol.encoder_cache import FeatureListDict, VersionedDict
from rtmm_protocol.reference import EncoderRunner, FeatureTable
from rtmm_protocol.reference.feature_table import MAX_POSITION

HIDDEN = 2


def _frame(
    req_id: str, k: int, *, length: int = 1, mask: tuple[bool, ...] | None = None
) -> MultiModalFeature:
    """Feature ``k`` of a stream: ``length`` positions at ``3 * k`` (gaps of at least 2)."""
    is_embed = None if mask is None else torch.tensor(mask, dtype=torch.bool)
    return MultiModalFeature(f"{req_id}-{k}", "audio", PlaceholderRange(3 * k, length, is_embed))


def _assert_mirrors(table: FeatureTable, req_id: str, features: list[MultiModalFeature]) -> None:
    """The table's segment of ``req_id`` holds exactly ``features``."""
    segment = table.segment_of(req_id)
    assert segment is not None
    base, count = segment
    assert count == len(features)
    entries = slice(base, base + count)
    assert table.identifier[entries].tolist() == [f.identifier for f in features]
    assert table.start[entries].tolist() == [f.mm_position.offset for f in features]
    assert table.end[entries].tolist() == [f.mm_position.end for f in features]
    assert table.num_embeds[entries].tolist() == [f.mm_position.get_num_embeds() for f in features]
    assert all(a is b for a, b in zip(table.feature[entries], features, strict=True))
    # Sort keys carry the segment's key: every key of the segment lies in one key range.
    keys = table.start_key[entries]
    assert np.all(np.diff(keys) >= 0)


def _sync(table: FeatureTable, cache: EncoderCache, *req_ids: str) -> np.ndarray:
    return np.array(table.key_bases(cache.mm_features, list(req_ids)), dtype=np.int64)


def test_added_request_is_mirrored() -> None:
    cache = EncoderCache()
    features = [_frame("a", k, length=2) for k in range(5)]
    cache.add_request("a", features)
    table = FeatureTable()
    (key_base,) = _sync(table, cache, "a")
    assert key_base > 0
    _assert_mirrors(table, "a", features)


def test_masked_features_store_prefix_sums_and_flags() -> None:
    cache = EncoderCache()
    mask = (True, False, True, True)
    cache.add_request("a", [_frame("a", 0, length=4, mask=mask)])
    table = FeatureTable()
    _sync(table, cache, "a")
    base, _ = table.segment_of("a") or (0, 0)
    first = int(table.mask_base[base])
    assert table.prefix[first : first + 5].tolist() == [0, 1, 1, 2, 3]
    assert table.embeds[first : first + 4].tolist() == list(mask)
    assert int(table.num_embeds[base]) == 3


@pytest.mark.parametrize("how", ["append_feature", "list.append"])
def test_appended_frames_are_added_in_place(how: str) -> None:
    cache = EncoderCache()
    cache.add_request("a", [_frame("a", 0)])
    table = FeatureTable()
    first_key = _sync(table, cache, "a")[0]
    base = (table.segment_of("a") or (0, 0))[0]
    for k in range(1, 4):  # within the segment's spare room: no move
        frame = _frame("a", k)
        if how == "append_feature":
            cache.append_feature("a", frame)
        else:
            cache.mm_features["a"].append(frame)
        assert _sync(table, cache, "a")[0] == first_key
        assert (table.segment_of("a") or (0, 0))[0] == base
    _assert_mirrors(table, "a", cache.mm_features["a"])


def test_a_growing_stream_moves_to_a_bigger_segment() -> None:
    cache = EncoderCache()
    cache.add_request("a", [_frame("a", 0)])
    cache.add_request("b", [_frame("b", 0)])
    table = FeatureTable()
    keys = _sync(table, cache, "a", "b")
    for k in range(1, 40):
        cache.append_feature("a", _frame("a", k))
        _sync(table, cache, "a", "b")
    moved = _sync(table, cache, "a", "b")
    assert moved[0] != keys[0]  # the stream moved (new key), ...
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


def test_same_length_edits_of_a_tracked_list_are_seen_without_forget() -> None:
    cache = EncoderCache()
    cache.add_request("a", [_frame("a", 0), _frame("a", 1)])
    cache.add_request("b", [_frame("b", 0)])
    table = FeatureTable()
    _sync(table, cache, "a")
    cache.mm_features["a"][1] = _frame("a", 2)  # same list, same length
    _sync(table, cache, "b")  # a lookup without "a" must not use up the rewrite
    cache.mm_features["b"].append(_frame("b", 1))
    _sync(table, cache, "a", "b")
    _assert_mirrors(table, "a", cache.mm_features["a"])
    _assert_mirrors(table, "b", cache.mm_features["b"])


def test_same_length_edits_of_a_plain_list_are_seen_after_forget_or_refresh() -> None:
    cache = EncoderCache()
    cache.mm_features["a"] = [_frame("a", 0), _frame("a", 1)]  # plain, untracked
    table = FeatureTable()
    _sync(table, cache, "a")
    cache.mm_features["a"][1] = _frame("a", 2)  # same list, same length
    table.forget("a")
    _sync(table, cache, "a")
    _assert_mirrors(table, "a", cache.mm_features["a"])
    cache.mm_features["a"][0] = _frame("a", 0, length=2)
    table.key_bases(cache.mm_features, ["a"], refresh=True)
    _assert_mirrors(table, "a", cache.mm_features["a"])


def test_removed_and_unknown_requests_get_the_empty_segment() -> None:
    cache = EncoderCache()
    cache.add_request("a", [_frame("a", 0)])
    table = FeatureTable()
    assert _sync(table, cache, "a", "nobody")[1] == 0
    assert table.segment_of("nobody") is None
    cache.remove_request("a")
    assert _sync(table, cache, "a")[0] == 0
    assert table.segment_of("a") is None


def test_dropped_and_moved_segments_let_go_of_their_features() -> None:
    """Garbage entries must not keep features (and their encoder inputs) alive."""
    cache = EncoderCache()
    cache.add_request("a", [_frame("a", 0)])
    cache.add_request("b", [_frame("b", 0)])
    table = FeatureTable()
    _sync(table, cache, "a", "b")
    gone = weakref.ref(cache.mm_features["a"][0])
    moved = weakref.ref(cache.mm_features["b"][0])
    cache.remove_request("a")
    cache.mm_features["b"] = [_frame("b", 1)]  # replaced: the old segment is garbage
    _sync(table, cache, "a", "b")
    gc.collect()
    assert gone() is None
    assert moved() is None


def test_segments_of_requests_gone_from_the_cache_are_dropped() -> None:
    cache = EncoderCache()
    table = FeatureTable()
    for r in range(200):
        cache.add_request(f"r{r}", [_frame(f"r{r}", 0)])
        _sync(table, cache, f"r{r}")
        if r >= 2:
            del cache.mm_features[f"r{r - 2}"]  # directly, not through remove_request
    assert table.num_requests <= 2 * len(cache.mm_features) + 65
    _sync(table, cache, "r199")
    _assert_mirrors(table, "r199", cache.mm_features["r199"])


def test_compaction_renumbers_and_keeps_every_request() -> None:
    cache = EncoderCache()
    table = FeatureTable(initial_capacity=8)
    streams = [f"s{r}" for r in range(3)]
    for name in streams:
        cache.add_request(name, [_frame(name, 0)])
    generation = table.generation
    for k in range(1, 120):  # streams grow while short requests come and go
        for name in streams:
            cache.mm_features[name].append(_frame(name, k))
        visitor = f"v{k}"
        cache.add_request(visitor, [_frame(visitor, j) for j in range(100)])
        _sync(table, cache, *streams, visitor)
        cache.remove_request(visitor)
    assert table.generation > generation  # the garbage was compacted away
    # Without compaction every visitor's 125-entry segment would still take room.
    assert table.num_entries < 119 * 125 // 2
    keys = _sync(table, cache, *streams)
    assert sorted(keys.tolist()) == keys.tolist()  # renumbered in layout order
    for name in streams:
        _assert_mirrors(table, name, cache.mm_features[name])


def test_unsorted_features_edited_in_directly_are_rejected_by_name() -> None:
    cache = EncoderCache()
    cache.mm_features["a"] = [_frame("a", 2), _frame("a", 1)]
    with pytest.raises(ValueError, match=r"'a-1' at offset 3 follows 'a-2' at offset 6"):
        FeatureTable().key_bases(cache.mm_features, ["a"])


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
    cache.add_request("a", [MultiModalFeature("far", "audio", PlaceholderRange(MAX_POSITION, 2))])
    with pytest.raises(ValueError, match=r"feature 'far' ends at position"):
        FeatureTable().key_bases(cache.mm_features, ["a"])


# ---------------------------------------------------------------------- versioned dicts

_DICT_EDITS: dict[str, Callable[[dict[str, list[MultiModalFeature]]], object]] = {
    "setitem new": lambda d: d.__setitem__("z", [_frame("z", 0)]),
    "setitem replace": lambda d: d.__setitem__("a", list(d["a"])),
    "delitem": lambda d: d.__delitem__("a"),
    "pop": lambda d: d.pop("a"),
    "popitem": lambda d: d.popitem(),
    "clear": lambda d: d.clear(),
    "update": lambda d: d.update(z=[_frame("z", 0)]),
    "setdefault": lambda d: d.setdefault("z", [_frame("z", 0)]),
    "ior": lambda d: d.__ior__({"z": [_frame("z", 0)]}),
}

_LIST_EDITS: dict[str, Callable[[list[MultiModalFeature]], object]] = {
    "append": lambda f: f.append(_frame("a", 9)),
    "extend": lambda f: f.extend([_frame("a", 9)]),
    "insert": lambda f: f.insert(0, _frame("a", 9)),
    "pop": lambda f: f.pop(),
    "remove": lambda f: f.remove(f[0]),
    "clear": lambda f: f.clear(),
    "setitem": lambda f: f.__setitem__(0, _frame("a", 9)),
    "setitem slice": lambda f: f.__setitem__(slice(0, 1), [_frame("a", 9)]),
    "delitem": lambda f: f.__delitem__(0),
    "delitem slice": lambda f: f.__delitem__(slice(0, 1)),
    "iadd": lambda f: f.__iadd__([_frame("a", 9)]),
    "imul": lambda f: f.__imul__(1),
    "sort": lambda f: f.sort(key=lambda feature: feature.identifier),
    "reverse": lambda f: f.reverse(),
}


def _two_requests() -> EncoderCache:
    cache = EncoderCache()
    cache.add_request("a", [_frame("a", 0), _frame("a", 1)])
    cache.add_request("b", [_frame("b", 0)])
    return cache


@pytest.mark.parametrize("edit", sorted(_DICT_EDITS))
def test_every_dict_edit_changes_the_version(edit: str) -> None:
    for dict_type in (FeatureListDict, VersionedDict):
        cache = _two_requests()
        mm_features: VersionedDict[str, list[MultiModalFeature]] = dict_type(cache.mm_features)
        before = mm_features.version
        _DICT_EDITS[edit](mm_features)
        assert mm_features.version != before, (dict_type.__name__, edit)


@pytest.mark.parametrize("edit", sorted(_LIST_EDITS))
def test_every_edit_of_a_registered_list_changes_the_dicts_version(edit: str) -> None:
    cache = _two_requests()
    mm_features = cache.mm_features
    assert isinstance(mm_features, FeatureListDict)
    assert mm_features.fully_tracked
    before = mm_features.version
    _LIST_EDITS[edit](mm_features["a"])
    assert mm_features.version != before


def test_plain_lists_assigned_directly_stay_themselves_but_are_not_tracked() -> None:
    cache = _two_requests()
    mm_features = cache.mm_features
    assert isinstance(mm_features, FeatureListDict)
    plain = [_frame("c", 0)]
    mm_features["c"] = plain
    assert mm_features["c"] is plain  # the caller may keep editing its list
    tracked = [mm_features.fully_tracked]
    del mm_features["c"]
    tracked.append(mm_features.fully_tracked)
    moved = mm_features.pop("a")  # a tracked list reports to one dict only
    tracked.append(FeatureListDict(z=moved).fully_tracked)
    mm_features["a"] = moved
    tracked.append(mm_features.fully_tracked)
    assert tracked == [False, True, False, True]


def test_versioned_dicts_behave_as_plain_dicts() -> None:
    cache = _two_requests()
    cache.encoder_outputs["a-0"] = torch.ones(1, HIDDEN)
    plain = {req_id: list(features) for req_id, features in cache.mm_features.items()}
    assert isinstance(cache.mm_features, dict)
    assert isinstance(cache.mm_features["a"], list)
    assert cache.mm_features == plain
    assert repr(cache.mm_features) == repr(plain)
    assert repr(cache.mm_features["a"]) == repr(plain["a"])
    for copied in (pickle.loads(pickle.dumps(cache)), copy.deepcopy(cache)):
        assert copied.mm_features == cache.mm_features
        assert type(copied.mm_features) is FeatureListDict
        assert copied.mm_features.fully_tracked  # the copied lists report to the copy
        assert torch.equal(copied.encoder_outputs["a-0"], cache.encoder_outputs["a-0"])
        before = copied.mm_features.version
        copied.mm_features["a"].pop()
        assert copied.mm_features.version != before
        assert len(cache.mm_features["a"]) == 2
    assert pickle.loads(pickle.dumps(cache.mm_features["a"])) == plain["a"]


@pytest.mark.parametrize("edit", sorted(_LIST_EDITS))
def test_gathers_see_every_edit_of_a_registered_list(edit: str) -> None:
    cache = EncoderCache()
    names = ["a", "b"]
    for name in names:
        cache.add_request(name, [_frame(name, k) for k in range(3)])
    for k in (*range(3), 9):
        for name in names:
            cache.encoder_outputs[f"{name}-{k}"] = torch.full((1, HIDDEN), float(k))
    runner = EncoderRunner(model_for(True, HIDDEN), 16, HIDDEN, cache, torch.float32, "cpu")
    for computed in (0, 3, 6):
        _check_gather(runner, cache, names, computed)
        _check_gather(runner, cache, names, computed)  # unchanged: the remembered answer
    features = cache.mm_features["a"]
    _LIST_EDITS[edit](features)
    # Keep them valid. Same-length edits need no forget(): tracked lists stamp rewrites.
    features.sort(key=lambda feature: feature.mm_position.offset)
    for computed in (0, 3, 6, 27):
        _check_gather(runner, cache, names, computed)


@pytest.mark.parametrize("edit", sorted(_DICT_EDITS))
def test_gathers_see_every_edit_of_the_outputs_dict(edit: str) -> None:
    cache = EncoderCache()
    names = ["a", "b"]
    for name in names:
        cache.add_request(name, [_frame(name, 0)])
        cache.encoder_outputs[f"{name}-0"] = torch.full((1, HIDDEN), 1.0)
    outputs = cache.encoder_outputs
    runner = EncoderRunner(model_for(True, HIDDEN), 16, HIDDEN, cache, torch.float32, "cpu")
    _check_gather(runner, cache, names, 0)
    # The same edits on the outputs dict, with tensors for values and the keys gathered.
    replacement = {"a-0": torch.full((1, HIDDEN), 7.0), "b-0": torch.full((1, HIDDEN), 8.0)}
    actions: dict[str, Callable[[], object]] = {
        "setitem new": lambda: outputs.__setitem__("z", torch.zeros(1, HIDDEN)),
        "setitem replace": lambda: outputs.__setitem__("a-0", replacement["a-0"]),
        "delitem": lambda: outputs.__delitem__("a-0"),
        "pop": lambda: outputs.pop("a-0"),
        "popitem": lambda: outputs.popitem(),
        "clear": lambda: outputs.clear(),
        "update": lambda: outputs.update(replacement),
        "setdefault": lambda: outputs.setdefault("z", torch.zeros(1, HIDDEN)),
        "ior": lambda: outputs.__ior__(replacement),
    }
    actions[edit]()
    if all(f"{name}-0" in outputs for name in names):
        _check_gather(runner, cache, names, 0)
    else:
        with pytest.raises(EncoderOutputMissingError):
            runner.gather_mm_embeddings(
                names,
                2,
                np.ones(2, dtype=np.int32),
                np.arange(3, dtype=np.int32),
                np.zeros(2, dtype=np.int32),
                np.zeros(2, dtype=np.int32),
            )


# ---------------------------------------------------------------------- property

_OPS = st.sampled_from(
    ["append_feature", "list.append", "replace_list", "pop", "remove", "add", "edit_and_forget"]
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
    cursors=st.booleans(),
)
def test_random_edits_between_gathers_match_oracle(
    ops: list[tuple[str, int, int]], cursors: bool
) -> None:
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
    if cursors:
        runner.planner.cursor_min_windows = 0
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
        elif op == "edit_and_forget" and present and cache.mm_features[name]:
            last = cache.mm_features[name][-1]
            cache.mm_features[name][-1] = MultiModalFeature(
                last.identifier, "image", PlaceholderRange(last.mm_position.offset, 1)
            )
            cache.encoder_outputs[last.identifier] = torch.full((1, HIDDEN), -1.0)
            runner.planner.table.forget(name)
        _check_gather(runner, cache, names, position)
