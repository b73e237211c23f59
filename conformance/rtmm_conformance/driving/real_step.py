"""A real engine step for the real-path checks: features with encoder inputs, some outputs
cached (by the context's own toy model, so they equal encoded ones), the rest scheduled."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from rtmm_conformance.driving.check_run import Built, CheckRun
from rtmm_conformance.driving.model_inputs import ModelInputs, after_prepare_inputs
from rtmm_conformance.results import CheckFailure
from rtmm_protocol.testing.input_batch import ReferenceInputBatch
from rtmm_protocol.testing.scenario import GatherScenario
from rtmm_protocol.testing.toy_models import ToyRealtimeModel, ToyReplaceModel, make_input_features

__all__ = ["RealStep", "prepare_real_step"]


@dataclass
class RealStep:
    """A loaded target, its batch (the contract's, and as the target's engine takes it),
    and which items are scheduled for the encoder."""

    built: Built
    scenario: GatherScenario
    batch: ReferenceInputBatch
    model: ToyReplaceModel | ToyRealtimeModel
    #: The step's batch and request states in the types of the target's engine.
    engine_batch: object
    engine_states: object
    #: req_id -> indices into the request's features, as ``get_mm_embeddings`` takes them.
    scheduled: dict[str, list[int]] = field(default_factory=dict)
    #: identifier -> the encoder input of the feature (absent for features without data).
    inputs: dict[str, torch.Tensor] = field(default_factory=dict)
    #: identifiers of outputs cached before the step.
    precached: set[str] = field(default_factory=set)

    def _call(self) -> object:
        target: Any = self.built.target  # a ModelState
        return target.get_mm_embeddings(self.scheduled, self.engine_batch, self.engine_states)

    def attempt(self) -> tuple[object, BaseException | None]:
        """Run the real path once; return its result, or the exception it raised."""
        try:
            return self._call(), None
        except Exception as error:
            return None, error

    def get_mm_embeddings(self, run: CheckRun) -> torch.Tensor:
        """Run the real path once; fail if it raises or returns no tensor."""
        result = run.call("get_mm_embeddings", self._call)
        if not isinstance(result, torch.Tensor):
            raise CheckFailure(
                "get_mm_embeddings did not return a tensor for a multimodal model",
                expected=f"a tensor of shape ({self.batch.num_tokens_after_padding}, "
                f"{self.scenario.hidden_size})",
                seen=type(result).__name__,
            )
        return result

    def model_inputs(self, run: CheckRun) -> ModelInputs:
        """Run the step as the runner does (SPEC M1): the state's merge, then the
        overrides of ``prepare_inputs`` on the same batch and request states."""
        merged = run.call("get_mm_embeddings", self._call)
        return after_prepare_inputs(
            self.built.target,
            merged,
            "get_mm_embeddings",
            self.engine_batch,
            self.engine_states,
        )

    def received(self, run: CheckRun) -> torch.Tensor:
        """The ``inputs_embeds`` the model receives on this step; fail if there are none."""
        inputs = self.model_inputs(run)
        tensor = inputs.tensor()
        if tensor is None:
            raise CheckFailure(
                "the model receives no inputs_embeds on a real step of a multimodal model",
                expected=f"a tensor of shape ({self.batch.num_tokens_after_padding}, "
                f"{self.scenario.hidden_size}) from get_mm_embeddings or prepare_inputs",
                seen=f"{type(inputs.inputs_embeds).__name__} from {inputs.through}",
            )
        return tensor


def _input_seed(seed: int, identifier: str) -> int:
    return zlib.crc32(f"{seed}:{identifier}".encode())


def prepare_real_step(run: CheckRun, scenario: GatherScenario, *, no_data: bool = True) -> RealStep:
    """Build a target and load ``scenario`` with encoder inputs. Cached features get their
    output now (with ``no_data``, every other one loses its ``data``); every feature of a
    batch request is scheduled, so no needed output can be missing."""
    built = run.build(hidden_size=scenario.hidden_size)
    model = built.model
    if not isinstance(model, (ToyReplaceModel, ToyRealtimeModel)):
        raise TypeError("a real step needs a multimodal model")
    cache = built.cache
    batch = scenario.input_batch(run.device)
    step = RealStep(
        built=built,
        scenario=scenario,
        batch=batch,
        model=model,
        engine_batch=run.engine.step_batch(batch),
        engine_states=run.engine.request_states(batch),
    )
    batch_ids = set(scenario.req_ids)
    with cache.paused():
        for request in (*scenario.requests, *scenario.extra_requests):
            features = []
            for position, spec in enumerate(request.features):
                inputs = make_input_features(
                    _input_seed(run.settings.seed, spec.identifier),
                    spec.num_embeds,
                    model.feature_dim,
                    device=run.device,
                )
                data: dict[str, torch.Tensor] | None = {"input_features": inputs}
                if spec.cached:
                    output = model.embed_multimodal(input_features=inputs)[0]
                    cache.encoder_outputs[spec.identifier] = output.to(run.settings.torch_dtype)
                    step.precached.add(spec.identifier)
                    if no_data and position % 2 == 1:
                        data = None
                if data is not None:
                    step.inputs[spec.identifier] = inputs
                # Features are frozen values: the encoder input goes in as a new one.
                features.append(replace(spec.build(), data=data))
            cache.add_request(request.req_id, features)
            if request.req_id in batch_ids and features:
                step.scheduled[request.req_id] = list(range(len(features)))
    step.built.encoder_log.calls.clear()
    cache.forget()
    return step
