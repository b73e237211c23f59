"""Basic checks (SPEC T1-T3): the factory builds, the Protocol's members exist, the
signatures are current, and the realtime marker is read the way the guard reads it.

The first three are the prerequisites of every behavioural check: when one fails, the
others are reported as blocked by it rather than failing one after another.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from typing_extensions import get_protocol_members

from rtmm_conformance.checks import cases
from rtmm_conformance.checks.registry import check
from rtmm_conformance.clauses import STATE_KINDS
from rtmm_conformance.driving.check_run import Built, CheckRun
from rtmm_conformance.driving.context import Mode
from rtmm_conformance.driving.gather_call import describe_error
from rtmm_conformance.results import CheckFailure, CheckSkipped
from rtmm_protocol.protocols import MMEmbeddingGatherer, ModelState
from rtmm_protocol.signatures import (
    RENAMED_PARAMETERS,
    SignatureProblem,
    check_gatherer_signature,
    check_model_state_signature,
)
from rtmm_protocol.testing.toy_models import ToyReplaceModel

__all__: list[str] = []

_BUILDS = ("T1-factory-builds",)


class InstanceFlagModel(ToyReplaceModel):
    """Not realtime: ``supports_realtime`` is set on the instance, which does not count (T3)."""

    def __init__(self, hidden_size: int, **kwargs: Any) -> None:
        super().__init__(hidden_size, **kwargs)
        self.supports_realtime = True


class TruthyFlagModel(ToyReplaceModel):
    """Not realtime: the class flag is ``1``, truthy but not ``True`` (T3)."""

    supports_realtime: ClassVar[int] = 1


@check(
    "T1-factory-builds",
    "MUST",
    "The factory returns a target for the conformance context without raising.",
    prerequisites=(),
)
def _factory_builds(run: CheckRun) -> None:
    run.build()


def _protocol_of(built: Built) -> type:
    return ModelState if built.kind != "gatherer" else MMEmbeddingGatherer


@check(
    "T1-protocol-members",
    "MUST",
    "The target has every member of the ModelState or MMEmbeddingGatherer Protocol, with attributes of the declared types.",
    prerequisites=_BUILDS,
)
def _protocol_members(run: CheckRun) -> None:
    built = run.build()
    target = built.target
    protocol = _protocol_of(built)
    missing = sorted(n for n in get_protocol_members(protocol) if not hasattr(target, n))
    if missing:
        raise CheckFailure(
            f"the target lacks members of the {protocol.__name__} Protocol",
            expected=", ".join(sorted(get_protocol_members(protocol))),
            seen=f"missing {', '.join(missing)}",
        )
    problems = []
    for name in ("gather_mm_embeddings", "dummy_inputs_embeds", "get_mm_embeddings"):
        if name in get_protocol_members(protocol) and not callable(getattr(target, name)):
            problems.append(f"{name} is not callable")
    if built.kind != "gatherer":
        ctx = built.ctx
        expected_types: dict[str, type | tuple[type, ...]] = {
            "is_realtime": bool,
            "supports_mm_inputs": bool,
            "hidden_size": int,
            "max_num_tokens": int,
            "dtype": torch.dtype,
            "device": torch.device,
        }
        for name, kind in expected_types.items():
            value = getattr(target, name)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                problems.append(f"{name} is {value!r} ({type(value).__name__})")
        hidden = getattr(target, "hidden_size")  # noqa: B009  # read like the others above
        if isinstance(hidden, int) and hidden != ctx.hidden_size:
            problems.append(f"hidden_size is {hidden} but the context asked for {ctx.hidden_size}")
    if problems:
        raise CheckFailure(
            "the target's members do not have the types the Protocol declares",
            expected="is_realtime/supports_mm_inputs: bool, hidden_size/max_num_tokens: int "
            "(hidden_size = ctx.hidden_size), dtype: torch.dtype, device: torch.device, "
            "callable methods",
            seen="; ".join(problems),
        )


def _signature_problems(built: Built) -> list[SignatureProblem]:
    if built.kind != "gatherer":
        return check_model_state_signature(built.target)
    return check_gatherer_signature(built.target)


@check(
    "T2-no-renamed-parameters",
    "MUST",
    "No method still names a parameter by its pre-rename name (computed_prefill_lens is now num_computed_tokens).",
    modes=(None,),
    prerequisites=_BUILDS,
)
def _no_renamed(run: CheckRun) -> None:
    built = run.build()
    renamed = [p for p in _signature_problems(built) if p.parameter in RENAMED_PARAMETERS]
    if renamed:
        new = RENAMED_PARAMETERS[renamed[0].parameter or ""]
        raise CheckFailure(
            f"{renamed[0].method} still uses the parameter name {renamed[0].parameter}",
            expected=f"{new}: the contract renamed {renamed[0].parameter} to {new} when "
            "decode steps started gathering (the window now starts at num_computed_tokens "
            "+ draft_lookahead, prompt or not)",
            seen="; ".join(str(p) for p in renamed),
        )


@check(
    "T2-signature-matches-protocol",
    "MUST",
    "Method parameters match the Protocol's names, order and defaults.",
    modes=(None,),
    prerequisites=_BUILDS,
)
def _signature_matches(run: CheckRun) -> None:
    built = run.build()
    problems = [
        p
        for p in _signature_problems(built)
        if p.parameter not in RENAMED_PARAMETERS
        # a missing member is T1's finding
        and hasattr(built.target, p.method)
        and p.parameter is not None
    ]
    if problems:
        raise CheckFailure(
            "method parameters differ from the Protocol's",
            expected="the names, order and defaults of the Protocol's signature",
            seen="; ".join(str(p) for p in problems),
        )


@check(
    "T3-realtime-class-flag",
    "MUST",
    "A model whose class declares supports_realtime = True makes a realtime state; a model without the flag does not.",
    kinds=STATE_KINDS,
    modes=(None,),
)
def _realtime_class_flag(run: CheckRun) -> None:
    # How real models declare it (the domain); instance attributes and truthy non-bools are the
    # guard's edge cases, judged apart as robustness.
    refusals = []
    states: tuple[tuple[Mode, bool], ...] = (("realtime", True), ("non-realtime", False))
    for mode, wanted in states:
        try:
            built = run.build(mode=mode)
        except CheckSkipped as refusal:
            refusals.append(refusal.reason)
            continue
        seen_flag = getattr(built.target, "is_realtime", None)
        if seen_flag is not wanted:
            declared = "declaring" if wanted else "without"
            raise CheckFailure(
                f"a {mode} model did not make a {mode} state",
                expected=f"is_realtime {wanted} for a model class {declared} "
                "supports_realtime = True",
                seen=f"is_realtime {seen_flag!r}",
            )
    if len(refusals) == 2:
        raise CheckSkipped(refusals[0])


@check(
    "T3-realtime-guard-semantics",
    "SHOULD",
    "Neither an instance attribute supports_realtime = True nor a truthy non-bool class flag makes a model realtime.",
    profile="robustness",
    modes=(None,),
)
def _realtime_guard(run: CheckRun) -> None:
    # A request decoding past its prompt, with a cached feature in its window: a
    # realtime model gathers it, a non-realtime one skips it.
    scenario = cases.ALL_SKIPPED_CASES[0]
    for model_class, flag in (
        (InstanceFlagModel, "an instance attribute supports_realtime = True"),
        (TruthyFlagModel, "a class attribute supports_realtime = 1"),
    ):
        try:
            built = run.build(mode="non-realtime", model_class=model_class)
        except CheckSkipped:
            raise CheckSkipped("the factory does not support non-realtime models") from None
        seen_flag = getattr(built.target, "is_realtime", False)
        if built.kind != "gatherer" and seen_flag is not False:
            raise CheckFailure(
                "a model that is not realtime by the guard made a realtime state",
                expected=f"is_realtime False for a model with {flag}",
                seen=f"is_realtime {seen_flag!r}",
            )
        scenario.load_into(built.cache, run.device)
        call = run.gather(built, scenario)
        if call.error is not None:
            raise CheckFailure(
                "the gather raised for a non-realtime decode batch",
                expected="([], all-False mask)",
                seen=describe_error(call.error),
            ) from call.error
        gathered = call.unpack()
        if gathered.pieces or bool(gathered.mask.any()):
            raise CheckFailure(
                "a model that is not realtime by the guard gathered on decode steps",
                expected=f"decode steps skipped for a model with {flag} (only a class-level "
                "supports_realtime that is True counts)",
                seen=f"{len(gathered.pieces)} pieces, {int(gathered.mask.sum())} True slots",
            )
