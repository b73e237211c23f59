"""``python -m benchmarks.step_profile``: a real step against its limit, part by part.

The **limit** of a step is what any state pays to hand the model its inputs: the copy
floor of the step's rows (one ``index_select`` of exactly those rows from one contiguous
tensor), the mask's transfer to the device, the model's merge (``embed_input_ids``) and
the copy of its result into the persistent buffer. Everything the reference's step
(:meth:`~rtmm_protocol.reference.ReferenceModelState.get_mm_embeddings`, validation off)
takes above that sum is its own cost. Printed per workload and hidden size: the limit,
the whole step, step / limit against its target, and the parts that make them up.

For each step the parts of ``get_mm_embeddings`` are replayed one after the other through
the state's public pieces, each timed: the batch check, the (empty) encoder pass, the
plan, the rows into the state's buffer (the copy floor plus finding each output's copy),
the mask's transfer, the merge and the buffer copy. Then the copy floor alone, then the
whole step alone. Before each of the three, the CPU caches are set as ``--caches`` says:

- ``cold`` (the default, and the engine's): a copy of twice the last-level cache (at
  least 64 MiB) evicts everything, as the forward pass between two engine steps does;
- ``warm``: an 8 MiB copy, as this profile did before: on a machine whose last-level
  cache is larger, most of the step's data and the interpreter's stay cached.

Medians in microseconds over ``--steps`` steps (after one untimed round of the
workload's steps). ``--output`` writes the records as JSON for the performance page.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

from benchmarks.copy_floor import CopyFloor
from benchmarks.reference_side import ReferenceSide, toy_model
from benchmarks.report import SCHEMA, machine_info, short_name
from benchmarks.scenarios import NUM_STEPS
from benchmarks.timing import CACHE_MODES, Eviction, last_level_cache_bytes
from benchmarks.workloads import named_loop_workloads
from rtmm_protocol.testing import ReferenceInputBatch, ToyRealtimeModel, ToyReplaceModel
from rtmm_protocol.validation import check_input_batch

__all__ = ["LIMIT_PARTS", "PARTS", "TARGETS", "main", "profile"]

#: The parts of a real step, in the order ``get_mm_embeddings`` runs them.
PARTS = ("check", "encoder", "plan", "rows", "mask", "merge", "buffer")
#: The parts of the limit: the rows' copy floor and the step's parts every state pays.
LIMIT_PARTS = ("floor", "mask", "merge", "buffer")
#: The workloads profiled, and the step / limit each should come within (validation off,
#: cold caches, hidden sizes 1,280 and 4,096).
TARGETS = {
    "decode-1024": 1.5,
    "decode-256": 1.6,
    "streams-64": 1.6,
    "decode-16": 2.0,
    "prefill": 1.1,
}
_QUICK = ("decode-4", "streams-8", "prefill")


@dataclass
class Profile:
    """One workload at one hidden size: each part's median, and what they add up to."""

    name: str
    workload: str
    hidden_size: int
    num_rows: int
    steps: int
    median_us: dict[str, float]
    target: float | None = None

    @property
    def limit_us(self) -> float:
        return sum(self.median_us[part] for part in LIMIT_PARTS)

    @property
    def step_over_limit(self) -> float:
        return self.median_us["step"] / self.limit_us

    def record(self) -> dict[str, object]:
        """A flat record for the JSON file (microseconds, rounded)."""
        target = self.target
        record: dict[str, object] = {
            "workload": self.workload,
            "hidden_size": self.hidden_size,
            "rows": self.num_rows,
            "steps": self.steps,
        }
        record.update({f"{p}_us": round(t, 1) for p, t in self.median_us.items()})
        record["limit_us"] = round(self.limit_us, 1)
        record["own_us"] = round(self.median_us["step"] - self.limit_us, 1)
        record["step_over_limit"] = round(self.step_over_limit, 3)
        if target is not None:
            record["target"] = target
            record["met"] = self.step_over_limit <= target
        return record


def profile(name: str, steps: int, hidden: int, evict: Eviction, *, quick: bool = False) -> Profile:
    """Median microseconds of each part, of the copy floor and of the whole step."""
    build = named_loop_workloads(quick)[name]
    workload = build(hidden, torch.float32, torch.device("cpu"))
    model = toy_model(workload)
    side = ReferenceSide(workload, model, max(1, workload.num_tokens))
    floor = CopyFloor(workload)
    batches = [workload.input_batch(k) for k in range(NUM_STEPS)]
    times: dict[str, list[float]] = {part: [] for part in (*PARTS, "floor", "step")}
    enabled = gc.isenabled()
    gc.disable()
    try:
        for k in range(steps + NUM_STEPS):  # the first NUM_STEPS warm up, untimed
            batch = batches[k % NUM_STEPS]
            evict()
            parts = _parts(side, model, batch)
            evict()
            start = time.perf_counter()
            floor.copy(k)
            parts["floor"] = time.perf_counter() - start
            evict()
            start = time.perf_counter()
            side.step(batch)
            parts["step"] = time.perf_counter() - start
            if k >= NUM_STEPS:
                for part, seconds in parts.items():
                    times[part].append(seconds)
    finally:
        if enabled:
            gc.enable()
    medians = {part: statistics.median(samples) * 1e6 for part, samples in times.items()}
    rows = max(floor.num_rows(k) for k in range(NUM_STEPS))
    label = short_name(workload.kind, workload.params)
    target = None if quick else TARGETS.get(name)
    return Profile(name, label, hidden, rows, steps, medians, target)


