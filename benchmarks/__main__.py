"""``python -m benchmarks [--vs-vllm | --against REV] [--quick] [--device D] [--dtype T] [--output PATH]``.

With ``--vs-vllm``: the reference against vLLM's own ``EncoderRunner`` on identical
inputs (list form, rows as one tensor, the whole real step, and the copy floor of the
rows), at hidden sizes 1,280 and 4,096. vLLM must be importable; otherwise the run says
how to install it and exits with status 2.

With ``--against REV``: the reference at git revision REV against the working tree's,
side by side on the same inputs, new/old per path (see :mod:`benchmarks.against`);
the way to judge a change to the reference.

Without either: the reference against the self-written per-request loop, plus the scaling
sweeps and their plot, for machines without vLLM.

Every path's output is checked against its comparison on every step before timing;
the exit status is 1 if any disagreed. Quick mode runs small sizes and only checks
that; its timings say nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmarks.against import RevisionError, resolve, run_against
from benchmarks.against import records as against_records
from benchmarks.gather_bench import measure_workload
from benchmarks.host_time import measure_host_time
from benchmarks.peer_bench import measure_against_vllm
from benchmarks.report import SCHEMA, Report, machine_info, write_scaling_plot, write_step_plot
from benchmarks.scaling import measure_scaling
from benchmarks.scenarios import DEFAULT_HIDDEN_SIZE
from benchmarks.vllm_side import VLLM_VERSION, VLLMUnavailableError, load_vllm
from benchmarks.workloads import loop_workloads, peer_workloads

RESULTS = Path(__file__).resolve().parent / "results"
#: The widths of the comparison with vLLM: an audio encoder's and a large LLM's.
PEER_HIDDEN_SIZES = (1280, 4096)
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class _Progress:
    """Timestamped progress lines on stderr."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def __call__(self, message: str) -> None:
        elapsed = time.perf_counter() - self.started
        print(f"[{elapsed:7.1f} s] {message}", file=sys.stderr, flush=True)


def _run_vs_vllm(args: argparse.Namespace, report: Report, plot: Path) -> None:
    modules = load_vllm()
    report.machine["vllm"] = modules.version
    progress = _Progress()
    if modules.version != VLLM_VERSION:
        progress(
            f"note: vLLM {modules.version} is installed; the comparison targets {VLLM_VERSION}"
        )
    builders = peer_workloads(args.quick)
    sizes: Sequence[int] = args.hidden_sizes or ((256,) if args.quick else PEER_HIDDEN_SIZES)
    for hidden in sizes:
        for index, build in enumerate(builders, 1):
            workload = build(hidden, args.dtype, args.device)
            progress(f"[h={hidden} {index}/{len(builders)}] {workload.name}")
            result = measure_against_vllm(
                modules, workload, budget_s=args.budget, progress=progress
            )
            report.peer.append(result)
            ratios = ", ".join(f"{n} {x:.1f}x" for n, x in result.ratios.items())
            progress(f"    vLLM / reference: {ratios}; outputs match: {result.outputs_match}")
            del workload
            gc.collect()
    why_not = write_step_plot(report.peer, plot)
    if why_not is None:
        report.plots.append(plot.name)
    else:
        progress(f"no plot: {why_not}")


def _run_loop(args: argparse.Namespace, report: Report, plot: Path) -> None:
    progress = _Progress()
    builders = loop_workloads(args.quick)
    sizes: Sequence[int] = args.hidden_sizes or ((128,) if args.quick else (DEFAULT_HIDDEN_SIZE,))
    for hidden in sizes:
        for index, build in enumerate(builders, 1):
            workload = build(hidden, args.dtype, args.device)
            progress(f"[h={hidden} {index}/{len(builders)}] {workload.name}")
            result = measure_workload(workload, budget_s=args.budget)
            report.scenarios.append(result)
            progress(
                f"    loop {result.median_us['loop'] / 1e3:.3f} ms; loop / path: "
                + ", ".join(f"{n} {x:.1f}x" for n, x in result.ratios.items())
                + f"; outputs match: {result.outputs_match}"
            )
            if args.host_time:
                times, agree = measure_host_time(workload, budget_s=args.budget)
                report.host_time.append({**times.record(), "outputs_match": agree})
                progress(
                    f"    host us: ref {times.host_us['ref']:.0f}, loop "
                    f"{times.host_us['loop']:.0f}; outputs match: {agree}"
                )
            del workload
            gc.collect()
    if args.device.type == "cpu":
        report.scaling = measure_scaling(
            (4, 16) if args.quick else (16, 64, 256, 1024),
            (10, 100) if args.quick else (100, 1000, 10000),
            features_at=20 if args.quick else 200,
            requests_at=4 if args.quick else 64,
            budget_s=args.budget if args.quick else args.budget / 2,
            hidden_size=sizes[0],
            progress=progress,
        )
        why_not = write_scaling_plot(report.scaling, plot)
        if why_not is None:
            report.plots.append(plot.name)
        else:
            progress(f"no plot: {why_not}")


