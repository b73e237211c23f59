"""Finding the object under test: a factory name (``MODULE:FACTORY``, or ``vllm:MODULE:CLASS`` for
a target an installed adapter builds, with the class it derives from), its factory, and
which kind its targets are (a ``ModelState`` or a runner-level ``MMEmbeddingGatherer``)."""

from __future__ import annotations

import importlib
import re
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

# Imported for its side effect first: the comparison functions the verdicts use are
# bound before a factory module (target code) is imported by _load_factory.
from rtmm_protocol.testing import comparisons  # noqa: F401  # isort: skip
from rtmm_conformance.clauses import TargetKind
from rtmm_conformance.driving.context import ConformanceContext, Factory
from rtmm_conformance.driving.hooks import hands_no_inputs_embeds
from rtmm_protocol.compat import adapt_legacy_gatherer
from rtmm_protocol.testing.model_configuration import ModelConfiguration

__all__ = [
    "CompatFactory",
    "FactoryNameError",
    "Target",
    "detect_kind",
    "factory_name_of",
    "load_target",
]

#: Name prefix -> the module whose ``load_target(rest)`` builds such targets.
_ADAPTERS: Mapping[str, str] = {"vllm": "rtmm_protocol.adapters.vllm"}


@dataclass(frozen=True)
class Target:
    """What a factory's name (``MODULE:FACTORY``, ``vllm:MODULE:CLASS``) stands for: the
    factory, that ``name``, the ``baseline`` factory of the class it derives from (named
    ``baseline_name``), versions for the report, and the model ``configuration`` its
    targets are built with when the run names none (an adapter's, for an engine's own
    classes; SPEC M3)."""

    factory: Factory
    name: str
    baseline: Factory | None = None
    baseline_name: str = ""
    environment: Mapping[str, str] = field(default_factory=dict)
    configuration: ModelConfiguration | None = None


@dataclass(frozen=True)
class CompatFactory:
    """``factory``'s targets wrapped in the rename's compat adapter (a T2 migration run);
    a class, not a closure, so that a worker process can receive it."""

    factory: Factory

    @property
    def engine(self) -> object:
        """The wrapped factory's engine (its targets take the same steps)."""
        return getattr(self.factory, "engine", None)

    def __call__(self, ctx: ConformanceContext) -> object:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the report says it instead
            return adapt_legacy_gatherer(self.factory(ctx), ctx.encoder_cache)  # type: ignore[arg-type]


def load_target(name: str, search_dirs: Sequence[Path] = ()) -> Target:
    """The target a ``--conformance`` name names (see the module docstring)."""
    prefix, _, rest = name.partition(":")
    if prefix in _ADAPTERS and rest.count(":") == 1:
        loaded = importlib.import_module(_ADAPTERS[prefix]).load_target(rest)
        return Target(
            loaded.factory,
            name,
            loaded.baseline,
            loaded.baseline_name,
            loaded.environment,
            loaded.configuration,
        )
    return Target(_load_factory(name, search_dirs), name)


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_.]*$")


class FactoryNameError(ValueError):
    """A ``MODULE:FACTORY`` name that is malformed or does not lead to a callable."""


def _load_factory(name: str, search_dirs: Sequence[Path] = ()) -> Factory:
    """Import the factory a ``MODULE:FACTORY`` name names; a module not importable as is is
    looked for in ``search_dirs`` (the ``pytest`` script does not put the invocation directory
    on the path)."""
    if not _NAME.match(name):
        hint = ""
        if "/" in name or "\\" in name or name.endswith(".py") or name in {".", ".."}:
            hint = (
                " It looks like a path: an option with an optional value takes the next "
                "argument, so `pytest --conformance tests/` reads tests/ as the factory. "
                "Write --conformance=MODULE:FACTORY; no path is needed, the suite runs on its "
                "own (select checks with -k)."
            )
        raise FactoryNameError(
            f"--conformance expects MODULE:FACTORY (for example acme.factory:make_state) "
            f"or no value for the bundled reference, got {name!r}.{hint}"
        )
    module_name, _, attr = name.partition(":")
    module = _import_module(module_name, search_dirs)
    target: object = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise FactoryNameError(
                f"module {module_name!r} has no attribute {attr!r} (from --conformance={name})"
                + _shadowing(module_name)
            ) from None
    if not callable(target):
        raise FactoryNameError(f"{name} is a {type(target).__name__}, not a callable FACTORY(ctx)")
    return target


def _missing(error: ModuleNotFoundError, name: str) -> bool:
    """Whether ``name`` itself (or a package above it) is missing, not one of its imports."""
    return error.name is not None and (name == error.name or name.startswith(error.name + "."))


def _import_module(name: str, search_dirs: Sequence[Path]) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if not _missing(error, name):
            raise  # the module exists but one of its own imports is missing
        first_error = error
    added = [str(d) for d in search_dirs if str(d) not in sys.path]
    for directory in reversed(added):
        sys.path.insert(0, directory)
    importlib.invalidate_caches()
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if not _missing(error, name):
            raise
        shadow = _shadowing(name)
        if shadow:
            raise FactoryNameError(
                f"cannot import module {name!r} for --conformance{shadow}"
            ) from first_error
        looked = ", ".join(added) if added else "sys.path"
        raise FactoryNameError(
            f"cannot import module {name!r} for --conformance (looked in sys.path and "
            f"{looked}); install the package that provides it or run pytest from the "
            "directory that holds it"
        ) from first_error


def _shadowing(name: str) -> str:
    """``: ...`` naming a folder without ``__init__.py`` that, first on ``sys.path``, was
    imported as an empty namespace package in place of a package on ``name``'s path."""
    parts = name.split(".")
    for depth in range(1, len(parts) + 1):
        module = sys.modules.get(".".join(parts[:depth]))
        if module is not None and getattr(module, "__file__", None) is None:
            folders = ", ".join(dict.fromkeys(getattr(module, "__path__", [])))
            return (
                f": {'.'.join(parts[:depth])!r} was imported from the folder {folders}, "
                "which has no __init__.py, as an empty namespace package that shadows the "
                "package of that name you meant; rename that folder or run pytest from "
                "another directory"
            )
    return ""


def detect_kind(target: object, *, multimodal: bool = False) -> TargetKind | None:
    """``model_state`` for a ModelState, ``gatherer`` for a runner, ``None`` for neither; a
    ModelState built for a ``multimodal`` model whose dummy runs hand the model no
    ``inputs_embeds`` is a ``cross_attention`` state (SPEC M2), told from what it hands the
    model (its real steps are then checked to hand none either: M2's checks)."""
    if hasattr(target, "dummy_inputs_embeds") or hasattr(target, "get_mm_embeddings"):
        if multimodal and hands_no_inputs_embeds(target):
            return "cross_attention"
        return "model_state"
    if callable(getattr(target, "gather_mm_embeddings", None)):
        return "gatherer"
    return None


def factory_name_of(factory: Factory) -> str:
    """``MODULE:QUALNAME`` of a factory, for reproduction snippets."""
    module = getattr(factory, "__module__", None) or "your_module"
    name = getattr(factory, "__qualname__", None) or getattr(factory, "__name__", "factory")
    return f"{module}:{name}"
