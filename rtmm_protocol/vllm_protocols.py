"""The contract in vLLM's own spelling (ModelRunner V2, vLLM 0.29 to 0.33), as Protocols.

vLLM's model states do what :class:`~rtmm_protocol.ModelState` describes under vLLM's
names: ``prepare_inputs_embeds`` (0.29 renamed ``get_mm_embeddings``), the width of
``inputs_embeds`` as ``inputs_embeds_size``, and the model-inputs hooks of SPEC M1
(``prepare_inputs``, ``prepare_dummy_inputs``). :class:`VllmModelState` lets the author of
a vLLM model state type-check it against the contract with mypy and pyright, and
:class:`VllmInputBatch` is the part of vLLM's ``InputBatch`` those methods read. vLLM's
encoder runner needs no Protocol of its own: its ``gather_mm_embeddings`` has the
contract's names and order, so it satisfies :class:`~rtmm_protocol.MMEmbeddingGatherer`
as it is.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, runtime_checkable

import torch

from rtmm_protocol.protocols import InputBatch

__all__ = ["VllmBatchT_contra", "VllmInputBatch", "VllmModelState"]


@runtime_checkable
class VllmInputBatch(InputBatch, Protocol):
    """vLLM's ``InputBatch`` as the contract reads it.

    The contract's batch fields (:class:`~rtmm_protocol.InputBatch`: the gather's arrays,
    ``input_ids``, the padded token count), and the device tensors and padded request
    count that vLLM's model-inputs hooks read (``DefaultModelState.prepare_inputs`` reads
    ``idx_mapping`` and ``query_start_loc`` to place M-RoPE positions). vLLM's own
    ``InputBatch`` dataclass satisfies it; the bound of :class:`VllmModelState`'s type
    variable is this Protocol.
    """

    @property
    def num_reqs_after_padding(self) -> int: ...
    @property
    def idx_mapping(self) -> torch.Tensor: ...
    @property
    def query_start_loc(self) -> torch.Tensor: ...
    @property
    def positions(self) -> torch.Tensor: ...


#: The batch class a vLLM state's methods take: contravariant, because it appears only in
#: parameters, and bound to :class:`VllmInputBatch`.
VllmBatchT_contra = TypeVar("VllmBatchT_contra", bound=VllmInputBatch, contravariant=True)


@runtime_checkable
class VllmModelState(Protocol[VllmBatchT_contra]):
    """A vLLM ModelRunner V2 model state, as the contract needs it (SPEC M1, D1-D5, R1-R4).

    Parametrise it with the batch class the state's methods take:
    ``VllmModelState[InputBatch]`` with ``vllm.v1.worker.gpu.input_batch.InputBatch``.
    The members are vLLM's: ``prepare_inputs_embeds`` is ``get_mm_embeddings``,
    ``inputs_embeds_size`` is ``hidden_size``; ``prepare_inputs`` and
    ``prepare_dummy_inputs`` are :class:`~rtmm_protocol.ModelInputsHooks`' members.
    ``scheduled_encoder_inputs`` is a ``dict[str, list[int]]``, as vLLM declares it: a
    Protocol parameter typed more widely (a ``Mapping``) would reject vLLM's states, whose
    methods accept only a ``dict``.

    **Why it is generic in the batch type.** A parameter is contravariant: a method
    ``prepare_inputs(self, input_batch: InputBatch, ...)`` that takes vLLM's concrete
    ``InputBatch`` class cannot stand in for one that takes *any* batch, because a caller
    holding the Protocol could pass it another batch class. A Protocol whose methods took
    :class:`VllmInputBatch` would therefore reject every vLLM state, vLLM's own
    ``DefaultModelState`` first. Typing the batch ``Any`` would accept them, but also a
    state whose methods take three different batch classes, or a "batch" that is no batch
    at all. So the batch type is a parameter, and the checkers require every method to
    accept the class it names. The type variable is contravariant (it appears in
    parameters only), so a state whose methods accept any :class:`VllmInputBatch` is
    also a ``VllmModelState[InputBatch]``; it is bound to :class:`VllmInputBatch`, so
    parametrising with a class that lacks a field the contract or vLLM's hooks read is an
    error.

    Two members of :class:`~rtmm_protocol.ModelState` are left out. The realtime marker
    is read from the state's model, as vLLM's encoder runner reads it, not from the
    state. The buffer's dtype is left to the suite's run-time checks (D1): vLLM's states
    take ``dtype`` from ``ModelConfig.dtype``, which vLLM declares as a dtype name or a
    ``torch.dtype``, so a member ``dtype: torch.dtype`` would reject every one of them.
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
        """Encode, gather and merge into the persistent buffer; return its first rows.

        ``req_states`` is vLLM's ``RequestState``, typed ``Any`` as in
        :class:`~rtmm_protocol.ModelState`: the contract reads nothing from it.
        """
        ...

    def prepare_inputs(self, input_batch: VllmBatchT_contra, req_states: Any) -> dict[str, Any]:
        """Model inputs of this step that replace the runner's own (SPEC M1)."""
        ...

    def prepare_dummy_inputs(self, num_reqs: int, num_tokens: int) -> dict[str, Any]:
        """Model inputs of a dummy run (CUDA-graph capture; SPEC M1)."""
        ...
