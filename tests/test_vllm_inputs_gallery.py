"""Faults where the model reads its inputs (SPEC M1) are found, each by its own clause.

For each class of the model-inputs gallery (``tests/vllm_inputs_gallery.py``: subclasses of
vLLM's ``DefaultModelState``, of its cross-attention state and of its Qwen4-Exp state, one
fault each in ``prepare_inputs`` or ``prepare_dummy_inputs``) every contract check runs:
the designated check must fail as the class's own, and a check of any clause but the
designated check's and those the gallery names may not fail (a cross-cutting check, which
re-verifies several clauses in one life, may). Skipped with a reason where vLLM is not
installed; each run is in this process (``isolation="off"``).
"""

from __future__ import annotations

import pytest
from test_vllm_adapter import HAS_VLLM, needs_vllm

from rtmm_conformance.api import check_model_state
from rtmm_conformance.catalog import CHECKS, CHECKS_BY_ID, IMPLEMENTATIONS
from rtmm_conformance.reporting.report import ConformanceReport
from rtmm_conformance.results import Outcome

if HAS_VLLM:
    from vllm_inputs_gallery import INPUTS_GALLERY
else:  # the parameters still need names for the skipped tests
    INPUTS_GALLERY = {}

#: Random examples per check (the hand-placed cases always run).
EXAMPLES = 8


def _rows(report: ConformanceReport) -> str:
    return "\n".join(
        f"{row.info.id}: {row.outcome.value} ({row.origin}) {row.reason}" for row in report.checks()
    )


@needs_vllm
@pytest.mark.parametrize("name", sorted(INPUTS_GALLERY) or ["(vLLM missing)"])
def test_a_model_inputs_fault_fails_its_clause_and_nothing_else(name: str) -> None:
    check, reaches = INPUTS_GALLERY[name]
    allowed = {CHECKS_BY_ID[check].clause, *reaches}
    report = check_model_state(
        f"vllm:vllm_inputs_gallery:{name}",
        checks=[c.id for c in CHECKS if c.profile == "contract"],
        device="cpu",
        examples=EXAMPLES,
        isolation="off",
    )
    rows = {row.info.id: row for row in report.checks()}
    assert rows[check].outcome is Outcome.FAILED, _rows(report)
    assert rows[check].origin == "own", _rows(report)
    elsewhere = [
        row.info.id
        for row in rows.values()
        if row.outcome is Outcome.FAILED
        and row.info.clause not in allowed
        and not IMPLEMENTATIONS[row.info.id].cross_cutting
    ]
    assert not elsewhere, _rows(report)
