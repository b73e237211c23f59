"""The suite catches each deliberately broken target by the clause it breaks, and only that.

Every gallery entry runs the whole suite (minus the cross-cutting checks, which any
gather fault fails by design) on the hand-placed cases, and the designated check also on
random examples. Detection rests on the hand-placed cases, so it does not depend on
what the random examples happen to hit.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from suite.gallery import (
    GALLERY,
    KIND_GALLERY,
    BrokenTarget,
    cross_attention_state,
    gatherer,
    hooked_state,
    model_state,
    untamper,
)
from support.extras import validate_when_possible

from rtmm_conformance.api import check_model_state
from rtmm_conformance.catalog import CHECKS, CHECKS_BY_ID, IMPLEMENTATIONS
from rtmm_conformance.results import Outcome


@pytest.fixture(autouse=True)
def _no_tampering_left() -> Iterator[None]:
    """A tampering target's patches end with its test (the suite runs it in this process)."""
    yield
    untamper()


#: Random examples per check in gallery runs (the hand-placed cases always run).
GALLERY_EXAMPLES = 3

_FAILING = (Outcome.FAILED, Outcome.WARNING)


def _clause_checks() -> list[str]:
    return [c for c, impl in IMPLEMENTATIONS.items() if not impl.cross_cutting]


@pytest.mark.parametrize(
    "entry",
    [*GALLERY, *KIND_GALLERY],
    ids=[e.name.replace(" ", "-") for e in (*GALLERY, *KIND_GALLERY)],
)
def test_broken_target_fails_the_check_of_its_clause(entry: BrokenTarget) -> None:
    designated = check_model_state(
        entry.factory, device="cpu", examples=GALLERY_EXAMPLES, shrink=False, checks=[entry.check]
    )
    caught = {r.outcome for r in designated.results} & set(_FAILING)
    assert caught, f"{entry.name} was not caught:\n{designated.table()}"
    report = check_model_state(entry.factory, device="cpu", examples=0, checks=_clause_checks())
    failing = {r.check_id for r in report.results if r.outcome in _FAILING}
    assert entry.check in failing or entry.check not in _clause_checks(), report.table()
    allowed = {entry.breaks, *entry.also}
    # Robustness checks probe outside the domain, where a fault may also show; a fault of
    # one clause must fail no *contract* check of another.
    stray = sorted(
        c
        for c in failing
        if CHECKS_BY_ID[c].clause not in allowed and CHECKS_BY_ID[c].profile == "contract"
    )
    assert not stray, f"{entry.name} also failed checks of other clauses:\n{report.table()}"


def test_designated_failures_have_the_checks_level() -> None:
    """A SHOULD check that catches its fault reports a warning, a MUST check a failure."""
    entry = next(e for e in GALLERY if e.check == "G6-pieces-carry-modality")
    report = check_model_state(
        entry.factory, device="cpu", examples=0, checks=["G6-pieces-carry-modality"]
    )
    assert {r.outcome for r in report.results} == {Outcome.WARNING}
    assert report.ok
    strict = check_model_state(
        entry.factory, device="cpu", examples=0, strict=True, checks=[entry.check]
    )
    assert {r.outcome for r in strict.results} == {Outcome.FAILED}
    assert not strict.ok


@pytest.mark.parametrize(
    ("factory", "hooks"),
    [
        (gatherer(), False),
        (model_state(), False),
        (model_state(gather_fault=None), False),
        (hooked_state(), True),
        (cross_attention_state(), True),
    ],
    ids=["gatherer", "state", "state-reference-runner", "state-with-hooks", "cross-attention"],
)
def test_fault_free_gallery_targets_conform(factory: object, hooks: bool) -> None:
    report = check_model_state(factory, device="cpu", examples=GALLERY_EXAMPLES)  # type: ignore[arg-type]
    assert report.ok, report.table()
    assert {r.outcome for r in report.results} <= {Outcome.PASSED, Outcome.SKIPPED}
    # Skipped: the CUDA-only checks, and M1's own for a target without the hooks.
    skipped = {r.check_id for r in report.results if r.outcome is Outcome.SKIPPED}
    m1 = "M1-hooks-hand-model-inputs"
    assert skipped - {m1} <= {"D4-dummy-no-allocation", "R4-cuda-graph-replay-matches-eager"}
    assert (m1 in skipped) == (not hooks and report.kind != "gatherer"), report.table()


def test_every_clause_has_a_gallery_entry() -> None:
    caught = {e.breaks for e in GALLERY} | {e.breaks for e in CUDA_GALLERY}
    assert {c.clause for c in CHECKS} <= caught
    should_checks = {c.id for c in CHECKS if c.level == "SHOULD"}
    assert should_checks <= {e.check for e in (*GALLERY, *KIND_GALLERY)}


