"""Grouping failures by cause, so one fault that breaks ten checks is reported once.

Two failures share a cause when the target raised the same exception type at the same
place in its own code (the innermost frame outside the suite, torch, numpy and the
standard library), when both shrank to the same smallest case in the same mode, or
when they are one check failing the same way in two modes.
Each failure gets its *keys* when it is judged (:func:`cause_of_failure`,
:func:`cause_of_frames`); :func:`group_causes` joins failures that share any key.
"""

from __future__ import annotations

import hashlib
import os
import re
import sysconfig
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import rtmm_protocol.testing
from rtmm_protocol.conformance.reporting.results import FAILING_OUTCOMES, CheckFailure, CheckResult

__all__ = [
    "Cause",
    "CauseKeys",
    "Frame",
    "cause_of_failure",
    "cause_of_frames",
    "frame_kind",
    "group_causes",
    "key_digest",
    "short_path",
    "target_entry",
]

#: ``(filename, line, function)`` of one stack frame, outermost first in a stack.
Frame = tuple[str, int, str]

# ``describe_error`` writes a target's exception as ``Type: message (at file:line)``.
# The type is a class name (capitalised, possibly dotted), so a label before it such as
# "... for 2 requests: ValueError: ..." is not taken for the type.
_DESCRIBED = re.compile(
    r"\b(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*): .*\(at (?P<file>[^()]+?):(?P<line>\d+)\)\s*$"
)


@dataclass(frozen=True)
class CauseKeys:
    """What groups one failure with others (``keys``) and how to name the group."""

    keys: tuple[str, ...]
    title: str

    def encode(self) -> str:
        """The keys as one string, as a :class:`CheckResult` carries them."""
        return "|".join(self.keys)


@dataclass(frozen=True)
class Cause:
    """Failures with one cause: its number, what it is, and the failures in report order."""

    id: str
    title: str
    results: tuple[CheckResult, ...]
    #: A stable name of the cause (a digest of its first failure's main key), which the
    #: junit properties of each failing check carry as well.
    key: str = ""

    @property
    def checks(self) -> list[str]:
        """The IDs of the checks it fails, each once, in report order."""
        return list(dict.fromkeys(r.check_id for r in self.results))

    @property
    def first(self) -> CheckResult:
        """The failure whose replay stands for the whole cause."""
        return self.results[0]


@lru_cache(maxsize=1)
def _roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    import hypothesis
    import numpy
    import pluggy
    import torch

    # The suite and its testing helpers (toy models, instrumented cache) are never "target".
    suite_dirs = {
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        os.path.dirname(os.path.abspath(rtmm_protocol.testing.__file__)),
    }
    suite_dirs |= {os.path.realpath(d) for d in suite_dirs}
    libraries = {
        os.path.dirname(module.__file__ or "") for module in (torch, numpy, hypothesis, pluggy)
    }
    try:
        import _pytest

        libraries.add(os.path.dirname(_pytest.__file__ or ""))
        import pytest

        libraries.add(os.path.dirname(pytest.__file__ or ""))
    except ImportError:  # pragma: no cover - the suite always has pytest
        pass
    for key in ("stdlib", "platstdlib"):
        libraries.add(sysconfig.get_paths()[key])
    libraries |= {os.path.realpath(p) for p in libraries}
    return tuple(d + os.sep for d in suite_dirs), tuple(d + os.sep for d in libraries if d)


def frame_kind(filename: str) -> Literal["suite", "library", "target"]:
    """Whether a frame's file is the suite's, a library's (torch, numpy...) or the target's."""
    suite, libraries = _roots()
    if filename.startswith(suite) or os.path.realpath(filename).startswith(suite):
        return "suite"
    if filename.startswith("<") or filename.startswith(libraries):
        return "library"
    return "target"


def _innermost_target(frames: Sequence[Frame]) -> Frame | None:
    """The innermost target frame below the suite's first frame (else anywhere)."""
    kinds = [frame_kind(f[0]) for f in frames]
    start = kinds.index("suite") if "suite" in kinds else 0
    inside = [f for f, k in zip(frames[start:], kinds[start:], strict=False) if k == "target"]
    return inside[-1] if inside else None


