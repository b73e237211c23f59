"""Hypothesis profiles: a modest local one and a reproducible one for CI.

The profile is chosen by ``HYPOTHESIS_PROFILE`` when set, else ``ci`` when the ``CI``
environment variable says so, else ``dev``. Tests that need many more examples than the
default (the oracle properties) ask :func:`example_budget` for their count, so the CI
numbers are stated once, next to the test that needs them.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

__all__ = [
    "CI_PROFILE",
    "DEV_PROFILE",
    "active_profile_name",
    "example_budget",
    "register_profiles",
]

DEV_PROFILE = "dev"
CI_PROFILE = "ci"

_TRUTHY = {"1", "true", "yes", "on"}


def active_profile_name() -> str:
    """The profile this run uses: ``HYPOTHESIS_PROFILE``, else ``ci`` under CI, else ``dev``."""
    explicit = os.environ.get("HYPOTHESIS_PROFILE", "").strip()
    if explicit:
        return explicit
    return CI_PROFILE if os.environ.get("CI", "").strip().lower() in _TRUTHY else DEV_PROFILE


def register_profiles() -> None:
    """Register both profiles and load the active one."""
    # No deadline anywhere: the machines running the tests are shared, and timing is
    # checked by the benchmarks, never by tests.
    settings.register_profile(DEV_PROFILE, max_examples=40, deadline=None)
    settings.register_profile(
        CI_PROFILE,
        max_examples=100,
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.load_profile(active_profile_name())


def example_budget(*, ci: int, dev: int) -> int:
    """``ci`` examples under the CI profile, ``dev`` otherwise."""
    return ci if active_profile_name() == CI_PROFILE else dev
