"""MkDocs hook: turn the docstrings' cross-references into links on the API pages.

The package's docstrings use reST roles (``:class:`~rtmm_protocol.ModelState```) and
cite the specification by clause ID, as ``SPEC G8`` or ``SPEC D1-D5``. Rendered as
Markdown, the roles would show up verbatim and the citations would be plain text. After a
page is rendered, this hook replaces each role with a cross-reference that
mkdocs-autorefs resolves (or leaves as code when the target is not documented) and links
each cited clause to its anchor on the specification page.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(
    r":(?:class|func|meth|mod|data|attr|exc|obj):<code>(?P<tilde>~?)(?P<target>[\w.]+)</code>"
)
_CLAUSE = r"[GCDMRET]\d+"
_CITATION = re.compile(rf"\bSPEC (?P<refs>{_CLAUSE}(?:(?:[-/, ]| and ){_CLAUSE})*)")


def _role(match: re.Match[str]) -> str:
    target = match.group("target")
    title = target.rsplit(".", 1)[-1] if match.group("tilde") else target
    return f'<autoref identifier="{target}" optional><code>{title}</code></autoref>'


def _citation(match: re.Match[str], spec_url: str) -> str:
    def link(ref: re.Match[str]) -> str:
        token = ref.group(0)
        return f'<a href="{spec_url}#{token}">{token}</a>'

    return "spec " + re.sub(_CLAUSE, link, match.group("refs"))


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """Rewrite roles and spec citations on the API reference pages."""
    if not page.file.src_uri.startswith("api/"):
        return html
    depth = page.url.rstrip("/").count("/") + 1 if page.url else 0
    spec_url = "../" * depth + "specification/"
    html = _ROLE.sub(_role, html)
    return _CITATION.sub(lambda m: _citation(m, spec_url), html)
