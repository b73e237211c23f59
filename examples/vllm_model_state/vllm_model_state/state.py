"""vLLM's ModelRunner V2 default model state under the contract's method name.

In vLLM 0.33.0 ``DefaultModelState.prepare_inputs_embeds(scheduled_encoder_inputs,
input_batch, req_states)`` is what the contract calls ``get_mm_embeddings``: it runs the
encoder for the scheduled items (``execute_mm_encoder``), gathers through the
``EncoderRunner`` and merges through ``EncoderRunner.get_inputs_embeds`` into the
runner's persistent ``inputs_embeds`` buffer, which ``dummy_inputs_embeds`` also hands
out. Everything here is vLLM's code; the subclass adds only the contract's names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from vllm.model_executor.models.interfaces import supports_realtime
from vllm.v1.worker.gpu.model_states.default import DefaultModelState

__all__ = ["VllmDefaultModelState"]


class VllmDefaultModelState(DefaultModelState):
    """vLLM's ``DefaultModelState``, with ``get_mm_embeddings``, ``hidden_size`` and ``is_realtime``.

    Built as vLLM builds a model state: ``(vllm_config, model, encoder_cache, device)``,
    with ``encoder_cache=None`` for a model without a multimodal encoder.
    """

    @property
    def hidden_size(self) -> int:
        """Width of ``inputs_embeds`` (vLLM's ``inputs_embeds_size``)."""
        return self.inputs_embeds_size

    @property
    def is_realtime(self) -> bool:
        """vLLM's own realtime guard on the model, the one its encoder runner uses."""
        return supports_realtime(self.model)

    def get_mm_embeddings(
        self,
        scheduled_encoder_inputs: Mapping[str, Sequence[int]],
        input_batch: Any,
        req_states: Any,
    ) -> torch.Tensor | None:
        """Encode, gather and merge one step: vLLM's ``prepare_inputs_embeds``."""
        return self.prepare_inputs_embeds(
            scheduled_encoder_inputs,  # type: ignore[arg-type]  # read only, as vLLM does
            input_batch,
            req_states,
        )
