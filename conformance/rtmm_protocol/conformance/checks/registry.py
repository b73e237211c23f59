"""Defining checks: the decorators that give a check function its ID, level and statement.

Each ``checks/<area>.py`` module decorates its functions with :func:`check` or
:func:`scenario_check`, whose first three arguments (ID, level, statement) and
``targets``/``since`` options are the check's one definition. The catalog reads the same
decorators from the source without importing anything; registering refuses a check whose
record differs from the catalog's (a decorator whose arguments are not literals).
:func:`~.all_checks.implementations` imports every area and returns what registered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from rtmm_protocol.conformance.catalog import (
    CHECKS_BY_ID,
    DEFAULT_SINCE,
    DEFAULT_TARGETS,
    CheckInfo,
    Level,
    TargetKind,
)
from rtmm_protocol.conformance.driving.check_run import CheckRun
from rtmm_protocol.conformance.driving.context import MODES, Mode
from rtmm_protocol.testing.scenario import GatherScenario

__all__ = [
    "BASIC_PREREQUISITES",
    "CheckImpl",
    "ExampleBody",
    "check",
    "registered",
    "scenario_check",
]

#: What every behavioural check needs first: a target with the Protocol's members whose
#: parameter names are current (else every call would fail the same way).
BASIC_PREREQUISITES: tuple[str, ...] = ("T1-protocol-members", "T2-no-renamed-parameters")

#: ``body(run, scenario)``: one example of a scenario-driven check.
ExampleBody = Callable[[CheckRun, GatherScenario], None]

_REGISTRY: dict[str, CheckImpl] = {}


@dataclass(frozen=True)
class CheckImpl:
    """The code of one check and how to run it.

    ``modes`` lists the modes it runs in (``None``: once, in whichever mode the factory
    accepts); ``prerequisites`` the checks whose failure blocks it; ``cross_cutting``
    marks checks that re-verify several clauses at once (the stateful and whole-state
    differential checks), which any gather fault can fail; ``example`` replays one
    scenario of a scenario-driven check.
    """

    info: CheckInfo
    run: Callable[[CheckRun], None]
    modes: tuple[Mode | None, ...]
    prerequisites: tuple[str, ...]
    cross_cutting: bool = False
    needs_cuda: bool = False
    example: ExampleBody | None = None

    @property
    def id(self) -> str:
        """The check ID."""
        return self.info.id


def _register(impl: CheckImpl) -> None:
    if impl.id in _REGISTRY:
        raise RuntimeError(f"check {impl.id!r} is registered twice")
    _REGISTRY[impl.id] = impl


def _info(
    check_id: str,
    level: Level,
    statement: str,
    targets: tuple[TargetKind, ...],
    since: str,
    fn: Callable[..., None],
) -> CheckInfo:
    """The check's record as its decorator states it; it must be the catalog's."""
    info = CheckInfo(
        id=check_id,
        clause=check_id.split("-", 1)[0],
        level=level,
        area=fn.__module__.rsplit(".", 1)[-1],  # type: ignore[arg-type]  # checked below
        statement=statement,
        since=since,
        targets=targets,
    )
    listed = CHECKS_BY_ID.get(check_id)
    if listed != info:
        raise RuntimeError(
            f"check {check_id!r} in {fn.__module__} differs from the catalog's record "
            f"({listed!r}); a check is defined in checks/<area>.py by a decorator whose "
            "arguments are literals"
        )
    return info


def check(
    check_id: str,
    level: Level,
    statement: str,
    *,
    targets: tuple[TargetKind, ...] = DEFAULT_TARGETS,
    since: str = DEFAULT_SINCE,
    modes: tuple[Mode | None, ...] = MODES,
    prerequisites: tuple[str, ...] = BASIC_PREREQUISITES,
    cross_cutting: bool = False,
    needs_cuda: bool = False,
) -> Callable[[Callable[[CheckRun], None]], Callable[[CheckRun], None]]:
    """Define the check ``check_id`` (its level and statement) as ``fn(run)``."""

    def decorate(fn: Callable[[CheckRun], None]) -> Callable[[CheckRun], None]:
        _register(
            CheckImpl(
                info=_info(check_id, level, statement, targets, since, fn),
                run=fn,
                modes=modes,
                prerequisites=prerequisites,
                cross_cutting=cross_cutting,
                needs_cuda=needs_cuda,
            )
        )
        return fn

    return decorate


def scenario_check(
    check_id: str,
    level: Level,
    statement: str,
    *,
    targets: tuple[TargetKind, ...] = DEFAULT_TARGETS,
    since: str = DEFAULT_SINCE,
    strategy: Callable[[CheckRun], st.SearchStrategy[GatherScenario]],
    cases: Callable[[CheckRun], Iterable[GatherScenario]] | Sequence[GatherScenario] = (),
    modes: tuple[Mode | None, ...] = MODES,
    prerequisites: tuple[str, ...] = BASIC_PREREQUISITES,
    cross_cutting: bool = False,
) -> Callable[[ExampleBody], ExampleBody]:
    """Define the check ``check_id`` as ``body(run, scenario)`` over cases and random scenarios."""

    def decorate(body: ExampleBody) -> ExampleBody:
        def run(r: CheckRun) -> None:
            fixed = cases(r) if callable(cases) else cases
            r.for_each_scenario(strategy(r), fixed, lambda scenario: body(r, scenario))

        _register(
            CheckImpl(
                info=_info(check_id, level, statement, targets, since, body),
                run=run,
                modes=modes,
                prerequisites=prerequisites,
                cross_cutting=cross_cutting,
                example=body,
            )
        )
        return body

    return decorate


def registered() -> Mapping[str, CheckImpl]:
    """Every check registered so far (by the area modules imported so far), in catalog order."""
    return {c.id: _REGISTRY[c.id] for c in CHECKS_BY_ID.values() if c.id in _REGISTRY}
