"""Verdicts, reports, expected-failure files, the compliance matrix, requirement sets."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from suite.gallery import FaultyGatherer, gatherer
from support.extras import JSONSCHEMA_MISSING, needs_jsonschema, validate_when_possible

from rtmm_conformance.api import (
    check_model_state,
    replay,
)
from rtmm_conformance.catalog import CHECKS_BY_ID, IMPLEMENTATIONS, known_versions
from rtmm_conformance.checks import cases
from rtmm_conformance.console import rerun_command
from rtmm_conformance.driving.context import Mode
from rtmm_conformance.driving.factories import Target
from rtmm_conformance.driving.gather_call import describe_error
from rtmm_conformance.frames import TargetError
from rtmm_conformance.reporting.judge import judge
from rtmm_conformance.reporting.matrix import main as matrix_main
from rtmm_conformance.reporting.report import ConformanceReport, aggregate
from rtmm_conformance.reporting.schema import REPORT_SCHEMA, report_schema, validate_report
from rtmm_conformance.reporting.xfail import parse_xfail_text
from rtmm_conformance.results import CheckFailure, CheckResult, Outcome
from rtmm_conformance.running.cause_keys import cause_of_failure
from rtmm_conformance.running.runner import SuiteRunner
from rtmm_conformance.running.verdict import Probe, environment_info, failed
from rtmm_conformance.running.workers import InProcess
from rtmm_conformance.settings import RunSettings
from rtmm_conformance.targets import reference_model_state
from rtmm_protocol.testing.scenario import FeatureSpec, GatherScenario, RequestSpec

G5 = CHECKS_BY_ID["G5-rows-match-mask"]
D5 = CHECKS_BY_ID["D5-oversize-raises"]


def _result(check: str, mode: str | None, outcome: Outcome, reason: str = "") -> CheckResult:
    return CheckResult(check, mode, outcome, reason)


def _report(results: list[CheckResult], **kwargs: object) -> ConformanceReport:
    return ConformanceReport(
        target="t:f",
        kind="model_state",
        settings=RunSettings(device=torch.device("cpu")).summary(),
        environment=environment_info(torch.device("cpu")),
        results=results,
        **kwargs,  # type: ignore[arg-type]
    )


def test_judge_applies_level_strictness_and_expected_failures() -> None:
    failed = _result(D5.id, "realtime", Outcome.FAILED, "clamped")
    assert judge(failed, D5, fail_on="contract").outcome is Outcome.WARNING
    assert judge(failed, D5, fail_on="all").outcome is Outcome.FAILED
    must = _result(G5.id, "realtime", Outcome.FAILED, "wrong row")
    assert judge(must, G5, fail_on="own").outcome is Outcome.FAILED
    expected = parse_xfail_text("G5 known\n")
    xfailed = judge(must, G5, fail_on="all", expected=expected)
    assert xfailed.outcome is Outcome.XFAILED
    assert "known" in xfailed.reason
    passed = _result(G5.id, "realtime", Outcome.PASSED)
    assert judge(passed, G5, fail_on="all", expected=expected).outcome is Outcome.PASSED


def test_a_check_shows_its_worst_mode() -> None:
    row = aggregate(
        G5,
        [
            _result(G5.id, "realtime", Outcome.PASSED),
            _result(G5.id, "non-realtime", Outcome.FAILED, "row 3 instead of 2"),
        ],
    )
    assert row.outcome is Outcome.FAILED
    assert row.reason == "[non-realtime] row 3 instead of 2"


def test_summary_line_counts_checks_not_modes() -> None:
    report = _report(
        [
            _result(G5.id, "realtime", Outcome.PASSED),
            _result(G5.id, "non-realtime", Outcome.PASSED),
            _result(D5.id, "realtime", Outcome.WARNING, "clamped"),
            _result("G6-pieces-carry-modality", "realtime", Outcome.WARNING, "no modality"),
            _result("G1-window-slots", "realtime", Outcome.FAILED, "slot"),
        ]
    )
    assert report.summary_line() == (
        "contract: 1 passed, 1 failed (MUST), 1 warning (SHOULD); "
        "robustness: 0 passed, 1 failed (SHOULD)"
    )
    assert not report.ok
    table = report.table().splitlines()
    assert table[0].split() == ["clause", "profile", "level", "check", "outcome", "reason"]
    assert [line.split()[3] for line in table[1:]] == [
        "G1-window-slots",
        G5.id,
        "G6-pieces-carry-modality",
        D5.id,
    ]
    assert table[-1].split()[:3] == ["D5", "robustness", "SHOULD"]


def test_strict_reports_fail_on_stale_entries() -> None:
    results = [_result(G5.id, "realtime", Outcome.PASSED)]
    assert _report(results, stale_expected_failures=["x:1: G5"]).ok
    strict = _report(results, fail_on="all", stale_expected_failures=["x:1: G5"])
    assert not strict.ok
    assert "1 stale expected-failure entry" in strict.summary_line()


def test_xfail_file_entries_match_clauses_checks_and_modes() -> None:
    text = (
        "# gaps\n\n"
        "G6                           whole clause\n"
        "G5-rows-match-mask[realtime] one mode\n"
        "D5-oversize-raises           both modes\n"
        "Z9-typo                      nothing\n"
    )
    xfail = parse_xfail_text(text, "gaps.txt")
    assert xfail.entry_for("G6-pieces-are-views", "realtime").where == "gaps.txt:3"  # type: ignore[union-attr]
    assert xfail.entry_for(G5.id, "realtime") is not None
    assert xfail.entry_for(G5.id, "non-realtime") is None
    assert [e.key for e in xfail.unknown()] == ["Z9-typo"]
    stale = xfail.stale(
        [
            ("G6-pieces-are-views", "realtime", "xfailed"),
            (G5.id, "realtime", "passed"),
            (D5.id, "realtime", "skipped"),
        ]
    )
    assert [e.key for e in stale] == ["G5-rows-match-mask[realtime]"]
    with pytest.raises(ValueError, match=r"gaps.txt:1: .*needs a reason"):
        parse_xfail_text("G5\n", "gaps.txt")


def test_requirement_sets_leave_newer_checks_out() -> None:
    checks = dict(IMPLEMENTATIONS)
    newer = replace(checks[G5.id], info=replace(G5, since="1.2"))
    checks[G5.id] = newer
    runner = SuiteRunner(
        Target(reference_model_state, "ref"),
        RunSettings(device=torch.device("cpu")),
        Probe("model_state", ""),
        InProcess(),
        environment=environment_info(torch.device("cpu")),
        checks=checks,
    )
    planned = {p.impl.id for p in runner.plan()}
    assert G5.id not in planned
    assert "G4-mask-type-shape" in planned
    assert known_versions() == ["1.0", "1.1"]
    with pytest.raises(ValueError, match=r"known: 1\.0, 1\.1"):
        check_model_state(reference_model_state, device="cpu", version="0.9")


def test_a_verdict_record_survives_its_json_round_trip() -> None:
    case = GatherScenario(
        requests=(RequestSpec("a", 5, 3, 2, (FeatureSpec("a0", 1, 3, (True, False, True)),)),),
        extra_requests=(RequestSpec("b", 4, 0, 0, (FeatureSpec("b0", 0, 2, cached=False),)),),
    )
    result = CheckResult(
        G5.id, "realtime", Outcome.FAILED, "wrong row", "details", 0.25, ("k1", "k2"), "t",
        case=case, case_words=case.describe(True), replay="r", origin="own",
        error=TargetError("KeyError", "'a'", ("/x/model.py", 3, "gather")),
    )  # fmt: skip
    again = CheckResult.from_json(result.to_json())
    assert again == result
    assert again.case is not None
    assert hash(again.case) == hash(case)


def test_json_report_and_matrix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = check_model_state(reference_model_state, device="cpu", examples=0, checks=["G5", "D5"])
    report.write_json(tmp_path / "ref.json")
    other = json.loads((tmp_path / "ref.json").read_text())
    other["target"] = "acme:make"
    for entry in other["checks"]:
        if entry["id"] == D5.id:
            entry["outcome"] = "warning"
    (tmp_path / "acme.json").write_text(json.dumps(other))
    status = matrix_main([f"ref={tmp_path / 'ref.json'}", str(tmp_path / "acme.json")])
    assert status == 0
    markdown = capsys.readouterr().out
    lines = markdown.splitlines()
    assert lines[0] == "| clause | level | check | ref | acme:make |"
    assert "| D5 | SHOULD (robustness) | `D5-oversize-raises` | pass | warn |" in lines
    html_path = tmp_path / "matrix.html"
    assert matrix_main([str(tmp_path / "ref.json"), "--html", str(html_path)]) == 0
    assert '<td class="pass">pass</td>' in html_path.read_text()
    (tmp_path / "bad.json").write_text("{}")
    assert matrix_main([str(tmp_path / "bad.json")]) == 2
    assert "not a conformance report" in capsys.readouterr().err


def _failure_raised_here(what: str, case: GatherScenario | None = None) -> CheckFailure:
    """A check failure caused by an error raised at one place in 'target' code."""
    try:
        empty: dict[str, int] = {}
        empty["missing"]  # the same file and line every time
    except KeyError as error:
        failure = CheckFailure(what, seen=describe_error(error), case=case, realtime=True)
        failure.__cause__ = error
        return failure
    raise AssertionError("unreachable")


def _failed(check: str, failure: CheckFailure, mode: Mode = "realtime") -> CheckResult:
    """The result the check's run makes of ``failure`` (as ``running.verdict.run_check``)."""
    keys = cause_of_failure(check, mode, failure, failure.what)
    return failed(CHECKS_BY_ID[check], mode, 20260, failure.what, str(failure), keys, failure)


