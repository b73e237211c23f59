"""Read the conformance suite's check registry and render it for the docs.

The checks come from ``rtmm_conformance.catalog`` (every check as its decorator registered
it) and the clause titles from ``rtmm_conformance.clauses``: the docs build imports the
suite as users do (its environment has torch: the API pages are rendered from the code
too). The build hook (``check_catalog.py``) and the docs tests both use the functions here.
"""

from __future__ import annotations

import importlib
import re
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[2]
SPEC_PAGE = REPO_ROOT / "docs" / "specification.md"

#: Where the full catalog table goes (on the check catalog page).
CATALOG_MARKER = "<!-- check-catalog -->"
#: Where one clause's checks are listed (on the specification page).
CLAUSE_MARKER = re.compile(r"<!-- checks: (?P<clause>[A-Z][0-9]+) -->")
#: A clause heading on the specification page: ``### G5 · ... {#G5 ...}``.
CLAUSE_HEADING = re.compile(r"^#{2,6} .*\{[^}]*#(?P<clause>[A-Z][0-9]+)\b[^}]*\}\s*$", re.M)


class CatalogUnavailableError(RuntimeError):
    """The suite's registry is missing or does not have the expected shape."""


@dataclass(frozen=True)
class CheckRow:
    """One registered check, reduced to what the docs show."""

    id: str
    clause: str
    level: str
    area: str
    statement: str
    since: str
    targets: tuple[str, ...]
    profile: str = "contract"


def load_catalog_module(
    catalog: str = "rtmm_conformance.catalog", clauses: str = "rtmm_conformance.clauses"
) -> ModuleType:
    """The suite's ``CHECKS`` and ``CLAUSES``, imported from its catalog and its clauses."""
    try:
        checks, titles = importlib.import_module(catalog), importlib.import_module(clauses)
    except Exception as error:
        raise CatalogUnavailableError(
            f"the check catalog page is generated from the suite's registry, but importing "
            f"{catalog} and {clauses} (which define CHECKS and CLAUSES) failed with "
            f"{type(error).__name__}: {error}"
        ) from error
    module = types.ModuleType("rtmm_docs_check_registry")
    module.CHECKS = getattr(checks, "CHECKS", None)  # type: ignore[attr-defined]
    module.CLAUSES = getattr(titles, "CLAUSES", None)  # type: ignore[attr-defined]
    return module


def _field(check: object, name: str) -> object:
    try:
        return getattr(check, name)
    except AttributeError:
        raise CatalogUnavailableError(
            f"a CHECKS entry of the registry has no {name!r} field: {check!r}"
        ) from None


def read_checks(module: ModuleType) -> list[CheckRow]:
    """The registry's ``CHECKS`` as :class:`CheckRow` values, in registry order."""
    checks = getattr(module, "CHECKS", None)
    if not isinstance(checks, Sequence) or not checks:
        raise CatalogUnavailableError("the registry defines no non-empty CHECKS sequence")
    rows = []
    for check in checks:
        targets = _field(check, "kinds")
        rows.append(
            CheckRow(
                id=str(_field(check, "id")),
                clause=str(_field(check, "clause")),
                level=str(_field(check, "level")),
                area=str(_field(check, "area")),
                statement=str(_field(check, "statement")),
                since=str(_field(check, "since")),
                targets=_as_strings(targets),
                profile=str(_field(check, "profile")),
            )
        )
    return rows


def read_clauses(module: ModuleType) -> dict[str, str]:
    """The registry's ``CLAUSES``: clause ID to its short title."""
    clauses = getattr(module, "CLAUSES", None)
    if not isinstance(clauses, Mapping) or not clauses:
        raise CatalogUnavailableError("the registry defines no non-empty CLAUSES mapping")
    return {str(k): str(v) for k, v in clauses.items()}


def spec_clause_ids(markdown: str) -> list[str]:
    """Clause IDs that have a heading anchor on the specification page, in page order."""
    return [m.group("clause") for m in CLAUSE_HEADING.finditer(markdown)]


