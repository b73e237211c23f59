"""Writes a plan's rows from an :class:`EncoderOutputPool` into persistent buffers.

Two ways, both reading the pool directly:

* :meth:`PooledRowMerger.scatter_into` copies the gathered rows into the slots of any
  buffer (:meth:`MMGatherPlan.rows` into a persistent staging buffer, then an
  ``index_copy_``): the other slots keep what they hold, e.g. token embeddings.
* :meth:`PooledRowMerger.gather_slot_rows` fills the merger's own slot-aligned buffer in
  **one kernel**: an ``index_select`` from the pool whose index buffer has a fixed
  capacity of ``max_num_tokens`` entries, every slot without a row pointing at the pool's
  always-zero null row. Index buffer, pool and output keep their addresses, so the call
  can be captured in a CUDA graph and replayed after :meth:`load` of each new plan. A
  model that adds multimodal rows to token rows adds this buffer; one that replaces
  them selects it where the mask is set.

On CUDA the host-built indices go through a pinned staging buffer and a non-blocking
copy; an event keeps the next :meth:`load` from overwriting staging that is still
being read.
"""

from __future__ import annotations

import torch

from rtmm_protocol.reference.gather_plan import MMGatherPlan
from rtmm_protocol.reference.output_pool import EncoderOutputPool

__all__ = ["PooledRowMerger"]


class PooledRowMerger:
    """Moves pooled rows into persistent buffers with fixed-size index buffers."""

    def __init__(self, pool: EncoderOutputPool, max_num_tokens: int) -> None:
        if isinstance(max_num_tokens, bool) or not isinstance(max_num_tokens, int):
            raise ValueError(f"max_num_tokens must be an int, got {max_num_tokens!r}")
        if max_num_tokens <= 0:
            raise ValueError(f"max_num_tokens must be positive, got {max_num_tokens}")
        self.pool = pool
        self.max_num_tokens = max_num_tokens
        device = pool.device
        on_cuda = device.type == "cuda"
        #: Row ``t`` holds slot ``t``'s encoder row, or zeros (written by gather_slot_rows).
        self.slot_rows = torch.zeros(
            max_num_tokens, pool.hidden_size, dtype=pool.dtype, device=device
        )
        #: Pool row of each slot (the null row where the slot gets none); fixed capacity.
        self.slot_sources = torch.full(
            (max_num_tokens,), pool.null_row, dtype=torch.int64, device=device
        )
        self._staging = torch.full(
            (max_num_tokens,), pool.null_row, dtype=torch.int64, pin_memory=on_cuda
        )
        # Gathered rows on their way to scatter_into's buffer (allocated on first use).
        self._rows_staging: torch.Tensor | None = None
        self._staged: torch.cuda.Event | None = None
        self._num_tokens = 0

    def _check_plan(self, plan: MMGatherPlan, num_tokens: int) -> None:
        if plan.pool is not self.pool:
            raise ValueError("the plan reads another pool than this merger's")
        if not 0 <= num_tokens <= self.max_num_tokens:
            raise ValueError(
                f"num_tokens={num_tokens} is outside [0, max_num_tokens={self.max_num_tokens}]"
            )
        if plan.is_mm_embed.shape[0] > num_tokens:
            raise ValueError(
                f"the plan covers {plan.is_mm_embed.shape[0]} slots, more than "
                f"num_tokens={num_tokens}"
            )

    def load(self, plan: MMGatherPlan, num_tokens: int) -> None:
        """Point slots ``[0, num_tokens)`` at their pool rows (the null row if none).

        ``num_tokens`` may exceed the plan's scheduled tokens (padding). Entries a
        previous, larger load set are reset to the null row, so every slot past
        ``num_tokens`` gathers zeros whatever size is gathered.
        """
        self._check_plan(plan, num_tokens)
        if self._staged is not None:
            self._staged.synchronize()  # the previous copy may still read the staging
        pool_rows = plan.pool_rows()
        reset = max(num_tokens, self._num_tokens)
        staging = self._staging.numpy()
        staging[:reset] = self.pool.null_row
        staging[plan.slots.numpy()] = pool_rows
        self.slot_sources[:reset].copy_(self._staging[:reset], non_blocking=True)
        if self.slot_sources.device.type == "cuda":
            self._staged = torch.cuda.Event()  # type: ignore[no-untyped-call]  # untyped in torch
            # The copy was queued on the pool device's stream, which need not be current.
            self._staged.record(torch.cuda.current_stream(self.slot_sources.device))
        self._num_tokens = num_tokens

    def gather_slot_rows(self, num_tokens: int | None = None) -> torch.Tensor:
        """One ``index_select`` from the pool into ``slot_rows[:num_tokens]``; return that view.

        ``num_tokens`` defaults to the last :meth:`load`'s. Capturable in a CUDA graph.
        """
        n = self._num_tokens if num_tokens is None else num_tokens
        if not 0 <= n <= self.max_num_tokens:
            raise ValueError(f"num_tokens={n} is outside [0, max_num_tokens={self.max_num_tokens}]")
        out = self.slot_rows[:n]
        torch.index_select(self.pool.storage, 0, self.slot_sources[:n], out=out)
        return out

    def merge(self, plan: MMGatherPlan, num_tokens: int) -> torch.Tensor:
        """:meth:`load` then :meth:`gather_slot_rows`: the slot-aligned rows of ``plan``."""
        self.load(plan, num_tokens)
        return self.gather_slot_rows(num_tokens)

    def scatter_into(self, plan: MMGatherPlan, buffer: torch.Tensor) -> None:
        """Copy the plan's rows into ``buffer`` at its slots; other rows are left alone."""
        if buffer.dim() != 2 or buffer.shape[1] != self.pool.hidden_size:
            raise ValueError(
                f"buffer has shape {tuple(buffer.shape)}, expected (rows, {self.pool.hidden_size})"
            )
        if plan.is_mm_embed.shape[0] > buffer.shape[0]:
            raise ValueError(
                f"the plan covers {plan.is_mm_embed.shape[0]} slots but the buffer has "
                f"{buffer.shape[0]} rows"
            )
        num_rows = plan.num_rows
        if num_rows == 0:
            return
        if num_rows > self.max_num_tokens:
            raise ValueError(
                f"the plan gathers {num_rows} rows, more than max_num_tokens={self.max_num_tokens}"
            )
        if self._rows_staging is None:
            self._rows_staging = torch.empty_like(self.slot_rows)
        rows = plan.rows(out=self._rows_staging[:num_rows])
        slots = plan.slots.to(buffer.device, non_blocking=True)
        buffer.index_copy_(0, slots, rows.to(device=buffer.device, dtype=buffer.dtype))
