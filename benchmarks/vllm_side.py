"""vLLM's own ``EncoderRunner`` (ModelRunner V2) driven on a workload, for the comparison.

vLLM is optional: :func:`load_vllm` imports it or raises :class:`VLLMUnavailableError`
saying how to install it. Its cache is filled the way its engine fills it (a list of
``MultiModalFeatureSpec`` per request, outputs assigned into ``encoder_outputs``), over
the very output tensors the reference reads, and its runner wraps the same toy model.
The package never imports this module.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.scenarios import Workload
from rtmm_protocol import PlaceholderRange

__all__ = [
    "INSTALL_HINT",
    "VLLM_VERSION",
    "VLLMModules",
    "VLLMSide",
    "VLLMUnavailableError",
    "load_vllm",
]

#: The release the comparison was written against (its ``EncoderRunner`` API).
VLLM_VERSION = "0.33.0"

INSTALL_HINT = (
    f"--vs-vllm compares with vLLM {VLLM_VERSION}'s EncoderRunner, which this Python cannot "
    "import ({reason}).\n"
    f"Install vLLM {VLLM_VERSION} into a virtual environment, then run the benchmark with that "
    "environment's Python and this checkout on the path:\n"
    f"  python -m venv VENV && VENV/bin/pip install vllm=={VLLM_VERSION}\n"
    "  PYTHONPATH=$PWD VENV/bin/python -m benchmarks --vs-vllm\n"
    f"On a machine without a GPU, install torch's CPU build first and vllm=={VLLM_VERSION} "
    "with --no-deps, then the packages that importing "
    "vllm.v1.worker.gpu.mm.encoder_runner asks for.\n"
    "Without vLLM, `python -m benchmarks` compares with the self-written loop baseline."
)


class VLLMUnavailableError(RuntimeError):
    """vLLM's encoder runner cannot be imported; the message says how to install it."""


@dataclass(frozen=True)
class VLLMModules:
    """The vLLM modules the comparison drives, and vLLM's version."""

    version: str
    # vLLM ships no types this package checks against: its modules are opaque here.
    encoder_runner: Any
    encoder_cache: Any
    inputs: Any


def load_vllm() -> VLLMModules:
    """Import vLLM's encoder runner, cache and input types, or raise with install steps."""
    try:
        vllm = importlib.import_module("vllm")
        runner = importlib.import_module("vllm.v1.worker.gpu.mm.encoder_runner")
        cache = importlib.import_module("vllm.v1.worker.gpu.mm.encoder_cache")
        inputs = importlib.import_module("vllm.multimodal.inputs")
    except Exception as error:  # any import failure means "not usable here"
        reason = f"{type(error).__name__}: {error}"
        raise VLLMUnavailableError(INSTALL_HINT.format(reason=reason)) from error
    return VLLMModules(str(getattr(vllm, "__version__", "unknown")), runner, cache, inputs)


class VLLMSide:
    """vLLM's runner and cache over a workload's features and outputs.

    On CPU, pinned host memory is switched off first (vLLM pins its mask buffer when a
    GPU is present, and pinning fails without one).
    """

    def __init__(self, modules: VLLMModules, workload: Workload, model: object) -> None:
        if workload.device.type == "cpu":
            modules.encoder_runner.PIN_MEMORY = False
        inputs = modules.inputs
        ranges: dict[int, Any] = {}

        def placeholder(position: PlaceholderRange) -> Any:
            # One vLLM range per distinct reference range, as the workload shares them.
            key = id(position)
            if key not in ranges:
                ranges[key] = inputs.PlaceholderRange(
                    offset=position.offset, length=position.length, is_embed=position.is_embed
                )
            return ranges[key]

        self.cache: Any = modules.encoder_cache.EncoderCache()
        for req_id, features in workload.mm_features.items():
            self.cache.mm_features[req_id] = [
                inputs.MultiModalFeatureSpec(
                    data=None,
                    modality=feature.modality,
                    identifier=feature.identifier,
                    mm_position=placeholder(feature.mm_position),
                )
                for feature in features
            ]
        for identifier, output in workload.encoder_outputs.items():
            self.cache.encoder_outputs[identifier] = output
        self.runner: Any = modules.encoder_runner.EncoderRunner(
            model,
            max(1, workload.num_tokens),
            workload.hidden_size,
            self.cache,
            workload.dtype,
            workload.device,
        )

    def gather(self, args: tuple[Any, ...]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """vLLM's list form: ``(mm_embeds, is_mm_embed)``."""
        result: tuple[list[torch.Tensor], torch.Tensor] = self.runner.gather_mm_embeddings(*args)
        return result

    def rows(self, args: tuple[Any, ...]) -> torch.Tensor:
        """The gathered rows as one tensor: the list form, concatenated."""
        mm_embeds, _ = self.gather(args)
        return torch.cat(mm_embeds)

    def step(self, args: tuple[Any, ...], input_ids: torch.Tensor) -> torch.Tensor:
        """The whole step as vLLM's default model state runs it: gather, then merge."""
        mm_embeds, is_mm_embed = self.gather(args)
        merged: torch.Tensor = self.runner.get_inputs_embeds(input_ids, mm_embeds, is_mm_embed)
        return merged
