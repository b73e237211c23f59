"""Model-inputs checks (SPEC M1, M2): a state's model-inputs hooks hand the model inputs,
a cross-attention state hands the model no ``inputs_embeds``, and its encoder's outputs
reach the model another way.

M1 is also how the dummy-run and real-path checks drive a state with the hooks
(:mod:`~rtmm_conformance.driving.model_inputs`): they judge what the model receives
through them. The suite builds a state that reads its model (M3) as
:mod:`~rtmm_conformance.driving.context` says. A state is a cross-attention state when its dummy runs hand a multimodal model no
``inputs_embeds`` (:func:`~rtmm_conformance.driving.hooks.hands_no_inputs_embeds`); these
checks hold it to that on real steps too, so that a state which merely drops the
multimodal rows is not taken for one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch
from hypothesis import strategies as st

from rtmm_conformance.checks import cases
from rtmm_conformance.checks.registry import check
from rtmm_conformance.clauses import STATE_KINDS
from rtmm_conformance.driving.check_run import CheckRun
from rtmm_conformance.driving.model_inputs import (
    HOOKS_CHECK,
    ModelInputs,
    capture_inputs,
    eager_dummy_inputs,
    has_hooks,
)
from rtmm_conformance.driving.real_step import prepare_real_step
from rtmm_conformance.results import CheckBlocked, CheckFailure, CheckSkipped
from rtmm_protocol.testing import comparisons
from rtmm_protocol.testing.scenario import GatherScenario
from rtmm_protocol.testing.strategies import gather_scenarios

__all__: list[str] = []


def _prompt_steps(run: CheckRun) -> st.SearchStrategy[GatherScenario]:
    """Steps whose windows are in the prompt, half the outputs still to encode."""
    return gather_scenarios(windows="prefill", lookaheads=(0,), cache_miss_rate=0.5)


def _steps(run: CheckRun) -> st.SearchStrategy[GatherScenario]:
    """Any step: prompts and decodes, masks, half the outputs still to encode."""
    return gather_scenarios(lookaheads=(0,), cache_miss_rate=0.5)


def _judge_entries(inputs: ModelInputs) -> None:
    """What M1 asks of one hook's result: model inputs by name, ``inputs_embeds`` (if
    there) a tensor or ``None``."""
    names = [name for name in inputs.entries if not isinstance(name, str)]
    embeds = inputs.entries.get("inputs_embeds")
    if names or not (embeds is None or isinstance(embeds, torch.Tensor)):
        raise CheckFailure(
            f"{inputs.through} did not hand the model inputs by name",
            expected="a mapping of model input names to values, inputs_embeds a tensor or None",
            seen=f"keys {names}" if names else f"inputs_embeds of type {type(embeds).__name__}",
        )


@check(
    HOOKS_CHECK,
    "MUST",
    "A state with the model-inputs hooks hands the model inputs through them on every real step and dummy run: prepare_inputs and prepare_dummy_inputs return mappings of model inputs without raising.",
    kinds=STATE_KINDS,
    since="1.1",
    strategy=_steps,
    cases=(*cases.PROMPT_STEP_CASES, *cases.DECODE_STEP_CASES),
)
def _hooks_hand_inputs(run: CheckRun, scenario: GatherScenario) -> None:
    step = prepare_real_step(run, scenario)
    target = step.built.target
    if not has_hooks(target):
        raise CheckSkipped(
            "the state has no model-inputs hooks (prepare_inputs, prepare_dummy_inputs): "
            "what get_mm_embeddings and dummy_inputs_embeds return is what the model receives"
        )
    top = max(1, min(run.settings.max_num_tokens, step.batch.num_tokens_after_padding))
    try:
        _judge_entries(step.model_inputs(run))
        for n in sorted({1, top}):
            _judge_entries(capture_inputs(run, target, n))
            _judge_entries(eager_dummy_inputs(run, target, n))
    except CheckBlocked as blocked:  # a hook failed: that is this check's finding
        raise CheckFailure(
            "a model-inputs hook failed",
            expected="prepare_inputs and prepare_dummy_inputs return a mapping of model inputs",
            seen=blocked.what,
        ) from blocked.error


@check(
    "M2-no-inputs-embeds",
    "MUST",
    "A cross-attention state hands the model no inputs_embeds: None from get_mm_embeddings and dummy_inputs_embeds, and none among the entries of prepare_inputs and prepare_dummy_inputs.",
    kinds=("cross_attention",),
    since="1.1",
    strategy=_prompt_steps,
    cases=cases.PROMPT_STEP_CASES,
)
def _no_inputs_embeds(run: CheckRun, scenario: GatherScenario) -> None:
    step = prepare_real_step(run, scenario)
    target = step.built.target
    top = max(1, min(run.settings.max_num_tokens, step.batch.num_tokens_after_padding))
    handed = [step.model_inputs(run)]
    for n in sorted({1, top}):
        handed += [capture_inputs(run, target, n), eager_dummy_inputs(run, target, n)]
    for inputs in handed:
        if inputs.inputs_embeds is not None:
            raise CheckFailure(
                f"a cross-attention state handed the model inputs_embeds ({inputs.through})",
                expected="no inputs_embeds on any path: the model takes the encoder's outputs "
                "by cross-attention (a dummy run of this state hands it none)",
                seen=f"{type(inputs.inputs_embeds).__name__} from {inputs.through}",
            )


def _tensors(value: object) -> Iterator[torch.Tensor]:
    """Every tensor in a model input (a tensor, or one in a list, tuple or mapping)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _tensors(item)


@check(
    "M2-encoder-outputs-reach-model",
    "MUST",
    "On a real step of a cross-attention state, the encoder output of every item it encodes is among the entries prepare_inputs hands the model.",
    kinds=("cross_attention",),
    since="1.1",
    strategy=_prompt_steps,
    cases=cases.PROMPT_STEP_CASES,
)
def _outputs_reach_model(run: CheckRun, scenario: GatherScenario) -> None:
    step = prepare_real_step(run, scenario)
    inputs = step.model_inputs(run)
    handed = list(_tensors(dict(inputs.entries)))
    tol = run.settings.tolerance
    batch = set(step.scenario.req_ids)
    for request in step.scenario.requests:
        if request.req_id not in batch:
            continue
        for feature in request.features:
            data = step.inputs.get(feature.identifier)
            if data is None or feature.identifier in step.precached or data.numel() == 0:
                continue
            wanted = step.model.embed_multimodal(input_features=data)[0].detach().cpu()
            if not any(
                t.shape == wanted.shape
                and comparisons.allclose(
                    t.detach().cpu().float(), wanted.float(), rtol=tol.rtol, atol=tol.atol
                )
                for t in handed
            ):
                raise CheckFailure(
                    f"the encoder output of {feature.identifier!r} does not reach the model",
                    expected="the output of model.embed_multimodal(**data) among the entries of "
                    "prepare_inputs (a cross-attention model reads it there)",
                    seen=f"entries {sorted(inputs.entries)} from {inputs.through}"
                    if inputs.entries
                    else f"no entries (from {inputs.through})",
                )
