"""The Protocols of the contract: what a model, a batch, a gatherer and a state offer.

Attributes are declared as read-only properties so that plain attributes, dataclass
fields and properties all satisfy them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

import torch

from rtmm_protocol.types import IntArray

__all__ = [
    "InputBatch",
    "MMEmbeddingGatherer",
    "ModelInputsHooks",
    "ModelState",
    "MultiModalModel",
    "TextModel",
]


@runtime_checkable
class TextModel(Protocol):
    """A model that embeds token ids: all a text-only model offers (SPEC D1).

    :class:`MultiModalModel` extends it with the encoder; a state built around a model
    that is only a ``TextModel`` has no ``inputs_embeds`` path.
    """

    def embed_input_ids(
        self,
        input_ids: torch.Tensor,
        multimodal_embeddings: Sequence[torch.Tensor] | None = None,
        is_multimodal: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Embed tokens and merge the gathered rows at the ``is_multimodal`` slots.

        Whether a multimodal row replaces the token row or is added to it is the model's
        choice.
        """
        ...


@runtime_checkable
class MultiModalModel(TextModel, Protocol):
    """A model with a multimodal encoder and a token-embedding merge."""

    def embed_multimodal(self, **kwargs: object) -> Sequence[torch.Tensor]:
        """Run the encoder on one item's inputs; return one output per item encoded."""
        ...


@runtime_checkable
class InputBatch(Protocol):
    """The per-step batch a ModelState reads; SPEC G1 places each request's window by its fields."""

    @property
    def req_ids(self) -> list[str]: ...
    @property
    def num_reqs(self) -> int: ...
    @property
    def num_tokens(self) -> int: ...
    @property
    def num_tokens_after_padding(self) -> int: ...
    @property
    def input_ids(self) -> torch.Tensor: ...
    @property
    def num_scheduled_tokens(self) -> IntArray: ...
    @property
    def query_start_loc_np(self) -> IntArray: ...
    @property
    def prefill_len_np(self) -> IntArray: ...
    @property
    def num_computed_tokens_np(self) -> IntArray: ...


#: The batch type a state's hooks take: contravariant (it appears in parameters only), and
#: bound to :class:`InputBatch`, the batch the contract's methods read.
BatchT_contra = TypeVar("BatchT_contra", bound=InputBatch, contravariant=True)


@runtime_checkable
class MMEmbeddingGatherer(Protocol):
    """The encoder-runner level gather (SPEC G1-G10).

    ``num_computed_tokens`` and ``draft_lookahead`` are keyword-only *in the Protocol*
    (SPEC T2). mypy ignores parameter names when it matches an ordinary method against a
    Protocol, so with a positional parameter an implementation that still calls it
    ``computed_prefill_lens`` would pass ``mypy --strict``; keyword-only parameters are
    matched by name, so mypy rejects it, as pyright does either way.

    What this costs: code typed against the Protocol passes those two arguments by
    keyword (``gatherer.gather_mm_embeddings(..., prefill_lens,
    num_computed_tokens=computed, draft_lookahead=1)``); a positional sixth argument is a
    ``call-arg`` error there. Implementations pay nothing: a positional-or-keyword
    parameter satisfies a keyword-only one, so they may accept the arguments positionally
    in the order this Protocol lists them, as the reference does, and callers of the concrete class may
    pass them that way. Parameter names beyond these two, default values and the
    positional order are checked at run time by :mod:`rtmm_protocol.signatures`.
    """

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        *,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 0,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Return ``(mm_embeds, is_mm_embed)`` for the scheduled tokens of the batch."""
        ...


@runtime_checkable
class ModelState(Protocol):
    """Prepares the multimodal part of the model inputs for each engine step (SPEC D1-D5, R1-R4)."""

    @property
    def is_realtime(self) -> bool: ...
    @property
    def supports_mm_inputs(self) -> bool: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def max_num_tokens(self) -> int: ...
    @property
    def dtype(self) -> torch.dtype: ...
    @property
    def device(self) -> torch.device: ...

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor | None:
        """Return a view of the persistent ``inputs_embeds`` buffer for a dummy run, or None."""
        ...

    def gather_mm_embeddings(
        self, input_batch: InputBatch, draft_lookahead: int = 0
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Gather the cached encoder outputs the batch's scheduled tokens need."""
        ...

    def get_mm_embeddings(
        self,
        scheduled_encoder_inputs: Mapping[str, Sequence[int]],
        input_batch: InputBatch,
        req_states: Any,
    ) -> torch.Tensor | None:
        """Encode, gather and merge into the persistent buffer; return its first rows.

        ``req_states`` is the engine's own per-request state, passed through as vLLM's
        engine passes it; the contract reads nothing from it. It has no default here, so
        an implementation whose parameter has none conforms, and it is typed ``Any``, so an
        implementation annotated with its engine's request-state class conforms too.
        """
        ...


@runtime_checkable
class ModelInputsHooks(Protocol[BatchT_contra]):
    """Where a state hands the model inputs of its own (SPEC M1), optional for a state.

    A real step's model inputs are what the state's merge returns, overridden by the
    entries of ``prepare_inputs``; a CUDA graph is captured on ``prepare_dummy_inputs``.
    A state with these hooks is judged on the ``inputs_embeds`` the model receives
    through them.

    Generic in the batch type, because a parameter is contravariant: a state whose
    ``prepare_inputs`` takes its engine's own batch class cannot accept *any*
    :class:`InputBatch`, so ``ModelInputsHooks[InputBatch]`` would reject it. Write
    ``ModelInputsHooks[MyBatch]`` with the batch class the state takes; ``MyBatch`` must
    be an :class:`InputBatch` (the type variable's bound), since the same batch reaches
    the state's ``get_mm_embeddings``.
    """

    def prepare_inputs(self, input_batch: BatchT_contra, req_states: Any) -> dict[str, Any]:
        """Model inputs of this step that replace the runner's own (``inputs_embeds``,
        ``positions``...)."""
        ...

    def prepare_dummy_inputs(self, num_reqs: int, num_tokens: int) -> dict[str, Any]:
        """Model inputs of a dummy run of ``num_tokens`` tokens (CUDA-graph capture)."""
        ...
