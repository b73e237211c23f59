"""Checks for malformed batches and features (SPEC E1, E2).

Each check raises ``ValueError`` naming the field or feature identifier and the value
it saw. Batch checks cost a few array passes, so implementations run them only when
validation is switched on (:func:`validation_enabled`); feature checks are cheap and
run whenever features are registered.
"""

from __future__ import annotations

import os
from collections.abc import Container, Sequence

import numpy as np
import torch

from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.types import IntArray

__all__ = [
    "VALIDATE_ENV_VAR",
    "check_batch_bounds",
    "check_encoder_output",
    "check_feature_list",
    "check_gather_args",
    "validation_enabled",
]

#: Environment variable that switches validation on when set to 1, true, yes or on.
VALIDATE_ENV_VAR = "RTMM_PROTOCOL_VALIDATE"


def validation_enabled(flag: bool | None = None) -> bool:
    """Resolve a validation switch: an explicit flag wins, else the environment decides."""
    if flag is not None:
        return flag
    return os.environ.get(VALIDATE_ENV_VAR, "").strip().lower() in {"1", "true", "yes", "on"}


def _int_array(name: str, value: object, expected_len: int | None) -> IntArray:
    if not isinstance(value, np.ndarray):
        raise ValueError(f"{name} must be a numpy integer array, got {type(value).__name__}")
    if value.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {value.shape}")
    if not np.issubdtype(value.dtype, np.integer):
        raise ValueError(f"{name} must have an integer dtype, got {value.dtype}")
    if expected_len is not None and value.shape[0] != expected_len:
        raise ValueError(f"{name} has {value.shape[0]} entries, expected {expected_len}")
    if value.size and int(value.min()) < 0:
        raise ValueError(f"{name} must be non-negative, got minimum {int(value.min())}")
    return value


def _require_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {value!r}")
    return int(value)


def _check_scalars(total_num_scheduled_tokens: object, draft_lookahead: object) -> None:
    if _require_int("draft_lookahead", draft_lookahead) < 0:
        # A negative look-ahead would shift windows before the computed tokens.
        raise ValueError(f"draft_lookahead must be >= 0, got {draft_lookahead}")
    _require_int("total_num_scheduled_tokens", total_num_scheduled_tokens)


def check_batch_bounds(
    num_reqs: int,
    total_num_scheduled_tokens: int,
    draft_lookahead: int,
    **arrays: object,
) -> None:
    """The constant-time subset of :func:`check_gather_args`, cheap enough for every step.

    It checks the scalars, that each array (passed by its gather argument name) is a 1-D
    integer numpy array long enough for ``num_reqs`` requests, and that the total ends
    where ``query_start_loc`` does. Without it a malformed call fails deep inside numpy
    or returns a mask cut short or padded with slots no request owns (SPEC E3).
    """
    _check_scalars(total_num_scheduled_tokens, draft_lookahead)
    for name, array in arrays.items():
        if not isinstance(array, np.ndarray) or array.dtype.kind not in "iu":
            raise ValueError(
                f"{name} must be a numpy integer array, got "
                f"{getattr(array, 'dtype', type(array).__name__)}"
            )
        needed = num_reqs + 1 if name == "query_start_loc" else num_reqs
        if array.ndim != 1 or array.shape[0] < needed:
            raise ValueError(
                f"{name} has shape {array.shape}, expected at least {needed} entries for "
                f"{num_reqs} requests"
            )
    query_start_loc = arrays["query_start_loc"]
    assert isinstance(query_start_loc, np.ndarray)  # checked in the loop above
    scheduled_end = int(query_start_loc[num_reqs])
    if scheduled_end != total_num_scheduled_tokens:
        raise ValueError(
            f"total_num_scheduled_tokens is {total_num_scheduled_tokens!r} but "
            f"query_start_loc[{num_reqs}] = {scheduled_end} ends the scheduled tokens"
        )


