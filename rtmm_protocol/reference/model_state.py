"""The reference ModelState: one persistent ``inputs_embeds`` buffer (SPEC D1-D5, R1-R4)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

import torch

from rtmm_protocol.encoder_cache import EncoderCache
from rtmm_protocol.protocols import InputBatch, MultiModalModel, TextModel
from rtmm_protocol.realtime import supports_realtime
from rtmm_protocol.reference.encoder_runner import EncoderRunner
from rtmm_protocol.validation import (
    check_buffer_size,
    check_device,
    check_input_batch,
    check_size,
    require_int,
    validation_enabled,
)

__all__ = ["ReferenceModelState"]


class ReferenceModelState:
    """Prepares ``inputs_embeds`` for each step of a multimodal (or realtime) model.

    One buffer of ``max_num_tokens`` rows is allocated here. Dummy runs hand out views of
    it and the real path writes the merged embeddings into it, so a CUDA graph captured
    on a dummy run reads the real embeddings when replayed. A real step encodes what is
    scheduled, plans the gather, collects the rows into a second buffer and hands them
    to the model packed as one tensor (on CUDA, mask and row index are copied to the
    device each step; not run by the CPU-only checks). Without ``embed_multimodal`` the
    state is text-only: no buffer, and both methods return ``None``. Bad input gets a
    ``ValueError`` naming the field (SPEC E1-E3) before anything is encoded or written.
    Threads: one state per thread; several may share a cache none of them changes.
    """

    def __init__(
        self,
        model: MultiModalModel | TextModel,
        encoder_cache: EncoderCache,
        *,
        hidden_size: int,
        max_num_tokens: int,
        dtype: torch.dtype,
        device: torch.device | str,
        validate: bool | None = None,
        arena_rows: int | None = None,
    ) -> None:
        hidden_size = check_size("hidden_size", hidden_size)
        max_num_tokens = check_size("max_num_tokens", max_num_tokens)
        self.device = torch.device(device)
        check_device("device", self.device)
        self.supports_mm_inputs = callable(getattr(model, "embed_multimodal", None))
        if self.supports_mm_inputs:  # the persistent buffer and the rows buffer
            rows = 2 * max_num_tokens
            check_buffer_size(
                "max_num_tokens", max_num_tokens, rows, hidden_size, dtype, self.device
            )
        self.model = model
        self.encoder_cache = encoder_cache
        self.hidden_size = hidden_size
        self.max_num_tokens = max_num_tokens
        self.dtype = dtype
        self.is_realtime = supports_realtime(model)
        # A text-only model never reaches the encoder nor reads rows: a token arena.
        self.encoder_runner = EncoderRunner(
            cast(MultiModalModel, model),
            max_num_tokens,
            hidden_size,
            encoder_cache,
            dtype,
            self.device,
            validate=validate,
            arena_rows=arena_rows if self.supports_mm_inputs else 1,
        )
        #: D2: the one buffer every dummy run and real step hands out (None: text only).
        self.inputs_embeds: torch.Tensor | None = None
        self._rows: torch.Tensor | None = None  # where a real step's rows are gathered
        if self.supports_mm_inputs:
            shape = (max_num_tokens, hidden_size)
            self.inputs_embeds = torch.zeros(shape, dtype=dtype, device=self.device)
            self._rows = torch.zeros(shape, dtype=dtype, device=self.device)

    @property
    def validate(self) -> bool:
        """Whether SPEC E1/E2 validation runs on each call."""
        return self.encoder_runner.validate

    @validate.setter
    def validate(self, value: bool | None) -> None:
        self.encoder_runner.validate = validation_enabled(value)

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor | None:
        """A view of the first ``num_tokens`` rows of the persistent buffer (D1-D5).

        ``num_tokens`` may be any integer (a numpy one too) in ``[0, max_num_tokens]``.
        """
        n = require_int("num_tokens", num_tokens)
        if not 0 <= n <= self.max_num_tokens:  # D5: never a short slice
            raise ValueError(f"num_tokens={n} is outside [0, max_num_tokens={self.max_num_tokens}]")
        if self.inputs_embeds is None:  # D1: a text-only state
            return None
        # D1, D2: rows [0, n) of the one buffer. D3, D4: no encoder, no cache, no allocation.
        return self.inputs_embeds[:n]

    def gather_mm_embeddings(
        self, input_batch: InputBatch, draft_lookahead: int = 0
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """G10: the runner-level gather over the batch's fields."""
        batch = check_input_batch(
            input_batch,
            draft_lookahead,
            validate=self.validate,
            known_req_ids=self.encoder_cache.mm_features,
        )
        plan = self.encoder_runner.plan_checked(input_batch.req_ids, batch)
        return plan.pieces(), plan.is_mm_embed

    def get_mm_embeddings(
        self,
        scheduled_encoder_inputs: Mapping[str, Sequence[int]],
        input_batch: InputBatch,
        req_states: object = None,
    ) -> torch.Tensor | None:
        """Encode, gather, merge into the buffer; return ``buffer[:num_tokens_after_padding]``.

        ``req_states`` (the engine's per-request state) is accepted and ignored: everything
        the step needs is in the batch and the encoder cache. The batch and the schedule
        are checked before anything is encoded, and the buffer is written only once the
        model has merged the rows.
        """
        if self.inputs_embeds is None:
            return None
        batch = check_input_batch(
            input_batch,
            0,
            max_num_tokens=self.max_num_tokens,
            validate=self.validate,
            known_req_ids=self.encoder_cache.mm_features,
        )
        num_tokens = batch.total
        padded = int(input_batch.num_tokens_after_padding)
        self.encoder_runner.execute_encoder(scheduled_encoder_inputs)  # R1
        plan = self.encoder_runner.plan_checked(input_batch.req_ids, batch)
        assert self._rows is not None  # allocated with the buffer
        # R2: the rows packed as one tensor, in slot order (a merge that concatenates the
        # pieces gets the same values). R3: realtime decode gathers like any step (G3).
        rows = plan.rows_into(self._rows[: plan.num_rows])  # the state's buffer fits
        mask = plan.is_mm_embed if self.device.type == "cpu" else plan.is_mm_embed.to(self.device)
        merged = self.model.embed_input_ids(
            input_batch.input_ids[:num_tokens], [rows] if plan.num_rows else [], mask
        )
        if tuple(merged.shape) != (num_tokens, self.hidden_size):
            raise RuntimeError(
                f"model.embed_input_ids returned shape {tuple(merged.shape)}, expected "
                f"({num_tokens}, {self.hidden_size})"
            )
        if merged.requires_grad:  # the buffer holds values, never a link into a graph
            merged = merged.detach()  # (cheaper than entering no_grad on every step)
        self.inputs_embeds[:num_tokens].copy_(merged)
        return self.inputs_embeds[:padded]  # R2, D2: a view of the one buffer
