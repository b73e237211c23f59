"""The reference against vLLM's own ``EncoderRunner``, side by side on one workload.

Three comparisons, each vLLM's path against the reference's on identical inputs:

* ``list``: the list form of the contract, ``(mm_embeds, is_mm_embed)``;
* ``rows``: the gathered rows as one tensor (vLLM: its list form and ``torch.cat``;
  reference: ``plan_mm_gather(...).rows()`` into a reused buffer);
* ``step``: the whole real step into the persistent buffer (vLLM: its gather and
  ``get_inputs_embeds``; reference: ``get_mm_embeddings``), the same toy model merging.

The copy floor (:class:`~benchmarks.copy_floor.CopyFloor`) is timed in the same
rounds. Every path's output is checked against vLLM's on every step before timing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.copy_floor import CopyFloor
from benchmarks.reference_side import ReferenceSide, toy_model
from benchmarks.scenarios import Workload
from benchmarks.timing import alternate, median_us
from benchmarks.vllm_side import VLLMModules, VLLMSide

__all__ = ["COMPARISONS", "PEER_PATHS", "PeerResult", "measure_against_vllm"]

#: The compared paths, vLLM's first; each pair's ratio is vLLM's median over the reference's.
COMPARISONS = ("list", "rows", "step")
#: Every timed path, in table order.
PEER_PATHS = (
    *(f"{side}_{name}" for name in COMPARISONS for side in ("vllm", "ours")),
    "copy_floor",
    "ours_checks",  # the input checks a validating reference adds to each step
)


@dataclass
class PeerResult:
    """Medians (microseconds) of every path on one workload, and what was checked."""

    name: str
    kind: str
    params: dict[str, int]
    hidden_size: int
    dtype: str
    device: str
    num_tokens: int
    num_features: int
    num_rows: int
    repeats: int
    median_us: dict[str, float]
    outputs_match: bool

    @property
    def rows_mib(self) -> float:
        """Size of one step's gathered rows (step 0), MiB."""
        itemsize = torch.empty(0, dtype=getattr(torch, self.dtype)).element_size()
        return self.num_rows * self.hidden_size * itemsize / 2**20

    @property
    def ratios(self) -> dict[str, float]:
        """vLLM's median over the reference's, per comparison."""
        return {
            name: self.median_us[f"vllm_{name}"] / self.median_us[f"ours_{name}"]
            for name in COMPARISONS
        }

    @property
    def over_floor(self) -> float:
        """The reference's rows over the copy floor (1 is the floor itself)."""
        return self.median_us["ours_rows"] / self.median_us["copy_floor"]


def _same_lists(
    got: tuple[list[torch.Tensor], torch.Tensor], want: tuple[list[torch.Tensor], torch.Tensor]
) -> bool:
    pieces, mask = got
    peer_pieces, peer_mask = want
    return (
        torch.equal(mask.cpu(), peer_mask.cpu())
        and len(pieces) == len(peer_pieces)
        and all(
            torch.equal(a, b) and getattr(a, "modality", None) == getattr(b, "modality", None)
            for a, b in zip(pieces, peer_pieces, strict=True)
        )
    )


def measure_against_vllm(
    modules: VLLMModules,
    workload: Workload,
    *,
    budget_s: float,
    min_repeats: int = 10,
    progress: Callable[[str], None] | None = None,
) -> PeerResult:
    """Check that both sides agree on every step of ``workload``, then time them."""
    model = toy_model(workload)
    floor = CopyFloor(workload)
    ours = ReferenceSide(workload, model, floor.max_rows)
    peer = VLLMSide(modules, workload, model)
    steps = [workload.gather_args(step) for step in range(len(workload.steps))]
    batches = [workload.input_batch(step) for step in range(len(workload.steps))]
    num_tokens = workload.num_tokens

    outputs_match = True
    for step, (args, batch) in enumerate(zip(steps, batches, strict=True)):
        peer_list = peer.gather(args)
        peer_rows = (
            torch.cat(peer_list[0])
            if peer_list[0]
            else torch.empty(0, workload.hidden_size, dtype=workload.dtype)
        )
        agree = _same_lists(ours.gather(batch), peer_list)
        agree = agree and torch.equal(ours.rows(args).cpu(), peer_rows.cpu())
        agree = agree and torch.equal(floor.copy(step).cpu(), peer_rows.cpu())
        peer_step = peer.step(args, batch.input_ids[:num_tokens])[:num_tokens].clone()
        ours_step = ours.step(batch)
        agree = agree and ours_step is not None and torch.equal(ours_step[:num_tokens], peer_step)
        if not agree and progress is not None:
            progress(f"    outputs differ from vLLM's on step {step}")
        outputs_match = outputs_match and agree

    current = 0

    def next_step(repeat: int) -> None:
        nonlocal current
        current = repeat % len(steps)

    paths: dict[str, Callable[[], Any]] = {
        "vllm_list": lambda: peer.gather(steps[current]),
        "ours_list": lambda: ours.gather(batches[current]),
        "vllm_rows": lambda: peer.rows(steps[current]),
        "ours_rows": lambda: ours.rows(steps[current]),
        "vllm_step": lambda: peer.step(steps[current], batches[current].input_ids[:num_tokens]),
        "ours_step": lambda: ours.step(batches[current]),
        "copy_floor": lambda: floor.copy(current),
        "ours_checks": lambda: ours.checks(batches[current]),
    }
    synchronize = torch.cuda.synchronize if workload.device.type == "cuda" else None
    samples = alternate(
        paths,
        budget_s=budget_s,
        min_repeats=min_repeats,
        before_round=next_step,
        synchronize=synchronize,
    )
    return PeerResult(
        name=workload.name,
        kind=workload.kind,
        params=workload.params,
        hidden_size=workload.hidden_size,
        dtype=str(workload.dtype).removeprefix("torch."),
        device=str(workload.device),
        num_tokens=num_tokens,
        num_features=workload.num_features,
        num_rows=floor.num_rows(0),
        repeats=len(samples["ours_step"]),
        median_us={name: median_us(samples[name]) for name in PEER_PATHS},
        outputs_match=outputs_match,
    )
