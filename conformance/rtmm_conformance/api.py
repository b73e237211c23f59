"""Running the suite outside the pytest plugin: a report, the checks as parameters of a
user's own test, and the replays (in this process) of what a failure message shows."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import torch
from hypothesis.stateful import RuleBasedStateMachine
from typing_extensions import Unpack

from rtmm_conformance.catalog import (
    CHECKS,
    CHECKS_BY_ID,
    CLAUSES,
    clauses_for,
    version_key,
)
from rtmm_conformance.checks.all_checks import implementations
from rtmm_conformance.checks.changes import JUDGES, change_life
from rtmm_conformance.checks.stateful import life_machine
from rtmm_conformance.defaults import DEFAULT_SEED
from rtmm_conformance.driving.check_run import CheckRun
from rtmm_conformance.driving.context import Factory, Mode
from rtmm_conformance.driving.factories import Target, factory_spec_of, load_target
from rtmm_conformance.reporting.report import ConformanceReport
from rtmm_conformance.reporting.results import CheckResult
from rtmm_conformance.reporting.xfail import XfailFile, parse_xfail_file
from rtmm_conformance.running.runner import PlannedCheck, SuiteRunner, open_runner
from rtmm_conformance.running.verdict import probe_target
from rtmm_conformance.settings import RunSettings, parse_dtype
from rtmm_protocol._version import PROTOCOL_VERSION
from rtmm_protocol.testing.scenario import GatherScenario

if TYPE_CHECKING:
    from _pytest.mark.structures import MarkDecorator

__all__ = [
    "FactoryLike",
    "SettingOptions",
    "change_life_for",
    "check_model_state",
    "known_versions",
    "life_machine_for",
    "make_settings",
    "parametrize_with_checks",
    "replay",
    "report_of",
    "resolve_target",
    "settings_summary",
]

#: A factory, or a spec: ``"module:function"``, or ``"vllm:module:Class"`` for a vLLM class.
FactoryLike = Factory | str


def known_versions() -> list[str]:
    """Protocol versions a run can be scored against, oldest first."""
    return sorted({c.since for c in CHECKS} | {PROTOCOL_VERSION}, key=version_key)


class _RunOptions(TypedDict, total=False):
    """The options :class:`~.settings.RunSettings` takes as they are (its defaults apply)."""

    seed: int
    examples: int
    timeout_s: float
    strict: bool
    fail_on: str | None
    version: str
    shrink: bool
    isolation: str


class SettingOptions(_RunOptions, total=False):
    """The keyword options of :func:`make_settings`, for functions that pass them on."""

    device: torch.device | str | None
    dtype: torch.dtype | str


def make_settings(
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | str = torch.float32,
    **options: Unpack[_RunOptions],
) -> RunSettings:
    """Validated run settings; ``ValueError`` names the bad option. ``device=None`` means
    CUDA where the checks run has it, else the CPU (decided there, never by asking CUDA in
    this process); ``isolation="fork"`` (0.1's per-check processes) means ``"process"``."""
    version = options.get("version", PROTOCOL_VERSION)
    if version not in known_versions():
        raise ValueError(
            f"unknown protocol version {version!r}; known: {', '.join(known_versions())}"
        )
    if options.get("isolation") == "fork":
        options["isolation"] = "process"
    return RunSettings(
        device=torch.device("cpu" if device is None else device),
        device_is_default=device is None,
        dtype=parse_dtype(dtype) if isinstance(dtype, str) else dtype,
        **options,
    )


def resolve_target(
    factory: FactoryLike,
    baseline: FactoryLike | None = None,
    search_dirs: Sequence[Path] | None = None,
) -> Target:
    """The target a factory or a spec names, with the ``baseline`` it derives from; a spec's
    module may be in ``search_dirs`` (default: the current directory)."""
    dirs = [Path(os.getcwd())] if search_dirs is None else search_dirs
    if isinstance(factory, str):
        target = load_target(factory, dirs)
    else:
        target = Target(factory, factory_spec_of(factory))
    if baseline is None:
        return target
    base = resolve_target(baseline, search_dirs=dirs)
    return replace(target, baseline=base.factory, baseline_label=base.spec)


def _selected(plan: Iterable[PlannedCheck], select: Iterable[str] | None) -> list[PlannedCheck]:
    if select is None:
        return list(plan)
    wanted = set(select)
    unknown = wanted - set(CHECKS_BY_ID) - set(CLAUSES)
    if unknown:
        raise ValueError(f"unknown check or clause IDs: {', '.join(sorted(unknown))}")
    return [p for p in plan if p.impl.id in wanted or p.impl.info.clause in wanted]


def check_model_state(
    factory: FactoryLike,
    *,
    xfail: str | Path | XfailFile | None = None,
    checks: Iterable[str] | None = None,
    baseline: FactoryLike | None = None,
    **options: Unpack[SettingOptions],
) -> ConformanceReport:
    """Run the conformance checks on the target ``factory`` builds; return the report.

    ``factory`` is ``FACTORY(ctx)`` or a spec (``"MODULE:FACTORY"``, or
    ``"vllm:MODULE:CLASS"`` for a vLLM class) of a ``ModelState`` or a runner-level
    gatherer. ``checks`` limits the run to some check or clause IDs; ``xfail`` is an
    expected-failures file (:mod:`rtmm_conformance.reporting.xfail`); a failure
    that ``baseline`` (what the target derives from) shares on the same draws is reported
    as inherited. ``options`` are :func:`make_settings`'s; ``isolation`` ``auto`` runs the
    checks in a worker process, so that a target that crashes or hangs fails one check,
    unless the factory cannot be sent to one (define it at module level). Failing checks
    raise nothing: look at ``report.ok`` and ``report.table()``.
    """
    settings = make_settings(**options)
    expected = parse_xfail_file(xfail) if isinstance(xfail, (str, Path)) else xfail
    runner = open_runner(resolve_target(factory, baseline), settings)
    try:
        results = [runner.judged(planned, expected) for planned in _selected(runner.plan(), checks)]
    finally:
        runner.close()
    return report_of(runner, results, expected)


def report_of(
    runner: SuiteRunner,
    results: list[CheckResult],
    expected: XfailFile | None,
    *,
    interrupted: bool = False,
) -> ConformanceReport:
    """The report of a run: its results with what the runner learnt about the target."""
    stale: list[str] = []
    unknown: list[str] = []
    if expected is not None and not interrupted:
        outcomes = [(r.check_id, r.mode, r.outcome.value) for r in results]
        stale = [f"{e.where}: {e.key} ({e.reason})" for e in expected.stale(outcomes)]
        unknown = [f"{e.where}: {e.key}" for e in expected.unknown()]
    kind = runner.probe.kind
    if kind is None:
        notes = [f"target kind unknown: {runner.probe.note}"]
    else:
        left_out = ", ".join(c for c in CLAUSES if c not in clauses_for(kind))
        notes = [f"clauses not applicable to a {kind} target: {left_out}"] if left_out else []
    baseline = runner.target.baseline_label if runner.target.baseline is not None else ""
    return ConformanceReport(
        target=runner.target.spec,
        baseline=baseline,
        fail_on=runner.settings.fails_on(bool(baseline)),
        kind=kind,
        settings=settings_summary(runner.settings),
        environment=runner.environment,
        results=results,
        strict=runner.settings.strict,
        stale_expected_failures=stale,
        unknown_expected_failures=unknown,
        notes=notes + runner.notes,
        interrupted=interrupted,
    )


def settings_summary(settings: RunSettings) -> dict[str, object]:
    """The settings as JSON-ready data."""
    plain = ("seed", "examples", "timeout_s", "strict", "fail_on", "version")
    return {
        **{key: getattr(settings, key) for key in plain},
        "dtype": str(settings.dtype).removeprefix("torch."),
        "device": str(settings.device),
        "isolation": settings.isolation,
    }


@dataclass(frozen=True)
class _BoundCheck:
    """One check in one mode, callable from a test function."""

    runner: SuiteRunner
    planned: PlannedCheck

    def __call__(self) -> None:
        from rtmm_conformance.pytest_outcome import raise_verdict

        result = self.runner.judged(self.planned)
        raise_verdict(result, fail_on=self.runner.settings.fails_on(False))


def parametrize_with_checks(
    factory: FactoryLike, *, checks: Iterable[str] | None = None, **options: Unpack[SettingOptions]
) -> MarkDecorator:
    """A ``pytest.mark.parametrize`` over every check, to embed them in your own tests::

        @parametrize_with_checks(make_state)
        def test_conformance(check):
            check()

    Each parameter is named after its check and mode (``G5-rows-match-mask-realtime``),
    so ``-k`` selects one. Failures fail the test with the check's message, SHOULD
    failures warn unless ``strict=True``, and refused modes or blocked checks skip.
    ``options`` are those of :func:`check_model_state` (device, dtype, seed, ...). The
    checks' worker process lives until the test session ends.
    """
    import pytest

    settings = make_settings(**options)
    runner = open_runner(resolve_target(factory), settings)
    params = [
        pytest.param(
            _BoundCheck(runner, planned),
            id=planned.impl.id if planned.mode is None else f"{planned.impl.id}-{planned.mode}",
        )
        for planned in _selected(runner.plan(), checks)
    ]
    return pytest.mark.parametrize("check", params)


def _check_run_here(
    check_id: str,
    factory: FactoryLike,
    mode: Mode | None,
    device: torch.device | str,
    dtype: torch.dtype | str,
    seed: int,
) -> CheckRun:
    """A check's run in this process, as a failure's replay snippet needs it."""
    target = resolve_target(factory)
    settings = make_settings(device=device, dtype=dtype, seed=seed, isolation="off")
    probe = probe_target(target.factory, settings)
    if probe.kind is None:
        raise ValueError(f"cannot tell the target's kind: {probe.note}")
    return CheckRun(
        check_id=check_id,
        factory=target.factory,
        factory_spec=target.spec,
        settings=settings,
        mode=mode,
        kind=probe.kind,
    )


def replay(
    check_id: str,
    factory: FactoryLike,
    scenario: GatherScenario,
    *,
    mode: Mode | None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | str = "float32",
    seed: int = DEFAULT_SEED,
) -> None:
    """Run one scenario of a scenario-driven check, as a failure's reproduction snippet does;
    its :class:`~.reporting.results.CheckFailure` (an ``AssertionError``) goes up."""
    impl = implementations().get(check_id)
    if impl is None or impl.example is None:
        raise ValueError(f"{check_id!r} is not a scenario-driven check")
    impl.example(_check_run_here(check_id, factory, mode, device, dtype, seed), scenario)


def life_machine_for(
    factory: FactoryLike,
    *,
    mode: Mode | None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | str = "float32",
    seed: int = DEFAULT_SEED,
) -> type[RuleBasedStateMachine]:
    """The G8 stateful check's machine for a target, to replay the steps a failure printed."""
    check_id = "G8-stateful-life-matches-oracle"
    return life_machine(_check_run_here(check_id, factory, mode, device, dtype, seed))


def change_life_for(
    factory: FactoryLike,
    *,
    check_id: str = "C2-changes-never-stale",
    mode: Mode | None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | str = "float32",
    seed: int = DEFAULT_SEED,
) -> type[RuleBasedStateMachine]:
    """The machine of a C check (C1 or C2) for a target, to replay a failure's steps."""
    if check_id not in JUDGES:
        raise ValueError(f"check_id must be one of {sorted(JUDGES)}, got {check_id!r}")
    run = _check_run_here(check_id, factory, mode, device, dtype, seed)
    return change_life(run, JUDGES[check_id](run))
