"""Running target code where it cannot take the run down: a forked child per check.

A target may crash the process (``os._exit``, a segfault), hang in Python or native
code, raise ``KeyboardInterrupt``/``SystemExit``, or patch torch and numpy. Each check
therefore runs in a child process forked for it: its verdict comes back over a pipe,
and whatever the target does to the child's interpreter ends with the child. A child
that dies is a failure of its check, named by its signal or exit code and the stack it
was in (``faulthandler`` writes it to a file); one that outlives its time limit has its
stack dumped, then is killed with its process group (``SIGKILL``), so nothing of it
keeps running.

Forking is only safe while CUDA is not initialised in the parent (a forked child
cannot use it) and where ``os.fork`` exists. Elsewhere the checks run in the calling
process, with a thread for the time limit and :class:`ModuleAttributes` restoring
whatever a target patched in torch and numpy after each check.
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import os
import pickle
import re
import select
import signal
import sys
import tempfile
import time
import types
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, Generic, Literal, TypeVar

__all__ = [
    "ISOLATION_CHOICES",
    "ChildDied",
    "ChildTimedOut",
    "Isolation",
    "ModuleAttributes",
    "can_fork",
    "parse_stack_dump",
    "resolve_isolation",
    "run_in_child",
]

_T = TypeVar("_T")

#: ``fork``: one child process per check; ``off``: in the calling process.
Isolation = Literal["fork", "off"]
#: Values of ``--conformance-isolation`` (``auto``: fork where it is safe).
ISOLATION_CHOICES = ("auto", "fork", "off")

# After a hung child's stack is dumped, how long it may take before it is killed.
_DUMP_GRACE_S = 0.5
_READ_CHUNK = 1 << 16


@dataclass(frozen=True)
class ChildDied:
    """The child ended without sending a result: killed by a signal or exited."""

    how: str
    stack: str


@dataclass(frozen=True)
class ChildTimedOut:
    """The child outlived its time limit and was killed; ``stack`` is where it was."""

    limit_s: float
    stack: str


@dataclass(frozen=True)
class _Returned(Generic[_T]):
    value: _T


def can_fork() -> tuple[bool, str]:
    """Whether checks can run in forked children here, and why not if they cannot."""
    if not hasattr(os, "fork"):
        return False, "this platform has no os.fork"
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is not None and cuda.is_initialized():
        return False, "CUDA is initialised in this process, and a forked child cannot use it"
    return True, ""


def resolve_isolation(requested: str) -> tuple[Isolation, str]:
    """The isolation a run uses for ``requested`` (``auto``/``fork``/``off``), and a note."""
    if requested not in ISOLATION_CHOICES:
        raise ValueError(
            f"isolation must be one of {', '.join(ISOLATION_CHOICES)}, got {requested!r}"
        )
    if requested == "off":
        return "off", "checks run in this process (isolation off)"
    ok, why = can_fork()
    if ok:
        return "fork", ""
    if requested == "fork":
        raise ValueError(f"isolation 'fork' is not possible: {why}")
    return "off", (
        f"checks run in this process: {why}; a crashing target ends the run, and a hang "
        "in native code keeps its thread"
    )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _child(fn: Callable[[], _T], write_fd: int, trace_fd: int) -> None:
    """The child's whole life: run ``fn``, send its pickled value, exit without cleanup."""
    status = 0
    exit_now = os._exit
    try:
        os.setpgid(0, 0)  # its own group: the terminal's Ctrl-C is the parent's business
        trace = os.fdopen(trace_fd, "w", closefd=False)
        faulthandler.enable(file=trace, all_threads=True)
        faulthandler.register(signal.SIGUSR1, file=trace, all_threads=True, chain=False)

        def exit_with_stack(code: int) -> None:  # a target's os._exit: say where it was
            faulthandler.dump_traceback(file=trace, all_threads=False)
            exit_now(code)

        os._exit = exit_with_stack  # type: ignore[assignment]  # same signature, never returns
        try:
            payload = pickle.dumps(_Returned(fn()))
        except BaseException as error:  # fn turns target errors into results; this is ours
            payload = pickle.dumps(RuntimeError(f"the suite failed in a check's child: {error!r}"))
        view = memoryview(payload)
        while view:
            view = view[os.write(write_fd, view) :]
    except BaseException:  # the child must never return into the parent's code
        status = 70
    finally:
        exit_now(status)


