"""Defining checks: the decorator that gives a check function its ID, level and statement,
and the registry it records them in, from which :mod:`..catalog` lists every check."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from hypothesis import strategies as st

from rtmm_conformance.clauses import (
    AREAS,
    CLAUSES,
    DEFAULT_KINDS,
    DEFAULT_SINCE,
    LEVELS,
    PROFILES,
    TARGET_KINDS,
    CheckInfo,
    Level,
    Profile,
    TargetKind,
    clause_of,
)
from rtmm_conformance.driving.check_run import CheckRun
from rtmm_conformance.driving.context import MODES, Mode
from rtmm_protocol.testing.scenario import GatherScenario

__all__ = ["BASIC_PREREQUISITES", "CheckImpl", "ExampleBody", "check", "implementations"]

#: What every behavioural check needs first: a target with the Protocol's members whose
#: parameter names are current (else every call would fail the same way).
BASIC_PREREQUISITES: tuple[str, ...] = ("T1-protocol-members", "T2-no-renamed-parameters")

#: ``body(run, scenario)``: one example of a scenario-driven check.
ExampleBody = Callable[[CheckRun, GatherScenario], None]
_Strategy = Callable[[CheckRun], st.SearchStrategy[GatherScenario]]
_Cases = Callable[[CheckRun], Iterable[GatherScenario]] | Sequence[GatherScenario]
_F = TypeVar("_F", bound=Callable[..., None])

_REGISTRY: dict[str, CheckImpl] = {}


@dataclass(frozen=True)
class CheckImpl:
    """The code of one check and how to run it: in ``modes`` (``None``: any one the factory
    accepts), blocked by failing ``prerequisites``; ``cross_cutting`` checks re-verify several
    clauses at once; ``example`` runs one scenario of a scenario-driven check."""

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


def check(
    check_id: str,
    level: Level,
    statement: str,
    *,
    kinds: tuple[TargetKind, ...] = DEFAULT_KINDS,
    since: str = DEFAULT_SINCE,
    profile: Profile = "contract",
    modes: tuple[Mode | None, ...] = MODES,
    prerequisites: tuple[str, ...] = BASIC_PREREQUISITES,
    cross_cutting: bool = False,
    needs_cuda: bool = False,
    strategy: _Strategy | None = None,
    cases: _Cases = (),
) -> Callable[[_F], _F]:
    """Define the check ``check_id`` as ``fn(run)``; with a ``strategy``, as
    ``fn(run, scenario)`` over the ``cases``, then random scenarios."""

    def decorate(fn: _F) -> _F:
        area = fn.__module__.rsplit(".", 1)[-1]
        info = CheckInfo(
            id=check_id,
            clause=clause_of(check_id),
            level=level,
            area=area,  # type: ignore[arg-type]  # checked next
            statement=statement,
            since=since,
            kinds=kinds,
            profile=profile,
        )
        problem = _problem_with(info)
        if problem:
            raise RuntimeError(f"check {check_id!r} in {fn.__module__}: {problem}")
        if check_id in _REGISTRY:
            raise RuntimeError(f"check {check_id!r} is registered twice")
        run = fn if strategy is None else _over_scenarios(fn, strategy, cases)
        example = None if strategy is None else fn
        _REGISTRY[check_id] = CheckImpl(
            info, run, modes, prerequisites, cross_cutting, needs_cuda, example
        )
        return fn

    return decorate


def _problem_with(info: CheckInfo) -> str:
    """What is wrong with a check's declaration ("" if nothing)."""
    if info.clause not in CLAUSES:
        return f"its ID must start with a clause of the specification ({', '.join(CLAUSES)})"
    if info.area not in AREAS:
        return f"checks are defined in checks/<area>.py for an area of {AREAS}"
    if info.level not in LEVELS or info.profile not in PROFILES:
        return f"level must be one of {LEVELS} and profile one of {PROFILES}"
    if info.profile == "robustness" and info.level != "SHOULD":
        return "a robustness check is SHOULD for third parties"
    if not info.kinds or not set(info.kinds) <= set(TARGET_KINDS):
        return f"kinds must be a non-empty tuple of {TARGET_KINDS}"
    return ""


def _over_scenarios(
    body: ExampleBody, strategy: _Strategy, cases: _Cases
) -> Callable[[CheckRun], None]:
    def run(r: CheckRun) -> None:
        fixed = cases(r) if callable(cases) else cases
        r.for_each_scenario(strategy(r), fixed, lambda scenario: body(r, scenario))

    return run


def implementations() -> Mapping[str, CheckImpl]:
    """Every check registered so far (by the area modules imported so far), in clause order
    (the specification's), then in the order the areas and their checks are defined."""
    order = {clause: index for index, clause in enumerate(CLAUSES)}
    # A stable sort: within an area, the order of definition stays.
    ranked = sorted(
        _REGISTRY.values(), key=lambda c: (order[c.info.clause], AREAS.index(c.info.area))
    )
    return {c.id: c for c in ranked}
