"""Where checks run: a reused worker process, or this one (:class:`InProcess`).

A target may crash, hang or initialise CUDA, so checks run in a worker started by
``forkserver`` (else ``spawn``), which never inherits a CUDA context. A worker that dies or
outlives a time limit is replaced; the stack ``faulthandler`` wrote says where it was. A
call that asks for it with :func:`retire_worker` (a CUDA error left the worker's context
unusable) gives its result, and its worker ends: the next call starts a new one.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import multiprocessing
import multiprocessing.connection
import os
import pickle
import re
import signal
import sys
import tempfile
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from rtmm_conformance.frames import Frame

__all__ = [
    "Crashed",
    "Executor",
    "ExecutorError",
    "InProcess",
    "TimedOut",
    "WorkerProcess",
    "parse_stack_dump",
    "retire_worker",
]

_T = TypeVar("_T")

#: Modules the forkserver imports once, so that a new worker starts in milliseconds.
_PRELOAD = ["rtmm_conformance.running.verdict"]
_START_TIMEOUT_S = 120.0  # for a new worker to say it is ready, imports included
_DUMP_GRACE_S = 0.5  # for a hung worker to write its stack before it is killed
_PR_SET_PDEATHSIG = 1


#: Why the worker must end after the call it is running ("" while it may go on).
_retiring = [""]


def retire_worker(why: str) -> None:
    """End the worker process once the running call has returned, for ``why``; the next
    call starts in a new one. Called where a call runs: in this process it changes nothing."""
    _retiring[0] = why


@dataclass(frozen=True)
class Crashed:
    """The worker died during the call: killed by a signal or exited; ``stack`` is where."""

    how: str
    stack: str


@dataclass(frozen=True)
class TimedOut:
    """The call outlived its time limit and its worker was killed; ``stack`` is where it was."""

    limit_s: float
    stack: str


class ExecutorError(RuntimeError):
    """The worker could not be started or could not be given the call."""


class InProcess:
    """Runs calls in this process: no time limit, no protection from crashes."""

    def call(self, fn: Callable[..., _T], *args: object, limit_s: float) -> _T | Crashed | TimedOut:
        """``fn(*args)``, here and now."""
        try:
            return fn(*args)
        finally:
            _retiring[0] = ""  # there is no other process to move to

    def close(self) -> None:
        """Nothing to release."""


class WorkerProcess:
    """One worker process at a time, started on first use and replaced after a crash or
    hang; each call's ``fn`` (a module-level function) and ``args`` are pickled to it."""

    def __init__(self) -> None:
        self._trace = tempfile.NamedTemporaryFile(prefix="rtmm-worker-", suffix=".txt")  # noqa: SIM115  # closed in close()
        # ``[process, connection]`` of the running worker, shared with the finalizer (which
        # must not hold ``self``). Registered with atexit here, after multiprocessing's own
        # exit handler, so that it runs first: that handler waits for every child to end.
        self._live: list[Any] = [None, None]
        self._finalizer = weakref.finalize(self, _stop, self._live)
        atexit.register(self._finalizer)

    def call(self, fn: Callable[..., _T], *args: object, limit_s: float) -> _T | Crashed | TimedOut:
        """``fn(*args)`` in the worker, within ``limit_s`` seconds; :class:`ExecutorError`
        when the worker cannot start."""
        process, connection = self._ensure_running()
        try:
            connection.send((fn, args))
        except (OSError, pickle.PicklingError) as error:
            self._kill()
            raise ExecutorError(f"cannot hand the call to the worker process: {error}") from None
        try:
            if not multiprocessing.connection.wait([connection, process.sentinel], limit_s):
                stack = self._dump_stack(process)
                self._kill()
                return TimedOut(limit_s, stack)
            try:
                status, value, retired = connection.recv()
            except (EOFError, OSError):
                return self._crashed(process)
        except BaseException:  # the user's Ctrl-C, mostly: stop the worker, then go up
            self._kill()
            raise
        if retired:  # it ends itself after this reply; the next call starts a new one
            self._kill()
        if status == "error":
            raise ExecutorError(f"the suite failed in its worker process:\n{value}")
        result: _T = value
        return result

    def close(self) -> None:
        """Stop the worker (if one runs) and remove its stack file."""
        _stop(self._live)
        self._trace.close()
        atexit.unregister(self._finalizer)

    def _ensure_running(self) -> tuple[Any, multiprocessing.connection.Connection]:
        if self._live[0] is not None:
            return self._live[0], self._live[1]
        # forkserver (preloading the suite), else spawn: never plain fork.
        context: Any = multiprocessing.get_context("spawn")  # Any: contexts differ per method
        if "forkserver" in multiprocessing.get_all_start_methods():
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(_PRELOAD)
        pipe: tuple[multiprocessing.connection.Connection, ...] = context.Pipe()
        parent, child = pipe
        process = context.Process(
            target=_serve, args=(child, self._trace.name), name="rtmm-conformance-worker"
        )
        try:
            process.start()
        except Exception as error:
            raise ExecutorError(f"cannot start a worker process: {error}") from error
        child.close()
        self._live[:] = [process, parent]
        if not parent.poll(_START_TIMEOUT_S):
            self._kill()
            raise ExecutorError(f"the worker process did not start within {_START_TIMEOUT_S:g} s")
        try:
            parent.recv()
        except EOFError:
            process.join()
            self._kill()
            raise ExecutorError(
                f"the worker process ended while starting (exit code {process.exitcode}); "
                "its error is printed above. From a script, call the suite under "
                "`if __name__ == '__main__':` (worker processes import the main module), "
                "or run the checks in this process with isolation='off'"
            ) from None
        return process, parent

    def _dump_stack(self, process: Any) -> str:
        if hasattr(signal, "SIGUSR1"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGUSR1)  # faulthandler writes every thread's stack
            deadline = time.monotonic() + _DUMP_GRACE_S
            while time.monotonic() < deadline and process.is_alive():
                time.sleep(0.02)
        return self._read_trace()

    def _crashed(self, process: Any) -> Crashed:
        process.join()
        self._kill()
        code = process.exitcode
        if code is not None and code < 0:
            try:
                how = f"the process was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"the process was killed by signal {-code}"
        else:
            how = f"the process exited with code {code} (os._exit or a crash)"
        return Crashed(how, self._read_trace())

    def _kill(self) -> None:
        _stop(self._live, at_once=True)

    def _read_trace(self) -> str:
        return Path(self._trace.name).read_text(encoding="utf-8", errors="replace")


