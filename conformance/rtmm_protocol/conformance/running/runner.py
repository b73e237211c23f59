"""Running the checks that apply to one target: where, after which prerequisites, and the
final verdicts.

:func:`open_runner` decides where the checks run (a worker process unless told
otherwise, see :mod:`.workers`), resolves the device there and learns the target's kind.
:class:`SuiteRunner` then runs one check in one mode at a time and remembers the result,
so the prerequisite of many checks runs once. A check whose worker crashes or hangs
fails; later calls into the entry point that hung are blocked, not waited out. A gatherer
from before the ``num_computed_tokens`` rename fails T2, and its behavioural checks run
through the compat adapter instead of being blocked. A failure is checked against the
class the target derives from, when there is one: same failure, same draws, *inherited*.
Raw outcomes become the reported ones through :func:`judge` (the check's level, strict
mode, the expected-failures file).
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from rtmm_protocol.conformance.catalog import CheckInfo, TargetKind, version_key
from rtmm_protocol.conformance.checks.all_checks import implementations
from rtmm_protocol.conformance.checks.registry import CheckImpl
from rtmm_protocol.conformance.driving.context import Factory, Mode
from rtmm_protocol.conformance.driving.factories import CompatFactory, Target
from rtmm_protocol.conformance.reporting.causes import (
    Frame,
    cause_of_frames,
    frame_kind,
    short_path,
    target_entry,
)
from rtmm_protocol.conformance.reporting.results import CheckResult, Outcome
from rtmm_protocol.conformance.reporting.xfail import XfailEntry
from rtmm_protocol.conformance.running.hangs import Hang
from rtmm_protocol.conformance.running.verdict import (
    Probe,
    failed,
    probe_target,
    resolve_device,
    run_check,
)
from rtmm_protocol.conformance.running.workers import (
    Crashed,
    Executor,
    InProcess,
    TimedOut,
    WorkerProcess,
    parse_stack_dump,
)
from rtmm_protocol.conformance.settings import RunSettings

__all__ = ["PlannedCheck", "SuiteRunner", "judge", "open_runner"]

#: The check a gatherer from before the rename fails; its dependents then run via compat.
_RENAME_CHECK = "T2-no-renamed-parameters"
_VIA_COMPAT = "via compat"


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
    """Runs the checks that apply to one target and remembers their raw results.

    Made by :func:`open_runner`; :meth:`close` stops its worker process.
    """

    def __init__(
        self,
        target: Target,
        settings: RunSettings,
        probe: Probe,
        executor: Executor,
        *,
        environment: dict[str, str],
        notes: Sequence[str] = (),
        checks: Mapping[str, CheckImpl] | None = None,
    ) -> None:
        self.target = target
        self.factory_spec = target.spec
        self.settings = settings
        self.probe = probe
        self.kind: TargetKind = probe.kind or "model_state"
        self.executor = executor
        #: Versions and device name, as seen where the checks run.
        self.environment = environment
        #: What the report should say about where and how the checks ran.
        self.notes = list(notes)
        self.checks = dict(implementations() if checks is None else checks)
        self.hangs: list[Hang] = []
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

    def close(self) -> None:
        """Stop the worker process, if one runs."""
        self.executor.close()

    def _run(self, impl: CheckImpl, mode: Mode | None) -> CheckResult:
        verdict = self._prerequisite_verdict(impl, mode)
        if isinstance(verdict, CheckResult):
            return verdict
        if impl.needs_cuda and self.settings.device.type != "cuda":
            return CheckResult(
                impl.id,
                mode,
                Outcome.SKIPPED,
                "needs a CUDA device (run with --conformance-device=cuda where one is present)",
            )
        factory, baseline = self.target.factory, self.target.baseline
        if verdict == _VIA_COMPAT:
            factory, baseline = CompatFactory(factory), baseline and CompatFactory(baseline)
        result = self._execute(factory, impl, mode, self.hangs)
        if result.outcome is Outcome.FAILED:
            result = replace(result, origin=self._origin(baseline, impl, mode, result))
        return replace(result, via_compat=verdict == _VIA_COMPAT)

    def _execute(
        self, factory: Factory, impl: CheckImpl, mode: Mode | None, hangs: list[Hang]
    ) -> CheckResult:
        """Run one check on ``factory``'s targets where the checks run, and say how it ended."""
        start = time.perf_counter()
        outcome = self.executor.call(
            run_check,
            factory,
            self.factory_spec,
            self.settings,
            self.kind,
            impl.id,
            mode,
            tuple(hangs),
            not isinstance(self.executor, InProcess),
            limit_s=self.settings.timeout_s,
        )
        if isinstance(outcome, Crashed):
            result = self._crashed(impl.info, mode, outcome)
        elif isinstance(outcome, TimedOut):
            result = self._hung(impl.info, mode, outcome, hangs)
        else:
            return outcome
        return replace(result, duration_s=time.perf_counter() - start)

    def _origin(
        self, baseline: Factory | None, impl: CheckImpl, mode: Mode | None, failure: CheckResult
    ) -> str:
        """``inherited`` when the baseline fails this check the same way on the same draws."""
        if baseline is None:
            return "own"
        base = self._execute(baseline, impl, mode, [])  # its hangs are not the target's
        keys = set(failure.cause_key.split("|")) - {""}
        same = base.outcome is Outcome.FAILED and bool(keys & set(base.cause_key.split("|")))
        return "inherited" if same else "own"

    def _crashed(self, info: CheckInfo, mode: Mode | None, crash: Crashed) -> CheckResult:
        stacks = parse_stack_dump(crash.stack)
        frames = next((s for s in stacks if _has_suite_frame(s)), stacks[0] if stacks else [])
        entry, _ = target_entry(frames)
        doing = f" in {entry[2]} ({short_path(entry[0])}:{entry[1]})" if entry else ""
        reason = f"the target crashed the check's process{doing}: {crash.how}"
        details = (
            f"{reason}.\nThe check ran in a worker process, so the run goes on; the stack "
            "of the check when the process ended (innermost last):\n"
            + (_render_stack(frames) if frames else "    (no stack: the process left no trace)")
        )
        keys = cause_of_frames(crash.how.removeprefix("the process "), frames, info.id)
        result = failed(info, mode, self.settings, reason, details)
        return replace(result, cause_key=keys.encode(), cause_title=keys.title)

    def _hung(
        self, info: CheckInfo, mode: Mode | None, timeout: TimedOut, hangs: list[Hang]
    ) -> CheckResult:
        stacks = parse_stack_dump(timeout.stack)
        frames = next((s for s in stacks if _has_suite_frame(s)), [])
        label = info.id if mode is None else f"{info.id}[{mode}]"
        hang = Hang.from_stack(label, frames)
        hangs.append(hang)
        reason = (
            f"did not finish within {timeout.limit_s:g} s: the target hangs or is very slow "
            f"in {hang.what}"
        )
        details = (
            f"{reason}\nraise the limit with --conformance-timeout=SECONDS if the target is just "
            f"slow; later checks that call {hang.what} are reported blocked, not waited out.\n"
            "stack of the check when its time ran out (innermost last):\n"
            + (_render_stack(frames) if frames else "    (unknown)")
        )
        keys = cause_of_frames("hang", frames, info.id)
        result = failed(info, mode, self.settings, reason, details)
        return replace(result, cause_key=keys.encode(), cause_title=keys.title)

    def _prerequisite_verdict(self, impl: CheckImpl, mode: Mode | None) -> CheckResult | str | None:
        """``None`` to run the check, :data:`_VIA_COMPAT` to run it through the compat
        adapter (the target failed T2 only for the rename), or the result it gets instead."""
        compat = None
        for prerequisite in impl.prerequisites:
            other = self.checks.get(prerequisite)
            if other is None:
                continue
            modes: list[Mode | None] = [mode] if mode in other.modes else list(other.modes)
            results = [self.run(prerequisite, m) for m in modes]
            failed_ = [r for r in results if r.outcome in (Outcome.FAILED, Outcome.BLOCKED)]
            if failed_ and prerequisite == _RENAME_CHECK and self.probe.legacy:
                compat = _VIA_COMPAT
                continue
            if failed_:
                first = failed_[0]
                # Name the check that failed at the root, not the one in between.
                reason = (
                    first.reason
                    if first.outcome is Outcome.BLOCKED
                    else f"blocked by {first.label}: {first.reason}"
                )
                return CheckResult(impl.id, mode, Outcome.BLOCKED, reason)
            if results and all(r.outcome is Outcome.SKIPPED for r in results):
                return CheckResult(impl.id, mode, Outcome.SKIPPED, results[0].reason)
        return compat


