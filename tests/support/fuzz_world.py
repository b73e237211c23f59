"""The objects a bad-input fuzz case runs against, and the one call it makes.

A :class:`FuzzWorld` is a fresh encoder cache filled from a valid
:class:`~rtmm_protocol.testing.strategies.GatherScenario`, with a runner and a state
over it. :class:`StepInputs` holds every argument of one call, valid when built by
:meth:`StepInputs.valid` and then possibly corrupted in one place; :func:`run_target`
makes the call the case is about.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from rtmm_protocol import EncoderCache, MultiModalFeature, PlaceholderRange
from rtmm_protocol.reference import EncoderRunner, ReferenceModelState
from rtmm_protocol.testing import (
    ReferenceInputBatch,
    ToyRealtimeModel,
    ToyReplaceModel,
    make_input_features,
)
from rtmm_protocol.testing.scenario import GatherScenario, encoder_output_for

__all__ = [
    "FEATURE_DIM",
    "OUT_KINDS",
    "TARGETS",
    "FuzzWorld",
    "StepInputs",
    "Target",
    "out_buffer",
    "run_target",
]

#: ``feature_dim`` of the toy encoder (its default).
FEATURE_DIM = 8

Target = Literal["runner", "plan", "state_gather", "real", "dummy"]
#: What a case calls: the runner's gather, the plan's rows, the state's gather, the
#: state's real path (encode, gather, merge), or a dummy run.
TARGETS: tuple[Target, ...] = ("runner", "plan", "state_gather", "real", "dummy")


def _model(realtime: bool, hidden_size: int) -> ToyReplaceModel | ToyRealtimeModel:
    return ToyRealtimeModel(hidden_size) if realtime else ToyReplaceModel(hidden_size)


@dataclass
class FuzzWorld:
    """A cache filled from a scenario, and a runner and a state over it.

    Features whose output the scenario leaves uncached get encoder ``data`` when
    ``encodable`` picks them, so the real path has something to encode.
    """

    scenario: GatherScenario
    realtime: bool
    validate: bool
    model: ToyReplaceModel | ToyRealtimeModel
    cache: EncoderCache
    runner: EncoderRunner
    state: ReferenceModelState
    max_num_tokens: int
    #: The features as registered, by request (the lists a restore puts back).
    features: dict[str, list[MultiModalFeature]] = field(default_factory=dict)
    #: Outputs as first cached, by identifier.
    outputs: dict[str, torch.Tensor] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        scenario: GatherScenario,
        *,
        realtime: bool,
        validate: bool,
        encodable: frozenset[str] = frozenset(),
    ) -> FuzzWorld:
        """A fresh world: cache, runner, state (``max_num_tokens`` a little over the step)."""
        hidden = scenario.hidden_size
        model = _model(realtime, hidden)
        cache = EncoderCache(hidden)
        features: dict[str, list[MultiModalFeature]] = {}
        outputs: dict[str, torch.Tensor] = {}
        for request in (*scenario.requests, *scenario.extra_requests):
            built = []
            for k, spec in enumerate(request.features):
                feature = spec.build()
                if not spec.cached and spec.identifier in encodable:
                    data = {"input_features": make_input_features(k + 7, spec.num_embeds)}
                    feature = MultiModalFeature(
                        feature.identifier, feature.modality, feature.mm_position, data
                    )
                built.append(feature)
            cache.add_request(request.req_id, built)
            features[request.req_id] = list(built)
            for spec in request.features:
                if spec.cached:
                    output = encoder_output_for(spec.identifier, spec.num_embeds, hidden)
                    cache.encoder_outputs[spec.identifier] = output
                    outputs[spec.identifier] = output
        max_num_tokens = scenario.num_tokens + scenario.padding + 4
        runner = EncoderRunner(
            model, max_num_tokens, hidden, cache, torch.float32, "cpu", validate=validate
        )
        state = ReferenceModelState(
            model,
            cache,
            hidden_size=hidden,
            max_num_tokens=max_num_tokens,
            dtype=torch.float32,
            device="cpu",
            validate=validate,
        )
        return cls(
            scenario, realtime, validate, model, cache, runner, state, max_num_tokens,
            features, outputs,
        )  # fmt: skip

    def expected_output(self, feature: MultiModalFeature) -> torch.Tensor | None:
        """What the cache may hold for ``feature``: its scenario output or its encoding."""
        identifier = feature.identifier
        if identifier in self.outputs:
            return self.outputs[identifier]
        data = feature.data
        if not isinstance(data, Mapping):
            return None
        encoded = self.model.embed_multimodal(**data)[0]
        return encoded.to(torch.float32)


@dataclass
class StepInputs:
    """Every argument of one call; fields may hold anything once corrupted."""

    req_ids: Any
    total: Any
    num_scheduled_tokens: Any
    query_start_loc: Any
    prefill_lens: Any
    num_computed_tokens: Any
    draft_lookahead: Any
    num_reqs: Any
    num_tokens_after_padding: Any
    input_ids: Any
    scheduled_encoder_inputs: Any
    dummy_tokens: Any
    #: For the plan's rows: the kind of ``out`` buffer to pass (see :func:`out_buffer`).
    rows_out: str | None = None

    @classmethod
    def valid(
        cls, world: FuzzWorld, *, int_dtype: type[np.integer[Any]], dummy_tokens: int
    ) -> StepInputs:
        """The scenario's own call, arrays in ``int_dtype``."""
        scenario = world.scenario
        arrays = {k: v.astype(int_dtype) for k, v in scenario.arrays().items()}
        padded = scenario.num_tokens + scenario.padding
        batch = ReferenceInputBatch.from_requests(
            scenario.req_ids,
            [r.prefill_len for r in scenario.requests],
            [r.num_computed_tokens for r in scenario.requests],
            [r.num_scheduled_tokens for r in scenario.requests],
            num_tokens_after_padding=padded,
        )
        return cls(
            req_ids=list(scenario.req_ids),
            total=scenario.num_tokens,
            draft_lookahead=scenario.draft_lookahead,
            num_reqs=len(scenario.requests),
            num_tokens_after_padding=padded,
            input_ids=batch.input_ids,
            scheduled_encoder_inputs={
                r.req_id: list(range(len(r.features))) for r in scenario.requests
            },
            dummy_tokens=dummy_tokens,
            num_scheduled_tokens=arrays["num_scheduled_tokens"],
            query_start_loc=arrays["query_start_loc"],
            prefill_lens=arrays["prefill_lens"],
            num_computed_tokens=arrays["num_computed_tokens"],
        )

    def gather_args(self) -> tuple[Any, ...]:
        """The runner-level gather's arguments, in order."""
        return (
            self.req_ids,
            self.total,
            self.num_scheduled_tokens,
            self.query_start_loc,
            self.prefill_lens,
            self.num_computed_tokens,
            self.draft_lookahead,
        )

    def input_batch(self) -> ReferenceInputBatch:
        """The state-level batch, built without the builder's checks."""
        return ReferenceInputBatch(
            req_ids=self.req_ids,
            num_reqs=self.num_reqs,
            num_tokens=self.total,
            num_tokens_after_padding=self.num_tokens_after_padding,
            input_ids=self.input_ids,
            num_scheduled_tokens=self.num_scheduled_tokens,
            query_start_loc_np=self.query_start_loc,
            prefill_len_np=self.prefill_lens,
            num_computed_tokens_np=self.num_computed_tokens,
        )

    def arrays(self) -> dict[str, Any]:
        """Every numpy array among the inputs, by field (to check none is mutated)."""
        return {
            name: value
            for name, value in vars(self).items()
            if isinstance(value, np.ndarray) and value.dtype != object
        }


