"""The classes to check: parse ``MODULE:CLASS``, import it, and pick its Protocol."""

from __future__ import annotations

import importlib
import inspect
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rtmm_protocol.signatures import (
    SignatureProblem,
    check_gatherer_signature,
    check_model_state_signature,
    check_vllm_model_state_signature,
)

__all__ = [
    "PROTOCOL_NAMES",
    "Target",
    "UsageError",
    "batch_class_of",
    "detect_protocol",
    "load_target",
]

#: The Protocols a class can be checked against, by the name the command line uses.
PROTOCOL_NAMES = ("ModelState", "MMEmbeddingGatherer", "VllmModelState")
#: The Protocols generic in the batch class the state's methods take.
_GENERIC_IN_BATCH = ("VllmModelState",)

_RUNTIME_CHECKS: Mapping[str, Callable[[object], list[SignatureProblem]]] = {
    "ModelState": check_model_state_signature,
    "MMEmbeddingGatherer": check_gatherer_signature,
    "VllmModelState": check_vllm_model_state_signature,
}
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")
_MODEL_STATE_ONLY = ("dummy_inputs_embeds", "get_mm_embeddings")


class UsageError(Exception):
    """A command line that cannot be run; the message names the argument and the reason."""


@dataclass(frozen=True)
class Target:
    """One class named on the command line and the Protocol it is checked against; for a
    Protocol generic in the batch class, ``batch`` is the class the state's
    ``prepare_inputs`` takes (``(module, qualname)``; ``None``: unknown, checked as
    ``Any``)."""

    spec: str
    module: str
    qualname: str
    cls: type
    protocol: str
    batch: tuple[str, str] | None = None

    def runtime_problems(self) -> list[SignatureProblem]:
        """The signature problems :mod:`rtmm_protocol.signatures` finds on the class."""
        return _RUNTIME_CHECKS[self.protocol](self.cls)


def detect_protocol(cls: type) -> str | None:
    """The Protocol ``cls`` is meant to satisfy, judged by its methods; None if unclear.

    A class with ``prepare_inputs_embeds`` (vLLM's name for ``get_mm_embeddings`` since
    0.29) is a model state in vLLM's spelling; one with ``dummy_inputs_embeds`` or
    ``get_mm_embeddings``, or whose ``gather_mm_embeddings`` takes an ``input_batch``, is a
    model state; one with only a ``gather_mm_embeddings`` is a gatherer.
    """
    if hasattr(cls, "prepare_inputs_embeds"):
        return "VllmModelState"
    if any(hasattr(cls, name) for name in _MODEL_STATE_ONLY):
        return "ModelState"
    gather = getattr(cls, "gather_mm_embeddings", None)
    if gather is None:
        return None
    try:
        parameters = inspect.signature(gather).parameters
    except (TypeError, ValueError):
        return "MMEmbeddingGatherer"
    return "ModelState" if "input_batch" in parameters else "MMEmbeddingGatherer"


def load_target(spec: str, protocol: str | None) -> Target:
    """Import the class ``spec`` names; ``protocol`` None means detect it from the class.

    Raises :class:`UsageError` when the spec is malformed, the module does not import,
    the attribute is missing or not a class, or no Protocol fits.
    """
    module_name, sep, qualname = spec.partition(":")
    if not sep or not _DOTTED.match(module_name) or not _DOTTED.match(qualname):
        raise UsageError(f"{spec!r} is not of the form MODULE:CLASS (for example pkg.mod:MyState)")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise UsageError(
            f"cannot import module {module_name!r} named in {spec!r}: "
            f"{type(error).__name__}: {error}"
        ) from error
    found: object = module
    for part in qualname.split("."):
        if not hasattr(found, part):
            raise UsageError(f"module {module_name!r} has no attribute {qualname!r} ({spec!r})")
        found = getattr(found, part)
    if not isinstance(found, type):
        raise UsageError(f"{spec!r} is a {type(found).__name__}, not a class")
    chosen = protocol or detect_protocol(found)
    if chosen is None:
        raise UsageError(
            f"cannot tell which Protocol {spec!r} should satisfy: it has none of "
            "gather_mm_embeddings, dummy_inputs_embeds, get_mm_embeddings; "
            f"pass --protocol ({' or '.join(PROTOCOL_NAMES)})"
        )
    batch = batch_class_of(found) if chosen in _GENERIC_IN_BATCH else None
    return Target(spec, module_name, qualname, found, chosen, batch)


def batch_class_of(cls: type) -> tuple[str, str] | None:
    """``(module, qualname)`` of the batch class ``cls.prepare_inputs`` is annotated to
    take (its ``input_batch`` parameter); ``None`` when it has no such class annotation."""
    method = getattr(cls, "prepare_inputs", None)
    if method is None:
        return None
    try:
        hints = typing.get_type_hints(method)
    except Exception:  # an annotation that does not resolve here
        return None
    batch = hints.get("input_batch")
    if not isinstance(batch, type):
        return None
    return batch.__module__, batch.__qualname__
