"""dummy_inputs_embeds returns torch.Tensor | None, not a numpy array."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import torch

from rtmm_protocol import InputBatch, ModelState


class NumpyDummyState:
    is_realtime = False
    supports_mm_inputs = True
    hidden_size = 8
    max_num_tokens = 16
    dtype = torch.float32
    device = torch.device("cpu")

    def dummy_inputs_embeds(self, num_tokens: int) -> npt.NDArray[np.float32]:
        return np.zeros((num_tokens, 8), dtype=np.float32)

    def gather_mm_embeddings(
        self, input_batch: InputBatch, draft_lookahead: int = 0
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return [], torch.zeros(input_batch.num_tokens, dtype=torch.bool)

    def get_mm_embeddings(
        self, scheduled_encoder_inputs: Mapping[str, Sequence[int]], input_batch: InputBatch
    ) -> torch.Tensor | None:
        return None


state: ModelState = NumpyDummyState()  # E: assignment  # P: reportAssignmentType
