"""Defining checks: the decorators that give a check function its ID, level and statement
(the catalog reads them from the source: a record that differs from the catalog's is refused)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from hypothesis import strategies as st

from rtmm_conformance.catalog import (
    CHECKS_BY_ID,
    DEFAULT_SINCE,
    DEFAULT_TARGETS,
    CheckInfo,
    Level,
    Profile,
    TargetKind,
    clause_of,
)
from rtmm_conformance.driving.check_run import CheckRun
from rtmm_conformance.driving.context import MODES, Mode
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
    targets: tuple[TargetKind, ...] = DEFAULT_TARGETS,
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
        info = CheckInfo(
            id=check_id,
            clause=clause_of(check_id),
            level=level,
            area=fn.__module__.rsplit(".", 1)[-1],  # type: ignore[arg-type]  # checked below
            statement=statement,
            since=since,
            targets=targets,
            profile=profile,
        )
        listed = CHECKS_BY_ID.get(check_id)
        if listed != info:
            raise RuntimeError(
                f"check {check_id!r} in {fn.__module__} differs from the catalog's record "
                f"({listed!r}); a check is defined in checks/<area>.py by a decorator whose "
                "arguments are literals"
            )
        if check_id in _REGISTRY:
            raise RuntimeError(f"check {check_id!r} is registered twice")
        run = fn if strategy is None else _over_scenarios(fn, strategy, cases)
        example = None if strategy is None else fn
        _REGISTRY[check_id] = CheckImpl(
            info, run, modes, prerequisites, cross_cutting, needs_cuda, example
        )
        return fn

    return decorate


#: :func:`check` for a check run over scenarios (given a ``strategy``): ``body(run, scenario)``.
scenario_check = check


def _over_scenarios(
    body: ExampleBody, strategy: _Strategy, cases: _Cases
) -> Callable[[CheckRun], None]:
    def run(r: CheckRun) -> None:
        fixed = cases(r) if callable(cases) else cases
        r.for_each_scenario(strategy(r), fixed, lambda scenario: body(r, scenario))

    return run


def registered() -> Mapping[str, CheckImpl]:
    """Every check registered so far (by the area modules imported so far), in catalog order."""
    return {c.id: _REGISTRY[c.id] for c in CHECKS_BY_ID.values() if c.id in _REGISTRY}
