"""Verdicts, reports, expected-failure files, the compliance matrix, requirement sets."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from rtmm_protocol.conformance.api import check_model_state, known_versions
from rtmm_protocol.conformance.catalog import CHECKS_BY_ID
from rtmm_protocol.conformance.matrix import main as matrix_main
from rtmm_protocol.conformance.outcomes import CheckResult, Outcome
from rtmm_protocol.conformance.registry import implementations
from rtmm_protocol.conformance.report import ConformanceReport, aggregate
from rtmm_protocol.conformance.runner import SuiteRunner, judge
from rtmm_protocol.conformance.settings import RunSettings
from rtmm_protocol.conformance.targets import reference_model_state
from rtmm_protocol.conformance.timeout import TimedOut, run_with_timeout
from rtmm_protocol.conformance.xfail import parse_xfail_text

G5 = CHECKS_BY_ID["G5-rows-match-mask"]
D5 = CHECKS_BY_ID["D5-oversize-raises"]


def _result(check: str, mode: str | None, outcome: Outcome, reason: str = "") -> CheckResult:
    return CheckResult(check, mode, outcome, reason)


def _report(results: list[CheckResult], **kwargs: object) -> ConformanceReport:
    return ConformanceReport(
        target="t:f",
        kind="model_state",
        settings={},
        environment={},
        results=results,
        **kwargs,  # type: ignore[arg-type]
    )


def test_judge_applies_level_strictness_and_expected_failures() -> None:
    failed = _result(D5.id, "realtime", Outcome.FAILED, "clamped")
    assert judge(failed, D5, strict=False, expected_failure=None).outcome is Outcome.WARNING
    assert judge(failed, D5, strict=True, expected_failure=None).outcome is Outcome.FAILED
    must = _result(G5.id, "realtime", Outcome.FAILED, "wrong row")
    assert judge(must, G5, strict=False, expected_failure=None).outcome is Outcome.FAILED
    entry = parse_xfail_text("G5 known\n").entries[0]
    xfailed = judge(must, G5, strict=True, expected_failure=entry)
    assert xfailed.outcome is Outcome.XFAILED
    assert "known" in xfailed.reason
    passed = _result(G5.id, "realtime", Outcome.PASSED)
    assert judge(passed, G5, strict=True, expected_failure=entry).outcome is Outcome.PASSED


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
            _result("G1-window-slots", "realtime", Outcome.FAILED, "slot"),
        ]
    )
    assert report.summary_line() == "conformance: 1 passed, 1 failed (MUST), 1 warning (SHOULD)"
    assert not report.ok
    table = report.table().splitlines()
    assert table[0].split() == ["clause", "level", "check", "outcome", "reason"]
    assert [line.split()[2] for line in table[1:]] == ["G1-window-slots", G5.id, D5.id]


def test_strict_reports_fail_on_stale_entries() -> None:
    results = [_result(G5.id, "realtime", Outcome.PASSED)]
    assert _report(results, stale_expected_failures=["x:1: G5"]).ok
    strict = _report(results, strict=True, stale_expected_failures=["x:1: G5"])
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
    checks = dict(implementations())
    newer = replace(checks[G5.id], info=replace(G5, since="1.1"))
    checks[G5.id] = newer
    runner = SuiteRunner(
        reference_model_state, "ref", RunSettings(device=torch.device("cpu")), "model_state", checks
    )
    planned = {p.impl.id for p in runner.plan()}
    assert G5.id not in planned
    assert "G4-mask-type-shape" in planned
    assert known_versions() == ["1.0"]
    with pytest.raises(ValueError, match=r"known: 1\.0"):
        check_model_state(reference_model_state, device="cpu", version="0.9")


def test_run_with_timeout_returns_raises_and_stops() -> None:
    assert run_with_timeout(lambda: 41 + 1, 5.0) == 42
    empty: dict[str, int] = {}
    with pytest.raises(KeyError):
        run_with_timeout(lambda: empty["missing"], 5.0)

    def spin() -> None:
        while True:
            time.sleep(0)

    outcome = run_with_timeout(spin, 0.2)
    assert isinstance(outcome, TimedOut)
    assert outcome.stopped


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
    assert "| D5 | SHOULD | `D5-oversize-raises` | pass | warn |" in lines
    html_path = tmp_path / "matrix.html"
    assert matrix_main([str(tmp_path / "ref.json"), "--html", str(html_path)]) == 0
    assert '<td class="pass">pass</td>' in html_path.read_text()
    (tmp_path / "bad.json").write_text("{}")
    assert matrix_main([str(tmp_path / "bad.json")]) == 2
    assert "not a conformance report" in capsys.readouterr().err