def target_entry(frames: Sequence[Frame]) -> tuple[Frame | None, Frame | None]:
    """Where the suite called into the target, and the suite frame that made the call.

    ``frames`` is a stack, outermost first; frames above the suite's first one (the
    test runner, a user's test calling the API) are not the target's.
    """
    kinds = [frame_kind(f[0]) for f in frames]
    if "suite" not in kinds:
        return None, None
    caller: Frame | None = None
    for frame, kind in zip(
        frames[kinds.index("suite") :], kinds[kinds.index("suite") :], strict=False
    ):
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


def _location_key(kind: str, frame: Frame) -> tuple[str, str]:
    key = f"error:{kind}@{frame[0]}:{frame[1]}"
    return key, f"{kind} at {short_path(frame[0])}:{frame[1]} (in {frame[2]})"


def _case_key(repro: str, mode: str | None) -> str:
    case = "\n".join(
        line
        for line in repro.splitlines()
        if not line.startswith(("replay(", "from rtmm_protocol.conformance import replay"))
    )
    digest = hashlib.sha1(f"{mode}\n{case}".encode()).hexdigest()[:12]
    return f"case:{digest}"


def _chained_error(failure: BaseException) -> BaseException | None:
    seen: set[int] = set()
    error: BaseException | None = failure
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if not isinstance(error, CheckFailure) and error is not failure:
            return error
        error = error.__cause__ or error.__context__
    return None


def cause_of_failure(
    check_id: str, mode: str | None, failure: BaseException, reason: str
) -> CauseKeys:
    """The cause keys of a failure: the target's error and place, and the smallest case."""
    keys: list[str] = []
    title = ""
    error = failure if not isinstance(failure, CheckFailure) else _chained_error(failure)
    if error is not None:
        frames = [
            (f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(error.__traceback__)
        ]
        place = _innermost_target(frames)
        if place is not None:
            key, title = _location_key(type(error).__name__, place)
            keys.append(key)
    if not keys and isinstance(failure, CheckFailure):
        texts = [failure.seen or "", failure.render()]
        for text in texts:
            match = next(
                (m for m in (_DESCRIBED.search(line) for line in text.splitlines()) if m), None
            )
            if match is not None:
                place = (match["file"], int(match["line"]), "?")
                key, title = _location_key(match["type"], place)
                title = title.removesuffix(" (in ?)")
                keys.append(key)
                break
    if isinstance(failure, CheckFailure):
        if failure.repro:
            keys.append(_case_key(failure.repro, mode))
        # One check failing the same way in each of its modes is one fault.
        keys.append(f"check:{check_id}:{failure.what}")
        title = title or failure.what
    if not keys:
        keys.append(f"what:{check_id}:{reason}")
        title = reason
    return CauseKeys(tuple(keys), title or reason)


def cause_of_frames(kind: str, frames: Sequence[Frame], fallback: str) -> CauseKeys:
    """The cause keys of a crash or a hang, from the stack the process was in."""
    place = _innermost_target(frames)
    if place is None:
        return CauseKeys((f"process:{kind}:{fallback}",), f"{kind} ({fallback})")
    key, title = _location_key(kind, place)
    return CauseKeys((key,), title)


def group_causes(results: Iterable[CheckResult]) -> list[Cause]:
    """Failing results joined by shared cause keys, numbered in the order given."""
    failing = [r for r in results if r.outcome in FAILING_OUTCOMES]
    parent = list(range(len(failing)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for index, result in enumerate(failing):
        keys = result.cause_key.split("|") if result.cause_key else []
        for key in keys or [f"what:{result.check_id}:{result.reason}"]:
            if key in owner:
                a, b = find(owner[key]), find(index)
                parent[max(a, b)] = min(a, b)
            else:
                owner[key] = index
    groups: dict[int, list[CheckResult]] = {}
    for index, result in enumerate(failing):
        groups.setdefault(find(index), []).append(result)
    causes = []
    for number, (_, members) in enumerate(sorted(groups.items()), start=1):
        first = members[0]
        title = next((m.cause_title for m in members if m.cause_title), first.reason)
        causes.append(Cause(str(number), title, tuple(members), key_digest(first.cause_key)))
    return causes


def key_digest(encoded_keys: str) -> str:
    """A short stable name for a failure's main cause key (its first one)."""
    main = encoded_keys.split("|", 1)[0]
    return hashlib.sha1(main.encode()).hexdigest()[:8] if main else ""
