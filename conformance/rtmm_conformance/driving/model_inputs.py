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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from rtmm_conformance.driving.check_run import CheckRun
from rtmm_conformance.driving.gather_call import describe_error
from rtmm_conformance.driving.hooks import has_hooks
from rtmm_conformance.results import CheckBlocked

__all__ = [
    "HOOKS_CHECK",
    "ModelInputs",
    "after_prepare_inputs",
    "capture_inputs",
    "eager_dummy_inputs",
    "has_hooks",
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


#: The check that judges the hooks themselves; every other check that drives a hook is
#: blocked, not failed, when the hook fails (that failure is M1's to report).
HOOKS_CHECK = "M1-hooks-hand-model-inputs"


def _hook(description: str, fn: Callable[..., object], *args: object) -> Mapping[str, Any]:
    """Call a model-inputs hook; its result must be a mapping of model inputs. A hook that
    raises or returns anything else blocks the check (:class:`CheckBlocked`, from the
    target's exception): :data:`HOOKS_CHECK` reports it."""
    try:
        value = fn(*args)
    except Exception as error:
        raise CheckBlocked(f"{description} raised {describe_error(error)}", HOOKS_CHECK) from error
    if not isinstance(value, Mapping):
        raise CheckBlocked(
            f"{description} returned a {type(value).__name__}, not a mapping of model inputs",
            HOOKS_CHECK,
        )
    return value


def after_prepare_inputs(
    target: object, base: object, base_call: str, batch: object, states: object
) -> ModelInputs:
    """``base`` (what the state's merge or dummy buffer gave), overridden by the entries of
    ``prepare_inputs(batch, states)`` where the target has the hooks: the hook's
    ``inputs_embeds`` when it has one, else ``base``."""
    if not has_hooks(target):
        return ModelInputs(base, base_call)
    hook = getattr(target, "prepare_inputs")  # noqa: B009  # a hook, checked above
    entries = _hook("prepare_inputs", hook, batch, states)
    if "inputs_embeds" in entries:
        return ModelInputs(entries["inputs_embeds"], "prepare_inputs", entries)
    return ModelInputs(base, base_call, entries)


def _dummy_reqs(run: CheckRun, num_tokens: int) -> int:
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
    num_reqs = _dummy_reqs(run, num_tokens)
    call = f"prepare_dummy_inputs({num_reqs}, {num_tokens})"
    hook = getattr(target, "prepare_dummy_inputs")  # noqa: B009  # a hook
    entries = _hook(call, hook, num_reqs, num_tokens)
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
    batch, states = run.engine.dummy_step(_dummy_reqs(run, num_tokens), num_tokens, run.device)
    return after_prepare_inputs(target, base, base_call, batch, states)
