"""Checks for malformed batches, features and sizes (SPEC E1-E3).

Every check raises ``ValueError`` naming the field (or the feature's identifier) and the
value it saw. They come in two costs:

- :func:`check_batch` is the always-on part: the types, lengths and values of a gather's
  arrays, checked in ``O(requests)`` whole-array operations (a few microseconds), and the
  arrays handed back normalised to ``int64``. Without it a malformed call fails deep
  inside numpy or, worse, returns a plausible mask for a batch that does not exist.
- :func:`check_gather_args` adds what needs a walk over Python objects (the request ids:
  their type, duplicates, registration) and the exact array lengths of SPEC E1.
  Implementations run it only when validation is switched on (:func:`validation_enabled`).

Feature and encoder-output checks (:func:`check_feature_list`,
:func:`check_encoder_output`) are cheap and run whenever something is registered.
"""

from __future__ import annotations

import itertools
import operator
import os
from collections.abc import Collection, Container, Mapping, Sequence
from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt
import torch

from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.protocols import InputBatch

__all__ = [
    "MAX_POSITION",
    "VALIDATE_ENV_VAR",
    "CheckedBatch",
    "check_batch",
    "check_batch_bounds",
    "check_buffer_size",
    "check_device",
    "check_encoder_output",
    "check_encoder_outputs",
    "check_feature_list",
    "check_gather_args",
    "check_input_batch",
    "check_out_disjoint",
    "check_rows_out",
    "check_scheduled_encoder_inputs",
    "check_size",
    "require_int",
    "validation_enabled",
]

#: Environment variable that switches validation on when set to 1, true, yes or on.
VALIDATE_ENV_VAR = "RTMM_PROTOCOL_VALIDATE"

#: The largest token position a gather supports (about 10^12). A window reaching past it,
#: or a placeholder ending past it, is refused by name rather than wrapped or clamped.
MAX_POSITION: Final = (1 << 40) - 2

_I64 = npt.NDArray[np.int64]
_INT64_MAX: Final = int(np.iinfo(np.int64).max)
_INT64 = np.dtype(np.int64)
# Up to this many requests, the checks run on the arrays' lists: each numpy call costs
# about a microsecond whatever its size, and 5 to 50 after a step evicted the CPU caches
# (as the engine's forward pass does), a Python pass over a few hundred entries less.
_SMALL = 256
# Decode steps (one token per request) of up to this many requests are told by their bytes.
_DECODE = 4096
# The bytes of num_scheduled_tokens and of query_start_loc when every request schedules
# one token, sliced per size.
_ONES = np.ones(_DECODE, dtype=np.int64).tobytes()
_STEP_ONE = np.arange(_DECODE + 1, dtype=np.int64).tobytes()


def validation_enabled(flag: bool | None = None) -> bool:
    """Resolve a validation switch: an explicit flag wins, else the environment decides."""
    if flag is not None:
        return flag
    return os.environ.get(VALIDATE_ENV_VAR, "").strip().lower() in {"1", "true", "yes", "on"}


# ---------------------------------------------------------------------- scalars


def require_int(name: str, value: object) -> int:
    """``value`` as a Python int if it is an integer (``int`` or a numpy integer, not a bool).

    Raises ``ValueError`` naming ``name`` and the value otherwise.
    """
    if type(value) is int:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {value!r}")
    return int(value)


def check_size(name: str, value: object, *, minimum: int = 1, maximum: int | None = None) -> int:
    """An integer size within ``[minimum, maximum]``, as a Python int.

    For constructor arguments such as ``hidden_size`` and ``max_num_tokens``: a float, a
    bool or an out-of-range value raises ``ValueError`` naming the field and the value.
    """
    size = require_int(name, value)
    if size < minimum:
        bound = "positive" if minimum == 1 else f">= {minimum}"
        raise ValueError(f"{name} must be {bound}, got {size}")
    if maximum is not None and size > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {size}")
    return size


def _device_memory(device: torch.device) -> int | None:
    """Total memory of ``device`` in bytes, or ``None`` where it cannot be told."""
    if device.type == "cpu":
        try:
            return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    if device.type == "cuda" and torch.cuda.is_available():
        index = device.index if device.index is not None else torch.cuda.current_device()
        return int(torch.cuda.get_device_properties(index).total_memory)
    return None