def test_failures_are_grouped_by_error_place_and_by_smallest_case() -> None:
    # The smallest case, as a frozen scenario (the replay text is not read).
    case = GatherScenario(requests=(RequestSpec("a", 5, 3, 2, (FeatureSpec("a0", 1, 2),)),))
    results = [
        _failed("G1-window-slots", _failure_raised_here("raised")),
        _failed(G5.id, _failure_raised_here("raised too")),
        # Another check, same smallest case as one of the two above: the same cause.
        _failed("G4-mask-type-shape", CheckFailure("wrong mask", case=case, realtime=True)),
        _failed("G6-pieces-are-views", _failure_raised_here("raised", case=case)),
        # A plain wrong answer with nothing in common: a cause of its own.
        _failed("G9-inputs-unchanged", CheckFailure("input changed")),
        _result(D5.id, "realtime", Outcome.PASSED),
    ]
    report = _report(results)
    causes = report.causes()
    assert [c.checks for c in causes] == [
        ["G1-window-slots", "G4-mask-type-shape", G5.id, "G6-pieces-are-views"],
        ["G9-inputs-unchanged"],
    ]
    assert causes[0].title.startswith("KeyError at ")
    assert "test_reports.py" in causes[0].title
    text = report.causes_text()
    assert text.splitlines()[0] == "5 failed checks, 2 causes:"
    assert "rerun: pytest --conformance=t:f 'rtmm-conformance::G1-window-slots[realtime]'" in text
    assert "[cause 1]" in report.table()
    data = report.to_json()
    validate_when_possible(data)
    assert data["summary"]["causes"] == 2  # type: ignore[index]
    rows = {c["id"]: c for c in data["checks"]}  # type: ignore[attr-defined]
    assert rows[G5.id]["cause"]["id"] == "1"
    assert rows[D5.id]["cause"] is None


