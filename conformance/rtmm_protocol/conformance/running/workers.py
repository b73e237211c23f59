"""Where checks run: a long-lived worker process, or this process.

A target may crash its process (``os._exit``, a segfault), hang in Python or native
code, or initialise CUDA. The checks therefore run in a *worker*: a process started with
``multiprocessing``'s ``forkserver`` method (``spawn`` where that is missing), so that it
never inherits a CUDA context (a forked child of a process that initialised CUDA cannot
use it) and this process never needs one. A worker is reused for check after check, so
CUDA is initialised once per worker, and is replaced only when it dies or hangs:

* a check whose worker dies fails, named by the signal or exit code and the stack it was
  in (``faulthandler`` writes it to a file the worker keeps);
* a check that outlives its time limit has its worker's stack dumped, then the worker is
  killed with its process group (``SIGKILL``), so nothing of it keeps running.

Workers ignore the terminal's Ctrl-C (they have a process group of their own): the user's
interrupt is this process's business, which then stops its worker. On Linux a worker is
also killed when the process that started it dies, so none outlives a killed run.

:class:`InProcess` runs the same calls here instead (``--conformance-isolation=off``):
for debugging, without time limits or crash protection.
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
from typing import Any, Protocol, TypeVar

from rtmm_protocol.conformance.reporting.causes import Frame

__all__ = [
    "Crashed",
    "Executor",
    "ExecutorError",
    "InProcess",
    "TimedOut",
    "WorkerProcess",
    "parse_stack_dump",
]

_T = TypeVar("_T")

#: Modules the forkserver imports once, so that a new worker starts in milliseconds.
_PRELOAD = ["rtmm_protocol.conformance.running.verdict"]
# How long a new worker may take to say it is ready (imports included).
_START_TIMEOUT_S = 120.0
# After a hung worker's stack is dumped, how long it may take before it is killed.
_DUMP_GRACE_S = 0.5
_PR_SET_PDEATHSIG = 1


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


class Executor(Protocol):
    """Runs ``fn(*args)`` somewhere and returns its value, or how that went wrong."""

    #: How many worker processes were started so far (0 for :class:`InProcess`).
    started: int

    def call(
        self, fn: Callable[..., _T], *args: object, limit_s: float
    ) -> _T | Crashed | TimedOut: ...

    def close(self) -> None: ...


class InProcess:
    """Runs calls in this process: no time limit, no protection from crashes."""

    started = 0

    def call(self, fn: Callable[..., _T], *args: object, limit_s: float) -> _T | Crashed | TimedOut:
        """``fn(*args)``, here and now."""
        return fn(*args)

    def close(self) -> None:
        """Nothing to release."""


def _context() -> Any:
    """``forkserver`` (preloading the suite), else ``spawn``: never plain ``fork``.

    Typed ``Any``: the contexts of the two start methods are distinct classes in the stubs.
    """
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(_PRELOAD)
        return context
    return multiprocessing.get_context("spawn")


class WorkerProcess:
    """One worker process at a time, started on first use and replaced after a crash or hang.

    ``fn`` and ``args`` of each call are pickled to the worker (``fn`` by reference: a
    module-level function), and the value pickled back.
    """

    def __init__(self) -> None:
        self.started = 0
        self._process: Any = None  # multiprocessing's process type differs per start method
        self._connection: multiprocessing.connection.Connection | None = None
        self._trace = tempfile.NamedTemporaryFile(prefix="rtmm-worker-", suffix=".txt")  # noqa: SIM115  # closed in close()
        # ``[process, connection]`` of the running worker, shared with the finalizer (which
        # must not hold ``self``). Registered with atexit here, after multiprocessing's own
        # exit handler, so that it runs first: that handler waits for every child to end.
        self._live: list[Any] = [None, None]
        self._finalizer = weakref.finalize(self, _stop, self._live)
        atexit.register(self._finalizer)

    def call(self, fn: Callable[..., _T], *args: object, limit_s: float) -> _T | Crashed | TimedOut:
        """``fn(*args)`` in the worker, within ``limit_s`` seconds.

        Raises :class:`ExecutorError` when the worker cannot start, and lets the user's
        ``KeyboardInterrupt`` go up after stopping the worker.
        """
        connection = self._ensure_running()
        try:
            connection.send((fn, args))
        except (OSError, pickle.PicklingError) as error:
            self._kill()
            raise ExecutorError(f"cannot hand the call to the worker process: {error}") from None
        try:
            ready = multiprocessing.connection.wait(
                [connection, self._process.sentinel], timeout=limit_s
            )
            if not ready:
                stack = self._dump_stack()
                self._kill()
                return TimedOut(limit_s, stack)
            try:
                status, value = connection.recv()
            except (EOFError, OSError):
                return self._crashed()
        except BaseException:  # the user's Ctrl-C, mostly: stop the worker, then go up
            self._kill()
            raise
        if status == "error":
            raise ExecutorError(f"the suite failed in its worker process:\n{value}")
        result: _T = value
        return result

    def close(self) -> None:
        """Stop the worker (if one runs) and remove its stack file."""
        _stop(self._live)
        self._process = self._connection = None
        self._trace.close()
        atexit.unregister(self._finalizer)

    # ------------------------------------------------------------------ the process

    def _ensure_running(self) -> multiprocessing.connection.Connection:
        if self._process is not None and self._connection is not None:
            return self._connection
        context = _context()
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
        self.started += 1
        self._process, self._connection = process, parent
        self._live[:] = [process, parent]
        if not parent.poll(_START_TIMEOUT_S):
            self._kill()
            raise ExecutorError(f"the worker process did not start within {_START_TIMEOUT_S:g} s")
        try:
            parent.recv()
        except EOFError:
            process.join()
            self._process = self._connection = None
            raise ExecutorError(
                f"the worker process ended while starting (exit code {process.exitcode}); "
                "its error is printed above. From a script, call the suite under "
                "`if __name__ == '__main__':` (worker processes import the main module), "
                "or run the checks in this process with isolation='off'"
            ) from None
        return parent

    def _dump_stack(self) -> str:
        pid = self._process.pid
        if hasattr(signal, "SIGUSR1"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGUSR1)  # faulthandler writes every thread's stack
            deadline = time.monotonic() + _DUMP_GRACE_S
            while time.monotonic() < deadline and self._process.is_alive():
                time.sleep(0.02)
        return self._read_trace()

    def _crashed(self) -> Crashed:
        process = self._process
        process.join()
        self._process = self._connection = None
        code = process.exitcode
        if code is not None and code < 0:
            how = f"the process was killed by {_signal_name(-code)}"
        else:
            how = f"the process exited with code {code} (os._exit or a crash)"
        return Crashed(how, self._read_trace())

    def _kill(self) -> None:
        _stop(self._live, at_once=True)
        self._process = self._connection = None

    def _read_trace(self) -> str:
        with open(self._trace.name, encoding="utf-8", errors="replace") as trace:
            return trace.read()


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
        for kill, target in ((getattr(os, "killpg", None), process.pid), (os.kill, process.pid)):
            if kill is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    kill(target, signal.SIGKILL if hasattr(signal, "SIGKILL") else signal.SIGTERM)
        process.join()
    with contextlib.suppress(OSError):
        connection.close()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# ---------------------------------------------------------------------- the worker's side


def _serve(connection: multiprocessing.connection.Connection, trace_path: str) -> None:
    """The worker's life: run each ``(fn, args)`` it is sent, until it is sent ``None``."""
    if hasattr(os, "setpgid"):
        os.setpgid(0, 0)  # its own group: the terminal's Ctrl-C is the parent's business
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
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
        try:
            reply: tuple[str, object] = ("ok", fn(*args))
        except BaseException as error:  # fn turns target errors into results; this is ours
            reply = ("error", f"{type(error).__name__}: {error}")
        connection.send(reply)


def _die_with_parent() -> None:
    """On Linux, have the kernel kill this worker when the process that started it dies."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


# ---------------------------------------------------------------------- stack dumps

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
