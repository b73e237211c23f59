"""Where ``python -m rtmm_protocol typecheck`` keeps mypy's cache.

The command runs mypy with options of its own (``--follow-imports silent``,
``--disallow-any-unimported``). mypy keeps one set of options per cache, so sharing the
project's ``.mypy_cache`` with a plain ``mypy`` run would make each invalidate the other,
and alternating the two would re-check torch every time (12 to 14 s here). The command
therefore keeps its own cache: ``RTMM_TYPECHECK_CACHE_DIR`` when set, else a folder per
project directory under the user's cache directory (``$XDG_CACHE_HOME``, by default
``~/.cache``). ``MYPY_CACHE_DIR`` is not used, for the same reason.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["CACHE_DIR_ENV_VAR", "typecheck_cache_dir"]

#: Environment variable naming the folder the command's mypy cache lives in.
CACHE_DIR_ENV_VAR = "RTMM_TYPECHECK_CACHE_DIR"


def typecheck_cache_dir(project: Path) -> Path:
    """The mypy cache folder for checks run from ``project`` (one folder per project)."""
    explicit = os.environ.get(CACHE_DIR_ENV_VAR, "").strip()
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(base) if base else Path.home() / ".cache"
    key = hashlib.sha256(str(project.resolve()).encode()).hexdigest()[:16]
    return root / "rtmm-protocol" / "typecheck" / f"{project.resolve().name}-{key}"
