"""The suite's toy model as vLLM's encoder runner calls it.

vLLM batches the encoder inputs of the items it encodes together field by field: a
field arrives as one tensor with the items stacked along a new first dimension. The
contract's toy models take one item's tensor, or a list of items. :class:`BatchedInputsModel`
splits a stacked tensor into its items before the call and forwards every other
attribute to the model unchanged, the realtime marker included, so that vLLM's own
realtime guard reads the model exactly as it would read the model itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rtmm_protocol.protocols import MultiModalModel, TextModel

__all__ = ["BatchedInputsModel", "vllm_model_view"]


def _items(value: object) -> object:
    """A stacked tensor as the list of its items; anything else as it is."""
    if isinstance(value, torch.Tensor):
        return list(value.unbind(0))
    return value


class BatchedInputsModel:
    """A multimodal model whose ``embed_multimodal`` accepts vLLM's batched inputs."""

    def __init__(self, model: MultiModalModel) -> None:
        self._model = model

    def __getattr__(self, name: str) -> object:
        # Only reached for names this view does not define: they are the model's.
        return getattr(self._model, name)

    def embed_multimodal(self, **kwargs: object) -> Sequence[torch.Tensor]:
        """Encode a batch: each stacked tensor is split into its items first."""
        return self._model.embed_multimodal(**{key: _items(v) for key, v in kwargs.items()})

    def embed_input_ids(
        self,
        input_ids: torch.Tensor,
        multimodal_embeddings: Sequence[torch.Tensor] | None = None,
        is_multimodal: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The model's own token embedding and merge, unchanged."""
        return self._model.embed_input_ids(
            input_ids, multimodal_embeddings=multimodal_embeddings, is_multimodal=is_multimodal
        )


def vllm_model_view(model: MultiModalModel | TextModel) -> MultiModalModel | TextModel:
    """``model`` as vLLM's runner should see it: wrapped when it has an encoder."""
    if isinstance(model, MultiModalModel):
        return BatchedInputsModel(model)
    return model
