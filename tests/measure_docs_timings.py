"""Measure the timings the docs quote, side by side, and print them as the docs' tables.

The docs quote two sets of wall-clock times, both measured on one machine and labelled
with it:

- ``xdist``: ``pytest --conformance`` against the bundled reference, serially and with
  pytest-xdist (``-n 2``, ``-n auto``), at the default number of examples and at a
  heavier setting. The runs of one round go one after the other, in an order that
  rotates between rounds, so that a load that comes and goes on a shared machine falls
  on every variant alike.
- ``typecheck``: ``mypy --strict`` on a small module that imports torch, and
  ``python -m rtmm_protocol typecheck`` on the reference model state, each with an
  empty cache and again with the cache it left.

Usage (from a checkout, in an environment with the ``test`` extra)::

    python tests/measure_docs_timings.py xdist --rounds 5
    python tests/measure_docs_timings.py typecheck --rounds 3

Each prints the machine it ran on and a Markdown table to paste into the page
(``docs/tutorial.md`` and ``docs/typing.md``). ``tests/test_docs_numbers.py`` checks
that the pasted tables name their machine, are of the suite as it is now, and agree
with the advice the pages give.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: The xdist variants, as the docs' table names them (options as code, so that the page
#: never breaks one at a hyphen), and their extra pytest arguments.
XDIST_VARIANTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("serial", ()),
    ("`-n 2`", ("-n", "2")),
    ("`-n auto`", ("-n", "auto")),
)
#: The heavier setting: more random examples per check, as a nightly job might use.
HEAVY_EXAMPLES = 100
#: The two settings, as the docs' table names them, and their extra pytest arguments.
XDIST_SETTINGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("default examples", ()),
    (f"`--conformance-examples={HEAVY_EXAMPLES}`", (f"--conformance-examples={HEAVY_EXAMPLES}",)),
)
_SUMMARY = re.compile(r"^contract: .*$", re.M)


@dataclass
class Timing:
    """The wall-clock seconds of one command over the rounds."""

    label: str
    seconds: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def machine() -> str:
    """One line naming the machine: cores, GPU, OS, Python and torch."""
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (
        f"{cores} CPU cores, {gpu}, {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}, torch {torch.__version__}"
    )


def _timed(
    command: Sequence[str], cwd: Path, env: dict[str, str] | None = None
) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(
        list(command), cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )
    return elapsed, done.stdout


def measure_xdist(rounds: int) -> tuple[list[Timing], str]:
    """Time every variant at the default and the heavier setting; return the summary line."""
    settings = XDIST_SETTINGS
    timings = {
        (setting, label): Timing(f"{label}, {setting}", [])
        for setting, _ in settings
        for label, _ in XDIST_VARIANTS
    }
    summary = ""
    with tempfile.TemporaryDirectory(prefix="rtmm-timings-") as scratch:
        for round_index in range(rounds):
            order = [(s, v) for s in settings for v in XDIST_VARIANTS]
            shift = round_index % len(order)
            for (setting, setting_args), (label, variant_args) in order[shift:] + order[:shift]:
                command = [
                    sys.executable, "-m", "pytest", "--conformance", "-p", "no:cacheprovider",
                    "-q", *setting_args, *variant_args,
                ]  # fmt: skip
                seconds, out = _timed(command, Path(scratch))
                timings[(setting, label)].seconds.append(seconds)
                found = _SUMMARY.search(out)
                if found and not setting_args:
                    summary = found.group(0)
                print(
                    f"  round {round_index + 1}: {label}, {setting}: {seconds:.1f} s",
                    file=sys.stderr,
                )
    return list(timings.values()), summary


def measure_typecheck(rounds: int) -> list[Timing]:
    """mypy --strict and the typecheck command, each with an empty and with a warm cache."""
    mypy_cold = Timing("`mypy --strict`, empty cache", [])
    mypy_warm = Timing("`mypy --strict`, warm cache", [])
    command_cold = Timing("`python -m rtmm_protocol typecheck`, empty cache", [])
    command_warm = Timing("`python -m rtmm_protocol typecheck`, warm cache", [])
    for round_index in range(rounds):
        with tempfile.TemporaryDirectory(prefix="rtmm-timings-") as scratch:
            project = Path(scratch)
            (project / "my_state.py").write_text(
                "import torch\n\n\ndef zeros(n: int) -> torch.Tensor:\n    return torch.zeros(n)\n"
            )
            mypy = [
                sys.executable,
                "-m",
                "mypy",
                "--strict",
                "--cache-dir",
                str(project / "cache"),
                "my_state.py",
            ]
            for timing in (mypy_cold, mypy_warm):
                timing.seconds.append(_timed(mypy, project)[0])
            env = {**os.environ, "RTMM_TYPECHECK_CACHE_DIR": str(project / "typecheck-cache")}
            command = [
                sys.executable, "-m", "rtmm_protocol", "typecheck",
                "rtmm_protocol.reference:ReferenceModelState",
            ]  # fmt: skip
            for timing in (command_cold, command_warm):
                timing.seconds.append(_timed(command, project, env)[0])
        print(f"  round {round_index + 1} done", file=sys.stderr)
    return [mypy_cold, mypy_warm, command_cold, command_warm]


def table(timings: Sequence[Timing]) -> str:
    """The Markdown table of the docs: median, fastest and slowest run, in seconds."""
    rows = ["| run | median | fastest | slowest |", "| --- | --- | --- | --- |"]
    for timing in timings:
        rows.append(
            f"| {timing.label} | {timing.median:.1f} s | {min(timing.seconds):.1f} s "
            f"| {max(timing.seconds):.1f} s |"
        )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure one set of timings and print the machine and the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("what", choices=("xdist", "typecheck"))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    print(f"machine: {machine()}")
    if args.what == "xdist":
        timings, summary = measure_xdist(args.rounds)
        print(f"suite: {summary}")
    else:
        timings = measure_typecheck(args.rounds)
    load_after = os.getloadavg()
    print(
        f"rounds: {args.rounds}; load average before {load_before[0]:.1f}, after {load_after[0]:.1f}"
    )
    print(table(timings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
