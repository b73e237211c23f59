"""Validation of the batch's feature lists (SPEC E2) when each list is checked once.

A validating runner checks every list of the batch, whether the step reads it or not.
It checks a list when it first mirrors it and when it grows, and on later steps only
the items that are no longer the objects it mirrored: these tests replace items in
place, in parts of a list that no window of the step reads.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from rtmm_protocol import EncoderCache, MultiModalFeature, PlaceholderRange
from rtmm_protocol.reference import EncoderRunner
from rtmm_protocol.testing import ToyRealtimeModel

HIDDEN = 4


def _runner(lengths: list[int]) -> tuple[EncoderRunner, EncoderCache]:
    """A validating runner over requests ``r0, r1, ...`` of ``lengths[k]`` 2-position
    features each, every output cached."""
    cache = EncoderCache(HIDDEN)
    for r, count in enumerate(lengths):
        features = [
            MultiModalFeature(f"r{r}-{k}", "audio", PlaceholderRange(2 * k, 2))
            for k in range(count)
        ]
        cache.add_request(f"r{r}", features)
        for feature in features:
            cache.encoder_outputs[feature.identifier] = torch.full((2, HIDDEN), float(r))
    model = ToyRealtimeModel(HIDDEN)
    return EncoderRunner(model, 64, HIDDEN, cache, torch.float32, "cpu", validate=True), cache


def _decode(runner: EncoderRunner, count: int, position: int) -> None:
    """One decode step of ``count`` requests at ``position``, its rows taken."""
    ones = np.ones(count, dtype=np.int64)
    starts = np.arange(count + 1, dtype=np.int64)
    req_ids = [f"r{r}" for r in range(count)]
    plan = runner.plan_mm_gather(
        req_ids, count, ones, starts, np.zeros(count, np.int64), np.full(count, position)
    )
    plan.rows()


def test_an_item_replaced_in_place_by_an_overlapping_one_is_refused_where_no_window_reads() -> None:
    runner, cache = _runner([6, 6])
    _decode(runner, 2, 0)
    features = cache.mm_features["r1"]
    features[4] = MultiModalFeature("bad", "audio", PlaceholderRange(7, 2))  # overlaps r1-3
    with pytest.raises(ValueError, match="'bad'"):
        _decode(runner, 2, 0)  # the windows read feature 0 only


def test_an_item_replaced_in_place_by_a_non_feature_is_refused() -> None:
    runner, cache = _runner([3])
    _decode(runner, 1, 1)
    cache.mm_features["r0"][2] = "not a feature"  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="must be MultiModalFeature"):
        _decode(runner, 1, 1)


def test_a_data_update_passes_step_after_step() -> None:
    runner, cache = _runner([4, 4])
    _decode(runner, 2, 0)
    features = cache.mm_features["r0"]
    features[3] = dataclasses.replace(features[3], data={"x": torch.zeros(2, 2)})  # SPEC C1
    for position in range(4):
        _decode(runner, 2, position)
    features[3] = dataclasses.replace(features[3], data={"x": torch.ones(3, 3)})
    _decode(runner, 2, 0)  # fields that cannot be compared: the list is checked again
    features[2] = MultiModalFeature("r0-2", "audio", PlaceholderRange(3, 3))  # overlaps
    with pytest.raises(ValueError, match="'r0-2'"):
        _decode(runner, 2, 0)


def test_a_grown_list_has_its_new_items_checked() -> None:
    runner, cache = _runner([2])
    _decode(runner, 1, 0)
    cache.mm_features["r0"].append(MultiModalFeature("late", "audio", PlaceholderRange(1, 1)))
    with pytest.raises(ValueError, match="'late'"):
        _decode(runner, 1, 0)
