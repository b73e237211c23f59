"""Every check of the suite: importing each area module registers its checks."""

from __future__ import annotations

from collections.abc import Mapping

from rtmm_protocol.conformance.checks import (  # noqa: F401  # imported to register checks
    changes,
    cuda_graphs,
    dummy_run,
    errors,
    gather,
    real_path,
    signatures,
    stateful,
)
from rtmm_protocol.conformance.checks.registry import CheckImpl, registered

__all__ = ["implementations"]


def implementations() -> Mapping[str, CheckImpl]:
    """Every check, keyed by ID, in catalog order."""
    return registered()