def check_gather_args(
    req_ids: Sequence[str],
    total_num_scheduled_tokens: int,
    num_scheduled_tokens: object,
    query_start_loc: object,
    prefill_lens: object,
    num_computed_tokens: object,
    draft_lookahead: int,
    known_req_ids: Container[str] | None = None,
) -> None:
    """Raise ``ValueError`` naming the field if the gather arguments disagree (SPEC E1).

    ``query_start_loc`` may be longer than ``len(req_ids) + 1`` (engines keep it padded);
    only its first ``num_reqs + 1`` entries are read.
    """
    if isinstance(req_ids, str) or not isinstance(req_ids, Sequence):
        raise ValueError(f"req_ids must be a sequence of str, got {type(req_ids).__name__}")
    for req_id in req_ids:
        if not isinstance(req_id, str):
            raise ValueError(f"req_ids must hold str, got {req_id!r}")
        if known_req_ids is not None and req_id not in known_req_ids:
            raise ValueError(
                f"req_ids holds {req_id!r}, which is not registered in the encoder cache"
            )
    num_reqs = len(req_ids)
    if len(set(req_ids)) != num_reqs:
        raise ValueError(f"req_ids holds duplicates: {list(req_ids)!r}")
    _check_scalars(total_num_scheduled_tokens, draft_lookahead)
    scheduled = _int_array("num_scheduled_tokens", num_scheduled_tokens, num_reqs)
    _int_array("prefill_lens", prefill_lens, num_reqs)
    _int_array("num_computed_tokens", num_computed_tokens, num_reqs)
    qsl = _int_array("query_start_loc", query_start_loc, None)
    if qsl.shape[0] < num_reqs + 1:
        raise ValueError(
            f"query_start_loc has {qsl.shape[0]} entries, expected at least {num_reqs + 1}"
        )
    if int(qsl[0]) != 0:
        raise ValueError(f"query_start_loc must start at 0, got {int(qsl[0])}")
    steps = np.diff(qsl[: num_reqs + 1].astype(np.int64))
    bad = np.flatnonzero(steps != scheduled.astype(np.int64))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"query_start_loc steps must equal num_scheduled_tokens: request {i} "
            f"({req_ids[i]!r}) has query_start_loc[{i + 1}] - query_start_loc[{i}] = "
            f"{int(steps[i])} but num_scheduled_tokens[{i}] = {int(scheduled[i])}"
        )
    total = int(scheduled.sum())
    if int(total_num_scheduled_tokens) != total:
        raise ValueError(
            f"total_num_scheduled_tokens is {int(total_num_scheduled_tokens)} but "
            f"num_scheduled_tokens sums to {total}"
        )


def check_feature_list(req_id: str, features: Sequence[MultiModalFeature]) -> None:
    """Raise ``ValueError`` naming the identifier if features are unsorted or overlap (E2)."""
    previous: MultiModalFeature | None = None
    for feature in features:
        if not isinstance(feature, MultiModalFeature):
            raise ValueError(
                f"features of request {req_id!r} must be MultiModalFeature, "
                f"got {type(feature).__name__}"
            )
        pos = feature.mm_position
        mask = pos.is_embed
        if mask is not None and (mask.dtype != torch.bool or tuple(mask.shape) != (pos.length,)):
            raise ValueError(
                f"feature {feature.identifier!r} of request {req_id!r}: is_embed must be a "
                f"bool tensor of shape ({pos.length},), got dtype {mask.dtype} and shape "
                f"{tuple(mask.shape)}"
            )
        if previous is not None:
            prev = previous.mm_position
            if pos.offset < prev.offset:
                raise ValueError(
                    f"features of request {req_id!r} are not sorted by offset: "
                    f"{feature.identifier!r} at offset {pos.offset} follows "
                    f"{previous.identifier!r} at offset {prev.offset}"
                )
            if pos.offset < prev.offset + prev.length:
                raise ValueError(
                    f"features of request {req_id!r} overlap: {feature.identifier!r} at "
                    f"[{pos.offset}, {pos.offset + pos.length}) overlaps "
                    f"{previous.identifier!r} at [{prev.offset}, {prev.offset + prev.length})"
                )
        previous = feature


def check_encoder_output(
    feature: MultiModalFeature, output: object, hidden_size: int | None
) -> None:
    """Raise ``ValueError`` naming the identifier if an output does not fit its feature (E2)."""
    ident = feature.identifier
    if not isinstance(output, torch.Tensor):
        raise ValueError(
            f"encoder output of {ident!r} must be a torch.Tensor, got {type(output).__name__}"
        )
    if output.dim() != 2:
        raise ValueError(
            f"encoder output of {ident!r} must be 2-D (num_embeds, hidden_size), "
            f"got shape {tuple(output.shape)}"
        )
    num_embeds = feature.mm_position.get_num_embeds()
    if output.shape[0] != num_embeds:
        raise ValueError(
            f"encoder output of {ident!r} has {output.shape[0]} rows but its placeholder "
            f"has num_embeds={num_embeds}"
        )
    if hidden_size is not None and output.shape[1] != hidden_size:
        raise ValueError(
            f"encoder output of {ident!r} has hidden size {output.shape[1]}, expected {hidden_size}"
        )
