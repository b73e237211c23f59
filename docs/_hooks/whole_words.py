"""Keep the words of code whole on the rendered pages: line breaks go between them.

A browser may break a line after any hyphen. In prose that is harmless; in code it is
not: ``--conformance-`` at the end of one line and ``report=PATH`` on the next reads as
two words, and a check ID such as ``G1-zero-scheduled-contributes-nothing`` is mostly
hyphens. :func:`keep_words_whole` wraps

- every check ID in a page's text (prose, lists, tables, code blocks), and
- every whitespace-free run of inline code in a table cell (identifiers, options,
  commands: a table squeezes its columns, so that is where such breaks happen),

in a span that ``docs/stylesheets/extra.css`` keeps on one line. Spaces stay break
opportunities, so long commands in narrow cells still wrap, between their words. Only
text is rewritten, never a tag or its attributes (``id="G5-..."``, links), nor the
contents of a script or style element. ``docs/_gen/browser_check.py`` measures the
result: it fails on any such word split over two lines.

The ``on_page_content`` hook of ``check_catalog.py`` (a hook the site already registers)
calls :func:`keep_words_whole` for every page.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["CHECK_ID_CLASS", "CHECK_ID_TEXT", "CODE_WORD_CLASS", "keep_words_whole"]

#: A check ID as it appears in text: its clause, then lowercase words joined by hyphens,
#: maybe with a mode (``G5-rows-match-mask``, ``G3-realtime-decode-gathers[realtime]``).
CHECK_ID_TEXT = re.compile(r"\b[GCDRET][0-9]+(?:-[a-z0-9]+)+(?:\[[a-z-]+\])?")
#: The span around a check ID.
CHECK_ID_CLASS = "rtmm-check-id"
#: The span around one whitespace-free run of inline code in a table cell.
CODE_WORD_CLASS = "rtmm-code-word"

_TAG = re.compile(r"(<[^>]*>)")
_TAG_NAME = re.compile(r"<(?P<end>/?)(?P<name>[a-zA-Z][a-zA-Z0-9]*)")
_CODE_WORD = re.compile(r"\S+")


def _span(css_class: str) -> Callable[[re.Match[str]], str]:
    return lambda match: f'<span class="{css_class}">{match.group(0)}</span>'


def keep_words_whole(html: str) -> str:
    """``html`` with check IDs, and the words of inline code in table cells, kept whole."""
    parts = _TAG.split(html)
    open_tags = {"td": 0, "th": 0, "code": 0, "pre": 0, "script": 0, "style": 0}
    for index, part in enumerate(parts):
        if index % 2:  # a tag: keep count of the elements the text is in
            tag = _TAG_NAME.match(part)
            if tag is not None and tag.group("name").lower() in open_tags:
                name = tag.group("name").lower()
                change = -1 if tag.group("end") else 1
                open_tags[name] = max(0, open_tags[name] + change)
            continue
        if not part or open_tags["script"] or open_tags["style"]:
            continue
        in_cell = open_tags["td"] or open_tags["th"]
        if in_cell and open_tags["code"] and not open_tags["pre"]:
            parts[index] = _CODE_WORD.sub(_span(CODE_WORD_CLASS), part)
        else:
            parts[index] = CHECK_ID_TEXT.sub(_span(CHECK_ID_CLASS), part)
    return "".join(parts)
