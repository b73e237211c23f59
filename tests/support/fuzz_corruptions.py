"""Single corruptions of a valid call: the catalogue the bad-input fuzz test draws from.

A :class:`Corruption` changes one thing: one argument of the call (a batch array's dtype,
length or one value, a scalar, the request ids, a state-level batch field, the encoder
schedule, a dummy run's size), one entry of the encoder cache (an output or a feature
list, stored directly as engines do), one registration, or one constructor argument.
Each names the fields an error message may mention; what the call must then do is
decided from the spec by :mod:`support.fuzz_expected`, not here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st

from rtmm_protocol import MultiModalFeature, PlaceholderRange
from rtmm_protocol.testing.scenario import GatherScenario
from rtmm_protocol.validation import MAX_POSITION
from support.fuzz_world import (
    OUT_KINDS,
    FuzzWorld,
    StepInputs,
    Target,
    meta_mask,
    run_target,
    unchecked_range,
)

__all__ = ["ARRAY_FIELDS", "Corruption", "corruptions"]

#: A corruption's restore step (puts the cache back), or ``None``.
Restore = Callable[[], None] | None
Apply = Callable[[StepInputs, FuzzWorld], Restore]

ARRAY_FIELDS = ("num_scheduled_tokens", "query_start_loc", "prefill_lens", "num_computed_tokens")
_TOTAL_NAMES = ("total_num_scheduled_tokens", "num_tokens")
_OFFSET_NAMES = ("num_scheduled_tokens", "query_start_loc", *_TOTAL_NAMES)
#: The names an error about each field may give: consistency errors name a partner.
_RELATED = {
    "num_scheduled_tokens": (*_OFFSET_NAMES, "num_computed_tokens"),
    "query_start_loc": _OFFSET_NAMES,
    "prefill_lens": ("prefill_lens",),
    "num_computed_tokens": ("num_computed_tokens", "draft_lookahead"),
}
_INT_DTYPES: tuple[type[np.integer[Any]], ...] = (
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
)  # fmt: skip
_HUGE = (2**31 - 1, 2**31, 2**40 - 1, 2**40, 2**41, 2**62, 2**63 - 1)


@dataclass(frozen=True)
class Corruption:
    """One change to a valid call, named for the report."""

    name: str
    #: Names an error message may give (one of them must appear in it).
    fields: tuple[str, ...]
    apply: Apply
    #: ``register`` and ``construct`` cases make their own call; others use the target's.
    kind: str = "call"

    def __repr__(self) -> str:
        return f"Corruption({self.name!r})"


def _set(field: str, value: Any) -> Apply:
    def apply(inputs: StepInputs, world: FuzzWorld) -> Restore:
        setattr(inputs, field, value(getattr(inputs, field)) if callable(value) else value)
        return None

    return apply


def _same_values(dtype: type[np.integer[Any]]) -> Callable[[np.ndarray], np.ndarray]:
    def cast(array: np.ndarray) -> np.ndarray:
        converted = array.astype(dtype)
        if converted.astype(np.int64).tolist() != array.astype(np.int64).tolist():
            return array.astype(np.int64)  # the values do not fit: stay legal
        return converted

    return cast


def _with_value(index: int, value: int) -> Callable[[np.ndarray], np.ndarray]:
    def put(array: np.ndarray) -> np.ndarray:
        dtype = np.uint64 if value > np.iinfo(np.int64).max else np.int64
        changed = array.astype(dtype)
        changed[index % array.shape[0]] = value
        return changed

    return put


@st.composite
def _array_corruption(draw: st.DrawFn, scenario: GatherScenario) -> Corruption:
    field = draw(st.sampled_from(ARRAY_FIELDS))
    fields = _RELATED[field]
    length = len(scenario.requests) + (1 if field == "query_start_loc" else 0)
    kinds = ["dtype", "float", "bool", "object", "list", "2-D", "tensor", "shorter", "longer"]
    if length:
        kinds += ["negative", "huge", "nudge", "uint64 max", "0-d"]
    if field == "query_start_loc" and length > 1:
        kinds += ["shift", "swap", "reverse"]
    kind = draw(st.sampled_from(kinds))
    value: Callable[[np.ndarray], Any]
    if kind == "dtype":
        dtype = draw(st.sampled_from(_INT_DTYPES))
        kind = f"dtype {np.dtype(dtype).name}"
        value = _same_values(dtype)
    elif kind == "float":
        value = lambda a: a.astype(np.float64)  # noqa: E731
    elif kind == "bool":
        value = lambda a: a.astype(np.bool_)  # noqa: E731
    elif kind == "object":
        value = lambda a: a.astype(object)  # noqa: E731
    elif kind == "list":
        value = lambda a: a.tolist()  # noqa: E731
    elif kind == "2-D":
        value = lambda a: a.reshape(1, -1)  # noqa: E731
    elif kind == "0-d":
        value = lambda a: np.array(a[0])  # noqa: E731
    elif kind == "tensor":
        value = lambda a: torch.from_numpy(a)  # noqa: E731
    elif kind == "shorter":
        value = lambda a: a[:-1]  # noqa: E731
    elif kind == "longer":
        extra = draw(st.sampled_from([0, 3, -1, 2**40]))
        kind = f"longer by {extra}"
        value = lambda a: np.append(a.astype(np.int64), extra)  # noqa: E731
    elif kind in ("negative", "huge", "nudge", "uint64 max"):
        index = draw(st.integers(0, length - 1))
        if kind == "negative":
            number = draw(st.sampled_from([-1, -3, -(2**31), -(2**63)]))
        elif kind == "huge":
            number = draw(st.sampled_from(_HUGE))
        elif kind == "uint64 max":
            number = 2**64 - 1
        else:
            number = None
        if number is None:
            delta = draw(st.sampled_from([-2, -1, 1, 2]))
            kind = f"nudge [{index}] by {delta}"

            def value(a: np.ndarray, index: int = index, delta: int = delta) -> np.ndarray:
                changed = a.astype(np.int64)
                changed[index] += delta
                return changed
        else:
            kind = f"{kind} [{index}] = {number}"
            value = _with_value(index, number)
    elif kind == "shift":
        delta = draw(st.sampled_from([-1, 1, 2]))
        kind = f"shift by {delta}"
        value = lambda a: a.astype(np.int64) + delta  # noqa: E731
    elif kind == "swap":
        i = draw(st.integers(0, length - 2))
        kind = f"swap [{i}] and [{i + 1}]"

        def value(a: np.ndarray, i: int = i) -> np.ndarray:
            changed: np.ndarray = a.copy()
            changed[[i, i + 1]] = changed[[i + 1, i]]
            return changed
    else:
        value = lambda a: a[::-1].copy()  # noqa: E731
    return Corruption(f"{field}: {kind}", fields, _set(field, value))


_LOOKAHEADS: tuple[object, ...] = (
    -1, -(2**63), 2**63, 2**64, 2**40, MAX_POSITION + 2, np.uint64(1), np.int64(2), np.int8(1),
    np.uint64(2**63), 1.0, True, "1", None,
)  # fmt: skip


@st.composite
def _scalar_corruption(
    draw: st.DrawFn, scenario: GatherScenario, lookahead: bool = True
) -> Corruption:
    if lookahead and draw(st.booleans()):
        value = draw(st.sampled_from(_LOOKAHEADS))
        return Corruption(
            f"draft_lookahead = {value!r}",
            ("draft_lookahead", "num_computed_tokens"),
            _set("draft_lookahead", value),
        )
    total = scenario.num_tokens
    options: tuple[object, ...] = (
        total + 1, total - 1, float(total), str(total), np.int64(total), np.uint64(total),
        None, -1, 2**64,
    )  # fmt: skip
    value = draw(st.sampled_from(options))
    return Corruption(f"total = {value!r}", _OFFSET_NAMES, _set("total", value))


@st.composite
def _req_ids_corruption(draw: st.DrawFn, scenario: GatherScenario) -> Corruption:
    ids = scenario.req_ids
    kinds = ["tuple", "str", "extra"]
    if ids:
        kinds += ["unknown", "int", "None", "drop"]
    if len(ids) > 1:
        kinds.append("duplicate")
    kind = draw(st.sampled_from(kinds))
    i = draw(st.integers(0, max(len(ids) - 1, 0)))

    def change(current: list[Any]) -> Any:
        changed = list(current)
        if kind == "tuple":
            return tuple(changed)
        if kind == "str":
            return "".join(str(r) for r in changed)
        if kind == "extra":
            return [*changed, "ghost"]
        if kind == "drop":
            return changed[:i] + changed[i + 1 :]
        if kind == "duplicate":
            changed[(i + 1) % len(changed)] = changed[i]
            return changed
        changed[i] = {"unknown": "ghost", "int": 7, "None": None}[kind]
        return changed

    fields = ("req_ids", "num_reqs", *ARRAY_FIELDS)
    return Corruption(f"req_ids: {kind} [{i}]", fields, _set("req_ids", change))


@st.composite
def _batch_field_corruption(draw: st.DrawFn, scenario: GatherScenario, real: bool) -> Corruption:
    n = len(scenario.requests)
    total = scenario.num_tokens
    choices = ["num_reqs"]
    if real:
        choices += ["num_tokens_after_padding", "input_ids"]
    field = draw(st.sampled_from(choices))
    if field == "num_reqs":
        value: object = draw(st.sampled_from([n + 1, n - 1, float(n), "n", np.int64(n), None]))
        return Corruption(f"num_reqs = {value!r}", ("num_reqs",), _set("num_reqs", value))
    if field == "num_tokens_after_padding":
        padded = total + scenario.padding
        value = draw(
            st.sampled_from(
                [total - 1, padded + 1000, -1, float(padded), np.int64(padded), None, 2**63]
            )
        )
        return Corruption(
            f"num_tokens_after_padding = {value!r}",
            ("num_tokens_after_padding", "num_tokens", "max_num_tokens"),
            _set("num_tokens_after_padding", value),
        )
    kinds = ["float", "2-D", "numpy", "list", "bool", "meta", "short", "int32"]
    if total:
        kinds += ["negative", "vocab"]
    kind = draw(st.sampled_from(kinds))
    i = draw(st.integers(0, max(total - 1, 0)))

    def change(ids: torch.Tensor) -> Any:
        if kind == "float":
            return ids.to(torch.float32)
        if kind == "2-D":
            return ids.reshape(1, -1)
        if kind == "numpy":
            return ids.numpy()
        if kind == "list":
            return ids.tolist()
        if kind == "bool":
            return ids.to(torch.bool)
        if kind == "meta":
            return ids.to("meta")
        if kind == "short":
            return ids[: max(total - 1, 0)] if total else ids[:0]
        if kind == "int32":
            return ids.to(torch.int32)
        changed = ids.clone()
        changed[i] = -1 if kind == "negative" else 1000
        return changed

    fields = ("input_ids", "num_tokens")
    return Corruption(f"input_ids: {kind} [{i}]", fields, _set("input_ids", change))


@st.composite
def _schedule_corruption(draw: st.DrawFn, scenario: GatherScenario) -> Corruption:
    requests = [r for r in scenario.requests if r.features] or list(scenario.requests)
    req_id = draw(st.sampled_from([r.req_id for r in requests])) if requests else "ghost"
    count = next((len(r.features) for r in requests if r.req_id == req_id), 0)
    options: list[object] = [count, -1, "0", 0.0, True, None, [0], 2**64]
    if count:
        options.append(np.int64(count - 1))
    whole = draw(st.sampled_from(["item", "item", "value", "mapping", "request"]))
    if whole == "item":
        value = draw(st.sampled_from(options))
        name = f"scheduled_encoder_inputs[{req_id!r}] holds {value!r}"
        new: Callable[[Any], Any] = lambda s: {**s, req_id: [value]}  # noqa: E731
    elif whole == "value":
        value = draw(st.sampled_from([None, 0, "0", {0}, range(count)]))
        name = f"scheduled_encoder_inputs[{req_id!r}] = {value!r}"
        new = lambda s: {**s, req_id: value}  # noqa: E731
    elif whole == "mapping":
        value = draw(st.sampled_from([None, [], [0], "a"]))
        name = f"scheduled_encoder_inputs = {value!r}"
        new = lambda s: value  # noqa: E731
    else:
        value = draw(st.sampled_from(["ghost", 3, None]))
        name = f"scheduled_encoder_inputs names request {value!r}"
        new = lambda s: {**s, value: [0]}  # noqa: E731
    return Corruption(name, ("scheduled_encoder_inputs",), _set("scheduled_encoder_inputs", new))


def _cached_ids(scenario: GatherScenario) -> list[tuple[str, str, int]]:
    """``(req_id, identifier, num_embeds)`` of every cached feature, batch requests first."""
    return [
        (r.req_id, f.identifier, f.num_embeds)
        for r in (*scenario.requests, *scenario.extra_requests)
        for f in r.features
        if f.cached
    ]


def _broken_output(kind: str, rows: int, hidden: int) -> object:
    if kind == "numpy":
        return np.ones((rows, hidden), dtype=np.float32)
    if kind == "list":
        return [[1.0] * hidden for _ in range(rows)]
    if kind == "rows":
        return torch.ones(rows + 1, hidden)
    if kind == "width":
        return torch.ones(rows, hidden + 1)
    if kind == "meta":
        return torch.ones(rows, hidden, device="meta")
    if kind == "1-D":
        return torch.ones(rows * hidden)
    return torch.ones(hidden, rows)  # transposed


_OUTPUT_KINDS = (
    "numpy", "list", "rows", "width", "meta", "1-D", "transposed", "removed",
    "requires grad", "written in place",
)  # fmt: skip


def _warm(world: FuzzWorld) -> None:
    """Make the valid call on the runner, the plan's rows and the real path, so that the
    objects hold whatever they keep of the cache's outputs (copies, for one)."""
    valid = StepInputs.valid(world, int_dtype=np.int64, dummy_tokens=0)
    targets: tuple[Target, ...] = ("runner", "plan", "real")
    for target in targets:
        with contextlib.suppress(ValueError, RuntimeError):  # a miss (G7) is fine here
            run_target(target, world, valid)


