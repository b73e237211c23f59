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
    "GENERIC_IN_BATCH",
    "PROTOCOL_NAMES",
    "Target",
    "UsageError",
    "batch_class_of",
    "detect_protocol",
    "load_target",
]

#: The Protocols a class can be checked against, by the name the command line uses.
PROTOCOL_NAMES = ("ModelState", "MMEmbeddingGatherer", "VllmModelState")
#: The Protocols generic in the batch class the state's methods take: a class is checked
#: against the Protocol parametrised with that class (``VllmModelState[InputBatch]``).
GENERIC_IN_BATCH = ("VllmModelState",)

_RUNTIME_CHECKS: Mapping[str, Callable[[object], list[SignatureProblem]]] = {
    "ModelState": check_model_state_signature,
    "MMEmbeddingGatherer": check_gatherer_signature,
    "VllmModelState": check_vllm_model_state_signature,
}
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")
_MODEL_STATE_ONLY = ("dummy_inputs_embeds", "get_mm_embeddings")
#: The methods whose ``input_batch`` annotation names the batch class, in the order asked.
_TAKING_THE_BATCH = ("prepare_inputs", "prepare_inputs_embeds", "gather_mm_embeddings")


class UsageError(Exception):
    """A command line that cannot be run; the message names the argument and the reason."""


@dataclass(frozen=True)
class Target:
    """One class named on the command line and the Protocol it is checked against.

    For a Protocol generic in the batch class (:data:`GENERIC_IN_BATCH`), ``batch`` is
    the class the state's methods take, as ``(module, qualname)``
    (:func:`batch_class_of`); ``None`` means it could not be told, and the batch
    parameters are then checked as ``Any``.
    """

    spec: str
    module: str
    qualname: str
    cls: type
    protocol: str
    batch: tuple[str, str] | None = None

    @property
    def generic(self) -> bool:
        """Whether the Protocol is parametrised with the batch class."""
        return self.protocol in GENERIC_IN_BATCH

    @property
    def label(self) -> str:
        """The Protocol as the verdict names it: ``VllmModelState[InputBatch]``,
        ``VllmModelState[Any]``, ``ModelState``."""
        if not self.generic:
            return self.protocol
        batch = "Any" if self.batch is None else self.batch[1]
        return f"{self.protocol}[{batch}]"

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
            "gather_mm_embeddings, dummy_inputs_embeds, get_mm_embeddings, "
            f"prepare_inputs_embeds; pass --protocol ({', '.join(PROTOCOL_NAMES[:-1])} "
            f"or {PROTOCOL_NAMES[-1]})"
        )
    batch = batch_class_of(found) if chosen in GENERIC_IN_BATCH else None
    return Target(spec, module_name, qualname, found, chosen, batch)


def batch_class_of(cls: type) -> tuple[str, str] | None:
    """``(module, qualname)`` of the batch class the methods of ``cls`` take.

    The candidates are the annotations of the ``input_batch`` parameter of
    ``prepare_inputs``, ``prepare_inputs_embeds`` and ``gather_mm_embeddings`` that
    resolve at run time to a class the generated module can import (not one imported only
    under ``TYPE_CHECKING``, nor one defined inside a function). The widest wins, the one
    every other candidate derives from: the runner hands every method the same batch, so
    a method that asks for a narrower class than the others must be the one rejected, not
    the reason to check them all with that class. Candidates that no single class spans
    (unrelated classes, or Protocols) give the first, in the order above, and the type
    checkers report the methods that do not take it. ``None`` when there is no candidate.
    """
    candidates: list[type] = []
    for name in _TAKING_THE_BATCH:
        method = getattr(cls, name, None)
        if method is None:
            continue
        try:
            hints = typing.get_type_hints(method)
        except Exception:  # an annotation that does not resolve here
            continue
        batch = hints.get("input_batch")
        if isinstance(batch, type) and "<locals>" not in batch.__qualname__:
            candidates.append(batch)
    if not candidates:
        return None
    widest = next(
        (c for c in candidates if all(c in other.__mro__ for other in candidates)),
        candidates[0],
    )
    return widest.__module__, widest.__qualname__
