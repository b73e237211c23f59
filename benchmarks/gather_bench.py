"""The self-written loop baseline against the reference's paths, for machines without vLLM."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from benchmarks.baseline import loop_gather
from benchmarks.copy_floor import CopyFloor
from benchmarks.reference_side import ReferenceSide, toy_model
from benchmarks.scenarios import Workload
from benchmarks.timing import alternate, median_us
from rtmm_protocol.testing import ReferenceInputBatch, ToyRealtimeModel, ToyReplaceModel

__all__ = ["PATHS", "GatherResult", "measure_workload"]

#: Timed paths, in table order. ``loop`` is the baseline; the others are compared with it.
PATHS = {
    "loop": "per-request loop (baseline): list of views and mask",
    "loop_rows": "the loop, then torch.cat of its views (baseline of rows)",
    "list": "gather_mm_embeddings: list of views and mask",
    "rows": "plan_mm_gather, then rows() into a reused buffer",
    "copy_floor": "index_select of the same rows from one contiguous tensor",
    "step": "get_mm_embeddings: the whole real step, merge included (no loop counterpart)",
    "checks": "the input checks validation adds to each step (E1, E2), timed alone",
}


@dataclass
class GatherResult:
    """Medians (microseconds) of every path on one workload, and what was checked."""

    name: str
    kind: str
    params: dict[str, int]
    hidden_size: int
    num_tokens: int
    num_features: int
    num_rows: int
    num_pieces: int
    repeats: int
    first_call_ms: float
    median_us: dict[str, float]
    outputs_match: bool

    @property
    def ratios(self) -> dict[str, float]:
        """The loop's median over the list form's, the loop and cat's over the rows'."""
        return {
            "list": self.median_us["loop"] / self.median_us["list"],
            "rows": self.median_us["loop_rows"] / self.median_us["rows"],
        }


def _agree(
    workload: Workload, ours: ReferenceSide, model: ToyRealtimeModel | ToyReplaceModel, step: int
) -> bool:
    """Whether the loop, the list form, the rows and the whole step agree on a step."""
    args = workload.gather_args(step)
    batch = workload.input_batch(step)
    loop_pieces, loop_mask = loop_gather(
        workload.mm_features, workload.encoder_outputs, workload.realtime, *args
    )
    list_pieces, list_mask = ours.gather(batch)
    loop_rows = (
        torch.cat(loop_pieces)
        if loop_pieces
        else torch.empty(0, workload.hidden_size, dtype=workload.dtype, device=workload.device)
    )
    return (
        torch.equal(loop_mask, list_mask.cpu())
        and len(list_pieces) == len(loop_pieces)
        and all(
            torch.equal(a, b) and getattr(a, "modality", None) == getattr(b, "modality", None)
            for a, b in zip(list_pieces, loop_pieces, strict=True)
        )
        and torch.equal(ours.rows(args), loop_rows)
        and _same_step(workload, ours, model, batch, loop_pieces, loop_mask)
    )


def _same_step(
    workload: Workload,
    ours: ReferenceSide,
    model: ToyRealtimeModel | ToyReplaceModel,
    batch: ReferenceInputBatch,
    pieces: list[torch.Tensor],
    mask: torch.Tensor,
) -> bool:
    """The whole step's rows equal the model's eager merge of the loop's gather (R2)."""
    n = workload.num_tokens
    merged = ours.step(batch)
    expected = model.embed_input_ids(batch.input_ids[:n], pieces, mask.to(workload.device))
    return merged is not None and torch.equal(merged[:n], expected)


def _cat(pieces: list[torch.Tensor]) -> torch.Tensor | None:
    return torch.cat(pieces) if pieces else None


def measure_workload(workload: Workload, *, budget_s: float) -> GatherResult:
    """Check the paths agree on every step of ``workload``, then time them side by side.

    Each round of the timing moves every path on to the next step's inputs.
    """
    floor = CopyFloor(workload)
    model = toy_model(workload)
    ours = ReferenceSide(workload, model, floor.max_rows)
    steps = [workload.gather_args(step) for step in range(len(workload.steps))]
    batches = [workload.input_batch(step) for step in range(len(workload.steps))]

    start = time.perf_counter()
    plan = ours.runner.plan_mm_gather(*steps[0])
    first_call_ms = (time.perf_counter() - start) * 1e3
    outputs_match = all(_agree(workload, ours, model, step) for step in range(len(steps)))

    current = 0

    def next_step(repeat: int) -> None:
        nonlocal current
        current = repeat % len(steps)

    features, outputs = workload.mm_features, workload.encoder_outputs
    paths: dict[str, Callable[[], object]] = {
        "loop": lambda: loop_gather(features, outputs, workload.realtime, *steps[current]),
        "loop_rows": lambda: _cat(
            loop_gather(features, outputs, workload.realtime, *steps[current])[0]
        ),
        "list": lambda: ours.gather(batches[current]),
        "rows": lambda: ours.rows(steps[current]),
        "copy_floor": lambda: floor.copy(current),
        "step": lambda: ours.step(batches[current]),
        "checks": lambda: ours.checks(batches[current]),
    }
    synchronize = torch.cuda.synchronize if workload.device.type == "cuda" else None
    samples = alternate(paths, budget_s=budget_s, before_round=next_step, synchronize=synchronize)
    return GatherResult(
        name=workload.name,
        kind=workload.kind,
        params=workload.params,
        hidden_size=workload.hidden_size,
        num_tokens=workload.num_tokens,
        num_features=workload.num_features,
        num_rows=plan.num_rows,
        num_pieces=len(plan.pieces()),
        repeats=len(samples["loop"]),
        first_call_ms=first_call_ms,
        median_us={name: median_us(times) for name, times in samples.items()},
        outputs_match=outputs_match,
    )