@st.composite
def _cache_corruption(draw: st.DrawFn, scenario: GatherScenario) -> Corruption:
    cached = _cached_ids(scenario)
    with_features = [r for r in scenario.requests if r.features]
    choices = []
    if cached:
        choices.append("output")
    if with_features:
        choices.append("features")
    if not choices:
        return draw(_scalar_corruption(scenario))
    hidden = scenario.hidden_size
    if draw(st.sampled_from(choices)) == "output":
        _, identifier, rows = draw(st.sampled_from(cached))
        kind = draw(st.sampled_from(_OUTPUT_KINDS))

        def apply(inputs: StepInputs, world: FuzzWorld) -> Restore:
            outputs = world.cache.encoder_outputs
            original = outputs[identifier]
            saved = original.clone()
            if kind == "removed":
                del outputs[identifier]
            elif kind == "requires grad":  # legal: any tensor may be stored (C1)
                outputs[identifier] = original.clone().requires_grad_()
            elif kind == "written in place":  # after the objects have seen the old values
                _warm(world)
                if world.validate:
                    original.mul_(-2.0).add_(0.5)
                else:  # C2a: outside the domain without validation; the allowed change (C1)
                    outputs[identifier] = original.clone().mul_(-2.0).add_(0.5)
            else:
                outputs[identifier] = _broken_output(kind, rows, hidden)  # type: ignore[assignment]

            def restore() -> None:
                outputs[identifier] = original
                original.copy_(saved)  # a write in place too, to be picked up

            return restore

        return Corruption(
            f"encoder_outputs[{identifier!r}]: {kind}", (identifier, "encoder output"), apply
        )
    request = draw(st.sampled_from(with_features))
    specs = request.features
    kind = draw(st.sampled_from(["meta is_embed", "past the end", "int is_embed", "unsorted"]))
    k = draw(st.integers(0, len(specs) - 1))
    identifier = specs[k].identifier

    def apply_features(inputs: StepInputs, world: FuzzWorld) -> Restore:
        original = world.cache.mm_features[request.req_id]
        changed = list(original)
        feature = changed[k]
        position = feature.mm_position
        nonlocal_id = feature.identifier
        if kind == "meta is_embed":
            changed[k] = MultiModalFeature(
                nonlocal_id,
                feature.modality,
                unchecked_range(position.offset, position.length, meta_mask(position.length)),
                feature.data,
            )
        elif kind == "int is_embed":
            mask = torch.ones(position.length, dtype=torch.int64)
            changed[k] = MultiModalFeature(
                nonlocal_id,
                feature.modality,
                unchecked_range(position.offset, position.length, mask),
                feature.data,
            )
        elif kind == "past the end":
            changed.append(
                MultiModalFeature(
                    f"{request.req_id}-far", "audio", PlaceholderRange(MAX_POSITION - 1, 4)
                )
            )
        else:
            changed.reverse()
        world.cache.mm_features[request.req_id] = changed

        def restore() -> None:
            world.cache.mm_features[request.req_id] = original

        return restore

    far = f"{request.req_id}-far"
    fields: tuple[str, ...] = (identifier, far, "is_embed", request.req_id, "features")
    if kind == "unsorted":
        fields = (*(s.identifier for s in specs), request.req_id)
    return Corruption(f"mm_features[{request.req_id!r}]: {kind} at {k}", fields, apply_features)


