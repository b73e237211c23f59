"""MkDocs hook: fill the check catalog and the per-clause check lists from the suite's registry.

The specification page marks where a clause's checks go with ``<!-- checks: G5 -->``;
the check catalog page marks the full table with ``<!-- check-catalog -->``. Both are
filled at build time from the suite's catalog, which reads each check's decorator, so the pages cannot drift from
the suite. A clause without a check, or a check naming a clause the specification page
lacks, is logged as a warning, which fails ``mkdocs build --strict``.

The same Markdown pass drops the docs tests' ``# docs-test:`` markers from code blocks
(``docs_test_markers.py``), so that no rendered example shows one; and once a page is
rendered, its check IDs and the words of code in its tables are kept whole
(``whole_words.py``), so the browser never breaks one at a hyphen.
"""

from __future__ import annotations

import logging
from typing import Any

from docs_test_markers import strip_markers
from mkdocs.exceptions import PluginError
from rtmm_docs_catalog import (
    CATALOG_MARKER,
    CLAUSE_MARKER,
    SPEC_PAGE,
    CatalogUnavailableError,
    CheckRow,
    coverage_problems,
    load_catalog_module,
    read_checks,
    read_clauses,
    render_catalog,
    render_clause_checks,
    spec_clause_ids,
)
from whole_words import keep_words_whole

log = logging.getLogger("mkdocs.hooks.check_catalog")

_checks: list[CheckRow] = []
_clauses: dict[str, str] = {}


def on_config(config: Any) -> Any:
    """Load the registry once per build; stop the build with a clear message if it is missing."""
    try:
        module = load_catalog_module()
        _checks[:] = read_checks(module)
        _clauses.clear()
        _clauses.update(read_clauses(module))
    except CatalogUnavailableError as error:
        raise PluginError(f"check catalog: {error}") from error
    for problem in coverage_problems(spec_clause_ids(SPEC_PAGE.read_text("utf-8")), _checks):
        log.warning("check catalog: %s", problem)
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the catalog markers of a page with the rendered checks; drop docs-test markers."""
    markdown = strip_markers(markdown)
    if CATALOG_MARKER in markdown:
        markdown = markdown.replace(CATALOG_MARKER, render_catalog(_checks, _clauses))

    def clause_checks(match: Any) -> str:
        clause = match.group("clause")
        if not any(c.clause == clause for c in _checks):
            log.warning(
                "check catalog: %s lists checks for %s, which has none", page.file.src_uri, clause
            )
        return render_clause_checks(clause, _checks)

    return CLAUSE_MARKER.sub(clause_checks, markdown)


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """Keep the rendered page's check IDs, and the words of code in its tables, whole."""
    return keep_words_whole(html)
