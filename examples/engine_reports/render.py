"""The Engines page's compliance matrix, causes and table of vLLM's model states, from the
committed conformance reports.

``reports/*.json`` are the JSON reports of the conformance suite (run without a
known-gaps file, so every deviation shows as a failure) for the bundled reference, for
vLLM 0.33.0 at both levels, and for each model state vLLM ships (``reports/states/``).
From them this script writes ``matrix.md`` (with ``python -m rtmm_conformance matrix``),
``causes.md`` (every check that did not pass, grouped by the cause the report gives: its
``cause`` field where the report has one, else the error text the check saw) and
``states.md`` (one row per model state: what it hands the model and its verdict; then what it
needed). The docs page includes the three files.

    python examples/engine_reports/render.py            # re-render the three files
    python examples/engine_reports/render.py --check    # exit 1 if they are out of date

``refresh.py`` reruns the suites and writes the reports (with paths made relative, so that
they do not depend on the machine that produced them), then calls this script.
"""

from __future__ import annotations

import argparse
import json
import re
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
STATES_FILE = HERE / "states.md"


@dataclass(frozen=True)
class Target:
    """One column of the matrix: its label and its report (``refresh.py``'s ``RUNS``
    says which target the report is of)."""

    label: str
    report: str

    @property
    def name(self) -> str:
        """The target, as ``--conformance`` names it."""
        return _runs()[self.report]


def _runs() -> Mapping[str, str]:
    """``refresh.py``'s ``RUNS``: report file -> the target it is a report of."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    from refresh import RUNS

    return RUNS


TARGETS = (
    Target("reference", "reference-model-state.json"),
    Target("reference runner", "reference-gatherer.json"),
    Target("vLLM 0.33.0 runner", "vllm-encoder-runner.json"),
    Target("vLLM 0.33.0 ModelState", "vllm-model-state.json"),
)

_NOT_PASSED = ("failed", "xfailed", "warning", "blocked")


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
        sections.append(f"`{target.name}`: {report['summary']['line']}\n")
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


_HANDS = {
    "runner": "`inputs_embeds`: the encoder runner's buffer",
    "own": "`inputs_embeds`: a buffer of its own, from `prepare_inputs` (M1)",
    "cross-attention": "encoder outputs, by cross-attention (M2)",
}
#: ``the target's step needs X (at ...): not judged here`` and the CUDA-only checks' reason.
_NEEDS = re.compile(r"(?:the target's step )?needs (?P<what>.+?)(?: \(at | \(run with |,|$)")


def _profile_text(counts: Mapping[str, int], origins: Mapping[str, int]) -> str:
    """``35 passed, 0 failed, 2 skipped`` for one profile of a report, failures split by
    origin for a subclass of another of vLLM's states."""
    failed = counts["failed"] + counts["warnings"] + counts["xfailed"]
    parts = [f"{counts['passed']} passed", f"{failed} failed"]
    if failed and origins.get("inherited"):
        parts[-1] += f" ({origins['inherited']} inherited)"
    for key in ("blocked", "skipped"):
        if counts[key]:
            parts.append(f"{counts[key]} {key}")
    return ", ".join(parts)


def _origins(report: Mapping[str, Any], profile: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for check in report.get("checks", []):
        if check.get("profile") == profile and check.get("origin"):
            found[check["origin"]] = found.get(check["origin"], 0) + 1
    return found


def _skip_reasons(report: Mapping[str, Any]) -> list[str]:
    """What the run lacked, with how many checks each kept from being judged."""
    counted: dict[str, int] = {}
    for check in report.get("checks", []):
        if check.get("outcome") != "skipped":
            continue
        found = _NEEDS.search(str(check.get("reason", "")))
        what = found.group("what") if found else str(check.get("reason", ""))
        what = what.removesuffix(", which this machine does not have")
        counted[what] = counted.get(what, 0) + 1
    return [
        f"{what} ({n} {'check' if n == 1 else 'checks'} skipped)" for what, n in counted.items()
    ]


def render_states() -> str:
    """Two tables of the model states vLLM ships, one row per state each: what it hands
    the model and its verdict; then what its run needed (the configuration the adapter
    carries, packages, what this machine lacked). Two, so that each fits the page's
    column."""
    from rtmm_protocol.adapters.vllm.in_tree import IN_TREE_STATES

    by_spec = {name.removeprefix("vllm:"): report for report, name in _runs().items()}
    verdicts = [
        "| state, and the models it serves | the model receives | contract | robustness |",
        "|---|---|---|---|",
    ]
    needs = ["| state | what its run needed |", "|---|---|"]
    for state in IN_TREE_STATES:
        needed = []
        if state.config:
            needed.append(f"the configuration the adapter carries (`configs/{state.config}/`)")
        needed.extend(f"model attribute `{name}`" for name in state.attributes)
        needed.extend(f"the package `{package}`" for package in state.packages)
        cells = [f"`{state.name}`: {state.serves}", _HANDS[state.hands]]
        path = REPORTS / by_spec.get(state.spec, "")
        if state.not_buildable or not path.is_file():
            needed.append(state.not_buildable or "no report yet: run refresh.py")
            cells += ["not built", "not built"]
        else:
            report = json.loads(path.read_text(encoding="utf-8"))
            profiles = report["summary"]["profiles"]
            cells += [
                _profile_text(profiles["contract"], _origins(report, "contract")),
                _profile_text(profiles["robustness"], _origins(report, "robustness")),
            ]
            torch = report.get("environment", {}).get("torch", "")
            if state.packages and "cpu" not in torch:
                needed.append(f"checked with torch {torch} (the build that has them)")
            if report.get("kind") is None and state.models == "text":
                cells[1] = "token ids alone"
                needed.append("not judged: vLLM never builds it around a multimodal model")
            else:
                needed.extend(_skip_reasons(report))
        verdicts.append("| " + " | ".join(_escape(cell) for cell in cells) + " |")
        row = [f"`{state.name}`", "; ".join(needed) or "nothing but its name"]
        needs.append("| " + " | ".join(_escape(cell) for cell in row) + " |")
    return "\n".join([*verdicts, "", "What each state's run needed:", "", *needs]) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Re-render (or check) the matrix, the causes and the table of vLLM's model states."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the files are stale")
    args = parser.parse_args(argv)
    wanted = {
        MATRIX_FILE: render_matrix(),
        CAUSES_FILE: render_causes(),
        STATES_FILE: render_states(),
    }
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
