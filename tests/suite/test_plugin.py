"""The pytest plugin as users run it: subprocesses in a folder outside the repository."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from support.extras import conformance_plugin_args, needs_xdist, validate_when_possible

TARGETS = '''
import multiprocessing
import os
import signal
import time

from rtmm_conformance import reference_model_state
from rtmm_protocol.reference import ReferenceModelState


class Copying(ReferenceModelState):
    """Breaks G6 (MUST): pieces are copies."""

    def gather_mm_embeddings(self, input_batch, draft_lookahead=0):
        pieces, mask = super().gather_mm_embeddings(input_batch, draft_lookahead)
        return [p.clone() for p in pieces], mask


class Unlabelled(ReferenceModelState):
    """Breaks G6's SHOULD: pieces are views without their modality."""

    def gather_mm_embeddings(self, input_batch, draft_lookahead=0):
        pieces, mask = super().gather_mm_embeddings(input_batch, draft_lookahead)
        return [p[:] for p in pieces], mask


class Clamping(ReferenceModelState):
    """Breaks D5 (SHOULD): over-size dummy runs are clamped."""

    def dummy_inputs_embeds(self, num_tokens):
        return super().dummy_inputs_embeds(min(max(num_tokens, 0), self.max_num_tokens))


class _As:
    """A factory of reference states turned into ``cls`` (a class, so that it pickles)."""

    def __init__(self, cls):
        self.cls = cls

    def __call__(self, ctx):
        state = reference_model_state(ctx)
        state.__class__ = self.cls
        return state


def _as(cls):
    return _As(cls)


class Crashing(ReferenceModelState):
    """Ends its process on a step in which a request decodes past its prompt."""

    def gather_mm_embeddings(self, input_batch, draft_lookahead=0):
        if (input_batch.num_computed_tokens_np >= input_batch.prefill_len_np).any():
            os._exit(9)
        return super().gather_mm_embeddings(input_batch, draft_lookahead)


class InterruptingTheRun(ReferenceModelState):
    """Sends the pytest process a Ctrl-C, as a user stopping the run would."""

    def gather_mm_embeddings(self, input_batch, draft_lookahead=0):
        os.kill(multiprocessing.parent_process().pid, signal.SIGINT)
        time.sleep(5)
        return super().gather_mm_embeddings(input_batch, draft_lookahead)


class Hanging(ReferenceModelState):
    """Never returns from a gather (a Python loop)."""

    def gather_mm_embeddings(self, input_batch, draft_lookahead=0):
        while True:
            pass


