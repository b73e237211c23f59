"""What vLLM's ModelState reads from a ``ModelConfig``, for the suite's toy models.

vLLM's ``ModelConfig`` is built from a Hugging Face checkpoint, which the suite's toy
models do not have. :class:`ToyModelConfig` answers the handful of questions the
ModelRunner V2 model state asks of it (sizes, dtype, which optional paths are on) with
the toy model's values, and :func:`vllm_config_for` places it in vLLM's own
``VllmConfig`` next to vLLM's own scheduler, compilation and observability configs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from vllm.config import DeviceConfig, SchedulerConfig, VllmConfig

__all__ = ["ToyModelConfig", "vllm_config_for"]


@dataclass(frozen=True)
class ToyModelConfig:
    """A toy model's answers to the ``ModelConfig`` questions of vLLM's model states.

    Eager only (no CUDA graphs of the encoder), no M-RoPE, no prompt embeddings and no
    multimodal pruning: the plain multimodal path the contract describes.
    """

    hidden_size: int
    dtype: torch.dtype
    max_model_len: int
    supports_multimodal_inputs: bool
    enforce_eager: bool = True
    enable_prompt_embeds: bool = False
    uses_mrope: bool = False
    is_mm_prefix_lm: bool = False
    multimodal_config: None = None

    def get_inputs_embeds_size(self) -> int:
        """Width of ``inputs_embeds``: the toy model's hidden size."""
        return self.hidden_size


def vllm_config_for(
    model_config: ToyModelConfig, max_num_reqs: int, max_num_tokens: int, device: torch.device
) -> VllmConfig:
    """vLLM's ``VllmConfig`` for a toy model: vLLM's scheduler limits, ``model_config`` set after.

    ``VllmConfig`` accepts no stand-in ``ModelConfig`` at construction (it would derive
    everything else from the checkpoint), so the stand-in is assigned once built.
    """
    config = VllmConfig(
        device_config=DeviceConfig(device=torch.device(device)),
        scheduler_config=SchedulerConfig(
            max_num_seqs=max_num_reqs,
            max_num_batched_tokens=max_num_tokens,
            max_model_len=model_config.max_model_len,
            is_encoder_decoder=False,
        ),
    )
    config.model_config = model_config  # type: ignore[assignment]  # the toy's stand-in
    return config