def run_target(target: Target, world: FuzzWorld, inputs: StepInputs) -> Any:
    """Make the call ``target`` names; return what it returned."""
    if target == "runner":
        return world.runner.gather_mm_embeddings(*inputs.gather_args())
    if target == "plan":
        plan = world.runner.plan_mm_gather(*inputs.gather_args())
        hidden = world.scenario.hidden_size
        out = (
            None if inputs.rows_out is None else out_buffer(inputs.rows_out, plan.num_rows, hidden)
        )
        return plan.rows(out=out), plan.is_mm_embed
    if target == "state_gather":
        return world.state.gather_mm_embeddings(inputs.input_batch(), inputs.draft_lookahead)
    if target == "real":
        return world.state.get_mm_embeddings(
            inputs.scheduled_encoder_inputs, inputs.input_batch(), None
        )
    return world.state.dummy_inputs_embeds(inputs.dummy_tokens)


#: Buffers ``rows(out=...)`` may be handed: one that fits, and ways of not fitting.
OUT_KINDS = ("fits", "float64", "meta", "list", "numpy", "not contiguous", "a row more")


def out_buffer(kind: str, rows: int, hidden: int) -> Any:
    """An ``out`` buffer of the ``kind`` named for ``rows`` rows of width ``hidden``."""
    if kind == "fits":
        return torch.empty(rows, hidden)
    if kind == "float64":
        return torch.empty(rows, hidden, dtype=torch.float64)
    if kind == "meta":
        return torch.empty(rows, hidden, device="meta")
    if kind == "list":
        return [[0.0] * hidden for _ in range(rows)]
    if kind == "numpy":
        return np.zeros((rows, hidden), dtype=np.float32)
    if kind == "not contiguous":
        return torch.empty(rows, 2 * hidden)[:, ::2]
    return torch.empty(rows + 1, hidden)


def meta_mask(length: int) -> torch.Tensor:
    """An ``is_embed`` mask on the meta device (it has a shape and no values)."""
    return torch.ones(length, dtype=torch.bool, device="meta")


def unchecked_range(offset: int, length: int, mask: torch.Tensor | None) -> PlaceholderRange:
    """A range holding ``mask`` without the constructor's checks, as a buggy producer makes."""
    position = PlaceholderRange(offset, length)
    object.__setattr__(position, "is_embed", mask)
    return position
