"""A CUDA error ends the worker process that met it: the check fails with that error as its
cause, and the next check starts in a new worker (a CUDA context that saw a device-side
assert is unusable, so a reused worker would fail every later check with it).

Run on the CPU with a target that raises torch's CUDA error (its type, and a plain
``RuntimeError`` with its text); the worker cannot tell these from the real thing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from suite.gallery_process import CUDA_ASSERT, cuda_error_state

from rtmm_conformance.api import check_model_state
from rtmm_conformance.results import Outcome
from rtmm_conformance.running.verdict import cuda_error_in
from rtmm_conformance.running.workers import InProcess, WorkerProcess, retire_worker

#: Checks in the order the runner plans them, each in two modes: D5 meets the CUDA error
#: in each, D1 and E1 do not (E1 calls the gather only).
BEFORE, FAULTY, AFTER = (
    "D1-dummy-shape-dtype-device",
    "D5-oversize-raises",
    "E1-malformed-batch-rejected",
)
_FAILING = {Outcome.FAILED, Outcome.WARNING}  # D5 is a SHOULD: a warning unless strict

_ERROR_KINDS = ["type", "message"]


def _pid_and_retire(why: str) -> int:
    if why:
        retire_worker(why)
    return os.getpid()


def test_a_retired_worker_gives_its_result_and_the_next_call_gets_a_new_one() -> None:
    executor = WorkerProcess()
    try:
        first = executor.call(_pid_and_retire, "", limit_s=60)
        assert executor.call(_pid_and_retire, "", limit_s=60) == first  # reused
        retiring = executor.call(_pid_and_retire, "a CUDA error", limit_s=60)
        assert retiring == first
        after = executor.call(_pid_and_retire, "", limit_s=60)
        assert isinstance(after, int)
        assert after != first
        assert executor.call(_pid_and_retire, "", limit_s=60) == after
    finally:
        executor.close()


def test_retiring_in_this_process_changes_nothing() -> None:
    executor = InProcess()
    assert executor.call(_pid_and_retire, "a CUDA error", limit_s=60) == os.getpid()
    assert executor.call(_pid_and_retire, "", limit_s=60) == os.getpid()


def _fail_while_handling(error: BaseException) -> None:
    """Raise a check's own failure while ``error`` is handled (its context)."""
    try:
        raise error
    except RuntimeError:
        raise AssertionError("the check's own failure") from None


@pytest.mark.parametrize("kind", _ERROR_KINDS)
def test_cuda_errors_are_recognised_through_causes_and_contexts(kind: str) -> None:
    error_type = getattr(torch, "AcceleratorError", RuntimeError)
    error = error_type(CUDA_ASSERT) if kind == "type" else RuntimeError(CUDA_ASSERT)
    with pytest.raises(AssertionError) as outer:
        _fail_while_handling(error)
    assert cuda_error_in(outer.value) is error  # from None hides it from tracebacks only
    assert cuda_error_in(RuntimeError("CUDA out of memory. Tried to allocate 2 GiB")) is None
    assert cuda_error_in(ValueError("max_num_tokens=8, got 9")) is None
    if hasattr(torch, "AcceleratorError"):
        assert cuda_error_in(torch.AcceleratorError("unspecified launch failure")) is not None


@pytest.mark.parametrize("kind", _ERROR_KINDS)
def test_a_cuda_error_fails_its_check_and_the_next_check_runs_in_a_new_worker(
    kind: str, tmp_path: Path
) -> None:
    log = tmp_path / "calls.txt"
    report = check_model_state(
        cuda_error_state(kind, str(log)),
        device="cpu",
        examples=3,
        checks=[BEFORE, FAULTY, AFTER],
        isolation="process",
    )
    assert [r.check_id for r in report.results] == [BEFORE] * 2 + [FAULTY] * 2 + [AFTER] * 2, (
        report.table()
    )
    for result in report.results:
        if result.check_id == FAULTY:
            # The check that met the error fails with it as its cause, and says so.
            assert result.outcome in _FAILING, report.table()
            assert CUDA_ASSERT in result.details
            assert "gallery_process.py" in result.cause_title, result.cause_title
            assert "worker process that ran this check was replaced" in result.details
        else:  # judged on their own merits, before the error and after it
            assert result.outcome is Outcome.PASSED, result.details
    # Pids in call order: a new worker after each mode of D5 (each met the error), and
    # at no other point; none of them is this process.
    calls = [line.split() for line in log.read_text(encoding="utf-8").splitlines()]
    segments: list[list[str]] = []
    for pid, event in calls:
        if not segments or segments[-1][0] != pid:
            segments.append([pid])
        segments[-1].append(event)
    assert len(segments) == 3, calls
    assert len({s[0] for s in segments}) == 3
    assert all("raises" in s for s in segments[:2]), segments
    assert "raises" not in segments[2]
    assert "gather_mm_embeddings" in segments[2]  # E1 ran in the third worker
    assert str(os.getpid()) not in {s[0] for s in segments}


def test_with_isolation_off_a_cuda_error_is_reported_and_the_run_goes_on(tmp_path: Path) -> None:
    report = check_model_state(
        cuda_error_state("message", ""),
        device="cpu",
        examples=3,
        checks=[FAULTY, AFTER],
        isolation="off",
    )
    for result in report.results:
        if result.check_id == FAULTY:
            assert result.outcome in _FAILING, report.table()
            assert CUDA_ASSERT in result.details
            assert "isolation off" in result.details
        else:
            assert result.outcome is Outcome.PASSED, result.details
