"""``python -m benchmarks.batch_check_cost``: what the always-on batch checks cost.

Times :func:`rtmm_protocol.validation.check_batch` on its own and the runner's
``plan_mm_gather`` (which runs it) on the same steps, interleaved, for realtime decode
and chunked prefill at 16 and 1,024 requests, with the engines' ``int32`` arrays and with
``int64`` ones. Prints the medians and the check's cost as a share of the plan without
it; the target is at most 10%.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import numpy as np
import torch

from benchmarks.scenarios import NUM_STEPS, Workload, chunked_prefill, realtime_decode
from benchmarks.timing import alternate, median_us
from rtmm_protocol.reference import EncoderRunner, ToyRealtimeModel, ToyReplaceModel
from rtmm_protocol.validation import check_batch

#: The check may cost at most this share of the plan it guards.
TARGET = 0.10


def _runner(workload: Workload) -> EncoderRunner:
    model_type = ToyRealtimeModel if workload.realtime else ToyReplaceModel
    return EncoderRunner(
        model_type(workload.hidden_size),
        max(1, workload.num_tokens),
        workload.hidden_size,
        workload.plain_cache(),
        torch.float32,
        "cpu",
        validate=False,
    )


def measure(workload: Workload, dtype: type[np.integer], budget_s: float) -> tuple[float, float]:
    """Median microseconds of ``(check_batch, plan_mm_gather)`` over the workload's steps."""
    runner = _runner(workload)
    req_ids = workload.req_ids
    total = workload.num_tokens
    scheduled = workload.num_scheduled_tokens.astype(dtype)
    starts = workload.query_start_loc.astype(dtype)
    prefill = workload.prefill_lens.astype(dtype)
    steps = [computed.astype(dtype) for computed in workload.steps]
    step = [steps[0]]

    def next_step(k: int) -> None:
        step[0] = steps[k % NUM_STEPS]

    paths: dict[str, Callable[[], object]] = {
        "check": lambda: check_batch(req_ids, total, scheduled, starts, prefill, step[0]),
        "plan": lambda: runner.plan_mm_gather(req_ids, total, scheduled, starts, prefill, step[0]),
    }
    samples = alternate(
        paths, budget_s=budget_s, min_repeats=200, max_repeats=5000, before_round=next_step
    )
    return median_us(samples["check"]), median_us(samples["plan"])


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table; exit non-zero if a share is over :data:`TARGET`."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budget", type=float, default=2.0, help="seconds per row")
    args = parser.parse_args(argv)
    workloads: list[Callable[[], Workload]] = [
        lambda: realtime_decode(16, 200, 8),
        lambda: realtime_decode(1024, 200, 8),
        lambda: chunked_prefill(16, 64),
        lambda: chunked_prefill(1024, 16),
    ]
    print(f"{'workload':<62} {'dtype':<6} {'check us':>9} {'plan us':>9} {'share':>7}")
    over = False
    for make in workloads:
        workload = make()
        for dtype in (np.int32, np.int64):
            check_us, plan_us = measure(workload, dtype, args.budget)
            share = check_us / max(plan_us - check_us, 1e-9)
            over |= share > TARGET
            print(
                f"{workload.name:<62} {np.dtype(dtype).name:<6} {check_us:9.2f} "
                f"{plan_us:9.2f} {share:7.1%}"
            )
    print(f"share = check / (plan - check); target <= {TARGET:.0%}")
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
