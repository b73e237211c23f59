"""A concrete :class:`~rtmm_protocol.InputBatch` that tests and examples build in one line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from rtmm_protocol.types import IntArray

__all__ = ["ReferenceInputBatch"]


def _counts(name: str, values: Sequence[int], num_reqs: int) -> IntArray:
    if len(values) != num_reqs:
        raise ValueError(f"{name} has {len(values)} entries, expected one per request ({num_reqs})")
    array = np.asarray(values, dtype=np.int32)
    if array.size and int(array.min()) < 0:
        raise ValueError(f"{name} must be non-negative, got {list(values)!r}")
    return array


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
        query_start_loc = np.zeros(num_reqs + 1, dtype=np.int32)
        np.cumsum(scheduled, out=query_start_loc[1:])
        num_tokens = int(query_start_loc[-1])
        padded = num_tokens if num_tokens_after_padding is None else num_tokens_after_padding
        if padded < num_tokens:
            raise ValueError(
                f"num_tokens_after_padding={padded} is smaller than num_tokens={num_tokens}"
            )
        if vocab_size <= 0:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        if input_ids is None:
            tokens = np.zeros(padded, dtype=np.int64)
            for i in range(num_reqs):
                start = int(query_start_loc[i])
                positions = np.arange(int(computed[i]), int(computed[i]) + int(scheduled[i]))
                tokens[start : start + positions.size] = (positions * 7 + i * 13 + 1) % vocab_size
            input_ids = torch.from_numpy(tokens).to(device)
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
