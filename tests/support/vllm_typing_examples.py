"""vLLM-shaped model states, batches and runners, for the typing tests of ``VllmModelState``.

They have the shapes of vLLM's ModelRunner V2 classes, written here without vLLM, so
that the typing cases (``tests/typing``), the ``typecheck`` command's tests and the
run-time signature check's tests run where vLLM is not installed
(``tests/test_vllm_typing.py`` checks vLLM's own classes where it is). Like vLLM's, the
states' methods take one concrete batch class, :class:`EngineBatch`, not any batch, and
the runners annotate their arrays as bare ``np.ndarray``. Each docstring says what is
wrong, if anything, and which checks see it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from rtmm_protocol import VllmInputBatch

# ---------------------------------------------------------------------- batches


@dataclass
class EngineBatch:
    """A batch class of an engine's own with the fields :class:`~rtmm_protocol.VllmInputBatch`
    reads, as plain dataclass fields with numpy arrays of unknown dtype, as vLLM's
    ``InputBatch`` declares them."""

    req_ids: list[str]
    num_reqs: int
    num_reqs_after_padding: int
    num_tokens: int
    num_tokens_after_padding: int
    input_ids: torch.Tensor
    positions: torch.Tensor
    idx_mapping: torch.Tensor
    query_start_loc: torch.Tensor
    num_scheduled_tokens: npt.NDArray[Any]
    query_start_loc_np: npt.NDArray[Any]
    prefill_len_np: npt.NDArray[Any]
    num_computed_tokens_np: npt.NDArray[Any]

    @classmethod
    def one_request(cls, num_tokens: int) -> EngineBatch:
        """A prefill step of one request of ``num_tokens`` tokens."""
        counts = np.array([num_tokens])
        return cls(
            req_ids=["r"],
            num_reqs=1,
            num_reqs_after_padding=1,
            num_tokens=num_tokens,
            num_tokens_after_padding=num_tokens,
            input_ids=torch.zeros(num_tokens, dtype=torch.int32),
            positions=torch.arange(num_tokens),
            idx_mapping=torch.zeros(1, dtype=torch.int64),
            query_start_loc=torch.tensor([0, num_tokens], dtype=torch.int32),
            num_scheduled_tokens=counts,
            query_start_loc_np=np.array([0, num_tokens]),
            prefill_len_np=counts,
            num_computed_tokens_np=np.array([0]),
        )


@dataclass
class ContractOnlyBatch:
    """The contract's batch fields (an :class:`~rtmm_protocol.InputBatch`) without the
    device tensors vLLM's hooks read: not a :class:`~rtmm_protocol.VllmInputBatch`."""

    req_ids: list[str]
    num_reqs: int
    num_tokens: int
    num_tokens_after_padding: int
    input_ids: torch.Tensor
    num_scheduled_tokens: npt.NDArray[Any]
    query_start_loc_np: npt.NDArray[Any]
    prefill_len_np: npt.NDArray[Any]
    num_computed_tokens_np: npt.NDArray[Any]


class EngineRequestStates:
    """The engine's per-request state, as vLLM's ``RequestState`` is passed through."""

    def __init__(self) -> None:
        self.req_id_to_index: dict[str, int] = {}


# ---------------------------------------------------------------------- model states


