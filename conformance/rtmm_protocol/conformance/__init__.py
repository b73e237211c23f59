"""The rtmm-protocol conformance suite, installed as ``rtmm_protocol.conformance``.

Run it with ``pytest --conformance`` (the bundled reference) or
``pytest --conformance=MODULE:FACTORY`` (your state), or from Python with
:func:`check_model_state`. The pytest plugin lives in :mod:`.plugin`; this package
imports nothing heavy until one of the names below is used, because pytest loads the
plugin in every run of every project that has the package installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rtmm_protocol.conformance.api import (
        change_life_for,
        check_model_state,
        life_machine_for,
        parametrize_with_checks,
        replay,
    )
    from rtmm_protocol.conformance.catalog import CHECKS, CLAUSES, CheckInfo
    from rtmm_protocol.conformance.driving.context import ConformanceContext, ModeNotSupported
    from rtmm_protocol.conformance.reporting.report import ConformanceReport
    from rtmm_protocol.conformance.reporting.results import (
        CheckFailure,
        CheckResult,
        ConformanceWarning,
        Outcome,
    )
    from rtmm_protocol.conformance.reporting.schema import report_schema, validate_report
    from rtmm_protocol.conformance.targets import reference_gatherer, reference_model_state

__all__ = [
    "CHECKS",
    "CLAUSES",
    "CheckFailure",
    "CheckInfo",
    "CheckResult",
    "ConformanceContext",
    "ConformanceReport",
    "ConformanceWarning",
    "ModeNotSupported",
    "Outcome",
    "change_life_for",
    "check_model_state",
    "life_machine_for",
    "parametrize_with_checks",
    "reference_gatherer",
    "reference_model_state",
    "replay",
    "report_schema",
    "validate_report",
]

_WHERE = {
    "change_life_for": "api",
    "check_model_state": "api",
    "life_machine_for": "api",
    "parametrize_with_checks": "api",
    "replay": "api",
    "CHECKS": "catalog",
    "CLAUSES": "catalog",
    "CheckInfo": "catalog",
    "ConformanceContext": "driving.context",
    "ModeNotSupported": "driving.context",
    "CheckFailure": "reporting.results",
    "CheckResult": "reporting.results",
    "ConformanceWarning": "reporting.results",
    "Outcome": "reporting.results",
    "ConformanceReport": "reporting.report",
    "report_schema": "reporting.schema",
    "validate_report": "reporting.schema",
    "reference_gatherer": "targets",
    "reference_model_state": "targets",
}


def __getattr__(name: str) -> object:
    """Import a public name's module on first use."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
