"""One way from a planned check to pytest's terms, for the plugin's items and for the
checks a user's own test embeds (:func:`~.api.parametrize_with_checks`)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest

from rtmm_conformance.catalog import CHECKS_BY_ID
from rtmm_conformance.console import failure_message, origin_tag, outcome_reason
from rtmm_conformance.reporting.judge import verdict
from rtmm_conformance.reporting.xfail import XfailFile
from rtmm_conformance.results import CheckResult, ConformanceWarning, Outcome
from rtmm_conformance.running.runner import PlannedCheck, SuiteRunner

__all__ = ["ConformanceFailedError", "run_item"]


class ConformanceFailedError(Exception):
    """A check failed; the message is the full explanation, shown without a traceback."""


def run_item(
    runner: SuiteRunner,
    planned: PlannedCheck,
    expected: XfailFile | None = None,
    *,
    rerun: str = "",
    record: Callable[[CheckResult], None] | None = None,
) -> None:
    """Run a planned check (or fetch its result), judge it (:func:`~.reporting.judge.verdict`),
    hand the verdict to ``record``, and pass or raise what pytest shows for it."""
    result = verdict(runner, planned, expected)
    if record is not None:
        record(result)
    _raise_verdict(result, fail_on=runner.fail_on, baseline=runner.baseline, rerun=rerun)


def _raise_verdict(
    result: CheckResult, *, fail_on: str, baseline: str = "", rerun: str = ""
) -> None:
    """Pass, or raise what pytest shows for ``result``: a failure tagged as the target's own
    or inherited; an expected failure for one inherited that ``fail_on="own"`` forgives, for
    a known gap and for a robustness gap; a skip; or a warning for a SHOULD of the contract."""
    info = CHECKS_BY_ID[result.check_id]
    if result.outcome is Outcome.FAILED:
        if result.origin == "inherited" and fail_on == "own":
            pytest.xfail(outcome_reason("inherited", result.reason, baseline=baseline))
        tag = origin_tag(result.origin, baseline)
        raise ConformanceFailedError(
            failure_message(result.details or result.reason, tag=tag, rerun=rerun)
        )
    if result.outcome in (Outcome.SKIPPED, Outcome.BLOCKED):
        # Reported at the check (not at this line), as pytest does for skip marks.
        raise pytest.skip.Exception(
            outcome_reason(result.outcome.value, result.reason), _use_item_location=True
        )
    if result.outcome is Outcome.XFAILED:
        pytest.xfail(result.reason)
    if result.outcome is Outcome.WARNING:
        if info.profile == "robustness":
            pytest.xfail(outcome_reason("robustness", result.reason))
        message = outcome_reason("warning", result.reason, check=result.label)
        warnings.warn(ConformanceWarning(message), stacklevel=1)
