"""The encoder-output arena: copies that stay current, rows that come back, a clear error when full."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from rtmm_protocol.reference import ArenaFullError, EncoderOutputArena

HIDDEN = 3


def _arena(rows: int) -> EncoderOutputArena:
    return EncoderOutputArena(rows, HIDDEN, dtype=torch.float32, device=torch.device("cpu"))


def _tensor(rows: int, value: float) -> torch.Tensor:
    return torch.full((rows, HIDDEN), value)


def _starts(
    arena: EncoderOutputArena, identifiers: list[str], outputs: list[torch.Tensor]
) -> torch.Tensor:
    """The first row of each output's copy (``locate`` also gives the copies' rows)."""
    starts, rows = arena.locate(identifiers, outputs)
    assert rows.tolist() == [int(output.shape[0]) for output in outputs]
    return torch.from_numpy(starts)


def _copy_of(arena: EncoderOutputArena, identifier: str, output: torch.Tensor) -> torch.Tensor:
    (start,) = _starts(arena, [identifier], [output]).tolist()
    return arena.storage[start : start + output.shape[0]]


def test_an_output_is_copied_once_and_found_again() -> None:
    arena = _arena(8)
    output = _tensor(3, 2.0)
    first = _starts(arena, ["x"], [output])
    assert torch.equal(_copy_of(arena, "x", output), output)
    arena.storage.zero_()  # were it copied again, the values would come back
    assert _starts(arena, ["x"], [output]).tolist() == first.tolist()
    assert torch.equal(_copy_of(arena, "x", output), torch.zeros(3, HIDDEN))
    assert arena.rows_free == 5


def test_an_output_written_in_place_is_copied_anew() -> None:
    arena = _arena(8)
    output = _tensor(2, 1.0)
    _starts(arena, ["x"], [output])
    output += 6  # torch counts the write in the tensor's version
    assert torch.equal(_copy_of(arena, "x", output), _tensor(2, 7.0))
    output[1:].fill_(-1.0)  # a write through a view counts too
    assert torch.equal(_copy_of(arena, "x", output)[1], torch.full((HIDDEN,), -1.0))


def test_a_replaced_tensor_is_copied_anew() -> None:
    arena = _arena(8)
    _starts(arena, ["x"], [_tensor(2, 1.0)])
    second = _tensor(2, 5.0)  # the same identifier, a new output
    assert torch.equal(_copy_of(arena, "x", second), second)
    assert arena.rows_free == 6  # the first copy's rows came back


def test_an_output_that_requires_grad_is_copied_as_plain_values() -> None:
    arena = _arena(4)
    output = _tensor(2, 3.0).requires_grad_()
    copy = _copy_of(arena, "x", output)
    assert torch.equal(copy, output.detach())
    assert not arena.storage.requires_grad
    assert arena.storage.grad_fn is None
    index = torch.tensor([0, 1])
    torch.index_select(arena.storage, 0, index, out=torch.empty(2, HIDDEN))  # still fine


def test_rows_of_dropped_outputs_come_back_when_room_is_needed() -> None:
    arena = _arena(6)
    kept, dropped = _tensor(2, 1.0), _tensor(2, 2.0)
    _starts(arena, ["a", "b"], [kept, dropped])
    assert arena.rows_free == 2
    del dropped
    gc.collect()
    assert arena.rows_free == 4  # a copy of a freed tensor holds no live rows
    bigger = _tensor(4, 4.0)
    assert torch.equal(_copy_of(arena, "d", bigger), bigger)  # made room for it


def test_room_is_made_from_copies_the_call_does_not_need() -> None:
    arena = _arena(4)
    old = _tensor(3, 1.0)
    _starts(arena, ["old"], [old])
    new = _tensor(3, 2.0)
    assert torch.equal(_copy_of(arena, "new", new), new)  # the old copy gave way
    with pytest.raises(ArenaFullError, match=r"'b'.* needs 3 rows and 1 rows are free"):
        _starts(arena, ["a", "b"], [_tensor(3, 3.0), _tensor(3, 4.0)])
    assert torch.equal(_copy_of(arena, "c", _tensor(2, 5.0)), _tensor(2, 5.0))  # still usable


def test_sizes_are_checked_by_name() -> None:
    with pytest.raises(ValueError, match="arena_rows must be a positive int"):
        _arena(0)


def _at_slots(
    arena: EncoderOutputArena, outputs: list[torch.Tensor], slots: list[int]
) -> torch.Tensor:
    """The rows of each output's copy, located through ``slots`` (as the planner does)."""
    names = [f"o{k}" for k in range(len(outputs))]
    starts, rows = arena.locate(names, outputs, slots=np.array(slots, dtype=np.int64))
    assert rows.tolist() == [int(output.shape[0]) for output in outputs]
    return torch.cat([arena.storage[a : a + n] for a, n in zip(starts, rows, strict=True)])


def test_slots_answer_again_while_tensors_and_versions_stay() -> None:
    arena = _arena(8)
    a, b = _tensor(2, 1.0), _tensor(2, 2.0)
    assert torch.equal(_at_slots(arena, [a, b], [5, 3000]), torch.cat([a, b]))
    arena.storage.zero_()  # answered from the slots: no copy is made again
    assert torch.equal(_at_slots(arena, [a, b], [5, 3000]), torch.zeros(4, HIDDEN))
    b += 1  # C2: a write in place is seen through the slot
    assert torch.equal(_at_slots(arena, [a, b], [5, 3000])[2:], _tensor(2, 3.0))
    c = _tensor(2, 7.0)  # another tensor under a remembered slot
    assert torch.equal(_at_slots(arena, [c, b], [5, 3000])[:2], c)


def test_a_slot_whose_tensor_died_is_not_trusted_for_a_tensor_with_its_id() -> None:
    arena = _arena(16)
    gone = _tensor(2, 1.0)
    _at_slots(arena, [gone], [0])
    key = id(gone)
    del gone
    gc.collect()
    # Whatever tensor is found there next (its id may be the dead one's), it is copied.
    for value in range(1, 6):
        fresh = _tensor(2, 10.0 + value)
        assert torch.equal(_at_slots(arena, [fresh], [0]), fresh)
        if id(fresh) == key:
            break
        del fresh
        gc.collect()


def test_slots_are_forgotten_when_copies_move_to_make_room() -> None:
    arena = _arena(6)
    dropped, kept = _tensor(2, 2.0), _tensor(2, 1.0)
    _at_slots(arena, [dropped, kept], [0, 1])  # kept's copy at rows 2 and 3
    del dropped
    gc.collect()
    big = _tensor(4, 4.0)  # room is made: kept's copy moves to rows 0 and 1, big's follows
    assert torch.equal(_at_slots(arena, [big], [2]), big)
    assert torch.equal(_at_slots(arena, [kept], [1]), kept)


def test_slots_are_forgotten_when_a_call_moves_copies_then_finds_no_room() -> None:
    arena = _arena(6)
    dropped, kept = _tensor(2, 2.0), _tensor(2, 1.0)
    _at_slots(arena, [dropped, kept], [0, 1])  # kept's copy at rows 2 and 3
    del dropped
    gc.collect()
    filler = _tensor(2, 9.0)
    _at_slots(arena, [filler], [3])  # rows 4 and 5: the arena is full
    with pytest.raises(ArenaFullError):  # room is made (kept moves to rows 0 and 1)...
        _at_slots(arena, [kept, _tensor(3, 3.0), _tensor(3, 4.0)], [1, 2, 4])  # ...too little
    assert torch.equal(_at_slots(arena, [kept], [1]), kept)  # found where it is now
