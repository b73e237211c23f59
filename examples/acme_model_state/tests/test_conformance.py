"""Every conformance check, as parameters of one test in this project's own suite."""

from __future__ import annotations

from collections.abc import Callable

from acme_model_state import make_state

from rtmm_conformance import parametrize_with_checks


@parametrize_with_checks(make_state, device="cpu", examples=10)
def test_conformance(check: Callable[[], None]) -> None:
    check()