class _ReadsEveryOutput(FaultyGatherer):
    """A gatherer that looks every feature's output up in the cache before gathering, so a
    missing one is a KeyError raised inside the suite's instrumented cache."""

    def gather_mm_embeddings(self, req_ids: Any, *args: Any, **kwargs: Any) -> Any:
        for req_id in req_ids:
            for feature in self.encoder_cache.mm_features[req_id]:
                self.encoder_cache.encoder_outputs[feature.identifier]  # _READS_LINE
        return super().gather_mm_embeddings(req_ids, *args, **kwargs)


def _reads_line() -> int:
    return next(
        n for n, line in enumerate(Path(__file__).read_text().splitlines(), start=1)
        if line.endswith("# _READS_LINE")
    )  # fmt: skip


def test_a_cause_names_the_targets_line_and_a_replay_chains_its_error() -> None:
    """The KeyError leaves through the instrumented cache's ``__getitem__``: the cause and
    the failure name the target's line that read the cache, and the replay's failure is
    chained to the target's own exception."""
    factory = gatherer(cls=_ReadsEveryOutput)
    check = "G7-missing-output-raises"
    report = check_model_state(factory, device="cpu", examples=0, checks=[check])
    [cause] = report.causes()
    assert cause.title.startswith(f"KeyError at tests/suite/test_reports.py:{_reads_line()} ")
    assert f"test_reports.py:{_reads_line()})" in cause.first.details
    assert "instruments.py" not in cause.first.details
    with pytest.raises(CheckFailure) as caught:
        replay(check, factory, cases.MISS_CASES[0], mode="non-realtime")
    assert isinstance(caught.value.__cause__, KeyError)


