"""What runs where the checks run (a worker process, or this one): learning the device and
the target's kind, and one check turned into a :class:`~..results.CheckResult`."""

from __future__ import annotations

import platform
import time
import traceback
import types
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import hypothesis
import numpy
import torch
import torch.nn.functional

from rtmm_conformance.catalog import IMPLEMENTATIONS
from rtmm_conformance.clauses import CheckInfo, TargetKind
from rtmm_conformance.console import cuda_note, failure_details
from rtmm_conformance.driving.check_run import CheckRun, build_target
from rtmm_conformance.driving.context import Factory, Mode
from rtmm_conformance.driving.engine import Engine, engine_of, where_needed
from rtmm_conformance.driving.gather_call import describe_error
from rtmm_conformance.frames import TargetError
from rtmm_conformance.results import (
    CheckBlocked,
    CheckFailure,
    CheckResult,
    CheckSkipped,
    Outcome,
)
from rtmm_conformance.running.cause_keys import CauseKeys, cause_of_failure
from rtmm_conformance.running.hangs import Hang, HangGuard
from rtmm_conformance.running.workers import retire_worker
from rtmm_conformance.settings import RunSettings
from rtmm_protocol._version import PROTOCOL_VERSION, __version__
from rtmm_protocol.compat import is_legacy_gatherer

__all__ = [
    "DeviceChoice",
    "ModuleAttributes",
    "Probe",
    "check_run",
    "cuda_error_in",
    "environment_info",
    "failed",
    "probe_target",
    "resolve_device",
    "run_check",
]


def environment_info(device: torch.device, *, name_device: bool = False) -> dict[str, str]:
    """Package, protocol, torch, Hypothesis, CUDA (torch's build) and Python versions, and
    the device. The Hypothesis version is part of what a seed means: another version draws
    other examples from the same seed. ``name_device`` adds a CUDA device's name, which
    initialises CUDA: only a worker may."""
    named = name_device and device.type == "cuda"
    return {
        "rtmm_protocol": __version__,
        "protocol": PROTOCOL_VERSION,
        "torch": torch.__version__,
        "hypothesis": hypothesis.__version__,
        "cuda": torch.version.cuda or "none",
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "device": f"{device} ({torch.cuda.get_device_name(device)})" if named else str(device),
    }


@dataclass(frozen=True)
class DeviceChoice:
    """The device the run uses, the versions seen there, or why the asked-for one is missing."""

    device: torch.device
    environment: dict[str, str]
    problem: str = ""


def resolve_device(settings: RunSettings) -> DeviceChoice:
    """The run's device: CUDA where available for a default, else what was asked for."""
    available = torch.cuda.is_available()
    device = settings.torch_device
    if settings.device == "auto":
        device = torch.device("cuda" if available else "cpu")
    elif device.type == "cuda" and not available:
        return DeviceChoice(
            device,
            environment_info(device),
            f"device {device} was asked for, but torch {torch.__version__} sees no CUDA device "
            "here (run on a machine with one, or leave --conformance-device unset)",
        )
    return DeviceChoice(device, environment_info(device, name_device=True))


@dataclass(frozen=True)
class Probe:
    """What building the target once told: its kind (or why not), and whether it is a
    gatherer from before the ``num_computed_tokens`` rename (T2)."""

    kind: TargetKind | None
    note: str
    legacy: bool = False


def probe_target(factory: Factory, settings: RunSettings) -> Probe:
    """Build the target once (non-realtime, else realtime) to learn which kind it is;
    whatever the factory does is caught, so that the checks can say what is wrong."""
    try:
        built = build_target(factory, settings, ("non-realtime", "realtime"))
    except CheckSkipped as refusal:
        return Probe(None, refusal.reason)
    except CheckFailure as failure:
        if cuda_error_in(failure) is not None:
            retire_worker("the factory raised a CUDA error")
        return Probe(None, f"{failure.what}: {failure.seen}")
    return Probe(built.kind, "", legacy=is_legacy_gatherer(built.target))


