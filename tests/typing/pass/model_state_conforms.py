"""Model states that satisfy ModelState, and the precise types of its methods' results."""

from __future__ import annotations

from typing import TypeAlias

import torch
from support.typing_examples import BufferState, TextOnlyState
from typing_extensions import assert_type

from rtmm_protocol import EncoderCache, ModelState
from rtmm_protocol.reference import ReferenceModelState
from rtmm_protocol.testing import ReferenceInputBatch, ToyRealtimeModel, ToyTextModel

Gathered: TypeAlias = tuple[list[torch.Tensor], torch.Tensor]


def reference_state(model: ToyTextModel) -> ReferenceModelState:
    return ReferenceModelState(
        model, EncoderCache(8), hidden_size=8, max_num_tokens=16, dtype=torch.float32, device="cpu"
    )


realtime: ModelState = reference_state(ToyRealtimeModel(hidden_size=8))
text_only_reference: ModelState = reference_state(ToyTextModel(8))
text_only: ModelState = TextOnlyState()
with_buffer: ModelState = BufferState(torch.zeros(16, 8))


def use(state: ModelState) -> None:
    batch = ReferenceInputBatch.from_requests(["a"], [4], [0], [4])
    assert_type(state.dummy_inputs_embeds(4), torch.Tensor | None)
    assert_type(state.gather_mm_embeddings(batch), Gathered)
    assert_type(state.gather_mm_embeddings(batch, 1), Gathered)
    assert_type(state.gather_mm_embeddings(batch, draft_lookahead=1), Gathered)
    assert_type(state.get_mm_embeddings({"a": [0]}, batch, None), torch.Tensor | None)
    assert_type(state.is_realtime, bool)
    assert_type(state.hidden_size, int)
    assert_type(state.dtype, torch.dtype)
    assert_type(state.device, torch.device)
