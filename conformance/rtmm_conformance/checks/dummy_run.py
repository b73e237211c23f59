"""Dummy-run checks (SPEC D1-D5): shape, one persistent buffer, no encoder and no cache,
no allocation, and over-size requests.

A CUDA graph captured during a dummy run keeps reading the tensor it was given; these
clauses are what make it read the real embeddings when it is replayed. For a state with
the model-inputs hooks (SPEC M1) a dummy run is what the runner makes of it: a capture
reads the ``inputs_embeds`` of ``prepare_dummy_inputs``, an eager dummy run those of
``dummy_inputs_embeds`` overridden by ``prepare_inputs``
(:mod:`~rtmm_conformance.driving.model_inputs`), and the checks judge those.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from rtmm_conformance.checks.registry import check
from rtmm_conformance.clauses import STATE_KINDS
from rtmm_conformance.driving.check_run import CheckRun
from rtmm_conformance.driving.context import ConformanceContext
from rtmm_conformance.driving.model_inputs import (
    ModelInputs,
    capture_inputs,
    eager_dummy_inputs,
    has_hooks,
)
from rtmm_conformance.driving.real_step import prepare_real_step
from rtmm_conformance.results import CheckFailure
from rtmm_protocol.testing import comparisons
from rtmm_protocol.testing.scenario import FeatureSpec, GatherScenario, RequestSpec

__all__: list[str] = []

# A step with a prompt chunk and a realtime-style decode, encoder inputs pending.
_STEP = GatherScenario(
    requests=(
        RequestSpec(
            "a", 12, 0, 6, (FeatureSpec("a0", 1, 3), FeatureSpec("a1", 4, 2, cached=False))
        ),
        RequestSpec("b", 3, 4, 2, (FeatureSpec("b0", 4, 3, cached=False),)),
    ),
    padding=2,
)


def _max_tokens(run: CheckRun, target: object) -> int:
    value = getattr(target, "max_num_tokens", None)
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 4096:
        return value
    return run.settings.max_num_tokens


def _dummy(run: CheckRun, target: object, n: int) -> object:
    return run.call(
        f"dummy_inputs_embeds({n})",
        target.dummy_inputs_embeds,  # type: ignore[attr-defined]  # a ModelState
        n,
    )


def _dummy_runs(run: CheckRun, target: object, n: int) -> list[ModelInputs]:
    """What the model receives in the dummy runs of ``n`` tokens: a capture's and an eager
    run's for a state with the hooks, else ``dummy_inputs_embeds(n)``."""
    if has_hooks(target):
        return [capture_inputs(run, target, n), eager_dummy_inputs(run, target, n)]
    return [capture_inputs(run, target, n)]


def _sizes(target: object, sizes: list[int]) -> list[int]:
    """The dummy-run sizes to check: a runner never makes a dummy batch of no tokens, so a
    state with the hooks is not asked for one."""
    return [n for n in sizes if n > 0] if has_hooks(target) else sizes


def _views(run: CheckRun, target: object, sizes: list[int]) -> dict[int, list[ModelInputs]]:
    """The dummy runs of each size, each of which must hand the model a tensor."""
    views: dict[int, list[ModelInputs]] = {}
    for n in _sizes(target, sizes):
        runs = _dummy_runs(run, target, n)
        for inputs in runs:
            if inputs.tensor() is None:
                raise CheckFailure(
                    "a dummy run hands a multimodal model no inputs_embeds",
                    expected=f"a tensor of shape ({n}, hidden_size) from {inputs.through}",
                    seen=type(inputs.inputs_embeds).__name__,
                )
        views[n] = runs
    return views


def _tensor(inputs: ModelInputs) -> torch.Tensor:
    tensor = inputs.tensor()
    assert tensor is not None  # checked by _views
    return tensor


@check(
    "D1-dummy-shape-dtype-device",
    "MUST",
    "dummy_inputs_embeds(n) has shape (n, hidden_size) and the state's dtype and device for every 0 <= n <= max_num_tokens.",
    kinds=("model_state",),
)
def _shape(run: CheckRun) -> None:
    built = run.build()
    ctx = built.ctx
    top = _max_tokens(run, built.target)
    for n, runs in _views(run, built.target, list(range(top + 1))).items():
        for inputs in runs:
            _judge_shape(ctx, n, inputs)


