"""Model states that satisfy ModelState, and the precise types of its methods' results."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from typing_extensions import assert_type

from rtmm_protocol import EncoderCache, InputBatch, ModelState
from rtmm_protocol.reference import ReferenceInputBatch, ReferenceModelState, ToyTextModel


@dataclass
class TextOnlyState:
    """A state whose attributes are dataclass fields; it has no inputs_embeds path."""

    hidden_size: int
    max_num_tokens: int
    dtype: torch.dtype = torch.float32
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    is_realtime: bool = False
    supports_mm_inputs: bool = False

    def dummy_inputs_embeds(self, num_tokens: int) -> None:
        return None

    def gather_mm_embeddings(
        self, input_batch: InputBatch, draft_lookahead: int = 0
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return [], torch.zeros(input_batch.num_tokens, dtype=torch.bool)

    def get_mm_embeddings(
        self, scheduled_encoder_inputs: Mapping[str, Sequence[int]], input_batch: InputBatch
    ) -> None:
        return None


class BufferState:
    """A state with a persistent buffer whose attributes are read-only properties."""

    def __init__(self, buffer: torch.Tensor) -> None:
        self._buffer = buffer

    @property
    def is_realtime(self) -> bool:
        return False

    @property
    def supports_mm_inputs(self) -> bool:
        return True

    @property
    def hidden_size(self) -> int:
        return int(self._buffer.shape[1])

    @property
    def max_num_tokens(self) -> int:
        return int(self._buffer.shape[0])

    @property
    def dtype(self) -> torch.dtype:
        return self._buffer.dtype

    @property
    def device(self) -> torch.device:
        return self._buffer.device

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor:
        return self._buffer[:num_tokens]

    def gather_mm_embeddings(
        self, input_batch: InputBatch, draft_lookahead: int = 0
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return [], torch.zeros(input_batch.num_tokens, dtype=torch.bool)

    def get_mm_embeddings(
        self, scheduled_encoder_inputs: Mapping[str, Sequence[int]], input_batch: InputBatch
    ) -> torch.Tensor:
        return self._buffer[: input_batch.num_tokens_after_padding]


def reference_state() -> ReferenceModelState:
    return ReferenceModelState(
        ToyTextModel(8),
        EncoderCache(8),
        hidden_size=8,
        max_num_tokens=16,
        dtype=torch.float32,
        device="cpu",
    )


reference: ModelState = reference_state()
text_only: ModelState = TextOnlyState(hidden_size=8, max_num_tokens=16)
with_buffer: ModelState = BufferState(torch.zeros(16, 8))


def use(state: ModelState) -> None:
    batch = ReferenceInputBatch.from_requests(["a"], [4], [0], [4])
    assert_type(state.dummy_inputs_embeds(4), torch.Tensor | None)
    assert_type(state.gather_mm_embeddings(batch), tuple[list[torch.Tensor], torch.Tensor])
    assert_type(state.gather_mm_embeddings(batch, 1), tuple[list[torch.Tensor], torch.Tensor])
    assert_type(
        state.gather_mm_embeddings(batch, draft_lookahead=1),
        tuple[list[torch.Tensor], torch.Tensor],
    )
    assert_type(state.get_mm_embeddings({"a": [0]}, batch), torch.Tensor | None)
    assert_type(state.is_realtime, bool)
    assert_type(state.hidden_size, int)
    assert_type(state.dtype, torch.dtype)
    assert_type(state.device, torch.device)
