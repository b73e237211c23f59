"""Running the suite outside the pytest plugin: a report, the checks as parameters of a
user's own test, and the replays (in this process) of what a failure message shows."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from hypothesis.stateful import RuleBasedStateMachine
from typing_extensions import Unpack

from rtmm_conformance.catalog import CHECKS_BY_ID, IMPLEMENTATIONS
from rtmm_conformance.checks.changes import JUDGES, change_life
from rtmm_conformance.checks.stateful import life_machine
from rtmm_conformance.clauses import CLAUSES
from rtmm_conformance.driving.check_run import CheckRun
from rtmm_conformance.driving.context import Factory, Mode
from rtmm_conformance.driving.factories import Target, factory_name_of, load_target
from rtmm_conformance.pytest_outcome import run_item
from rtmm_conformance.reporting.judge import verdict
from rtmm_conformance.reporting.report import ConformanceReport, build_report
from rtmm_conformance.reporting.xfail import XfailFile, parse_xfail_file
from rtmm_conformance.running.runner import (
    PlannedCheck,
    open_runner,
    with_target_configuration,
)
from rtmm_conformance.running.verdict import check_run, probe_target
from rtmm_conformance.settings import RunSettings, SettingOptions
from rtmm_protocol.testing.scenario import GatherScenario

if TYPE_CHECKING:
    from _pytest.mark.structures import MarkDecorator

__all__ = [
    "FactoryLike",
    "change_life_for",
    "check_model_state",
    "life_machine_for",
    "parametrize_with_checks",
    "replay",
    "resolve_target",
]

#: A factory, or its name: ``"module:function"``, or ``"vllm:module:Class"`` for a vLLM class.
FactoryLike = Factory | str

#: Seed of a replay when none is given: the runs' default.
_DEFAULT_SEED = RunSettings().seed


def resolve_target(
    factory: FactoryLike,
    baseline: FactoryLike | None = None,
    search_dirs: Sequence[Path] | None = None,
) -> Target:
    """The target a factory or its name stands for, with the ``baseline`` it derives from; a name's
    module may be in ``search_dirs`` (default: the current directory)."""
    dirs = [Path(os.getcwd())] if search_dirs is None else search_dirs
    if isinstance(factory, str):
        target = load_target(factory, dirs)
    else:
        target = Target(factory, factory_name_of(factory))
    if baseline is None:
        return target
    base = resolve_target(baseline, search_dirs=dirs)
    return replace(target, baseline=base.factory, baseline_name=base.name)


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

    ``factory`` is ``FACTORY(ctx)`` or its name (``"MODULE:FACTORY"``, or
    ``"vllm:MODULE:CLASS"`` for a vLLM class) of a ``ModelState`` or a runner-level
    gatherer. ``checks`` limits the run to some check or clause IDs; ``xfail`` is an
    expected-failures file (:mod:`rtmm_conformance.reporting.xfail`); a failure
    that ``baseline`` (what the target derives from) shares on the same draws is reported
    as inherited. ``options`` are :class:`~.settings.RunSettings`' (``device``, ``dtype``,
    ``seed``, ``examples``, ...); ``isolation`` ``auto`` runs the
    checks in a worker process, so that a target that crashes or hangs fails one check,
    unless the factory cannot be sent to one (define it at module level). Failing checks
    raise nothing: look at ``report.ok`` and ``report.table()``.
    """
    expected = parse_xfail_file(xfail) if isinstance(xfail, (str, Path)) else xfail
    runner = open_runner(resolve_target(factory, baseline), RunSettings(**options))
    try:
        results = [verdict(runner, p, expected) for p in _selected(runner.plan(), checks)]
    finally:
        runner.close()
    return build_report(runner, results, expected)


def parametrize_with_checks(
    factory: FactoryLike, *, checks: Iterable[str] | None = None, **options: Unpack[SettingOptions]
) -> MarkDecorator:
    """A ``pytest.mark.parametrize`` over every check, to embed them in your own tests::

        @parametrize_with_checks(make_state)
        def test_conformance(check):
            check()

    Each parameter is named after its check and mode (``G5-rows-match-mask[realtime]``),
    so ``-k`` selects one. Failures fail the test with the check's message, SHOULD
    failures warn unless ``strict=True``, and refused modes or blocked checks skip.
    ``options`` are those of :func:`check_model_state` (device, dtype, seed, ...). The
    checks' worker process lives until the test session ends.
    """
    import pytest

    runner = open_runner(resolve_target(factory), RunSettings(**options))
    params = [
        pytest.param(functools.partial(run_item, runner, planned), id=planned.label)
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
    settings = with_target_configuration(
        RunSettings(device=device, dtype=dtype, seed=seed, isolation="off"), target
    )
    probe = probe_target(target.factory, settings)
    if probe.kind is None:
        raise ValueError(f"cannot tell the target's kind: {probe.note}")
    return check_run(target.factory, target.name, settings, probe.kind, check_id, mode)


def replay(
    check_id: str,
    factory: FactoryLike,
    scenario: GatherScenario,
    *,
    mode: Mode | None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | str = "float32",
    seed: int = _DEFAULT_SEED,
) -> None:
    """Run one scenario of a scenario-driven check, as a failure's reproduction snippet does;
    its :class:`~.results.CheckFailure` (an ``AssertionError``) goes up."""
    impl = IMPLEMENTATIONS.get(check_id)
    if impl is None or impl.example is None:
        raise ValueError(f"{check_id!r} is not a scenario-driven check")
    impl.example(_check_run_here(check_id, factory, mode, device, dtype, seed), scenario)


def life_machine_for(
    factory: FactoryLike,
    *,
    mode: Mode | None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | str = "float32",
    seed: int = _DEFAULT_SEED,
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
    seed: int = _DEFAULT_SEED,
) -> type[RuleBasedStateMachine]:
    """The machine of a C check (C1 or C2) for a target, to replay a failure's steps."""
    if check_id not in JUDGES:
        raise ValueError(f"check_id must be one of {sorted(JUDGES)}, got {check_id!r}")
    run = _check_run_here(check_id, factory, mode, device, dtype, seed)
    return change_life(run, JUDGES[check_id](run))
