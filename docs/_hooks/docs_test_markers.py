"""Keep the docs tests' markers out of the rendered pages.

``tests/test_docs.py`` runs every fenced Python block of the pages. A block that cannot
run everywhere says so on its first line, ``# docs-test: skip (REASON)`` or
``# docs-test: needs-cuda``. Those lines are instructions to the tests, not part of the
example: a reader who copies the block gets nothing from them, and the prose around the
block already says what the example needs. :func:`strip_markers` removes them from a
page's Markdown before it is rendered; the Markdown source keeps them, so the tests
still see them.

The ``on_page_markdown`` hook of ``check_catalog.py`` (a hook the site already
registers) calls :func:`strip_markers` for every page.
"""

from __future__ import annotations

import re

__all__ = ["MARKER", "strip_markers"]

#: A docs-test marker: the first line of a fenced block, e.g. ``# docs-test: needs-cuda``.
MARKER = re.compile(r"^#\s*docs-test:")
_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[^`]*$")


def strip_markers(markdown: str) -> str:
    """``markdown`` without the docs-test marker lines that open fenced code blocks.

    Blocks are found the way the docs tests find them: an opening fence (three or more
    backticks or tildes, indented as its list item or tab needs), and the block runs to
    the next line that is that fence alone. Only a block's first line can be a marker,
    so a marker quoted in prose or further down a block is left alone.
    """
    lines = markdown.split("\n")
    kept: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        kept.append(line)
        index += 1
        opening = _FENCE_OPEN.match(line)
        if opening is None:
            continue
        fence = opening.group("fence")
        if index < len(lines) and MARKER.match(lines[index].strip()):
            index += 1  # the marker: dropped
        while index < len(lines) and lines[index].strip() != fence:
            kept.append(lines[index])
            index += 1
        if index < len(lines):
            kept.append(lines[index])  # the closing fence
            index += 1
    return "\n".join(kept)
