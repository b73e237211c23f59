"""The Engines page's reports: rendered as committed, free of machine paths, produced at the
suite's defaults, and compared with fresh runs on verdicts alone."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rtmm_conformance.settings import RunSettings

HERE = Path(__file__).resolve().parent.parent / "examples" / "engine_reports"
RENDER = HERE / "render.py"


def _script(name: str) -> ModuleType:
    """One of the folder's scripts, imported from its file."""
    spec = importlib.util.spec_from_file_location(f"engine_reports_{name}", HERE / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {HERE / name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _committed(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HERE / "reports" / name).read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize("name", ["matrix", "causes"])
def test_committed_rendering_is_up_to_date(name: str) -> None:
    render = _script("render")
    path = {"matrix": render.MATRIX_FILE, "causes": render.CAUSES_FILE}[name]
    fresh = {"matrix": render.render_matrix, "causes": render.render_causes}[name]()
    assert path.read_text(encoding="utf-8") == fresh, (
        f"{path.name} is out of date: run python {RENDER.relative_to(RENDER.parents[2])}"
    )


def test_reports_hold_no_machine_paths() -> None:
    render = _script("render")
    for target in render.TARGETS:
        text = (render.REPORTS / target.report).read_text(encoding="utf-8")
        assert "site-packages/" not in text, target.report
        assert str(render.REPO) not in text, target.report


def test_refresh_runs_every_report_the_page_renders() -> None:
    render, refresh = _script("render"), _script("refresh")
    assert set(refresh.RUNS) == {target.report for target in render.TARGETS}


@pytest.mark.parametrize("name", sorted((HERE / "reports").glob("*.json")), ids=lambda p: p.name)
def test_reports_are_runs_at_the_suites_defaults(name: Path) -> None:
    """Same seed, same verdicts: the committed reports use what a plain run uses."""
    settings = _committed(name.name)["settings"]
    assert (settings["seed"], settings["examples"]) == (RunSettings().seed, RunSettings().examples)
    assert settings["strict"] is False


def test_a_report_agrees_with_itself_whatever_its_timings_and_paths() -> None:
    compare = _script("compare")
    committed = _committed("vllm-model-state.json")
    moved = copy.deepcopy(committed)
    for check in moved["checks"]:
        for mode in check["modes"].values():
            mode["duration_s"] = 99.0
            mode["details"] = "/somewhere/else/site-packages/" + mode["details"]
            if mode.get("cause"):
                mode["cause"]["key"] = "00000000"
                mode["cause"]["title"] = mode["cause"]["title"].replace(
                    "vllm/", "/opt/venv/lib/python3.12/site-packages/vllm/"
                )
    moved["environment"]["python"] = "3.12.1"
    for cause in moved["causes"]:
        cause["key"] = "ffffffff"
    assert compare.differences(committed, moved) == []


def test_a_changed_outcome_reason_or_cause_is_a_difference() -> None:
    compare = _script("compare")
    committed = _committed("vllm-model-state.json")
    changed = copy.deepcopy(committed)
    check = next(c for c in changed["checks"] if c["id"] == "T3-realtime-guard-semantics")
    mode = next(iter(check["modes"].values()))
    mode["outcome"], mode["reason"], mode["cause"] = "passed", "", None
    changed["causes"] = [
        c for c in changed["causes"] if "T3-realtime-guard-semantics" not in c["checks"]
    ]
    lines = compare.differences(committed, changed)
    assert any(line.startswith("T3-realtime-guard-semantics[") for line in lines), lines
    assert any(line.startswith("causes:") for line in lines), lines
    reworded = copy.deepcopy(committed)
    reworded["checks"][0]["modes"][next(iter(reworded["checks"][0]["modes"]))]["reason"] = "other"
    assert compare.differences(committed, reworded) != []


def test_an_expected_failure_reads_as_the_failure_it_expected() -> None:
    """A strict run with a known-gaps file is compared with a report written without one."""
    compare = _script("compare")
    committed = _committed("vllm-model-state.json")
    with_gaps = copy.deepcopy(committed)
    for check in with_gaps["checks"]:
        for mode in check["modes"].values():
            if mode["outcome"] in ("failed", "warning"):
                mode["reason"] = (
                    f"expected failure (known-gaps.txt:3: a reason); was: {mode['reason']}"
                )
                mode["outcome"] = "xfailed"
    assert compare.differences(committed, with_gaps) == []


def test_compare_exits_non_zero_on_a_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    compare = _script("compare")
    committed = _committed("reference-gatherer.json")
    other = copy.deepcopy(committed)
    other["settings"]["seed"] = committed["settings"]["seed"] + 1
    (tmp_path / "a.json").write_text(json.dumps(committed), encoding="utf-8")
    (tmp_path / "b.json").write_text(json.dumps(other), encoding="utf-8")
    assert compare.main([str(tmp_path / "a.json"), str(tmp_path / "a.json")]) == 0
    assert compare.main([str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 1
    assert "settings" in capsys.readouterr().err


def test_machine_paths_are_stripped_and_nothing_else() -> None:
    compare = _script("compare")
    text = (
        "AssertionError at /opt/venv/lib/python3.11/site-packages/vllm/x.py:3; "
        "see /home/ci/rtmm-protocol/examples/vllm_model_state/known-gaps.txt:4 and docs/x.md"
    )
    assert compare.strip_machine_paths(text) == (
        "AssertionError at vllm/x.py:3; see examples/vllm_model_state/known-gaps.txt:4 and docs/x.md"
    )


def test_the_pages_strict_summary_line_follows_from_the_committed_report() -> None:
    """The Engines page quotes the summary of a strict run with the known-gaps file. vLLM
    passes the contract; every robustness failure of the committed report (run without the
    file) is listed there, so that run passes and skips what the report does and expects
    the rest to fail."""
    page = (HERE.parents[1] / "docs" / "engines.md").read_text(encoding="utf-8")
    assert "known-gaps-vllm-0.33.0.txt" in page
    profiles = _committed("vllm-model-state.json")["summary"]["profiles"]
    contract, robustness = profiles["contract"], profiles["robustness"]
    assert contract["failed"] == contract["warnings"] == 0  # vLLM passes the contract
    expected = (
        f"contract: {contract['passed']} passed, 0 failed (MUST), 0 failed (SHOULD, strict), "
        f"{contract['skipped']} skipped; robustness: {robustness['passed']} passed, "
        f"0 failed (strict), {robustness['failed'] + robustness['warnings']} expected failures"
    )
    assert expected in page, expected


def test_the_pages_cause_counts_are_the_committed_reports() -> None:
    """The Engines page says how many causes each vLLM report numbers; a regenerated report
    with other counts fails here until the page says so too."""
    page = (HERE.parents[1] / "docs" / "engines.md").read_text(encoding="utf-8")
    state = _committed("vllm-model-state.json")["summary"]["causes"]
    runner = _committed("vllm-encoder-runner.json")["summary"]["causes"]
    stated = (
        f"reports number {state} causes for `DefaultModelState` and {runner} for `EncoderRunner`"
    )
    assert stated in " ".join(page.split()), stated