def check_device(name: str, device: torch.device) -> None:
    """Refuse the meta device for something that must hold data."""
    if device.type == "meta":
        raise ValueError(f"{name} must be a device that holds data, got {device}")


def check_buffer_size(
    name: str,
    value: int,
    rows: int,
    hidden_size: int,
    dtype: torch.dtype,
    device: torch.device,
) -> None:
    """Refuse a ``(rows, hidden_size)`` buffer larger than the device's whole memory.

    ``name=value`` is the argument that asked for it. Such a request can never be met;
    without this check the allocator is asked anyway (terabytes, for a mistyped
    ``max_num_tokens``) and fails with a message that names neither.
    """
    needed = rows * hidden_size * dtype.itemsize
    available = _device_memory(device)
    if available is not None and needed > available:
        raise ValueError(
            f"{name}={value} asks for a buffer of {rows} rows of hidden_size={hidden_size} "
            f"({dtype}): {needed} bytes, more than the {available} bytes of device {device}"
        )


# ---------------------------------------------------------------------- batches


class CheckedBatch(NamedTuple):
    """A gather's batch arguments after :func:`check_batch`: consistent and ``int64``.

    Each array holds exactly the entries the gather reads (``num_reqs``, or
    ``num_reqs + 1`` for ``query_start_loc``). They may be views of the caller's arrays
    (when those were ``int64`` already): read them, never write them (SPEC G9). Every
    window ``[window_starts[i], window_starts[i] + num_scheduled_tokens[i])`` lies within
    ``[0, max_position + 1]``, so a consumer needs no clamping.
    """

    num_reqs: int
    #: ``total_num_scheduled_tokens``, equal to ``query_start_loc[num_reqs]``.
    total: int
    draft_lookahead: int
    num_scheduled_tokens: _I64
    query_start_loc: _I64
    prefill_lens: _I64
    num_computed_tokens: _I64
    #: ``num_computed_tokens + draft_lookahead``: where each request's window starts.
    window_starts: _I64
    #: The smallest and largest entries of ``num_scheduled_tokens`` (0 for no requests).
    min_scheduled: int
    max_scheduled: int


def _int64_array(name: str, value: object, needed: int, exact: bool) -> _I64:
    """The first ``needed`` entries of an integer array, as ``int64``.

    Longer arrays are accepted unless ``exact``. A ``uint64`` array is checked to fit
    ``int64`` first, so no value wraps; its other values are checked by the caller.
    """
    if type(value) is not np.ndarray and not isinstance(value, np.ndarray):
        raise ValueError(f"{name} must be a numpy integer array, got {type(value).__name__}")
    dtype = value.dtype
    if value.ndim == 1 and value.shape[0] == needed:  # the common cases, decided quickly
        if dtype is _INT64:
            return value
        if dtype.kind == "i":
            return value.astype(_INT64)
    if dtype.kind not in "iu":
        raise ValueError(f"{name} must be a numpy integer array, got dtype {dtype}")
    if value.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {value.shape}")
    length = value.shape[0]
    if length != needed:
        if exact or length < needed:
            expected = f"{needed}" if exact else f"at least {needed}"
            requests = needed - 1 if name == "query_start_loc" else needed
            raise ValueError(
                f"{name} has {length} entries, expected {expected} for {requests} requests"
            )
        value = value[:needed]
    if dtype == _INT64:
        return value
    if dtype.kind == "u" and dtype.itemsize == 8 and needed and int(value.max()) > _INT64_MAX:
        i = int(value.argmax())
        raise ValueError(
            f"{name}[{i}] = {int(value[i])} is beyond the int64 range the gather computes in"
        )
    return value.astype(_INT64)


def _request_count(req_ids: object) -> int:
    if type(req_ids) is list:
        return len(req_ids)
    if isinstance(req_ids, (str, bytes)) or not isinstance(req_ids, Sequence):
        raise ValueError(f"req_ids must be a sequence of str, got {type(req_ids).__name__}")
    return len(req_ids)


