"""Grouping failures by cause, so one fault that breaks ten checks is reported once.

Failures share a cause when they share a key: the same exception type at the same place
in the target's own code; the same smallest case in the same mode; one check failing the
same way in two modes; or smallest cases that need the same sort of step in the same mode
(:func:`_sort_of_step`: the number of requests and the kinds of their windows, such as
realtime decode or look-ahead), so that one fault on one kind of window, which fails G1,
G3, G5 and G8 alike, is one cause. One request in its prompt's first chunk groups nothing:
every fault of a gather shows there, so two faults that do would be joined.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rtmm_conformance.reporting.frames import (
    Frame,
    TargetError,
    frame_kind,
    innermost_target,
    short_path,
    target_entry,
)
from rtmm_conformance.reporting.results import FAILING_OUTCOMES, CheckFailure, CheckResult
from rtmm_protocol.testing.scenario import CaseKind

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


#: Kinds of a step's windows beyond the prompt's; with one of them, the window is what the
#: smallest case needs, and its features (masked, miss) are only how a check sees it.
_WINDOW_KINDS = frozenset({"decode", "realtime-decode", "look-ahead", "zero-token"})

#: A prompt's first chunk and its later ones (a stateful life reaches either first).
_PROMPT_KINDS = frozenset({"prefill", "chunked-prefill"})


def _sort_of_step(kind: CaseKind | None) -> CaseKind | None:
    """What groups a failure with others of the same fault: its smallest case's kind, less
    the features' kinds where the window is more than a prompt's, with the prompt's chunks
    as one kind where another kind is left; none for one request in its prompt's first
    chunk, which shows any fault of a gather and so tells none from another."""
    if kind is None:
        return None
    count, kinds = kind
    left = set(kinds)
    if left & _WINDOW_KINDS:
        left &= _WINDOW_KINDS | _PROMPT_KINDS
    if left - _PROMPT_KINDS and left & _PROMPT_KINDS:
        left = (left - _PROMPT_KINDS) | {"prompt"}
    sort = (count, tuple(sorted(left)))
    return None if not left or sort == (1, ("prefill",)) else sort


def _kind_words(kind: CaseKind) -> str:
    count, kinds = kind
    steps = "1 request" if count == 1 else f"{count} requests"
    return f"{steps}: {', '.join(kinds)}"


def _location_key(kind: str, frame: Frame) -> tuple[str, str]:
    key = f"error:{kind}@{frame[0]}:{frame[1]}"
    return key, f"{kind} at {short_path(frame[0])}:{frame[1]} (in {frame[2]})"


def _case_key(repro: str, mode: str | None) -> str:
    case = "\n".join(
        line
        for line in repro.splitlines()
        if not line.startswith(("replay(", "from rtmm_conformance import replay"))
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
    raised = TargetError.of(error) if error is not None else None
    if raised is not None and raised.at is not None:
        key, title = _location_key(raised.type, raised.at)
        keys.append(key)
    if isinstance(failure, CheckFailure):
        if failure.repro:
            keys.append(_case_key(failure.repro, mode))
        # One check failing the same way in each of its modes is one fault.
        keys.append(f"check:{check_id}:{failure.what}")
        if failure.case is None and raised is None:
            # Without a step or an error to place it, the same finding of the code the
            # checks share (a life's buffer test, say) in several checks is one fault.
            keys.append(f"finding:{failure.what}")
        sort = _sort_of_step(failure.case_kind)
        if sort is not None:
            # Checks whose smallest cases need the same sort of step see the same fault.
            keys.append(f"kind:{mode}:{sort[0]}:{'+'.join(sort[1])}")
            title = title or f"{failure.what} (on {_kind_words(sort)})"
        title = title or failure.what
    if not keys:
        keys.append(f"what:{check_id}:{reason}")
        title = reason
    return CauseKeys(tuple(keys), title or reason)


def cause_of_frames(kind: str, frames: Sequence[Frame], fallback: str) -> CauseKeys:
    """The cause keys of a crash or a hang, from the stack the process was in."""
    place = innermost_target(frames)
    if place is None:
        return CauseKeys((f"process:{kind}:{fallback}",), f"{kind} ({fallback})")
    key, title = _location_key(kind, place)
    return CauseKeys((key,), title)


def group_causes(results: Iterable[CheckResult]) -> list[Cause]:
    """Failing results joined by shared cause keys, numbered in the order given."""
    failing = [r for r in results if r.outcome in FAILING_OUTCOMES]
    groups: list[tuple[set[str], list[int]]] = []  # the keys of a group, and its members
    for index, r in enumerate(failing):
        keys = set(r.cause_key.split("|")) if r.cause_key else {f"what:{r.check_id}:{r.reason}"}
        joined = [g for g in groups if g[0] & keys]
        groups = [g for g in groups if not g[0] & keys]
        members = sorted([index, *(i for g in joined for i in g[1])])
        groups.append((keys.union(*(g[0] for g in joined)), members))
    causes = []
    for number, (_, members) in enumerate(sorted(groups, key=lambda g: g[1][0]), start=1):
        group = tuple(failing[i] for i in members)
        title = next((r.cause_title for r in group if r.cause_title), group[0].reason)
        causes.append(Cause(str(number), title, group, key_digest(group[0].cause_key)))
    return causes


def key_digest(encoded_keys: str) -> str:
    """A short stable name for a failure's main cause key (its first one)."""
    main = encoded_keys.split("|", 1)[0]
    return hashlib.sha1(main.encode()).hexdigest()[:8] if main else ""