def run_check(
    factory: Factory,
    factory_name: str,
    settings: RunSettings,
    kind: TargetKind,
    check_id: str,
    mode: Mode | None,
    hangs: Sequence[Hang],
    contained: bool,
) -> CheckResult:
    """Run one check in one mode and say how it ended, undoing the target's patches to torch
    and numpy. ``contained``: in a worker (deaf to Ctrl-C), an interrupt is the target's."""
    impl = IMPLEMENTATIONS[check_id]
    guard = HangGuard(hangs)
    run = check_run(factory, factory_name, settings, kind, check_id, mode, guard)
    engine = run.engine
    patched = ModuleAttributes.of_torch_and_numpy()
    default_dtype = torch.get_default_dtype()
    start = time.perf_counter()
    cuda_error: BaseException | str | None = None
    try:
        impl.run(run)
    except CheckFailure as failure:
        lacking = _lacking(engine, failure.error)
        if lacking is not None:
            return CheckResult(check_id, mode, Outcome.SKIPPED, lacking)
        keys = cause_of_failure(check_id, mode, failure, failure.what)
        result = failed(impl.info, mode, settings.seed, failure.what, str(failure), keys, failure)
        cuda_error = cuda_error_in(failure)
    except CheckSkipped as skip:
        result = CheckResult(check_id, mode, Outcome.SKIPPED, skip.reason)
    except CheckBlocked as blocked:
        lacking = _lacking(engine, blocked.error)
        if lacking is not None:
            return CheckResult(check_id, mode, Outcome.SKIPPED, lacking)
        result = CheckResult(check_id, mode, Outcome.BLOCKED, blocked.reason)
    except BaseException as error:  # a target that escaped the check's own handling
        if isinstance(error, KeyboardInterrupt) and not contained:
            raise
        lacking = _lacking(engine, error)
        if lacking is not None:
            return CheckResult(check_id, mode, Outcome.SKIPPED, lacking)
        reason = f"unexpected {describe_error(error)}"
        trace = "".join(traceback.format_exception(error))
        keys = cause_of_failure(check_id, mode, error, reason)
        result = failed(impl.info, mode, settings.seed, reason, trace, keys, error)
        cuda_error = cuda_error_in(error)
    else:
        result = CheckResult(check_id, mode, Outcome.PASSED)
    finally:
        torch.set_default_dtype(default_dtype)  # a target may have changed it
        patched.restore()
    left = _cuda_error_left()  # kernels run asynchronously: their errors show at a sync
    if cuda_error is None and left is not None:
        # The check did not see it (or passed): the CUDA error is the cause, not what it saw.
        reason = f"the target left a CUDA error: {describe_error(left)}"
        trace = "".join(traceback.format_exception(left))
        keys = cause_of_failure(check_id, mode, left, reason)
        result = failed(impl.info, mode, settings.seed, reason, trace, keys, left)
        cuda_error = left
    if cuda_error is not None:
        return replace(_after_cuda_error(result, contained), duration_s=time.perf_counter() - start)
    if guard.hit is not None:  # the check met a hung entry point: it was not judged
        return CheckResult(check_id, mode, Outcome.BLOCKED, guard.hit.reason())
    return replace(result, duration_s=time.perf_counter() - start)


def check_run(
    factory: Factory,
    factory_name: str,
    settings: RunSettings,
    kind: TargetKind,
    check_id: str,
    mode: Mode | None,
    guard: HangGuard | None = None,
) -> CheckRun:
    """What a check function receives to run in ``mode`` on ``factory``'s targets (with
    the entry points where the target hung before blocked by ``guard``)."""
    return CheckRun(
        check_id=check_id,
        factory=factory if guard is None else guard.guarded(factory),
        factory_name=factory_name,
        settings=settings,
        mode=mode,
        kind=kind,
        engine=engine_of(factory),  # the factory's own, before the guard wraps it
    )


def _lacking(engine: Engine, error: BaseException | None) -> str | None:
    """The skip reason when ``error`` shows the target's step needs what this machine
    lacks (a package, an accelerator's kernel, a CUDA device): such a check is not judged
    here, neither passed nor failed. ``None`` for any other error."""
    if error is None:
        return None
    missing = engine.missing_requirement(error)
    if missing is None:
        return None
    where = where_needed(error)
    return f"the target's step needs {missing}{f' ({where})' if where else ''}: not judged here"


