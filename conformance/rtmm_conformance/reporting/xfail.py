"""The expected-failures file: known gaps of a target, each with a reason.

One entry per line: a clause ID (``G6``: every check of the clause), a check ID
(``G6-pieces-are-views``: both modes) or a check in one mode
(``G6-pieces-are-views[realtime]``), then whitespace and the reason. Blank lines and
lines starting with ``#`` are ignored::

    # acme-state known gaps
    G6-pieces-are-views      rows are copied into a pooled buffer (acme#12)
    D5                       over-size dummy runs are clamped, fixed in 2.0

An entry whose checks all pass, or that names no check, is *stale* (a strict run fails).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rtmm_conformance.catalog import CHECKS_BY_ID
from rtmm_conformance.clauses import CLAUSES

__all__ = ["XfailEntry", "XfailFile", "parse_xfail_file", "parse_xfail_text"]


@dataclass(frozen=True)
class XfailEntry:
    """One line of the file."""

    key: str
    reason: str
    source: str
    line: int

    @property
    def where(self) -> str:
        """``FILE:LINE`` of the entry."""
        return f"{self.source}:{self.line}"

    @property
    def check_id(self) -> str:
        """The key without a ``[mode]`` suffix."""
        return self.key.partition("[")[0]

    @property
    def mode(self) -> str | None:
        """The mode the entry is limited to, if any."""
        return self.key.partition("[")[2].rstrip("]") or None

    @property
    def known(self) -> bool:
        """Whether the entry names a clause or a check of the catalog."""
        return self.key in CLAUSES or self.check_id in CHECKS_BY_ID

    def matches(self, check_id: str, mode: str | None) -> bool:
        """Whether this entry covers ``check_id`` in ``mode``."""
        if self.key in CLAUSES:
            return check_id in CHECKS_BY_ID and CHECKS_BY_ID[check_id].clause == self.key
        return self.check_id == check_id and self.mode in (None, mode)


@dataclass(frozen=True)
class XfailFile:
    """All entries of one file."""

    entries: tuple[XfailEntry, ...]

    def entry_for(self, check_id: str, mode: str | None) -> XfailEntry | None:
        """The most specific entry covering a check in a mode, if any."""
        matching = [e for e in self.entries if e.matches(check_id, mode)]
        if not matching:
            return None
        return max(matching, key=lambda e: (e.mode is not None, e.key not in CLAUSES))

    def unknown(self) -> list[XfailEntry]:
        """Entries that name no clause or check."""
        return [e for e in self.entries if not e.known]

    def stale(self, outcomes: Iterable[tuple[str, str | None, str]]) -> list[XfailEntry]:
        """Known entries whose checks ran and none failed (``xfailed``), from the
        ``(check_id, mode, outcome)`` of the checks that ran."""
        ran = list(outcomes)
        stale = []
        for entry in filter(lambda e: e.known, self.entries):
            judged = [o for (c, m, o) in ran if entry.matches(c, m) and o in ("passed", "xfailed")]
            if judged and "xfailed" not in judged:
                stale.append(entry)
        return stale


def parse_xfail_text(text: str, source: str = "<xfail>") -> XfailFile:
    """Parse the file's text; ``ValueError`` names the line of a malformed entry."""
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) < 2 or not parts[1].strip():
            raise ValueError(
                f"{source}:{number}: an expected failure needs a reason after the ID, got {line!r}"
            )
        entries.append(XfailEntry(parts[0], parts[1].strip(), source, number))
    return XfailFile(tuple(entries))


def parse_xfail_file(path: str | Path, source: str | None = None) -> XfailFile:
    """Read and parse an expected-failures file; ``source`` names it in messages."""
    name = str(path) if source is None else source
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(
            f"cannot read the expected-failures file {name!r}: {error.strerror}"
        ) from None
    return parse_xfail_text(text, name)
