"""The reference's paths on a workload: list form, plan + rows, the whole real step.

Everything goes through the code users run: a :class:`ReferenceModelState` over a
default :class:`~rtmm_protocol.EncoderCache` filled as vLLM's engine fills it.
"""

from __future__ import annotations

from typing import Any

import torch

from benchmarks.scenarios import VOCAB_SIZE, Workload
from rtmm_protocol.reference import ReferenceModelState
from rtmm_protocol.testing import ReferenceInputBatch, ToyRealtimeModel, ToyReplaceModel
from rtmm_protocol.validation import check_input_batch

__all__ = ["ReferenceSide", "toy_model"]


def toy_model(workload: Workload) -> ToyRealtimeModel | ToyReplaceModel:
    """The toy model both sides merge with: realtime (adds rows) or not (replaces them)."""
    model_type = ToyRealtimeModel if workload.realtime else ToyReplaceModel
    return model_type(
        workload.hidden_size, vocab_size=VOCAB_SIZE, dtype=workload.dtype, device=workload.device
    )


class ReferenceSide:
    """A reference state over a fresh cache of ``workload``, validation off (the hot path).

    ``rows`` writes into one buffer reused across calls, as the real step does.
    """

    def __init__(
        self, workload: Workload, model: ToyRealtimeModel | ToyReplaceModel, max_rows: int
    ) -> None:
        self.cache = workload.encoder_cache()
        self.state = ReferenceModelState(
            model,
            self.cache,
            hidden_size=workload.hidden_size,
            max_num_tokens=max(1, workload.num_tokens),
            dtype=workload.dtype,
            device=workload.device,
            validate=False,
            # An engine sizes the output arena to its encoder cache: every cached output fits.
            arena_rows=max(1, workload.cached_rows),
        )
        self.runner = self.state.encoder_runner
        self.rows_out = torch.empty(
            max_rows, workload.hidden_size, dtype=workload.dtype, device=workload.device
        )

    def gather(self, batch: ReferenceInputBatch) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The list form (G6) through the state."""
        return self.state.gather_mm_embeddings(batch)

    def rows(self, args: tuple[Any, ...]) -> torch.Tensor:
        """The plan, then its rows in slot order, into the reused buffer."""
        plan = self.runner.plan_mm_gather(*args)
        return plan.rows(out=self.rows_out[: plan.num_rows])

    def checks(self, batch: ReferenceInputBatch) -> None:
        """The input checks a validating state makes on each step (SPEC E1, E2), which
        ``validate=False`` skips: the batch's (``get_mm_embeddings``), then every listed
        request's features (``EncoderRunner.check_feature_lists``, as
        ``EncoderRunner.plan_checked`` runs it)."""
        known = self.cache.mm_features
        check_input_batch(
            batch, 0, max_num_tokens=self.state.max_num_tokens, validate=True, known_req_ids=known
        )
        self.runner.check_feature_lists(batch.req_ids)

    def step(self, batch: ReferenceInputBatch) -> torch.Tensor | None:
        """The whole real step: nothing to encode (all cached), gather, merge."""
        return self.state.get_mm_embeddings({}, batch, None)
