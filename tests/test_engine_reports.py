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
from rtmm_protocol.adapters.vllm.in_tree import IN_TREE_STATES, InTreeState

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


@pytest.mark.parametrize("name", ["matrix", "causes", "states"])
def test_committed_rendering_is_up_to_date(name: str) -> None:
    render = _script("render")
    path = {
        "matrix": render.MATRIX_FILE,
        "causes": render.CAUSES_FILE,
        "states": render.STATES_FILE,
    }[name]
    fresh = {
        "matrix": render.render_matrix,
        "causes": render.render_causes,
        "states": render.render_states,
    }[name]()
    assert path.read_text(encoding="utf-8") == fresh, (
        f"{path.name} is out of date: run python {RENDER.relative_to(RENDER.parents[2])}"
    )


def test_reports_hold_no_machine_paths() -> None:
    render = _script("render")
    for path in render.REPORTS.glob("**/*.json"):
        text = path.read_text(encoding="utf-8")
        assert "site-packages/" not in text, path.name
        assert str(render.REPO) not in text, path.name


def test_refresh_runs_every_report_the_page_renders() -> None:
    """Every report the page draws is one refresh.py writes: the matrix's, and one per
    model state vLLM ships that the suite can build."""
    render, refresh = _script("render"), _script("refresh")
    assert set(refresh.RUNS) == {t.report for t in render.TARGETS} | set(refresh.STATE_REPORTS)
    buildable = [s for s in IN_TREE_STATES if not s.not_buildable]
    assert len(refresh.STATE_REPORTS) == len(buildable) - 1  # DefaultModelState: the matrix's
    committed = {p.relative_to(HERE / "reports").as_posix() for p in HERE.glob("reports/**/*.json")}
    assert set(refresh.RUNS) == committed


def _state_report(state: InTreeState) -> dict[str, Any]:
    refresh = _script("refresh")
    name = next(r for r, spec in refresh.RUNS.items() if spec == f"vllm:{state.spec}")
    return _committed(name)


_BUILT = [s for s in IN_TREE_STATES if not s.not_buildable]


@pytest.mark.parametrize("state", _BUILT, ids=lambda s: s.key)
def test_vllms_own_states_pass_the_contract_by_name(state: InTreeState) -> None:
    """Each of vLLM's model states, run by its name alone without a known-gaps file (CI's
    refresh.py --check reruns them), fails no contract check, nor is any blocked; a state
    whose models take token ids alone is not judged around a multimodal model."""
    report = _state_report(state)
    assert report["target"] == f"vllm:{state.spec}"
    # Nothing but the name: the configuration is the one the adapter carries, if any.
    carried = report["settings"]["model_config"]
    assert (carried is None) == (not state.config and not state.attributes), carried
    assert carried is None or carried.startswith("the configuration rtmm-protocol carries")
    contract = report["summary"]["profiles"]["contract"]
    assert contract["failed"] == contract["warnings"] == contract["blocked"] == 0, contract
    if state.models == "text":
        assert report["kind"] is None
        assert contract["passed"] == 0
        return
    kind = "cross_attention" if state.hands == "cross-attention" else "model_state"
    assert report["kind"] == kind
    assert contract["passed"] > 0


@pytest.mark.parametrize(
    "state", [s for s in _BUILT if s.models == "multimodal"], ids=lambda s: s.key
)
def test_a_state_derived_from_another_inherits_its_robustness_gaps(state: InTreeState) -> None:
    """vLLM's states that derive from another of vLLM's are compared with it: the gaps the
    base has are reported as inherited, not as the state's own."""
    report = _state_report(state)
    failing = [c for c in report["checks"] if c["outcome"] in ("failed", "warning")]
    assert failing, "every vLLM state has robustness gaps at the suite's defaults"
    origins = {c["origin"] for c in failing}
    assert origins == ({"inherited"} if report["baseline"] else {"own"}), report["baseline"]


def test_the_text_only_state_says_why_it_is_not_judged() -> None:
    longcat = next(s for s in IN_TREE_STATES if s.models == "text")
    report = _state_report(longcat)
    reasons = {c["reason"] for c in report["checks"]}
    assert all("never around a multimodal model" in reason for reason in reasons), reasons


@pytest.mark.parametrize("name", sorted((HERE / "reports").glob("**/*.json")), ids=lambda p: p.name)
def test_reports_are_runs_at_the_suites_defaults(name: Path) -> None:
    """Same seed, same verdicts: the committed reports use what a plain run uses."""
    settings = _committed(name.relative_to(HERE / "reports").as_posix())["settings"]
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
    page = (HERE.parents[1] / "docs" / "_gen" / "outputs" / "engines-known-gaps.txt").read_text(
        encoding="utf-8"
    )
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
