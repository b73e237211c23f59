"""A check's reported outcome: its raw result (as the runner returns it) after the
expected-failures file and the check's requirement level. :func:`verdict` is the one way
from a planned check to it, for the plugin's items, :func:`~..api.check_model_state` and
:func:`~..api.parametrize_with_checks` alike."""

from __future__ import annotations

from rtmm_conformance.clauses import CheckInfo
from rtmm_conformance.console import expected_failure_reason
from rtmm_conformance.reporting.xfail import XfailFile
from rtmm_conformance.results import CheckResult, Outcome
from rtmm_conformance.running.runner import PlannedCheck, SuiteRunner

__all__ = ["judge", "verdict"]


def judge(
    result: CheckResult, info: CheckInfo, *, fail_on: str, expected: XfailFile | None = None
) -> CheckResult:
    """A failure listed in ``expected`` is an expected failure; a SHOULD failure, a warning
    unless ``fail_on`` is ``all``. A listed check that passes stays ``passed`` (the report
    says which entries are stale)."""
    if result.outcome is not Outcome.FAILED:
        return result
    entry = expected.entry_for(result.check_id, result.mode) if expected else None
    if entry is not None:
        reason = expected_failure_reason(entry.where, entry.reason, result.reason)
        return result.with_outcome(Outcome.XFAILED, reason)
    if info.level == "SHOULD" and fail_on != "all":
        return result.with_outcome(Outcome.WARNING)
    return result


def verdict(
    runner: SuiteRunner, planned: PlannedCheck, expected: XfailFile | None = None
) -> CheckResult:
    """A planned check's reported result: its raw result (run once, then remembered by the
    runner), judged by ``expected`` and what fails the runner's run."""
    raw = runner.result(planned.impl.id, planned.mode)
    return judge(raw, planned.impl.info, fail_on=runner.fail_on, expected=expected)
