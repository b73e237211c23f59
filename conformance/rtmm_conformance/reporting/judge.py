"""A check's reported outcome: its raw result (as the runner returns it) after the
expected-failures file and the check's requirement level."""

from __future__ import annotations

from rtmm_conformance.clauses import CheckInfo
from rtmm_conformance.reporting.xfail import XfailFile
from rtmm_conformance.results import CheckResult, Outcome

__all__ = ["judge"]


def judge(
    result: CheckResult, info: CheckInfo, *, strict: bool, expected: XfailFile | None = None
) -> CheckResult:
    """A failure listed in ``expected`` is an expected failure; a SHOULD failure of a run that
    is not strict, a warning. A listed check that passes stays ``passed`` (the report says
    which entries are stale)."""
    if result.outcome is not Outcome.FAILED:
        return result
    entry = expected.entry_for(result.check_id, result.mode) if expected else None
    if entry is not None:
        return result.with_outcome(
            Outcome.XFAILED,
            f"expected failure ({entry.where}: {entry.reason}); was: {result.reason}",
        )
    if info.level == "SHOULD" and not strict:
        return result.with_outcome(Outcome.WARNING)
    return result