def _judge_shape(ctx: ConformanceContext, n: int, inputs: ModelInputs) -> None:
    """D1 on one dummy run of ``n`` tokens."""
    view = _tensor(inputs)
    problems = []
    if tuple(view.shape) != (n, ctx.hidden_size):
        problems.append(f"shape {tuple(view.shape)}")
    if view.dtype != ctx.dtype:
        problems.append(f"dtype {view.dtype}")
    if view.device.type != ctx.device.type or (
        ctx.device.index is not None and view.device.index != ctx.device.index
    ):
        problems.append(f"device {view.device}")
    if problems:
        raise CheckFailure(
            f"the inputs_embeds of {inputs.through} do not have the state's shape, dtype "
            "and device",
            expected=f"shape ({n}, {ctx.hidden_size}), dtype {ctx.dtype}, device {ctx.device}",
            seen=", ".join(problems),
        )


@check(
    "D1-text-only-returns-none",
    "SHOULD",
    "A state built for a text-only model returns None from dummy_inputs_embeds.",
    profile="robustness",
    kinds=("model_state",),
    modes=("text-only",),
    prerequisites=("T2-no-renamed-parameters",),
)
def _text_only(run: CheckRun) -> None:
    built = run.build()
    top = _max_tokens(run, built.target)
    for n in (0, 1, top):
        value = _dummy(run, built.target, n)
        if value is not None:
            raise CheckFailure(
                "a state built for a text-only model returned a dummy buffer",
                expected=f"dummy_inputs_embeds({n}) is None (the model has no encoder)",
                seen=f"{type(value).__name__}",
            )


def _storage(view: torch.Tensor) -> int:
    return view.untyped_storage().data_ptr()


