"""The conformance report: per-check outcomes, the table, the summary line, the JSON file.

Results arrive per check and mode; the report folds the modes of a check into one row
(the worst outcome wins, so a check that fails in one mode fails) and counts checks,
not modes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rtmm_protocol.conformance.catalog import CHECKS, CLAUSES, CheckInfo
from rtmm_protocol.conformance.outcomes import CheckResult, Outcome

__all__ = ["REPORT_SCHEMA", "CheckSummary", "ConformanceReport", "aggregate"]

#: Identifies the JSON layout; ``python -m rtmm_protocol matrix`` reads this version.
REPORT_SCHEMA = "rtmm-conformance-report/1"

# Which outcome a check shows when its modes disagree: the first one present.
_PRECEDENCE = (
    Outcome.FAILED,
    Outcome.BLOCKED,
    Outcome.WARNING,
    Outcome.XFAILED,
    Outcome.PASSED,
    Outcome.SKIPPED,
)

_REASON_WIDTH = 78


@dataclass(frozen=True)
class CheckSummary:
    """One check over all the modes it ran in."""

    info: CheckInfo
    outcome: Outcome
    reason: str
    modes: tuple[CheckResult, ...]


def aggregate(info: CheckInfo, results: Sequence[CheckResult]) -> CheckSummary:
    """Fold a check's per-mode results into one row."""
    for outcome in _PRECEDENCE:
        matching = [r for r in results if r.outcome is outcome]
        if matching:
            first = matching[0]
            reason = first.reason
            if len(results) > 1 and first.mode is not None and reason:
                reason = f"[{first.mode}] {reason}"
            if outcome is Outcome.PASSED:
                skipped = [r for r in results if r.outcome is Outcome.SKIPPED]
                if skipped and skipped[0].mode is not None:
                    reason = f"[{skipped[0].mode}] skipped: {skipped[0].reason}"
            return CheckSummary(info, outcome, reason, tuple(results))
    raise ValueError(f"no results for {info.id}")


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


@dataclass
class ConformanceReport:
    """Everything a conformance run found about one target."""

    target: str
    kind: str | None
    settings: dict[str, object]
    environment: dict[str, str]
    results: list[CheckResult]
    strict: bool = False
    stale_expected_failures: list[str] = field(default_factory=list)
    unknown_expected_failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def checks(self) -> list[CheckSummary]:
        """One row per check that ran, in catalog order."""
        by_check: dict[str, list[CheckResult]] = {}
        for result in self.results:
            by_check.setdefault(result.check_id, []).append(result)
        order = {"realtime": 0, "non-realtime": 1, "text-only": 2, None: 3}
        return [
            aggregate(c, sorted(by_check[c.id], key=lambda r: order.get(r.mode, 4)))
            for c in CHECKS
            if c.id in by_check
        ]

    def counts(self) -> Counter[str]:
        """Checks per outcome, with failures split by level."""
        counts: Counter[str] = Counter()
        for row in self.checks():
            key = row.outcome.value
            if row.outcome is Outcome.FAILED:
                key = f"failed_{row.info.level.lower()}"
            counts[key] += 1
        return counts

    @property
    def ok(self) -> bool:
        """No MUST failure, no blocked check; in strict mode no SHOULD failure or stale entry."""
        counts = self.counts()
        if counts["failed_must"] or counts["failed_should"] or counts["blocked"]:
            return False
        return not (
            self.strict and (self.stale_expected_failures or self.unknown_expected_failures)
        )

    def summary_line(self) -> str:
        """``conformance: 41 passed, 0 failed (MUST), 1 warning (SHOULD)`` and the rest."""
        counts = self.counts()
        parts = [
            f"{counts['passed']} passed",
            f"{counts['failed_must']} failed (MUST)",
        ]
        if self.strict:
            parts.append(f"{counts['failed_should']} failed (SHOULD, strict)")
        else:
            parts.append(f"{_plural(counts['warning'], 'warning')} (SHOULD)")
        for key, label in (
            ("blocked", "blocked"),
            ("skipped", "skipped"),
            ("xfailed", "expected failures"),
        ):
            if counts[key]:
                parts.append(f"{counts[key]} {label}")
        stale = len(self.stale_expected_failures) + len(self.unknown_expected_failures)
        if stale:
            parts.append(
                _plural(stale, "stale expected-failure entry").replace("entrys", "entries")
            )
        return "conformance: " + ", ".join(parts)

    def table(self) -> str:
        """The per-check table: clause, level, check, outcome, one-line reason."""
        rows = [("clause", "level", "check", "outcome", "reason")]
        for row in self.checks():
            reason = " ".join(row.reason.split())
            if len(reason) > _REASON_WIDTH:
                reason = reason[: _REASON_WIDTH - 3] + "..."
            rows.append((row.info.clause, row.info.level, row.info.id, row.outcome.value, reason))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = [
            "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r[:4])) + "  " + r[4]
            for r in rows
        ]
        lines = [line.rstrip() for line in lines]
        extra = [
            *(f"stale expected failure: {s}" for s in self.stale_expected_failures),
            *(f"expected failure matching no check: {s}" for s in self.unknown_expected_failures),
            *self.notes,
        ]
        return "\n".join([*lines, *extra])

    def to_json(self) -> dict[str, object]:
        """The report as JSON-ready data (see :data:`REPORT_SCHEMA`)."""
        counts = self.counts()
        return {
            "schema": REPORT_SCHEMA,
            "target": self.target,
            "kind": self.kind,
            "settings": self.settings,
            "environment": self.environment,
            "summary": {
                "ok": self.ok,
                "line": self.summary_line(),
                "passed": counts["passed"],
                "failed_must": counts["failed_must"],
                "failed_should": counts["failed_should"],
                "warnings": counts["warning"],
                "blocked": counts["blocked"],
                "skipped": counts["skipped"],
                "xfailed": counts["xfailed"],
            },
            "clauses": dict(CLAUSES),
            "checks": [
                {
                    "id": row.info.id,
                    "clause": row.info.clause,
                    "level": row.info.level,
                    "area": row.info.area,
                    "statement": row.info.statement,
                    "since": row.info.since,
                    "outcome": row.outcome.value,
                    "reason": row.reason,
                    "modes": {
                        (r.mode or "any"): {
                            "outcome": r.outcome.value,
                            "reason": r.reason,
                            "details": r.details,
                            "duration_s": round(r.duration_s, 4),
                        }
                        for r in row.modes
                    },
                }
                for row in self.checks()
            ],
            "expected_failures": {
                "stale": self.stale_expected_failures,
                "unknown": self.unknown_expected_failures,
            },
            "notes": self.notes,
        }

    def write_json(self, path: str | Path) -> None:
        """Write :meth:`to_json` to ``path`` (parent folders are created)."""
        file = Path(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
