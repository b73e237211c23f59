"""Times the loop baseline against the plan paths on one workload, after checking they agree."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from benchmarks.baseline import loop_gather
from benchmarks.scenarios import Workload
from benchmarks.timing import alternate, median_us
from rtmm_protocol import EncoderCache
from rtmm_protocol.reference import EncoderRunner, ToyRealtimeModel, ToyReplaceModel

__all__ = ["PATHS", "GatherResult", "measure_workload"]

#: Timed paths, in table order. ``loop`` is the baseline; the others are compared with it.
PATHS = {
    "loop": "per-request loop (baseline): list of views + mask",
    "plan": "plan_mm_gather: mask, slots and the pieces' sources",
    "plan_rows": "plan_mm_gather + rows() from the pooled cache (one index_select)",
    "list": "gather_mm_embeddings: list of views + mask (plain cache)",
}


@dataclass
class GatherResult:
    """Medians (microseconds) of every path on one workload, and what was checked."""

    name: str
    kind: str
    params: dict[str, int]
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
        """Baseline median over each other path's median."""
        loop = self.median_us["loop"]
        return {name: loop / t for name, t in self.median_us.items() if name != "loop"}


def _runner(workload: Workload, cache: EncoderCache) -> EncoderRunner:
    model_type = ToyRealtimeModel if workload.realtime else ToyReplaceModel
    model = model_type(workload.hidden_size)
    return EncoderRunner(
        model,
        max(1, workload.num_tokens),
        workload.hidden_size,
        cache,
        torch.float32,
        "cpu",
        validate=False,
    )


def _same_views(got: list[torch.Tensor], want: list[torch.Tensor]) -> bool:
    return len(got) == len(want) and all(
        a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
        and (a.storage_offset(), a.shape, getattr(a, "modality", None))
        == (b.storage_offset(), b.shape, getattr(b, "modality", None))
        for a, b in zip(got, want, strict=True)
    )


def _agree(workload: Workload, plain: EncoderRunner, pooled: EncoderRunner, step: int) -> bool:
    """Whether the loop, the list form, the plan and the pooled rows agree on a step."""
    args = workload.gather_args(step)
    cache = plain.encoder_cache
    loop_pieces, loop_mask = loop_gather(
        cache.mm_features, cache.encoder_outputs, workload.realtime, *args
    )
    list_pieces, list_mask = plain.gather_mm_embeddings(*args)
    plan = plain.plan_mm_gather(*args)
    loop_rows = torch.cat(loop_pieces) if loop_pieces else torch.empty(0, workload.hidden_size)
    return (
        torch.equal(loop_mask, list_mask)
        and torch.equal(loop_mask, plan.is_mm_embed)
        and torch.equal(plan.slots, torch.nonzero(loop_mask).flatten())
        and _same_views(list_pieces, loop_pieces)
        and torch.equal(pooled.plan_mm_gather(*args).rows(), loop_rows)
    )


def measure_workload(workload: Workload, *, budget_s: float) -> GatherResult:
    """Check the paths agree on every step of ``workload``, then time them side by side.

    Each round of the timing moves every path on to the next step's inputs.
    """
    plain = workload.plain_cache()
    pooled = workload.pooled_cache()
    plain_runner = _runner(workload, plain)
    pooled_runner = _runner(workload, pooled)

    start = time.perf_counter()
    plan = plain_runner.plan_mm_gather(*workload.gather_args(0))  # builds the feature tables
    first_call_ms = (time.perf_counter() - start) * 1e3
    outputs_match = all(
        _agree(workload, plain_runner, pooled_runner, step) for step in range(len(workload.steps))
    )

    steps = [workload.gather_args(step) for step in range(len(workload.steps))]
    args = steps[0]

    def next_step(repeat: int) -> None:
        nonlocal args
        args = steps[repeat % len(steps)]

    paths: dict[str, Callable[[], object]] = {
        "loop": lambda: loop_gather(
            plain.mm_features, plain.encoder_outputs, workload.realtime, *args
        ),
        "plan": lambda: plain_runner.plan_mm_gather(*args),
        "plan_rows": lambda: pooled_runner.plan_mm_gather(*args).rows(),
        "list": lambda: plain_runner.gather_mm_embeddings(*args),
    }
    samples = alternate(paths, budget_s=budget_s, before_round=next_step)
    return GatherResult(
        name=workload.name,
        kind=workload.kind,
        params=workload.params,
        num_tokens=workload.num_tokens,
        num_features=workload.num_features,
        num_rows=plan.num_rows,
        num_pieces=plan.num_pieces,
        repeats=len(samples["loop"]),
        first_call_ms=first_call_ms,
        median_us={name: median_us(times) for name, times in samples.items()},
        outputs_match=outputs_match,
    )