def _decoding(req_id: str, *, masked: bool = False) -> GatherScenario:
    """One realtime request decoding past its prompt, over a placeholder (masked or not)."""
    mask = (True, False, True) if masked else None
    feature = FeatureSpec(f"{req_id}0", 3, 3, mask)
    return GatherScenario(requests=(RequestSpec(req_id, 3, 4, 2, (feature,)),))


def test_failures_whose_smallest_cases_need_the_same_sort_of_step_are_one_cause() -> None:
    """Two checks whose smallest cases both need a realtime decode window (a mask or not)
    are one cause; a plain prompt window says nothing about the fault, and another sort of
    step (a look-ahead) is another cause."""
    prompt = GatherScenario(requests=(RequestSpec("p", 9, 0, 4, (FeatureSpec("p0", 1, 2),)),))
    other_prompt = GatherScenario(requests=(RequestSpec("q", 9, 0, 5, (FeatureSpec("q0", 2, 2),)),))
    ahead = replace(prompt, draft_lookahead=1)
    results = [
        _failed("G1-window-slots", CheckFailure("mask", case=_decoding("a", masked=True), realtime=True)),
        _failed("G3-realtime-decode-gathers", CheckFailure("none", case=_decoding("b"), realtime=True)),
        _failed("G4-mask-type-shape", CheckFailure("int64", case=prompt, realtime=True)),
        _failed(G5.id, CheckFailure("rows", case=other_prompt, realtime=True)),
        _failed("G6-pieces-are-views", CheckFailure("copies", case=ahead, realtime=True)),
    ]  # fmt: skip
    causes = _report(results).causes()
    assert [c.checks for c in causes] == [
        ["G1-window-slots", "G3-realtime-decode-gathers"],
        ["G4-mask-type-shape"],
        [G5.id],
        ["G6-pieces-are-views"],
    ]
    assert causes[0].title == "mask (on 1 request: realtime-decode)"
    first = causes[0].first.details
    assert (
        "smallest case: 1 request: a realtime request decoding past its prompt (window [4, 6) "
        in first
    )


class _MaskAsInt64(FaultyGatherer):
    """A second fault besides a window fault: the mask comes back as int64 on every step."""

    def gather_mm_embeddings(self, *args: Any, **kwargs: Any) -> Any:
        pieces, mask = super().gather_mm_embeddings(*args, **kwargs)
        return pieces, mask.to(torch.int64)


