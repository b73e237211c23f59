"""Targets that crash, segfault, interrupt or hang fail the check they broke, and only it.

Each runs the whole suite (minus the cross-cutting checks) in a worker process:
the run must complete, report the fault under its clause, and wait out a hang once.
"""

from __future__ import annotations

import time

import pytest
from suite.gallery import BrokenTarget
from suite.gallery_process import PROCESS_GALLERY
from support.extras import validate_when_possible

from rtmm_conformance.api import check_model_state
from rtmm_conformance.catalog import CHECKS_BY_ID, IMPLEMENTATIONS
from rtmm_conformance.results import Outcome

#: The hang limit of these runs: short, so that a hang costs little, once.
TIMEOUT_S = 3.0

_FAILING = {Outcome.FAILED, Outcome.WARNING}


def _clause_checks() -> list[str]:
    return [c for c, impl in IMPLEMENTATIONS.items() if not impl.cross_cutting]


@pytest.mark.parametrize(
    "entry", PROCESS_GALLERY, ids=[e.name.replace(" ", "-") for e in PROCESS_GALLERY]
)
def test_process_fault_fails_the_check_of_its_clause(entry: BrokenTarget) -> None:
    started = time.perf_counter()
    report = check_model_state(
        entry.factory,
        device="cpu",
        examples=0,
        checks=_clause_checks(),
        timeout_s=TIMEOUT_S,
        isolation="process",
    )
    elapsed = time.perf_counter() - started
    assert report.complete, report.table()
    assert report.ok is (CHECKS_BY_ID[entry.check].level == "SHOULD" and not entry.also)
    validate_when_possible(report.to_json())
    by_check: dict[str, set[Outcome]] = {}
    for result in report.results:
        by_check.setdefault(result.check_id, set()).add(result.outcome)
    assert by_check[entry.check] & _FAILING, f"{entry.name} was not caught:\n{report.table()}"
    failing = {c for c, outcomes in by_check.items() if outcomes & _FAILING}
    allowed = {entry.breaks, *entry.also}
    stray = sorted(c for c in failing if CHECKS_BY_ID[c].clause not in allowed)
    assert not stray, f"{entry.name} also failed checks of other clauses:\n{report.table()}"
    # A hang is waited out once; the checks that would call into it again are blocked.
    hung = [r for r in report.results if "did not finish within" in r.reason]
    assert len(hung) <= 1
    assert elapsed < 60 + TIMEOUT_S * len(hung)
    blocked = [r for r in report.results if r.outcome is Outcome.BLOCKED]
    assert all(hung[0].label in r.reason for r in blocked) if hung else not blocked
    causes = report.causes()
    assert len(causes) == 1, report.causes_text()
    assert "gallery_process.py" in causes[0].title