#: Where checks run: a worker process, or this process.
Executor = InProcess | WorkerProcess


def _stop(live: list[Any], at_once: bool = False) -> None:
    """End the worker in ``live`` (``[process, connection]``): politely, else by force."""
    process, connection = live
    live[:] = [None, None]
    if process is None:
        return
    if not at_once and process.is_alive():
        with contextlib.suppress(OSError, ValueError):
            connection.send(None)  # the worker's loop ends on None
        process.join(2.0)
    if process.is_alive():
        kill = getattr(signal, "SIGKILL", signal.SIGTERM)
        for send in (getattr(os, "killpg", None), os.kill):  # its process group, then itself
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if send is not None:
                    send(process.pid, kill)
        process.join()
    with contextlib.suppress(OSError):
        connection.close()


def _serve(connection: multiprocessing.connection.Connection, trace_path: str) -> None:
    """The worker's life: run each ``(fn, args)`` it is sent, until it is sent ``None``."""
    if hasattr(os, "setpgid"):
        os.setpgid(0, 0)  # its own group: the terminal's Ctrl-C is the parent's business
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):  # the kernel kills it when its parent dies
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    trace = open(trace_path, "w", encoding="utf-8")  # noqa: SIM115  # lives as long as the worker
    faulthandler.enable(file=trace, all_threads=True)
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, file=trace, all_threads=True, chain=False)
    exit_now = os._exit

    def exit_with_stack(code: int) -> None:  # a target's os._exit: say where it was
        faulthandler.dump_traceback(file=trace, all_threads=False)
        exit_now(code)

    os._exit = exit_with_stack  # type: ignore[assignment]  # same signature, never returns
    connection.send(("ready", os.getpid()))
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            break
        if message is None:
            break
        trace.seek(0)
        trace.truncate()
        fn, args = message
        status, value = "ok", cast(object, None)
        try:
            value = fn(*args)
        except BaseException as error:  # fn turns target errors into results; this is ours
            status, value = "error", f"{type(error).__name__}: {error}"
        retiring, _retiring[0] = _retiring[0], ""
        connection.send((status, value, retiring))
        if retiring:  # at once: a broken CUDA context may hang the interpreter's clean-up
            exit_now(0)


_THREAD = re.compile(r"^(Current thread|Thread) ")
_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<name>\S+)')


def parse_stack_dump(text: str) -> list[list[Frame]]:
    """The stacks in a ``faulthandler`` dump, one per thread, each outermost first."""
    stacks: list[list[Frame]] = []
    for line in text.splitlines():
        if _THREAD.match(line) or line.startswith("Stack (most recent call first)"):
            stacks.append([])
            continue
        match = _FRAME.match(line)
        if match and stacks:
            stacks[-1].append((match["file"], int(match["line"]), match["name"]))
    return [list(reversed(s)) for s in stacks if s]
