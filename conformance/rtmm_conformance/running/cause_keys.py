"""What groups one failure with others of the same fault: its cause keys, computed where the
check ran from the failure itself (the target's exception and the innermost frame of its
own code, the smallest case as a frozen scenario, the sort of step that case needs), or
from the stack of a process that crashed or hung. :mod:`..reporting.causes` joins failures
that share a key.

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
from collections.abc import Sequence

from rtmm_conformance.console import cause_title
from rtmm_conformance.frames import Frame, TargetError, innermost_target
from rtmm_conformance.results import CheckFailure
from rtmm_protocol.testing.scenario import CaseKind, GatherScenario

__all__ = ["CauseKeys", "cause_of_failure", "cause_of_frames"]

#: The keys of a failure, and the title of the cause they name.
CauseKeys = tuple[tuple[str, ...], str]


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


def _location_key(kind: str, frame: Frame) -> tuple[str, str]:
    """The key and title of an error of type ``kind`` raised at ``frame``."""
    return f"error:{kind}@{frame[0]}:{frame[1]}", cause_title(kind, at=frame)


def _case_key(case: GatherScenario, mode: str | None) -> str:
    """The key of a smallest case: the frozen scenario's value, in a mode."""
    digest = hashlib.sha1(repr(case).encode()).hexdigest()[:12]
    return f"case:{mode}:{digest}"


def cause_of_failure(
    check_id: str, mode: str | None, failure: BaseException, reason: str
) -> CauseKeys:
    """The cause keys of a failure: the target's error and place, and the smallest case."""
    keys: list[str] = []
    title = ""
    error = failure.error if isinstance(failure, CheckFailure) else failure
    raised = TargetError.of(error) if error is not None else None
    if raised is not None and raised.at is not None:
        key, title = _location_key(raised.type, raised.at)
        keys.append(key)
    if isinstance(failure, CheckFailure):
        if failure.case is not None:
            keys.append(_case_key(failure.case, mode))
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
            title = title or cause_title(failure.what, kind=sort)
        title = title or failure.what
    if not keys:
        keys.append(f"what:{check_id}:{reason}")
        title = reason
    return tuple(keys), title or reason


def cause_of_frames(kind: str, frames: Sequence[Frame], fallback: str) -> CauseKeys:
    """The cause keys of a crash or a hang, from the stack the process was in."""
    place = innermost_target(frames)
    if place is None:
        return (f"process:{kind}:{fallback}",), cause_title(kind, fallback=fallback)
    key, title = _location_key(kind, place)
    return (key,), title
