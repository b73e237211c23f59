"""vLLM's own classes keep the contract, and a subclass's own fault is reported by its clause.

The gallery (``tests/vllm_gallery.py``) holds subclasses of vLLM's ``DefaultModelState``
and ``EncoderRunner`` with one fault of their own each. For each, the suite runs the
contract checks of the clause the fault breaks: the designated check must fail as the
class's own, and no check of that clause may call the failure inherited from vLLM's class
(the suite reruns a failing check on vLLM's class with the same draws; a fault of the
subclass must not fail there). Robustness checks are left out of those runs: where one
fails, it is for vLLM's own robustness gaps (a zero-token request trips an assertion in
vLLM's gather), which the subclass rightly inherits.

vLLM's two classes by name, and a subclass that overrides nothing, run at the suite's
defaults without any known-gaps file and must have no contract failure. Everything runs in
this process (``isolation="off"``): one import of vLLM instead of one per worker process.
Skipped with a reason where vLLM is not installed.
"""

from __future__ import annotations

import pytest
from test_vllm_adapter import DEFAULT_STATE, ENCODER_RUNNER, HAS_VLLM, needs_vllm

from rtmm_conformance.api import check_model_state
from rtmm_conformance.catalog import CHECKS, CHECKS_BY_ID
from rtmm_conformance.reporting.report import ConformanceReport
from rtmm_conformance.results import Outcome

if HAS_VLLM:
    from vllm_gallery import GALLERY
else:  # the parameters still need names for the skipped tests
    GALLERY = {}

#: Random examples per check for the gallery (the hand-placed cases always run).
EXAMPLES = 12

#: Clauses judged for a class besides the one of its designated check: a mask shifted one
#: slot late is a fault of the slots, which G1 and G4 both speak of.
ALSO_JUDGED = {"LateMaskState": ("G4",)}


def _contract_checks(clauses: tuple[str, ...]) -> list[str]:
    return [c.id for c in CHECKS if c.clause in clauses and c.profile == "contract"]


def _rows(report: ConformanceReport) -> str:
    return "\n".join(
        f"{row.info.id}: {row.outcome.value} ({row.origin}) {row.reason}" for row in report.checks()
    )


@needs_vllm
@pytest.mark.parametrize("name", sorted(GALLERY) or ["(vLLM missing)"])
def test_a_subclass_fault_is_reported_by_its_clause_as_its_own(name: str) -> None:
    check = GALLERY[name]
    clauses = (CHECKS_BY_ID[check].clause, *ALSO_JUDGED.get(name, ()))
    report = check_model_state(
        f"vllm:vllm_gallery:{name}",
        checks=_contract_checks(clauses),
        device="cpu",
        examples=EXAMPLES,
        isolation="off",
    )
    rows = {row.info.id: row for row in report.checks()}
    designated = rows[check]
    assert designated.outcome is Outcome.FAILED, _rows(report)
    assert designated.origin == "own", _rows(report)
    inherited = [row.info.id for row in rows.values() if row.origin == "inherited"]
    assert not inherited, _rows(report)


@needs_vllm
@pytest.mark.parametrize(
    "spec",
    [DEFAULT_STATE, ENCODER_RUNNER, "vllm_gallery:PlainSubclassState"],
    ids=["DefaultModelState", "EncoderRunner", "PlainSubclassState"],
)
def test_vllms_classes_and_a_plain_subclass_keep_the_contract(spec: str) -> None:
    """At the suite's defaults, without known gaps: no contract failure. The subclass runs
    the contract checks only (its robustness failures are vLLM's, rerun on vLLM's class)."""
    plain = spec.startswith("vllm_gallery:")
    report = check_model_state(
        f"vllm:{spec}",
        checks=[c.id for c in CHECKS if c.profile == "contract"] if plain else None,
        device="cpu",
        isolation="off",
    )
    failed = [
        row.info.id
        for row in report.checks()
        if row.profile == "contract" and row.outcome is Outcome.FAILED
    ]
    assert failed == [], _rows(report)
    assert report.ok, report.summary_line()
