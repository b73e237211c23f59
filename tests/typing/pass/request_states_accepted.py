"""``req_states`` is required and typed ``Any``: engine-style declarations of it conform."""

from __future__ import annotations

import torch
from support.typing_examples import (
    EngineRequestStates,
    RequiredRequestStatesState,
    TypedRequestStatesState,
)
from typing_extensions import assert_type

from rtmm_protocol import ModelState
from rtmm_protocol.testing import ReferenceInputBatch

without_default: ModelState = RequiredRequestStatesState()
own_class: ModelState = TypedRequestStatesState()


def step(state: ModelState, engine_states: EngineRequestStates) -> None:
    batch = ReferenceInputBatch.from_requests(["a"], [4], [0], [4])
    assert_type(state.get_mm_embeddings({"a": [0]}, batch, engine_states), torch.Tensor | None)
    assert_type(state.get_mm_embeddings({"a": [0]}, batch, req_states=None), torch.Tensor | None)
