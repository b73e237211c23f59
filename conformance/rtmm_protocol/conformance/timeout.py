"""Running one check with a time limit, so a hanging target fails one check, not the run.

The check runs in a daemon thread. When the limit passes, the thread is sent an
exception (CPython's asynchronous-exception hook), which stops a target looping in
Python at its next bytecode; a target stuck inside native code cannot be stopped this
way, but the run goes on without it.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["CheckInterrupted", "TimedOut", "run_with_timeout"]

_T = TypeVar("_T")

# After the interrupt, how long to wait for the thread to unwind before moving on.
_UNWIND_GRACE_S = 2.0


class CheckInterrupted(BaseException):
    """Sent into a check's thread when its time is up (a BaseException, so that a
    target's ``except Exception`` does not swallow it)."""


@dataclass
class TimedOut:
    """The check did not finish in time; ``stopped`` says whether its thread unwound.

    ``stack`` is where the thread was when its time ran out (outermost frame first).
    """

    limit_s: float
    stopped: bool
    stack: list[tuple[str, int, str]] = field(default_factory=list)


@dataclass
class _Outcome(Generic[_T]):
    value: _T | None = None
    error: BaseException | None = None
    done: bool = False


def run_with_timeout(fn: Callable[[], _T], limit_s: float) -> _T | TimedOut:
    """Call ``fn`` in a thread; return its value, re-raise its error, or return TimedOut."""
    outcome: _Outcome[_T] = _Outcome()

    def target() -> None:
        try:
            outcome.value = fn()
        except BaseException as error:  # handed to the caller below
            outcome.error = error
        finally:
            outcome.done = True

    thread = threading.Thread(target=target, name="rtmm-conformance-check", daemon=True)
    thread.start()
    thread.join(limit_s)
    if not outcome.done:
        stack = _stack_of(thread)
        _interrupt(thread)
        thread.join(_UNWIND_GRACE_S)
        return TimedOut(limit_s=limit_s, stopped=not thread.is_alive(), stack=stack)
    if outcome.error is not None:
        raise outcome.error
    return outcome.value  # type: ignore[return-value]  # set when done without error


def _stack_of(thread: threading.Thread) -> list[tuple[str, int, str]]:
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return []
    return [(f.filename, f.lineno or 0, f.name) for f in traceback.extract_stack(frame)]


def _interrupt(thread: threading.Thread) -> None:
    ident = thread.ident
    if ident is None:
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(ident), ctypes.py_object(CheckInterrupted)
    )
