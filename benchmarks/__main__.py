"""``python -m benchmarks [--quick] [--output PATH] [--plot PATH] [--threads N]``.

Runs the gather scenarios (loop baseline against the plan paths), the merge throughput
and the scaling sweeps; prints the tables, writes the JSON and the scaling plot. Quick
mode uses small sizes and only checks that every path agrees with the baseline (its exit
status is non-zero otherwise); its timings say nothing.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from benchmarks.gather_bench import measure_workload
from benchmarks.merge_bench import measure_merge
from benchmarks.report import Report, machine_info, write_plot
from benchmarks.scaling import measure_scaling
from benchmarks.scenarios import (
    Workload,
    chunked_prefill,
    image_prefill,
    non_realtime_mixed,
    realtime_decode,
)

RESULTS = Path(__file__).resolve().parent / "results"


def _workloads(quick: bool) -> list[Callable[[], Workload]]:
    if quick:
        return [
            lambda: realtime_decode(4, 20, 8),
            lambda: realtime_decode(16, 50, 8),
            lambda: realtime_decode(8, 200, 1),
            lambda: non_realtime_mixed(4, 12, 64, image_length=96),
            lambda: chunked_prefill(2, 64),
            lambda: image_prefill(2, 64, image_length=128),
        ]
    return [
        *(
            (lambda r=r, f=f: realtime_decode(r, f, 8))
            for r in (16, 256, 1024)
            for f in (200, 1000)
        ),
        lambda: realtime_decode(16, 7500, 1),
        lambda: realtime_decode(256, 7500, 1),
        lambda: non_realtime_mixed(32, 224, 256),
        lambda: chunked_prefill(8, 512),
        lambda: image_prefill(8, 512),
    ]


def _run(quick: bool, budget: float, plot: Path) -> Report:
    """Measure everything; write the plot; return the report."""
    started = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - started:7.1f} s] {message}", file=sys.stderr, flush=True)

    report = Report(mode="quick" if quick else "full", machine=machine_info())
    builders = _workloads(quick)
    for index, build in enumerate(builders, 1):
        workload = build()
        progress(f"[{index}/{len(builders)}] {workload.name}")
        result = measure_workload(workload, budget_s=budget)
        report.scenarios.append(result)
        progress(
            f"    loop {result.median_us['loop']:.1f} us, plan {result.median_us['plan']:.1f} us "
            f"({result.ratios['plan']:.1f}x), outputs match: {result.outputs_match}"
        )
        del workload
    progress("merge throughput")
    report.merge = measure_merge(256, 256, budget_s=budget) if quick else measure_merge(4096, 4096)
    report.scaling = measure_scaling(
        (4, 16) if quick else (16, 64, 256, 1024),
        (10, 100) if quick else (100, 1000, 10000),
        features_at=20 if quick else 200,
        requests_at=4 if quick else 64,
        budget_s=budget if quick else budget / 2,
        progress=progress,
    )
    why_not = write_plot(report.scaling, plot)
    if why_not is None:
        report.plots.append(plot.name)
        progress(f"scaling plot written to {plot}")
    else:
        progress(f"no scaling plot: {why_not}")
    report.elapsed_s = time.perf_counter() - started
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; return 0 when every path agreed with the baseline."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, correctness only")
    parser.add_argument("--output", type=Path, help="JSON path (default: benchmarks/results/)")
    parser.add_argument("--plot", type=Path, help="scaling plot path (default: next to the JSON)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: threads that spin against other "
        "processes on a shared machine make the timings noisy)",
    )
    parser.add_argument(
        "--budget", type=float, help="seconds of timing per workload (default 2, quick 0.05)"
    )
    args = parser.parse_args(argv)
    quick: bool = args.quick
    torch.set_num_threads(args.threads)
    budget = args.budget if args.budget is not None else (0.05 if quick else 2.0)
    output: Path = args.output or RESULTS / ("quick/latest.json" if quick else "latest.json")
    plot: Path = args.plot or output.with_name(output.stem + "-scaling.png")
    if args.output is None and not quick:
        plot = RESULTS / "scaling.png"

    # Long-lived objects (torch's, the workloads') out of the collector's way, so the
    # collections that run between timings stay short.
    gc.collect()
    gc.freeze()
    try:
        report = _run(quick, budget, plot)
    finally:
        gc.unfreeze()
    report.write_json(output)
    print(report.text())
    print(f"\nresults written to {output}")
    return 0 if report.all_outputs_match else 1


if __name__ == "__main__":
    sys.exit(main())