def _no_rows(num_tokens: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    return [], torch.zeros(num_tokens, dtype=torch.bool)


class _EngineStateBase:
    """What the vLLM-shaped states below share: all of ``VllmModelState`` but the merge."""

    def __init__(self, max_num_tokens: int = 16, inputs_embeds_size: int = 8) -> None:
        self.supports_mm_inputs = True
        self.inputs_embeds_size = inputs_embeds_size
        self.max_num_tokens = max_num_tokens
        self.device = torch.device("cpu")
        self.dtype: str | torch.dtype = "auto"
        self.inputs_embeds = torch.zeros(max_num_tokens, inputs_embeds_size)

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor:
        return self.inputs_embeds[:num_tokens]

    def gather_mm_embeddings(
        self, input_batch: EngineBatch, draft_lookahead: int = 0
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return _no_rows(input_batch.num_tokens)

    def prepare_inputs(
        self, input_batch: EngineBatch, req_states: EngineRequestStates
    ) -> dict[str, torch.Tensor | None]:
        return {"positions": input_batch.positions}

    def prepare_dummy_inputs(self, num_reqs: int, num_tokens: int) -> dict[str, Any]:
        return {"inputs_embeds": self.dummy_inputs_embeds(num_tokens)}


class EngineModelState(_EngineStateBase):
    """Conforms to ``VllmModelState[EngineBatch]``: shaped like vLLM's ``DefaultModelState``
    (every method takes :class:`EngineBatch`, ``req_states`` is the engine's class, the
    dtype may be a name, the results are narrower than the Protocol's)."""

    def prepare_inputs_embeds(
        self,
        scheduled_encoder_inputs: dict[str, list[int]],
        input_batch: EngineBatch,
        req_states: EngineRequestStates,
    ) -> torch.Tensor:
        return self.inputs_embeds[: input_batch.num_tokens_after_padding]


class EngineModelStateSubclass(EngineModelState):
    """Conforms: a subclass overriding one hook, as a vLLM author subclasses
    ``DefaultModelState``."""

    def prepare_inputs(
        self, input_batch: EngineBatch, req_states: EngineRequestStates
    ) -> dict[str, torch.Tensor | None]:
        inputs = super().prepare_inputs(input_batch, req_states)
        inputs["inputs_embeds"] = self.inputs_embeds[: input_batch.num_tokens_after_padding]
        return inputs


class AnyBatchModelState:
    """Conforms to ``VllmModelState[VllmInputBatch]``, and so, the batch type being
    contravariant, to ``VllmModelState[EngineBatch]`` too: its methods take any
    :class:`~rtmm_protocol.VllmInputBatch`, and a ``Mapping`` of encoder inputs."""

    def __init__(self) -> None:
        self.supports_mm_inputs = False
        self.inputs_embeds_size = 8
        self.max_num_tokens = 16
        self.device = torch.device("cpu")

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor | None:
        return None

    def gather_mm_embeddings(
        self, input_batch: VllmInputBatch, draft_lookahead: int = 0
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return _no_rows(input_batch.num_tokens)

    def prepare_inputs_embeds(
        self,
        scheduled_encoder_inputs: Mapping[str, Sequence[int]],
        input_batch: VllmInputBatch,
        req_states: object,
    ) -> torch.Tensor | None:
        return None

    def prepare_inputs(self, input_batch: VllmInputBatch, req_states: object) -> dict[str, Any]:
        return {}

    def prepare_dummy_inputs(self, num_reqs: int, num_tokens: int) -> dict[str, Any]:
        return {}


class PreRenameModelState(_EngineStateBase):
    """Spells the merge as vLLM 0.28 and before did, ``get_mm_embeddings``: no
    ``prepare_inputs_embeds`` (every check)."""

    def get_mm_embeddings(
        self,
        scheduled_encoder_inputs: dict[str, list[int]],
        input_batch: EngineBatch,
        req_states: EngineRequestStates,
    ) -> torch.Tensor:
        return self.inputs_embeds[: input_batch.num_tokens_after_padding]


class OtherBatch(EngineBatch):
    """A batch class derived from :class:`EngineBatch`."""


class MixedBatchModelState(EngineModelState):
    """``prepare_inputs`` takes only :class:`OtherBatch`, the other methods any
    :class:`EngineBatch`: not a ``VllmModelState[EngineBatch]`` (type checkers only; the
    run-time check reads no types)."""

    def prepare_inputs(  # type: ignore[override]
        self, input_batch: OtherBatch, req_states: EngineRequestStates
    ) -> dict[str, torch.Tensor | None]:
        return {}


class NoLookaheadDefaultModelState(EngineModelState):
    """``gather_mm_embeddings`` lost the ``draft_lookahead`` default (every check)."""

    def gather_mm_embeddings(  # type: ignore[override]
        self, input_batch: EngineBatch, draft_lookahead: int
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return _no_rows(input_batch.num_tokens)


class NoDummyHookModelState:
    """Has no ``prepare_dummy_inputs`` (every check): CUDA graphs could not be captured
    from its inputs."""

    def __init__(self) -> None:
        self.supports_mm_inputs = False
        self.inputs_embeds_size = 8
        self.max_num_tokens = 16
        self.device = torch.device("cpu")

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor | None:
        return None

    def gather_mm_embeddings(
        self, input_batch: EngineBatch, draft_lookahead: int = 0
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return _no_rows(input_batch.num_tokens)

    def prepare_inputs_embeds(
        self,
        scheduled_encoder_inputs: dict[str, list[int]],
        input_batch: EngineBatch,
        req_states: object,
    ) -> torch.Tensor | None:
        return None

    def prepare_inputs(self, input_batch: EngineBatch, req_states: object) -> dict[str, Any]:
        return {}


# ---------------------------------------------------------------------- encoder runners


class EngineRunner:
    """Conforms to ``MMEmbeddingGatherer``: vLLM 0.28 to 0.33's gather signature (arrays
    of unknown dtype, every argument positional too)."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: npt.NDArray[Any],
        query_start_loc: npt.NDArray[Any],
        prefill_lens: npt.NDArray[Any],
        num_computed_tokens: npt.NDArray[Any],
        draft_lookahead: int = 0,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return _no_rows(total_num_scheduled_tokens)


class PreRenameEngineRunner:
    """vLLM 0.24.0's gather signature: the sixth argument still ``computed_prefill_lens``
    (every check; mypy because the Protocol makes ``num_computed_tokens`` keyword-only)."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: npt.NDArray[Any],
        query_start_loc: npt.NDArray[Any],
        prefill_lens: npt.NDArray[Any],
        computed_prefill_lens: npt.NDArray[Any],
        draft_lookahead: int = 0,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return _no_rows(total_num_scheduled_tokens)