def _load() -> str:
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def _run_against(args: argparse.Namespace) -> int:
    machine = machine_info(args.device)
    try:
        results, text = run_against(
            args.against,
            quick=args.quick,
            rounds=args.rounds,
            budget_s=args.budget,
            hidden_size=args.hidden_sizes[0] if args.hidden_sizes else None,
            dtype=args.dtype_name,
            device=str(args.device),
            threads=args.threads,
            workloads=args.workloads,
            cold=args.cold,
        )
    except (RevisionError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(text)
    if args.cold:
        print("\nevery call timed cold: after a copy that evicted the CPU caches")
    print(f"\nload average (1, 5, 15 min) at the end: {_load()}")
    agree = all(result.outputs_match for result in results)
    print(
        f"\nnew/old = old time / new time (above 1: the working tree is faster); "
        f"outputs {'agree' if agree else 'DIFFER'}"
    )
    if args.output is not None:  # only when asked: a casual run keeps the committed file
        machine["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        machine["against"] = f"{args.against} ({resolve(args.against)[:12]})"
        machine["rounds"] = args.rounds
        machine["calls"] = "each after evicting the CPU caches" if args.cold else "back to back"
        data = {
            "schema": SCHEMA,
            "mode": "quick" if args.quick else "full",
            "comparison": "against",
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "all_outputs_match": agree,
            "machine": machine,
            "against": against_records(results),
        }
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        print(f"results written to {args.output}")
    return 0 if agree else 1


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--vs-vllm", action="store_true", help=f"compare with vLLM {VLLM_VERSION}'s EncoderRunner"
    )
    parser.add_argument(
        "--against",
        metavar="REV",
        help="time the reference at git revision REV against the working tree's, new/old",
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="--against: interleaved rounds (at least 3)"
    )
    parser.add_argument(
        "--workloads",
        type=lambda text: tuple(text.split(",")),
        help="--against: comma-separated workload names (default: all)",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="--against: evict the CPU caches before each timed call, as a forward pass "
        "between two engine steps does (default: calls back to back)",
    )
    parser.add_argument(
        "--host-time",
        action="store_true",
        help="loop comparison: also time, per workload, the host and device time of the "
        "reference's whole step and of the per-request loop's (see benchmarks.host_time)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, correctness only")
    parser.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    parser.add_argument(
        "--dtype", default="float32", choices=sorted(_DTYPES), help="dtype of the outputs"
    )
    parser.add_argument(
        "--hidden-sizes",
        type=lambda text: tuple(int(v) for v in text.split(",")),
        help="comma-separated hidden sizes (default: 1280,4096 with --vs-vllm, else 1280)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="JSON path (default: benchmarks/results/; --against writes one only when given)",
    )
    parser.add_argument("--plot", type=Path, help="plot path (default: the JSON's, ending .png)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: threads that spin against other "
        "processes on a shared machine make the timings noisy)",
    )
    parser.add_argument(
        "--budget", type=float, help="seconds of timing per workload (default 3, quick 0.05)"
    )
    args = parser.parse_args(argv)
    if args.against is not None and args.vs_vllm:
        parser.error("--against and --vs-vllm are separate comparisons: choose one")
    if args.cold and args.against is None:
        parser.error("--cold applies to --against only")
    if args.host_time and (args.against is not None or args.vs_vllm):
        parser.error("--host-time applies to the loop comparison only")
    args.dtype_name = args.dtype
    args.dtype = _DTYPES[args.dtype]
    try:
        args.device = torch.device(args.device)
    except RuntimeError as error:
        parser.error(f"--device {args.device!r}: {error}")
    if args.device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch reports no CUDA device on this machine")
    if args.device.type not in ("cpu", "cuda"):
        parser.error(f"--device {args.device}: only cpu and cuda are supported")
    if args.budget is None and args.against is None:  # --against has its own defaults
        args.budget = 0.05 if args.quick else 3.0
    return args


def _default_output(args: argparse.Namespace) -> Path:
    folder = RESULTS if args.device.type == "cpu" else RESULTS / args.device.type
    if args.quick:
        folder = folder / "quick"
    return folder / ("vs-vllm.json" if args.vs_vllm else "latest.json")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 0 when every path agreed, 1 when one did not, 2 without vLLM."""
    args = _parse(argv)
    if args.against is not None:
        return _run_against(args)
    torch.set_num_threads(args.threads)
    output: Path = args.output or _default_output(args)
    plot: Path = args.plot or output.with_suffix(".png")
    report = Report(
        mode="quick" if args.quick else "full",
        comparison="vllm" if args.vs_vllm else "loop",
        machine=machine_info(args.device),
    )
    # Long-lived objects (torch's, vLLM's) out of the collector's way, so the
    # collections that run between timings stay short.
    gc.collect()
    gc.freeze()
    try:
        if args.vs_vllm:
            _run_vs_vllm(args, report, plot)
        else:
            _run_loop(args, report, plot)
    except VLLMUnavailableError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    finally:
        gc.unfreeze()
    report.write_json(output)
    print(report.text())
    print(f"\nresults written to {output}")
    return 0 if report.all_outputs_match else 1


if __name__ == "__main__":
    sys.exit(main())