def test_one_window_fault_is_one_cause_and_a_second_fault_another() -> None:
    """A decode-window fault fails several checks, each with its smallest case: one realtime
    request decoding; they are one cause. A mask of the wrong dtype besides is a second."""
    one = check_model_state(gatherer("G1@realtime-decode"), device="cpu", examples=0)
    [cause] = one.causes()
    assert {"G1-window-slots", "G3-realtime-decode-gathers", G5.id} <= set(cause.checks)
    assert "(on 1 request: realtime-decode)" in cause.title
    assert "smallest case: 1 request: a realtime request decoding past its prompt" in (
        cause.first.details
    )
    two = check_model_state(
        gatherer("G1@realtime-decode", cls=_MaskAsInt64), device="cpu", examples=0,
        checks=["G1-window-slots", "G3-realtime-decode-gathers", G5.id, "G4-mask-type-shape"],
    )  # fmt: skip
    assert sorted(c.checks for c in two.causes()) == [
        ["G1-window-slots", "G3-realtime-decode-gathers", G5.id],
        ["G4-mask-type-shape"],
    ]


def test_rows_follow_clause_order_and_reasons_are_never_cut() -> None:
    long_reason = "where on " + "a very long explanation " * 8 + "the end"
    report = _report(
        [
            _result("G10-state-matches-oracle", "realtime", Outcome.PASSED),
            _result("G9-inputs-unchanged", "realtime", Outcome.PASSED),
            _result("G8-stateful-life-matches-oracle", "realtime", Outcome.PASSED),
            _result("G8-cache-unchanged", "realtime", Outcome.PASSED),
            _result("D1-dummy-shape-dtype-device", "realtime", Outcome.SKIPPED, long_reason),
            _result("T1-factory-builds", None, Outcome.PASSED),
        ]
    )
    ids = [line.split()[3] for line in report.table().splitlines()[1:]]
    assert ids == [
        "T1-factory-builds",
        "G8-cache-unchanged",
        "G8-stateful-life-matches-oracle",
        "G9-inputs-unchanged",
        "G10-state-matches-oracle",
        "D1-dummy-shape-dtype-device",
    ]
    assert "the end" in report.table()
    assert report.item_line().startswith("6 pytest items = 6 checks x their modes")


MODALITY = "G6-pieces-carry-modality"


def test_should_details_are_shown_in_full() -> None:
    report = _report(
        [
            CheckResult(
                MODALITY, "realtime", Outcome.WARNING, "none", "expected: 'audio'\nseen: None"
            ),
            CheckResult(D5.id, "realtime", Outcome.WARNING, "clamped", "robustness, shown apart"),
        ]
    )
    assert report.should_details() == (
        f"--- {MODALITY}[realtime] (SHOULD, warning)\nexpected: 'audio'\nseen: None"
    )


def test_a_partial_run_is_never_ok_and_matches_the_schema() -> None:
    report = _report(
        [
            _result(G5.id, "realtime", Outcome.PASSED),
            _result(G5.id, "non-realtime", Outcome.NOT_RUN, "not run: the run was interrupted"),
        ],
        interrupted=True,
    )
    assert not report.complete
    assert not report.ok
    line = report.summary_line()
    assert "1 NOT RUN" in line
    assert line.endswith("INCOMPLETE: the run was interrupted")
    data = report.to_json()
    validate_when_possible(data)
    summary = data["summary"]
    assert summary["complete"] is False  # type: ignore[index]
    assert summary["not_run_items"] == 1  # type: ignore[index]


@needs_jsonschema
def test_real_reports_match_the_schema() -> None:
    reference = check_model_state(reference_model_state, device="cpu", examples=0)
    validate_report(reference.to_json())
    failing = check_model_state(
        gatherer("copies-not-views"), device="cpu", examples=0, checks=["G6", "G5"]
    )
    assert not failing.ok
    validate_report(failing.to_json())
    broken = failing.to_json()
    broken["summary"] = {"ok": "yes"}
    with pytest.raises(ValueError, match="summary"):
        validate_report(broken)


def test_the_schema_ships_in_the_package_and_is_valid() -> None:
    jsonschema: Any = pytest.importorskip("jsonschema", reason=JSONSCHEMA_MISSING)
    schema = report_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema"]["const"] == REPORT_SCHEMA


