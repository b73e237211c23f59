"""``MODULE:CLASS`` specs: parsing one, and importing the class it names.

A spec names the class to check the way ``--conformance=vllm:MODULE:CLASS`` writes it:
a dotted module path, a colon, and the class's (possibly dotted, for a nested class)
qualified name. The module is imported as it is; when it cannot be found, the current
directory is tried as well, because the ``pytest`` console script does not put it on
``sys.path`` while ``python -m pytest`` does.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import traceback
from dataclasses import dataclass

__all__ = ["ClassSpec", "VllmSpecError", "parse_class_spec"]

_MODULE = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_SPEC = re.compile(rf"^(?P<module>{_MODULE}):(?P<qualname>{_MODULE})$")


class VllmSpecError(ValueError):
    """A spec that is not ``MODULE:CLASS``, or that names no importable vLLM class."""


@dataclass(frozen=True)
class ClassSpec:
    """Where a class lives: its module and qualified name, and a folder to import from.

    ``search_dir`` is the folder (the current directory when the spec was loaded) added
    to ``sys.path`` if the module is not importable without it, so that a worker process
    finds the module as the process that loaded the spec did.
    """

    module: str
    qualname: str
    search_dir: str = ""

    def __str__(self) -> str:
        return f"{self.module}:{self.qualname}"

    def import_class(self) -> type:
        """The class, imported; :class:`VllmSpecError` names what is missing."""
        module = self._import_module()
        target: object = module
        for part in self.qualname.split("."):
            try:
                target = getattr(target, part)
            except AttributeError:
                raise VllmSpecError(
                    f"module {self.module!r} has no attribute {self.qualname!r} "
                    f"(from the spec vllm:{self})"
                ) from None
        if not isinstance(target, type):
            raise VllmSpecError(
                f"vllm:{self} names a {type(target).__name__}, not a class: give the "
                "ModelState or EncoderRunner class itself (the adapter builds it)"
            )
        return target

    def _import_module(self) -> object:
        try:
            return importlib.import_module(self.module)
        except ModuleNotFoundError as error:
            if not _is_the_module(error, self.module):
                raise self._needs_package(error) from error
            first_error = error
        if self.search_dir and self.search_dir not in sys.path:
            sys.path.insert(0, self.search_dir)
            importlib.invalidate_caches()
            try:
                return importlib.import_module(self.module)
            except ModuleNotFoundError as error:
                if not _is_the_module(error, self.module):
                    raise
        where = f"sys.path and {self.search_dir}" if self.search_dir else "sys.path"
        raise VllmSpecError(
            f"cannot import module {self.module!r} named in vllm:{self} (looked in {where}); "
            "install the package that provides it or run from the folder that holds it"
        ) from first_error

    def _needs_package(self, error: ModuleNotFoundError) -> VllmSpecError:
        """The error for a module that exists but imports a package that is missing (the
        innermost error that names it: transformers re-raises one without the name)."""
        named = _named_missing(error) or error
        frames = traceback.extract_tb(named.__traceback__)
        line = next(
            (f"{f.filename.split('site-packages/')[-1]}:{f.lineno}" for f in reversed(frames)),
            "",
        )
        package = repr(named.name) if named.name else "a package"
        return VllmSpecError(
            f"module {self.module!r} (from vllm:{self}) imports {package}, which is not "
            f"installed here{f' (at {line})' if line else ''}: install it, or check the class "
            "on a machine that has it (the Engines page lists what each of vLLM's model "
            "states needs beyond the CPU-only install)"
        )


def _named_missing(error: BaseException) -> ModuleNotFoundError | None:
    """The first ``ModuleNotFoundError`` in ``error``'s chain that names its module."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModuleNotFoundError) and current.name:
            return current
        current = current.__cause__ or current.__context__
    return None


def _is_the_module(error: ModuleNotFoundError, name: str) -> bool:
    """Whether ``error`` says ``name`` (or a package above it) is missing."""
    return error.name is not None and (name == error.name or name.startswith(error.name + "."))


def parse_class_spec(spec: str) -> ClassSpec:
    """``MODULE:CLASS`` as a :class:`ClassSpec` (with the current directory to search);
    :class:`VllmSpecError` for anything else."""
    match = _SPEC.match(spec) if isinstance(spec, str) else None
    if match is None:
        raise VllmSpecError(
            "the vLLM adapter expects MODULE:CLASS, for example "
            "vllm.v1.worker.gpu.model_states.default:DefaultModelState or "
            f"acme.state:AcmeModelState, got {spec!r}"
        )
    return ClassSpec(match.group("module"), match.group("qualname"), os.getcwd())
