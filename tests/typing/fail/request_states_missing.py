"""``get_mm_embeddings`` must take the engine's ``req_states``, and callers must pass it."""

from __future__ import annotations

from support.typing_examples import NoRequestStatesState

from rtmm_protocol import ModelState
from rtmm_protocol.testing import ReferenceInputBatch

state: ModelState = NoRequestStatesState()  # E: assignment  # P: reportAssignmentType


def step(target: ModelState) -> None:
    batch = ReferenceInputBatch.from_requests(["a"], [4], [0], [4])
    target.get_mm_embeddings({"a": [0]}, batch)  # E: call-arg  # P: reportCallIssue
