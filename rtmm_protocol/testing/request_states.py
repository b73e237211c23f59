"""The engine's per-request state that the suite hands to ``get_mm_embeddings`` as its ``req_states`` argument.

vLLM's engine passes its own request-state object as the third argument. The contract
reads nothing from it, so the suite passes a small read-only stand-in with the fields an
engine's object typically carries, built from the batch the step runs.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from rtmm_protocol.protocols import InputBatch
from rtmm_protocol.types import IntArray

__all__ = ["SuiteRequestStates", "request_states_for"]


def _read_only(values: IntArray) -> IntArray:
    copy = np.array(values, copy=True)
    copy.flags.writeable = False
    return copy


@dataclass(frozen=True)
class SuiteRequestStates:
    """Per-request fields of one batch: index by ``req_id_to_index[req_id]``.

    The arrays are read-only copies, so a state that writes into them fails loudly instead
    of changing the batch it is given.
    """

    req_id_to_index: Mapping[str, int]
    prefill_len_np: IntArray
    num_computed_tokens_np: IntArray


def request_states_for(batch: InputBatch) -> SuiteRequestStates:
    """The request states of ``batch``'s requests, in batch order."""
    index = {req_id: i for i, req_id in enumerate(batch.req_ids)}
    return SuiteRequestStates(
        req_id_to_index=types.MappingProxyType(index),
        prefill_len_np=_read_only(batch.prefill_len_np),
        num_computed_tokens_np=_read_only(batch.num_computed_tokens_np),
    )
