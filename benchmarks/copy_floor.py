"""The copy floor of a step: its gathered rows copied in one kernel, nothing else.

All cached outputs are laid out in one contiguous tensor (as much memory as the
gather reads from), and each step's gathered rows are taken from it with one
``index_select`` into a preallocated tensor. No gather can produce its rows for less.
"""

from __future__ import annotations

import torch

from benchmarks.baseline import loop_gather
from benchmarks.scenarios import Workload

__all__ = ["CopyFloor"]


class CopyFloor:
    """The index of every step's rows into one contiguous copy of the cached outputs."""

    def __init__(self, workload: Workload) -> None:
        outputs = workload.encoder_outputs
        starts: dict[int, int] = {}
        row = 0
        for output in outputs.values():
            starts[output.untyped_storage().data_ptr()] = row
            row += int(output.shape[0])
        hidden = workload.hidden_size
        self.source = (
            torch.cat(list(outputs.values()))
            if outputs
            else torch.empty(0, hidden, dtype=workload.dtype, device=workload.device)
        )
        self.indices: list[torch.Tensor] = []
        for step in range(len(workload.steps)):
            pieces, _ = loop_gather(
                workload.mm_features, outputs, workload.realtime, *workload.gather_args(step)
            )
            rows = [
                torch.arange(piece.shape[0])
                + (
                    starts[piece.untyped_storage().data_ptr()]
                    + int(piece.storage_offset()) // hidden
                )
                for piece in pieces
            ]
            index = torch.cat(rows) if rows else torch.empty(0, dtype=torch.int64)
            self.indices.append(index.to(workload.device))
        self.max_rows = max((int(i.shape[0]) for i in self.indices), default=0)
        self.out = torch.empty(self.max_rows, hidden, dtype=workload.dtype, device=workload.device)

    def num_rows(self, step: int) -> int:
        """Rows gathered by ``step``."""
        return int(self.indices[step % len(self.indices)].shape[0])

    def copy(self, step: int) -> torch.Tensor:
        """The rows of ``step``, in slot order, copied into the preallocated tensor."""
        index = self.indices[step % len(self.indices)]
        out = self.out[: index.shape[0]]
        return torch.index_select(self.source, 0, index, out=out)
