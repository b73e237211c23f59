"""The contract in vLLM's own spelling (ModelRunner V2, vLLM 0.29 to 0.33), as Protocols.

vLLM's model states do what :class:`~rtmm_protocol.ModelState` describes under vLLM's
names: ``prepare_inputs_embeds`` (0.29 renamed ``get_mm_embeddings``), the width of
``inputs_embeds`` as ``inputs_embeds_size``, and the model-inputs hooks of SPEC M1
(``prepare_inputs``, ``prepare_dummy_inputs``). :class:`VllmModelState` lets a vLLM
model-state author type-check a state against the contract with mypy and pyright, and
:class:`VllmInputBatch` is the part of vLLM's ``InputBatch`` those methods read.

The Protocol is generic in the batch type, for the reason
:class:`~rtmm_protocol.ModelInputsHooks` gives: parameters are contravariant, and a
state's methods take vLLM's concrete ``InputBatch`` class, not any batch. Write
``VllmModelState[InputBatch]`` with vLLM's ``InputBatch``; the type variable is bound to
:class:`VllmInputBatch`, so a batch class lacking a field the contract reads is rejected.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, runtime_checkable

import torch

from rtmm_protocol.protocols import InputBatch

__all__ = ["VllmInputBatch", "VllmModelState"]


@runtime_checkable
class VllmInputBatch(InputBatch, Protocol):
    """vLLM's ``InputBatch`` as the contract reads it: the contract's batch fields, and the
    device tensors and padded request count the model-inputs hooks read."""

    @property
    def num_reqs_after_padding(self) -> int: ...
    @property
    def idx_mapping(self) -> torch.Tensor: ...
    @property
    def query_start_loc(self) -> torch.Tensor: ...
    @property
    def positions(self) -> torch.Tensor: ...


#: The batch class a vLLM state's methods take.
VllmBatchT_contra = TypeVar("VllmBatchT_contra", bound=VllmInputBatch, contravariant=True)


@runtime_checkable
class VllmModelState(Protocol[VllmBatchT_contra]):
    """A vLLM ModelRunner V2 model state, as the contract needs it (SPEC M1, D1-D5, R1-R4).

    The members are vLLM's: ``prepare_inputs_embeds`` is ``get_mm_embeddings``,
    ``inputs_embeds_size`` is ``hidden_size``; ``prepare_inputs`` and
    ``prepare_dummy_inputs`` are :class:`~rtmm_protocol.ModelInputsHooks`' members. The
    realtime marker is read from the state's model, as vLLM's encoder runner reads it.
    The buffer's dtype is left to the suite's run-time checks (D1): vLLM's states take
    ``dtype`` from ``ModelConfig.dtype``, which vLLM declares as a dtype name or a
    ``torch.dtype``, so a Protocol member ``dtype: torch.dtype`` would reject every one.
    """

    @property
    def supports_mm_inputs(self) -> bool: ...
    @property
    def inputs_embeds_size(self) -> int: ...
    @property
    def max_num_tokens(self) -> int: ...
    @property
    def device(self) -> torch.device: ...

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor | None:
        """A view of the persistent ``inputs_embeds`` buffer for a dummy run, or None."""
        ...

    def gather_mm_embeddings(
        self, input_batch: VllmBatchT_contra, draft_lookahead: int = 0
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Gather the cached encoder outputs the batch's scheduled tokens need."""
        ...

    def prepare_inputs_embeds(
        self,
        scheduled_encoder_inputs: dict[str, list[int]],
        input_batch: VllmBatchT_contra,
        req_states: Any,
    ) -> torch.Tensor | None:
        """Encode, gather and merge into the persistent buffer; return its first rows."""
        ...

    def prepare_inputs(self, input_batch: VllmBatchT_contra, req_states: Any) -> dict[str, Any]:
        """Model inputs of this step that replace the runner's own (SPEC M1)."""
        ...

    def prepare_dummy_inputs(self, num_reqs: int, num_tokens: int) -> dict[str, Any]:
        """Model inputs of a dummy run (CUDA-graph capture; SPEC M1)."""
        ...
