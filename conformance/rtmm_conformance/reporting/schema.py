"""The JSON Schema (draft 2020-12) of the conformance report, shipped with the package, for
tools that read ``pytest --conformance-report=PATH`` files (the layout
:data:`REPORT_SCHEMA` names)."""

from __future__ import annotations

import importlib
import json
from functools import lru_cache
from importlib import resources
from typing import Any

__all__ = [
    "READABLE_REPORT_SCHEMAS",
    "REPORT_SCHEMA",
    "SCHEMA_FILE",
    "report_schema",
    "validate_report",
]

#: Identifies the JSON layout (the ``schema`` field); see :mod:`.schema`.
REPORT_SCHEMA = "rtmm-conformance-report/5"
#: Layouts ``python -m rtmm_conformance matrix`` reads (1 had no causes; 2 no origins; 3 no
#: profiles; 4 no smallest cases).
READABLE_REPORT_SCHEMAS = tuple(f"rtmm-conformance-report/{n}" for n in range(1, 6))

#: The schema's file name inside the ``rtmm_conformance.reporting`` package.
SCHEMA_FILE = "report_schema.json"


@lru_cache(maxsize=1)
def _schema_text() -> str:
    return (resources.files("rtmm_conformance.reporting") / SCHEMA_FILE).read_text("utf-8")


def report_schema() -> dict[str, Any]:
    """The report's JSON Schema, as a fresh dict (safe to modify)."""
    schema: dict[str, Any] = json.loads(_schema_text())
    return schema


def validate_report(data: object) -> None:
    """Check parsed report JSON against the schema; ``ValueError`` lists every problem.
    Needs the ``jsonschema`` package (in the ``test`` extra)."""
    try:
        jsonschema: Any = importlib.import_module("jsonschema")  # untyped: no stubs needed
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError(
            "validating a report needs the jsonschema package: pip install jsonschema"
        ) from None
    validator = jsonschema.Draft202012Validator(report_schema())
    problems = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if problems:
        lines = [
            f"{'/'.join(str(p) for p in error.absolute_path) or '(top)'}: {error.message}"
            for error in problems
        ]
        raise ValueError("the report does not match its schema:\n" + "\n".join(lines))