def check_batch(
    req_ids: Sequence[str],
    total_num_scheduled_tokens: object,
    num_scheduled_tokens: object,
    query_start_loc: object,
    prefill_lens: object,
    num_computed_tokens: object,
    draft_lookahead: object = 0,
    *,
    max_position: int = MAX_POSITION,
) -> CheckedBatch:
    """Check that a gather's batch is consistent; return its arrays normalised to ``int64``.

    Always on, whatever the validation switch says: it costs a few whole-array
    operations, ``O(requests)``. It checks that

    - every array is a 1-D numpy array of an integer dtype (any width, signed or not),
      ``num_scheduled_tokens`` with one entry per request and the others with at least
      that many (engines keep them padded; only the first entries are read);
    - ``total_num_scheduled_tokens`` and ``draft_lookahead`` are integers (``int`` or a
      numpy integer), the look-ahead non-negative;
    - scheduled and computed counts are non-negative, ``query_start_loc`` starts at 0,
      steps by ``num_scheduled_tokens`` and ends at ``total_num_scheduled_tokens``;
    - every window, ``num_computed_tokens + draft_lookahead`` plus the scheduled tokens,
      ends at or before ``max_position + 1``.

    Values are compared exactly (no float casts, no overflow), so ``uint64`` arrays and
    ``draft_lookahead=2**63`` get an answer, not a numpy error. Raises ``ValueError``
    naming the field and the value. What it leaves to :func:`check_gather_args`: the
    request ids themselves, arrays longer than needed, and negative ``prefill_lens``
    (a gather reads one as an empty prompt, which is well defined).
    """
    num_reqs = len(req_ids) if type(req_ids) is list else _request_count(req_ids)
    lookahead = draft_lookahead if type(draft_lookahead) is int else None
    if lookahead is None:
        lookahead = require_int("draft_lookahead", draft_lookahead)
    if not 0 <= lookahead <= max_position + 1:
        if lookahead < 0:
            # A negative look-ahead would shift windows before the computed tokens.
            raise ValueError(f"draft_lookahead must be >= 0, got {lookahead}")
        raise ValueError(
            f"draft_lookahead={lookahead} reaches past the largest supported position "
            f"({max_position})"
        )
    total = total_num_scheduled_tokens if type(total_num_scheduled_tokens) is int else None
    if total is None:
        total = require_int("total_num_scheduled_tokens", total_num_scheduled_tokens)
    scheduled = _int64_array("num_scheduled_tokens", num_scheduled_tokens, num_reqs, True)
    starts_at = _int64_array("query_start_loc", query_start_loc, num_reqs + 1, False)
    prefill = _int64_array("prefill_lens", prefill_lens, num_reqs, False)
    computed = _int64_array("num_computed_tokens", num_computed_tokens, num_reqs, False)
    limit = max_position + 1 - lookahead  # the largest window end before the look-ahead
    if num_reqs and scheduled.tobytes() == _ONES[: 8 * num_reqs]:  # decode: no counts read
        extremes = _decode_extremes(total, starts_at, computed, limit)
    elif num_reqs <= _SMALL:
        extremes = _small_batch_extremes(total, scheduled, starts_at, computed, limit)
    else:
        extremes = _large_batch_extremes(total, scheduled, starts_at, computed, limit)
    if extremes is None:
        _explain(
            req_ids,
            total,
            lookahead,
            max_position,
            num_scheduled_tokens=num_scheduled_tokens,
            query_start_loc=query_start_loc,
            prefill_lens=prefill_lens,
            num_computed_tokens=num_computed_tokens,
        )
        raise AssertionError("unreachable: _explain raises")
    return CheckedBatch(
        num_reqs,
        total,
        lookahead,
        scheduled,
        starts_at,
        prefill,
        computed,
        computed + lookahead if lookahead else computed,
        *extremes,
    )


def _decode_extremes(
    total: int, starts_at: _I64, computed: _I64, limit: int
) -> tuple[int, int] | None:
    """The value checks of :func:`check_batch` when every request schedules one token.

    ``query_start_loc`` must then be 0, 1, 2, ... (compared as bytes) and every window,
    one position, end by ``limit``. Returns ``(1, 1)``, or ``None`` if a check fails.
    With cold caches, comparing bytes and a short list's ``min`` and ``max`` took 30 us
    where the whole-array operations of :func:`_large_batch_extremes` took 90 (64
    requests), and leave a decode step no numpy reduction to pay for (the reference's
    planner counts where it would reduce).
    """
    size = computed.shape[0]
    if total != size or starts_at.tobytes() != _STEP_ONE[: 8 * (size + 1)]:
        return None
    if size <= _SMALL:
        positions: list[int] = computed.tolist()
        first, last = min(positions), max(positions)
    else:
        first, last = int(computed.min()), int(computed.max())
    return (1, 1) if first >= 0 and last < limit else None


