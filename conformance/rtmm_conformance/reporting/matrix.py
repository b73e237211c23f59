"""``python -m rtmm_conformance matrix``: JSON reports side by side, a row per check and a
column per ``[LABEL=]report.json``; a failing cell names its cause, listed under the table."""

from __future__ import annotations

import argparse
import html
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rtmm_conformance.clauses import CLAUSES
from rtmm_conformance.reporting.schema import READABLE_REPORT_SCHEMAS, REPORT_SCHEMA

__all__ = ["Column", "load_column", "main", "render_html", "render_markdown"]

_SYMBOLS = {
    "passed": "pass",
    "failed": "FAIL",
    "warning": "warn",
    "skipped": "skip",
    "blocked": "blocked",
    "xfailed": "xfail",
    "not run": "not run",
}
#: The environment keys of every report; an engine's own (an adapter's ``vllm``) are extra.
_STANDARD_ENV = {
    "rtmm_protocol", "protocol", "torch", "hypothesis", "cuda", "python", "platform", "device"
}  # fmt: skip


@dataclass(frozen=True)
class Column:
    """One implementation: its label, outcomes by check ID and summary facts."""

    label: str
    outcomes: Mapping[str, str]
    summary: str
    versions: str
    #: Check ID -> the number of the cause it fails with (", inherited" when inherited).
    cause_of: Mapping[str, str] = field(default_factory=dict)
    #: ``(number, title, checks)`` of each cause, in the report's order.
    causes: Sequence[tuple[str, str, int]] = ()
    #: Check ID -> its level as the report states it (``SHOULD (robustness)`` for a
    #: robustness check), in the report's order.
    levels: Mapping[str, str] = field(default_factory=dict)

    def cell(self, check_id: str) -> str:
        """The check's outcome in this column, with its cause number when it fails."""
        text = _SYMBOLS.get(self.outcomes.get(check_id, ""), "-")
        cause = self.cause_of.get(check_id)
        return f"{text} ({cause})" if cause else text