def run_in_child(fn: Callable[[], _T], limit_s: float) -> _T | ChildDied | ChildTimedOut:
    """Run ``fn`` in a forked child; return its value, or how the child failed.

    ``fn`` must catch the target's exceptions itself and return a picklable value. A
    ``KeyboardInterrupt`` in the parent (the user's Ctrl-C) kills the child and goes up.
    """
    with tempfile.TemporaryFile() as trace:
        read_fd, write_fd = os.pipe()
        with warnings.catch_warnings():
            # Python 3.12+ warns that forking a multi-threaded process may deadlock; the
            # child only runs the check and exits, and a deadlock would be a reported hang.
            warnings.simplefilter("ignore", DeprecationWarning)
            # Frozen objects are skipped by the child's garbage collector, which would
            # otherwise touch (and so copy) every page of the parent's heap.
            gc.freeze()
            try:
                pid = os.fork()
            except BaseException:
                gc.unfreeze()
                raise
            if pid != 0:
                gc.unfreeze()
        if pid == 0:
            os.close(read_fd)
            _child(fn, write_fd, trace.fileno())
        os.close(write_fd)
        try:
            data, finished = _read_until(read_fd, time.monotonic() + limit_s)
            if not finished:
                _dump_and_kill(pid)
                return ChildTimedOut(limit_s, _read_trace(trace))
            _, status = os.waitpid(pid, 0)
        except BaseException:
            _kill(pid)
            raise
        finally:
            os.close(read_fd)
        stack = _read_trace(trace)
    if os.WIFSIGNALED(status):
        return ChildDied(f"the process was killed by {_signal_name(os.WTERMSIG(status))}", stack)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
    if code != 0 or not data:
        return ChildDied(f"the process exited with code {code} (os._exit or a crash)", stack)
    returned = pickle.loads(data)
    if isinstance(returned, BaseException):
        raise returned
    value: _T = returned.value
    return value


def _read_until(fd: int, deadline: float) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return b"", False
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, _READ_CHUNK)
        if not chunk:
            return b"".join(chunks), True
        chunks.append(chunk)


def _dump_and_kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGUSR1)  # faulthandler writes every thread's stack
    deadline = time.monotonic() + _DUMP_GRACE_S
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        time.sleep(0.02)
    _kill(pid)


def _kill(pid: int) -> None:
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _read_trace(trace: IO[bytes]) -> str:
    trace.seek(0)
    return trace.read().decode("utf-8", "replace")


_THREAD = re.compile(r"^(Current thread|Thread) ")
_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<name>\S+)')


def parse_stack_dump(text: str) -> list[list[tuple[str, int, str]]]:
    """The stacks in a ``faulthandler`` dump, one per thread, each outermost first."""
    stacks: list[list[tuple[str, int, str]]] = []
    for line in text.splitlines():
        if _THREAD.match(line) or line.startswith("Stack (most recent call first)"):
            stacks.append([])
            continue
        match = _FRAME.match(line)
        if match and stacks:
            stacks[-1].append((match["file"], int(match["line"]), match["name"]))
    return [list(reversed(s)) for s in stacks if s]


class ModuleAttributes:
    """A snapshot of some modules' and classes' attributes, to undo a target's patches."""

    def __init__(self, owners: Iterable[object]) -> None:
        self._saved = [(owner, dict(vars(owner))) for owner in owners]

    @classmethod
    def of_torch_and_numpy(cls) -> ModuleAttributes:
        """``torch``, ``torch.Tensor``, ``torch.nn.functional`` and ``numpy``."""
        import numpy
        import torch
        import torch.nn.functional

        return cls([torch, torch.Tensor, torch.nn.functional, numpy])

    def changed(self) -> list[str]:
        """The attributes that differ from the snapshot, as ``owner.name``."""
        found = []
        for owner, saved in self._saved:
            now = vars(owner)
            label = getattr(owner, "__name__", type(owner).__name__)
            for name in set(saved) | set(now):
                if name not in saved and isinstance(now[name], types.ModuleType):
                    continue  # a submodule imported on first use
                if name not in now or name not in saved or now[name] is not saved[name]:
                    found.append(f"{label}.{name}")
        return sorted(found)

    def restore(self) -> list[str]:
        """Put back every changed attribute (removing added ones); return what changed."""
        changed = self.changed()
        for owner, saved in self._saved:
            now = dict(vars(owner))
            for name in now.keys() - saved.keys():
                # A submodule imported on first use is the library's, not a patch.
                if not isinstance(now[name], types.ModuleType):
                    delattr(owner, name)
            for name, value in saved.items():
                if name not in now or now[name] is not value:
                    setattr(owner, name, value)
        return changed
