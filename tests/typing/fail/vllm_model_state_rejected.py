"""What VllmModelState rejects: a batch type wider than the state's, a batch class that
is not a VllmInputBatch, vLLM 0.28's name for the merge, mixed batch classes, a dropped
default, a missing hook."""

from __future__ import annotations

from support.vllm_typing_examples import (
    ContractOnlyBatch,
    EngineBatch,
    EngineModelState,
    MixedBatchModelState,
    NoDummyHookModelState,
    NoLookaheadDefaultModelState,
    PreRenameModelState,
)

from rtmm_protocol import InputBatch, ModelInputsHooks, VllmInputBatch, VllmModelState

# Parameters are contravariant: a state taking EngineBatch cannot take any VllmInputBatch.
too_wide: VllmModelState[VllmInputBatch] = EngineModelState()  # E: assignment  # P: reportAssignmentType
too_wide_hooks: ModelInputsHooks[InputBatch] = EngineModelState()  # E: assignment  # P: reportAssignmentType


def widen(state: VllmModelState[EngineBatch]) -> VllmModelState[VllmInputBatch]:
    return state  # E: return-value  # P: reportReturnType


# The bound: the hooks' batch must carry the device tensors vLLM's hooks read.
def no_device_fields(state: VllmModelState[ContractOnlyBatch]) -> None:  # E: type-var  # P: reportInvalidTypeArguments
    pass


renamed: VllmModelState[EngineBatch] = PreRenameModelState()  # E: assignment  # P: reportAssignmentType
mixed: VllmModelState[EngineBatch] = MixedBatchModelState()  # E: assignment  # P: reportAssignmentType
no_default: VllmModelState[EngineBatch] = NoLookaheadDefaultModelState()  # E: assignment  # P: reportAssignmentType
no_dummy_hook: VllmModelState[EngineBatch] = NoDummyHookModelState()  # E: assignment  # P: reportAssignmentType
