"""Binding check implementations to the catalog's IDs.

Each ``checks/*.py`` module decorates its functions with :func:`check` or
:func:`scenario_check`; :func:`implementations` imports them all and returns the
registry. A self-test asserts that the registry and the catalog list the same IDs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from rtmm_protocol.conformance.catalog import CHECKS_BY_ID, CheckInfo
from rtmm_protocol.conformance.check_run import CheckRun
from rtmm_protocol.conformance.context import MODES, Mode
from rtmm_protocol.conformance.strategies import GatherScenario

__all__ = [
    "BASIC_PREREQUISITES",
    "CheckImpl",
    "ExampleBody",
    "check",
    "implementations",
    "scenario_check",
]

#: What every behavioural check needs first: a target with the Protocol's members whose
#: parameter names are current (else every call would fail the same way).
BASIC_PREREQUISITES: tuple[str, ...] = ("T1-protocol-members", "T2-no-renamed-parameters")

#: ``body(run, scenario)``: one example of a scenario-driven check.
ExampleBody = Callable[[CheckRun, GatherScenario], None]

_CHECK_MODULES = (
    "rtmm_protocol.conformance.checks.signatures",
    "rtmm_protocol.conformance.checks.gather",
    "rtmm_protocol.conformance.checks.stateful",
    "rtmm_protocol.conformance.checks.dummy_run",
    "rtmm_protocol.conformance.checks.real_path",
    "rtmm_protocol.conformance.checks.cuda_graphs",
    "rtmm_protocol.conformance.checks.errors",
)

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


def _info(check_id: str) -> CheckInfo:
    try:
        return CHECKS_BY_ID[check_id]
    except KeyError:
        raise RuntimeError(f"check {check_id!r} is not in the catalog") from None


def check(
    check_id: str,
    *,
    modes: tuple[Mode | None, ...] = MODES,
    prerequisites: tuple[str, ...] = BASIC_PREREQUISITES,
    cross_cutting: bool = False,
    needs_cuda: bool = False,
) -> Callable[[Callable[[CheckRun], None]], Callable[[CheckRun], None]]:
    """Register ``fn(run)`` as the implementation of a catalog check."""

    def decorate(fn: Callable[[CheckRun], None]) -> Callable[[CheckRun], None]:
        _register(
            CheckImpl(
                info=_info(check_id),
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
    *,
    strategy: Callable[[CheckRun], st.SearchStrategy[GatherScenario]],
    cases: Callable[[CheckRun], Iterable[GatherScenario]] | Sequence[GatherScenario] = (),
    modes: tuple[Mode | None, ...] = MODES,
    prerequisites: tuple[str, ...] = BASIC_PREREQUISITES,
    cross_cutting: bool = False,
) -> Callable[[ExampleBody], ExampleBody]:
    """Register ``body(run, scenario)`` run over hand-placed cases and random scenarios."""

    def decorate(body: ExampleBody) -> ExampleBody:
        def run(r: CheckRun) -> None:
            fixed = cases(r) if callable(cases) else cases
            r.for_each_scenario(strategy(r), fixed, lambda scenario: body(r, scenario))

        _register(
            CheckImpl(
                info=_info(check_id),
                run=run,
                modes=modes,
                prerequisites=prerequisites,
                cross_cutting=cross_cutting,
                example=body,
            )
        )
        return body

    return decorate


def implementations() -> Mapping[str, CheckImpl]:
    """Every registered check, keyed by ID, in catalog order."""
    for module in _CHECK_MODULES:
        importlib.import_module(module)
    return {c.id: _REGISTRY[c.id] for c in CHECKS_BY_ID.values() if c.id in _REGISTRY}
