"""The run-time signature check shared by the typecheck command and the conformance suite."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar

import pytest
import torch
from support import typing_examples, vllm_typing_examples

from rtmm_protocol import EncoderCache
from rtmm_protocol.reference import EncoderRunner, ReferenceModelState
from rtmm_protocol.signatures import (
    RENAMED_PARAMETERS,
    SignatureProblem,
    check_gatherer_signature,
    check_model_state_signature,
    check_vllm_model_state_signature,
)
from rtmm_protocol.testing import ToyRealtimeModel, ToyReplaceModel, ToyTextModel

FIRST = "req_ids, total_num_scheduled_tokens, num_scheduled_tokens, query_start_loc, prefill_lens"


def gatherer_class(parameters: str) -> type:
    """A class whose gather_mm_embeddings takes ``self, <parameters>``."""
    method = eval(f"lambda self, {parameters}: None")
    return type("Gatherer", (), {"gather_mm_embeddings": method})


def summary(problems: list[SignatureProblem]) -> list[tuple[str | None, str, str]]:
    return [(p.parameter, p.expected, p.seen) for p in problems]


@pytest.mark.parametrize(
    "parameters",
    [
        f"{FIRST}, num_computed_tokens, draft_lookahead=0",
        f"{FIRST}, *, num_computed_tokens, draft_lookahead=0",
        f"{FIRST}, *, draft_lookahead=0, num_computed_tokens",
        f"{FIRST}, num_computed_tokens, *, draft_lookahead=0",
        f"{FIRST}, num_computed_tokens, draft_lookahead=0, extra=None, *rest, **options",
        f"{FIRST}, **options",
        "*args, **kwargs",
    ],
)
def test_conforming_gatherer_signatures(parameters: str) -> None:
    assert check_gatherer_signature(gatherer_class(parameters)) == []


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        pytest.param(
            f"{FIRST}, computed_prefill_lens, draft_lookahead=0",
            [
                (
                    "computed_prefill_lens",
                    "a parameter named num_computed_tokens (renamed from computed_prefill_lens)",
                    "a parameter still named computed_prefill_lens; rename it to num_computed_tokens",
                )
            ],
            id="old-name",
        ),
        pytest.param(
            f"{FIRST}, *, computed_prefill_lens, draft_lookahead=0",
            [
                (
                    "computed_prefill_lens",
                    "a parameter named num_computed_tokens (renamed from computed_prefill_lens)",
                    "a parameter still named computed_prefill_lens; rename it to num_computed_tokens",
                )
            ],
            id="old-name-keyword-only",
        ),
        pytest.param(
            f"{FIRST}, num_computed_tokens, draft_lookahead",
            [("draft_lookahead", "a default of 0", "no default")],
            id="default-dropped",
        ),
        pytest.param(
            f"{FIRST}, num_computed_tokens, draft_lookahead=1",
            [("draft_lookahead", "a default of 0", "a default of 1")],
            id="default-one",
        ),
        pytest.param(
            f"{FIRST}, num_computed_tokens, draft_lookahead=False",
            [("draft_lookahead", "a default of 0", "a default of False")],
            id="default-false",
        ),
        pytest.param(
            f"{FIRST}, num_computed_tokens",
            [("draft_lookahead", "a parameter named draft_lookahead", "no such parameter")],
            id="no-lookahead",
        ),
        pytest.param(
            f"{FIRST}, draft_lookahead=0, num_computed_tokens=None",
            [
                (
                    "num_computed_tokens",
                    "num_computed_tokens at position 6 (after self) or keyword-only, in the order "
                    "of the contract",
                    "it at position 7",
                ),
                (
                    "draft_lookahead",
                    "draft_lookahead at position 7 (after self) or keyword-only, in the order of "
                    "the contract",
                    "it at position 6",
                ),
            ],
            id="positional-order-swapped",
        ),
        pytest.param(
            "req_ids, total_num_scheduled_tokens, num_scheduled_tokens, query_start_loc, "
            "prefill_len, *, num_computed_tokens, draft_lookahead=0",
            [
                (
                    "prefill_len",
                    "a parameter named prefill_lens at position 5 (after self)",
                    "one named prefill_len",
                )
            ],
            id="misnamed",
        ),
        pytest.param(
            f"{FIRST}, /, *, num_computed_tokens, draft_lookahead=0",
            [
                (
                    name,
                    f"{name} accepted by keyword as well as by position",
                    "a positional-only parameter",
                )
                for name in FIRST.split(", ")
            ],
            id="positional-only",
        ),
        pytest.param(
            "req_ids, total_num_scheduled_tokens, num_scheduled_tokens, query_start_loc, *, "
            "prefill_lens, num_computed_tokens, draft_lookahead=0",
            [
                (
                    "prefill_lens",
                    "prefill_lens accepted by position 5 (after self)",
                    "a keyword-only parameter",
                )
            ],
            id="keyword-only-too-early",
        ),
        pytest.param(
            f"{FIRST}, num_computed_tokens, draft_lookahead=0, *, stream",
            [
                (
                    "stream",
                    "no required parameters beyond the contract's",
                    "a required parameter stream the contract does not pass",
                )
            ],
            id="extra-required",
        ),
    ],
)
def test_broken_gatherer_signatures(parameters: str, expected: list[tuple[str, str, str]]) -> None:
    problems = check_gatherer_signature(gatherer_class(parameters))
    assert summary(problems) == expected
    assert all(problem.method == "gather_mm_embeddings" for problem in problems)


def test_the_old_name_message_explains_the_rename() -> None:
    (problem, missing) = check_gatherer_signature(typing_examples.PreRenameGatherer)
    assert str(problem) == (
        "gather_mm_embeddings(computed_prefill_lens): expected a parameter named "
        "num_computed_tokens (renamed from computed_prefill_lens); found a parameter still "
        "named computed_prefill_lens; rename it to num_computed_tokens"
    )
    assert missing.parameter == "draft_lookahead"
    assert dict(RENAMED_PARAMETERS) == {"computed_prefill_lens": "num_computed_tokens"}
    with pytest.raises(TypeError):
        RENAMED_PARAMETERS["x"] = "y"  # type: ignore[index]


def _reference_runner() -> EncoderRunner:
    return EncoderRunner(
        ToyReplaceModel(hidden_size=4), 8, 4, EncoderCache(4), torch.float32, "cpu"
    )


def _reference_state(model: ToyTextModel) -> ReferenceModelState:
    return ReferenceModelState(
        model, EncoderCache(4), hidden_size=4, max_num_tokens=8, dtype=torch.float32, device="cpu"
    )


@pytest.mark.parametrize(
    ("check", "target"),
    [
        (check_gatherer_signature, EncoderRunner),
        (check_gatherer_signature, _reference_runner),
        (check_gatherer_signature, typing_examples.KeywordOnlyGatherer),
        (check_model_state_signature, ReferenceModelState),
        (check_model_state_signature, lambda: _reference_state(ToyRealtimeModel(hidden_size=4))),
        (check_model_state_signature, lambda: _reference_state(ToyTextModel(4))),
        (check_model_state_signature, typing_examples.TextOnlyState),
        (check_model_state_signature, typing_examples.TextOnlyState()),
    ],
    ids=lambda value: getattr(value, "__name__", None),
)
def test_the_reference_and_conforming_examples_conform(
    check: Callable[[object], list[SignatureProblem]], target: object
) -> None:
    if callable(target) and not isinstance(target, type):
        target = target()
    assert check(target) == []


class _Base:
    def method(self, value: int, draft_lookahead: int = 0) -> None:
        return None


class _MethodKinds:
    """Static, class and plain methods are read with the arguments callers pass."""

    @staticmethod
    def dummy_inputs_embeds(num_tokens: int) -> None:
        return None

    @classmethod
    def gather_mm_embeddings(cls, input_batch: object, draft_lookahead: int = 0) -> None:
        return None

    get_mm_embeddings = _Base.method  # wrong names: value, draft_lookahead; no req_states


def test_static_and_class_methods_are_read_without_self() -> None:
    problems = check_model_state_signature(_MethodKinds)
    methods = {problem.method for problem in problems}
    assert "dummy_inputs_embeds" not in methods
    assert "gather_mm_embeddings" not in methods
    assert summary([p for p in problems if p.method == "get_mm_embeddings"]) == [
        (
            "value",
            "a parameter named scheduled_encoder_inputs at position 1 (after self)",
            "one named value",
        ),
        (
            "draft_lookahead",
            "a parameter named input_batch at position 2 (after self)",
            "one named draft_lookahead",
        ),
        ("req_states", "a parameter named req_states", "no such parameter"),
    ]


class _NotMethods:
    is_realtime = False
    supports_mm_inputs = False
    hidden_size = 4
    max_num_tokens = 8
    dtype = torch.float32
    device = torch.device("cpu")
    dummy_inputs_embeds = 3

    @property
    def gather_mm_embeddings(self) -> None:
        return None


def test_members_that_are_not_methods_are_named() -> None:
    assert summary(check_model_state_signature(_NotMethods)) == [
        (None, "a method", "a non-callable int"),
        (None, "a method", "a property"),
        (None, "a method named get_mm_embeddings", "no such method"),
    ]


class _AttributesInInit:
    def __init__(self) -> None:
        self.is_realtime = False
        self.hidden_size = 4
        (self.max_num_tokens, self.dtype) = (8, torch.float32)

    device: ClassVar[torch.device] = torch.device("cpu")

    def dummy_inputs_embeds(self, num_tokens: int) -> None:
        return None

    def gather_mm_embeddings(self, input_batch: object, draft_lookahead: int = 0) -> None:
        return None

    def get_mm_embeddings(
        self, scheduled_encoder_inputs: object, input_batch: object, req_states: object
    ) -> None:
        return None


@dataclasses.dataclass
class _DataclassState(_AttributesInInit):
    supports_mm_inputs: bool = False


def test_attributes_assigned_in_methods_or_declared_count_on_classes() -> None:
    assert summary(check_model_state_signature(_AttributesInInit)) == [
        (None, "an attribute named supports_mm_inputs", "no such attribute")
    ]
    assert check_model_state_signature(_DataclassState) == []
    assert [p.method for p in check_model_state_signature(_AttributesInInit())] == [
        "supports_mm_inputs"
    ]


def test_attributes_are_not_reported_when_the_class_source_cannot_be_read() -> None:
    namespace = dict(vars(_AttributesInInit))
    generated = type("Generated", (), namespace)
    assert check_model_state_signature(generated) == []
    # An instance shows what it has, source or not.
    assert [p.method for p in check_model_state_signature(generated())] == ["supports_mm_inputs"]


class _Dynamic(_AttributesInInit):
    def __getattr__(self, name: str) -> object:
        if name == "supports_mm_inputs":
            return True
        raise AttributeError(name)


def test_instance_attributes_from_getattr_count() -> None:
    assert check_model_state_signature(_Dynamic()) == []


def test_problem_text_without_a_parameter() -> None:
    problem = SignatureProblem("device", None, "an attribute named device", "no such attribute")
    assert str(problem) == "device: expected an attribute named device; found no such attribute"


# ---------------------------------------------------------------------- vLLM's spelling


@pytest.mark.parametrize(
    "name",
    ["EngineModelState", "EngineModelStateSubclass", "AnyBatchModelState", "MixedBatchModelState"],
)
def test_vllm_shaped_states_conform_to_vllm_model_state(name: str) -> None:
    # MixedBatchModelState's fault is a type, which only the type checkers see.
    cls = getattr(vllm_typing_examples, name)
    assert check_vllm_model_state_signature(cls) == []
    assert check_vllm_model_state_signature(cls()) == []


def test_vllm_shaped_runner_conforms_and_0_24_signature_does_not() -> None:
    assert check_gatherer_signature(vllm_typing_examples.EngineRunner) == []
    assert summary(check_gatherer_signature(vllm_typing_examples.PreRenameEngineRunner)) == [
        (
            "computed_prefill_lens",
            "a parameter named num_computed_tokens (renamed from computed_prefill_lens)",
            "a parameter still named computed_prefill_lens; rename it to num_computed_tokens",
        )
    ]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "PreRenameModelState",
            [(None, "a method named prepare_inputs_embeds", "no such method")],
        ),
        (
            "NoDummyHookModelState",
            [(None, "a method named prepare_dummy_inputs", "no such method")],
        ),
        (
            "NoLookaheadDefaultModelState",
            [("draft_lookahead", "a default of 0", "no default")],
        ),
    ],
)
def test_broken_vllm_shaped_states(name: str, expected: list[tuple[str | None, str, str]]) -> None:
    assert (
        summary(check_vllm_model_state_signature(getattr(vllm_typing_examples, name))) == expected
    )


def test_vllm_model_state_members_are_vllms() -> None:
    """The Protocol's members, in the order the run-time check reports them."""
    problems = check_vllm_model_state_signature(typing_examples.NeitherStateNorGatherer)
    assert [problem.method for problem in problems] == [
        "supports_mm_inputs",
        "inputs_embeds_size",
        "max_num_tokens",
        "device",
        "dummy_inputs_embeds",
        "gather_mm_embeddings",
        "prepare_inputs_embeds",
        "prepare_inputs",
        "prepare_dummy_inputs",
    ]
