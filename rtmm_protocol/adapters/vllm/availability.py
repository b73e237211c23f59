"""Which vLLM releases the adapter supports, and importing vLLM without its import noise.

The adapter builds vLLM's ModelRunner V2 classes (``vllm.v1.worker.gpu``) the way vLLM
builds them. It supports the releases whose encoder runner has the realtime gather (a
``num_computed_tokens`` window and decode-step gathering for realtime models) *and* can
run on a machine without a GPU: from vLLM 0.28.0, whose encoder runner takes its
host-memory pinning from a module setting the adapter can switch off on CPU (0.25.0 to
0.27.x pin unconditionally), up to the newest release checked, 0.33.x.

vLLM's import on a CPU-only machine sets off ``DeprecationWarning``s from torch
(``torch.jit.script_method``, reached through vLLM's ``torch.compile`` decorators),
fourteen of them with vLLM 0.33.0; :func:`import_vllm` silences that category while, and
only while, vLLM's modules are imported, so that a pytest run does not open with a screen
of them. Warnings raised later, by vLLM's code as the checks run it, are left alone.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import sys
import warnings
from typing import Any

__all__ = [
    "CPU_INSTALLER",
    "OLDEST_SUPPORTED",
    "SUPPORTED_RANGE",
    "TESTED_VERSIONS",
    "VllmUnavailableError",
    "import_vllm",
    "installed_vllm_version",
    "is_supported",
    "require_supported_vllm",
]

#: The oldest supported release (the first whose encoder runner can run on a CPU).
OLDEST_SUPPORTED = (0, 28)
#: The newest supported minor release (every patch release of it is accepted).
NEWEST_SUPPORTED = (0, 33)
#: The supported releases, as a pip requirement.
SUPPORTED_RANGE = ">=0.28.0,<0.34"
#: The releases continuous integration runs the suite against.
TESTED_VERSIONS = ("0.28.0", "0.33.0")
#: The repository's CPU-only installer (vLLM without its CUDA dependencies).
CPU_INSTALLER = "tools/install_vllm_cpu.sh"

_RELEASE = re.compile(r"^(\d+)\.(\d+)")


class VllmUnavailableError(ImportError):
    """vLLM is not installed, is a release the adapter does not support, or fails to import.

    The message says what to install.
    """


def _install_hint() -> str:
    return (
        f"supported: vLLM {SUPPORTED_RANGE.replace(',', ', ')} (tested: "
        f"{', '.join(TESTED_VERSIONS)}). Install one with `pip install "
        f"'rtmm-protocol[vllm]'` (vLLM with its CUDA dependencies), or CPU-only with "
        f"`bash {CPU_INSTALLER} VENV --vllm {TESTED_VERSIONS[-1]}` from the rtmm-protocol "
        "repository"
    )


def installed_vllm_version() -> str | None:
    """The installed vLLM's version, read from its metadata (vLLM is not imported)."""
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def is_supported(version: str) -> bool:
    """Whether a vLLM version (``0.33.0``, ``0.33.1.dev4+g1234``) is one the adapter supports."""
    match = _RELEASE.match(version)
    if match is None:
        return False
    release = (int(match.group(1)), int(match.group(2)))
    return OLDEST_SUPPORTED <= release <= NEWEST_SUPPORTED


def require_supported_vllm() -> str:
    """The installed vLLM's version; :class:`VllmUnavailableError` when it is missing or
    not supported."""
    version = installed_vllm_version()
    if version is None:
        raise VllmUnavailableError(
            f"the vLLM adapter needs vLLM, which is not installed for {sys.executable}; "
            + _install_hint()
        )
    if not is_supported(version):
        raise VllmUnavailableError(
            f"vLLM {version} is installed, which the vLLM adapter does not support; "
            + _install_hint()
        )
    return version


def import_vllm(name: str = "vllm") -> Any:
    """Import a module of vLLM (after checking the release), without its import-time
    ``DeprecationWarning``s.

    Typed ``Any``: vLLM's modules are read and set attribute by attribute, and type
    checking runs where vLLM is not installed.

    Raises :class:`VllmUnavailableError` when vLLM is missing, unsupported, or one of the
    packages its import needs is missing (a partial install).
    """
    if name != "vllm" and not name.startswith("vllm."):
        raise ValueError(f"not a module of vLLM: {name!r}")
    if name in sys.modules:
        return sys.modules[name]
    version = require_supported_vllm()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return importlib.import_module(name)
    except ImportError as error:
        raise VllmUnavailableError(
            f"vLLM {version} is installed but importing {name} failed ({type(error).__name__}: "
            f"{error}): a package it needs is missing; " + _install_hint()
        ) from error