#: Messages of torch's errors from CUDA (the types below are missing from older torch).
_CUDA_MESSAGES = ("CUDA error", "device-side assert", "AcceleratorError", "CudaError")


def _is_cuda_error(error: BaseException) -> bool:
    types_ = tuple(
        t
        for t in (getattr(torch, "AcceleratorError", None), getattr(torch.cuda, "CudaError", None))
        if isinstance(t, type)
    )
    if isinstance(error, types_):
        return True
    return isinstance(error, RuntimeError) and any(m in str(error) for m in _CUDA_MESSAGES[:2])


def cuda_error_in(error: BaseException) -> BaseException | str | None:
    """The CUDA error among ``error``, its causes, contexts and grouped errors, or (for a
    :class:`CheckFailure` that only describes the target's error) that description; None
    when there is none. Such an error leaves the process's CUDA context unusable."""
    todo, seen = [error], set()
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if _is_cuda_error(current):
            return current
        if isinstance(current, CheckFailure) and any(
            m in (current.seen or "") for m in _CUDA_MESSAGES
        ):
            return current.seen
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        todo.extend(e for e in getattr(current, "exceptions", ()) if isinstance(e, BaseException))
    return None


def _cuda_error_left() -> BaseException | None:
    """The CUDA error a synchronisation raises in this process (None: no CUDA in use, or
    its context is sound)."""
    if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # untyped in torch
        return None
    try:
        torch.cuda.synchronize()
    except Exception as error:
        return error if _is_cuda_error(error) else None
    return None


def _after_cuda_error(result: CheckResult, contained: bool) -> CheckResult:
    """``result`` of a check that met a CUDA error, and the end of the process it ran in
    (a CUDA error leaves the context unusable: every later call would fail with it)."""
    if contained:
        retire_worker("a CUDA error left the worker's CUDA context unusable")
    note = cuda_note(contained)
    return replace(result, details=f"{result.details}\n{note}" if result.details else note)


def failed(
    info: CheckInfo,
    mode: Mode | None,
    seed: int,
    reason: str,
    details: str,
    cause: CauseKeys,
    error: BaseException | None = None,
) -> CheckResult:
    """A failure of ``info``: its explanation, the ``cause`` keys that group it and the
    target's exception, if it raised one; a :class:`CheckFailure` as ``error`` gives its
    smallest case and replay, and the target's exception it was raised from."""
    keys, title = cause
    finding = error if isinstance(error, CheckFailure) else None
    error = finding.error if finding is not None else error
    return CheckResult(
        info.id,
        mode,
        Outcome.FAILED,
        reason,
        failure_details(info, mode, seed, details),
        cause_keys=keys,
        cause_title=title,
        case=finding.case if finding else None,
        case_words=finding.case_words if finding else "",
        replay=(finding.replay or "") if finding else "",
        error=None if error is None else TargetError.of(error),
    )


class ModuleAttributes:
    """A snapshot of some modules' and classes' attributes, to undo a target's patches (a
    submodule imported on first use is the library's, not a patch)."""

    def __init__(self, owners: Iterable[object]) -> None:
        self._saved = [(owner, dict(vars(owner))) for owner in owners]

    @classmethod
    def of_torch_and_numpy(cls) -> ModuleAttributes:
        """``torch``, ``torch.Tensor``, ``torch.nn.functional`` and ``numpy``."""
        return cls([torch, torch.Tensor, torch.nn.functional, numpy])

    def restore(self) -> None:
        """Put back every changed attribute, and remove added ones."""
        for owner, saved in self._saved:
            now = dict(vars(owner))
            for name in saved.keys() | now.keys():
                if name not in saved and not isinstance(now[name], types.ModuleType):
                    delattr(owner, name)
                elif name in saved and (name not in now or now[name] is not saved[name]):
                    setattr(owner, name, saved[name])