def test_matrix_shows_causes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    failing = check_model_state(
        gatherer("copies-not-views"), device="cpu", examples=0, checks=["G6-pieces-are-views"]
    )
    failing.write_json(tmp_path / "copies.json")
    assert matrix_main([f"copies={tmp_path / 'copies.json'}"]) == 0
    markdown = capsys.readouterr().out
    assert "| G6 | MUST | `G6-pieces-are-views` | FAIL (1) |" in markdown
    assert "Causes of the failures of copies:" in markdown
    assert "1. " in markdown


def test_the_rerun_command_carries_every_setting_that_is_not_the_default() -> None:
    label = "G5-rows-match-mask[realtime]"
    plain = rerun_command("t:f", 20260, "cpu", label)
    assert plain == f"pytest --conformance=t:f 'rtmm-conformance::{label}'"
    assert rerun_command("t:f", 20260, "cpu", label, dtype="float32") == plain
    half = rerun_command("t:f", 7, "cuda:1", label, dtype="bfloat16")
    assert half == (
        "pytest --conformance=t:f --conformance-seed=7 --conformance-device=cuda:1 "
        f"--conformance-dtype=bfloat16 'rtmm-conformance::{label}'"
    )
    failed = _result(G5.id, "realtime", Outcome.FAILED, "wrong rows")
    report = replace(
        _report([failed]),
        settings=RunSettings(device=torch.device("cpu"), dtype=torch.float16).summary(),
    )
    assert report.rerun_command(failed) == (
        f"pytest --conformance=t:f --conformance-dtype=float16 'rtmm-conformance::{label}'"
    )


def test_an_engine_in_site_packages_is_the_target_and_the_adapters_are_the_suites() -> None:
    """In a virtual environment the standard library's folder holds site-packages: an engine
    installed there is still the target's code, and the standard library stays a library;
    the engine adapters, which only translate types around a target, are the suite's."""
    import os
    import sysconfig

    import rtmm_protocol.adapters.vllm.cache_view as adapter
    from rtmm_conformance.frames import frame_kind

    engine = os.path.join(sysconfig.get_paths()["purelib"], "some_engine", "state.py")
    assert frame_kind(engine) == "target"
    assert frame_kind(os.__file__) == "library"
    assert frame_kind(adapter.__file__) == "suite"


def test_what_fails_the_run_follows_fail_on() -> None:
    """``own`` forgives failures inherited from the baseline, ``contract`` does not, and
    neither fails on a robustness gap; ``all`` (strict) fails on everything."""
    inherited = replace(
        _result("G5-rows-match-mask", "realtime", Outcome.FAILED, "row"), origin="inherited"
    )
    gap = _result(D5.id, "realtime", Outcome.WARNING, "clamped")
    passed = _result("G1-window-slots", "realtime", Outcome.PASSED)
    for fail_on, fails in (("own", False), ("contract", True)):
        report = _report([inherited, gap, passed], baseline="vllm:x:Y", fail_on=fail_on)
        assert report.fails_run is fails, fail_on
        assert not report.ok  # the contract does not hold, whoever is to blame
    only_gap = _report([gap, passed], fail_on="contract")
    assert only_gap.ok
    assert not only_gap.fails_run
    strict = _report([replace(gap, outcome=Outcome.FAILED), passed], fail_on="all")
    assert strict.fails_run
    assert not strict.ok
    data = strict.to_json()["summary"]
    assert isinstance(data, dict)
    assert data["fail_on"] == "all"
    assert data["fails_run"] is True
    assert data["profiles"]["robustness"]["failed"] == 1


def test_settings_refuse_strict_with_another_fail_on() -> None:
    with pytest.raises(ValueError, match="fail_on='own' contradicts"):
        RunSettings(device=torch.device("cpu"), strict=True, fail_on="own")
    assert RunSettings(device=torch.device("cpu"), fail_on="all").strict
    assert RunSettings(device=torch.device("cpu")).fails_on(has_baseline=True) == "own"
    assert RunSettings(device=torch.device("cpu")).fails_on(has_baseline=False) == "contract"