def _parts(
    side: ReferenceSide, model: ToyRealtimeModel | ToyReplaceModel, batch: ReferenceInputBatch
) -> dict[str, float]:
    """One real step, part by part as ``get_mm_embeddings`` runs them: seconds each."""
    state, runner = side.state, side.runner
    assert state.inputs_embeds is not None  # a multimodal model
    clock = [time.perf_counter()]

    def lap() -> float:
        clock.append(time.perf_counter())
        return clock[-1] - clock[-2]

    checked = check_input_batch(
        batch,
        0,
        max_num_tokens=state.max_num_tokens,
        validate=False,
        known_req_ids=state.encoder_cache.mm_features,
    )
    check = lap()
    runner.execute_encoder({})
    encoder = lap()
    plan = runner.plan_checked(batch.req_ids, checked)
    planned = lap()
    rows = plan.rows_into(side.rows_out[: plan.num_rows])
    gathered = lap()
    mask = plan.is_mm_embed.to(state.device)
    moved = lap()
    merged = model.embed_input_ids(batch.input_ids[: checked.total], [rows], mask)
    merge = lap()
    state.inputs_embeds[: checked.total].copy_(merged)
    buffer = lap()
    return dict(zip(PARTS, (check, encoder, planned, gathered, moved, merge, buffer), strict=True))


def table(profiles: Sequence[Profile]) -> str:
    """The printed tables: step against limit, then every part."""
    lines = [
        f"{'workload':<12} {'h':>5} {'limit':>7} {'step':>7} {'own':>7} {'step/limit':>10}"
        f" {'target':>6}  " + " ".join(f"{p:>6}" for p in LIMIT_PARTS)
    ]
    for p in profiles:
        t, target = p.median_us, p.target
        goal = (
            "-"
            if target is None
            else f"{target:.1f}" + (" ok" if p.step_over_limit <= target else "")
        )
        lines.append(
            f"{p.name:<12} {p.hidden_size:>5} {p.limit_us:7.0f} {t['step']:7.0f}"
            f" {t['step'] - p.limit_us:7.0f} {p.step_over_limit:10.2f} {goal:>6}  "
            + " ".join(f"{t[part]:6.0f}" for part in LIMIT_PARTS)
        )
    lines += ["", f"{'workload':<12} {'h':>5} " + " ".join(f"{p:>13}" for p in PARTS) + "     sum"]
    for p in profiles:
        t = p.median_us
        total = sum(t[part] for part in PARTS)
        cells = " ".join(f"{t[part]:6.0f} ({t[part] / total:3.0%})" for part in PARTS)
        lines.append(f"{p.name:<12} {p.hidden_size:>5} {cells} {total:7.0f}")
    lines.append(
        "microseconds, medians. limit = floor (the rows' copy floor) + mask + merge + buffer;"
        " own = step - limit; the parts: (share of their sum)"
    )
    return "\n".join(lines)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main(argv: Sequence[str] | None = None) -> int:
    """Profile each workload at each hidden size; print the tables, optionally write JSON."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.step_profile",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--steps", type=int, help="timed steps per workload (default 100)")
    parser.add_argument(
        "--caches",
        default="cold",
        choices=CACHE_MODES,
        help="the CPU caches before each timing (default cold: as a forward pass leaves them)",
    )
    parser.add_argument(
        "--evict-mib", type=int, help="MiB copied to set the caches (default: by --caches)"
    )
    parser.add_argument(
        "--hidden-sizes",
        type=lambda text: tuple(int(v) for v in text.split(",")),
        default=(1280, 4096),
        help="comma-separated hidden sizes (default 1280,4096)",
    )
    parser.add_argument("--workloads", help=f"comma-separated, of {', '.join(TARGETS)}")
    parser.add_argument("--quick", action="store_true", help="small sizes: checks it runs")
    parser.add_argument("--output", type=Path, help="write the records as JSON there")
    args = parser.parse_args(argv)
    known = _QUICK if args.quick else tuple(TARGETS)
    names = args.workloads.split(",") if args.workloads else list(known)
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"unknown workloads {unknown}; known: {', '.join(known)}")
    steps = args.steps or (3 if args.quick else 100)
    if steps < 1:
        parser.error(f"--steps must be at least 1, got {steps}")
    try:
        evict = Eviction(args.caches, args.evict_mib)
    except ValueError as error:
        parser.error(str(error))
    torch.set_num_threads(1)
    machine = machine_info(torch.device("cpu"))
    llc = last_level_cache_bytes()
    machine["last_level_cache_mib"] = None if llc is None else llc >> 20
    machine["caches"] = f"{evict.mode}: a {evict.mib} MiB copy before each timing"
    print(f"caches {evict.mode}: a {evict.mib} MiB copy before each timing; load {_load()}")
    profiles = []
    for hidden in args.hidden_sizes:
        for name in names:
            profiles.append(profile(name, steps, hidden, evict, quick=args.quick))
            p = profiles[-1]
            print(f"  {name} h={hidden}: step / limit {p.step_over_limit:.2f}", flush=True)
    print()
    print(table(profiles))
    machine["load_average_end"] = _load()
    print(
        f"\nload average (1, 5, 15 min) at the start {machine['load_average_start']}, "
        f"at the end {machine['load_average_end']}"
    )
    if args.output is not None:
        data = {
            "schema": SCHEMA,
            "mode": "quick" if args.quick else "full",
            "comparison": "step-profile",
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": machine,
            "step_profile": [p.record() for p in profiles],
        }
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
