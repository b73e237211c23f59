"""vLLM's own model states, and the model configuration each one is built with (SPEC M3).

A model state of vLLM's reads its model when it is built: ``model.config``, vLLM's
``model_config.hf_config`` / ``hf_text_config``, attributes of the model. For each of
the states vLLM ships (in ``vllm/v1/worker/gpu/model_states/`` and those its models
return from ``get_model_state_cls()``) the adapter carries a small configuration,
written from its model's configuration class and sized down (the suite sets the hidden
size, vocabulary and dtype to its own anyway), in ``configs/<model>/config.json`` beside
this module, and the model attributes the state reads. So ``vllm:MODULE:CLASS`` needs
nothing but the class's name; a configuration the run names replaces the carried one
(``--conformance-model-config``), and attributes the run names are added to its own.

A user's subclass of one of these states is built with its base's configuration unless
the run names another.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rtmm_protocol.adapters.vllm.availability import import_vllm
from rtmm_protocol.adapters.vllm.parallel_state import single_process_parallel_state
from rtmm_protocol.testing.model_configuration import DerivedAttribute, ModelConfiguration

__all__ = [
    "CONFIGS",
    "IN_TREE_STATES",
    "Hands",
    "InTreeState",
    "Models",
    "default_configuration",
    "in_tree_state",
    "nearest_in_tree_state",
]

#: The folder of the carried configurations, one checkpoint-like folder per model.
CONFIGS = Path(__file__).with_name("configs")


def _ngram_embeddings(config: Any, model: Any) -> object:
    """LongCat-Flash-Lite's n-gram embedding (vLLM's ``NgramEmbedding``), made from the
    configuration as the model makes it, over a token embedding of the toy's sizes."""
    with single_process_parallel_state():
        layers = import_vllm("vllm.model_executor.layers.vocab_parallel_embedding")
        longcat = import_vllm("vllm.model_executor.models.longcat_flash_ngram")
        words = layers.VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        return longcat.NgramEmbedding(config, words)


def _token_lookback_depth(config: Any, model: Any) -> int:
    """DeepSeek V4.1's ``token_lookback_depth``, as its model computes it: the n-gram
    hash's look-back (``max_ngram_size - 1``) when the configuration has engram
    layers, else 0."""
    engram = import_vllm("vllm.models.deepseek_v41.common.engram")
    layout = engram.EngramLayout.from_config(config)
    return 0 if layout is None else int(layout.max_ngram_size) - 1


_NO_SPECIALIZED_DECODE = {"specialized_decode_config": None}


#: vLLM's hardware variants of a model's code, by the folder they live in.
_VARIANTS = {"nvidia": "NVIDIA", "amd": "AMD"}

#: How a state hands its model the multimodal rows: in the encoder runner's persistent
#: buffer (``runner``: ``prepare_inputs_embeds`` returns its first rows), in a buffer of
#: its own that ``prepare_inputs`` hands the model (``own``, SPEC M1), or not at all, the
#: model reading the encoder outputs by cross-attention (``cross-attention``, SPEC M2).
Hands = Literal["runner", "own", "cross-attention"]

#: What the models a state serves take: multimodal inputs (the state is checked around the
#: suite's multimodal toy models), or token ids alone (vLLM never builds it around a
#: multimodal model, so the multimodal modes are outside its domain: specification.md#domain).
Models = Literal["multimodal", "text"]


@dataclass(frozen=True)
class InTreeState:
    """One of vLLM's model states: where it lives, the models it serves, the folder of its
    carried configuration (``""``: it reads none), the model attributes it reads, what its
    models take (:data:`Models`), how it hands them the multimodal rows (:data:`Hands`),
    the packages its module imports beyond what vLLM's own import needs, and, for a state
    the suite cannot build around a toy model at all, why (``not_buildable``)."""

    spec: str
    serves: str
    config: str = ""
    attributes: Mapping[str, object] = field(default_factory=dict)
    models: Models = "multimodal"
    hands: Hands = "runner"
    packages: tuple[str, ...] = ()
    not_buildable: str = ""

    @property
    def name(self) -> str:
        """The class name, with the hardware variant where vLLM has several
        (``Qwen4ExpModelState (AMD)``)."""
        module, _, cls = self.spec.partition(":")
        variant = next((v for v in _VARIANTS if f".{v}." in f"{module}."), "")
        return f"{cls} ({_VARIANTS[variant]})" if variant else cls

    @property
    def key(self) -> str:
        """A file-name-safe key, for reports (``qwen4-exp-model-state-amd``)."""
        module, _, cls = self.spec.partition(":")
        words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", cls).lower()
        variant = next((v for v in _VARIANTS if f".{v}." in f"{module}."), "")
        return f"{words}-{variant}" if variant else words

    def configuration(self) -> ModelConfiguration | None:
        """The configuration it is built with by default (``None``: none needed)."""
        if not self.config and not self.attributes:
            return None
        loaded = ModelConfiguration.load(CONFIGS / self.config) if self.config else None
        return ModelConfiguration(
            loaded.config if loaded else {},
            loaded.generation_config if loaded else {},
            dict(self.attributes),
            f"the configuration rtmm-protocol carries for {self.spec.rsplit(':', 1)[-1]}"
            + (f" (configs/{self.config}/config.json)" if self.config else ""),
        )


