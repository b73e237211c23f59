"""How the loop's and the reference's times grow with requests and with features per request."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from benchmarks.gather_bench import GatherResult, measure_workload
from benchmarks.scenarios import realtime_decode

__all__ = ["ScalingPoint", "growth_exponent", "measure_scaling"]


@dataclass
class ScalingPoint:
    """One workload of a sweep: the swept value and the measured medians."""

    axis: str  # "requests" or "features"
    value: int
    result: GatherResult


def measure_scaling(
    requests: Sequence[int],
    features: Sequence[int],
    *,
    features_at: int,
    requests_at: int,
    budget_s: float,
    hidden_size: int,
    progress: Callable[[str], None],
) -> list[ScalingPoint]:
    """Realtime decode swept over ``requests`` (8-position features, ``features_at`` each)
    and over ``features`` (1-position features, ``requests_at`` requests)."""
    points = []
    for num_requests in requests:
        progress(f"scaling: R={num_requests}, F={features_at}")
        workload = realtime_decode(
            num_requests, (features_at, features_at), 8, hidden_size=hidden_size
        )
        points.append(
            ScalingPoint("requests", num_requests, measure_workload(workload, budget_s=budget_s))
        )
    for num_features in features:
        progress(f"scaling: R={requests_at}, F={num_features}")
        workload = realtime_decode(
            requests_at, (num_features, num_features), 1, hidden_size=hidden_size
        )
        points.append(
            ScalingPoint("features", num_features, measure_workload(workload, budget_s=budget_s))
        )
    return points


def growth_exponent(points: Sequence[ScalingPoint], axis: str, path: str) -> float | None:
    """Slope of log(time) against log(value) between the smallest and largest points.

    About 1 for linear growth, about 0 for flat; ``None`` with fewer than two points.
    """
    sweep = sorted((p for p in points if p.axis == axis), key=lambda p: p.value)
    if len(sweep) < 2:
        return None
    first, last = sweep[0], sweep[-1]
    return math.log(last.result.median_us[path] / first.result.median_us[path]) / math.log(
        last.value / first.value
    )
