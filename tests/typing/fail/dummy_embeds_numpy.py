"""dummy_inputs_embeds returns torch.Tensor | None, not a numpy array."""

from __future__ import annotations

from support.typing_examples import NumpyDummyState

from rtmm_protocol import ModelState

state: ModelState = NumpyDummyState()  # E: assignment  # P: reportAssignmentType