def _small_batch_extremes(
    total: int, scheduled: _I64, starts_at: _I64, computed: _I64, limit: int
) -> tuple[int, int] | None:
    """The value checks of :func:`check_batch` on Python lists (exact, no overflow).

    Returns the smallest and largest scheduled count, or ``None`` if a check fails.
    (``sorted`` finds both ends of a short list faster than ``min`` and ``max`` do.)
    """
    counts: list[int] = scheduled.tolist()
    if not counts:
        return (0, 0) if starts_at[0] == 0 and total == 0 else None
    ordered = sorted(counts)
    fewest, most = ordered[0], ordered[-1]
    positions = sorted(computed.tolist())
    if fewest < 0 or positions[0] < 0:
        return None
    if most + positions[-1] > limit and (max(map(operator.add, computed.tolist(), counts)) > limit):
        return None
    starts: list[int] = starts_at.tolist()
    if total != starts[-1] or starts != list(itertools.accumulate(counts, initial=0)):
        return None
    return fewest, most


def _large_batch_extremes(
    total: int, scheduled: _I64, starts_at: _I64, computed: _I64, limit: int
) -> tuple[int, int] | None:
    """The value checks of :func:`check_batch` as whole-array operations.

    Bounded by ``limit`` (under ``2**41``), counts and positions cannot overflow when
    added; the steps of ``query_start_loc`` are exact by induction from its first entry
    (a step can only wrap after an earlier one was already wrong).
    """
    fewest, most = int(scheduled.min()), int(scheduled.max())
    first, last = int(computed.min()), int(computed.max())
    if fewest < 0 or first < 0 or most > limit or last > limit:
        return None
    if most + last > limit and int((computed + scheduled).max()) > limit:
        return None
    if total != int(starts_at[-1]) or int(starts_at[0]) != 0:
        return None
    if not bool((starts_at[1:] - starts_at[:-1] == scheduled).all()):
        return None
    return fewest, most


def _explain(
    req_ids: Sequence[str],
    total: int,
    lookahead: int,
    max_position: int,
    **arrays: object,
) -> None:
    """Raise the ``ValueError`` for the first inconsistency, read from the caller's arrays.

    Called only once a check has failed, so it may be slow.
    """
    num_reqs = len(req_ids)
    values: dict[str, list[int]] = {}
    for name, array in arrays.items():
        assert isinstance(array, np.ndarray)  # checked by _int64_array
        needed = num_reqs + 1 if name == "query_start_loc" else num_reqs
        values[name] = [int(v) for v in array[:needed].tolist()]
    for name in ("num_scheduled_tokens", "num_computed_tokens"):
        listed = values[name]
        if listed and min(listed) < 0:
            raise ValueError(f"{name} must be non-negative, got minimum {min(listed)}")
    scheduled = values["num_scheduled_tokens"]
    computed = values["num_computed_tokens"]
    for i, (start, count) in enumerate(zip(computed, scheduled, strict=True)):
        end = start + lookahead + count
        if end > max_position + 1:
            raise ValueError(
                f"request {i} ({req_ids[i]!r}) ends its window at num_computed_tokens[{i}] "
                f"({start}) + draft_lookahead ({lookahead}) + num_scheduled_tokens[{i}] "
                f"({count}) = {end}, past the largest supported position ({max_position})"
            )
    starts = values["query_start_loc"]
    if starts[0] != 0:
        raise ValueError(f"query_start_loc must start at 0, got {starts[0]}")
    for i in range(num_reqs):
        step = starts[i + 1] - starts[i]
        if step != scheduled[i]:
            raise ValueError(
                f"query_start_loc steps must equal num_scheduled_tokens: request {i} "
                f"({req_ids[i]!r}) has query_start_loc[{i + 1}] - query_start_loc[{i}] = "
                f"{starts[i + 1]} - {starts[i]} = {step} but num_scheduled_tokens[{i}] = "
                f"{scheduled[i]}"
            )
    if total != starts[num_reqs]:
        raise ValueError(
            f"total_num_scheduled_tokens is {total} but num_scheduled_tokens sums to "
            f"{sum(scheduled)} (query_start_loc[{num_reqs}] = {starts[num_reqs]})"
        )
    raise AssertionError("check_batch found an inconsistency that it cannot name")


