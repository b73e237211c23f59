"""A concrete :class:`~rtmm_protocol.InputBatch` that tests and examples build in one line."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from rtmm_protocol.types import IntArray
from rtmm_protocol.validation import require_int

__all__ = ["ReferenceInputBatch"]

_INT32_MAX = int(np.iinfo(np.int32).max)


def _counts(name: str, values: Sequence[int], num_reqs: int) -> IntArray:
    """Per-request integers as an ``int32`` array (``int64`` when a value needs it)."""
    if len(values) != num_reqs:
        raise ValueError(f"{name} has {len(values)} entries, expected one per request ({num_reqs})")
    listed = [require_int(f"{name}[{i}]", value) for i, value in enumerate(values)]
    if listed and min(listed) < 0:
        raise ValueError(f"{name} must be non-negative, got {listed!r}")
    return _smallest_array(listed)


def _smallest_array(values: Sequence[int]) -> IntArray:
    """``values`` as ``int32`` as engines keep them, or ``int64`` where one would not fit."""
    if values and max(values) > _INT32_MAX:
        return np.array(values, dtype=np.int64)
    return np.array(values, dtype=np.int32)


@dataclass
class ReferenceInputBatch:
    """The fields of one engine step, as the ``InputBatch`` Protocol lists them."""

    req_ids: list[str]
    num_reqs: int
    num_tokens: int
    num_tokens_after_padding: int
    input_ids: torch.Tensor
    num_scheduled_tokens: IntArray
    query_start_loc_np: IntArray
    prefill_len_np: IntArray
    num_computed_tokens_np: IntArray

    @classmethod
    def from_requests(
        cls,
        req_ids: Sequence[str],
        prefill_lens: Sequence[int],
        num_computed_tokens: Sequence[int],
        num_scheduled_tokens: Sequence[int],
        *,
        num_tokens_after_padding: int | None = None,
        input_ids: torch.Tensor | None = None,
        vocab_size: int = 32,
        device: torch.device | str = "cpu",
    ) -> ReferenceInputBatch:
        """Build a batch from per-request lists.

        Token ids default to a deterministic function of request and position (within
        ``vocab_size``), so two builds of the same batch are identical. Padding rows, up
        to ``num_tokens_after_padding``, hold token id 0.
        """
        ids = list(req_ids)
        num_reqs = len(ids)
        prefill = _counts("prefill_lens", prefill_lens, num_reqs)
        computed = _counts("num_computed_tokens", num_computed_tokens, num_reqs)
        scheduled = _counts("num_scheduled_tokens", num_scheduled_tokens, num_reqs)
        query_start_loc = _smallest_array([0, *itertools.accumulate(scheduled.tolist())])
        num_tokens = int(query_start_loc[-1])
        padded = (
            num_tokens
            if num_tokens_after_padding is None
            else require_int("num_tokens_after_padding", num_tokens_after_padding)
        )
        if padded < num_tokens:
            raise ValueError(
                f"num_tokens_after_padding={padded} is smaller than num_tokens={num_tokens}"
            )
        if require_int("vocab_size", vocab_size) <= 0:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        if input_ids is None:
            tokens = np.zeros(padded, dtype=np.int64)
            for i in range(num_reqs):
                start = int(query_start_loc[i])
                positions = np.arange(int(computed[i]), int(computed[i]) + int(scheduled[i]))
                tokens[start : start + positions.size] = (positions * 7 + i * 13 + 1) % vocab_size
            input_ids = torch.from_numpy(tokens).to(device)
        elif not isinstance(input_ids, torch.Tensor) or input_ids.dim() == 0:
            raise ValueError(
                f"input_ids must be a tensor of token ids, got {type(input_ids).__name__}"
                f"{'' if not isinstance(input_ids, torch.Tensor) else ' of shape ()'}"
            )
        elif input_ids.shape[0] < padded:
            raise ValueError(
                f"input_ids has {input_ids.shape[0]} entries, fewer than "
                f"num_tokens_after_padding={padded}"
            )
        return cls(
            req_ids=ids,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            num_tokens_after_padding=padded,
            input_ids=input_ids,
            num_scheduled_tokens=scheduled,
            query_start_loc_np=query_start_loc,
            prefill_len_np=prefill,
            num_computed_tokens_np=computed,
        )
