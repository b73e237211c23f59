"""The reference encoder runner: runs the encoder and gathers cached outputs (SPEC §3, R1)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from rtmm_protocol.encoder_cache import EncoderCache
from rtmm_protocol.protocols import MultiModalModel
from rtmm_protocol.realtime import supports_realtime
from rtmm_protocol.reference.gather_plan import MMGatherPlan
from rtmm_protocol.reference.gather_planner import GatherPlanner
from rtmm_protocol.reference.output_pool import EncoderOutputPool
from rtmm_protocol.types import IntArray
from rtmm_protocol.validation import (
    check_batch_bounds,
    check_encoder_output,
    check_gather_args,
    validation_enabled,
)

__all__ = ["EncoderRunner"]


class EncoderRunner:
    """Encoder-runner level implementation of :class:`~rtmm_protocol.MMEmbeddingGatherer`.

    Gathers are planned for the whole batch with array operations
    (:meth:`plan_mm_gather`); the list form of SPEC G6 is that plan's pieces. The
    features of the cache are mirrored in a :class:`FeatureTable` that follows direct
    edits of ``encoder_cache.mm_features`` (see that class for the one kind of edit it
    cannot see).

    ``validate`` switches on the batch and feature checks of SPEC E1/E2 (``None`` reads
    the ``RTMM_PROTOCOL_VALIDATE`` environment variable); they are off on the hot path.
    ``output_pool`` keeps the outputs this runner encodes in an
    :class:`EncoderOutputPool` (so :meth:`MMGatherPlan.rows` is one ``index_select``);
    without it, a :class:`~rtmm_protocol.reference.PooledEncoderCache`'s pool is used.
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
        output_pool: EncoderOutputPool | None = None,
    ) -> None:
        if max_num_tokens <= 0:
            raise ValueError(f"max_num_tokens must be positive, got {max_num_tokens}")
        if hidden_size <= 0:
            raise ValueError(f"hidden_size must be positive, got {hidden_size}")
        self.model = model
        self.max_num_tokens = max_num_tokens
        self.hidden_size = hidden_size
        self.encoder_cache = encoder_cache
        self.dtype = dtype
        self.device = torch.device(device)
        self.validate = validation_enabled(validate)
        self.is_realtime = supports_realtime(model)
        if output_pool is not None:
            _check_pool(output_pool, hidden_size, dtype, self.device)
        self._output_pool = output_pool
        self.planner = GatherPlanner(
            is_realtime=self.is_realtime, hidden_size=hidden_size, dtype=dtype, device=self.device
        )

    @property
    def output_pool(self) -> EncoderOutputPool | None:
        """The pool gathered rows come from: the one given, else the cache's, else ``None``."""
        if self._output_pool is not None:
            return self._output_pool
        pool = getattr(self.encoder_cache, "output_pool", None)
        return pool if isinstance(pool, EncoderOutputPool) else None

    # ------------------------------------------------------------------ encoder (R1)

    def execute_encoder(self, scheduled_encoder_inputs: Mapping[str, Sequence[int]]) -> int:
        """Encode the scheduled items that are not cached yet; return how many were encoded.

        Items whose output is already cached, or whose ``data`` is ``None``, are skipped.
        Each output is checked against its feature (rows and hidden size) before caching;
        with an output pool, what gets cached is the pool's view of the copied rows.
        """
        cache = self.encoder_cache
        pool = self.output_pool
        encoded = 0
        for req_id, indices in scheduled_encoder_inputs.items():
            features = cache.mm_features.get(req_id)
            if features is None:
                raise ValueError(
                    f"scheduled_encoder_inputs names request {req_id!r}, which is not in the "
                    "encoder cache"
                )
            for index in indices:
                if isinstance(index, bool) or not 0 <= index < len(features):
                    raise ValueError(
                        f"scheduled_encoder_inputs[{req_id!r}] holds index {index!r}, but the "
                        f"request has {len(features)} features"
                    )
                feature = features[index]
                if feature.identifier in cache.encoder_outputs or feature.data is None:
                    continue
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
                output = outputs[0].to(device=self.device, dtype=self.dtype)
                check_encoder_output(feature, output, self.hidden_size)
                if pool is not None:
                    output = pool.store(feature.identifier, output, live=cache.encoder_outputs)
                cache.encoder_outputs[feature.identifier] = output
                encoded += 1
        return encoded

    # ------------------------------------------------------------------ gather (§3)

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

        Takes the arguments of :meth:`gather_mm_embeddings` and raises what it raises
        (missing outputs, G7; malformed input, E1/E2 when validating).
        """
        cache = self.encoder_cache
        if self.validate:
            check_gather_args(
                req_ids,
                total_num_scheduled_tokens,
                num_scheduled_tokens,
                query_start_loc,
                prefill_lens,
                num_computed_tokens,
                draft_lookahead,
                known_req_ids=cache.mm_features,
            )
        else:
            check_batch_bounds(
                len(req_ids),
                total_num_scheduled_tokens,
                draft_lookahead,
                num_scheduled_tokens=num_scheduled_tokens,
                query_start_loc=query_start_loc,
                prefill_lens=prefill_lens,
                num_computed_tokens=num_computed_tokens,
            )
        return self.planner.plan(
            cache.mm_features,
            cache.encoder_outputs,
            req_ids,
            total_num_scheduled_tokens,
            num_scheduled_tokens,
            query_start_loc,
            prefill_lens,
            num_computed_tokens,
            draft_lookahead,
            pool=self.output_pool,
            validate=self.validate,
        )

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
        """Return ``(mm_embeds, is_mm_embed)`` for the scheduled tokens (SPEC G1-G9)."""
        plan = self.plan_mm_gather(
            req_ids,
            total_num_scheduled_tokens,
            num_scheduled_tokens,
            query_start_loc,
            prefill_lens,
            num_computed_tokens,
            draft_lookahead,
        )
        return plan.pieces(), plan.is_mm_embed


def _check_pool(
    pool: EncoderOutputPool, hidden_size: int, dtype: torch.dtype, device: torch.device
) -> None:
    # "cuda" and "cuda:0" name the same device when the current device is 0.
    same_device = pool.storage.device == torch.empty(0, device=device).device
    if (pool.hidden_size, pool.dtype) != (hidden_size, dtype) or not same_device:
        raise ValueError(
            f"output_pool holds rows of hidden_size={pool.hidden_size}, dtype={pool.dtype} on "
            f"{pool.device}, but the runner works with hidden_size={hidden_size}, "
            f"dtype={dtype} on {device}"
        )
