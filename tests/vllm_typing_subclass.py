"""A vLLM model-state subclass for the typing tests (``tests/test_vllm_typing.py``).

Importable only where vLLM 0.29 or later is (its ``DefaultModelState`` has
``prepare_inputs_embeds``); the tests that use it skip elsewhere.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.worker.gpu.input_batch import InputBatch  # type: ignore[import-not-found, unused-ignore]
from vllm.v1.worker.gpu.model_states.default import DefaultModelState  # type: ignore[import-not-found, unused-ignore]
from vllm.v1.worker.gpu.states import RequestState  # type: ignore[import-not-found, unused-ignore]


class OwnBufferState(DefaultModelState):  # type: ignore[misc, unused-ignore]
    """Hands the model, on real steps, the rows ``prepare_inputs_embeds`` wrote, from the
    persistent buffer dummy runs read: a hook overridden as a vLLM author would, with
    vLLM's own batch and request-state classes in its annotations."""

    def prepare_inputs(
        self, input_batch: InputBatch, req_states: RequestState
    ) -> dict[str, torch.Tensor | None]:
        inputs = super().prepare_inputs(input_batch, req_states)
        inputs["inputs_embeds"] = self.dummy_inputs_embeds(input_batch.num_tokens_after_padding)
        return inputs  # type: ignore[no-any-return, unused-ignore]

    def prepare_dummy_inputs(self, num_reqs: int, num_tokens: int) -> dict[str, Any]:
        inputs = super().prepare_dummy_inputs(num_reqs, num_tokens)
        inputs["inputs_embeds"] = self.dummy_inputs_embeds(num_tokens)
        return inputs  # type: ignore[no-any-return, unused-ignore]
