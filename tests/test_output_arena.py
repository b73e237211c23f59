"""The encoder-output arena: owned views, mirrors, rows that come back, a clear error when full."""

from __future__ import annotations

import gc

import pytest
import torch

from rtmm_protocol.reference import ArenaFullError, EncoderOutputArena

HIDDEN = 3


def _arena(rows: int) -> EncoderOutputArena:
    return EncoderOutputArena(rows, HIDDEN, dtype=torch.float32, device=torch.device("cpu"))


def _tensor(rows: int, value: float) -> torch.Tensor:
    return torch.full((rows, HIDDEN), value)


def test_a_stored_output_is_a_view_of_the_arena_and_gathers_by_index() -> None:
    arena = _arena(8)
    view = arena.store("x", _tensor(3, 2.0))
    assert view.untyped_storage().data_ptr() == arena.storage.untyped_storage().data_ptr()
    starts, rows = arena.locate(["x"], [view])
    assert rows.tolist() == [3]
    got = arena.gather(torch.tensor([int(starts[0]) + 2, int(starts[0])]))
    assert torch.equal(got, torch.full((2, HIDDEN), 2.0))
    assert arena.rows_free == 5


def test_rows_come_back_when_an_output_is_dropped() -> None:
    arena = _arena(6)
    kept = arena.store("a", _tensor(2, 1.0))
    dropped = arena.store("b", _tensor(2, 2.0))
    mirrored = _tensor(2, 3.0)
    arena.locate(["c"], [mirrored])  # a mirror of a tensor cached elsewhere
    assert arena.rows_free == 0
    del dropped, mirrored
    gc.collect()
    assert arena.rows_free == 4
    # The freed extents merged: one output of four rows fits again.
    bigger = _tensor(4, 4.0)
    starts, _ = arena.locate(["d"], [bigger])
    assert torch.equal(arena.storage[int(starts[0]) : int(starts[0]) + 4], bigger)
    assert torch.equal(kept, _tensor(2, 1.0))


def test_a_replaced_tensor_is_copied_anew() -> None:
    arena = _arena(8)
    first = _tensor(2, 1.0)
    arena.locate(["x"], [first])
    second = _tensor(2, 5.0)  # the same identifier, a new output
    starts, _ = arena.locate(["x"], [second])
    assert torch.equal(arena.storage[int(starts[0]) : int(starts[0]) + 2], second)


def test_mirrors_make_room_but_not_those_in_use() -> None:
    arena = _arena(4)
    old = _tensor(3, 1.0)
    arena.locate(["old"], [old])
    new = _tensor(3, 2.0)
    starts, _ = arena.locate(["new"], [new])  # the old mirror is evicted for it
    assert torch.equal(arena.storage[int(starts[0]) : int(starts[0]) + 3], new)
    with pytest.raises(ArenaFullError, match=r"'b'.* needs 3 contiguous rows and 1 rows are free"):
        arena.locate(["a", "b"], [_tensor(3, 3.0), _tensor(3, 4.0)])


def test_owned_outputs_are_never_evicted() -> None:
    arena = _arena(4)
    view = arena.store("a", _tensor(3, 1.0))
    with pytest.raises(ArenaFullError, match=r"'b'.* needs 2 contiguous rows and 1 rows are free"):
        arena.store("b", _tensor(2, 2.0))
    assert torch.equal(view, _tensor(3, 1.0))


def test_bad_outputs_and_sizes_are_rejected_by_name() -> None:
    arena = _arena(4)
    with pytest.raises(ValueError, match=r"encoder output of 'x' has shape \(2, 5\)"):
        arena.locate(["x"], [torch.zeros(2, 5)])
    with pytest.raises(ValueError, match=r"must be a torch\.Tensor"):
        arena.locate(["y"], ["not a tensor"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="arena_rows must be a positive int"):
        _arena(0)
