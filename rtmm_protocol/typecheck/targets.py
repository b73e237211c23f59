"""The classes to check: parse ``MODULE:CLASS``, import it, and pick its Protocol."""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rtmm_protocol.signatures import (
    SignatureProblem,
    check_gatherer_signature,
    check_model_state_signature,
)

__all__ = ["PROTOCOL_NAMES", "Target", "UsageError", "detect_protocol", "load_target"]

#: The Protocols a class can be checked against, by the name the command line uses.
PROTOCOL_NAMES = ("ModelState", "MMEmbeddingGatherer")

_RUNTIME_CHECKS: Mapping[str, Callable[[object], list[SignatureProblem]]] = {
    "ModelState": check_model_state_signature,
    "MMEmbeddingGatherer": check_gatherer_signature,
}
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*\Z")
_MODEL_STATE_ONLY = ("dummy_inputs_embeds", "get_mm_embeddings")


class UsageError(Exception):
    """A command line that cannot be run; the message names the argument and the reason."""


@dataclass(frozen=True)
class Target:
    """One class named on the command line and the Protocol it is checked against."""

    spec: str
    module: str
    qualname: str
    cls: type
    protocol: str

    def runtime_problems(self) -> list[SignatureProblem]:
        """The signature problems :mod:`rtmm_protocol.signatures` finds on the class."""
        return _RUNTIME_CHECKS[self.protocol](self.cls)


def detect_protocol(cls: type) -> str | None:
    """The Protocol ``cls`` is meant to satisfy, judged by its methods; None if unclear.

    A class with ``dummy_inputs_embeds`` or ``get_mm_embeddings``, or whose
    ``gather_mm_embeddings`` takes an ``input_batch``, is a model state; one with only a
    ``gather_mm_embeddings`` is a gatherer.
    """
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
    return Target(spec, module_name, qualname, found, chosen)