@st.composite
def _registration(draw: st.DrawFn, scenario: GatherScenario) -> Corruption:
    """A registration the cache must refuse: the case's call is the registration itself."""
    hidden = scenario.hidden_size
    kind = draw(
        st.sampled_from(
            [
                "meta is_embed", "past the end", "unsorted", "overlapping", "not a feature",
                "non-str req_id", "duplicate request", "output numpy", "output list",
                "output meta", "output rows", "output width", "output of unknown feature",
                "append overlapping",
            ]
        )
    )  # fmt: skip

    def register(inputs: StepInputs, world: FuzzWorld) -> Restore:
        cache = world.cache
        if kind == "meta is_embed":
            cache.add_request(
                "new",
                [MultiModalFeature("m", "audio", unchecked_range(0, 3, meta_mask(3)))],
            )
        elif kind == "past the end":
            far = MultiModalFeature("far", "audio", PlaceholderRange(MAX_POSITION - 1, 4))
            cache.add_request("new", [far])
        elif kind in ("unsorted", "overlapping"):
            second = 0 if kind == "unsorted" else 3
            cache.add_request(
                "new",
                [
                    MultiModalFeature("n0", "audio", PlaceholderRange(2, 4)),
                    MultiModalFeature("n1", "audio", PlaceholderRange(second, 2)),
                ],
            )
        elif kind == "not a feature":
            cache.add_request("new", ["n0"])  # type: ignore[list-item]
        elif kind == "non-str req_id":
            cache.add_request(3, [])  # type: ignore[arg-type]
        elif kind == "duplicate request":
            cache.add_request(scenario.requests[0].req_id if scenario.requests else "r", [])
            cache.add_request(scenario.requests[0].req_id if scenario.requests else "r", [])
        elif kind == "append overlapping":
            cache.add_request("new", [MultiModalFeature("n0", "audio", PlaceholderRange(2, 4))])
            cache.append_feature("new", MultiModalFeature("n1", "audio", PlaceholderRange(3, 2)))
        elif kind == "output of unknown feature":
            cache.put_encoder_output("nobody", torch.ones(2, hidden))
        else:
            cache.add_request("new", [MultiModalFeature("n0", "audio", PlaceholderRange(0, 2))])
            broken = _broken_output(kind.removeprefix("output "), 2, hidden)
            cache.put_encoder_output("n0", broken)  # type: ignore[arg-type]
        return None

    fields: tuple[str, ...] = ("m", "far", "n0", "n1", "req_id", "nobody", "new", "is_embed", "r")
    if scenario.requests:
        fields = (*fields, scenario.requests[0].req_id)
    return Corruption(f"registration: {kind}", fields, register, kind="register")


