"""The Engines page's compliance matrix and causes, from the committed conformance reports.

``reports/*.json`` are the JSON reports of the conformance suite (run without a
known-gaps file, so every deviation shows as a failure) for the bundled reference and
for vLLM 0.33.0 at both levels. From them this script writes ``matrix.md`` (with
``python -m rtmm_conformance matrix``) and ``causes.md`` (every check that did not pass,
grouped by the cause the report gives: its ``cause`` field where the report has one,
else the error text the check saw). The docs page includes both files.

    python examples/engine_reports/render.py            # re-render the two files
    python examples/engine_reports/render.py --check    # exit 1 if they are out of date
    python examples/engine_reports/render.py --run PYTHON
        # rerun the four suites with PYTHON (an environment with vLLM and this
        # project installed, see .ci/vllm.sh), then re-render; the examples are put
        # on PYTHONPATH in front of whatever it already holds

Reports are written with paths made relative (to the repository or to site-packages), so
they do not depend on the machine that produced them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
REPORTS = HERE / "reports"
MATRIX_FILE = HERE / "matrix.md"
CAUSES_FILE = HERE / "causes.md"


@dataclass(frozen=True)
class Target:
    """One column of the matrix: how to run it and where its report lives."""

    label: str
    report: str
    factory: str
    pythonpath: tuple[str, ...] = ()


TARGETS = (
    Target(
        "reference",
        "reference-model-state.json",
        "rtmm_conformance.targets:reference_model_state",
    ),
    Target(
        "reference runner",
        "reference-gatherer.json",
        "rtmm_conformance.targets:reference_gatherer",
    ),
    Target(
        "vLLM 0.33.0 runner",
        "vllm-encoder-runner.json",
        "vllm_encoder_runner.factory:make_encoder_runner",
        ("examples/vllm_encoder_runner",),
    ),
    Target(
        "vLLM 0.33.0 ModelState",
        "vllm-model-state.json",
        "vllm_model_state.factory:make_model_state",
        ("examples/vllm_encoder_runner", "examples/vllm_model_state"),
    ),
)

_NOT_PASSED = ("failed", "xfailed", "warning", "blocked")
_SITE_PACKAGES = re.compile(r"/[^\s\"'()]*?/site-packages/")


def _matrix_arguments() -> list[str]:
    return [f"{t.label}={REPORTS / t.report}" for t in TARGETS]


def render_matrix() -> str:
    """The matrix as ``python -m rtmm_conformance matrix`` writes it."""
    from rtmm_conformance.reporting.matrix import load_column, render_markdown

    return render_markdown([load_column(argument) for argument in _matrix_arguments()])


def _cause_text(cause: object) -> str:
    if isinstance(cause, Mapping):
        for key in ("summary", "title", "description", "key", "id"):
            if cause.get(key):
                return str(cause[key])
        return json.dumps(cause, sort_keys=True)
    return str(cause)


def _seen(details: str) -> str:
    for line in details.splitlines():
        if line.startswith("seen:"):
            return line.removeprefix("seen:").strip()
    return ""


def cause_of(check: Mapping[str, Any], mode: Mapping[str, Any]) -> tuple[str, bool]:
    """The cause of a check's failure in one mode, and whether the report named it.

    The report's ``cause`` where it has one; else the text the check saw (an exception
    with its location, or what came back instead of the expected result).
    """
    for source in (mode, check):
        if source.get("cause"):
            return _cause_text(source["cause"]), True
    seen = _seen(str(mode.get("details", "")))
    return seen or str(mode.get("reason", check.get("reason", ""))), False


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


@dataclass
class _Group:
    named: bool
    checks: list[tuple[str, str, str, str]]  # label, level, outcome, reason


def _group_row(text: str, group: _Group) -> str:
    reasons = {reason for _, _, _, reason in group.checks}
    if not group.named and len(reasons) == 1 and reasons != {text}:
        text = f"{reasons.pop()}; seen: {text}"
    names = "<br>".join(f"`{label}`" for label, _, _, _ in group.checks)
    # "failed (MUST)", as the summary line words it: one column, not two, so that the
    # table fits the docs' content column beside the check IDs, which never wrap.
    outcomes = "<br>".join(
        sorted({f"{outcome} ({level})" for _, level, outcome, _ in group.checks})
    )
    return f"| {_escape(text)} | {names} | {outcomes} |"


def render_causes() -> str:
    """Per target, the checks that did not pass, grouped by cause."""
    sections = []
    for target in TARGETS:
        report = json.loads((REPORTS / target.report).read_text(encoding="utf-8"))
        groups: dict[str, _Group] = {}
        for check in report.get("checks", []):
            for mode_name, mode in check.get("modes", {}).items():
                if mode.get("outcome") not in _NOT_PASSED:
                    continue
                label = check["id"] if mode_name == "any" else f"{check['id']} [{mode_name}]"
                text, named = cause_of(check, mode)
                group = groups.setdefault(text, _Group(named, []))
                reason = str(mode.get("reason", ""))
                group.checks.append((label, check.get("level", "?"), mode["outcome"], reason))
        sections.append(f"### {target.label}\n")
        sections.append(f"`{target.factory}`: {report['summary']['line']}\n")
        if not groups:
            sections.append("Every check that ran passed.\n")
            continue
        sections.append(
            "| cause (the report's, else the error text the checks saw) | checks | outcome |\n"
            "|---|---|---|"
        )
        sections.extend(_group_row(text, group) for text, group in groups.items())
        sections.append("")
    return "\n".join(sections).rstrip() + "\n"


def _relative_paths(text: str) -> str:
    # Site-packages first: a virtual environment may live inside the repository.
    return _SITE_PACKAGES.sub("", text).replace(f"{REPO}/", "")


def run_suites(python: str) -> None:
    """Rerun every target's suite with ``python`` and store its report."""
    REPORTS.mkdir(exist_ok=True)
    for target in TARGETS:
        path = REPORTS / target.report
        env = dict(os.environ)
        inherited = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
        env["PYTHONPATH"] = os.pathsep.join(
            [*(str(REPO / p) for p in target.pythonpath), *inherited]
        )
        command = [
            python,
            "-m",
            "pytest",
            f"--conformance={target.factory}",
            f"--conformance-report={path}",
            "-p",
            "no:cacheprovider",
            "-q",
        ]
        print("$", " ".join(command), flush=True)
        # A target with known gaps fails the run; the report is what is kept.
        subprocess.run(command, cwd=REPO, env=env, check=False, stdout=subprocess.DEVNULL)
        if not path.exists():
            raise SystemExit(f"no report written for {target.label}")
        path.write_text(_relative_paths(path.read_text(encoding="utf-8")), encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """Re-render (or check) the matrix and causes; optionally rerun the suites first."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the files are stale")
    parser.add_argument("--run", metavar="PYTHON", help="rerun the suites with this Python")
    args = parser.parse_args(argv)
    if args.run:
        run_suites(args.run)
    wanted = {MATRIX_FILE: render_matrix(), CAUSES_FILE: render_causes()}
    if args.check:
        stale = [p.name for p, text in wanted.items() if p.read_text(encoding="utf-8") != text]
        if stale:
            print(f"out of date: {', '.join(stale)}; run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    for path, text in wanted.items():
        path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
