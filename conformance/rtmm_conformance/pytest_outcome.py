"""One way from a check's verdict to pytest's terms, for the plugin's items and for the
checks a user's own test embeds (:func:`~.api.parametrize_with_checks`)."""

from __future__ import annotations

import warnings

import pytest

from rtmm_conformance.catalog import CHECKS_BY_ID
from rtmm_conformance.results import CheckResult, ConformanceWarning, Outcome

__all__ = ["ConformanceFailedError", "raise_verdict"]


class ConformanceFailedError(Exception):
    """A check failed; the message is the full explanation, shown without a traceback."""


def raise_verdict(
    result: CheckResult, *, fail_on: str, baseline: str = "", rerun: str = ""
) -> None:
    """Pass, or raise what pytest shows for ``result``: a failure tagged as the target's own
    or inherited; an expected failure for one inherited that ``fail_on="own"`` forgives, for
    a known gap and for a robustness gap; a skip; or a warning for a SHOULD of the contract."""
    info = CHECKS_BY_ID[result.check_id]
    if result.outcome is Outcome.FAILED:
        inherited = result.origin == "inherited"
        if inherited and fail_on == "own":
            pytest.xfail(f"inherited from {baseline}: {result.reason}")
        tag = f"[inherited from {baseline}] " if inherited else "[yours] " if baseline else ""
        text = tag + (result.details or result.reason)
        raise ConformanceFailedError(text + (f"\nrerun: {rerun}" if rerun else ""))
    if result.outcome in (Outcome.SKIPPED, Outcome.BLOCKED):
        # Reported at the check (not at this line), as pytest does for skip marks.
        raise pytest.skip.Exception(
            result.reason if result.outcome is Outcome.SKIPPED else f"blocked: {result.reason}",
            _use_item_location=True,
        )
    if result.outcome is Outcome.XFAILED:
        pytest.xfail(result.reason)
    if result.outcome is Outcome.WARNING:
        if info.profile == "robustness":
            pytest.xfail(f"robustness gap (SHOULD, outside the contract's domain): {result.reason}")
        warnings.warn(ConformanceWarning(f"{result.label} (SHOULD): {result.reason}"), stacklevel=1)
