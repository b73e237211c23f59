"""Running checks against one target: prerequisites, time limits, and the final verdicts.

:class:`SuiteRunner` runs one check in one mode at a time and remembers the result, so
the prerequisite of many checks runs once per process. Its raw outcomes (passed,
failed, skipped, blocked) become the reported ones through :func:`judge`, which applies
the check's level, strict mode and the expected-failures file.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

import torch

from rtmm_protocol.conformance.catalog import (
    CLAUSES,
    CheckInfo,
    TargetKind,
    spec_anchor,
    version_key,
)
from rtmm_protocol.conformance.causes import (
    Frame,
    cause_of_failure,
    cause_of_frames,
    frame_kind,
    short_path,
    target_entry,
)
from rtmm_protocol.conformance.check_run import CheckRun
from rtmm_protocol.conformance.context import Mode, ModeNotSupported, build_context
from rtmm_protocol.conformance.environment import environment_info
from rtmm_protocol.conformance.gather_call import describe_error
from rtmm_protocol.conformance.hang_guard import Hang, HangGuard, TargetBlocked
from rtmm_protocol.conformance.isolation import (
    ChildDied,
    ChildTimedOut,
    Isolation,
    ModuleAttributes,
    can_fork,
    parse_stack_dump,
    run_in_child,
)
from rtmm_protocol.conformance.outcomes import CheckFailure, CheckResult, CheckSkipped, Outcome
from rtmm_protocol.conformance.registry import CheckImpl, implementations
from rtmm_protocol.conformance.settings import RunSettings
from rtmm_protocol.conformance.targets import Factory, detect_kind
from rtmm_protocol.conformance.timeout import CheckInterrupted, TimedOut, run_with_timeout
from rtmm_protocol.conformance.xfail import XfailEntry

__all__ = ["KindProbe", "PlannedCheck", "SuiteRunner", "judge", "probe_kind"]


@dataclass(frozen=True)
class KindProbe:
    """What building the target once told: its kind, or why it could not be told."""

    kind: TargetKind | None
    note: str
    #: The versions and device name, read where the target was built (a child process
    #: may touch CUDA; the parent must not, or it could no longer fork).
    environment: dict[str, str] | None = None


def probe_kind(factory: Factory, settings: RunSettings, isolation: Isolation = "off") -> KindProbe:
    """Build the target once (non-realtime, else realtime) to learn which kind it is.

    Runs under the check time limit (in a child process when ``isolation`` is
    ``fork``) and catches whatever the factory does: a broken factory must not stop
    the run before the checks can say what is wrong with it.
    """
    if isolation == "fork":
        outcome = run_in_child(partial(_probe, factory, settings), settings.timeout_s)
        if isinstance(outcome, ChildDied):
            return KindProbe(None, f"building the target crashed: {outcome.how}")
        if isinstance(outcome, ChildTimedOut):
            return KindProbe(None, f"the factory did not return within {outcome.limit_s:g} s")
        return outcome
    timed = run_with_timeout(partial(_probe, factory, settings), settings.timeout_s)
    if isinstance(timed, TimedOut):
        return KindProbe(None, f"the factory did not return within {timed.limit_s:g} s")
    return timed


def _probe(factory: Factory, settings: RunSettings) -> KindProbe:
    notes = []
    modes: tuple[Mode, ...] = ("non-realtime", "realtime")
    for mode in modes:
        parts = build_context(
            mode,
            hidden_size=settings.hidden_size,
            max_num_tokens=settings.max_num_tokens,
            max_num_reqs=settings.max_num_reqs,
            dtype=settings.dtype,
            device=settings.device,
            seed=settings.seed,
        )
        try:
            target = factory(parts.ctx)
        except ModeNotSupported as refusal:
            notes.append(f"{mode}: {refusal.reason}")
            continue
        except CheckInterrupted:
            raise
        except BaseException as error:  # reported, then the checks say the rest
            return KindProbe(None, f"the factory raised {describe_error(error)}")
        kind = detect_kind(target)
        if kind is None:
            return KindProbe(
                None, f"the factory returned a {type(target).__name__}, which is neither kind"
            )
        return KindProbe(kind, "", environment_info(settings.device))
    return KindProbe(None, "the factory refused every mode (" + "; ".join(notes) + ")")


@dataclass(frozen=True)
class PlannedCheck:
    """One check in one mode, as collected."""

    impl: CheckImpl
    mode: Mode | None

    @property
    def label(self) -> str:
        """``CHECK-ID[mode]``."""
        return self.impl.id if self.mode is None else f"{self.impl.id}[{self.mode}]"


class SuiteRunner:
    """Runs the checks that apply to one target and remembers their raw results."""

    def __init__(
        self,
        factory: Factory,
        factory_spec: str,
        settings: RunSettings,
        kind: TargetKind,
        checks: Mapping[str, CheckImpl] | None = None,
        isolation: Isolation = "off",
    ) -> None:
        self.factory = factory
        self.isolation: Isolation = isolation
        self._guard = HangGuard()
        self.factory_spec = factory_spec
        self.settings = settings
        self.kind: TargetKind = kind
        self.checks = dict(implementations() if checks is None else checks)
        self._results: dict[tuple[str, Mode | None], CheckResult] = {}

    def plan(self) -> list[PlannedCheck]:
        """Every (check, mode) that applies to this kind of target and requirement set."""
        wanted = version_key(self.settings.version)
        return [
            PlannedCheck(impl, mode)
            for impl in self.checks.values()
            if self.kind in impl.info.targets and version_key(impl.info.since) <= wanted
            for mode in impl.modes
        ]

    def run(self, check_id: str, mode: Mode | None) -> CheckResult:
        """The raw result of one check in one mode (run once, then remembered)."""
        key = (check_id, mode)
        if key not in self._results:
            self._results[key] = self._run(self.checks[check_id], mode)
        return self._results[key]

    def _run(self, impl: CheckImpl, mode: Mode | None) -> CheckResult:
        blocked = self._prerequisite_verdict(impl, mode)
        if blocked is not None:
            return blocked
        if impl.needs_cuda and self.settings.device.type != "cuda":
            return CheckResult(
                impl.id,
                mode,
                Outcome.SKIPPED,
                "needs a CUDA device (run with --conformance-device=cuda where one is present)",
            )
        label = impl.id if mode is None else f"{impl.id}[{mode}]"
        start = time.perf_counter()
        if self.isolation == "fork" and not can_fork()[0]:
            self.isolation = "off"  # CUDA was initialised here since: fork no more
        if self.isolation == "fork":
            outcome = run_in_child(partial(self._verdict, impl, mode), self.settings.timeout_s)
            if isinstance(outcome, ChildDied):
                return self._died(impl, mode, outcome, start)
            if isinstance(outcome, ChildTimedOut):
                stacks = parse_stack_dump(outcome.stack)
                frames = next((s for s in stacks if _has_suite_frame(s)), [])
                return self._hung(impl, mode, label, outcome.limit_s, frames, True, start)
            return replace(outcome, duration_s=time.perf_counter() - start)
        patched = ModuleAttributes.of_torch_and_numpy()
        default_dtype = torch.get_default_dtype()
        try:
            timed = run_with_timeout(partial(self._verdict, impl, mode), self.settings.timeout_s)
        finally:
            torch.set_default_dtype(default_dtype)  # a target may have changed it
            patched.restore()
        if isinstance(timed, TimedOut):
            return self._hung(impl, mode, label, timed.limit_s, timed.stack, timed.stopped, start)
        return replace(timed, duration_s=time.perf_counter() - start)

    def _verdict(self, impl: CheckImpl, mode: Mode | None) -> CheckResult:
        """Run one check here and now (in a child, or in the calling process's thread)."""
        self._guard.start_check()
        run = CheckRun(
            check_id=impl.id,
            factory=self._guard.guarded(self.factory),
            factory_spec=self.factory_spec,
            settings=self.settings,
            mode=mode,
            kind=self.kind,
        )
        start = time.perf_counter()
        try:
            impl.run(run)
        except CheckInterrupted:
            raise
        except CheckFailure as failure:
            result = self._result(impl, mode, Outcome.FAILED, failure.what, failure.render(), start)
            keys = cause_of_failure(impl.id, mode, failure, failure.what)
            result = replace(
                result,
                cause_key=keys.encode(),
                cause_title=keys.title,
                replay=failure.repro or "",
            )
        except CheckSkipped as skip:
            result = self._result(impl, mode, Outcome.SKIPPED, skip.reason, "", start)
        except BaseException as error:  # a target that escaped the check's own handling
            if isinstance(error, TargetBlocked) or self._guard.blocked_call() is not None:
                return CheckResult(impl.id, mode, Outcome.BLOCKED, str(error))
            reason = f"unexpected {describe_error(error)}"
            result = self._result(
                impl,
                mode,
                Outcome.FAILED,
                reason,
                "".join(traceback.format_exception(error)),
                start,
            )
            keys = cause_of_failure(impl.id, mode, error, reason)
            result = replace(result, cause_key=keys.encode(), cause_title=keys.title)
        else:
            result = self._result(impl, mode, Outcome.PASSED, "", "", start)
        hit = self._guard.blocked_call()
        if hit is not None:  # the check judged a blocked call: it was not run
            return CheckResult(impl.id, mode, Outcome.BLOCKED, hit.reason())
        return result

    def _died(
        self, impl: CheckImpl, mode: Mode | None, died: ChildDied, start: float
    ) -> CheckResult:
        stacks = parse_stack_dump(died.stack)
        frames = next((s for s in stacks if _has_suite_frame(s)), stacks[0] if stacks else [])
        entry, _ = target_entry(frames)
        doing = f" in {entry[2]} ({short_path(entry[0])}:{entry[1]})" if entry else ""
        reason = f"the target crashed the check's process{doing}: {died.how}"
        details = (
            f"{reason}.\nThe check ran in a child process, so the run goes on; the stack "
            "of the check when the process ended (innermost last):\n"
            + (_render_stack(frames) if frames else "    (no stack: the process left no trace)")
        )
        keys = cause_of_frames(died.how.removeprefix("the process "), frames, impl.id)
        result = self._result(impl, mode, Outcome.FAILED, reason, details, start)
        return replace(result, cause_key=keys.encode(), cause_title=keys.title)

    def _hung(
        self,
        impl: CheckImpl,
        mode: Mode | None,
        label: str,
        limit_s: float,
        frames: Sequence[Frame],
        stopped: bool,
        start: float,
    ) -> CheckResult:
        hang = Hang.from_stack(label, frames)
        self._guard.hangs.append(hang)
        left = "" if stopped else " (it is still running in the background)"
        reason = (
            f"did not finish within {limit_s:g} s: the target hangs or is very slow "
            f"in {hang.what}{left}"
        )
        details = (
            f"{reason}\nraise the limit with --conformance-timeout=SECONDS if the target is just "
            f"slow; later checks that call {hang.what} are reported blocked, not waited out.\n"
            "stack of the check when its time ran out (innermost last):\n"
            + (_render_stack(frames) if frames else "    (unknown)")
        )
        keys = cause_of_frames("hang", frames, impl.id)
        result = self._result(impl, mode, Outcome.FAILED, reason, details, start)
        return replace(result, cause_key=keys.encode(), cause_title=keys.title)

    def _result(
        self,
        impl: CheckImpl,
        mode: Mode | None,
        outcome: Outcome,
        reason: str,
        details: str,
        start: float,
    ) -> CheckResult:
        if outcome is Outcome.FAILED:
            details = self._explain(impl.info, mode, details)
        return CheckResult(
            impl.id,
            mode,
            outcome,
            reason,
            details,
            time.perf_counter() - start,
        )

    def _explain(self, info: CheckInfo, mode: Mode | None, details: str) -> str:
        where = "" if mode is None else f" [{mode}]"
        header = (
            f"{info.id}{where}: {info.level}, SPEC {info.clause} ({CLAUSES[info.clause]}); "
            f"see docs {spec_anchor(info.clause)}\n"
            f"requirement: {info.statement}"
        )
        footer = f"seed: {self.settings.seed} (--conformance-seed={self.settings.seed})"
        return f"{header}\n{details}\n{footer}" if details else f"{header}\n{footer}"

    def _prerequisite_verdict(self, impl: CheckImpl, mode: Mode | None) -> CheckResult | None:
        for prerequisite in impl.prerequisites:
            other = self.checks.get(prerequisite)
            if other is None:
                continue
            modes: list[Mode | None] = [mode] if mode in other.modes else list(other.modes)
            results = [self.run(prerequisite, m) for m in modes]
            failed = [r for r in results if r.outcome in (Outcome.FAILED, Outcome.BLOCKED)]
            if failed:
                first = failed[0]
                # Name the check that failed at the root, not the one in between.
                reason = (
                    first.reason
                    if first.outcome is Outcome.BLOCKED
                    else f"blocked by {first.label}: {first.reason}"
                )
                return CheckResult(impl.id, mode, Outcome.BLOCKED, reason)
            if results and all(r.outcome is Outcome.SKIPPED for r in results):
                return CheckResult(impl.id, mode, Outcome.SKIPPED, results[0].reason)
        return None


def judge(
    result: CheckResult,
    info: CheckInfo,
    *,
    strict: bool,
    expected_failure: XfailEntry | None,
) -> CheckResult:
    """The reported outcome: the raw one after the expected-failures file and the level.

    A check listed as an expected failure that fails is ``xfailed``; one that passes
    stays ``passed`` here, and the report lists its entry as stale (an entry may cover
    a whole clause, so staleness is decided over all the checks it covers).
    """
    if result.outcome is Outcome.FAILED:
        if expected_failure is not None:
            return result.with_outcome(
                Outcome.XFAILED,
                f"expected failure ({expected_failure.where}: {expected_failure.reason}); "
                f"was: {result.reason}",
            )
        if info.level == "SHOULD" and not strict:
            return result.with_outcome(Outcome.WARNING)
    return result


def _has_suite_frame(frames: Sequence[Frame]) -> bool:
    return any(frame_kind(f[0]) == "suite" for f in frames)


def _render_stack(frames: Sequence[Frame]) -> str:
    """The stack from the check's own code down, without the suite's process plumbing."""
    shown = list(frames)
    starts = [i for i, f in enumerate(shown) if f[2] == "_verdict" and frame_kind(f[0]) == "suite"]
    if starts:
        shown = shown[starts[-1] + 1 :]
    else:
        kinds = [frame_kind(f[0]) for f in shown]
        if "suite" in kinds:
            shown = shown[kinds.index("suite") :]  # the test runner above it is noise
    shown = [f for f in shown if not f[0].endswith(("isolation.py", "timeout.py"))]
    return "\n".join(f"    {short_path(f[0])}:{f[1]} in {f[2]}" for f in shown)