make_copying = _as(Copying)
make_hanging = _as(Hanging)
make_clamping = _as(Clamping)
make_unlabelled = _as(Unlabelled)
make_crashing = _as(Crashing)
make_interrupting = _as(InterruptingTheRun)
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user project: its own conformance package and a narrow python_files setting."""
    (tmp_path / "conformance").mkdir()
    (tmp_path / "conformance" / "__init__.py").write_text("SHADOW = True\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\npython_files = check_*.py\n")
    (tmp_path / "targets.py").write_text(TARGETS)
    (tmp_path / "check_plain.py").write_text(
        "import sys\n\n"
        "def test_plugin_imported_nothing_heavy():\n"
        "    assert 'rtmm_conformance.running.runner' not in sys.modules\n"
        "    assert 'rtmm_conformance.api' not in sys.modules\n"
    )
    return tmp_path


# The console script, as users run it: unlike ``python -m pytest`` it does not put the
# invocation directory on sys.path, so importing ``targets`` relies on the plugin.
_PYTEST = Path(sys.executable).with_name("pytest")
_COMMAND = [str(_PYTEST)] if _PYTEST.exists() else [sys.executable, "-m", "pytest"]


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The device is named: on a machine with a GPU the suite would otherwise default to it.
    device = (
        ["--conformance-device=cpu"] if any(a.startswith("--conformance") for a in args) else []
    )
    return subprocess.run(
        [*_COMMAND, *conformance_plugin_args(), "-p", "no:cacheprovider", *device, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        # A run started in the background of a script inherits an ignored SIGINT, and Python
        # then never raises KeyboardInterrupt: give the run the terminal's default.
        preexec_fn=_default_sigint,
    )


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_bare_option_swallowing_a_path_is_a_usage_error(project: Path) -> None:
    result = _pytest(project, "--conformance", "tests/")
    assert result.returncode == 4
    assert "MODULE:FACTORY" in result.stderr
    assert "tests/" in result.stderr


def test_paths_next_to_the_option_are_a_usage_error(project: Path) -> None:
    result = _pytest(project, "--conformance=targets:make_copying", "check_plain.py")
    assert result.returncode == 4
    assert "runs only the conformance suite" in result.stderr


def test_unknown_module_and_version_are_usage_errors(project: Path) -> None:
    missing = _pytest(project, "--conformance=no_such_module:make")
    assert missing.returncode == 4
    assert "no_such_module" in missing.stderr
    old = _pytest(project, "--conformance", "--conformance-version=0.9")
    assert old.returncode == 4
    assert "known: 1.0" in old.stderr


def test_without_the_option_the_plugin_does_nothing(project: Path) -> None:
    result = _pytest(project, "-q")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    assert "conformance" not in result.stdout


def test_header_failure_message_and_rerun_by_node_id(project: Path) -> None:
    result = _pytest(
        project,
        "-v",
        "--conformance=targets:make_copying",
        "--conformance-examples=0",
        "-k",
        "G6-pieces-are-views",
    )
    out = result.stdout
    assert result.returncode == 1, out
    assert "target:   targets:make_copying (ModelState)" in out
    assert "seed:     20260 (--conformance-seed)" in out
    assert re.search(
        r"versions: rtmm-protocol \S+, torch \S+, Hypothesis \S+, CUDA \S+, Python \S+", out
    )
    assert "rtmm-conformance::G6-pieces-are-views[realtime] FAILED" in out
    assert "expected:" in out
    assert "seen:" in out
    assert "replay, as ready-to-run Python:" in out
    assert "rerun: pytest --conformance=targets:make_copying 'rtmm-conformance::G6" in out
    assert "contract: 0 passed, 1 failed (MUST), 0 warnings (SHOULD)" in out
    rerun = _pytest(project, "--conformance=targets:make_copying", "--conformance-examples=0",
                    "rtmm-conformance::G6-pieces-are-views[non-realtime]")  # fmt: skip
    assert "1 failed" in rerun.stdout.splitlines()[-1]


def test_the_reproduction_snippet_runs_and_shows_the_failure(project: Path) -> None:
    result = _pytest(
        project, "--conformance=targets:make_copying", "--conformance-examples=0",
        "rtmm-conformance::G6-pieces-are-views[realtime]",
    )  # fmt: skip
    lines = result.stdout.splitlines()
    start = lines.index("replay, as ready-to-run Python:") + 1
    snippet = []
    for line in lines[start:]:
        if not line.startswith("    "):
            break
        snippet.append(line[4:])
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent("\n".join(snippet))],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1
    assert "CheckFailure" in run.stderr
    assert "a copy, not a view" in run.stderr


def test_should_failures_warn_unless_strict(project: Path) -> None:
    args = ["--conformance=targets:make_unlabelled", "--conformance-examples=0", "-k", "G6-pieces"]
    relaxed = _pytest(project, *args)
    assert relaxed.returncode == 0, relaxed.stdout
    assert "0 failed (MUST), 1 warning (SHOULD)" in relaxed.stdout
    assert "ConformanceWarning" in relaxed.stdout
    details = relaxed.stdout.split("SHOULD failures", 1)[1]
    assert "--- G6-pieces-carry-modality[realtime] (SHOULD, warning)" in details
    assert "expected:" in details
    assert "seen:" in details
    strict = _pytest(project, *args, "--conformance-strict")
    assert strict.returncode == 1
    assert "1 failed (SHOULD, strict)" in strict.stdout


def test_robustness_gaps_are_reported_apart_unless_strict(project: Path) -> None:
    args = [
        "--conformance=targets:make_clamping",
        "--conformance-examples=0",
        "-k",
        "D5 or D1-dummy",
    ]
    relaxed = _pytest(project, *args)
    assert relaxed.returncode == 0, relaxed.stdout
    assert (
        "contract: 1 passed, 0 failed (MUST), 0 warnings (SHOULD); robustness: 0 passed, 1 failed (SHOULD)"
        in relaxed.stdout
    )
    gaps = relaxed.stdout.split("robustness gaps, outside the contract's domain", 1)[1]
    assert "D5-oversize-raises" in gaps
    assert "SHOULD failures" not in relaxed.stdout  # not a wall of details
    assert "ConformanceWarning" not in relaxed.stdout
    for strict_option in ("--conformance-strict", "--conformance-fail-on=all"):
        strict = _pytest(project, *args, strict_option)
        assert strict.returncode == 1, strict.stdout
        assert "robustness: 0 passed, 1 failed (strict)" in strict.stdout


def test_json_report_and_junit_properties(project: Path) -> None:
    result = _pytest(
        project, "--conformance", "--conformance-examples=0", "-k", "G1- or D2-",
        "--conformance-report=out/report.json", "--junitxml=junit.xml",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout
    report = json.loads((project / "out" / "report.json").read_text())
    assert report["schema"] == "rtmm-conformance-report/5"
    validate_when_possible(report)
    assert report["summary"]["ok"] is True
    assert report["summary"]["fail_on"] == "contract"
    profiles = {c["id"]: c["profile"] for c in report["checks"]}
    assert profiles["G1-window-slots"] == "contract"
    assert profiles["G1-zero-scheduled-contributes-nothing"] == "robustness"
    assert report["summary"]["profiles"]["robustness"]["passed"] == 1
    assert {c["clause"] for c in report["checks"]} == {"G1", "D2"}
    assert set(report["environment"]) >= {
        "rtmm_protocol",
        "torch",
        "hypothesis",
        "python",
        "cuda",
        "device",
    }
    assert report["settings"]["seed"] == 20260
    props = {
        (p.get("name"), p.get("value")) for p in ET.parse(project / "junit.xml").iter("property")
    }
    assert ("clause", "G1") in props
    assert ("level", "MUST") in props


@needs_xdist
def test_runs_under_xdist(project: Path) -> None:
    result = _pytest(
        project, "-n", "2", "--conformance", "--conformance-examples=0", "-k", "G or T1",
        "--conformance-report=report.json",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^contract: \d+ passed, 0 failed \(MUST\)", result.stdout, re.M)
    report = json.loads((project / "report.json").read_text())
    assert report["summary"]["passed"] >= 20


def test_a_crashing_target_fails_its_checks_once_per_cause(project: Path) -> None:
    result = _pytest(
        project, "--conformance=targets:make_crashing", "--conformance-examples=0", "-k", "G1-",
        "--conformance-report=report.json", "--junitxml=junit.xml",
    )  # fmt: skip
    out = result.stdout
    assert result.returncode == 1, out
    assert "2 failed checks, 1 cause:" in out
    assert "cause 1: exited with code 9" in out
    assert (
        "rerun: pytest --conformance=targets:make_crashing 'rtmm-conformance::G1-window-slots["
        in out
    )
    # -k G1- selects the checks of G1 alone (-k G1 would select those of G10 too)
    assert re.search(r"^4 pytest items = 2 checks x their modes \(2 in 2 modes\)", out, re.M)
    report = json.loads((project / "report.json").read_text())
    validate_when_possible(report)
    assert report["summary"]["complete"] is True
    assert report["summary"]["causes"] == 1
    assert {c["cause"]["id"] for c in report["checks"] if c["outcome"] == "failed"} == {"1"}
    causes = {
        p.get("value") for p in ET.parse(project / "junit.xml").iter("property")
        if p.get("name") == "cause"
    }  # fmt: skip
    assert len(causes) == 1
    assert report["causes"][0]["key"] in str(next(iter(causes)))


def test_a_run_stopped_early_is_reported_incomplete(project: Path) -> None:
    result = _pytest(
        project, "-x", "--conformance=targets:make_copying", "--conformance-examples=0",
        "-k", "G6-pieces-are-views or D2", "--conformance-report=report.json",
    )  # fmt: skip
    assert result.returncode == 1, result.stdout
    report = json.loads((project / "report.json").read_text())
    validate_when_possible(report)
    assert report["summary"]["ok"] is False
    assert report["summary"]["complete"] is False
    assert report["summary"]["not_run_items"] >= 1
    assert "INCOMPLETE" in result.stdout


def test_an_interrupted_run_says_so_in_report_and_exit_code(project: Path) -> None:
    result = _pytest(
        project, "--conformance=targets:make_interrupting", "--conformance-examples=0",
        "-k", "T1 or G5", "--conformance-report=report.json",
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    report = json.loads((project / "report.json").read_text())
    validate_when_possible(report)
    assert report["summary"]["ok"] is False
    assert report["summary"]["interrupted"] is True
    # Checks run in clause order, so G5 meets the interrupt and the T1 checks never start.
    assert report["summary"]["not_run"] >= 2


@needs_xdist
def test_a_crashing_target_under_xdist_gives_one_complete_report(project: Path) -> None:
    result = _pytest(
        project, "-n", "2", "--conformance=targets:make_crashing", "--conformance-examples=0",
        "-k", "G1 or G5 or T", "--conformance-report=report.json",
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads((project / "report.json").read_text())
    validate_when_possible(report)
    assert report["summary"]["complete"] is True
    assert report["summary"]["ok"] is False
    # Every check whose batches hold a decoding request meets the crash: one cause.
    assert report["summary"]["failed_must"] >= 1
    crashes = [c["id"] for c in report["causes"] if "exited with code 9" in c["title"]]
    assert len(crashes) == 1
    failed = {c["cause"]["id"] for c in report["checks"] if c["outcome"] == "failed"}
    assert failed == set(crashes)
    assert report["summary"]["passed"] >= 5
    assert report["summary"]["items"] == sum(len(c["modes"]) for c in report["checks"])


def test_a_hanging_target_costs_one_time_limit(project: Path) -> None:
    started = time.monotonic()
    result = _pytest(
        project, "--conformance=targets:make_hanging", "--conformance-timeout=5",
        "--conformance-examples=0", "-rs", "-k", "G4-mask or D1-dummy-shape",
    )  # fmt: skip
    # 20 s on a machine of its own; a shared one stretches every run by its load.
    crowded = max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    assert time.monotonic() - started < 20 * crowded, result.stdout
    assert result.returncode == 1, result.stdout
    assert "did not finish within 5 s" in result.stdout
    assert "blocked: the target hung in gather_mm_embeddings" in result.stdout
    assert "1 failed (MUST)" in result.stdout


def test_a_folder_shadowing_the_package_is_named(project: Path) -> None:
    """A same-named folder without __init__.py becomes an empty namespace package that hides
    the real one: the usage error names that folder rather than 'not found'."""
    (project / "acme").mkdir()
    (project / "acme" / "notes.txt").write_text("not a package\n")
    result = _pytest(project, "--conformance=acme.factory:make_state")
    assert result.returncode == 4
    assert "shadows the package" in result.stderr
    assert str(project / "acme") in result.stderr


def test_parametrize_with_checks_names_each_check_as_pytest_names_its_item() -> None:
    """Each parameter is ``CHECK-ID[mode]`` (one label for a check in a mode everywhere),
    and calling it runs the check: the reference passes."""
    from rtmm_conformance import parametrize_with_checks, reference_gatherer
    from rtmm_conformance.catalog import CHECKS_BY_ID

    mark = parametrize_with_checks(
        reference_gatherer, checks=["T1", "G4"], device="cpu", examples=1, isolation="off"
    )
    argnames, params = mark.args
    assert argnames == "check"
    ids = [p.id for p in params]
    assert "G4-mask-type-shape[realtime]" in ids
    clauses = {CHECKS_BY_ID[i.partition("[")[0]].clause for i in ids}
    assert clauses == {"T1", "G4"}
    assert all(re.fullmatch(r"[A-Z][0-9]+(-[a-z0-9]+)+(\[[a-z-]+\])?", i) for i in ids), ids
    for param in params:
        param.values[0]()  # passes: no exception


def test_a_blocked_check_is_skipped_with_its_reason_as_it_is() -> None:
    """A blocked check's reason says it is blocked and by what; pytest shows it once."""
    from rtmm_conformance.pytest_outcome import _raise_verdict
    from rtmm_conformance.results import CheckBlocked, CheckResult, Outcome

    reason = CheckBlocked("prepare_inputs raised RuntimeError", "M1-hooks-hand-model-inputs").reason
    result = CheckResult("D2-real-path-shares-storage", "realtime", Outcome.BLOCKED, reason)
    with pytest.raises(pytest.skip.Exception) as skipped:
        _raise_verdict(result, fail_on="own")
    assert skipped.value.msg == reason
    assert skipped.value.msg.startswith("blocked: prepare_inputs raised")
    assert skipped.value.msg.count("blocked") == 1
