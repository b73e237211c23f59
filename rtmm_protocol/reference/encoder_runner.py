"""The reference encoder runner: runs the encoder and gathers cached outputs (SPEC G1-G10, R1)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from rtmm_protocol.encoder_cache import EncoderCache
from rtmm_protocol.protocols import MultiModalModel
from rtmm_protocol.realtime import supports_realtime
from rtmm_protocol.reference.feature_table import FeatureTable
from rtmm_protocol.reference.gather_plan import MMGatherPlan
from rtmm_protocol.reference.gather_planner import plan_gather
from rtmm_protocol.reference.output_arena import EncoderOutputArena
from rtmm_protocol.types import IntArray
from rtmm_protocol.validation import (
    CheckedBatch,
    check_batch,
    check_buffer_size,
    check_device,
    check_encoder_output,
    check_feature_list,
    check_gather_args,
    check_scheduled_encoder_inputs,
    check_size,
    validation_enabled,
)

__all__ = ["EncoderRunner", "default_arena_rows"]


def default_arena_rows(max_num_tokens: int) -> int:
    """The arena size used when none is given: eight steps' worth of rows, at least 8,192."""
    return max(8 * max_num_tokens, 8192)


class EncoderRunner:
    """Encoder-runner level implementation of :class:`~rtmm_protocol.MMEmbeddingGatherer`.

    A gather is planned for the whole batch (:meth:`plan_mm_gather`) over a
    :class:`~rtmm_protocol.reference.feature_table.FeatureTable` kept in step with the
    cache; the list form of SPEC G6 is the plan's pieces. Steps that read a few rows
    from each of many outputs take them from copies in an
    :class:`~rtmm_protocol.reference.output_arena.EncoderOutputArena` of ``arena_rows``
    rows (default :func:`default_arena_rows`).

    ``validate`` switches on the full checks of SPEC E1/E2 and the detection of outputs
    written in place (C2a) (``None`` reads the ``RTMM_PROTOCOL_VALIDATE`` environment
    variable); without them every call still runs
    :func:`~rtmm_protocol.validation.check_batch`. A call that raises leaves the runner as
    it was. Threads: use one runner per thread; several may share a cache they only read.
    """

    def __init__(
        self,
        model: MultiModalModel,
        max_num_tokens: int,
        hidden_size: int,
        encoder_cache: EncoderCache,
        dtype: torch.dtype,
        device: torch.device | str,
        *,
        validate: bool | None = None,
        arena_rows: int | None = None,
    ) -> None:
        max_num_tokens = check_size("max_num_tokens", max_num_tokens)
        hidden_size = check_size("hidden_size", hidden_size)
        self.device = torch.device(device)
        check_device("device", self.device)
        if arena_rows is None:
            rows, asked_by = default_arena_rows(max_num_tokens), ("max_num_tokens", max_num_tokens)
        else:
            rows = check_size("arena_rows", arena_rows)
            asked_by = ("arena_rows", rows)
        check_buffer_size(*asked_by, rows, hidden_size, dtype, self.device)
        self.model = model
        self.max_num_tokens = max_num_tokens
        self.hidden_size = hidden_size
        self.encoder_cache = encoder_cache
        self.dtype = dtype
        self.validate = validation_enabled(validate)
        self.is_realtime = supports_realtime(model)
        #: Copies of the outputs that steps of short pieces read (see MMGatherPlan.rows).
        self.arena = EncoderOutputArena(rows, hidden_size, dtype=dtype, device=self.device)
        #: The cache's features, as searchable arrays.
        self.table = FeatureTable()

    def execute_encoder(self, scheduled_encoder_inputs: Mapping[str, Sequence[int]]) -> int:
        """Encode the scheduled items that are not cached yet; return how many were encoded.

        SPEC R1: items whose output is already cached, or whose ``data`` is ``None``, are
        skipped. Each output is checked against its feature (rows and hidden size) and
        cached in the runner's dtype and device, without autograd history.
        """
        if type(scheduled_encoder_inputs) is dict and not scheduled_encoder_inputs:
            return 0  # nothing scheduled (most decode steps): nothing to check or encode
        cache, encoded = self.encoder_cache, 0
        scheduled = check_scheduled_encoder_inputs(scheduled_encoder_inputs, cache.mm_features)
        for req_id, feature in scheduled:
            if feature.identifier in cache.encoder_outputs or feature.data is None:
                continue
            check_feature_list(req_id, (feature,))  # it may have been assigned unchecked
            if not isinstance(feature.data, Mapping):
                raise ValueError(
                    f"data of feature {feature.identifier!r} must be a mapping of encoder "
                    f"keyword arguments, got {type(feature.data).__name__}"
                )
            outputs = self.model.embed_multimodal(**feature.data)
            if len(outputs) != 1:
                raise ValueError(
                    f"embed_multimodal returned {len(outputs)} outputs for the single item "
                    f"{feature.identifier!r}"
                )
            output = outputs[0]
            check_encoder_output(feature, output, self.hidden_size)
            output = output.detach().to(device=self.device, dtype=self.dtype)
            cache.encoder_outputs[feature.identifier] = output
            encoded += 1
        return encoded

    def plan_mm_gather(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 0,
    ) -> MMGatherPlan:
        """Plan the gather of the scheduled tokens (SPEC G1-G9) without materializing it.

        Takes the arguments of :meth:`gather_mm_embeddings` and raises what it raises.
        """
        arrays = (num_scheduled_tokens, query_start_loc, prefill_lens, num_computed_tokens)
        if self.validate:
            known = self.encoder_cache.mm_features
            batch = check_gather_args(
                req_ids, total_num_scheduled_tokens, *arrays, draft_lookahead, known
            )
        else:
            batch = check_batch(req_ids, total_num_scheduled_tokens, *arrays, draft_lookahead)
        return self.plan_checked(req_ids, batch)

    def plan_checked(self, req_ids: list[str], batch: CheckedBatch) -> MMGatherPlan:
        """:meth:`plan_mm_gather` for a ``batch`` that ``check_batch`` (or, validating,
        ``check_gather_args``) returned for ``req_ids``: the state checks its batch once."""
        cache, self.arena.versions = self.encoder_cache, self.validate  # C2a: versions read
        if self.validate:  # SPEC E2: every list of the batch, whether the step reads it or not
            self.check_feature_lists(req_ids)
        return plan_gather(
            self.table, self.arena, cache, req_ids, batch, is_realtime=self.is_realtime
        )

    def check_feature_lists(self, req_ids: list[str]) -> None:
        """SPEC E2 for the feature list of every request in ``req_ids``: ``ValueError``
        naming the identifier of a feature no gather could use.

        A list is checked item by item when the feature table first mirrors it and when
        it grows (its new items); after that, only items that are no longer the objects
        mirrored (replaced in place) are checked again. Features and placeholders are
        frozen (SPEC C1), so an item checked once stays good: checking every item of
        every list on every step cost 60 ms a step at 1,024 requests of 200 to 1,000
        features, finding the replaced ones costs about 1 ms.
        """
        table = self.table
        lanes = table.sync(self.encoder_cache.mm_features, req_ids)  # new or grown lists
        for k in table.replaced(lanes):
            check_feature_list(req_ids[k], lanes.lists[k])
            table.forget(req_ids[k])  # mirrored anew, as it is now, by the next sync

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 0,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Return ``(mm_embeds, is_mm_embed)`` for the scheduled tokens (SPEC G1-G9, G10)."""
        arrays = (num_scheduled_tokens, query_start_loc, prefill_lens, num_computed_tokens)
        plan = self.plan_mm_gather(req_ids, total_num_scheduled_tokens, *arrays, draft_lookahead)
        return plan.pieces(), plan.is_mm_embed
