"""What the model receives (SPEC M1): a step driven as an engine's runner drives it.

vLLM's runner hands the model the ``inputs_embeds`` of the state's merge, then lets the
entries of ``prepare_inputs(input_batch, req_states)`` override the model's inputs; it
captures CUDA graphs on ``prepare_dummy_inputs(num_reqs, num_tokens)``, and an eager dummy
run takes ``dummy_inputs_embeds(n)``, then ``prepare_inputs``' overrides. For a target
with these hooks (:class:`~rtmm_protocol.ModelInputsHooks`) the dummy-run and real-path
checks judge what these calls hand the model; for one without them, the two methods
the contract names are the model's inputs, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from rtmm_conformance.driving.check_run import CheckRun
from rtmm_conformance.driving.hooks import has_hooks
from rtmm_conformance.results import CheckFailure

__all__ = [
    "ModelInputs",
    "after_prepare_inputs",
    "capture_inputs",
    "dummy_reqs",
    "eager_dummy_inputs",
    "has_hooks",
    "received",
]


@dataclass(frozen=True)
class ModelInputs:
    """The ``inputs_embeds`` a forward receives, ``through`` which call, and the entries
    of the hook that made them (empty without hooks)."""

    inputs_embeds: object
    through: str
    entries: Mapping[str, Any] = field(default_factory=dict)

    def tensor(self) -> torch.Tensor | None:
        """The ``inputs_embeds`` if they are a tensor."""
        return self.inputs_embeds if isinstance(self.inputs_embeds, torch.Tensor) else None


def _entries(run: CheckRun, description: str, value: object) -> Mapping[str, Any]:
    """A hook's result, which must be a mapping of model inputs."""
    if not isinstance(value, Mapping):
        raise CheckFailure(
            f"{description} did not return a mapping of model inputs",
            expected="a dict such as {'inputs_embeds': ..., 'positions': ...} (or {})",
            seen=type(value).__name__,
        )
    return value


def received(base: object, base_call: str, entries: Mapping[str, Any], hook: str) -> ModelInputs:
    """The model's ``inputs_embeds``: the hook's entry when it has one, else ``base``."""
    if "inputs_embeds" in entries:
        return ModelInputs(entries["inputs_embeds"], hook, entries)
    return ModelInputs(base, base_call, entries)


def after_prepare_inputs(
    run: CheckRun, target: object, base: object, base_call: str, batch: object, states: object
) -> ModelInputs:
    """``base`` (what the state's merge or dummy buffer gave), overridden by the entries of
    ``prepare_inputs(batch, states)`` where the target has the hooks."""
    if not has_hooks(target):
        return ModelInputs(base, base_call)
    hook = getattr(target, "prepare_inputs")  # noqa: B009  # a hook, checked above
    entries = _entries(run, "prepare_inputs", run.call("prepare_inputs", hook, batch, states))
    return received(base, base_call, entries, "prepare_inputs")


def dummy_reqs(run: CheckRun, num_tokens: int) -> int:
    """How many requests a dummy run of ``num_tokens`` tokens has, as vLLM's runner picks
    it for a capture: one per token, up to the state's request limit."""
    return max(1, min(num_tokens, run.settings.max_num_reqs))


def capture_inputs(run: CheckRun, target: object, num_tokens: int) -> ModelInputs:
    """What a CUDA graph captured for ``num_tokens`` tokens reads: the ``inputs_embeds``
    of ``prepare_dummy_inputs`` (``None`` when it has none: the model reads token ids),
    or ``dummy_inputs_embeds(num_tokens)`` for a target without the hooks."""
    if not has_hooks(target) or num_tokens == 0:
        view = run.call(
            f"dummy_inputs_embeds({num_tokens})",
            target.dummy_inputs_embeds,  # type: ignore[attr-defined]  # a ModelState
            num_tokens,
        )
        return ModelInputs(view, f"dummy_inputs_embeds({num_tokens})")
    num_reqs = dummy_reqs(run, num_tokens)
    call = f"prepare_dummy_inputs({num_reqs}, {num_tokens})"
    hook = getattr(target, "prepare_dummy_inputs")  # noqa: B009  # a hook
    entries = _entries(run, call, run.call(call, hook, num_reqs, num_tokens))
    return ModelInputs(entries.get("inputs_embeds"), call, entries)


def eager_dummy_inputs(run: CheckRun, target: object, num_tokens: int) -> ModelInputs:
    """What an eager dummy run of ``num_tokens`` tokens hands the model, as vLLM's
    ``execute_model`` does it: ``dummy_inputs_embeds(num_tokens)``, then the overrides of
    ``prepare_inputs`` on the engine's dummy batch."""
    base_call = f"dummy_inputs_embeds({num_tokens})"
    base = run.call(
        base_call,
        target.dummy_inputs_embeds,  # type: ignore[attr-defined]  # a ModelState
        num_tokens,
    )
    if num_tokens == 0 or not has_hooks(target):
        return ModelInputs(base, base_call)
    batch, states = run.engine.dummy_step(dummy_reqs(run, num_tokens), num_tokens, run.device)
    return after_prepare_inputs(run, target, base, base_call, batch, states)
