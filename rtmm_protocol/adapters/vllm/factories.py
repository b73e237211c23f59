"""Conformance factories that build a vLLM class the way vLLM builds it.

A factory is called with the suite's context (``FACTORY(ctx) -> target``) in the worker
process that runs the checks; the suite sends it there with :mod:`pickle`. So a factory
holds only where its class lives (a :class:`~rtmm_protocol.adapters.vllm.class_spec.ClassSpec`)
and its level, and imports the class, adds the contract's names and builds it on each
call:

* a **model state** as ModelRunner V2 builds one,
  ``CLASS(vllm_config, model, encoder_cache, device)``, with ``encoder_cache=None`` for a
  model without a multimodal encoder, as vLLM does;
* an **encoder runner** as vLLM's model state builds its runner,
  ``CLASS(model=..., max_num_tokens=..., hidden_size=..., encoder_cache=..., dtype=...,
  device=...)``.

Around the suite's toy model and cache: the model behind
:class:`~rtmm_protocol.adapters.vllm.model_view.BatchedInputsModel`, the cache as vLLM's
cache reading through to the suite's dicts, and vLLM's ``VllmConfig`` with a
``ModelConfig`` stand-in. On a CPU, vLLM's encoder runner is told not to pin host
memory (pinning needs a GPU): that module setting is the one thing of vLLM the adapter
changes, and only where the target cannot run without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from rtmm_conformance.driving.context import ModeNotSupported
from rtmm_protocol.adapters.vllm.availability import import_vllm
from rtmm_protocol.adapters.vllm.cache_view import vllm_encoder_cache
from rtmm_protocol.adapters.vllm.class_kind import Level, classify, vllm_classes
from rtmm_protocol.adapters.vllm.class_spec import ClassSpec
from rtmm_protocol.adapters.vllm.contract_names import with_contract_names
from rtmm_protocol.adapters.vllm.engine import VLLM_ENGINE, VllmEngine
from rtmm_protocol.adapters.vllm.in_tree import nearest_in_tree_state
from rtmm_protocol.adapters.vllm.model_config import ToyModelConfig, vllm_config_for
from rtmm_protocol.adapters.vllm.model_view import vllm_model_view
from rtmm_protocol.encoder_cache import EncoderCache
from rtmm_protocol.protocols import MultiModalModel, TextModel

__all__ = ["SuiteContext", "VllmFactory", "unpin_host_memory_on_cpu"]


class SuiteContext(Protocol):
    """What a factory reads from the suite's ``ConformanceContext``."""

    @property
    def model(self) -> MultiModalModel | TextModel: ...
    @property
    def encoder_cache(self) -> EncoderCache: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def max_num_tokens(self) -> int: ...
    @property
    def max_num_reqs(self) -> int: ...
    @property
    def dtype(self) -> torch.dtype: ...
    @property
    def device(self) -> torch.device: ...
    @property
    def mode(self) -> str: ...


def unpin_host_memory_on_cpu(device: torch.device) -> None:
    """Switch off vLLM's pinned host memory when the target runs on a CPU.

    vLLM pins host memory for fast copies to a GPU, and without one pinning fails. Two
    places of vLLM pin it for ModelRunner V2's model states: the encoder runner (the
    gather mask, the batched encoder inputs), which reads a setting of its own module, and
    the UVA buffers (``buffer_utils.UvaBuffer``: host memory a GPU reads in place), which
    some states keep per request. On a CPU the device *is* the host, so a UVA buffer's
    device view is its host tensor itself: that is what the buffers become here.
    """
    if torch.device(device).type != "cpu":
        return
    import_vllm("vllm.v1.worker.gpu.mm.encoder_runner").PIN_MEMORY = False
    uva = import_vllm("vllm.v1.worker.gpu.buffer_utils").UvaBuffer
    if uva.__init__ is not _host_uva_buffer:
        uva.__init__ = _host_uva_buffer


def _host_uva_buffer(self: Any, size: int | Sequence[int], dtype: torch.dtype) -> None:
    """``UvaBuffer.__init__`` on a CPU: the host tensor, and the same tensor as the device's
    view of it (what ``uva()`` hands out)."""
    self.cpu = torch.zeros(size, dtype=dtype, device="cpu")
    self.np = self.cpu.numpy()
    self._uva = self.cpu


@dataclass(frozen=True)
class VllmFactory:
    """``FACTORY(ctx)`` building the class ``spec`` names at ``level``, contract names added.

    Holds strings only, so :mod:`pickle` sends it to a worker process by reference.
    """

    spec: ClassSpec
    level: Level

    @property
    def engine(self) -> VllmEngine:
        """How the targets take the suite's steps: in vLLM's own types."""
        return VLLM_ENGINE

    def target_class(self) -> type:
        """The class this factory builds: the named class with the contract's names added."""
        vllm_classes()  # quietly, before the user's module imports them
        cls = self.spec.import_class()
        kind = classify(cls, str(self.spec))
        if kind.level != self.level:
            raise TypeError(f"{self.spec} is a vLLM {kind.level}, not a {self.level}")
        return with_contract_names(cls, self.level)

    def __call__(self, ctx: SuiteContext) -> object:
        """The target, built around the context's model and encoder cache; a state whose
        models take token ids alone refuses a multimodal model, which vLLM never gives it."""
        cls = self.target_class()
        state = nearest_in_tree_state(cls)
        if state is not None and state.models == "text" and ctx.mode != "text-only":
            raise ModeNotSupported(
                f"vLLM builds {state.name} for {state.serves}, never around a multimodal "
                "model: the multimodal clauses are outside its domain (specification.md#domain)"
            )
        unpin_host_memory_on_cpu(ctx.device)
        model = vllm_model_view(ctx.model)
        multimodal = isinstance(ctx.model, MultiModalModel)
        cache = vllm_encoder_cache(ctx.encoder_cache) if multimodal else None
        if self.level == "encoder_runner":
            return cls(
                model=model,
                max_num_tokens=ctx.max_num_tokens,
                hidden_size=ctx.hidden_size,
                encoder_cache=cache,
                dtype=ctx.dtype,
                device=ctx.device,
            )
        model_config = ToyModelConfig.of_model(
            ctx.model, ctx.hidden_size, ctx.dtype, ctx.max_num_tokens
        )
        config = vllm_config_for(model_config, ctx.max_num_reqs, ctx.max_num_tokens, ctx.device)
        return cls(config, model, cache, ctx.device)
