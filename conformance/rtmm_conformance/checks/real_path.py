"""Real-path checks (SPEC R1-R4): encoding the scheduled items once, merging into the buffer,
and decode steps.

Merged embeddings are compared with the tolerance of the run's dtype
(:data:`~rtmm_conformance.settings.MERGE_TOLERANCES`): the merge is arithmetic
in that dtype. R2 compares the returned rows with the model's merge of the state's *own*
gather, so a gather fault does not show up here, or with the merge of the oracle's gather
where the real path does not go through the state's gather method (vLLM's states merge
the runner's gather), so a fault of that method alone does not either; R3 compares decode
steps with the merge of the oracle's gather, which is what the clause is about.

For a state with the model-inputs hooks (SPEC M1) the rows judged are those the model
receives (``prepare_inputs``' ``inputs_embeds`` where it hands some), at the positions of
the gather's mask only: the other rows are the state's own (token embeddings, or its own
such as n-gram embeddings).
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from rtmm_conformance.checks import cases
from rtmm_conformance.checks.registry import check
from rtmm_conformance.clauses import STATE_KINDS
from rtmm_conformance.driving.check_run import CheckRun
from rtmm_conformance.driving.gather_call import describe_error
from rtmm_conformance.driving.model_inputs import has_hooks
from rtmm_conformance.driving.real_step import RealStep, prepare_real_step
from rtmm_conformance.results import CheckFailure
from rtmm_protocol.realtime import supports_realtime
from rtmm_protocol.testing import comparisons
from rtmm_protocol.testing.oracle import oracle_gather
from rtmm_protocol.testing.scenario import GatherScenario
from rtmm_protocol.testing.strategies import gather_scenarios

__all__: list[str] = []


def _steps(run: CheckRun) -> st.SearchStrategy[GatherScenario]:
    """Any step: prompts and decodes, masks, half the outputs still to encode."""
    return gather_scenarios(lookaheads=(0,), cache_miss_rate=0.5)


def _unmasked_steps(run: CheckRun) -> st.SearchStrategy[GatherScenario]:
    """Any step without ``is_embed`` masks (a mask fault cannot break the merge)."""
    return gather_scenarios(lookaheads=(0,), cache_miss_rate=0.5, masks=False)


def _prompt_steps(run: CheckRun) -> st.SearchStrategy[GatherScenario]:
    """Steps whose windows are all in the prompt."""
    return gather_scenarios(windows="prefill", lookaheads=(0,), cache_miss_rate=0.5)


def _decode_steps(run: CheckRun) -> st.SearchStrategy[GatherScenario]:
    """Steps in which every request decodes, without masks."""
    return gather_scenarios(windows="decode", lookaheads=(0,), cache_miss_rate=0.5, masks=False)


def _own_gather_consistent(run: CheckRun, step: RealStep) -> bool:
    """Whether the state's own gather has one row per True mask slot (else G5 fails and a
    merge of it is not defined, so the real-path checks have nothing to judge)."""
    try:
        pieces, mask = step.built.target.gather_mm_embeddings(step.batch)  # type: ignore[attr-defined]
        rows = sum(int(p.shape[0]) for p in pieces)
        return rows == int(mask.to(torch.bool).sum())
    except Exception:
        return False


def _contract_merge(run: CheckRun, step: RealStep) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The model's merge of the contract's gather (the oracle's) for the step, on the cache
    as the step left it, and its mask; ``None`` where that gather raises (an output is
    missing)."""
    scenario = step.scenario
    cache = step.built.cache
    with cache.paused():
        outputs = dict(dict.items(cache.encoder_outputs))
        features = {k: list(v) for k, v in dict.items(cache.mm_features)}
    arrays = scenario.arrays()
    oracle = oracle_gather(
        features,
        outputs,
        is_realtime=supports_realtime(step.model),
        req_ids=scenario.req_ids,
        num_scheduled_tokens=arrays["num_scheduled_tokens"],
        query_start_loc=arrays["query_start_loc"],
        prefill_lens=arrays["prefill_lens"],
        num_computed_tokens=arrays["num_computed_tokens"],
    )
    if oracle.raises:
        return None
    pieces = [outputs[p.identifier][p.row_start : p.row_end] for p in oracle.pieces]
    mask = oracle.mask_tensor()
    merged: torch.Tensor = step.model.embed_input_ids(
        step.batch.input_ids[: step.batch.num_tokens], pieces, mask.to(run.device)
    )
    return merged, mask


def _cached(step: RealStep, identifier: str) -> torch.Tensor | None:
    outputs = step.built.cache.recording_outputs
    with outputs.paused():
        value = outputs.get(identifier)
    return value if isinstance(value, torch.Tensor) else None


def _scheduled_new(step: RealStep) -> list[str]:
    """Identifiers of scheduled items that have inputs and no cached output yet."""
    batch = set(step.scenario.req_ids)
    return [
        f.identifier
        for r in step.scenario.requests
        if r.req_id in batch
        for f in r.features
        if f.identifier in step.inputs and f.identifier not in step.precached
    ]