_SIZES: tuple[object, ...] = (1.5, 0, -1, True, "4", None, 2**40, 2**62)


@st.composite
def _construction(draw: st.DrawFn, scenario: GatherScenario) -> Corruption:
    """A constructor argument no object can work with (or a numpy integer, which is fine)."""
    where = draw(st.sampled_from(["EncoderCache", "EncoderRunner", "ReferenceModelState"]))
    argument = (
        "hidden_size"
        if where == "EncoderCache"
        else draw(st.sampled_from(["hidden_size", "max_num_tokens"]))
    )
    value = draw(st.sampled_from([*_SIZES, "numpy"]))
    name = f"{where}({argument}={value!r})"

    def construct(inputs: StepInputs, world: FuzzWorld) -> Restore:
        from rtmm_protocol import EncoderCache
        from rtmm_protocol.reference import EncoderRunner, ReferenceModelState

        legal = {"hidden_size": scenario.hidden_size, "max_num_tokens": world.max_num_tokens}
        size = np.int64(legal[argument]) if value == "numpy" else value
        kwargs: dict[str, Any] = {**legal, argument: size}
        if where == "EncoderCache":
            EncoderCache(kwargs["hidden_size"])
        elif where == "EncoderRunner":
            runner = EncoderRunner(
                world.model,
                kwargs["max_num_tokens"],
                kwargs["hidden_size"],
                world.cache,
                torch.float32,
                "cpu",
                validate=world.validate,
            )
            if value == "numpy":  # a legal object: the follow-up call uses it
                world.runner = runner
        else:
            state = ReferenceModelState(
                world.model,
                world.cache,
                dtype=torch.float32,
                device="cpu",
                validate=world.validate,
                **kwargs,
            )
            if value == "numpy":
                world.state = state
        return None

    legality = "legal" if value == "numpy" else "illegal"
    if where == "EncoderCache" and value is None:
        legality = "legal"  # a cache need not know its width
    if value in (2**40, 2**62) and where != "ReferenceModelState":
        legality = "dubious"  # no buffer of that size is needed, but refusing is fine
    return Corruption(name, (argument,), construct, kind=f"construct {legality}")