@check(
    "D2-dummy-views-share-storage",
    "MUST",
    "Every dummy run's inputs_embeds (dummy_inputs_embeds(n), or with the hooks a capture's and an eager run's) is a view of one buffer, starting at its first row.",
    kinds=("model_state",),
)
def _one_buffer(run: CheckRun) -> None:
    built = run.build()
    top = _max_tokens(run, built.target)
    sizes = sorted({0, 1, 2, top // 2, top - 1, top})
    first = _views(run, built.target, sizes)
    again = _views(run, built.target, sizes)
    reference = first[top][0]
    buffer = _tensor(reference)
    for label, views in (("first", first), ("repeated", again)):
        for n, runs in views.items():
            for inputs in runs:
                view = _tensor(inputs)
                if _storage(view) != _storage(buffer):
                    raise CheckFailure(
                        "a dummy run's inputs_embeds are not a view of the one buffer",
                        expected=f"{inputs.through} on the storage of {reference.through}",
                        seen=f"a different storage on the {label} call (a buffer allocated "
                        "per call?)",
                    )
                if n > 0 and view.data_ptr() != buffer.data_ptr():
                    raise CheckFailure(
                        "a dummy run's inputs_embeds do not start at the buffer's first row",
                        expected=f"{inputs.through} starting where {reference.through} starts",
                        seen=f"an offset of {view.data_ptr() - buffer.data_ptr()} bytes",
                    )


@check(
    "D2-real-path-shares-storage",
    "MUST",
    "A real step hands the model (get_mm_embeddings, or with the hooks prepare_inputs' overrides) the buffer a capture reads, from its first row, and writes its rows there.",
    kinds=("model_state",),
)
def _real_shares(run: CheckRun) -> None:
    step = prepare_real_step(run, _STEP)
    target = step.built.target
    top = _max_tokens(run, target)
    captured = _views(run, target, [top])[top][0]  # what a graph captured before the step reads
    buffer = _tensor(captured)
    inputs = step.model_inputs(run)
    result = inputs.tensor()
    if result is None:
        raise CheckFailure(
            "a real step hands a multimodal model no inputs_embeds",
            expected=f"the first rows of the buffer {captured.through} hands out",
            seen=f"{type(inputs.inputs_embeds).__name__} from {inputs.through}",
        )
    if _storage(result) != _storage(buffer) or result.data_ptr() != buffer.data_ptr():
        raise CheckFailure(
            f"the inputs_embeds of a real step ({inputs.through}) are not the buffer a "
            "capture reads",
            expected=f"the first rows of the buffer {captured.through} hands out (a CUDA graph "
            "captured on a dummy run reads that buffer)",
            seen="a different storage"
            if _storage(result) != _storage(buffer)
            else "another offset",
        )
    n = step.batch.num_tokens
    if not comparisons.equal(buffer[:n].detach().cpu(), result[:n].detach().cpu()):
        raise CheckFailure(
            "the buffer a capture reads does not hold the rows of the real step",
            expected=f"{captured.through}[:{n}], taken before the step, equal to the rows the "
            f"model receives ({inputs.through})",
            seen="different values: the real step wrote elsewhere",
        )


@check(
    "D3-dummy-no-encoder-no-cache",
    "MUST",
    "A dummy run neither calls the encoder nor reads or writes the encoder cache, realtime models included.",
    kinds=STATE_KINDS,
)
def _no_encoder(run: CheckRun) -> None:
    step = prepare_real_step(run, _STEP)
    target = step.built.target
    top = _max_tokens(run, target)
    for n in _sizes(target, sorted({0, 1, top // 2, top})):
        _dummy_runs(run, target, n)  # what they return is D1's and D2's to judge
    calls = len(step.built.encoder_log.calls)
    cache = step.built.cache
    touched = {
        "mm_features": sorted(
            map(str, cache.recording_features.reads | cache.recording_features.writes)
        ),
        "encoder_outputs": sorted(
            map(str, cache.recording_outputs.reads | cache.recording_outputs.writes)
        ),
    }
    if calls or any(touched.values()):
        seen = []
        if calls:
            seen.append(f"{calls} encoder call(s)")
        seen.extend(f"{name} keys {keys}" for name, keys in touched.items() if keys)
        raise CheckFailure(
            "a dummy run called the encoder or touched the encoder cache",
            expected="no embed_multimodal call and no read or write of the cache",
            seen="; ".join(seen),
        )


def _allocated(device: torch.device, call: Callable[[], object]) -> tuple[object, int, int]:
    """``call()``'s result, and the number and bytes of the device allocations it made."""
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_stats(device)
    result = call()
    torch.cuda.synchronize(device)
    after = torch.cuda.memory_stats(device)
    count, size = "allocation.all.allocated", "allocated_bytes.all.allocated"
    return (
        result,
        after.get(count, 0) - before.get(count, 0),
        after.get(size, 0) - before.get(size, 0),
    )


@check(
    "D4-dummy-no-allocation",
    "MUST",
    "A dummy run allocates no device memory (CUDA allocator statistics unchanged); with the hooks, a capture allocates none for the inputs_embeds it hands the model.",
    kinds=("model_state",),
    needs_cuda=True,
)
def _no_allocation(run: CheckRun) -> None:
    built = run.build()
    target = built.target
    top = _max_tokens(run, target)
    device = run.device
    sizes = sorted({0, 1, top // 2, top})
    _, count, _ = _allocated(device, lambda: [_dummy(run, target, n) for n in sizes])
    if count:
        raise CheckFailure(
            "a dummy run allocated device memory",
            expected="CUDA allocator statistics unchanged by dummy_inputs_embeds",
            seen=f"{count} new allocation(s)",
        )
    if not has_hooks(target):
        return
    for n in _sizes(target, sizes):
        capture_inputs(run, target, n)  # a first capture may set up what it keeps
        inputs, _, grown = _allocated(device, functools.partial(capture_inputs, run, target, n))
        assert isinstance(inputs, ModelInputs)
        embeds = inputs.tensor()
        if embeds is not None and embeds.numel() and grown >= embeds.untyped_storage().nbytes():
            raise CheckFailure(
                f"a capture ({inputs.through}) allocated the inputs_embeds it hands the model",
                expected="a view of the buffer allocated when the state was built",
                seen=f"{grown} bytes allocated during the call, enough for the inputs_embeds",
            )


@check(
    "D5-oversize-raises",
    "SHOULD",
    "dummy_inputs_embeds(n) with n > max_num_tokens or n < 0 raises ValueError naming both numbers.",
    profile="robustness",
    kinds=STATE_KINDS,
)
def _oversize(run: CheckRun) -> None:
    built = run.build()
    target = built.target
    top = _max_tokens(run, target)
    for n, facts in ((top + 1, (str(top + 1), str(top))), (-1, ("-1",))):
        try:
            value = target.dummy_inputs_embeds(n)  # type: ignore[attr-defined]  # a ModelState
        except ValueError as error:
            missing = [fact for fact in facts if fact not in str(error)]
            if missing:
                raise CheckFailure(
                    f"the ValueError for dummy_inputs_embeds({n}) does not name the numbers",
                    expected=f"a message naming {' and '.join(facts)}",
                    seen=str(error),
                ) from None
            continue
        except Exception as error:
            raise CheckFailure(
                f"dummy_inputs_embeds({n}) raised something other than ValueError",
                expected="ValueError naming the requested and the maximum number of tokens",
                seen=f"{type(error).__name__}: {error}",
            ) from None
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise CheckFailure(
            f"dummy_inputs_embeds({n}) with max_num_tokens={top} did not raise",
            expected="ValueError naming both numbers",
            seen=f"a result ({shape})",
        )
