"""Bad-input checks (SPEC E1-E3): malformed batches and features are rejected cleanly.

For third-party targets E1 and E2 are SHOULD: a ``ValueError`` or ``TypeError`` is
accepted. E3 is MUST: no other exception, no write to the cache or the buffer by a
rejected call, and nothing silently cut short.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch

from rtmm_conformance.checks.registry import check
from rtmm_conformance.driving.check_run import Built, CheckRun
from rtmm_conformance.driving.gather_call import describe_error
from rtmm_conformance.results import CheckFailure
from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.placeholder import PlaceholderRange
from rtmm_protocol.testing.input_batch import ReferenceInputBatch
from rtmm_protocol.testing.request_states import request_states_for
from rtmm_protocol.testing.scenario import FeatureSpec, GatherScenario, RequestSpec
from rtmm_protocol.testing.snapshots import CacheSnapshot, tensor_changes

__all__: list[str] = []

_ACCEPTED = (ValueError, TypeError)

# Two prompt requests with features in their windows, every output cached.
_BASE = GatherScenario(
    requests=(
        RequestSpec("a", 10, 0, 4, (FeatureSpec("a0", 1, 2),)),
        RequestSpec("b", 10, 2, 3, (FeatureSpec("b0", 2, 3),)),
    )
)


def _load_base(built: Built, run: CheckRun) -> None:
    _BASE.load_into(built.cache, run.device)


@dataclass(frozen=True)
class _BadInput:
    """One malformed input: what is wrong, the words an error should name, and the call.

    ``prepare`` fills the cache before the call (and before the snapshot that tells
    whether the call wrote anything).
    """

    what: str
    names: tuple[str, ...]
    call: Callable[[Built, CheckRun], object]
    uses_real_path: bool = False
    prepare: Callable[[Built, CheckRun], None] = _load_base


def _gather_arrays(
    scenario: GatherScenario = _BASE, **changes: object
) -> Callable[[Built, CheckRun], object]:
    """A runner-level gather call on ``scenario`` with some arguments replaced."""

    def call(built: Built, run: CheckRun) -> object:
        arrays: dict[str, object] = dict(scenario.arrays())
        arguments: dict[str, object] = {
            "req_ids": list(scenario.req_ids),
            "total_num_scheduled_tokens": scenario.num_tokens,
            "num_scheduled_tokens": arrays["num_scheduled_tokens"],
            "query_start_loc": arrays["query_start_loc"],
            "prefill_lens": arrays["prefill_lens"],
            "num_computed_tokens": arrays["num_computed_tokens"],
            "draft_lookahead": 0,
        }
        arguments.update(changes)
        return built.target.gather_mm_embeddings(  # type: ignore[attr-defined]
            arguments["req_ids"],
            arguments["total_num_scheduled_tokens"],
            arguments["num_scheduled_tokens"],
            arguments["query_start_loc"],
            arguments["prefill_lens"],
            num_computed_tokens=arguments["num_computed_tokens"],
            draft_lookahead=arguments["draft_lookahead"],
        )

    return call


def _batch_call(
    real_path: bool, lookahead: int = 0, scenario: GatherScenario = _BASE, **changes: object
) -> Callable[[Built, CheckRun], object]:
    """A state-level call (gather, or the real path) with a batch whose fields disagree."""

    def call(built: Built, run: CheckRun) -> object:
        batch = replace(scenario.input_batch(run.device), **changes)  # type: ignore[arg-type]
        target = built.target
        if real_path:
            return target.get_mm_embeddings({}, batch, request_states_for(batch))  # type: ignore[attr-defined]
        return target.gather_mm_embeddings(batch, draft_lookahead=lookahead)  # type: ignore[attr-defined]

    return call


def _ints(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int32)


def _malformed_batches(kind: str) -> list[_BadInput]:
    if kind == "gatherer":
        g = _gather_arrays
        return [
            _BadInput("num_scheduled_tokens has 3 entries for 2 requests", ("num_scheduled_tokens",), g(num_scheduled_tokens=_ints(4, 3, 1))),
            _BadInput("prefill_lens has 1 entry for 2 requests", ("prefill_len",), g(prefill_lens=_ints(10))),
            _BadInput("num_computed_tokens has 3 entries for 2 requests", ("num_computed_tokens",), g(num_computed_tokens=_ints(0, 2, 0))),
            _BadInput("query_start_loc starts at 1", ("query_start_loc",), g(query_start_loc=_ints(1, 5, 8))),
            _BadInput("query_start_loc steps differ from num_scheduled_tokens", ("query_start_loc", "num_scheduled_tokens"), g(query_start_loc=_ints(0, 3, 7))),
            _BadInput("a negative num_scheduled_tokens", ("num_scheduled_tokens",), g(num_scheduled_tokens=_ints(4, -1), query_start_loc=_ints(0, 4, 3), total_num_scheduled_tokens=3)),
            _BadInput("a negative num_computed_tokens", ("num_computed_tokens",), g(num_computed_tokens=_ints(0, -2))),
            _BadInput("a negative draft_lookahead", ("draft_lookahead", "lookahead"), g(draft_lookahead=-1)),
            _BadInput("total_num_scheduled_tokens disagrees with the sum", ("total_num_scheduled_tokens",), g(total_num_scheduled_tokens=9)),
            _BadInput("an unknown req_id", ("zz", "req_id"), g(req_ids=["a", "zz"])),
        ]  # fmt: skip
    cases = []
    for real in (False, True):
        path = "get_mm_embeddings" if real else "gather_mm_embeddings"
        b = _batch_call
        cases += [
            _BadInput(f"{path}: num_scheduled_tokens has 3 entries for 2 requests", ("num_scheduled_tokens",), b(real, num_scheduled_tokens=_ints(4, 3, 1)), real),
            _BadInput(f"{path}: prefill_len_np has 1 entry for 2 requests", ("prefill_len",), b(real, prefill_len_np=_ints(10)), real),
            _BadInput(f"{path}: num_computed_tokens_np has 3 entries for 2 requests", ("num_computed_tokens",), b(real, num_computed_tokens_np=_ints(0, 2, 0)), real),
            _BadInput(f"{path}: query_start_loc_np starts at 1", ("query_start_loc",), b(real, query_start_loc_np=_ints(1, 5, 8)), real),
            _BadInput(f"{path}: query_start_loc_np steps differ from num_scheduled_tokens", ("query_start_loc", "num_scheduled_tokens"), b(real, query_start_loc_np=_ints(0, 3, 7)), real),
            _BadInput(f"{path}: a negative num_computed_tokens", ("num_computed_tokens",), b(real, num_computed_tokens_np=_ints(0, -2)), real),
            _BadInput(f"{path}: num_tokens disagrees with the sum", ("num_tokens", "total_num_scheduled_tokens"), b(real, num_tokens=6, num_tokens_after_padding=7), real),
            _BadInput(f"{path}: an unknown req_id", ("zz", "req_id"), b(real, req_ids=["a", "zz"]), real),
        ]  # fmt: skip
    cases.append(
        _BadInput("gather_mm_embeddings: a negative draft_lookahead", ("draft_lookahead", "lookahead"), _batch_call(False, lookahead=-1))
    )  # fmt: skip
    return cases


# ---------------------------------------------------------------------- malformed features


def _feature(
    identifier: str, offset: int, length: int, mask: torch.Tensor | None = None
) -> MultiModalFeature:
    position = PlaceholderRange(offset, length)
    if mask is not None:
        # Bypass the constructor's checks: the target must catch what registration would.
        object.__setattr__(position, "is_embed", mask)
    return MultiModalFeature(identifier, "audio", position)


_ONE_REQUEST = GatherScenario(requests=(RequestSpec("a", 20, 0, 8),))


def _store(
    features: list[MultiModalFeature], outputs: dict[str, tuple[int, int]]
) -> Callable[[Built, CheckRun], None]:
    """Put malformed features and outputs straight into the cache, bypassing its checks."""

    def prepare(built: Built, run: CheckRun) -> None:
        cache = built.cache
        with cache.paused():
            dict.__setitem__(cache.mm_features, "a", features)
            for identifier, (rows, width) in outputs.items():
                value = torch.arange(rows * width, dtype=torch.float32).reshape(rows, width)
                dict.__setitem__(cache.encoder_outputs, identifier, value.to(run.device))
        cache.forget()

    return prepare


def _gather_one_request(built: Built, run: CheckRun) -> object:
    if built.kind != "gatherer":
        return _batch_call(False, scenario=_ONE_REQUEST)(built, run)
    return _gather_arrays(_ONE_REQUEST)(built, run)


def _bad_feature(
    what: str,
    names: tuple[str, ...],
    features: list[MultiModalFeature],
    outputs: dict[str, tuple[int, int]],
) -> _BadInput:
    return _BadInput(
        f"{what} ({_describe_case(features, outputs)})",
        names,
        _gather_one_request,
        prepare=_store(features, outputs),
    )


def _describe_case(features: list[MultiModalFeature], outputs: dict[str, tuple[int, int]]) -> str:
    """The exact case: each feature's placeholder and mask, each output's shape."""
    parts = []
    for feature in features:
        pos = feature.mm_position
        mask = pos.is_embed
        masked = (
            ""
            if mask is None
            else f", is_embed {mask.dtype} of length {mask.shape[0] if mask.dim() else 0}"
        )
        shape = outputs.get(feature.identifier)
        output = "no output" if shape is None else f"output shape {shape}"
        parts.append(
            f"feature {feature.identifier!r} at [{pos.offset}, {pos.offset + pos.length}){masked}, "
            f"{output}"
        )
    return "; ".join(parts)


def _malformed_features(hidden: int) -> list[_BadInput]:
    f = _feature
    return [
        _bad_feature("features not sorted by offset", ("a0", "a1"), [f("a1", 5, 2), f("a0", 1, 2)], {"a0": (2, hidden), "a1": (2, hidden)}),
        _bad_feature("overlapping features", ("a0", "a1"), [f("a0", 1, 4), f("a1", 3, 3)], {"a0": (4, hidden), "a1": (3, hidden)}),
        _bad_feature("is_embed of the wrong length", ("a0",), [f("a0", 1, 4, torch.ones(3, dtype=torch.bool))], {"a0": (3, hidden)}),
        _bad_feature("is_embed of the wrong dtype", ("a0",), [f("a0", 1, 4, torch.ones(4, dtype=torch.int64))], {"a0": (4, hidden)}),
        _bad_feature("an encoder output with more rows than num_embeds", ("a0",), [f("a0", 1, 3)], {"a0": (5, hidden)}),
        _bad_feature("an encoder output with fewer rows than num_embeds", ("a0",), [f("a0", 1, 4)], {"a0": (2, hidden)}),
        _bad_feature("an encoder output of the wrong hidden size", ("a0",), [f("a0", 1, 3)], {"a0": (3, hidden + 1)}),
    ]  # fmt: skip


# ---------------------------------------------------------------------- running them


@dataclass
class _Attempt:
    case: _BadInput
    error: BaseException | None
    result: object
    changes: list[str]


def _attempt(run: CheckRun, case: _BadInput) -> _Attempt:
    built = run.build()
    case.prepare(built, run)
    snapshot = CacheSnapshot.take(built.cache)
    buffer_before = _buffer(run, built) if case.uses_real_path else None
    error: BaseException | None = None
    result: object = None
    try:
        result = case.call(built, run)
    except Exception as raised:  # the type is what the checks judge
        error = raised
    changes = snapshot.changes(built.cache) if error is not None else []
    if error is not None and buffer_before is not None:
        after = _buffer(run, built)
        if after is not None:
            changed = tensor_changes(buffer_before, after)
            if changed is not None:
                changes.append(f"the inputs_embeds buffer was written ({changed})")
    return _Attempt(case, error, result, changes)


def _buffer(run: CheckRun, built: Built) -> torch.Tensor | None:
    top = getattr(built.target, "max_num_tokens", run.settings.max_num_tokens)
    try:
        view = built.target.dummy_inputs_embeds(top)  # type: ignore[attr-defined]
    except Exception:
        return None
    return view.detach().to("cpu", copy=True) if isinstance(view, torch.Tensor) else None


def _all_bad_inputs(run: CheckRun) -> list[_BadInput]:
    return [*_malformed_batches(run.kind), *_malformed_features(run.settings.hidden_size)]


@check(
    "E1-malformed-batch-rejected",
    "SHOULD",
    "A malformed batch (disagreeing lengths, bad query_start_loc, negative counts or look-ahead, wrong total, unknown req_id) raises ValueError or TypeError.",
    profile="robustness",
)
def _batch_rejected(run: CheckRun) -> None:
    accepted = [
        a.case.what
        for a in map(lambda c: _attempt(run, c), _malformed_batches(run.kind))
        if a.error is None
    ]
    if accepted:
        raise CheckFailure(
            "malformed batches were accepted",
            expected="ValueError (or TypeError) for each malformed batch, with validation on",
            seen="a result for: " + "; ".join(accepted),
        )


@check(
    "E1-error-names-field",
    "SHOULD",
    "The error raised for a malformed batch names the offending field.",
    profile="robustness",
)
def _names_field(run: CheckRun) -> None:
    unnamed: list[str] = []
    errors: list[BaseException] = []
    for attempt in (_attempt(run, c) for c in _malformed_batches(run.kind)):
        error = attempt.error
        if isinstance(error, _ACCEPTED) and not any(n in str(error) for n in attempt.case.names):
            unnamed.append(f"{attempt.case.what}: {describe_error(error)}")
            errors.append(error)
    if unnamed:
        raise CheckFailure(
            "errors for malformed batches do not name the field",
            expected="a message naming the field (for example num_computed_tokens)",
            seen="; ".join(unnamed[:4]),
        ) from errors[0]


@check(
    "E2-malformed-feature-rejected",
    "SHOULD",
    "Malformed features (unsorted, overlapping, bad is_embed, mis-shaped encoder output) raise ValueError naming the identifier.",
    profile="robustness",
)
def _feature_rejected(run: CheckRun) -> None:
    problems = []
    for attempt in (_attempt(run, c) for c in _malformed_features(run.settings.hidden_size)):
        error = attempt.error
        if error is None:
            problems.append(f"{attempt.case.what}: accepted")
        elif isinstance(error, _ACCEPTED) and not any(n in str(error) for n in attempt.case.names):
            problems.append(f"{attempt.case.what}: the error does not name the identifier")
    if problems:
        raise CheckFailure(
            "malformed features were not rejected with an error naming the identifier",
            expected="ValueError naming the feature's identifier, with validation on",
            seen="; ".join(problems),
        )


@check(
    "E3-bad-input-clean-errors",
    "SHOULD",
    "Bad input raises ValueError or TypeError or is handled, never another exception, and a rejected call leaves the buffer and the cache untouched.",
    profile="robustness",
)
def _clean_errors(run: CheckRun) -> None:
    problems: list[str] = []
    errors: list[BaseException] = []
    for attempt in (_attempt(run, c) for c in _all_bad_inputs(run)):
        error = attempt.error
        if error is not None and not isinstance(error, _ACCEPTED):
            problems.append(f"{attempt.case.what}: {describe_error(error)}")
            errors.append(error)
        if attempt.changes:
            problems.append(
                f"{attempt.case.what}: rejected after a partial write: {attempt.changes[0]}"
            )
    if problems:
        raise CheckFailure(
            "bad input raised something other than ValueError/TypeError, or left a partial write",
            expected="ValueError or TypeError, and the cache and buffer untouched",
            seen="; ".join(problems[:4]),
        ) from (errors[0] if errors else None)


def _oversize_batches(run: CheckRun, top: int) -> list[tuple[str, ReferenceInputBatch]]:
    fits = _BASE.input_batch(run.device)
    padded = replace(fits, num_tokens_after_padding=top + 1)
    padded = replace(padded, input_ids=torch.zeros(top + 1, dtype=torch.int64, device=run.device))
    big = GatherScenario(requests=(RequestSpec("a", 10, 0, 4), RequestSpec("b", top + 8, 0, top)))
    return [
        (f"num_tokens_after_padding = max_num_tokens + 1 = {top + 1}", padded),
        (f"num_tokens = {big.num_tokens} > max_num_tokens = {top}", big.input_batch(run.device)),
    ]


@check(
    "E3-no-silent-truncation",
    "SHOULD",
    "A batch larger than max_num_tokens or an encoder output too short for its placeholder is rejected, not silently cut.",
    profile="robustness",
)
def _no_truncation(run: CheckRun) -> None:
    problems = []
    faults = []
    short = next(c for c in _malformed_features(run.settings.hidden_size) if "fewer rows" in c.what)
    attempt = _attempt(run, short)
    if attempt.error is None:
        problems.append(f"{short.what}: a result instead of an error")
        faults.append(
            "an encoder output shorter than its placeholder's embed positions was accepted"
        )
    if run.kind != "gatherer":
        built = run.build()
        top = getattr(built.target, "max_num_tokens", run.settings.max_num_tokens)
        with built.cache.paused():
            built.cache.add_request("a", [])
            built.cache.add_request("b", [])
        for what, batch in _oversize_batches(run, top):
            try:
                states = request_states_for(batch)
                value = built.target.get_mm_embeddings({}, batch, states)  # type: ignore[attr-defined]
            except Exception:
                continue
            rows = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            if not (
                isinstance(value, torch.Tensor) and value.shape[0] >= batch.num_tokens_after_padding
            ):
                problems.append(f"get_mm_embeddings with {what}: a short result {rows}")
                faults.append("a batch larger than max_num_tokens was silently cut")
    if problems:
        raise CheckFailure(
            "; ".join(dict.fromkeys(faults)),
            expected="an error (ValueError) when the batch exceeds max_num_tokens or an "
            "encoder output is too short for its placeholder",
            seen="; ".join(problems),
        )
