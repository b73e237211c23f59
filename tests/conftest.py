"""Test-wide settings: Hypothesis profiles and the ``cuda`` marker's skip."""

from __future__ import annotations

import pytest
import torch
from support.profiles import register_profiles

register_profiles()

CUDA_SKIP_REASON = "CUDA is not available"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``cuda`` where no CUDA device is present, with a reason.

    CUDA is asked for only when such a test was collected: ``torch.cuda.is_available()``
    initialises the driver in this process, which a run without CUDA tests (a
    ``--conformance`` run from the repository root among them) must not do.
    """
    marked = [item for item in items if item.get_closest_marker("cuda") is not None]
    if not marked or torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason=CUDA_SKIP_REASON)
    for item in marked:
        item.add_marker(skip)


@pytest.fixture
def cuda_device() -> torch.device:
    """The current CUDA device; skips the test where CUDA is not available."""
    if not torch.cuda.is_available():
        pytest.skip(CUDA_SKIP_REASON)
    return torch.device("cuda", torch.cuda.current_device())
