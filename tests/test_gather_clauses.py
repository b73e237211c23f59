"""Hand-made cases for each gather clause (SPEC G1-G10), small enough to read."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.cache_snapshot import ArraySnapshot, CacheSnapshot
from support.gather_check import (
    GatherResult,
    assert_same_result,
    assert_view_of,
    call_runner,
    model_for,
    scenario_arrays,
)
from support.recording_dict import RecordingDict

from rtmm_protocol import (
    EncoderCache,
    EncoderOutputMissingError,
    MultiModalFeature,
    PlaceholderRange,
)
from rtmm_protocol.reference import EncoderRunner, ReferenceModelState
from rtmm_protocol.testing import ReferenceInputBatch, ToyReplaceModel
from rtmm_protocol.testing.scenario import FeatureSpec, GatherScenario, RequestSpec

HIDDEN = 3


def _runner(cache: EncoderCache, *, realtime: bool) -> EncoderRunner:
    return EncoderRunner(model_for(realtime, HIDDEN), 64, HIDDEN, cache, torch.float32, "cpu")


def _state(cache: EncoderCache, *, realtime: bool, max_num_tokens: int) -> ReferenceModelState:
    model = model_for(realtime, HIDDEN)
    return ReferenceModelState(
        model,
        cache,
        hidden_size=HIDDEN,
        max_num_tokens=max_num_tokens,
        dtype=torch.float32,
        device="cpu",
    )


def _scenario(*requests: RequestSpec, lookahead: int = 0) -> GatherScenario:
    return GatherScenario(requests=requests, hidden_size=HIDDEN, draft_lookahead=lookahead)


def _gather(
    scenario: GatherScenario, *, realtime: bool = False
) -> tuple[GatherResult, EncoderCache]:
    cache = scenario.build_cache()
    result = call_runner(_runner(cache, realtime=realtime), scenario, scenario_arrays(scenario))
    return result, cache


def _mask(result: GatherResult) -> list[bool]:
    return [bool(flag) for flag in result[1].tolist()]


def _rows(result: GatherResult) -> torch.Tensor:
    return torch.cat(result[0]) if result[0] else torch.empty(0, HIDDEN)


def _instrument(cache: EncoderCache) -> RecordingDict[str, torch.Tensor]:
    outputs: RecordingDict[str, torch.Tensor] = RecordingDict(cache.encoder_outputs)
    cache.encoder_outputs = outputs
    return outputs


F, T = False, True


# ---------------------------------------------------------------- G1 window


def test_g1_positions_map_to_flat_slots() -> None:
    # a: window [3, 7) over placeholder [2, 6) -> slots 0..3, rows 1..3 then a text token.
    # b: window [1, 3) over placeholder [0, 3) -> slots 4, 5, rows 1..2.
    scenario = _scenario(
        RequestSpec("a", 20, 3, 4, (FeatureSpec("a0", 2, 4),)),
        RequestSpec("b", 20, 1, 2, (FeatureSpec("b0", 0, 3),)),
    )
    result, cache = _gather(scenario)
    assert _mask(result) == [T, T, T, F, T, T]
    a0, b0 = cache.encoder_outputs["a0"], cache.encoder_outputs["b0"]
    assert torch.equal(_rows(result), torch.cat([a0[1:4], b0[1:3]]))


def test_g1_window_start_uses_num_computed_tokens_plus_lookahead() -> None:
    # computed 1, L 2 -> window [3, 5): placeholder [4, 6) is hit at its first position only.
    scenario = _scenario(RequestSpec("a", 20, 1, 2, (FeatureSpec("a0", 4, 2),)), lookahead=2)
    result, cache = _gather(scenario)
    assert _mask(result) == [F, T]
    assert torch.equal(_rows(result), cache.encoder_outputs["a0"][0:1])


@pytest.mark.parametrize("realtime", [False, True])
def test_g1_zero_scheduled_request_inside_placeholder_contributes_nothing(realtime: bool) -> None:
    # Request a schedules nothing while its window starts inside an uncached placeholder:
    # nothing is needed, nothing raises; b still lands at slots 0..1.
    scenario = _scenario(
        RequestSpec("a", 20, 6, 0, (FeatureSpec("a0", 5, 4, cached=False),)),
        RequestSpec("b", 20, 0, 2, (FeatureSpec("b0", 1, 2),)),
        RequestSpec("c", 20, 0, 0),
    )
    result, cache = _gather(scenario, realtime=realtime)
    assert _mask(result) == [F, T]
    assert len(result[0]) == 1
    assert_view_of(result[0][0], cache.encoder_outputs["b0"], 0, 1)


# ---------------------------------------------------------------- G2 non-realtime decode


def test_g2_non_realtime_decode_is_skipped_and_its_outputs_not_read() -> None:
    # Decode step of a request whose features lie past the prompt (a streaming layout).
    scenario = _scenario(RequestSpec("a", 4, 6, 3, (FeatureSpec("a0", 6, 3),)))
    cache = scenario.build_cache()
    outputs = _instrument(cache)
    result = call_runner(_runner(cache, realtime=False), scenario, scenario_arrays(scenario))
    assert result[0] == []
    assert _mask(result) == [F, F, F]
    assert outputs.reads == []
    assert outputs.writes == []


def test_g2_all_skipped_gives_empty_list_and_all_false_mask() -> None:
    scenario = _scenario(
        RequestSpec("a", 2, 2, 1, (FeatureSpec("a0", 2, 1),)),
        RequestSpec("b", 5, 9, 2, (FeatureSpec("b0", 9, 2, cached=False),)),
    )
    result, _ = _gather(scenario)
    assert result[0] == []
    assert result[1].dtype == torch.bool
    assert _mask(result) == [F, F, F]


def test_g2_skip_uses_the_shifted_window_start() -> None:
    # computed 3, prefill 4: gathers with L=0 (3 < 4) but is skipped with L=1 (4 >= 4).
    features = (FeatureSpec("a0", 3, 4),)
    gathered, _ = _gather(_scenario(RequestSpec("a", 4, 3, 2, features)))
    skipped, _ = _gather(_scenario(RequestSpec("a", 4, 3, 2, features), lookahead=1))
    assert _mask(gathered) == [T, T]
    assert _mask(skipped) == [F, F]
    assert skipped[0] == []


def test_g2_skipped_request_with_missing_output_does_not_raise() -> None:
    scenario = _scenario(RequestSpec("a", 4, 5, 2, (FeatureSpec("a0", 5, 2, cached=False),)))
    result, _ = _gather(scenario)
    assert _mask(result) == [F, F]


def test_g2_only_the_gathering_request_is_read() -> None:
    scenario = _scenario(
        RequestSpec("decode", 3, 5, 2, (FeatureSpec("d0", 5, 2),)),
        RequestSpec("prefill", 8, 0, 4, (FeatureSpec("p0", 1, 2),)),
    )
    cache = scenario.build_cache()
    outputs = _instrument(cache)
    result = call_runner(_runner(cache, realtime=False), scenario, scenario_arrays(scenario))
    assert _mask(result) == [F, F, F, T, T, F]
    assert "d0" not in outputs.reads
    assert "p0" in outputs.reads


def test_g2_last_prefill_chunk_gathers_its_whole_window() -> None:
    # The window starts in the prompt (4 < 6), so it gathers past prefill_len as well.
    scenario = _scenario(RequestSpec("a", 6, 4, 4, (FeatureSpec("a0", 5, 3),)))
    result, cache = _gather(scenario)
    assert _mask(result) == [F, T, T, T]
    assert_view_of(result[0][0], cache.encoder_outputs["a0"], 0, 3)


# ---------------------------------------------------------------- G3 realtime


def test_g3_realtime_decode_gathers_whatever_prefill_len_says() -> None:
    scenario = _scenario(
        RequestSpec("a", 4, 6, 3, (FeatureSpec("a0", 6, 3),)),
        RequestSpec("b", 0, 2, 2, (FeatureSpec("b0", 3, 2),)),
    )
    result, cache = _gather(scenario, realtime=True)
    assert _mask(result) == [T, T, T, F, T]
    a0, b0 = cache.encoder_outputs["a0"], cache.encoder_outputs["b0"]
    assert torch.equal(_rows(result), torch.cat([a0, b0[0:1]]))


def test_g3_instance_attribute_does_not_make_a_model_realtime() -> None:
    scenario = _scenario(RequestSpec("a", 4, 6, 3, (FeatureSpec("a0", 6, 3),)))
    cache = scenario.build_cache()
    marked = ToyReplaceModel(HIDDEN)
    vars(marked)["supports_realtime"] = True  # an instance attribute, not the class marker
    runner = EncoderRunner(marked, 64, HIDDEN, cache, torch.float32, "cpu")
    result = call_runner(runner, scenario, scenario_arrays(scenario))
    assert _mask(result) == [F, F, F]


# ---------------------------------------------------------------- G4 mask


def test_g4_mask_is_a_cpu_bool_tensor_over_the_scheduled_tokens() -> None:
    scenario = _scenario(RequestSpec("a", 20, 0, 5, (FeatureSpec("a0", 1, 3, (T, F, T)),)))
    result, _ = _gather(scenario)
    mask = result[1]
    assert isinstance(mask, torch.Tensor)
    assert (mask.dtype, mask.device.type, tuple(mask.shape)) == (torch.bool, "cpu", (5,))
    assert _mask(result) == [F, T, F, T, F]


def test_g4_mask_length_is_num_tokens_never_the_padded_count() -> None:
    batch = ReferenceInputBatch.from_requests(["a"], [20], [0], [4], num_tokens_after_padding=8)
    cache = EncoderCache()
    cache.add_request("a", [MultiModalFeature("a0", "image", PlaceholderRange(1, 2))])
    cache.encoder_outputs["a0"] = torch.ones(2, HIDDEN)
    state = _state(cache, realtime=False, max_num_tokens=8)
    _, mask = state.gather_mm_embeddings(batch)
    assert tuple(mask.shape) == (4,)
    assert mask.tolist() == [F, T, T, F]


def test_g4_empty_batch() -> None:
    result, _ = _gather(_scenario())
    assert result[0] == []
    assert tuple(result[1].shape) == (0,)
    assert result[1].dtype == torch.bool


# ---------------------------------------------------------------- G5 rows


def test_g5_rows_follow_the_is_embed_prefix_count() -> None:
    # is_embed = T F T T F T: positions 1..4 are q=1 (F), q=2 (row 1), q=3 (row 2), q=4 (F).
    scenario = _scenario(RequestSpec("a", 20, 1, 4, (FeatureSpec("a0", 0, 6, (T, F, T, T, F, T)),)))
    result, cache = _gather(scenario)
    assert _mask(result) == [F, T, T, F]
    assert torch.equal(_rows(result), cache.encoder_outputs["a0"][1:3])


def test_g5_rows_count_only_the_embed_positions_before_the_window() -> None:
    # Same mask; window over q=3..5: two embed positions precede it, so rows 2 and 3.
    scenario = _scenario(RequestSpec("a", 20, 3, 3, (FeatureSpec("a0", 0, 6, (T, F, T, T, F, T)),)))
    result, cache = _gather(scenario)
    assert _mask(result) == [T, F, T]
    assert_view_of(result[0][0], cache.encoder_outputs["a0"], 2, 4)


def test_g5_rows_without_a_mask_are_placeholder_indices() -> None:
    scenario = _scenario(RequestSpec("a", 20, 7, 2, (FeatureSpec("a0", 2, 8),)))
    result, cache = _gather(scenario)
    assert torch.equal(_rows(result), cache.encoder_outputs["a0"][5:7])


# ---------------------------------------------------------------- G6 pieces


def test_g6_one_view_per_request_feature_pair_in_order_with_modality() -> None:
    scenario = _scenario(
        RequestSpec(
            "a",
            20,
            0,
            8,
            (
                FeatureSpec("a0", 1, 2, modality="image"),
                FeatureSpec("a1", 4, 2, (F, F)),  # only non-embed positions: no piece
                FeatureSpec("a2", 6, 4, modality="audio"),
            ),
        ),
        RequestSpec("b", 20, 3, 2, (FeatureSpec("b0", 0, 5, modality="video"),)),
    )
    result, cache = _gather(scenario)
    pieces = result[0]
    assert len(pieces) == 3
    assert_view_of(pieces[0], cache.encoder_outputs["a0"], 0, 2)
    assert_view_of(pieces[1], cache.encoder_outputs["a2"], 0, 2)
    assert_view_of(pieces[2], cache.encoder_outputs["b0"], 3, 5)
    assert [getattr(p, "modality", None) for p in pieces] == ["image", "audio", "video"]


def test_g6_a_feature_split_over_two_requests_windows_gives_two_pieces() -> None:
    # Two requests with identical layouts read different chunks of their own outputs.
    scenario = _scenario(
        RequestSpec("a", 20, 0, 3, (FeatureSpec("a0", 2, 4),)),
        RequestSpec("b", 20, 3, 3, (FeatureSpec("b0", 2, 4),)),
    )
    result, cache = _gather(scenario)
    assert_view_of(result[0][0], cache.encoder_outputs["a0"], 0, 1)
    assert_view_of(result[0][1], cache.encoder_outputs["b0"], 1, 4)


# ---------------------------------------------------------------- G7 misses


def test_g7_window_over_only_non_embed_positions_needs_nothing() -> None:
    # Positions 3..4 are q=1..2 of a placeholder whose mask is False there.
    feature = FeatureSpec("a0", 2, 4, (T, F, F, T), cached=False)
    result, _ = _gather(_scenario(RequestSpec("a", 20, 3, 2, (feature,))))
    assert _mask(result) == [F, F]
    assert result[0] == []


def test_g7_interior_miss_raises_naming_the_identifier() -> None:
    scenario = _scenario(RequestSpec("a", 20, 0, 4, (FeatureSpec("img-7", 2, 3, cached=False),)))
    with pytest.raises(EncoderOutputMissingError, match="img-7") as info:
        _gather(scenario)
    assert isinstance(info.value, RuntimeError)


def test_g7_miss_reached_only_by_lookahead_falls_back_to_tokens() -> None:
    # Scheduled end 2 + 3 = 5 = the feature's start; L=1 makes the window [3, 6) reach it.
    uncached = _scenario(
        RequestSpec("a", 20, 2, 3, (FeatureSpec("a0", 5, 4, cached=False),)), lookahead=1
    )
    result, _ = _gather(uncached)
    assert _mask(result) == [F, F, F]
    assert result[0] == []
    cached = _scenario(RequestSpec("a", 20, 2, 3, (FeatureSpec("a0", 5, 4),)), lookahead=1)
    result, cache = _gather(cached)
    assert _mask(result) == [F, F, T]
    assert_view_of(result[0][0], cache.encoder_outputs["a0"], 0, 1)


def test_g7_lookahead_miss_of_a_feature_starting_inside_the_scheduled_tokens_raises() -> None:
    # The feature starts at 4 < scheduled end 5; its first embed position (q=1, position 5)
    # is reached only by the look-ahead, yet the rule looks at the feature's start.
    feature = FeatureSpec("a0", 4, 3, (F, T, T), cached=False)
    with pytest.raises(EncoderOutputMissingError, match="a0"):
        _gather(_scenario(RequestSpec("a", 20, 2, 3, (feature,)), lookahead=1))


def test_g7_miss_raises_without_partial_result_or_side_effects() -> None:
    scenario = _scenario(
        RequestSpec("a", 20, 0, 3, (FeatureSpec("a0", 0, 3),)),
        RequestSpec("b", 20, 0, 3, (FeatureSpec("b0", 1, 1, cached=False),)),
    )
    cache = scenario.build_cache()
    before = CacheSnapshot(cache)
    arrays = scenario_arrays(scenario)
    with pytest.raises(EncoderOutputMissingError, match="b0"):
        call_runner(_runner(cache, realtime=False), scenario, arrays)
    before.assert_unchanged(cache)


# ---------------------------------------------------------------- G8 no side effects


@pytest.mark.parametrize("realtime", [False, True])
def test_g8_gathering_changes_neither_outputs_nor_features_nor_dicts(realtime: bool) -> None:
    scenario = _scenario(
        RequestSpec("a", 5, 1, 6, (FeatureSpec("a0", 0, 3, (T, F, T)), FeatureSpec("a1", 4, 4))),
        RequestSpec("b", 2, 4, 2, (FeatureSpec("b0", 4, 2),)),
        lookahead=1,
    )
    cache = scenario.build_cache()
    outputs = _instrument(cache)
    before = CacheSnapshot(cache)
    runner = _runner(cache, realtime=realtime)
    for _ in range(2):  # a second call sees whatever the first one memoized
        call_runner(runner, scenario, scenario_arrays(scenario))
    before.assert_unchanged(cache)
    assert outputs.writes == []


# ---------------------------------------------------------------- G9 inputs


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("lookahead", [0, 2])
def test_g9_input_arrays_are_not_mutated(dtype: type[np.integer], lookahead: int) -> None:
    scenario = _scenario(
        RequestSpec("a", 20, 1, 4, (FeatureSpec("a0", 2, 3),)),
        RequestSpec("b", 3, 3, 1),
        lookahead=lookahead,
    )
    arrays = scenario_arrays(scenario, dtype)
    before = ArraySnapshot(arrays)
    call_runner(_runner(scenario.build_cache(), realtime=True), scenario, arrays)
    before.assert_unchanged(arrays)


def test_g9_read_only_arrays_are_accepted() -> None:
    scenario = _scenario(RequestSpec("a", 20, 1, 4, (FeatureSpec("a0", 2, 3),)), lookahead=1)
    arrays = scenario_arrays(scenario)
    for array in arrays.values():
        array.setflags(write=False)
    result = call_runner(_runner(scenario.build_cache(), realtime=False), scenario, arrays)
    assert _mask(result) == [T, T, T, F]


# ---------------------------------------------------------------- G10 two levels


@pytest.mark.parametrize("lookahead", [0, 1, 2])
@pytest.mark.parametrize("realtime", [False, True])
def test_g10_state_level_equals_runner_level(lookahead: int, realtime: bool) -> None:
    scenario = _scenario(
        RequestSpec("a", 6, 0, 6, (FeatureSpec("a0", 1, 3), FeatureSpec("a1", 5, 3, (T, F, T)))),
        RequestSpec("b", 3, 3, 1, (FeatureSpec("b0", 4, 2),)),
        RequestSpec("c", 9, 2, 3, (FeatureSpec("c0", 3, 4),)),
        lookahead=lookahead,
    )
    cache = scenario.build_cache()
    state = _state(cache, realtime=realtime, max_num_tokens=16)
    batch = ReferenceInputBatch.from_requests(
        scenario.req_ids, [6, 3, 9], [0, 3, 2], [6, 1, 3], num_tokens_after_padding=12
    )
    runner = _runner(cache, realtime=realtime)
    want = runner.gather_mm_embeddings(
        batch.req_ids,
        batch.num_tokens,
        batch.num_scheduled_tokens,
        batch.query_start_loc_np,
        batch.prefill_len_np,
        batch.num_computed_tokens_np,
        lookahead,
    )
    assert_same_result(state.gather_mm_embeddings(batch, lookahead), want)
    assert_same_result(state.gather_mm_embeddings(batch, draft_lookahead=lookahead), want)


def test_runner_accepts_every_argument_by_keyword() -> None:
    scenario = _scenario(RequestSpec("a", 20, 1, 4, (FeatureSpec("a0", 2, 3),)), lookahead=1)
    cache = scenario.build_cache()
    arrays = scenario_arrays(scenario)
    runner = _runner(cache, realtime=False)
    by_position = call_runner(runner, scenario, arrays)
    by_keyword = runner.gather_mm_embeddings(
        req_ids=scenario.req_ids,
        total_num_scheduled_tokens=scenario.num_tokens,
        num_scheduled_tokens=arrays["num_scheduled_tokens"],
        query_start_loc=arrays["query_start_loc"],
        prefill_lens=arrays["prefill_lens"],
        num_computed_tokens=arrays["num_computed_tokens"],
        draft_lookahead=1,
    )
    assert_same_result(by_keyword, by_position)