def check_batch_bounds(
    num_reqs: int,
    total_num_scheduled_tokens: int,
    draft_lookahead: int,
    **arrays: object,
) -> None:
    """The always-on checks of :func:`check_batch`, for callers that keep their own arrays.

    ``arrays`` are the gather's four arrays by argument name. Prefer :func:`check_batch`,
    which also hands back the normalised arrays.
    """
    check_batch(
        [""] * num_reqs,
        total_num_scheduled_tokens,
        arrays["num_scheduled_tokens"],
        arrays["query_start_loc"],
        arrays["prefill_lens"],
        arrays["num_computed_tokens"],
        draft_lookahead,
    )


def check_gather_args(
    req_ids: Sequence[str],
    total_num_scheduled_tokens: object,
    num_scheduled_tokens: object,
    query_start_loc: object,
    prefill_lens: object,
    num_computed_tokens: object,
    draft_lookahead: object,
    known_req_ids: Container[str] | None = None,
    *,
    max_position: int = MAX_POSITION,
) -> CheckedBatch:
    """The full SPEC E1 checks: :func:`check_batch` plus the request ids and exact lengths.

    ``req_ids`` must hold distinct ``str`` (registered in ``known_req_ids`` when given);
    ``prefill_lens`` and ``num_computed_tokens`` must have one entry per request.
    ``query_start_loc`` may be longer than ``len(req_ids) + 1`` (engines keep it padded);
    only its first ``num_reqs + 1`` entries are read. Returns what :func:`check_batch` does.
    """
    num_reqs = _request_count(req_ids)
    for req_id in req_ids:
        if not isinstance(req_id, str):
            raise ValueError(f"req_ids must hold str, got {req_id!r}")
        if known_req_ids is not None and req_id not in known_req_ids:
            raise ValueError(
                f"req_ids holds {req_id!r}, which is not registered in the encoder cache"
            )
    if len(set(req_ids)) != num_reqs:
        raise ValueError(f"req_ids holds duplicates: {list(req_ids)!r}")
    prefill = _int64_array("prefill_lens", prefill_lens, num_reqs, True)
    _int64_array("num_computed_tokens", num_computed_tokens, num_reqs, True)
    if num_reqs and int(prefill.min()) < 0:
        raise ValueError(f"prefill_lens must be non-negative, got minimum {int(prefill.min())}")
    return check_batch(
        req_ids,
        total_num_scheduled_tokens,
        num_scheduled_tokens,
        query_start_loc,
        prefill_lens,
        num_computed_tokens,
        draft_lookahead,
        max_position=max_position,
    )