def _judged_rows(
    step: RealStep, seen: torch.Tensor, expected: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """The rows R2 and R3 judge, and their slots: every row of the step, or only those at
    ``mask``'s True slots for a state with the hooks (SPEC M1)."""
    n = step.batch.num_tokens
    if not has_hooks(step.built.target):
        return seen[:n], expected, list(range(n))
    slots = mask.detach().to("cpu", torch.bool).nonzero().flatten()
    index = slots.to(seen.device)
    return seen[:n][index], expected[slots.to(expected.device)], slots.tolist()


def _close(
    run: CheckRun, seen: torch.Tensor, expected: torch.Tensor, slots: list[int] | None = None
) -> str | None:
    tol = run.settings.tolerance
    seen32 = seen.detach().to("cpu", torch.float32)
    expected32 = expected.detach().to("cpu", torch.float32)
    if seen32.shape != expected32.shape:
        return f"shape {tuple(seen32.shape)} instead of {tuple(expected32.shape)}"
    bad = ~comparisons.isclose(seen32, expected32, rtol=tol.rtol, atol=tol.atol)
    if not bool(bad.any()):
        return None
    rows = comparisons.nonzero(bad.any(dim=1)).flatten().tolist()
    if slots is not None:
        rows = [slots[row] for row in rows]
    worst = float((seen32 - expected32).abs().max())
    return (
        f"rows {rows[:8]}{' ...' if len(rows) > 8 else ''} differ (max abs diff {worst:.3g}, "
        f"tolerance rtol={tol.rtol:g} atol={tol.atol:g})"
    )


@check(
    "R1-encodes-scheduled-items",
    "MUST",
    "get_mm_embeddings runs the encoder for each scheduled item with data and caches its output under the identifier (a cross-attention state, SPEC M2: runs it; caching is its choice).",
    kinds=STATE_KINDS,
    strategy=_steps,
    cases=(*cases.PROMPT_STEP_CASES, *cases.DECODE_STEP_CASES),
)
def _encodes(run: CheckRun, scenario: GatherScenario) -> None:
    step = prepare_real_step(run, scenario)
    _, error = step.attempt()  # encoding comes first; a later failure is another clause's
    raised = f" (get_mm_embeddings raised {describe_error(error)})" if error else ""
    caches = run.kind != "cross_attention"  # SPEC M2: caching is a cross-attention state's choice
    for identifier in _scheduled_new(step):
        # An empty input cannot be told apart from another empty one once the state has
        # batched or sliced it; for such an item the cached output below is the evidence.
        empty = step.inputs[identifier].numel() == 0
        if not empty and step.built.encoder_log.encoded(step.inputs[identifier]) == 0:
            raise CheckFailure(
                f"scheduled item {identifier!r} (with data, not cached) was not encoded",
                expected=f"model.embed_multimodal(**data) called for {identifier!r}",
                seen="no encoder call with its inputs" + raised,
            ) from error
        if not caches:
            continue
        output = _cached(step, identifier)
        if output is None:
            raise CheckFailure(
                f"the output of scheduled item {identifier!r} was not cached",
                expected=f"encoder_cache.encoder_outputs[{identifier!r}] set",
                seen="no entry" + raised,
            ) from error
        wanted = step.model.embed_multimodal(input_features=step.inputs[identifier])[0]
        problem = _close(run, output, wanted)
        if problem is not None:
            raise CheckFailure(
                f"the cached output of {identifier!r} is not the encoder's output",
                expected="model.embed_multimodal(**data)[0]",
                seen=problem,
            )


@check(
    "R1-no-reencode",
    "MUST",
    "Items already cached, or whose data is None, are not encoded again.",
    kinds=STATE_KINDS,
    strategy=_steps,
    cases=(*cases.PROMPT_STEP_CASES, *cases.DECODE_STEP_CASES),
)
def _no_reencode(run: CheckRun, scenario: GatherScenario) -> None:
    step = prepare_real_step(run, scenario)
    cached_before = {i: id(_cached(step, i)) for i in step.precached}
    step.attempt()  # what is encoded is judged, not what happens after
    log = step.built.encoder_log
    # Empty inputs are not identifiable in the log (see R1-encodes-scheduled-items); a
    # cached output that was replaced still shows below.
    known = {i: t for i, t in step.inputs.items() if t.numel() > 0}
    again = [i for i in step.precached if i in known and log.encoded(known[i])]
    twice = [i for i in _scheduled_new(step) if i in known and log.encoded(known[i]) > 1]
    replaced = [i for i, obj in cached_before.items() if id(_cached(step, i)) != obj]
    if again or twice or replaced:
        raise CheckFailure(
            "get_mm_embeddings encoded items whose output was already cached",
            expected="no encoder call for cached items, one per new item",
            seen="; ".join(
                part
                for part in (
                    f"cached items encoded again: {sorted(again)}" if again else "",
                    f"encoded more than once: {sorted(twice)}" if twice else "",
                    f"cached outputs replaced: {sorted(replaced)}" if replaced else "",
                )
                if part
            ),
        )
    if run.kind == "cross_attention":
        return  # SPEC M2: it need not cache, so a second step may encode again
    calls = len(log.calls)
    step.attempt()
    if len(log.calls) != calls:
        raise CheckFailure(
            "a second step with the same scheduled items encoded them again",
            expected="no encoder call: every output is cached after the first step",
            seen=f"{len(log.calls) - calls} more encoder call(s)",
        )


@check(
    "R2-returns-padded-buffer-slice",
    "MUST",
    "get_mm_embeddings returns the first num_tokens_after_padding rows of the buffer.",
    kinds=("model_state",),
    strategy=_unmasked_steps,
    cases=(*cases.PROMPT_STEP_CASES, *cases.DECODE_STEP_CASES),
)
def _padded_slice(run: CheckRun, scenario: GatherScenario) -> None:
    step = prepare_real_step(run, scenario)
    result = step.received(run)
    ctx = step.built.ctx
    wanted = (step.batch.num_tokens_after_padding, ctx.hidden_size)
    if tuple(result.shape) != wanted or result.dtype != ctx.dtype:
        raise CheckFailure(
            "the model does not receive num_tokens_after_padding rows of the buffer",
            expected=f"shape {wanted}, dtype {ctx.dtype}",
            seen=f"shape {tuple(result.shape)}, dtype {result.dtype}",
        )


@check(
    "R2-merged-rows-match-eager",
    "MUST",
    "The first num_tokens rows equal model.embed_input_ids(input_ids[:num_tokens], mm_embeds, is_mm_embed) computed eagerly (per-dtype tolerance).",
    kinds=("model_state",),
    strategy=_prompt_steps,
    cases=cases.PROMPT_STEP_CASES,
)
def _merged_rows(run: CheckRun, scenario: GatherScenario) -> None:
    step = prepare_real_step(run, scenario)
    if has_hooks(step.built.target):
        try:
            inputs = step.model_inputs(run)
        except CheckFailure:
            if not _own_gather_consistent(run, step):
                return  # G5: the state's gather gives a row count that no merge can use
            raise
        result: object = inputs.inputs_embeds
        error: BaseException | None = None
        through = inputs.through
    else:
        result, error = step.attempt()
        through = "get_mm_embeddings"
    if not _own_gather_consistent(run, step):
        return  # G5: the state's gather gives a row count that no merge can use
    if error is not None or not isinstance(result, torch.Tensor):
        raise CheckFailure(
            "the real step failed on a step whose gather is consistent",
            expected="the merged embeddings",
            seen=describe_error(error) if error else f"{type(result).__name__} from {through}",
        ) from error
    n = step.batch.num_tokens
    gathered = run.call(
        "gather_mm_embeddings after get_mm_embeddings",
        step.built.target.gather_mm_embeddings,  # type: ignore[attr-defined]  # a ModelState
        step.batch,
    )
    try:
        pieces, mask = gathered
        expected = step.model.embed_input_ids(step.batch.input_ids[:n], pieces, mask.to(run.device))
    except Exception as merge_error:
        raise CheckFailure(
            "the state's own gather result cannot be merged by the model",
            expected="(list of row tensors, bool mask) that embed_input_ids accepts",
            seen=describe_error(merge_error),
        ) from merge_error
    problem = _close(run, *_judged_rows(step, result, expected, mask))
    if problem is not None:
        contract = _contract_merge(run, step)
        if (
            contract is not None
            and _close(run, *_judged_rows(step, result, contract[0], contract[1])) is None
        ):
            # The real path merges the contract's gather; the state's own gather method
            # differs from it, which is the gather clauses' to judge (vLLM's states merge
            # the runner's gather, whatever a subclass's gather_mm_embeddings returns).
            return
        rows = (
            "the rows at is_mm_embed's slots" if has_hooks(step.built.target) else f"rows [0, {n})"
        )
        raise CheckFailure(
            f"the rows the model receives ({through}) are not model.embed_input_ids of the "
            "step's gather",
            expected=f"{rows} equal to embed_input_ids(input_ids[:{n}], mm_embeds, "
            "is_mm_embed) computed eagerly",
            seen=problem,
        )


@check(
    "R3-decode-steps",
    "MUST",
    "Realtime decode steps get multimodal rows at positions in features; non-realtime decode steps get plain token embeddings.",
    kinds=("model_state",),
    strategy=_decode_steps,
    cases=cases.DECODE_STEP_CASES,
)
def _decode_steps_merge(run: CheckRun, scenario: GatherScenario) -> None:
    step = prepare_real_step(run, scenario)
    result = step.received(run)
    contract = _contract_merge(run, step)
    if contract is None:
        return  # an output the step should have encoded is missing: R1's finding
    expected, mask = contract
    problem = _close(run, *_judged_rows(step, result, expected, mask))
    if problem is not None:
        realtime = supports_realtime(step.model)
        raise CheckFailure(
            "a decode step's embeddings are wrong for this model",
            expected="multimodal rows at decode positions inside features (realtime model)"
            if realtime
            else "plain token embeddings (non-realtime model decoding)",
            seen=problem,
        )
