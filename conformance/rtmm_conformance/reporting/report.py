"""The conformance report: a row per check (its worst mode), the causes, the table and the
JSON file; a run that did not bring every selected check to a verdict is never ``ok``."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from rtmm_conformance.catalog import CHECKS, CHECKS_BY_ID, clauses_for
from rtmm_conformance.clauses import CLAUSES, PROFILES, CheckInfo
from rtmm_conformance.console import rerun_command
from rtmm_conformance.reporting.causes import Cause, group_causes
from rtmm_conformance.reporting.schema import REPORT_SCHEMA
from rtmm_conformance.reporting.xfail import XfailFile
from rtmm_conformance.results import FAILING_OUTCOMES, CheckResult, Outcome
from rtmm_conformance.running.runner import SuiteRunner

__all__ = ["CheckSummary", "ConformanceReport", "aggregate", "build_report"]

#: The console's sections of causes, in the order shown.
_SECTIONS = ("own", "inherited", "expected", "robustness")
#: The outcomes of a row that count as a failure in the summary line.
_FAILING_ROW_OUTCOMES = (Outcome.FAILED, Outcome.WARNING)

# Which outcome a check shows when its modes disagree: the first one present.
_PRECEDENCE = (
    Outcome.FAILED,
    Outcome.NOT_RUN,
    Outcome.BLOCKED,
    Outcome.WARNING,
    Outcome.XFAILED,
    Outcome.PASSED,
    Outcome.SKIPPED,
)


@dataclass(frozen=True)
class CheckSummary:
    """One check over all the modes it ran in."""

    info: CheckInfo
    outcome: Outcome
    reason: str
    modes: tuple[CheckResult, ...]

    @property
    def origin(self) -> str | None:
        """``own`` if a failing mode is the target's own, ``inherited`` if all are, or ``None``."""
        origins = {r.origin or "own" for r in self.modes if r.outcome in FAILING_OUTCOMES}
        return None if not origins else "own" if "own" in origins else "inherited"

    @property
    def via_compat(self) -> bool:
        """Whether the check ran through the rename's compat adapter."""
        return any(r.via_compat for r in self.modes)

    @property
    def profile(self) -> str:
        """``contract`` or ``robustness``: what the check judges."""
        return self.info.profile


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


def _other_outcomes(counts: Counter[str]) -> list[str]:
    """The outcomes a summary names only when they occur."""
    labels = (
        ("blocked", "blocked"),
        ("skipped", "skipped"),
        ("xfailed", "expected failures"),
        ("not run", "NOT RUN"),
    )
    return [f"{counts[key]} {label}" for key, label in labels if counts[key]]


def _wrapped(text: str, indent: int = 4) -> list[str]:
    return textwrap.wrap(
        text,
        width=100,
        initial_indent=" " * indent,
        subsequent_indent=" " * (indent + 2),
        break_on_hyphens=False,
        break_long_words=False,
    )


def _profile_summary(counts: Counter[str]) -> dict[str, int]:
    """One profile's counts of checks, as the JSON report's summary gives them."""
    return {
        "passed": counts["passed"],
        "failed": counts["failed_must"] + counts["failed_should"],
        "failed_own": counts["failed_own"],
        "warnings": counts["warning"],
        "blocked": counts["blocked"],
        "skipped": counts["skipped"],
        "xfailed": counts["xfailed"],
        "not_run": counts["not run"],
    }


def _case_json(result: CheckResult) -> dict[str, object] | None:
    """A result's smallest case, in words and as the scenario's fields (or ``None``)."""
    if result.case is None:
        return None
    return {"words": result.case_words, "scenario": asdict(result.case)}


def _profile_of(result: CheckResult) -> str:
    info = CHECKS_BY_ID.get(result.check_id)
    return info.profile if info is not None else "contract"