def check_input_batch(
    input_batch: InputBatch,
    draft_lookahead: object = 0,
    *,
    max_num_tokens: int | None = None,
    validate: bool = False,
    known_req_ids: Container[str] | None = None,
    max_position: int = MAX_POSITION,
) -> CheckedBatch:
    """Check a state-level batch: its sizes, then its arrays as :func:`check_batch` does.

    ``num_reqs`` must equal ``len(req_ids)`` and ``num_tokens`` be the scheduled total.
    With ``max_num_tokens`` (the real path, which writes a buffer of that many rows)
    ``num_tokens <= num_tokens_after_padding <= max_num_tokens`` and ``input_ids`` must be
    a tensor with at least ``num_tokens`` entries. ``validate`` adds the checks of
    :func:`check_gather_args`.
    """
    req_ids = input_batch.req_ids
    num_reqs = require_int("num_reqs", input_batch.num_reqs)
    if num_reqs != _request_count(req_ids):
        raise ValueError(f"num_reqs is {num_reqs} but req_ids holds {len(req_ids)} requests")
    num_tokens = require_int("num_tokens", input_batch.num_tokens)
    if max_num_tokens is not None:
        padded = require_int("num_tokens_after_padding", input_batch.num_tokens_after_padding)
        if not 0 <= padded <= max_num_tokens:
            raise ValueError(
                f"num_tokens_after_padding={padded} is outside [0, max_num_tokens={max_num_tokens}]"
            )
        if padded < num_tokens:
            raise ValueError(
                f"num_tokens_after_padding={padded} is smaller than num_tokens={num_tokens}"
            )
        input_ids = input_batch.input_ids
        if not isinstance(input_ids, torch.Tensor):
            raise ValueError(f"input_ids must be a torch.Tensor, got {type(input_ids).__name__}")
        if input_ids.dim() == 0:
            raise ValueError("input_ids must have one entry per token, got a 0-d tensor")
        if input_ids.shape[0] < num_tokens:
            raise ValueError(
                f"input_ids has {input_ids.shape[0]} entries, fewer than num_tokens={num_tokens}"
            )
    if validate:
        return check_gather_args(
            req_ids,
            num_tokens,
            input_batch.num_scheduled_tokens,
            input_batch.query_start_loc_np,
            input_batch.prefill_len_np,
            input_batch.num_computed_tokens_np,
            draft_lookahead,
            known_req_ids,
            max_position=max_position,
        )
    return check_batch(
        req_ids,
        num_tokens,
        input_batch.num_scheduled_tokens,
        input_batch.query_start_loc_np,
        input_batch.prefill_len_np,
        input_batch.num_computed_tokens_np,
        draft_lookahead,
        max_position=max_position,
    )


def check_scheduled_encoder_inputs(
    scheduled: object, mm_features: Mapping[str, Sequence[MultiModalFeature]]
) -> list[tuple[str, MultiModalFeature]]:
    """The ``(req_id, feature)`` pairs a real step's ``scheduled_encoder_inputs`` names (R1).

    It must map registered request ids to collections of indices (ints or numpy integers)
    into their feature lists; anything else raises ``ValueError`` naming the field and
    the value. Every item is checked before a caller encodes any.
    """
    if not isinstance(scheduled, Mapping):
        raise ValueError(
            "scheduled_encoder_inputs must map request ids to feature indices, got "
            f"{type(scheduled).__name__}"
        )
    chosen = []
    for req_id, indices in scheduled.items():
        features = mm_features.get(req_id) if isinstance(req_id, str) else None
        if features is None:
            raise ValueError(
                f"scheduled_encoder_inputs names request {req_id!r}, which is not in the "
                "encoder cache"
            )
        if (
            isinstance(indices, (str, bytes, Mapping))
            or not isinstance(indices, Collection)
            or (isinstance(indices, np.ndarray) and indices.ndim != 1)
        ):
            raise ValueError(
                f"scheduled_encoder_inputs[{req_id!r}] must be a collection of feature "
                f"indices, got {indices!r}"
            )
        for index in indices:
            if isinstance(index, (bool, np.bool_)) or not (
                isinstance(index, (int, np.integer)) and 0 <= index < len(features)
            ):
                raise ValueError(
                    f"scheduled_encoder_inputs[{req_id!r}] holds index {index!r}, but the "
                    f"request has {len(features)} features"
                )
            chosen.append((req_id, features[int(index)]))
    return chosen


# ---------------------------------------------------------------------- features


