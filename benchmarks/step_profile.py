"""``python -m benchmarks.step_profile``: where a real step's time goes, part by part.

For the decode workloads (16, 256 and 1,024 streams, 64 long streams) and the 8x512
prefill at hidden size 1,280 it replays the parts of
:meth:`~rtmm_protocol.reference.ReferenceModelState.get_mm_embeddings` one after the
other, each timed, through the state's public pieces: the batch check, the (empty)
encoder pass, the plan, the rows into the state's buffer (of which the copy floor is the
one ``index_select`` no gather can avoid; the rest is finding each output's copy,
versions included), the mask's transfer to the device, the model's merge and the copy
into the persistent buffer. Then, after the caches are evicted again, the whole step
alone. Before each step's parts an 8 MiB copy evicts the CPU caches, as the step before
would in an engine. Medians in microseconds over ``--steps`` steps.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Sequence

import torch

from benchmarks.copy_floor import CopyFloor
from benchmarks.reference_side import ReferenceSide, toy_model
from benchmarks.scenarios import NUM_STEPS
from benchmarks.workloads import named_loop_workloads
from rtmm_protocol.testing import ReferenceInputBatch, ToyRealtimeModel, ToyReplaceModel
from rtmm_protocol.validation import check_input_batch

#: The parts, in the order the step runs them.
PARTS = ("check", "encoder", "plan", "rows", "mask", "merge", "buffer")
_WORKLOADS = ("decode-16", "decode-256", "decode-1024", "streams-64", "prefill")


def profile(name: str, steps: int, hidden: int = 1280) -> dict[str, float]:
    """Median microseconds of each part, of the copy floor and of the whole step."""
    build = named_loop_workloads(False)[name]
    workload = build(hidden, torch.float32, torch.device("cpu"))
    model = toy_model(workload)
    side = ReferenceSide(workload, model, max(1, workload.num_tokens))
    floor = CopyFloor(workload)
    batches = [workload.input_batch(k) for k in range(NUM_STEPS)]
    evict = torch.empty(8 << 20, dtype=torch.uint8)
    scratch = torch.empty_like(evict)
    times: dict[str, list[float]] = {part: [] for part in (*PARTS, "floor", "step")}
    enabled = gc.isenabled()
    gc.disable()
    try:
        for k in range(steps + NUM_STEPS):  # the first NUM_STEPS warm up, untimed
            batch = batches[k % NUM_STEPS]
            scratch.copy_(evict)
            parts = _parts(side, model, batch)
            scratch.copy_(evict)
            start = time.perf_counter()
            floor.copy(k)
            parts["floor"] = time.perf_counter() - start
            scratch.copy_(evict)
            start = time.perf_counter()
            side.step(batch)
            parts["step"] = time.perf_counter() - start
            if k >= NUM_STEPS:
                for part, seconds in parts.items():
                    times[part].append(seconds)
    finally:
        if enabled:
            gc.enable()
    return {part: statistics.median(samples) * 1e6 for part, samples in times.items()}


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


def main(argv: Sequence[str] | None = None) -> int:
    """Print one line per workload: each part's median, its share of their sum."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=400, help="timed steps per workload")
    parser.add_argument(
        "--workloads", default=",".join(_WORKLOADS), help=f"of {', '.join(_WORKLOADS)}"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"{'workload':<12} " + " ".join(f"{p:>13}" for p in PARTS) + "      sum  floor   step")
    for name in args.workloads.split(","):
        t = profile(name, args.steps)
        parts = sum(t[p] for p in PARTS)
        cells = " ".join(f"{t[p]:6.0f} ({t[p] / parts:3.0%})" for p in PARTS)
        print(f"{name:<12} {cells} {parts:8.0f} {t['floor']:6.0f} {t['step']:6.0f}")
    print("microseconds, medians; (share of the sum of the parts); floor: the rows' copy floor")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