@dataclass(frozen=True)
class ConformanceReport:
    """Everything a conformance run found about one target. Its rows (a check each) and
    its causes are computed once, when it is made; every view reads them."""

    target: str
    kind: str | None
    settings: dict[str, object]
    environment: dict[str, str]
    results: list[CheckResult]
    stale_expected_failures: list[str] = field(default_factory=list)
    unknown_expected_failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    interrupted: bool = False
    #: The class the target derives from, whose failures count as inherited ("" if none).
    baseline: str = ""
    #: What fails the run (``own``, ``contract`` or ``all``: the strict profile), its
    #: default resolved; the one setting every verdict of the report reads.
    fail_on: str = "contract"
    _rows: list[CheckSummary] = field(init=False, repr=False, compare=False)
    _causes: list[Cause] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_rows", self._make_rows())
        object.__setattr__(self, "_causes", self._make_causes())

    def checks(self) -> list[CheckSummary]:
        """One row per selected check, in clause order (catalog order within a clause)."""
        return self._rows

    def causes(self) -> list[Cause]:
        """The failures (MUST, SHOULD and expected ones) grouped by cause, numbered in the
        order the console shows them: the target's own first, then the inherited ones, the
        expected ones, and the robustness gaps (each group in row order)."""
        return self._causes

    def _make_rows(self) -> list[CheckSummary]:
        by_check: dict[str, list[CheckResult]] = {}
        for result in self.results:
            by_check.setdefault(result.check_id, []).append(result)
        # The typing clauses first (every other check needs them), then the spec's order.
        clauses = list(CLAUSES)
        ordered = sorted(
            (c for c in CHECKS if c.id in by_check),
            key=lambda c: (not c.clause.startswith("T"), clauses.index(c.clause)),
        )
        modes = {"realtime": 0, "non-realtime": 1, "text-only": 2, None: 3}
        return [
            aggregate(c, sorted(by_check[c.id], key=lambda r: modes.get(r.mode, 4)))
            for c in ordered
        ]

    def _make_causes(self) -> list[Cause]:
        grouped = group_causes(r for row in self._rows for r in row.modes)
        ordered = sorted(grouped, key=lambda c: _SECTIONS.index(self.section_of(c)))
        return [replace(c, id=str(n)) for n, c in enumerate(ordered, start=1)]

    def section_of(self, cause: Cause) -> str:
        """Where a cause is shown: ``own``, ``inherited``, ``expected`` or ``robustness``."""
        if all(_profile_of(r) == "robustness" for r in cause.results):
            return "robustness"
        if all(r.outcome is Outcome.XFAILED for r in cause.results):
            return "expected"
        failing = [r for r in cause.results if r.outcome is not Outcome.XFAILED]
        if self.baseline and all(r.origin == "inherited" for r in failing):
            return "inherited"
        return "own"

    @property
    def complete(self) -> bool:
        """Whether every selected check ran to a verdict."""
        return not self.interrupted and all(r.outcome is not Outcome.NOT_RUN for r in self.results)

    def counts(self, profile: str | None = None) -> Counter[str]:
        """Checks per outcome (of one ``profile``, or all), with failures split by level and
        by origin (``failed_own``)."""
        counts: Counter[str] = Counter()
        for row in self.checks():
            if profile is not None and row.profile != profile:
                continue
            key = row.outcome.value
            if row.outcome is Outcome.FAILED:
                key = f"failed_{row.info.level.lower()}"
                counts["failed_own"] += row.origin == "own"
            counts[key] += 1
        return counts

    @property
    def ok(self) -> bool:
        """The contract holds: every selected check ran, no contract check failed a MUST or
        was blocked; in a strict run (``fail_on="all"``), nothing failed at all and no
        entry is stale."""
        counts = self.counts()
        stale = self.stale_expected_failures or self.unknown_expected_failures
        failed = counts["failed_must"] or counts["failed_should"] or counts["blocked"]
        return self.complete and not (failed or (self.fail_on == "all" and stale))

    @property
    def fails_run(self) -> bool:
        """Whether the run fails, by :attr:`fail_on`: ``own`` failures only, every contract
        failure, or (``all``) whatever makes the report not :attr:`ok`."""
        if self.fail_on == "all" or (not self.ok and not self.complete):
            return not self.ok
        counts = self.counts()
        if counts["blocked"]:
            return True
        if self.fail_on == "own":
            return counts["failed_own"] > 0
        return counts["failed_must"] + counts["failed_should"] > 0

    def summary_line(self) -> str:
        """``contract: 41 passed, 0 failed (MUST), 1 warning (SHOULD); robustness: 9 passed,
        1 failed (SHOULD)`` and the rest: the contract's verdict first, robustness apart."""
        contract, robustness = self.counts("contract"), self.counts("robustness")
        strict = self.fail_on == "all"
        parts = [f"{contract['passed']} passed", f"{contract['failed_must']} failed (MUST)"]
        if strict:
            parts.append(f"{contract['failed_should']} failed (SHOULD, strict)")
        else:
            parts.append(f"{_plural(contract['warning'], 'warning')} (SHOULD)")
        parts += _other_outcomes(contract)
        line = "contract: " + ", ".join(parts)
        if sum(robustness.values()):
            failed = robustness["failed_should"] + robustness["warning"]
            rparts = [
                f"{robustness['passed']} passed",
                f"{failed} failed ({'strict' if strict else 'SHOULD'})",
                *_other_outcomes(robustness),
            ]
            line += "; robustness: " + ", ".join(rparts)
        stale = len(self.stale_expected_failures) + len(self.unknown_expected_failures)
        if stale:
            line += f"; {stale} stale expected-failure {'entry' if stale == 1 else 'entries'}"
        if self.baseline:
            # Every failing row (robustness gaps and warnings too) is the target's own or
            # inherited: the two numbers add up to the failures the line counts above.
            origins = Counter(
                row.origin for row in self.checks() if row.outcome in _FAILING_ROW_OUTCOMES
            )
            line += (
                f" -- {_plural(origins['own'], 'failure')} of yours, "
                f"{origins['inherited']} inherited from {self.baseline}"
            )
        if not self.complete:
            line += " -- INCOMPLETE: " + (
                "the run was interrupted" if self.interrupted else "not every check ran"
            )
        return line

    def item_line(self) -> str:
        """How pytest's item count (one per check and mode) relates to the table's rows."""
        rows = self.checks()
        by_modes = Counter(len(row.modes) for row in rows)
        split = ", ".join(
            f"{count} in {_plural(modes, 'mode')}"
            for modes, count in sorted(by_modes.items(), reverse=True)
        )
        return (
            f"{_plural(len(self.results), 'pytest item')} = {_plural(len(rows), 'check')} "
            f"x their modes ({split}); the table and the counts are per check"
        )

    def causes_text(self) -> str:
        """Each cause once, the target's own first with the command that reruns it;
        inherited causes, expected failures and robustness gaps one line each."""
        causes = self.causes()
        if not causes:
            return ""
        failing = [r for r in self.checks() if any(m.outcome in FAILING_OUTCOMES for m in r.modes)]
        by_section: dict[str, list[Cause]] = {}
        for cause in causes:
            by_section.setdefault(self.section_of(cause), []).append(cause)
        lines = [f"{_plural(len(failing), 'failed check')}, {_plural(len(causes), 'cause')}:"]
        own = by_section.get("own", [])
        if own and self.baseline:
            lines.append("yours:")
        for cause in own:
            levels = Counter(r.outcome.value for r in cause.results)
            verbs = {"failed": "failed", "warning": "warned", "xfailed": "failed as expected"}
            kinds = ", ".join(f"{n} {verbs.get(o, o)}" for o, n in levels.items())
            lines.append(f"  cause {cause.id}: {cause.title}")
            lines.extend(
                _wrapped(
                    f"{_plural(len(cause.checks), 'check')} ({kinds} in all modes): "
                    + ", ".join(cause.checks)
                )
            )
            lines.append(f"    rerun: {self.rerun_command(cause.first)}")
        headings = {
            "inherited": f"inherited from {self.baseline} (--conformance-fail-on=contract "
            "fails on them):",
            "expected": "expected failures (the --conformance-xfail file):",
            "robustness": "robustness gaps, outside the contract's domain (SHOULD; "
            "--conformance-strict fails on them):",
        }
        for section in _SECTIONS[1:]:
            if section not in by_section:
                continue
            lines.append(headings[section])
            for cause in by_section[section]:
                lines.extend(
                    _wrapped(f"cause {cause.id}: {cause.title} -- " + ", ".join(cause.checks), 2)
                )
        return "\n".join(lines)

    def rerun_command(self, result: CheckResult) -> str:
        """The command that reruns one check in one mode (its failure shows the replay)."""
        device, seed = str(self.settings.get("device", "cpu")), self.settings.get("seed")
        dtype = self.settings.get("dtype")
        return rerun_command(self.target, seed, device, result.label, dtype=dtype)

    def should_details(self) -> str:
        """The full details of every SHOULD failure of the contract reported as a warning
        (robustness gaps have a line each in :meth:`causes_text`)."""
        return "\n".join(
            f"--- {r.label} (SHOULD, warning)\n{r.details or r.reason}"
            for row in self.checks()
            if row.profile == "contract"
            for r in row.modes
            if r.outcome is Outcome.WARNING
        )

    def table(self) -> str:
        """The per-check table: clause, level, check, outcome, and the whole reason (never cut)."""
        rows = [("clause", "profile", "level", "check", "outcome", "reason")]
        causes = self.causes()
        for row in self.checks():
            reason = " ".join(row.reason.split())
            numbers = sorted({c.id for c in causes for r in row.modes if r in c.results}, key=int)
            tags = [f"cause {', '.join(numbers)}"] if numbers else []
            if self.baseline and row.origin:
                tags.append(row.origin)
            if row.via_compat:
                tags.append("via compat")
            if tags:
                reason = f"[{'; '.join(tags)}] {reason}"
            info = row.info
            rows.append((info.clause, info.profile, info.level, info.id, row.outcome.value, reason))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = [
            (
                "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r[:5])) + "  " + r[5]
            ).rstrip()
            for r in rows
        ]
        extra = [
            *(f"stale expected failure: {s}" for s in self.stale_expected_failures),
            *(f"expected failure matching no check: {s}" for s in self.unknown_expected_failures),
            *self.notes,
        ]
        if via := [row.info.id for row in self.checks() if row.via_compat]:
            extra.append(
                "via compat: the target still names computed_prefill_lens (T2), so these checks "
                f"ran through rtmm_protocol.compat's adapter: {', '.join(via)}"
            )
        return "\n".join([*lines, *extra])

    def to_json(self) -> dict[str, object]:
        """The report as JSON-ready data (see :data:`~.schema.REPORT_SCHEMA`)."""
        counts, causes, rows = self.counts(), self.causes(), self.checks()
        # A failing result's cause, by the result's identity (equal results may differ).
        refs = {
            id(r): {"id": c.id, "key": c.key, "title": c.title} for c in causes for r in c.results
        }
        return {
            "schema": REPORT_SCHEMA,
            "target": self.target,
            "baseline": self.baseline or None,
            "kind": self.kind,
            "settings": self.settings,
            "environment": self.environment,
            "summary": {
                "ok": self.ok,
                "fail_on": self.fail_on,
                "fails_run": self.fails_run,
                "complete": self.complete,
                "interrupted": self.interrupted,
                "line": self.summary_line(),
                **{k: counts[k] for k in ("passed", "failed_must", "failed_should", "failed_own")},
                "warnings": counts["warning"],
                **{k: counts[k] for k in ("blocked", "skipped", "xfailed")},
                "not_run": counts["not run"],
                "not_run_items": sum(1 for r in self.results if r.outcome is Outcome.NOT_RUN),
                "items": len(self.results),
                "causes": len(causes),
                "via_compat": [row.info.id for row in rows if row.via_compat],
                "profiles": {
                    profile: _profile_summary(self.counts(profile)) for profile in PROFILES
                },
            },
            "causes": [
                {
                    "id": cause.id,
                    "key": cause.key,
                    "title": cause.title,
                    "checks": cause.checks,
                    "items": [r.label for r in cause.results],
                    "replay": cause.first.replay,
                    "rerun": self.rerun_command(cause.first),
                }
                for cause in causes
            ],
            "clauses": dict(CLAUSES),
            "checks": [
                {
                    # id, clause, level, area, statement, since, profile
                    **{k: v for k, v in vars(row.info).items() if k != "kinds"},
                    "outcome": row.outcome.value,
                    "reason": row.reason,
                    "cause": next((refs[id(r)] for r in row.modes if id(r) in refs), None),
                    "origin": row.origin,
                    "via_compat": row.via_compat,
                    "modes": {
                        (r.mode or "any"): {
                            "outcome": r.outcome.value,
                            "reason": r.reason,
                            "details": r.details,
                            "duration_s": round(r.duration_s, 4),
                            "case": _case_json(r),
                            "cause": refs.get(id(r)),
                            "origin": (r.origin or "own")
                            if r.outcome in FAILING_OUTCOMES
                            else None,
                        }
                        for r in row.modes
                    },
                }
                for row in rows
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


def build_report(
    runner: SuiteRunner,
    results: list[CheckResult],
    expected: XfailFile | None,
    *,
    interrupted: bool = False,
) -> ConformanceReport:
    """The report of a run: its results, with what the runner learnt about the target and
    which expected failures are stale (not judged when the run was interrupted)."""
    stale: list[str] = []
    unknown: list[str] = []
    if expected is not None and not interrupted:
        outcomes = [(r.check_id, r.mode, r.outcome.value) for r in results]
        stale = [f"{e.where}: {e.key} ({e.reason})" for e in expected.stale(outcomes)]
        unknown = [f"{e.where}: {e.key}" for e in expected.unknown()]
    kind = runner.probe.kind
    if kind is None:
        notes = [f"target kind unknown: {runner.probe.note}"]
    else:
        checked = dict.fromkeys(c.clause for c in CHECKS)  # clauses some kind has checks for
        left_out = ", ".join(c for c in checked if c not in clauses_for(kind))
        notes = [f"clauses not applicable to a {kind} target: {left_out}"] if left_out else []
    return ConformanceReport(
        target=runner.target.name,
        baseline=runner.baseline,
        fail_on=runner.fail_on,
        kind=kind,
        settings=runner.settings.summary(),
        environment=runner.environment,
        results=results,
        stale_expected_failures=stale,
        unknown_expected_failures=unknown,
        notes=notes + runner.notes,
        interrupted=interrupted,
    )
