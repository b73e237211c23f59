"""PlaceholderRange: construction checks, embed counts and the row mapping of SPEC G5."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rtmm_protocol import PlaceholderRange

_MASK = torch.tensor([True, False, True, True, False, True])


def _mask(*flags: bool) -> torch.Tensor:
    return torch.tensor(flags, dtype=torch.bool)


def test_num_embeds_without_a_mask_is_the_length() -> None:
    assert PlaceholderRange(3, 5).get_num_embeds() == 5
    assert PlaceholderRange(0, 0).get_num_embeds() == 0


def test_num_embeds_with_a_mask_counts_true_entries() -> None:
    assert PlaceholderRange(0, 6, _MASK).get_num_embeds() == 4
    assert PlaceholderRange(2, 3, _mask(False, False, False)).get_num_embeds() == 0
    assert PlaceholderRange(2, 3, _mask(True, True, True)).get_num_embeds() == 3


def test_end_is_one_past_the_last_position() -> None:
    assert PlaceholderRange(4, 3).end == 7


@pytest.mark.parametrize(
    ("start", "end", "rows"),
    [(0, 6, (0, 4)), (1, 2, (1, 1)), (2, 4, (1, 3)), (4, 5, (3, 3)), (5, 6, (3, 4))],
)
def test_embeds_indices_with_a_mask(start: int, end: int, rows: tuple[int, int]) -> None:
    # mask T F T T F T: rows are the embed positions counted before and inside the range
    assert PlaceholderRange(10, 6, _MASK).get_embeds_indices_in_range(start, end) == rows


def test_embeds_indices_without_a_mask_are_the_positions() -> None:
    placeholder = PlaceholderRange(10, 6)
    assert placeholder.get_embeds_indices_in_range(0, 6) == (0, 6)
    assert placeholder.get_embeds_indices_in_range(2, 5) == (2, 5)
    assert placeholder.get_embeds_indices_in_range(3, 3) == (3, 3)


@settings(max_examples=200)
@given(
    flags=st.lists(st.booleans(), min_size=0, max_size=12),
    data=st.data(),
)
def test_embeds_indices_count_the_embed_positions_before_and_inside(
    flags: list[bool], data: st.DataObject
) -> None:
    length = len(flags)
    start = data.draw(st.integers(0, length))
    end = data.draw(st.integers(start, length))
    placeholder = PlaceholderRange(5, length, torch.tensor(flags, dtype=torch.bool))
    first, last = placeholder.get_embeds_indices_in_range(start, end)
    assert first == sum(flags[:start])
    assert last - first == sum(flags[start:end])
    assert placeholder.get_num_embeds() == sum(flags)


@pytest.mark.parametrize(("start", "end"), [(-1, 2), (2, 7), (4, 3)])
def test_embeds_indices_outside_the_range_raise(start: int, end: int) -> None:
    with pytest.raises(ValueError, match=rf"\[{start}, {end}\) is outside \[0, 6\]"):
        PlaceholderRange(1, 6, _MASK).get_embeds_indices_in_range(start, end)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"offset": -1, "length": 2}, r"offset must be >= 0, got -1"),
        ({"offset": 0, "length": -3}, r"length must be >= 0, got -3"),
        ({"offset": 1.0, "length": 2}, r"offset must be an int, got 1.0"),
        ({"offset": 0, "length": True}, r"length must be an int, got True"),
        (
            {"offset": 0, "length": 2, "is_embed": [True, False]},
            r"is_embed must be a torch.Tensor or None, got list",
        ),
        (
            {"offset": 0, "length": 2, "is_embed": torch.ones(2, 1, dtype=torch.bool)},
            r"shape \(2,\).*got \(2, 1\)",
        ),
    ],
)
def test_malformed_ranges_raise_value_error_naming_field_and_value(
    kwargs: dict[str, object], pattern: str
) -> None:
    with pytest.raises(ValueError, match=pattern):
        PlaceholderRange(**kwargs)  # type: ignore[arg-type]


def test_numpy_integers_are_accepted_as_python_ints() -> None:
    placeholder = PlaceholderRange(np.int64(3), np.int32(2))
    assert type(placeholder.offset) is int
    assert type(placeholder.length) is int
    assert placeholder.get_embeds_indices_in_range(0, 2) == (0, 2)


def test_range_is_frozen() -> None:
    placeholder = PlaceholderRange(0, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        placeholder.offset = 1  # type: ignore[misc]


def test_equality_compares_positions_and_mask_values() -> None:
    assert PlaceholderRange(1, 6, _MASK) == PlaceholderRange(1, 6, _MASK.clone())
    assert hash(PlaceholderRange(1, 6, _MASK)) == hash(PlaceholderRange(1, 6, _MASK.clone()))
    assert PlaceholderRange(1, 6, _MASK) != PlaceholderRange(1, 6, ~_MASK)
    assert PlaceholderRange(1, 3) != PlaceholderRange(1, 3, _mask(True, True, True))
    assert PlaceholderRange(1, 3) != PlaceholderRange(2, 3)
    assert PlaceholderRange(1, 3) != (1, 3)


def test_memoized_prefix_is_read_only_and_leaves_the_mask_alone() -> None:
    mask = _MASK.clone()
    placeholder = PlaceholderRange(0, 6, mask)
    prefix = placeholder.embed_prefix()
    assert prefix.tolist() == [0, 1, 1, 2, 3, 3, 4]
    assert placeholder.embed_prefix() is prefix
    with pytest.raises(ValueError, match="read-only"):
        prefix[0] = 5
    assert torch.equal(mask, _MASK)
    assert placeholder.is_embed is mask
