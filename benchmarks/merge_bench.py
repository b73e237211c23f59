"""Merge throughput: pooled rows into a persistent buffer, against this machine's copy speed.

Bandwidth counts bytes read plus bytes written per second. A plain ``copy_`` of the
rows' size sets the reference. The merge is measured two ways:

* ``rows_scatter``: :meth:`MMGatherPlan.rows` (an ``index_select`` from the pool) then
  ``index_copy_`` into the buffer — two passes over the rows;
* ``slot_gather``: :meth:`PooledRowMerger.merge` — host indices into the fixed-size
  index buffer, then one ``index_select`` straight into the slot-aligned buffer.

For each, *effective* bandwidth counts the rows once read and once written (what a
merge must move at least); *moved* counts every pass (for ``rows_scatter``, twice that).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from benchmarks.timing import alternate, median_us
from rtmm_protocol import MultiModalFeature, PlaceholderRange
from rtmm_protocol.reference import (
    EncoderRunner,
    PooledEncoderCache,
    PooledRowMerger,
    ToyReplaceModel,
)

__all__ = ["MergeResult", "measure_merge"]


@dataclass
class MergeResult:
    """Medians and bandwidths of the copy reference and both merges."""

    num_rows: int
    hidden_size: int
    dtype: str
    bytes: int
    repeats: int
    median_ms: dict[str, float]
    outputs_match: bool

    def gbps(self, path: str, passes: int = 1) -> float:
        """Bytes read plus written by ``passes`` passes over the rows, per second (GB/s)."""
        return 2 * passes * self.bytes / (self.median_ms[path] * 1e-3) / 1e9

    @property
    def copy_gbps(self) -> float:
        """The reference: a contiguous ``copy_`` of the rows' size."""
        return self.gbps("copy")

    def ratio(self, path: str, passes: int = 1) -> float:
        """A merge's bandwidth over the copy's."""
        return self.gbps(path, passes) / self.copy_gbps


def measure_merge(
    num_rows: int, hidden_size: int, *, num_requests: int = 8, budget_s: float = 3.0
) -> MergeResult:
    """Prefill ``num_requests`` requests whose windows lie in one feature each; merge the rows."""
    chunk = num_rows // num_requests
    cache = PooledEncoderCache(num_rows, hidden_size)
    generator = torch.Generator().manual_seed(0)
    for r in range(num_requests):
        feature = MultiModalFeature(f"req{r}-audio", "audio", PlaceholderRange(0, chunk))
        cache.add_request(f"req{r}", [feature])
        output = torch.randn(chunk, hidden_size, generator=generator)
        cache.encoder_outputs[feature.identifier] = cache.output_pool.store(
            feature.identifier, output
        )
    runner = EncoderRunner(
        ToyReplaceModel(hidden_size), num_rows, hidden_size, cache, torch.float32, "cpu"
    )
    scheduled = np.full(num_requests, chunk, dtype=np.int32)
    query_start_loc = np.zeros(num_requests + 1, dtype=np.int32)
    np.cumsum(scheduled, out=query_start_loc[1:])
    plan = runner.plan_mm_gather(
        [f"req{r}" for r in range(num_requests)],
        num_requests * chunk,
        scheduled,
        query_start_loc,
        np.full(num_requests, chunk, dtype=np.int32),
        np.zeros(num_requests, dtype=np.int32),
    )
    total = num_requests * chunk
    merger = PooledRowMerger(cache.output_pool, total)
    buffer = torch.zeros(total, hidden_size)
    source = torch.randn(total, hidden_size, generator=generator)
    target = torch.empty_like(source)

    merger.scatter_into(plan, buffer)
    slot_rows = merger.merge(plan, total)
    expected = torch.cat(plan.pieces())
    outputs_match = torch.equal(buffer, expected) and torch.equal(slot_rows, expected)

    samples = alternate(
        {
            "copy": lambda: target.copy_(source),
            "rows_scatter": lambda: merger.scatter_into(plan, buffer),
            "slot_gather": lambda: merger.merge(plan, total),
        },
        budget_s=budget_s,
        min_repeats=5,
        max_repeats=200,
    )
    return MergeResult(
        num_rows=total,
        hidden_size=hidden_size,
        dtype=str(torch.float32).removeprefix("torch."),
        bytes=total * hidden_size * 4,
        repeats=len(samples["copy"]),
        median_ms={name: median_us(times) / 1e3 for name, times in samples.items()},
        outputs_match=outputs_match,
    )
