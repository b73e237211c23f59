"""Whose code a stack frame is (the suite's, a library's or the target's), and an exception
a target raised as fields: the bottom of the suite (it imports nothing else of it), so
that every layer above can name the target's own frame."""

from __future__ import annotations

import os
import sysconfig
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import rtmm_protocol.testing

__all__ = [
    "Frame",
    "TargetError",
    "frame_kind",
    "innermost_target",
    "short_path",
    "target_entry",
]

#: ``(filename, line, function)`` of one stack frame, outermost first in a stack.
Frame = tuple[str, int, str]


@lru_cache(maxsize=1)
def _roots() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    import _pytest
    import hypothesis
    import numpy
    import pluggy
    import pytest
    import torch

    # The suite, its testing helpers (toy models, instrumented cache) and the engine
    # adapters (which translate types around a target) are never "target".
    package = os.path.dirname(rtmm_protocol.testing.__file__)
    suite = [
        os.path.dirname(os.path.dirname(__file__)),
        package,
        os.path.join(os.path.dirname(package), "adapters"),
    ]
    modules = (torch, numpy, hypothesis, pluggy, _pytest, pytest)
    libraries = [os.path.dirname(m.__file__ or "") for m in modules]
    paths = sysconfig.get_paths()
    # In a virtual environment the standard library's folder can hold site-packages.
    stdlib = [paths[key] for key in ("stdlib", "platstdlib")]
    site = [paths[key] for key in ("purelib", "platlib")]
    return _prefixes(suite), _prefixes(libraries), _prefixes(stdlib), _prefixes(site)


def _prefixes(folders: list[str]) -> tuple[str, ...]:
    """Each folder, as given and with links resolved, as the prefix of the paths inside it."""
    return tuple(
        {p + os.sep for f in folders if f for p in (os.path.abspath(f), os.path.realpath(f))}
    )


def frame_kind(filename: str) -> Literal["suite", "library", "target"]:
    """Whether a frame's file is the suite's, a library's (torch, numpy, the standard
    library...) or the target's (an engine installed in site-packages included)."""
    suite, libraries, stdlib, site = _roots()
    if filename.startswith(suite) or os.path.realpath(filename).startswith(suite):
        return "suite"
    if filename.startswith("<") or filename.startswith(libraries):
        return "library"
    if filename.startswith(stdlib) and not filename.startswith(site):
        return "library"
    return "target"


def innermost_target(frames: Sequence[Frame]) -> Frame | None:
    """The innermost target frame below the suite's first frame (else anywhere)."""
    kinds = [frame_kind(f[0]) for f in frames]
    start = kinds.index("suite") if "suite" in kinds else 0
    inside = [f for f, k in zip(frames[start:], kinds[start:], strict=False) if k == "target"]
    return inside[-1] if inside else None


def target_entry(frames: Sequence[Frame]) -> tuple[Frame | None, Frame | None]:
    """Where the suite called into the target, and the suite frame that made the call; in a
    stack (outermost first), frames above the suite's first one are not the target's."""
    kinds = [frame_kind(f[0]) for f in frames]
    if "suite" not in kinds:
        return None, None
    start, caller = kinds.index("suite"), None
    for frame, kind in zip(frames[start:], kinds[start:], strict=False):
        if kind == "suite":
            caller = frame
        elif kind == "target":
            return frame, caller
    return None, caller


def short_path(filename: str) -> str:
    """A file name short enough for a summary line: from ``site-packages`` or the cwd."""
    marker = f"site-packages{os.sep}"
    if marker in filename:
        return filename.split(marker, 1)[1]
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive on Windows
        return filename
    return filename if relative.startswith(os.pardir) else relative


@dataclass(frozen=True)
class TargetError:
    """An exception a target raised: its type, the first line of its message and ``at``,
    the innermost frame of the target's own code (``None`` when no frame is the target's),
    so that a frame of the suite's instrumented cache or of torch is never blamed."""

    type: str
    message: str
    at: Frame | None

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> TargetError:
        """The error from the fields :func:`dataclasses.asdict` gave (read back from JSON)."""
        at = fields["at"]
        frame = None if at is None else (str(at[0]), int(at[1]), str(at[2]))
        return cls(str(fields["type"]), str(fields["message"]), frame)

    @classmethod
    def of(cls, error: BaseException) -> TargetError:
        """The fields of ``error``, from its traceback."""
        frames = [
            (f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(error.__traceback__)
        ]
        text = str(error).strip()
        message = text.splitlines()[0] if text else ""
        return cls(type(error).__name__, message, innermost_target(frames))

    def __str__(self) -> str:
        """``Type: message (at file:line)``, as failure messages show it (the file from
        ``site-packages`` or the working directory, as :func:`short_path` writes it)."""
        where = f" (at {short_path(self.at[0])}:{self.at[1]})" if self.at is not None else ""
        return f"{self.type}: {self.message}{where}"
