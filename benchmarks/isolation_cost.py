"""What running the checks in a worker process costs: ``python -m benchmarks.isolation_cost``.

Times the README's main job, ``pytest --conformance`` on the bundled reference, with the
checks in a worker process (``--conformance-isolation=process``, the default) and in the
pytest process (``--conformance-isolation=off``), interleaved round by round so that both
see the same machine, and prints the median wall time of each and their ratio. Each run
is a fresh ``python -m pytest``, start-up included, as a user would see it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["main", "time_runs"]

_MODES = ("process", "off")


def _run_once(isolation: str, examples: int) -> float:
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--conformance",
        f"--conformance-isolation={isolation}", f"--conformance-examples={examples}",
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=1800)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}{done.stderr}")
    return took


def time_runs(rounds: int, examples: int) -> dict[str, list[float]]:
    """Wall seconds of each mode's runs, the modes alternating (their order flips each round)."""
    times: dict[str, list[float]] = {mode: [] for mode in _MODES}
    for round_number in range(rounds):
        order = _MODES if round_number % 2 == 0 else tuple(reversed(_MODES))
        for mode in order:
            times[mode].append(_run_once(mode, examples))
            print(f"  round {round_number + 1}: {mode:7} {times[mode][-1]:6.1f} s", flush=True)
    return times


def main(argv: list[str] | None = None) -> int:
    """Measure, print the table, and write the JSON results when asked."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.isolation_cost")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each mode (default 3)")
    parser.add_argument("--examples", type=int, default=30, help="--conformance-examples")
    parser.add_argument("--output", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    print(f"pytest --conformance on the reference, {args.rounds} rounds, interleaved")
    times = time_runs(args.rounds, args.examples)
    median = {mode: statistics.median(values) for mode, values in times.items()}
    ratio = median["process"] / median["off"]
    print(f"median wall time: worker process {median['process']:.1f} s, "
          f"in the pytest process {median['off']:.1f} s; ratio {ratio:.2f}")  # fmt: skip
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        result = {"rounds": args.rounds, "examples": args.examples, "seconds": times,
                  "median_s": median, "ratio": round(ratio, 3)}  # fmt: skip
        args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
