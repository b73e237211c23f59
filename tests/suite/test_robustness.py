"""A misbehaving target fails checks with clear messages; the run itself never breaks."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rtmm_conformance import ConformanceContext, ModeNotSupported
from rtmm_conformance.api import check_model_state
from rtmm_conformance.reporting.report import ConformanceReport
from rtmm_conformance.results import Outcome
from rtmm_conformance.targets import reference_model_state
from rtmm_protocol.reference import ReferenceModelState


class _Misbehaving(ReferenceModelState):
    """The reference state whose gather does ``how``."""

    how = "raise"

    def gather_mm_embeddings(self, input_batch: Any, draft_lookahead: int = 0) -> Any:
        if self.how == "raise":
            return 1 / 0
        if self.how == "none":
            return None
        if self.how == "loop":
            while True:
                pass
        if self.how == "sleep":
            time.sleep(3)
        if self.how == "native-deadlock":
            lock = threading.Lock()
            lock.acquire()
            lock.acquire()  # blocks in C: no Python-level interrupt reaches it
        if self.how in ("exit", "system-exit-in-gather"):
            sys.exit(3)
        if self.how == "os-exit":
            os._exit(7)
        if self.how == "segfault":
            ctypes.string_at(0)
        if self.how == "keyboard-interrupt":
            raise KeyboardInterrupt
        if self.how == "tamper":
            torch.equal = lambda *args, **kwargs: True
            torch.Tensor.nonzero = lambda self, *args, **kwargs: self[:0]  # type: ignore[method-assign]
            np.array_equal = lambda *args, **kwargs: True
        if self.how == "clear-cache":
            self.encoder_cache.encoder_outputs.clear()
        if self.how == "default-dtype":
            torch.set_default_dtype(torch.float64)
        return super().gather_mm_embeddings(input_batch, draft_lookahead)


def _factory(how: str) -> Any:
    def factory(ctx: ConformanceContext) -> ReferenceModelState:
        state = reference_model_state(ctx)
        state.__class__ = _Misbehaving
        state.how = how  # type: ignore[attr-defined]  # set on the class just above
        return state

    return factory


class _MisbehavingFactory:
    """A factory of :class:`_Misbehaving` states that a worker process can receive."""

    def __init__(self, how: str) -> None:
        self.how = how

    def __call__(self, ctx: ConformanceContext) -> ReferenceModelState:
        return _factory(self.how)(ctx)  # type: ignore[no-any-return]


def _factory_at_module_level(how: str) -> _MisbehavingFactory:
    return _MisbehavingFactory(how)


def _run(factory: Any, checks: list[str], **options: Any) -> ConformanceReport:
    return check_model_state(factory, device="cpu", examples=2, checks=checks, **options)


def _outcomes(report: ConformanceReport) -> dict[str, set[Outcome]]:
    found: dict[str, set[Outcome]] = {}
    for result in report.results:
        found.setdefault(result.check_id, set()).add(result.outcome)
    return found


def test_a_raising_target_fails_with_the_error_named() -> None:
    report = _run(_factory("raise"), ["G1-window-slots", "D2-dummy-views-share-storage"])
    outcomes = _outcomes(report)
    assert outcomes["G1-window-slots"] == {Outcome.FAILED}
    assert outcomes["D2-dummy-views-share-storage"] == {Outcome.PASSED}
    details = next(r.details for r in report.results if r.check_id == "G1-window-slots")
    assert "ZeroDivisionError" in details
    assert "test_robustness.py" in details


def test_a_wrong_return_type_is_described() -> None:
    report = _run(_factory("none"), ["G5-rows-match-mask"])
    assert _outcomes(report)["G5-rows-match-mask"] == {Outcome.FAILED}
    assert all("other than a pair" in r.reason for r in report.results)


@pytest.mark.parametrize("how", ["loop", "sleep"])
def test_a_hanging_target_is_waited_for_once(how: str) -> None:
    started = time.perf_counter()
    report = _run(
        _factory_at_module_level(how),
        ["G4-mask-type-shape", "D1-dummy-shape-dtype-device"],
        timeout_s=1.0,
        isolation="process",
    )
    assert time.perf_counter() - started < 20
    g4 = {r.mode: r for r in report.results if r.check_id == "G4-mask-type-shape"}
    assert g4["realtime"].outcome is Outcome.FAILED
    assert "did not finish within 1 s" in g4["realtime"].reason
    assert "gather_mm_embeddings" in g4["realtime"].reason
    assert g4["non-realtime"].outcome is Outcome.BLOCKED
    assert "G4-mask-type-shape[realtime]" in g4["non-realtime"].reason
    assert _outcomes(report)["D1-dummy-shape-dtype-device"] == {Outcome.PASSED}
    assert not report.ok


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid``, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_target_stuck_in_native_code_is_killed_with_nothing_left_running() -> None:
    before = set(_descendants(os.getpid()))
    report = _run(
        _factory_at_module_level("native-deadlock"),
        ["G4-mask-type-shape", "D1-dummy-shape-dtype-device"],
        timeout_s=1.0,
        isolation="process",
    )
    g4 = {r.mode: r.outcome for r in report.results if r.check_id == "G4-mask-type-shape"}
    assert g4 == {"realtime": Outcome.FAILED, "non-realtime": Outcome.BLOCKED}
    assert _outcomes(report)["D1-dummy-shape-dtype-device"] == {Outcome.PASSED}
    # Every worker was killed and reaped: what is left is multiprocessing's own idle
    # helpers (the forkserver that starts workers, its resource tracker).
    left = [pid for pid in _descendants(os.getpid()) if pid not in before]
    commands = [Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ") for pid in left]
    assert all(b"multiprocessing" in command for command in commands), commands


@pytest.mark.parametrize(
    "how", ["os-exit", "segfault", "keyboard-interrupt", "system-exit-in-gather"]
)
def test_a_target_that_ends_or_interrupts_the_process_fails_one_check(how: str) -> None:
    report = _run(
        _factory_at_module_level(how),
        ["G1-window-slots", "D1-dummy-shape-dtype-device"],
        isolation="process",
    )
    outcomes = _outcomes(report)
    assert outcomes["G1-window-slots"] == {Outcome.FAILED}, report.table()
    assert outcomes["D1-dummy-shape-dtype-device"] == {Outcome.PASSED}
    reasons = " ".join(r.reason + r.details for r in report.results)
    expected = {
        "os-exit": "exited with code 7",
        "segfault": "SIGSEGV",
        "keyboard-interrupt": "KeyboardInterrupt",
        "system-exit-in-gather": "SystemExit",
    }[how]
    assert expected in reasons
    causes = report.causes()
    assert len(causes) == 1
    assert "test_robustness.py" in causes[0].title
    assert report.complete


def test_a_target_calling_sys_exit_fails_a_check_only() -> None:
    report = _run(_factory("exit"), ["G1-window-slots", "D1-dummy-shape-dtype-device"])
    outcomes = _outcomes(report)
    assert outcomes["G1-window-slots"] == {Outcome.FAILED}
    assert outcomes["D1-dummy-shape-dtype-device"] == {Outcome.PASSED}


def test_a_target_corrupting_the_cache_fails_g8_and_not_the_next_checks() -> None:
    report = _run(_factory("clear-cache"), ["G8-cache-unchanged", "D3-dummy-no-encoder-no-cache"])
    outcomes = _outcomes(report)
    assert outcomes["G8-cache-unchanged"] == {Outcome.FAILED}
    assert outcomes["D3-dummy-no-encoder-no-cache"] == {Outcome.PASSED}


def test_global_torch_state_changed_by_a_target_is_restored() -> None:
    before = torch.get_default_dtype()
    _run(_factory("default-dtype"), ["G1-window-slots"])
    assert torch.get_default_dtype() == before


def test_a_factory_that_raises_blocks_the_rest() -> None:
    def broken(ctx: ConformanceContext) -> object:
        raise RuntimeError("no GPU memory left for the buffer")

    report = check_model_state(broken, device="cpu", examples=0)
    outcomes = _outcomes(report)
    assert outcomes["T1-factory-builds"] == {Outcome.FAILED}
    blocked = [r for r in report.results if r.outcome is Outcome.BLOCKED]
    assert len(blocked) > 30
    assert all("T1-factory-builds" in r.reason for r in blocked)
    assert not report.ok
    assert "blocked" in report.summary_line()


def test_a_target_lacking_a_method_blocks_its_dependents() -> None:
    class NoRealPath(ReferenceModelState):
        get_mm_embeddings = None  # type: ignore[assignment]

    def factory(ctx: ConformanceContext) -> object:
        state = reference_model_state(ctx)
        state.__class__ = NoRealPath
        return state

    report = check_model_state(factory, device="cpu", examples=0)
    outcomes = _outcomes(report)
    assert outcomes["T1-protocol-members"] == {Outcome.FAILED}
    assert outcomes["G5-rows-match-mask"] == {Outcome.BLOCKED}
    assert outcomes["T1-factory-builds"] == {Outcome.PASSED}


def test_a_refused_mode_is_skipped_with_the_factorys_reason() -> None:
    def offline_only(ctx: ConformanceContext) -> object:
        if ctx.mode == "realtime":
            raise ModeNotSupported("acme handles offline models only")
        return reference_model_state(ctx)

    report = check_model_state(offline_only, device="cpu", examples=0)
    realtime = [r for r in report.results if r.mode == "realtime"]
    assert realtime
    assert all(r.outcome is Outcome.SKIPPED for r in realtime)
    assert all("acme handles offline models only" in r.reason for r in realtime)
    assert report.ok, report.table()
    assert _outcomes(report)["G2-nonrealtime-decode-skipped"] == {Outcome.PASSED}


@pytest.mark.parametrize("isolation", ["process", "off"])
def test_patches_a_target_makes_to_torch_and_numpy_end_with_its_check(isolation: str) -> None:
    equal, nonzero, array_equal = torch.equal, torch.Tensor.nonzero, np.array_equal
    report = _run(_factory_at_module_level("tamper"), ["G1-window-slots"], isolation=isolation)
    assert report.results
    assert torch.equal is equal
    assert torch.Tensor.nonzero is nonzero
    assert np.array_equal is array_equal


def test_module_attributes_restore_changed_and_added_names() -> None:
    from rtmm_conformance.running.verdict import ModuleAttributes

    snapshot = ModuleAttributes.of_torch_and_numpy()
    original = torch.allclose
    torch.allclose = lambda *args, **kwargs: True
    np.rtmm_added_by_a_target = 1  # type: ignore[attr-defined]
    snapshot.restore()
    assert torch.allclose is original
    assert not hasattr(np, "rtmm_added_by_a_target")
