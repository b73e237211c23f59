"""The check catalog: every check of the suite, as the registry holds it once each area
module (``checks/<area>.py``) has defined its checks, and the lookups the harness, the
reports and the docs make in it."""

from __future__ import annotations

import importlib
import types
from collections.abc import Mapping
from typing import Final

from rtmm_conformance.checks.registry import CheckImpl, implementations
from rtmm_conformance.clauses import AREAS, CheckInfo, TargetKind, version_key
from rtmm_protocol._version import PROTOCOL_VERSION

__all__ = [
    "CHECKS",
    "CHECKS_BY_ID",
    "IMPLEMENTATIONS",
    "clauses_for",
    "known_versions",
]

for _area in AREAS:  # each area module registers its checks when imported
    importlib.import_module(f"rtmm_conformance.checks.{_area}")

#: Every check's code and how to run it, by ID, in catalog order.
IMPLEMENTATIONS: Final[Mapping[str, CheckImpl]] = types.MappingProxyType(implementations())

#: Every check of the suite, in clause order (the specification's), then definition order.
CHECKS: Final[tuple[CheckInfo, ...]] = tuple(impl.info for impl in IMPLEMENTATIONS.values())

#: Check ID -> its record.
CHECKS_BY_ID: Final[Mapping[str, CheckInfo]] = types.MappingProxyType({c.id: c for c in CHECKS})


def clauses_for(kind: TargetKind) -> tuple[str, ...]:
    """The clauses with at least one check for this kind of target, in catalog order."""
    return tuple(dict.fromkeys(c.clause for c in CHECKS if kind in c.kinds))


def known_versions() -> list[str]:
    """Protocol versions a run can be scored against, oldest first."""
    return sorted({c.since for c in CHECKS} | {PROTOCOL_VERSION}, key=version_key)