#: Faults only a CUDA device shows: allocation statistics and graph replay, on a state
#: without the model-inputs hooks and on one with them (its capture is the hook's).
CUDA_GALLERY = (
    BrokenTarget(
        "dummy buffer allocated per call",
        model_state("dummy-reallocates"),
        "D4",
        "D4-dummy-no-allocation",
    ),
    BrokenTarget(
        "real path writes another buffer",
        model_state("separate-real-buffer"),
        "R4",
        "R4-cuda-graph-replay-matches-eager",
    ),
    BrokenTarget(
        "capture on a copy of the buffer",
        hooked_state("capture-copy"),
        "D4",
        "D4-dummy-no-allocation",
    ),
    BrokenTarget(
        "capture reads a buffer no real step writes",
        hooked_state("capture-own-buffer"),
        "R4",
        "R4-cuda-graph-replay-matches-eager",
    ),
)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
@pytest.mark.parametrize(
    "entry", CUDA_GALLERY, ids=[e.name.replace(" ", "-") for e in CUDA_GALLERY]
)
def test_cuda_faults_fail_their_check(entry: BrokenTarget) -> None:
    report = check_model_state(entry.factory, device="cuda", examples=0, checks=[entry.check])
    assert {r.outcome for r in report.results} == {Outcome.FAILED}, report.table()
    hooks = "hooked_state" in getattr(entry.factory, "__qualname__", "")
    clean_factory = hooked_state() if hooks else model_state()
    clean = check_model_state(clean_factory, device="cuda", examples=0, checks=[entry.check])
    assert clean.ok, clean.table()


def test_a_pre_rename_target_is_checked_via_compat_in_one_run() -> None:
    """T2 fails for the old name; the behavioural checks run through the compat adapter
    (not blocked), so the same run shows what the engine does on realtime decode steps.
    Every check runs: only T2's, G3's and the G8 life (the one check that re-verifies
    every gather clause through a life, by design) fail; C2 compares with a fresh state of
    the target itself, so a fault it has when fresh is not called stale."""
    entry = next(e for e in GALLERY if e.name == "pre-rename gatherer, no decode-step gathering")
    report = check_model_state(entry.factory, device="cpu", examples=GALLERY_EXAMPLES)
    failing = {r.check_id for r in report.results if r.outcome in _FAILING}
    assert {CHECKS_BY_ID[c].clause for c in failing if c in _clause_checks()} == {"T2", "G3"}
    assert failing - set(_clause_checks()) == {"G8-stateful-life-matches-oracle"}, report.table()
    assert not [r for r in report.results if r.outcome is Outcome.BLOCKED], report.table()
    g3 = [r for r in report.results if r.check_id == "G3-realtime-decode-gathers"]
    assert g3
    assert all(r.via_compat for r in g3)
    data = report.to_json()
    assert "G3-realtime-decode-gathers" in data["summary"]["via_compat"]  # type: ignore[index]
    assert "via compat" in report.table()


def test_failures_shared_with_the_baseline_are_inherited_and_the_rest_own() -> None:
    """A gatherer that kept its base's gap (copies for pieces, G6) is not blamed for it; one
    whose base does not have the gap is."""
    checks = ["G6-pieces-are-views", "G4-mask-type-shape"]
    kept = check_model_state(
        gatherer("copies-not-views"), baseline=gatherer("copies-not-views"),
        device="cpu", examples=0, checks=checks,
    )  # fmt: skip
    rows = {row.info.id: row for row in kept.checks()}
    assert rows["G6-pieces-are-views"].origin == "inherited", kept.table()
    assert rows["G4-mask-type-shape"].origin is None
    assert "0 failures of yours, 1 inherited from suite.gallery:gatherer[copies-not-views]" in (
        kept.summary_line()
    )
    assert not kept.ok  # an inherited failure is still a failure
    added = check_model_state(
        gatherer("copies-not-views"), baseline=gatherer("mask-int64"),
        device="cpu", examples=0, checks=checks,
    )  # fmt: skip
    rows = {row.info.id: row for row in added.checks()}
    assert rows["G6-pieces-are-views"].origin == "own", added.table()
    data: Any = added.to_json()
    assert data["summary"]["failed_own"] == 1
    assert data["checks"][0]["origin"] in ("own", None)
    assert "[cause 1; own]" in added.table()
    validate_when_possible(data)


def test_a_fault_of_the_state_level_gather_alone_is_not_a_merge_fault() -> None:
    """A state whose real path merges the contract's gather, as vLLM's states do, is not
    failed by R2 for a gather method of its own that differs: the gather checks judge that.
    Random examples are drawn: the hand-placed prompt steps alone do not show it."""
    factory = model_state("late-mask")
    report = check_model_state(factory, device="cpu", examples=12, checks=["R2", "G1"])
    outcomes = {r.check_id: r.outcome for r in report.results if r.mode == "realtime"}
    assert outcomes["R2-merged-rows-match-eager"] is Outcome.PASSED, report.table()
    assert outcomes["G1-window-slots"] is Outcome.FAILED, report.table()


def test_a_fresh_dummy_copy_fails_the_buffer_test_in_every_life() -> None:
    """Each life keeps its first dummy run's tensor, so a copy made per call (and freed by
    the caller) cannot pass by being given the address of the one before it."""
    lives = ["G8-stateful-life-matches-oracle", "C1-changes-accepted", "C2-changes-never-stale"]
    report = check_model_state(
        model_state("dummy-fresh-copy"), device="cpu", examples=0, checks=lives
    )
    assert {(r.check_id, r.mode) for r in report.results} == {
        (check, mode) for check in lives for mode in ("realtime", "non-realtime")
    }
    for result in report.results:
        assert result.outcome is Outcome.FAILED, report.table()
        assert result.reason == "a dummy run returned another buffer later in the state's life"
        assert result.details.count("state.dummy_run(size=3)") == 2, result.details
