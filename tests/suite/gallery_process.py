"""Broken targets that attack the process running the suite, each under one condition.

Each is the reference state with one *process fault* that fires only in the situation
one clause is about, so the suite must report it as a failure of that clause's check
and of no other, and the run must go on: a crash (``os._exit``), a segfault, a
``KeyboardInterrupt`` raised by the target, a hang in pure Python, and a hang that
swallows every interrupt sent to it. :class:`CudaErrorState` raises the error a
device-side assert gives, which leaves a real process's CUDA context unusable.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from suite.gallery import BrokenTarget

from rtmm_conformance import ConformanceContext
from rtmm_protocol.protocols import InputBatch
from rtmm_protocol.reference import ReferenceModelState

__all__ = [
    "PROCESS_FAULTS",
    "PROCESS_GALLERY",
    "CudaErrorState",
    "ProcessFaultState",
    "cuda_error_state",
    "process_state",
]

#: Faults that take the process down or never return, by name.
PROCESS_FAULTS = (
    "exits-on-oversize-dummy",
    "segfaults-on-zero-token-request",
    "interrupts-on-lookahead-miss",
    "loops-on-empty-dummy",
    "loops-deaf-on-malformed-batch",
)


def _loop_forever() -> None:
    while True:
        pass


def _loop_deaf() -> None:
    """Loop, swallowing whatever is raised into the loop (a timeout's interrupt too)."""
    while True:
        try:
            time.sleep(0.01)
        except BaseException:  # deliberately deaf
            continue


class ProcessFaultState(ReferenceModelState):
    """The reference state with one process fault."""

    def __init__(self, *args: Any, fault: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if fault not in PROCESS_FAULTS:
            raise ValueError(f"unknown process fault {fault!r}")
        self.fault = fault

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor | None:
        """The dummy view; ends the process for an over-size request (D5), or loops
        forever for an empty one (D1)."""
        if self.fault == "exits-on-oversize-dummy" and num_tokens > self.max_num_tokens:
            os._exit(3)
        if self.fault == "loops-on-empty-dummy" and num_tokens == 0:
            _loop_forever()
        return super().dummy_inputs_embeds(num_tokens)

    def gather_mm_embeddings(
        self, input_batch: InputBatch, draft_lookahead: int = 0
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The reference gather, unless this state's condition holds."""
        fault = self.fault
        if fault == "segfaults-on-zero-token-request" and self._idle_over_a_miss(input_batch):
            ctypes.string_at(0)  # reads address 0: SIGSEGV
        if fault == "interrupts-on-lookahead-miss" and self._lookahead_miss(
            input_batch, draft_lookahead
        ):
            raise KeyboardInterrupt
        if fault == "loops-deaf-on-malformed-batch" and self._malformed(input_batch):
            _loop_deaf()
        return super().gather_mm_embeddings(input_batch, draft_lookahead)

    def _idle_over_a_miss(self, batch: InputBatch) -> bool:
        """Whether a request with zero scheduled tokens has its window start inside the
        placeholder of a feature whose output is missing (the G1 case nothing else draws)."""
        cache = self.encoder_cache
        for index, req_id in enumerate(batch.req_ids[: batch.num_reqs]):
            if int(batch.num_scheduled_tokens[index]) != 0:
                continue
            start = int(batch.num_computed_tokens_np[index])
            for feature in cache.mm_features.get(req_id, []):
                pos = feature.mm_position
                if pos.offset < start < pos.offset + pos.length and not dict.__contains__(
                    cache.encoder_outputs, feature.identifier
                ):
                    return True
        return False

    @staticmethod
    def _malformed(batch: InputBatch) -> bool:
        """Whether the batch's arrays disagree with each other (an E1 case)."""
        n = batch.num_reqs
        scheduled = np.asarray(batch.num_scheduled_tokens)
        arrays = (batch.num_scheduled_tokens, batch.prefill_len_np, batch.num_computed_tokens_np)
        return (
            len(batch.req_ids) != n
            or any(len(a) != n for a in arrays)
            or len(batch.query_start_loc_np) != n + 1
            or bool((scheduled < 0).any())
            or int(scheduled.sum()) != batch.num_tokens
        )

    def _lookahead_miss(self, input_batch: InputBatch, lookahead: int) -> bool:
        """Whether a gathering request misses an output that only the look-ahead reaches
        (the outputs of skipped requests are not looked at: G2 forbids it)."""
        if lookahead <= 0:
            return False
        cache = self.encoder_cache
        for index, req_id in enumerate(input_batch.req_ids[: input_batch.num_reqs]):
            computed = int(input_batch.num_computed_tokens_np[index])
            if not self.is_realtime and computed + lookahead >= input_batch.prefill_len_np[index]:
                continue
            end = computed + int(input_batch.num_scheduled_tokens[index])
            for feature in cache.mm_features.get(req_id, []):
                offset = feature.mm_position.offset
                if (
                    end <= offset < end + lookahead
                    and feature.identifier not in cache.encoder_outputs
                ):
                    return True
        return False


class _ProcessStateFactory:
    """A picklable factory of reference states with one process fault."""

    def __init__(self, fault: str) -> None:
        self.__qualname__ = f"process_state[{fault}]"
        self.fault = fault

    def __call__(self, ctx: ConformanceContext) -> object:
        return ProcessFaultState(
            ctx.model,
            ctx.encoder_cache,
            hidden_size=ctx.hidden_size,
            max_num_tokens=ctx.max_num_tokens,
            dtype=ctx.dtype,
            device=ctx.device,
            validate=ctx.validate,
            fault=self.fault,
        )


def process_state(fault: str) -> Callable[[ConformanceContext], object]:
    """A factory of reference states with the process fault ``fault``."""
    return _ProcessStateFactory(fault)


#: What a kernel's failed bounds check reports (torch.AcceleratorError's text on CUDA).
CUDA_ASSERT = "CUDA error: device-side assert triggered"


class CudaErrorState(ReferenceModelState):
    """The reference state, whose over-size dummy run fails as a kernel's bounds check
    does on a GPU: with torch's CUDA error (``error="type"``: ``torch.AcceleratorError``,
    ``"message"``: a ``RuntimeError`` with its text, as older torch raises). Each call of
    an entry point appends ``pid method`` to ``log`` when one is given, and each error
    ``pid raises``."""

    def __init__(self, *args: Any, error: str, log: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.error = error
        self.log = log

    def _note(self, method: str) -> None:
        if self.log:
            with open(self.log, "a", encoding="utf-8") as log:
                log.write(f"{os.getpid()} {method}\n")

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor | None:
        """The dummy view; a CUDA error for an over-size request (D5)."""
        self._note("dummy_inputs_embeds")
        if num_tokens > self.max_num_tokens:
            self._note("raises")
            error_type = getattr(torch, "AcceleratorError", None)
            if self.error == "type" and error_type is not None:
                raise error_type(CUDA_ASSERT)
            raise RuntimeError(CUDA_ASSERT)
        return super().dummy_inputs_embeds(num_tokens)

    def gather_mm_embeddings(
        self, input_batch: InputBatch, draft_lookahead: int = 0
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The reference gather."""
        self._note("gather_mm_embeddings")
        return super().gather_mm_embeddings(input_batch, draft_lookahead)


class _CudaErrorFactory:
    """A picklable factory of :class:`CudaErrorState`."""

    def __init__(self, error: str, log: str) -> None:
        self.__qualname__ = f"cuda_error_state[{error}]"
        self.error = error
        self.log = log

    def __call__(self, ctx: ConformanceContext) -> object:
        return CudaErrorState(
            ctx.model,
            ctx.encoder_cache,
            hidden_size=ctx.hidden_size,
            max_num_tokens=ctx.max_num_tokens,
            dtype=ctx.dtype,
            device=ctx.device,
            validate=ctx.validate,
            error=self.error,
            log=self.log,
        )


def cuda_error_state(error: str = "type", log: str = "") -> Callable[[ConformanceContext], object]:
    """A factory of states that raise torch's CUDA error on an over-size dummy run."""
    return _CudaErrorFactory(error, log)


PROCESS_GALLERY: tuple[BrokenTarget, ...] = (
    BrokenTarget("ends the process for an over-size dummy run", process_state("exits-on-oversize-dummy"), "D5", "D5-oversize-raises"),
    BrokenTarget("segfaults on a zero-token request over a miss", process_state("segfaults-on-zero-token-request"), "G1", "G1-zero-scheduled-contributes-nothing"),
    BrokenTarget("raises KeyboardInterrupt for a look-ahead miss", process_state("interrupts-on-lookahead-miss"), "G7", "G7-lookahead-miss-falls-back"),
    BrokenTarget("loops forever for an empty dummy run", process_state("loops-on-empty-dummy"), "D1", "D1-dummy-shape-dtype-device"),
    BrokenTarget("CUDA error for an over-size dummy run", cuda_error_state(), "D5", "D5-oversize-raises"),
    BrokenTarget(
        "deaf loop on a malformed batch", process_state("loops-deaf-on-malformed-batch"), "E1", "E1-malformed-batch-rejected",
        also=("E3",), why="E3 requires that no bad input crashes or stalls the process",
    ),
)  # fmt: skip
