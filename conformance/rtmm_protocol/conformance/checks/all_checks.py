"""Every check of the suite: importing each area module registers its checks."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from rtmm_protocol.conformance.catalog import AREAS
from rtmm_protocol.conformance.checks.registry import CheckImpl, registered

__all__ = ["implementations"]


def implementations() -> Mapping[str, CheckImpl]:
    """Every check, keyed by ID, in catalog order."""
    return registered()


for _area in AREAS:  # each area module registers its checks when imported
    importlib.import_module(f"rtmm_protocol.conformance.checks.{_area}")