def open_runner(target: Target, settings: RunSettings) -> SuiteRunner:
    """A runner for the target ``target`` names, its checks placed as ``settings`` asks.

    Resolves the device and builds the target once, both where the checks will run, so
    that this process never initialises CUDA when a worker runs them. Raises
    ``ValueError`` for a device that is not there and for an isolation that cannot be had.
    """
    factory = target.factory
    executor, note = _executor_for(settings.isolation, factory)
    try:
        choice = executor.call(resolve_device, settings, limit_s=settings.timeout_s)
        if isinstance(choice, (Crashed, TimedOut)):
            raise RuntimeError(f"the worker process could not check the device: {choice}")
        if choice.problem:
            raise ValueError(choice.problem)
        settings = replace(settings, device=choice.device, device_is_default=False)
        probed = executor.call(probe_target, factory, settings, limit_s=settings.timeout_s)
    except BaseException:
        executor.close()
        raise
    if isinstance(probed, Crashed):
        probed = Probe(None, f"building the target crashed: {probed.how}")
    elif isinstance(probed, TimedOut):
        probed = Probe(None, f"the factory did not return within {probed.limit_s:g} s")
    return SuiteRunner(
        target,
        settings,
        probed,
        executor,
        environment={**choice.environment, **target.environment},
        notes=[note] if note else [],
    )


def _executor_for(isolation: str, factory: Factory) -> tuple[Executor, str]:
    """Where the checks run, and a note for the report when that is not a worker process."""
    if isolation == "off":
        return InProcess(), (
            "checks run in the calling process (isolation off): no time limit, and a "
            "crashing target ends the run"
        )
    try:
        pickle.dumps(factory)
    except Exception as error:
        why = (
            f"the factory cannot be sent to a worker process ({type(error).__name__}: "
            f"{error}); define it at module level"
        )
        if isolation == "process":
            raise ValueError(f"isolation 'process' is not possible: {why}") from None
        return InProcess(), f"checks run in the calling process: {why}"
    return WorkerProcess(), ""


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
    starts = [i for i, f in enumerate(shown) if f[2] == "run_check" and frame_kind(f[0]) == "suite"]
    if starts:
        shown = shown[starts[-1] + 1 :]
    else:
        kinds = [frame_kind(f[0]) for f in shown]
        if "suite" in kinds:
            shown = shown[kinds.index("suite") :]  # the test runner above it is noise
    shown = [f for f in shown if not f[0].endswith("workers.py")]
    return "\n".join(f"    {short_path(f[0])}:{f[1]} in {f[2]}" for f in shown)