def spec_clause_titles(markdown: str) -> dict[str, str]:
    """Clause ID to the title of its heading (``### G5 · The rows {#G5}`` gives "The rows")."""
    titles = {}
    for match in CLAUSE_HEADING.finditer(markdown):
        heading = match.group(0).split("{", 1)[0].lstrip("#").strip()
        titles[match.group("clause")] = heading.split("·", 1)[-1].strip()
    return titles


def coverage_problems(spec_clauses: Iterable[str], checks: Iterable[CheckRow]) -> list[str]:
    """Clauses without a check and checks naming an unknown clause, as sentences."""
    spec = list(spec_clauses)
    check_list = list(checks)
    checked = {c.clause for c in check_list}
    problems = [
        f"clause {clause} is on the specification page but no check enforces it"
        for clause in spec
        if clause not in checked
    ]
    problems += [
        f"check {c.id} names clause {c.clause}, which the specification page lacks"
        for c in check_list
        if c.clause not in spec
    ]
    return problems


def _cell(text: str) -> str:
    """Plain text made safe for a Markdown table cell (no links, no HTML, no column breaks)."""
    for raw, escaped in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;")):
        text = text.replace(raw, escaped)
    for char in "\\|[]*`":
        text = text.replace(char, "\\" + char)
    return text.replace("\n", " ")


def _level_badge(level: str) -> str:
    return f'<span class="rtmm-level rtmm-level-{level.lower()}">{level}</span>'


def render_clause_checks(clause: str, checks: Iterable[CheckRow]) -> str:
    """A bullet list of the checks that enforce ``clause`` (for the specification page)."""
    mine = [c for c in checks if c.clause == clause]
    if not mine:
        return f"*No check enforces {clause} yet.*"
    return "\n".join(
        f"- [`{c.id}`](checks.md#{c.id}) {_level_badge(c.level)}"
        + (" (robustness)" if c.profile == "robustness" else "")
        + f" {_cell(c.statement)}"
        for c in mine
    )


#: Headings for the suite's areas where the plain identifier would read badly.
AREA_TITLES = {
    "dummy_run": "Dummy runs",
    "real_path": "The real path",
    "cuda_graphs": "CUDA graphs",
    "stateful": "The stateful life",
}


def render_catalog(checks: Sequence[CheckRow], clauses: Mapping[str, str]) -> str:
    """The catalog as Markdown: a summary line and one table per spec area."""
    must = sum(1 for c in checks if c.level.upper() == "MUST")
    robust = sum(1 for c in checks if c.profile == "robustness")
    lines = [
        f"{len(checks)} checks over {len({c.clause for c in checks})} clauses "
        f"({must} MUST, {len(checks) - must} SHOULD): {len(checks) - robust} of the contract, "
        f"{robust} of robustness.",
        "",
    ]
    areas: dict[str, list[CheckRow]] = {}
    for check in checks:
        areas.setdefault(check.area, []).append(check)
    for area, rows in areas.items():
        title = AREA_TITLES.get(area, area.replace("_", " ").capitalize())
        lines += [
            f"## {title} {{#area-{_slug(area)}}}",
            "",
            '<div class="rtmm-catalog" markdown>',
            "",
            "| check | clause | level | requirement |",
            "| --- | --- | --- | --- |",
        ]
        for c in rows:
            clause_link = (
                f"[{c.clause}](specification.md#{c.clause} {_quote(clauses.get(c.clause, ''))})"
            )
            targets = ", ".join(t.replace("_", " ") for t in c.targets)
            lines.append(
                f'| <span id="{c.id}"></span>`{c.id}` | {clause_link} | {_level_badge(c.level)} '
                f"| {_cell(c.statement)}<br><small>{c.profile} · since {c.since} · {targets}"
                "</small> |"
            )
        lines += ["", "</div>", ""]
    return "\n".join(lines)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _quote(title: str) -> str:
    return '"' + title.replace('"', "'") + '"'


def _as_strings(targets: object) -> tuple[str, ...]:
    if isinstance(targets, str):
        return (targets,)
    if isinstance(targets, Iterable):
        return tuple(str(t) for t in targets)
    raise CatalogUnavailableError(f"a check's targets must be a string or strings, got {targets!r}")
