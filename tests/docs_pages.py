"""The docs pages as the tests read them: their fenced code blocks, in order.

A block's first line may say how the docs tests treat it: ``# docs-test: skip
(REASON)``, ``# docs-test: needs-cuda``, or ``# file: NAME.py`` (written to a file and
imported). ``tests/test_docs.py`` runs the pages' Python examples with these blocks;
``tests/test_docs_numbers.py`` reruns what the pages' output blocks show.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"

_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_SKIP = re.compile(r"^#\s*docs-test:\s*skip\s*\((?P<reason>[^)]*)\)\s*$")
NEEDS_CUDA = re.compile(r"^#\s*docs-test:\s*needs-cuda\s*$")
CUDA_SKIP_REASON = "needs a CUDA GPU"
_FILE = re.compile(r"^#\s*file:\s*(?P<name>[\w./-]+\.py)\s*$")
_TITLE = re.compile(r'title="(?P<title>[^"]*)"')


@dataclass(frozen=True)
class CodeBlock:
    """One fenced code block of a page."""

    page: str  # relative to docs/ for the site's pages, else to the repository
    line: int  # 1-based line of the first code line
    language: str
    info: str  # everything after the fence, e.g. 'text title="Output"'
    code: str

    @property
    def title(self) -> str | None:
        """The block's ``title="..."``, which the site shows above it."""
        match = _TITLE.search(self.info)
        return None if match is None else match.group("title")

    @property
    def is_output(self) -> bool:
        """An ``Output`` block shows what the Python block before it prints."""
        return self.title == "Output"

    @property
    def skip_reason(self) -> str | None:
        """Why this block does not run here, or ``None`` when it runs."""
        first = self.code.split("\n", 1)[0].strip()
        if NEEDS_CUDA.match(first):
            import torch

            return None if torch.cuda.is_available() else CUDA_SKIP_REASON
        match = _SKIP.match(first)
        return None if match is None else match.group("reason").strip()

    @property
    def file_name(self) -> str | None:
        """The file a ``# file: NAME.py`` block is written to, else ``None``."""
        match = _FILE.match(self.code.split("\n", 1)[0].strip())
        return None if match is None else match.group("name")


def code_blocks(path: Path) -> list[CodeBlock]:
    """The fenced code blocks of a Markdown file, with their language and position."""
    lines = path.read_text("utf-8").splitlines()
    blocks: list[CodeBlock] = []
    index = 0
    while index < len(lines):
        opening = _FENCE_OPEN.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, fence = opening.group("indent"), opening.group("fence")
        info = opening.group("info").strip()
        language = info.split(" ", 1)[0].lstrip(".").lower()
        body: list[str] = []
        index += 1
        start = index
        while index < len(lines) and lines[index].strip() != fence:
            line = lines[index]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            index += 1
        if index >= len(lines):
            raise AssertionError(f"{path}:{start}: code fence {fence!r} is never closed")
        index += 1
        resolved = path.resolve()
        page = resolved.relative_to(DOCS if resolved.is_relative_to(DOCS) else REPO)
        blocks.append(CodeBlock(str(page), start + 1, language, info, "\n".join(body)))
    return blocks
