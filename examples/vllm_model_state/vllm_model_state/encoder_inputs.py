"""The suite's toy model as vLLM's encoder runner calls it.

vLLM batches the encoder inputs of several items field by field: a batched field arrives
as one tensor with the items along its first dimension (or as a list when their shapes
differ). The contract's toy models take one item's tensor or a list of items.
:class:`BatchedInputsModel` turns the first form into the second and forwards everything
else, the realtime marker included, to the model unchanged.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["BatchedInputsModel", "vllm_model_view"]


def _items(value: object) -> object:
    if isinstance(value, torch.Tensor):
        return list(value.unbind(0))
    return value


class BatchedInputsModel:
    """A multimodal model whose ``embed_multimodal`` accepts vLLM's batched inputs."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def embed_multimodal(self, **kwargs: object) -> Any:
        """Encode a batch: each stacked tensor is split into its items first."""
        return self._model.embed_multimodal(**{key: _items(v) for key, v in kwargs.items()})


def vllm_model_view(model: Any) -> Any:
    """``model`` as vLLM's runner should see it: wrapped if it has an encoder."""
    if callable(getattr(model, "embed_multimodal", None)):
        return BatchedInputsModel(model)
    return model
