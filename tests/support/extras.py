"""What tests need beyond what every test environment has.

The GPU machine has torch, numpy, typing_extensions, pytest and hypothesis only, and a
bare checkout on ``PYTHONPATH`` instead of an installed package: there, the tests that
validate reports against the JSON Schema (jsonschema), run the type checkers (mypy) or
split a run with pytest-xdist skip with a reason instead of failing, and pytest runs in
a subprocess load the conformance plugin by name.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest

__all__ = [
    "HAS_JSONSCHEMA",
    "HAS_MYPY",
    "JSONSCHEMA_MISSING",
    "MYPY_MISSING",
    "conformance_plugin_args",
    "needs_jsonschema",
    "needs_mypy",
    "needs_xdist",
    "validate_when_possible",
]

HAS_JSONSCHEMA = importlib.util.find_spec("jsonschema") is not None
HAS_MYPY = importlib.util.find_spec("mypy") is not None
HAS_XDIST = importlib.util.find_spec("xdist") is not None

JSONSCHEMA_MISSING = "validates reports against the JSON Schema: needs jsonschema (the test extra)"
MYPY_MISSING = "runs mypy: needs mypy (the typecheck extra)"

#: Validates a report against the schema: skipped without jsonschema.
needs_jsonschema = pytest.mark.skipif(not HAS_JSONSCHEMA, reason=JSONSCHEMA_MISSING)

#: Runs mypy: skipped without it.
needs_mypy = pytest.mark.skipif(not HAS_MYPY, reason=MYPY_MISSING)

#: Splits a run with ``-n``: skipped without pytest-xdist (the test extra).
needs_xdist = pytest.mark.skipif(
    not HAS_XDIST, reason="splits a run with -n: needs pytest-xdist (the test extra)"
)


def conformance_plugin_args() -> list[str]:
    """``-p rtmm_conformance.plugin`` where the plugin is not installed as pytest's
    entry point (a bare checkout on ``PYTHONPATH``), else nothing: loading it both ways
    is an error."""
    installed = any(
        entry.name == "rtmm_conformance"
        for entry in importlib.metadata.entry_points(group="pytest11")
    )
    return [] if installed else ["-p", "rtmm_conformance.plugin"]


def validate_when_possible(data: object) -> None:
    """Validate a report against the schema where jsonschema is installed, else nothing:
    for tests whose subject is something else (the schema's own tests skip without it)."""
    if HAS_JSONSCHEMA:
        from rtmm_conformance.reporting.schema import validate_report

        validate_report(data)