def check_feature_list(
    req_id: str, features: Sequence[MultiModalFeature], *, max_position: int = MAX_POSITION
) -> None:
    """Raise ``ValueError`` naming the identifier for features no gather could use (E2).

    That is: items that are not features, ``is_embed`` masks of the wrong dtype or shape
    or without data (on the meta device), placeholders that are unsorted, overlap, or
    end past ``max_position``.
    """
    previous: MultiModalFeature | None = None
    for feature in features:
        if not isinstance(feature, MultiModalFeature):
            raise ValueError(
                f"features of request {req_id!r} must be MultiModalFeature, "
                f"got {type(feature).__name__}"
            )
        pos = feature.mm_position
        mask = pos.is_embed
        if mask is not None:
            if mask.dtype != torch.bool or tuple(mask.shape) != (pos.length,):
                raise ValueError(
                    f"feature {feature.identifier!r} of request {req_id!r}: is_embed must be "
                    f"a bool tensor of shape ({pos.length},), got dtype {mask.dtype} and shape "
                    f"{tuple(mask.shape)}"
                )
            if mask.is_meta:
                raise ValueError(
                    f"feature {feature.identifier!r} of request {req_id!r}: is_embed is on the "
                    "meta device and holds no values; give a CPU or device tensor"
                )
        if pos.offset + pos.length > max_position:
            raise ValueError(
                f"feature {feature.identifier!r} of request {req_id!r} ends at "
                f"{pos.offset + pos.length}, past the largest supported position "
                f"({max_position})"
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
    feature: MultiModalFeature,
    output: object,
    hidden_size: int | None,
    *,
    device: torch.device | None = None,
) -> None:
    """Raise ``ValueError`` naming the identifier if an output does not fit its feature (E2).

    The output must be a 2-D ``torch.Tensor`` (not a numpy array or a list) of
    ``num_embeds`` rows and ``hidden_size`` columns, holding data (not on the meta
    device), and on ``device`` when one is given.
    """
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
    if output.is_meta:
        raise ValueError(f"encoder output of {ident!r} is on the meta device and holds no values")
    if device is not None and not _same_device(output.device, device):
        raise ValueError(
            f"encoder output of {ident!r} is on device {output.device}, expected {device}"
        )


def _same_device(a: torch.device, b: torch.device) -> bool:
    """Whether two devices are one; ``cuda`` without an index is the current CUDA device."""
    if a.type != b.type:
        return False
    if a.type != "cuda":
        return a.index is None or b.index is None or a.index == b.index
    current = torch.cuda.current_device() if None in (a.index, b.index) else 0
    return (current if a.index is None else a.index) == (current if b.index is None else b.index)


_SHAPE = operator.attrgetter("shape")
_DEVICE = operator.attrgetter("device")
_IS_CPU = operator.attrgetter("is_cpu")


def check_rows_out(out: object, shape: tuple[int, int], storage: torch.Tensor) -> None:
    """Refuse, by a ``ValueError`` naming it, an ``out`` that cannot receive rows of
    ``storage``'s dtype and device in ``shape`` (the reference's ``MMGatherPlan.rows``)."""
    if isinstance(out, torch.Tensor):
        if (
            out.dtype is storage.dtype
            and out.shape == shape
            and out.is_contiguous()
            and out.is_cpu == storage.is_cpu  # a meta tensor is not on the CPU
            and out.get_device() == storage.get_device()  # -1 on the CPU
            and not out.requires_grad  # index_select and cat refuse to write into it
        ):
            return
        layout = "" if out.is_contiguous() else "non-contiguous "
        seen = f"a {layout}{out.dtype} tensor of shape {tuple(out.shape)} on {out.device}"
        seen += " that requires grad" if out.requires_grad else ""
    else:
        seen = f"a {type(out).__name__}"
    wanted = f"a contiguous {storage.dtype} tensor of shape {shape} on {storage.device}"
    wanted += " that does not require grad" if "grad" in seen else ""
    raise ValueError(f"out must be {wanted}, got {seen}")


def check_encoder_outputs(
    features: Sequence[MultiModalFeature] | npt.NDArray[np.object_],
    outputs: Sequence[object],
    num_embeds: Sequence[int],
    hidden_size: int,
    device: torch.device,
) -> None:
    """:func:`check_encoder_output` for many outputs at once, ``num_embeds`` the features'
    counts: a fast test, then the one-by-one check (and its error) when it fails."""
    if (
        all(map(isinstance, outputs, itertools.repeat(torch.Tensor)))
        and list(map(_SHAPE, outputs)) == list(zip(num_embeds, itertools.repeat(hidden_size)))
        and (
            all(map(_IS_CPU, outputs))  # cheaper than comparing devices
            if device.type == "cpu"
            else list(map(_DEVICE, outputs)).count(device) == len(outputs)
        )
    ):
        return
    for feature, output in zip(features, outputs, strict=True):
        check_encoder_output(feature, output, hidden_size, device=device)


def check_out_disjoint(out: torch.Tensor, read: Sequence[torch.Tensor]) -> None:
    """Refuse an ``out`` that shares memory with a tensor the rows are read from."""
    target = out.untyped_storage().data_ptr()
    if any(tensor.untyped_storage().data_ptr() == target for tensor in read):
        raise ValueError("out shares memory with a tensor the rows are read from")
