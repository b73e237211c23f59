"""The contract in vLLM's spelling, at run time: the Protocols' type parameters and what
``isinstance`` says of vLLM-shaped classes (written without vLLM;
``tests/test_vllm_typing.py`` checks vLLM's own classes where it is installed)."""

from __future__ import annotations

from typing import TypeVar

import pytest
from support import typing_examples
from support.vllm_typing_examples import (
    AnyBatchModelState,
    ContractOnlyBatch,
    EngineBatch,
    EngineModelState,
    EngineModelStateSubclass,
    EngineRunner,
    NoDummyHookModelState,
    PreRenameEngineRunner,
    PreRenameModelState,
)

import rtmm_protocol
from rtmm_protocol import (
    InputBatch,
    MMEmbeddingGatherer,
    ModelInputsHooks,
    ModelState,
    VllmInputBatch,
    VllmModelState,
    vllm_protocols,
)


def _only_parameter(protocol: type) -> TypeVar:
    (parameter,) = protocol.__parameters__  # type: ignore[attr-defined]
    assert isinstance(parameter, TypeVar)
    return parameter


def test_vllm_model_state_is_contravariant_in_a_batch_bound_to_vllm_input_batch() -> None:
    parameter = _only_parameter(VllmModelState)
    assert parameter is vllm_protocols.VllmBatchT_contra
    assert parameter.__contravariant__
    assert parameter.__bound__ is VllmInputBatch


def test_model_inputs_hooks_is_contravariant_in_a_batch_bound_to_input_batch() -> None:
    parameter = _only_parameter(ModelInputsHooks)
    assert parameter.__contravariant__
    assert parameter.__bound__ is InputBatch


def test_the_protocols_are_exported_from_the_package() -> None:
    assert rtmm_protocol.VllmModelState is vllm_protocols.VllmModelState
    assert rtmm_protocol.VllmInputBatch is vllm_protocols.VllmInputBatch
    assert {"VllmModelState", "VllmInputBatch"} <= set(rtmm_protocol.__all__)
    # Parametrised as the typing page writes it.
    assert VllmModelState[EngineBatch].__origin__ is VllmModelState  # type: ignore[attr-defined]


def test_an_engine_batch_is_a_vllm_input_batch_and_a_contract_batch() -> None:
    batch = EngineBatch.one_request(4)
    assert isinstance(batch, VllmInputBatch)
    assert isinstance(batch, InputBatch)


def test_a_batch_without_the_device_fields_is_only_a_contract_batch() -> None:
    full = EngineBatch.one_request(4)
    fields = {name: getattr(full, name) for name in ContractOnlyBatch.__dataclass_fields__}
    batch = ContractOnlyBatch(**fields)
    assert isinstance(batch, InputBatch)
    assert not isinstance(batch, VllmInputBatch)


@pytest.mark.parametrize(
    "state", [EngineModelState(), EngineModelStateSubclass(), AnyBatchModelState()]
)
def test_vllm_shaped_states_are_vllm_model_states_and_have_the_hooks(state: object) -> None:
    assert isinstance(state, VllmModelState)
    assert isinstance(state, ModelInputsHooks)
    # vLLM's spelling is not the contract's: no is_realtime, hidden_size, get_mm_embeddings.
    assert not isinstance(state, ModelState)


@pytest.mark.parametrize(
    "state", [PreRenameModelState(), NoDummyHookModelState(), typing_examples.TextOnlyState()]
)
def test_states_lacking_a_member_are_not_vllm_model_states(state: object) -> None:
    assert not isinstance(state, VllmModelState)


def test_runners_are_gatherers_by_their_members() -> None:
    # isinstance reads member names only: the old argument name is for the type checkers
    # and the run-time signature check (tests/test_signatures.py).
    assert isinstance(EngineRunner(), MMEmbeddingGatherer)
    assert isinstance(PreRenameEngineRunner(), MMEmbeddingGatherer)
