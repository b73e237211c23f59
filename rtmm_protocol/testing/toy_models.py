"""Small deterministic models that run the whole path on CPU and CUDA.

Both embed tokens with a fixed table and encode an item by projecting its
``input_features`` (shape ``(num_embeds, feature_dim)``) with a fixed matrix. They
differ in the merge: :class:`ToyReplaceModel` replaces the token rows at multimodal
slots (ordinary multimodal models), :class:`ToyRealtimeModel` adds to them (streaming
speech models sum audio and text embeddings) and declares itself realtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

import torch

__all__ = ["ToyRealtimeModel", "ToyReplaceModel", "ToyTextModel", "make_input_features"]


def make_input_features(
    seed: int, num_embeds: int, feature_dim: int = 8, *, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Deterministic encoder input for one item: ``(num_embeds, feature_dim)`` float32."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(num_embeds, feature_dim, generator=generator).to(device)


class ToyTextModel:
    """A text-only model: a token-embedding table and nothing multimodal."""

    def __init__(
        self,
        hidden_size: int,
        *,
        vocab_size: int = 32,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        seed: int = 0,
    ) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.dtype = dtype
        self.device = torch.device(device)
        self.token_table = torch.randn(vocab_size, hidden_size, generator=generator).to(
            device=self.device, dtype=dtype
        )

    def embed_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Look the tokens up in the embedding table.

        ``input_ids`` must be a 1-D integer tensor of ids in ``[0, vocab_size)``: a float
        or 2-D tensor would index the table in another sense, and a negative id would
        silently read a row from the end. Raises ``ValueError`` naming ``input_ids``.
        """
        if not isinstance(input_ids, torch.Tensor):
            raise ValueError(f"input_ids must be a torch.Tensor, got {type(input_ids).__name__}")
        if input_ids.dim() != 1:
            raise ValueError(
                f"input_ids must be one-dimensional, got shape {tuple(input_ids.shape)}"
            )
        if (
            input_ids.dtype.is_floating_point
            or input_ids.dtype.is_complex
            or (input_ids.dtype == torch.bool)
        ):
            raise ValueError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
        if input_ids.is_meta:
            raise ValueError("input_ids is on the meta device and holds no token ids")
        if input_ids.numel():
            lowest, highest = (int(v) for v in torch.aminmax(input_ids))
            if lowest < 0 or highest >= self.vocab_size:
                bad = lowest if lowest < 0 else highest
                raise ValueError(
                    f"input_ids holds token {bad} outside [0, vocab_size={self.vocab_size})"
                )
        return self.token_table[input_ids.to(self.device)]

    def embed_input_ids(
        self,
        input_ids: torch.Tensor,
        multimodal_embeddings: Sequence[torch.Tensor] | None = None,
        is_multimodal: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Token embeddings; a text-only model has nothing to merge."""
        return self.embed_tokens(input_ids)


class _ToyMultiModalModel(ToyTextModel):
    """Shared encoder and checks of the two multimodal toys."""

    def __init__(
        self,
        hidden_size: int,
        *,
        feature_dim: int = 8,
        vocab_size: int = 32,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        seed: int = 0,
    ) -> None:
        super().__init__(hidden_size, vocab_size=vocab_size, dtype=dtype, device=device, seed=seed)
        generator = torch.Generator().manual_seed(seed + 1)
        self.feature_dim = feature_dim
        self.projection = (torch.randn(feature_dim, hidden_size, generator=generator) * 0.5).to(
            device=self.device, dtype=dtype
        )

    def embed_multimodal(self, **kwargs: object) -> list[torch.Tensor]:
        """Encode ``input_features``: one tensor, or a list of tensors for a batch of items."""
        features = kwargs.get("input_features")
        items = features if isinstance(features, (list, tuple)) else [features]
        outputs = []
        for item in items:
            if (
                not isinstance(item, torch.Tensor)
                or item.dim() != 2
                or item.shape[1] != self.feature_dim
            ):
                raise ValueError(
                    "embed_multimodal expects input_features of shape (num_embeds, "
                    f"{self.feature_dim}), got {item!r:.80}"
                )
            outputs.append(item.to(device=self.device, dtype=self.dtype) @ self.projection)
        return outputs

    def _merge_rows(
        self,
        input_ids: torch.Tensor,
        multimodal_embeddings: Sequence[torch.Tensor] | None,
        is_multimodal: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Token embeddings, the slots that take a multimodal row, and those rows in slot order.

        The merges below write only the multimodal rows (``index_copy_``/``index_add_`` at
        the slots) rather than passing over every element of the step as a masked scatter
        would: at a thousand decode streams that is most of a step's cost.
        """
        embeds = self.embed_tokens(input_ids)
        if (
            is_multimodal is None
            or multimodal_embeddings is None
            or len(multimodal_embeddings) == 0
        ):
            return embeds, None, None
        mask = is_multimodal.to(self.device, non_blocking=True)
        if mask.shape != (input_ids.shape[0],):
            raise ValueError(
                f"is_multimodal has shape {tuple(mask.shape)}, expected ({input_ids.shape[0]},)"
            )
        # A packed one-element list (SPEC R2) is used as it is: concatenating would copy it.
        if len(multimodal_embeddings) == 1:
            rows = multimodal_embeddings[0].to(self.device, self.dtype)
        else:
            rows = torch.cat([t.to(self.device, self.dtype) for t in multimodal_embeddings])
        slots = mask.nonzero().squeeze(1)
        if rows.shape[0] != slots.shape[0]:
            raise ValueError(
                f"multimodal_embeddings hold {rows.shape[0]} rows for {slots.shape[0]} True "
                "slots of is_multimodal"
            )
        return embeds, slots, rows


class ToyReplaceModel(_ToyMultiModalModel):
    """Non-realtime toy: multimodal rows *replace* the token rows at their slots."""

    def embed_input_ids(
        self,
        input_ids: torch.Tensor,
        multimodal_embeddings: Sequence[torch.Tensor] | None = None,
        is_multimodal: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Token embeddings with multimodal rows written over the masked slots."""
        embeds, slots, rows = self._merge_rows(input_ids, multimodal_embeddings, is_multimodal)
        if slots is not None and rows is not None:
            embeds.index_copy_(0, slots, rows)
        return embeds


class ToyRealtimeModel(_ToyMultiModalModel):
    """Realtime toy: multimodal rows are *added* to the token rows at their slots."""

    supports_realtime: ClassVar[Literal[True]] = True

    def embed_input_ids(
        self,
        input_ids: torch.Tensor,
        multimodal_embeddings: Sequence[torch.Tensor] | None = None,
        is_multimodal: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Token embeddings plus multimodal rows at the masked slots."""
        embeds, slots, rows = self._merge_rows(input_ids, multimodal_embeddings, is_multimodal)
        if slots is not None and rows is not None:
            embeds.index_add_(0, slots, rows)
        return embeds