def load_column(argument: str) -> Column:
    """Read ``[LABEL=]PATH``; ``ValueError`` says what is wrong with the file."""
    label, sep, path = argument.partition("=")
    if not sep:
        label, path = "", argument
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise ValueError(f"cannot read report {path!r}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"report {path!r} is not JSON: {error}") from None
    if not isinstance(data, dict) or data.get("schema") not in READABLE_REPORT_SCHEMAS:
        raise ValueError(
            f"{path!r} is not a conformance report (schema {REPORT_SCHEMA!r}); write one with "
            "pytest --conformance-report=PATH"
        )
    outcomes, cause_of, levels = {}, {}, {}
    for entry in data.get("checks", []):
        if not (isinstance(entry, dict) and "id" in entry):
            continue
        outcomes[str(entry["id"])] = str(entry.get("outcome", ""))
        level = str(entry.get("level", "?"))
        levels[str(entry["id"])] = level + (
            " (robustness)" if entry.get("profile") == "robustness" else ""
        )
        cause = entry.get("cause")
        if isinstance(cause, dict) and "id" in cause:
            inherited = entry.get("origin") == "inherited" and data.get("baseline")
            cause_of[str(entry["id"])] = str(cause["id"]) + (", inherited" if inherited else "")
    env = data.get("environment", {})
    engines = [f"{k} {v}" for k, v in env.items() if k not in _STANDARD_ENV]
    versions = ", ".join(
        [f"rtmm-protocol {env.get('rtmm_protocol', '?')}", f"torch {env.get('torch', '?')}",
         *engines, str(env.get("device", "?"))]
    )  # fmt: skip
    line = str(data.get("summary", {}).get("line", "")).removeprefix("conformance: ")
    causes = [
        (str(c.get("id", "?")), str(c.get("title", "")), len(c.get("checks", [])))
        for c in data.get("causes", [])
        if isinstance(c, dict)
    ]
    return Column(
        label or str(data.get("target", path)), outcomes, line, versions, cause_of, causes, levels
    )


def _rows(columns: Sequence[Column]) -> list[tuple[str, str, str, list[str]]]:
    """A row per check any report holds, in the specification's clause order (the reports'
    own order within a clause), with the level the reports state: the matrix reads the
    reports alone, so it needs neither the checks nor torch."""
    levels: dict[str, str] = {}
    for column in columns:
        for check_id, level in column.levels.items():
            levels.setdefault(check_id, level)
    clauses = list(CLAUSES)

    def clause_rank(check_id: str) -> int:
        clause = check_id.split("-", 1)[0]
        return clauses.index(clause) if clause in clauses else len(clauses)

    return [
        (check_id.split("-", 1)[0], level, check_id, [c.cell(check_id) for c in columns])
        for check_id, level in sorted(levels.items(), key=lambda item: clause_rank(item[0]))
    ]


def render_markdown(columns: Sequence[Column]) -> str:
    """The matrix as a Markdown table, with a summary row and a versions row."""
    head = ["clause", "level", "check", *(c.label for c in columns)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for clause, level, check_id, cells in _rows(columns):
        lines.append(f"| {clause} | {level} | `{check_id}` | " + " | ".join(cells) + " |")
    lines.append("| | | **summary** | " + " | ".join(c.summary for c in columns) + " |")
    lines.append("| | | versions | " + " | ".join(c.versions for c in columns) + " |")
    for column in columns:
        if column.causes:
            lines += ["", f"Causes of the failures of {column.label}:", ""]
            lines.extend(
                f"{number}. {title} ({checks} check{'s' if checks != 1 else ''})"
                for number, title, checks in column.causes
            )
    return "\n".join(lines) + "\n"


def render_html(columns: Sequence[Column]) -> str:
    """The matrix as a standalone HTML page."""
    esc = html.escape
    head = "".join(f"<th>{esc(c.label)}</th>" for c in columns)
    body = []
    for clause, level, check_id, cells in _rows(columns):
        tds = "".join(
            f'<td class="{esc(cell.split(" (")[0].lower())}">{esc(cell)}</td>' for cell in cells
        )
        body.append(
            f"<tr><td>{esc(clause)}</td><td>{esc(level)}</td><td><code>{esc(check_id)}</code>"
            f"</td>{tds}</tr>"
        )
    summary = "".join(f"<td>{esc(c.summary)}</td>" for c in columns)
    versions = "".join(f"<td>{esc(c.versions)}</td>" for c in columns)
    return (
        "<!DOCTYPE html>\n<html><head><meta charset='utf-8'>"
        "<title>rtmm-protocol compliance matrix</title><style>"
        "table{border-collapse:collapse;font-family:sans-serif}"
        "td,th{border:1px solid #ccc;padding:2px 8px}"
        ".pass{background:#dfd}.fail{background:#fbb}.warn{background:#ffd}"
        ".blocked{background:#fdb}.xfail{background:#eee}"
        "</style></head><body><h1>rtmm-protocol compliance matrix</h1><table>"
        f"<tr><th>clause</th><th>level</th><th>check</th>{head}</tr>"
        + "".join(body)
        + f"<tr><td></td><td></td><th>summary</th>{summary}</tr>"
        + f"<tr><td></td><td></td><th>versions</th>{versions}</tr>"
        + "</table>"
        + "".join(_html_causes(column) for column in columns)
        + "</body></html>\n"
    )


def _html_causes(column: Column) -> str:
    if not column.causes:
        return ""
    esc = html.escape
    items = "".join(
        f"<li value='{esc(number)}'>{esc(title)} ({checks} check{'s' if checks != 1 else ''})</li>"
        for number, title, checks in column.causes
    )
    return f"<h2>Causes of the failures of {esc(column.label)}</h2><ol>{items}</ol>"


def main(argv: Sequence[str]) -> int:
    """Merge reports into a matrix; print Markdown, or write the files asked for."""
    parser = argparse.ArgumentParser(
        prog="python -m rtmm_conformance matrix",
        description="Merge conformance reports (pytest --conformance-report=PATH) into one "
        "compliance matrix: rows are checks, columns are implementations.",
    )
    parser.add_argument("reports", nargs="+", metavar="[LABEL=]REPORT.json")
    parser.add_argument("--markdown", metavar="PATH", help="write the Markdown table here")
    parser.add_argument("--html", metavar="PATH", help="write an HTML page here")
    args = parser.parse_args(list(argv))
    try:
        columns = [load_column(a) for a in args.reports]
    except ValueError as error:
        print(f"matrix: {error}", file=sys.stderr)
        return 2
    markdown = render_markdown(columns)
    if args.markdown:
        Path(args.markdown).write_text(markdown, encoding="utf-8")
    if args.html:
        Path(args.html).write_text(render_html(columns), encoding="utf-8")
    if not args.markdown and not args.html:
        sys.stdout.write(markdown)
    return 0
