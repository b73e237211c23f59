"""What a class is to vLLM: a ModelRunner V2 model state or an encoder runner, and which
of vLLM's own classes it derives from.

The level decides how the adapter builds the class (as the model runner builds a model
state, or as a model state builds its encoder runner) and which clauses the suite holds
it to. The *vLLM base* is the nearest class in the class's method resolution order that
vLLM itself defines: the class a user's subclass inherits its behaviour from, checked
next to it so that a report can tell the user's own failures from inherited ones.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Literal

from rtmm_protocol.adapters.vllm.availability import import_vllm
from rtmm_protocol.adapters.vllm.class_spec import VllmSpecError

__all__ = [
    "ENCODER_RUNNER_CLASS",
    "MODEL_STATE_CLASS",
    "Level",
    "VllmClassKind",
    "classify",
    "defined_by_vllm",
    "vllm_classes",
]

#: ``model_state``: built as ``CLASS(vllm_config, model, encoder_cache, device)`` and
#: checked as a ModelState; ``encoder_runner``: built as a model state builds its
#: encoder runner and checked at the runner level.
Level = Literal["model_state", "encoder_runner"]

#: vLLM's abstract model state of ModelRunner V2, which every model state derives from.
MODEL_STATE_CLASS = "vllm.v1.worker.gpu.model_states.interface:ModelState"
#: vLLM's multimodal encoder runner of ModelRunner V2.
ENCODER_RUNNER_CLASS = "vllm.v1.worker.gpu.mm.encoder_runner:EncoderRunner"


@dataclass(frozen=True)
class VllmClassKind:
    """A class's level, the nearest class vLLM defines among itself and its bases, whether
    that is the class itself (vLLM's own class rather than a subclass of it), and the
    ``baseline``: the class whose failures this one's are compared with, so that what it
    inherits is told from its own (``None`` when it derives only from vLLM's abstract
    interface)."""

    level: Level
    vllm_base: type
    is_vllm_own: bool
    baseline: type | None


def _vllm_class(where: str) -> type:
    module_name, _, name = where.partition(":")
    cls = getattr(import_vllm(module_name), name)
    if not isinstance(cls, type):  # pragma: no cover - vLLM's own layout
        raise TypeError(f"{where} is not a class in this vLLM")
    return cls


def vllm_classes() -> tuple[type, type]:
    """vLLM's ``ModelState`` and ``EncoderRunner``, imported quietly.

    Import them before a user's module, which imports them too: vLLM's import-time
    warnings are then silenced once, here, and the user's module imports nothing new.
    """
    return _vllm_class(MODEL_STATE_CLASS), _vllm_class(ENCODER_RUNNER_CLASS)


def defined_by_vllm(cls: type) -> bool:
    """Whether ``cls`` is defined in the ``vllm`` package."""
    module = getattr(cls, "__module__", "") or ""
    return module == "vllm" or module.startswith("vllm.")


def classify(cls: type, spec: str) -> VllmClassKind:
    """The level of ``cls`` and its nearest vLLM-defined class (``cls`` itself if vLLM's).

    :class:`~rtmm_protocol.adapters.vllm.class_spec.VllmSpecError` names ``spec`` when
    ``cls`` derives from neither of vLLM's two classes.
    """
    level: Level
    model_state, encoder_runner = vllm_classes()
    if issubclass(cls, model_state):
        level = "model_state"
    elif issubclass(cls, encoder_runner):
        level = "encoder_runner"
    else:
        bases = ", ".join(f"{b.__module__}.{b.__qualname__}" for b in cls.__mro__[1:])
        raise VllmSpecError(
            f"vllm:{spec} is {cls.__module__}.{cls.__qualname__}, which derives from neither "
            f"vLLM's ModelState ({MODEL_STATE_CLASS}) nor its EncoderRunner "
            f"({ENCODER_RUNNER_CLASS}); its bases: {bases or 'none'}"
        )
    base = next(c for c in cls.__mro__ if defined_by_vllm(c))
    if base is not cls:
        return VllmClassKind(level, base, False, base)
    # One of vLLM's own classes derived from another of them (LongcatNgramModelState from
    # DefaultModelState) is compared with that one, as a user's subclass is.
    baseline = next(
        (c for c in cls.__mro__[1:] if defined_by_vllm(c) and not inspect.isabstract(c)), None
    )
    return VllmClassKind(level, base, True, baseline)
