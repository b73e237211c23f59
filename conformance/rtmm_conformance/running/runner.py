"""Running the checks that apply to one target: where, after which prerequisites, and the
final verdicts. A check whose worker crashes or hangs fails; a gatherer from before the
``num_computed_tokens`` rename fails T2, and its behavioural checks run through the compat
adapter; a failure the class the target derives from shares is *inherited*.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from rtmm_conformance.catalog import IMPLEMENTATIONS, known_versions
from rtmm_conformance.checks.registry import CheckImpl
from rtmm_conformance.clauses import TargetKind, version_key
from rtmm_conformance.console import crash_text, hang_text, label
from rtmm_conformance.driving.context import Factory, Mode
from rtmm_conformance.driving.factories import CompatFactory, Target
from rtmm_conformance.frames import frame_kind, short_path, target_entry
from rtmm_conformance.results import CheckResult, Outcome
from rtmm_conformance.running.cause_keys import cause_of_frames
from rtmm_conformance.running.hangs import Hang
from rtmm_conformance.running.verdict import (
    Probe,
    failed,
    probe_target,
    resolve_device,
    run_check,
)
from rtmm_conformance.running.workers import (
    Crashed,
    Executor,
    InProcess,
    TimedOut,
    WorkerProcess,
    parse_stack_dump,
)
from rtmm_conformance.settings import RunSettings

__all__ = ["PlannedCheck", "SuiteRunner", "open_runner", "with_target_configuration"]

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
        """``CHECK-ID[mode]``, as :func:`~..results.label` writes it."""
        return label(self.impl.id, self.mode)


class SuiteRunner:
    """Runs the checks that apply to one target (each once) and remembers their raw results;
    made by :func:`open_runner`, and :meth:`close` stops its worker process."""

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
        self.settings = settings
        self.probe = probe
        self.kind: TargetKind = probe.kind or "model_state"
        self.executor = executor
        #: Versions and device name, as seen where the checks run.
        self.environment = environment
        #: What the report should say about where and how the checks ran.
        self.notes = list(notes)
        self.checks = dict(IMPLEMENTATIONS if checks is None else checks)
        self.hangs: list[Hang] = []
        self._results: dict[tuple[str, Mode | None], CheckResult] = {}

    @property
    def baseline(self) -> str:
        """The name of what the target derives from, whose failures are inherited ("" if none)."""
        return self.target.baseline_name if self.target.baseline is not None else ""

    @property
    def fail_on(self) -> str:
        """What fails this run: :meth:`~..settings.RunSettings.fails_on` for this target."""
        return self.settings.fails_on(bool(self.baseline))

    def plan(self) -> list[PlannedCheck]:
        """Every (check, mode) that applies to this kind of target and requirement set."""
        wanted = version_key(self.settings.version)
        return [
            PlannedCheck(impl, mode)
            for impl in self.checks.values()
            if self.kind in impl.info.kinds and version_key(impl.info.since) <= wanted
            for mode in impl.modes
        ]

    def result(self, check_id: str, mode: Mode | None) -> CheckResult:
        """The raw result of one check in one mode (before the level and expected failures
        are applied: :func:`..reporting.judge.judge`), run once and then remembered."""
        key = (check_id, mode)
        if key not in self._results:
            self._results[key] = self._run(self.checks[check_id], mode)
        return self._results[key]

    def close(self) -> None:
        """Stop the worker process, if one runs."""
        self.executor.close()

    def _run(self, impl: CheckImpl, mode: Mode | None) -> CheckResult:
        """Run a check whose prerequisites hold, on the target and (for a failure whose
        origin is asked) on its baseline."""
        verdict = self._prerequisite_verdict(impl, mode)
        if isinstance(verdict, CheckResult):
            return verdict
        if impl.needs_cuda and self.settings.torch_device.type != "cuda":
            why = "needs a CUDA device (run with --conformance-device=cuda where one is present)"
            return CheckResult(impl.id, mode, Outcome.SKIPPED, why)
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
        args = (self.target.name, self.settings, self.kind, impl.id, mode, tuple(hangs))
        contained = not isinstance(self.executor, InProcess)  # deaf to Ctrl-C
        outcome = self.executor.call(
            run_check, factory, *args, contained, limit_s=self.settings.timeout_s
        )
        if isinstance(outcome, CheckResult):
            return outcome
        stacks = parse_stack_dump(outcome.stack)
        # The check's own thread is the one in the suite's code (else, for a crash, any).
        frames = next((s for s in stacks if any(frame_kind(f[0]) == "suite" for f in s)), [])
        if isinstance(outcome, Crashed):
            frames = frames or (stacks[0] if stacks else [])
            entry, _ = target_entry(frames)
            doing = f" in {entry[2]} ({short_path(entry[0])}:{entry[1]})" if entry else ""
            reason, details = crash_text(doing, outcome.how, frames)
            keys = cause_of_frames(outcome.how.removeprefix("the process "), frames, impl.id)
        else:
            hang = Hang.from_stack(label(impl.id, mode), frames)
            hangs.append(hang)
            reason, details = hang_text(outcome.limit_s, hang.what, frames)
            keys = cause_of_frames("hang", frames, impl.id)
        result = failed(impl.info, mode, self.settings.seed, reason, details, keys)
        return replace(result, duration_s=time.perf_counter() - start)

    def _origin(
        self, baseline: Factory | None, impl: CheckImpl, mode: Mode | None, failure: CheckResult
    ) -> str:
        """``inherited`` when the baseline fails this check the same way on the same draws."""
        if baseline is None:
            return "own"
        base = self._execute(baseline, impl, mode, [])  # its hangs are not the target's
        same = base.outcome is Outcome.FAILED and bool(
            set(failure.cause_keys) & set(base.cause_keys)
        )
        return "inherited" if same else "own"

    def _prerequisite_verdict(self, impl: CheckImpl, mode: Mode | None) -> CheckResult | str | None:
        """``None`` to run the check, :data:`_VIA_COMPAT` to run it through the compat
        adapter (it failed T2 only for the rename), or the result it gets instead."""
        compat = None
        for prerequisite in impl.prerequisites:
            other = self.checks.get(prerequisite)
            if other is None:
                continue
            modes: list[Mode | None] = [mode] if mode in other.modes else list(other.modes)
            results = [self.result(prerequisite, m) for m in modes]
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
    """A runner for ``target``, its checks placed as ``settings`` asks. The device is resolved
    and the target built where the checks run, so that this process never initialises CUDA;
    ``ValueError`` for a missing device or an isolation that cannot be had."""
    if settings.version not in known_versions():
        raise ValueError(
            f"unknown protocol version {settings.version!r}; known: {', '.join(known_versions())}"
        )
    settings = with_target_configuration(settings, target)
    factory = target.factory
    executor, note = _executor_for(settings.isolation, factory)
    try:
        choice = executor.call(resolve_device, settings, limit_s=settings.timeout_s)
        if isinstance(choice, (Crashed, TimedOut)):
            raise RuntimeError(f"the worker process could not check the device: {choice}")
        if choice.problem:
            raise ValueError(choice.problem)
        settings = replace(settings, device=str(choice.device))
        probed = executor.call(probe_target, factory, settings, limit_s=settings.timeout_s)
    except BaseException:
        executor.close()
        raise
    if isinstance(probed, Crashed):
        probed = Probe(None, f"building the target crashed: {probed.how}")
    elif isinstance(probed, TimedOut):
        probed = Probe(None, f"the factory did not return within {probed.limit_s:g} s")
    environment = {**choice.environment, **target.environment}
    notes = [note] if note else []
    return SuiteRunner(target, settings, probed, executor, environment=environment, notes=notes)


def with_target_configuration(settings: RunSettings, target: Target) -> RunSettings:
    """``settings`` with the model configuration the target is built with: the run's own,
    over the one the target carries (SPEC M3)."""
    given = settings.configuration
    configuration = given.over(target.configuration) if given else target.configuration
    if configuration is None or configuration == given:
        return settings
    return replace(settings, model_config=configuration, model_attrs=())


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
