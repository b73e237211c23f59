"""Every check of the suite: importing each area module registers its checks, so that
:func:`implementations` (every check, keyed by ID, in catalog order) knows them all."""

from __future__ import annotations

import importlib

from rtmm_conformance.catalog import AREAS
from rtmm_conformance.checks.registry import registered as implementations

__all__ = ["implementations"]

for _area in AREAS:  # each area module registers its checks when imported
    importlib.import_module(f"rtmm_conformance.checks.{_area}")