def _out_corruption(kind: str) -> Corruption:
    """The plan's rows into an ``out`` buffer of the ``kind`` named (``fits`` is legal)."""
    return Corruption(f"rows(out=...): {kind}", ("out",), _set("rows_out", kind))


@st.composite
def corruptions(draw: st.DrawFn, target: Target, scenario: GatherScenario) -> Corruption:
    """One corruption that applies to ``target`` on ``scenario``."""
    if target == "dummy":
        value = draw(
            st.sampled_from(
                [-1, 10**6, 1.5, np.int64(3), np.uint8(2), True, "3", None, 2**63, 2**70, 0]
            )
        )
        return Corruption(
            f"dummy_inputs_embeds({value!r})", ("num_tokens",), _set("dummy_tokens", value)
        )
    families = ["array", "array", "array", "scalar", "req_ids", "cache", "register", "construct"]
    if target in ("state_gather", "real"):
        families.append("batch")
    if target == "real":
        families += ["batch", "schedule", "schedule"]
    if target == "plan":
        families += ["out", "out"]
    family = draw(st.sampled_from(families))
    if family == "out":
        return _out_corruption(draw(st.sampled_from(OUT_KINDS)))
    if family == "array":
        return draw(_array_corruption(scenario))
    if family == "scalar":  # the real path takes no look-ahead
        return draw(_scalar_corruption(scenario, lookahead=target != "real"))
    if family == "req_ids":
        return draw(_req_ids_corruption(scenario))
    if family == "cache":
        return draw(_cache_corruption(scenario))
    if family == "register":
        return draw(_registration(scenario))
    if family == "construct":
        return draw(_construction(scenario))
    if family == "batch":
        return draw(_batch_field_corruption(scenario, target == "real"))
    return draw(_schedule_corruption(scenario))
