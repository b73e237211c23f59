"""One check, here and now: what runs where the checks run (a worker process, or this one).

:func:`resolve_device` and :func:`probe_target` learn what the run needs to know before
the checks (the device, the target's kind); :func:`run_check` runs one check in one mode
and turns however it ends into a :class:`~..reporting.results.CheckResult`. Each
returns plain data, so that it can come back from a worker process.
"""

from __future__ import annotations

import time
import traceback
import types
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy
import torch
import torch.nn.functional

from rtmm_protocol.compat import is_legacy_gatherer
from rtmm_protocol.conformance.catalog import CLAUSES, CheckInfo, TargetKind, spec_anchor
from rtmm_protocol.conformance.checks.all_checks import implementations
from rtmm_protocol.conformance.driving.check_run import CheckRun
from rtmm_protocol.conformance.driving.context import Factory, Mode, ModeNotSupported, build_context
from rtmm_protocol.conformance.driving.factories import detect_kind
from rtmm_protocol.conformance.driving.gather_call import describe_error
from rtmm_protocol.conformance.reporting.causes import cause_of_failure
from rtmm_protocol.conformance.reporting.results import (
    CheckFailure,
    CheckResult,
    CheckSkipped,
    Outcome,
)
from rtmm_protocol.conformance.running.environment import environment_info
from rtmm_protocol.conformance.running.hangs import Hang, HangGuard
from rtmm_protocol.conformance.settings import RunSettings

__all__ = [
    "DeviceChoice",
    "ModuleAttributes",
    "Probe",
    "probe_target",
    "resolve_device",
    "run_check",
]


@dataclass(frozen=True)
class DeviceChoice:
    """The device the run uses, the versions seen there, or why the asked-for one is missing."""

    device: torch.device
    environment: dict[str, str]
    problem: str = ""


def resolve_device(settings: RunSettings) -> DeviceChoice:
    """The run's device: CUDA where available for a default, else what was asked for."""
    available = torch.cuda.is_available()
    device = settings.device
    if settings.device_is_default:
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
    """What building the target once told: its kind, or why it could not be told, and
    whether it is a gatherer from before the ``num_computed_tokens`` rename (T2)."""

    kind: TargetKind | None
    note: str
    legacy: bool = False


def probe_target(factory: Factory, settings: RunSettings) -> Probe:
    """Build the target once (non-realtime, else realtime) to learn which kind it is.

    Whatever the factory does is caught: a broken factory must not stop the run before
    the checks can say what is wrong with it.
    """
    notes = []
    modes: tuple[Mode, ...] = ("non-realtime", "realtime")
    for mode in modes:
        parts = build_context(
            mode,
            hidden_size=settings.hidden_size,
            max_num_tokens=settings.max_num_tokens,
            max_num_reqs=settings.max_num_reqs,
            dtype=settings.dtype,
            device=settings.device,
            seed=settings.seed,
        )
        try:
            target = factory(parts.ctx)
        except ModeNotSupported as refusal:
            notes.append(f"{mode}: {refusal.reason}")
            continue
        except BaseException as error:  # reported, then the checks say the rest
            return Probe(None, f"the factory raised {describe_error(error)}")
        kind = detect_kind(target)
        if kind is None:
            return Probe(
                None, f"the factory returned a {type(target).__name__}, which is neither kind"
            )
        return Probe(kind, "", legacy=is_legacy_gatherer(target))
    return Probe(None, "the factory refused every mode (" + "; ".join(notes) + ")")


def run_check(
    factory: Factory,
    factory_spec: str,
    settings: RunSettings,
    kind: TargetKind,
    check_id: str,
    mode: Mode | None,
    hangs: Sequence[Hang],
    contained: bool,
) -> CheckResult:
    """Run one check in one mode and say how it ended.

    ``hangs`` are the entry points that hung earlier in the run: a check that calls one
    is *blocked*. ``contained`` says this runs in a worker process, where an interrupt
    can only come from the target (the worker ignores the terminal's Ctrl-C); here, the
    user's Ctrl-C goes up. Patches the target makes to torch and numpy are undone.
    """
    impl = implementations()[check_id]
    guard = HangGuard(hangs)
    run = CheckRun(
        check_id=check_id,
        factory=guard.guarded(factory),
        factory_spec=factory_spec,
        settings=settings,
        mode=mode,
        kind=kind,
    )
    patched = ModuleAttributes.of_torch_and_numpy()
    default_dtype = torch.get_default_dtype()
    start = time.perf_counter()
    try:
        impl.run(run)
    except CheckFailure as failure:
        result = failed(impl.info, mode, settings, failure.what, failure.render(), failure)
        result = replace(result, replay=failure.repro or "")
    except CheckSkipped as skip:
        result = CheckResult(check_id, mode, Outcome.SKIPPED, skip.reason)
    except BaseException as error:  # a target that escaped the check's own handling
        if isinstance(error, KeyboardInterrupt) and not contained:
            raise
        reason = f"unexpected {describe_error(error)}"
        trace = "".join(traceback.format_exception(error))
        result = failed(impl.info, mode, settings, reason, trace, error)
    else:
        result = CheckResult(check_id, mode, Outcome.PASSED)
    finally:
        torch.set_default_dtype(default_dtype)  # a target may have changed it
        patched.restore()
    if guard.hit is not None:  # the check met a hung entry point: it was not judged
        return CheckResult(check_id, mode, Outcome.BLOCKED, guard.hit.reason())
    return replace(result, duration_s=time.perf_counter() - start)


def failed(
    info: CheckInfo,
    mode: Mode | None,
    settings: RunSettings,
    reason: str,
    details: str,
    error: BaseException | None = None,
) -> CheckResult:
    """A failure of ``info`` with its explanation, grouped with others by ``error``'s cause."""
    where = "" if mode is None else f" [{mode}]"
    header = (
        f"{info.id}{where}: {info.level}, SPEC {info.clause} ({CLAUSES[info.clause]}); "
        f"see docs {spec_anchor(info.clause)}\nrequirement: {info.statement}"
    )
    footer = f"seed: {settings.seed} (--conformance-seed={settings.seed})"
    result = CheckResult(
        info.id, mode, Outcome.FAILED, reason, "\n".join(filter(None, [header, details, footer]))
    )
    if error is None:
        return result
    keys = cause_of_failure(info.id, mode, error, reason)
    return replace(result, cause_key=keys.encode(), cause_title=keys.title)


class ModuleAttributes:
    """A snapshot of some modules' and classes' attributes, to undo a target's patches."""

    def __init__(self, owners: Iterable[object]) -> None:
        self._saved = [(owner, dict(vars(owner))) for owner in owners]

    @classmethod
    def of_torch_and_numpy(cls) -> ModuleAttributes:
        """``torch``, ``torch.Tensor``, ``torch.nn.functional`` and ``numpy``."""
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
