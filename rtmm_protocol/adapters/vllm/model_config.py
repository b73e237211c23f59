"""What vLLM's model states read from a ``ModelConfig``, answered for the suite's toy models.

vLLM's ``ModelConfig`` is built from a Hugging Face checkpoint, which the suite's toy
models do not have. :class:`ToyModelConfig` answers the questions ModelRunner V2's model
states ask of it with the toy model's values: its sizes and dtype, which optional paths
are on, and its configuration (SPEC M3), which the toy carries as ``model.config``
(``hf_config`` is that very object, ``hf_text_config`` the language model's part of it,
as vLLM derives it). :func:`vllm_config_for` places it in vLLM's own ``VllmConfig`` next
to vLLM's own scheduler, device, compilation and observability configs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from rtmm_protocol.adapters.vllm.availability import import_vllm

__all__ = ["ToyModelConfig", "vllm_config_for"]


@dataclass(frozen=True)
class ToyModelConfig:
    """A toy model's answers to the ``ModelConfig`` questions of vLLM's model states.

    Eager only (no CUDA graphs of the encoder), no multi-dimensional RoPE, no prompt
    embeddings, no multimodal pruning and no prefix-LM attention: the plain multimodal
    path the contract describes. ``hf_config`` is the toy model's configuration and
    ``generation_config`` its generation settings (a checkpoint's
    ``generation_config.json``). Each supported vLLM release reads a subset of these.
    """

    hidden_size: int
    dtype: torch.dtype
    max_model_len: int
    hf_config: Any = None
    generation_config: Mapping[str, Any] = field(default_factory=dict)
    enforce_eager: bool = True
    enable_prompt_embeds: bool = False
    uses_mrope: bool = False
    uses_xdrope_dim: int = 0  # read by vLLM 0.28 (another kind of multi-dimensional RoPE)
    is_mm_prefix_lm: bool = False
    is_hybrid: bool = False
    is_attention_free: bool = False
    multimodal_config: None = None

    @classmethod
    def of_model(
        cls, model: object, hidden_size: int, dtype: torch.dtype, max_model_len: int
    ) -> ToyModelConfig:
        """The answers for a toy model carrying its configuration (``model.config``)."""
        generation = getattr(model, "generation_config", None) or {}
        return cls(
            hidden_size, dtype, max_model_len, getattr(model, "config", None), dict(generation)
        )

    @property
    def hf_text_config(self) -> Any:
        """The language model's configuration, as vLLM derives it from ``hf_config``."""
        config_module = import_vllm("vllm.transformers_utils.config")
        return config_module.get_hf_text_config(self.hf_config)

    def get_inputs_embeds_size(self) -> int:
        """Width of ``inputs_embeds``: the toy model's hidden size."""
        return self.hidden_size

    def get_vocab_size(self) -> int:
        """The vocabulary of the toy model (its configuration says it, sized as the toy)."""
        return int(self.hf_text_config.vocab_size)

    def get_sliding_window(self) -> int | None:
        """The configuration's sliding window, if it has one."""
        window = getattr(self.hf_text_config, "sliding_window", None)
        return int(window) if isinstance(window, int) else None

    def try_get_generation_config(self) -> dict[str, Any]:
        """The generation settings the configuration names (empty when it names none)."""
        return dict(self.generation_config)


def vllm_config_for(
    model_config: ToyModelConfig, max_num_reqs: int, max_num_tokens: int, device: torch.device
) -> Any:
    """vLLM's ``VllmConfig`` (typed ``Any``: vLLM's type) for a toy model.

    ``VllmConfig`` takes no stand-in ``ModelConfig`` at construction (it would derive the
    rest from the checkpoint), so the stand-in is assigned once the config is built.
    """
    config = import_vllm("vllm.config")
    vllm_config = config.VllmConfig(
        device_config=config.DeviceConfig(device=torch.device(device)),
        scheduler_config=config.SchedulerConfig(
            max_num_seqs=max_num_reqs,
            max_num_batched_tokens=max_num_tokens,
            max_model_len=model_config.max_model_len,
            is_encoder_decoder=False,
        ),
    )
    vllm_config.model_config = model_config
    return vllm_config