_STATES = "vllm.v1.worker.gpu.model_states"

#: vLLM 0.33.0's model states, in the order the Engines page lists them.
IN_TREE_STATES: tuple[InTreeState, ...] = (
    InTreeState(f"{_STATES}.default:DefaultModelState", "most models"),
    InTreeState(f"{_STATES}.encoder_only:EncoderOnlyModelState", "encoder-only models (BERT)"),
    InTreeState(f"{_STATES}.mamba_hybrid:MambaHybridModelState", "hybrid Mamba models"),
    InTreeState(
        f"{_STATES}.encoder_decoder:EncoderDecoderModelState",
        "cross-attention encoder-decoder models (Whisper)",
        "whisper",
        hands="cross-attention",
    ),
    InTreeState(
        "vllm.model_executor.models.longcat_flash_ngram:LongcatNgramModelState",
        "LongCat-Flash-Lite (text only)",
        "longcat_flash_ngram",
        {
            "model.ngram_embeddings": DerivedAttribute(
                _ngram_embeddings, "vLLM's NgramEmbedding, made from the configuration"
            )
        },
        models="text",
        hands="own",
    ),
    InTreeState(
        "vllm.model_executor.models.diffusion_gemma:DiffusionGemmaModelState",
        "DiffusionGemma (with its vision tower)",
        "diffusion_gemma",
        hands="own",
        packages=("torchvision",),
    ),
    InTreeState(
        "vllm.models.deepseek_v41.nvidia.model_state:DeepseekV41ModelState",
        "DeepSeek V4.1 and its vision-language model (NVIDIA and AMD)",
        "deepseek_v41",
        {
            "token_lookback_depth": DerivedAttribute(
                _token_lookback_depth, "the engram look-back, from the configuration"
            )
        },
    ),
    InTreeState(
        "vllm.models.deepseek_v41.nvidia.specialized_decode.runtime.model_state:"
        "DeepseekV41SpecializedDecodeModelState",
        "DeepSeek V4.1 with its specialized decode (NVIDIA)",
        "deepseek_v41",
        not_buildable="its constructor builds the model's specialized decode executor "
        "from the model itself (model.build_specialized_decode(), then a warm-up on the "
        "GPU), which a toy model cannot stand in for",
    ),
    InTreeState(
        "vllm.models.kimi_k3.nvidia.model_state:KimiK3ModelState",
        "Kimi K3 and its vision-language model (NVIDIA)",
        "kimi_k3",
        _NO_SPECIALIZED_DECODE,
        packages=("compressed-tensors",),
    ),
    InTreeState(
        "vllm.models.kimi_k3.amd.specialized_decode.model_state:KimiK3ModelState",
        "Kimi K3 (AMD)",
        "kimi_k3",
        _NO_SPECIALIZED_DECODE,
        packages=("compressed-tensors",),
    ),
    InTreeState(
        "vllm.models.qwen4_exp.nvidia.model_state:Qwen4ExpModelState",
        "Qwen4-Exp (NVIDIA)",
        "qwen4_exp",
    ),
    InTreeState(
        "vllm.models.qwen4_exp.amd.model_state:Qwen4ExpModelState", "Qwen4-Exp (AMD)", "qwen4_exp"
    ),
    InTreeState(
        "vllm.models.minimax_m3.amd.model_state:MiniMaxM3ModelState",
        "MiniMax-M3 (AMD)",
        "minimax_m3",
        {"model.specialized_decode_config": None},
        packages=("torchvision",),
    ),
)

_BY_SPEC = {state.spec: state for state in IN_TREE_STATES}


def in_tree_state(cls: type) -> InTreeState | None:
    """The entry of ``cls`` if it is one of vLLM's own model states."""
    return _BY_SPEC.get(f"{cls.__module__}:{cls.__qualname__}")


def nearest_in_tree_state(cls: type) -> InTreeState | None:
    """The entry of the nearest of vLLM's own states among ``cls`` and its bases (a
    user's subclass is built as the state it derives from is)."""
    return next((found for base in cls.__mro__ if (found := in_tree_state(base))), None)


def default_configuration(cls: type) -> ModelConfiguration | None:
    """The configuration ``cls`` is built with when the run names none: that of the
    nearest of vLLM's own states among ``cls`` and its bases that carries one."""
    for base in cls.__mro__:
        state = in_tree_state(base)
        if state is not None:
            configuration = state.configuration()
            if configuration is not None:
                return configuration
    return None
