"""Dummy-run checks (SPEC D1-D5): shape, one persistent buffer, no encoder and no cache,
no allocation, and over-size requests.

A CUDA graph captured during a dummy run keeps reading the tensor it was given; these
clauses are what make it read the real embeddings when it is replayed.
"""

from __future__ import annotations

import torch

from rtmm_conformance.checks.registry import check
from rtmm_conformance.driving.check_run import CheckRun
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


def _views(run: CheckRun, target: object, sizes: list[int]) -> dict[int, torch.Tensor]:
    views: dict[int, torch.Tensor] = {}
    for n in sizes:
        view = _dummy(run, target, n)
        if not isinstance(view, torch.Tensor):
            raise CheckFailure(
                "dummy_inputs_embeds did not return a tensor for a multimodal model",
                expected=f"a tensor of shape ({n}, hidden_size)",
                seen=type(view).__name__,
            )
        views[n] = view
    return views


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
    for n, view in _views(run, built.target, list(range(top + 1))).items():
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
                f"dummy_inputs_embeds({n}) does not have the state's shape, dtype and device",
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
    "Every dummy_inputs_embeds(n) is a view of one buffer, starting at its first row.",
    kinds=("model_state",),
)
def _one_buffer(run: CheckRun) -> None:
    built = run.build()
    top = _max_tokens(run, built.target)
    sizes = sorted({0, 1, 2, top // 2, top - 1, top})
    first = _views(run, built.target, sizes)
    again = _views(run, built.target, sizes)
    reference = first[top]
    for label, views in (("first", first), ("repeated", again)):
        for n, view in views.items():
            if _storage(view) != _storage(reference):
                raise CheckFailure(
                    "dummy_inputs_embeds returned a tensor that is not a view of the one buffer",
                    expected=f"dummy_inputs_embeds({n}) on the storage of dummy_inputs_embeds({top})",
                    seen=f"a different storage on the {label} call (a buffer allocated per call?)",
                )
            if n > 0 and view.data_ptr() != reference.data_ptr():
                raise CheckFailure(
                    "a dummy view does not start at the buffer's first row",
                    expected=f"dummy_inputs_embeds({n}).data_ptr() == that of "
                    f"dummy_inputs_embeds({top})",
                    seen=f"an offset of {view.data_ptr() - reference.data_ptr()} bytes",
                )


@check(
    "D2-real-path-shares-storage",
    "MUST",
    "get_mm_embeddings writes into and returns the same buffer the dummy runs hand out.",
    kinds=("model_state",),
)
def _real_shares(run: CheckRun) -> None:
    step = prepare_real_step(run, _STEP)
    target = step.built.target
    top = _max_tokens(run, target)
    dummy = _views(run, target, [top])[top]
    result = step.get_mm_embeddings(run)
    if _storage(result) != _storage(dummy) or result.data_ptr() != dummy.data_ptr():
        raise CheckFailure(
            "get_mm_embeddings returned a tensor that is not the dummy runs' buffer",
            expected="the first rows of the buffer dummy_inputs_embeds hands out (a CUDA graph "
            "captured on a dummy run reads that buffer)",
            seen="a different storage" if _storage(result) != _storage(dummy) else "another offset",
        )
    n = step.batch.num_tokens
    after = _views(run, target, [top])[top]
    if not comparisons.equal(after[:n].detach().cpu(), result[:n].detach().cpu()):
        raise CheckFailure(
            "the dummy buffer does not hold the rows get_mm_embeddings returned",
            expected=f"dummy_inputs_embeds({top})[:{n}] equal to the returned rows",
            seen="different values: the real path wrote elsewhere",
        )


@check(
    "D3-dummy-no-encoder-no-cache",
    "MUST",
    "A dummy run neither calls the encoder nor reads or writes the encoder cache, realtime models included.",
    kinds=("model_state",),
)
def _no_encoder(run: CheckRun) -> None:
    step = prepare_real_step(run, _STEP)
    target = step.built.target
    top = _max_tokens(run, target)
    _views(run, target, sorted({0, 1, top // 2, top}))
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


@check(
    "D4-dummy-no-allocation",
    "MUST",
    "A dummy run allocates no device memory (CUDA allocator statistics unchanged).",
    kinds=("model_state",),
    needs_cuda=True,
)
def _no_allocation(run: CheckRun) -> None:
    built = run.build()
    target = built.target
    top = _max_tokens(run, target)
    device = run.device
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_stats(device)
    _views(run, target, sorted({0, 1, top // 2, top}))
    torch.cuda.synchronize(device)
    after = torch.cuda.memory_stats(device)
    key = "allocation.all.allocated"
    if after.get(key, 0) != before.get(key, 0):
        raise CheckFailure(
            "a dummy run allocated device memory",
            expected="CUDA allocator statistics unchanged by dummy_inputs_embeds",
            seen=f"{after.get(key, 0) - before.get(key, 0)} new allocation(s)",
        )


@check(
    "D5-oversize-raises",
    "SHOULD",
    "dummy_inputs_embeds(n) with n > max_num_tokens or n < 0 raises ValueError naming both numbers.",
    profile="robustness",
    kinds=("model_state",),
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
