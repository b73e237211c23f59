"""Subclasses of vLLM's model states with one fault each where the model reads its inputs:
``prepare_inputs`` (a real step's overrides) or ``prepare_dummy_inputs`` (what a CUDA graph
is captured on), SPEC M1.

Importable only where vLLM is (the tests that use it skip elsewhere); the adapter builds
them by name, ``vllm:vllm_inputs_gallery:CLASS``. Each is written as a vLLM model-state
author would write it, and :data:`INPUTS_GALLERY` names the check that must catch it as
the class's own and the other clauses its fault reaches (tests/test_vllm_inputs_gallery.py
runs every contract check and requires that nothing else fails):

* :class:`OwnCaptureBufferState` captures graphs on a persistent buffer of its own that no
  real step writes (SPEC D2: the graph would replay stale rows forever).
* :class:`CopiedCaptureState` captures on a copy of the persistent buffer, made per call
  (SPEC D2; on a GPU also D4, a capture that allocates).
* :class:`TextOnlyOverrideState` re-embeds the tokens into the persistent buffer in
  ``prepare_inputs``, after the merge: the model never receives a multimodal row (SPEC R2;
  a realtime decode step loses its rows too, R3).
* :class:`FailingPrepareInputsState` raises in ``prepare_inputs`` (SPEC M1; every other check
  that runs a real step or an eager dummy run through the hooks meets it and is reported
  blocked by M1's check, not failed).
* :class:`DroppedEncoderOutputsState` is vLLM's cross-attention state whose
  ``prepare_inputs`` forgets the step's encoder outputs (SPEC M2).
* :class:`StaleNgramCaptureState` is vLLM's Qwen4-Exp state (a hybrid model's, with
  inputs of its own) whose captures read a fresh ``inputs_embeds`` tensor (SPEC D2).
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.worker.gpu.model_states.default import (  # type: ignore[import-not-found, unused-ignore]
    DefaultModelState,
)

__all__ = [
    "INPUTS_GALLERY",
    "CopiedCaptureState",
    "FailingPrepareInputsState",
    "OwnCaptureBufferState",
    "TextOnlyOverrideState",
]


class OwnCaptureBufferState(DefaultModelState):  # type: ignore[misc, unused-ignore]
    """Captures on a buffer of its own, allocated once, that real steps never write."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._capture_buffer = torch.zeros(
            self.max_num_tokens, self.inputs_embeds_size, dtype=self.dtype, device=self.device
        )

    def prepare_dummy_inputs(self, num_reqs: int, num_tokens: int) -> dict[str, Any]:
        inputs: dict[str, Any] = super().prepare_dummy_inputs(num_reqs, num_tokens)
        inputs["inputs_embeds"] = self._capture_buffer[:num_tokens]  # the bug
        return inputs


class CopiedCaptureState(DefaultModelState):  # type: ignore[misc, unused-ignore]
    """Captures on a copy of the persistent buffer, made per call."""

    def prepare_dummy_inputs(self, num_reqs: int, num_tokens: int) -> dict[str, Any]:
        inputs: dict[str, Any] = super().prepare_dummy_inputs(num_reqs, num_tokens)
        inputs["inputs_embeds"] = inputs["inputs_embeds"].clone()  # the bug
        return inputs


class TextOnlyOverrideState(DefaultModelState):  # type: ignore[misc, unused-ignore]
    """Re-embeds the step's tokens into the persistent buffer after the merge."""

    def prepare_inputs(self, input_batch: Any, req_states: Any) -> dict[str, Any]:
        inputs: dict[str, Any] = super().prepare_inputs(input_batch, req_states)
        n = input_batch.num_tokens
        buffer = self.encoder_runner.inputs_embeds
        buffer[:n] = self.model.embed_input_ids(input_batch.input_ids[:n])  # the bug
        inputs["inputs_embeds"] = buffer[: input_batch.num_tokens_after_padding]
        return inputs


class FailingPrepareInputsState(DefaultModelState):  # type: ignore[misc, unused-ignore]
    """Raises in ``prepare_inputs``, as a half-finished override would."""

    def prepare_inputs(self, input_batch: Any, req_states: Any) -> dict[str, Any]:
        raise RuntimeError("positions for this batch are not ready")  # the bug


#: Each class, the check that must catch its fault as the class's own, and the clauses
#: its fault reaches besides that check's (every check of those may fail too; a check of
#: any other clause must not).
INPUTS_GALLERY: dict[str, tuple[str, tuple[str, ...]]] = {
    "OwnCaptureBufferState": ("D2-real-path-shares-storage", ("R4",)),
    "CopiedCaptureState": ("D2-dummy-views-share-storage", ("D4", "R4")),
    "TextOnlyOverrideState": ("R2-merged-rows-match-eager", ("R3", "R4")),
    "FailingPrepareInputsState": ("M1-hooks-hand-model-inputs", ()),
}

try:  # vLLM's cross-attention state, where this release has it
    from vllm.v1.worker.gpu.model_states.encoder_decoder import (  # type: ignore[import-not-found, unused-ignore]
        EncoderDecoderModelState,
    )
except ImportError:
    pass
else:

    class DroppedEncoderOutputsState(EncoderDecoderModelState):  # type: ignore[misc, unused-ignore]
        """vLLM's cross-attention state whose overrides lose the step's encoder outputs."""

        def prepare_inputs(self, input_batch: Any, req_states: Any) -> dict[str, Any]:
            inputs: dict[str, Any] = super().prepare_inputs(input_batch, req_states)
            inputs["encoder_outputs"] = []  # the bug
            return inputs

    INPUTS_GALLERY["DroppedEncoderOutputsState"] = ("M2-encoder-outputs-reach-model", ())
    __all__ += ["DroppedEncoderOutputsState"]

try:  # the state of vLLM's Qwen4-Exp models, where this release has it
    from vllm.models.qwen4_exp.nvidia.model_state import (  # type: ignore[import-not-found, unused-ignore]
        Qwen4ExpModelState,
    )
except ImportError:
    pass
else:

    class StaleNgramCaptureState(Qwen4ExpModelState):  # type: ignore[misc, unused-ignore]
        """vLLM's Qwen4-Exp state whose captures read a fresh tensor."""

        def prepare_dummy_inputs(self, num_reqs: int, num_tokens: int) -> dict[str, Any]:
            inputs: dict[str, Any] = super().prepare_dummy_inputs(num_reqs, num_tokens)
            inputs["inputs_embeds"] = torch.zeros(  # the bug: not the buffer real steps fill
                num_tokens, self.inputs_embeds_size, dtype=self.dtype, device=self.device
            )
            return inputs

    INPUTS_GALLERY["StaleNgramCaptureState"] = ("D2-dummy-views-share-storage", ("D4", "R4"))
    __all__ += ["StaleNgramCaptureState"]
