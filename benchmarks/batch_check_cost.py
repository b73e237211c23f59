"""``python -m benchmarks.batch_check_cost``: what the always-on batch checks cost.

For realtime decode and chunked prefill at 16 and 1,024 requests, with the engines'
``int32`` arrays and with ``int64`` ones, it times, interleaved on the same steps:

- ``check``: :func:`rtmm_protocol.validation.check_batch` alone;
- ``plan``: the runner's ``plan_mm_gather``, which runs the check and then plans;
- ``bare``: ``plan_checked`` on a batch checked beforehand, the plan without the check.

It prints the medians and the check's cost as a share of the bare plan; the target is
at most 10%. Timings on a shared machine vary by a few tens of percent between runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from benchmarks.timing import alternate, median_us
from rtmm_protocol import EncoderCache, MultiModalFeature, PlaceholderRange
from rtmm_protocol.reference import EncoderRunner
from rtmm_protocol.testing import ToyRealtimeModel, ToyReplaceModel
from rtmm_protocol.validation import check_batch

#: The check may cost at most this share of the plan it guards.
TARGET = 0.10
_HIDDEN = 64
_STEPS = 8


@dataclass
class _Batch:
    name: str
    realtime: bool
    cache: EncoderCache
    req_ids: list[str]
    scheduled: np.ndarray[Any, np.dtype[np.int64]]
    prefill: np.ndarray[Any, np.dtype[np.int64]]
    steps: list[np.ndarray[Any, np.dtype[np.int64]]]  # num_computed_tokens per step


def _cache(features: dict[str, list[MultiModalFeature]], rows: dict[str, int]) -> EncoderCache:
    cache = EncoderCache(_HIDDEN)
    for req_id, listed in features.items():
        cache.add_request(req_id, listed)
    for identifier, count in rows.items():
        cache.encoder_outputs[identifier] = torch.ones(count, _HIDDEN)
    return cache


def realtime_decode(num_requests: int, features_per_request: int = 200) -> _Batch:
    """Streams decoding one token each among their newest 8-position audio features."""
    rng = np.random.default_rng(0)
    prompt, length = 16, 8
    ranges = [PlaceholderRange(prompt + k * length, length) for k in range(features_per_request)]
    features, rows = {}, {}
    req_ids = [f"stream-{r:05d}" for r in range(num_requests)]
    for req_id in req_ids:
        listed = [MultiModalFeature(f"{req_id}-{k}", "audio", p) for k, p in enumerate(ranges)]
        features[req_id] = listed
        rows.update({f.identifier: length for f in listed[-32:]})
    first = prompt + (features_per_request - 32) * length
    last = prompt + features_per_request * length - _STEPS
    positions = rng.integers(first, last, num_requests)
    return _Batch(
        f"realtime decode R={num_requests}",
        True,
        _cache(features, rows),
        req_ids,
        np.ones(num_requests, dtype=np.int64),
        np.full(num_requests, prompt, dtype=np.int64),
        [positions + step for step in range(_STEPS)],
    )


def chunked_prefill(num_requests: int, chunk: int) -> _Batch:
    """Prompts of 8-position audio features, each request prefilling one ``chunk``."""
    rng = np.random.default_rng(0)
    prompt, length, gap = 8 * chunk, 8, 2
    ranges = [PlaceholderRange(gap + k * (length + gap), length) for k in range(prompt // 10)]
    features, rows = {}, {}
    req_ids = [f"prefill-{r:04d}" for r in range(num_requests)]
    for req_id in req_ids:
        listed = [MultiModalFeature(f"{req_id}-{k}", "audio", p) for k, p in enumerate(ranges)]
        features[req_id] = listed
        rows.update({f.identifier: length for f in listed})
    return _Batch(
        f"chunked prefill {num_requests}x{chunk}",
        False,
        _cache(features, rows),
        req_ids,
        np.full(num_requests, chunk, dtype=np.int64),
        np.full(num_requests, prompt, dtype=np.int64),
        [chunk * rng.integers(0, 8, num_requests) for _ in range(_STEPS)],
    )


def measure(batch: _Batch, dtype: type[np.integer[Any]], budget_s: float) -> dict[str, float]:
    """Median microseconds of ``check``, ``plan`` and ``bare`` over the batch's steps."""
    model = ToyRealtimeModel(_HIDDEN) if batch.realtime else ToyReplaceModel(_HIDDEN)
    total = int(batch.scheduled.sum())
    runner = EncoderRunner(model, max(total, 1), _HIDDEN, batch.cache, torch.float32, "cpu")
    req_ids = batch.req_ids
    scheduled = batch.scheduled.astype(dtype)
    starts = np.concatenate([[0], np.cumsum(batch.scheduled)]).astype(dtype)
    prefill = batch.prefill.astype(dtype)
    steps = [computed.astype(dtype) for computed in batch.steps]
    checked = [check_batch(req_ids, total, scheduled, starts, prefill, c) for c in steps]
    step = [0]

    def next_step(k: int) -> None:
        step[0] = k % _STEPS

    paths: dict[str, Callable[[], object]] = {
        "check": lambda: check_batch(req_ids, total, scheduled, starts, prefill, steps[step[0]]),
        "plan": lambda: runner.plan_mm_gather(
            req_ids, total, scheduled, starts, prefill, steps[step[0]]
        ),
        "bare": lambda: runner.plan_checked(req_ids, checked[step[0]]),
    }
    samples = alternate(
        paths, budget_s=budget_s, min_repeats=300, max_repeats=20000, before_round=next_step
    )
    return {name: median_us(times) for name, times in samples.items()}


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table; exit non-zero if a share is over :data:`TARGET`."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per row")
    args = parser.parse_args(argv)
    batches: list[Callable[[], _Batch]] = [
        lambda: realtime_decode(16),
        lambda: realtime_decode(1024),
        lambda: chunked_prefill(16, 64),
        lambda: chunked_prefill(1024, 16),
    ]
    header = f"{'batch':<28} {'dtype':<6} {'check us':>9} {'bare us':>9} {'plan us':>9}"
    print(f"{header} {'check/bare':>10} {'plan/bare':>10}")
    over = False
    for make in batches:
        batch = make()
        for dtype in (np.int32, np.int64):
            t = measure(batch, dtype, args.budget)
            share = t["check"] / t["bare"]
            over |= share > TARGET
            print(
                f"{batch.name:<28} {np.dtype(dtype).name:<6} {t['check']:9.2f} {t['bare']:9.2f} "
                f"{t['plan']:9.2f} {share:10.1%} {t['plan'] / t['bare'] - 1:+10.1%}"
            )
    print(f"check/bare: the check's cost over the plan without it; target <= {TARGET:.0%}")
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
