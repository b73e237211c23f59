"""What a call on possibly corrupted inputs must return, read from the spec alone.

:func:`expected_result` first decides whether the inputs are a legal call (SPEC G1, E1,
E2, R1, D1-D5): integer arrays of any width, consistent offsets, positions in the
supported range, registered features that a gather can read. For a legal call it asks
the oracle (:func:`~rtmm_protocol.testing.oracle.oracle_gather`) what the gather
gives; for an illegal one only a clean error will do. :func:`compare` then checks a
result against that expectation exactly.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from rtmm_protocol import MultiModalFeature
from rtmm_protocol.testing.oracle import OracleResult, oracle_gather
from rtmm_protocol.validation import MAX_POSITION
from support.fuzz_world import FuzzWorld, StepInputs, Target, out_buffer

__all__ = ["Expected", "compare", "expected_result"]


@dataclass
class Expected:
    """The spec's answer for one call.

    ``illegal`` says why only a clean error is acceptable (``None``: the call is legal).
    ``dubious`` says why a legal call may also be refused with a clean error (arrays
    longer than needed, request ids validation would refuse, a broken entry the call
    does not reach); a plainly legal call must give exactly the expected result. For a
    legal gather, ``oracle`` is the expected result and ``outputs`` the encoder
    outputs its rows come from; a real-path call also has ``merged``, the expected first
    ``num_tokens`` rows; a dummy run has ``dummy_tokens``.
    """

    illegal: str | None = None
    dubious: str | None = None
    #: Identifiers whose outputs the call needs and the cache lacks (SPEC G7), known
    #: even for a call that is illegal for another reason (a bad token id, say): the
    #: G7 error for one of them is a clean error too.
    misses: tuple[str, ...] = ()
    oracle: OracleResult | None = None
    outputs: dict[str, torch.Tensor] | None = None
    merged: torch.Tensor | None = None
    num_tokens: int = 0
    padded: int = 0
    dummy_tokens: int = 0


def _exact_int(value: object) -> int | None:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        return None
    return operator.index(value)


def _exact_ints(value: object) -> list[int] | None:
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "iu" or value.ndim != 1:
        return None
    return [int(v) for v in value.tolist()]


@dataclass
class _Batch:
    req_ids: list[Any]
    padded_arrays: bool
    total: int
    lookahead: int
    scheduled: list[int]
    starts: list[int]
    prefill: list[int]
    computed: list[int]


def _batch(inputs: StepInputs, lookahead: int | None) -> _Batch | str:
    """The batch as Python ints, or why it is not a legal batch (SPEC G1, E1).

    ``lookahead`` overrides the inputs' (the real path has none).
    """
    req_ids = inputs.req_ids
    if isinstance(req_ids, (str, bytes)) or not isinstance(req_ids, Sequence):
        return "req_ids is not a sequence"
    n = len(req_ids)
    if lookahead is None:
        lookahead = _exact_int(inputs.draft_lookahead)
    total = _exact_int(inputs.total)
    if lookahead is None or total is None:
        return "a scalar is not an integer"
    arrays = {}
    longer = False
    for name, minimum in (
        ("num_scheduled_tokens", n),
        ("query_start_loc", n + 1),
        ("prefill_lens", n),
        ("num_computed_tokens", n),
    ):
        values = _exact_ints(getattr(inputs, name))
        if values is None:
            return f"{name} is not a 1-D integer array"
        if len(values) < minimum or (name == "num_scheduled_tokens" and len(values) != n):
            return f"{name} has the wrong length"
        longer |= len(values) > minimum
        arrays[name] = values[:minimum]
    scheduled, starts = arrays["num_scheduled_tokens"], arrays["query_start_loc"]
    prefill, computed = arrays["prefill_lens"], arrays["num_computed_tokens"]
    if not 0 <= lookahead <= MAX_POSITION + 1:
        return "draft_lookahead is outside the supported range"
    if min([*scheduled, *computed, 0]) < 0:
        return "a count is negative"
    if any(v > np.iinfo(np.int64).max for v in prefill):
        return "prefill_lens beyond int64"
    expected_starts = [0]
    for count in scheduled:
        expected_starts.append(expected_starts[-1] + count)
    if starts != expected_starts or total != starts[-1]:
        return "query_start_loc or the total disagree with num_scheduled_tokens"
    if any(c + lookahead + s > MAX_POSITION + 1 for c, s in zip(computed, scheduled, strict=True)):
        return "a window reaches past the largest supported position"
    return _Batch(list(req_ids), longer, total, lookahead, scheduled, starts, prefill, computed)


def _feature_problem(feature: object) -> str | None:
    """Why a registered feature cannot be gathered from, or ``None``."""
    if not isinstance(feature, MultiModalFeature):
        return "not a feature"
    position = feature.mm_position
    mask = position.is_embed
    if mask is not None and (
        mask.is_meta or mask.dtype != torch.bool or tuple(mask.shape) != (position.length,)
    ):
        return f"feature {feature.identifier!r} has a bad is_embed"
    if position.offset + position.length > MAX_POSITION:
        return f"feature {feature.identifier!r} ends past the supported range"
    return None


def _list_problem(features: Sequence[object]) -> str | None:
    end = -1
    for feature in features:
        problem = _feature_problem(feature)
        if problem is not None:
            return problem
        assert isinstance(feature, MultiModalFeature)
        if feature.mm_position.offset < end:
            return f"features around {feature.identifier!r} are unsorted or overlap"
        end = feature.mm_position.offset + feature.mm_position.length
    return None


def _output_problem(feature: MultiModalFeature, output: object, hidden: int) -> str | None:
    if _feature_problem(feature) is not None:
        return f"feature {feature.identifier!r} is broken"
    if not isinstance(output, torch.Tensor):
        return f"output of {feature.identifier!r} is not a tensor"
    shape = (feature.mm_position.get_num_embeds(), hidden)
    if output.is_meta or output.device.type != "cpu" or tuple(output.shape) != shape:
        return f"output of {feature.identifier!r} cannot be gathered from"
    return None


def _oracle(
    world: FuzzWorld, batch: _Batch, outputs: Mapping[str, object]
) -> tuple[OracleResult, dict[str, torch.Tensor], str | None] | str:
    """The oracle's answer, the outputs its rows use, and why an error is also acceptable;
    or why only an error is (an entry the call must read is broken)."""
    cache = world.cache
    features: dict[str, list[MultiModalFeature]] = {}
    dubious = None
    for i, req_id in enumerate(batch.req_ids):
        listed = cache.mm_features.get(req_id) if isinstance(req_id, str) else None
        if listed is None:
            continue
        problem = _list_problem(listed)
        if problem is not None:
            if world.validate:
                return problem
            # Without validation only what the windows reach must be read: a broken
            # feature a gathering window overlaps needs an error; others may be skipped.
            dubious = problem
            broken = [f for f in listed if _feature_problem(f) is not None]
            start = batch.computed[i] + batch.lookahead
            end = start + batch.scheduled[i]
            gathers = end > start and (world.realtime or start < batch.prefill[i])
            for feature in broken:
                position = getattr(feature, "mm_position", None)
                if position is None or (
                    gathers and position.offset < end and start < position.offset + position.length
                ):
                    return problem
            listed = [f for f in listed if _feature_problem(f) is None]
        features[req_id] = list(listed)
    by_id = {f.identifier: f for listed in features.values() for f in listed}
    present = {key for key in outputs if key in by_id}
    try:
        result = oracle_gather(
            features,
            # The oracle only asks which identifiers are present.
            cast(dict[str, torch.Tensor], dict.fromkeys(present)),
            is_realtime=world.realtime,
            req_ids=batch.req_ids,
            num_scheduled_tokens=batch.scheduled,
            query_start_loc=batch.starts,
            prefill_lens=batch.prefill,
            num_computed_tokens=batch.computed,
            draft_lookahead=batch.lookahead,
        )
    except Exception as error:  # the oracle cannot read a broken feature the call reaches
        return f"the features cannot be read ({type(error).__name__})"
    used: dict[str, torch.Tensor] = {}
    for row in result.rows:
        output = outputs[row.identifier]
        problem = _output_problem(by_id[row.identifier], output, world.scenario.hidden_size)
        if problem is not None:
            return problem
        assert isinstance(output, torch.Tensor)
        used[row.identifier] = output
    for identifier in present - set(used):
        problem = _output_problem(
            by_id[identifier], outputs[identifier], world.scenario.hidden_size
        )
        dubious = problem or dubious
    return result, used, dubious


def _scheduled_items(world: FuzzWorld, scheduled: object) -> list[MultiModalFeature] | str:
    """The features ``scheduled_encoder_inputs`` names (SPEC R1), or why it is illegal."""
    if not isinstance(scheduled, Mapping):
        return "scheduled_encoder_inputs is not a mapping"
    items = []
    for req_id, indices in scheduled.items():
        listed = world.cache.mm_features.get(req_id) if isinstance(req_id, str) else None
        if listed is None:
            return "scheduled_encoder_inputs names an unknown request"
        # Any collection of indices will do (a list, a tuple, a set, a 1-D integer array).
        if isinstance(indices, (str, bytes, Mapping)) or not isinstance(indices, Collection):
            return "scheduled_encoder_inputs holds something other than a collection of indices"
        if isinstance(indices, np.ndarray) and indices.ndim != 1:
            return "scheduled_encoder_inputs holds an array that is not 1-D"
        for index in indices:
            k = _exact_int(index)
            if k is None or not 0 <= k < len(listed):
                return "scheduled_encoder_inputs holds a bad index"
            items.append(listed[k])
    return items


def _out_problem(kind: str, rows: int, hidden: int) -> str | None:
    """Why an ``out`` buffer cannot receive the plan's rows, or ``None``: it must be a
    contiguous float32 CPU tensor of shape ``(rows, hidden)`` (the documented rule)."""
    out = out_buffer(kind, rows, hidden)
    if (
        isinstance(out, torch.Tensor)
        and tuple(out.shape) == (rows, hidden)
        and out.dtype == torch.float32
        and out.device.type == "cpu"
        and out.is_contiguous()
    ):
        return None
    return f"out ({kind}) cannot receive the rows"


def expected_result(target: Target, world: FuzzWorld, inputs: StepInputs) -> Expected:
    """The spec's answer for ``target`` called on ``inputs`` over the world's cache now."""
    if target == "dummy":
        n = _exact_int(inputs.dummy_tokens)
        if n is None or not 0 <= n <= world.max_num_tokens:
            return Expected(illegal="num_tokens is not an integer in [0, max_num_tokens]")
        return Expected(dummy_tokens=n)
    batch = _batch(inputs, lookahead=0 if target == "real" else None)
    if isinstance(batch, str):
        return Expected(illegal=batch)
    dubious = "arrays longer than needed" if batch.padded_arrays else None
    if min([*batch.prefill, 0]) < 0:
        # Read as an empty prompt, which is well defined; validation refuses it (E1).
        if world.validate:
            return Expected(illegal="prefill_lens is negative")
        dubious = "a negative prefill_lens"
    ids = batch.req_ids
    registered = world.cache.mm_features
    if (
        not all(isinstance(r, str) for r in ids)
        or len(set(ids)) != len(ids)
        or any(r not in registered for r in ids)
    ):
        if world.validate:
            return Expected(illegal="req_ids are not distinct registered str")
        dubious = "req_ids that validation would refuse"
    state_level = target in ("state_gather", "real")
    if state_level and _exact_int(inputs.num_reqs) != len(batch.req_ids):
        return Expected(illegal="num_reqs disagrees with req_ids")
    outputs: dict[str, object] = dict(world.cache.encoder_outputs)
    padded = 0
    late: str | None = None  # illegal for a reason the gather does not see
    if target == "real":
        padded_or_none = _exact_int(inputs.num_tokens_after_padding)
        if padded_or_none is None or not batch.total <= padded_or_none <= world.max_num_tokens:
            return Expected(illegal="num_tokens_after_padding out of range")
        padded = padded_or_none
        ids = inputs.input_ids
        if (
            not isinstance(ids, torch.Tensor)
            or ids.dim() != 1
            or ids.is_meta
            or ids.dtype.is_floating_point
            or ids.dtype == torch.bool
            or ids.shape[0] < batch.total
        ):
            late = "input_ids is not a 1-D integer tensor of num_tokens ids"
        else:
            head = ids[: batch.total]
            if head.numel() and (int(head.min()) < 0 or int(head.max()) >= world.model.vocab_size):
                late = "input_ids holds ids outside the vocabulary"
        items = _scheduled_items(world, inputs.scheduled_encoder_inputs)
        if isinstance(items, str):
            return Expected(illegal=items)
        for feature in items:
            if feature.identifier not in outputs and feature.data is not None:
                encoded = world.expected_output(feature)
                if encoded is None:
                    return Expected(illegal=f"data of {feature.identifier!r} is not a mapping")
                outputs[feature.identifier] = encoded
    answer = _oracle(world, batch, outputs)
    if isinstance(answer, str):
        return Expected(illegal=answer)
    oracle, used, unread = answer
    if late is None and target == "plan" and inputs.rows_out is not None:
        late = _out_problem(inputs.rows_out, len(oracle.rows), world.scenario.hidden_size)
    if late is not None:
        return Expected(illegal=late, misses=tuple(i for i, _ in oracle.missing))
    expected = Expected(
        dubious=dubious or unread,
        oracle=oracle,
        outputs=used,
        num_tokens=batch.total,
        padded=padded,
    )
    if target == "real" and not oracle.raises:
        rows = oracle.rows_tensor(used, world.scenario.hidden_size)
        mask = oracle.mask_tensor()
        head = inputs.input_ids[: batch.total]
        expected.merged = world.model.embed_input_ids(head, [rows] if len(rows) else [], mask)
    return expected


def compare(target: Target, world: FuzzWorld, expected: Expected, result: Any) -> str | None:
    """``None`` if ``result`` is exactly what ``expected`` says; else what differs."""
    hidden = world.scenario.hidden_size
    if target == "dummy":
        if not isinstance(result, torch.Tensor):
            return f"dummy run returned {type(result).__name__}"
        buffer = world.state.inputs_embeds
        assert buffer is not None
        if tuple(result.shape) != (expected.dummy_tokens, hidden):
            return f"dummy run returned shape {tuple(result.shape)}"
        if result.untyped_storage().data_ptr() != buffer.untyped_storage().data_ptr():
            return "dummy run returned another storage than the buffer (D2)"
        return None
    oracle = expected.oracle
    assert oracle is not None
    assert expected.outputs is not None
    if oracle.raises:
        return f"returned a result where the oracle misses {oracle.missing}"
    if target == "real":
        if not isinstance(result, torch.Tensor):
            return f"real path returned {type(result).__name__}"
        if tuple(result.shape) != (expected.padded, hidden):
            return f"real path returned shape {tuple(result.shape)}, expected ({expected.padded}, {hidden})"
        assert expected.merged is not None
        if not torch.equal(result[: expected.num_tokens], expected.merged):
            return "real path rows differ from the model's merge of the oracle's rows"
        return None
    if not isinstance(result, tuple) or len(result) != 2:
        return f"returned {type(result).__name__}, not a pair"
    first, mask = result
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        return "the mask is not a bool tensor"
    if mask.tolist() != oracle.mask:
        return f"mask {mask.tolist()} differs from the oracle's {oracle.mask}"
    want_rows = oracle.rows_tensor(expected.outputs, hidden)
    if target == "plan":
        if not isinstance(first, torch.Tensor) or not torch.equal(first, want_rows):
            return "plan rows differ from the oracle's"
        return None
    if not isinstance(first, list) or len(first) != len(oracle.pieces):
        return f"{len(first)} pieces, expected {len(oracle.pieces)}"
    for piece, want in zip(first, oracle.pieces, strict=True):
        source = expected.outputs[want.identifier]
        if not torch.equal(piece, source[want.row_start : want.row_end]):
            return (
                f"piece of {want.identifier!r} differs from rows [{want.row_start}, {want.row_end})"
            )
        if getattr(piece, "modality", None) != want.modality:
            return f"piece of {want.identifier!r} lacks modality {want.modality!r}"
    got_rows = torch.cat(first) if first else torch.empty(0, hidden)
    if not torch.equal(got_rows, want_rows):
        return "rows differ from the oracle's"
    return None
