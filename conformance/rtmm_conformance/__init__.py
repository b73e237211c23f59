"""The rtmm-protocol conformance suite: ``pytest --conformance[=MODULE:FACTORY]``, or
:func:`check_model_state` from Python. Its names are imported on first use, since pytest
loads the suite's plugin in every run of every project that has the package installed."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rtmm_conformance.api import (
        change_life_for,
        check_model_state,
        life_machine_for,
        parametrize_with_checks,
        replay,
    )
    from rtmm_conformance.catalog import CHECKS
    from rtmm_conformance.clauses import CLAUSES, CheckInfo
    from rtmm_conformance.driving.context import ConformanceContext, ModeNotSupported
    from rtmm_conformance.reporting.report import ConformanceReport
    from rtmm_conformance.reporting.schema import report_schema, validate_report
    from rtmm_conformance.results import (
        CheckFailure,
        CheckResult,
        ConformanceWarning,
        Outcome,
    )
    from rtmm_conformance.settings import RunSettings
    from rtmm_conformance.targets import reference_gatherer, reference_model_state

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
    "RunSettings",
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

#: Public name -> the module (below this package) that defines it.
_WHERE = {
    name: module
    for module, names in {
        "api": "change_life_for check_model_state life_machine_for parametrize_with_checks replay",
        "catalog": "CHECKS",
        "clauses": "CLAUSES CheckInfo",
        "driving.context": "ConformanceContext ModeNotSupported",
        "results": "CheckFailure CheckResult ConformanceWarning Outcome",
        "settings": "RunSettings",
        "reporting.report": "ConformanceReport",
        "reporting.schema": "report_schema validate_report",
        "targets": "reference_gatherer reference_model_state",
    }.items()
    for name in names.split()
}


def __getattr__(name: str) -> object:
    """Import a public name's module on first use."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
