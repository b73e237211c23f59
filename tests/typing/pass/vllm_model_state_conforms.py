"""vLLM-shaped states satisfy VllmModelState parametrised with the batch class they take."""

from __future__ import annotations

from typing import Any, TypeAlias

import torch
from support.vllm_typing_examples import (
    AnyBatchModelState,
    EngineBatch,
    EngineModelState,
    EngineModelStateSubclass,
    EngineRequestStates,
    EngineRunner,
)
from typing_extensions import assert_type

from rtmm_protocol import (
    InputBatch,
    MMEmbeddingGatherer,
    ModelInputsHooks,
    VllmInputBatch,
    VllmModelState,
)

Gathered: TypeAlias = tuple[list[torch.Tensor], torch.Tensor]

# A state whose methods take its engine's own batch class, and a subclass of it.
state: VllmModelState[EngineBatch] = EngineModelState()
subclass: VllmModelState[EngineBatch] = EngineModelStateSubclass()
hooks: ModelInputsHooks[EngineBatch] = EngineModelState()

# Contravariance: a state that takes any VllmInputBatch serves a runner holding an EngineBatch.
any_batch: VllmModelState[VllmInputBatch] = AnyBatchModelState()
narrowed: VllmModelState[EngineBatch] = any_batch

# The batch class satisfies both batch Protocols.
batch: VllmInputBatch = EngineBatch.one_request(4)
contract_batch: InputBatch = EngineBatch.one_request(4)

# vLLM's runner signature (arrays of unknown dtype, the new name accepted positionally).
runner: MMEmbeddingGatherer = EngineRunner()


def use(state: VllmModelState[EngineBatch], batch: EngineBatch) -> None:
    requests = EngineRequestStates()
    assert_type(state.dummy_inputs_embeds(4), torch.Tensor | None)
    assert_type(state.gather_mm_embeddings(batch), Gathered)
    assert_type(state.gather_mm_embeddings(batch, draft_lookahead=1), Gathered)
    assert_type(state.prepare_inputs_embeds({"r": [0]}, batch, requests), torch.Tensor | None)
    assert_type(state.prepare_inputs(batch, requests), dict[str, Any])
    assert_type(state.prepare_dummy_inputs(1, 4), dict[str, Any])
    assert_type(state.inputs_embeds_size, int)
    assert_type(state.device, torch.device)
