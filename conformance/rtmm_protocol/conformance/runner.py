"""Running checks against one target: prerequisites, time limits, and the final verdicts.

:class:`SuiteRunner` runs one check in one mode at a time and remembers the result, so
the prerequisite of many checks runs once per process. Its raw outcomes (passed,
failed, skipped, blocked) become the reported ones through :func:`judge`, which applies
the check's level, strict mode and the expected-failures file.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial

import torch

from rtmm_protocol.conformance.catalog import (
    CLAUSES,
    CheckInfo,
    TargetKind,
    spec_anchor,
    version_key,
)
from rtmm_protocol.conformance.check_run import CheckRun
from rtmm_protocol.conformance.context import Mode, ModeNotSupported, build_context
from rtmm_protocol.conformance.gather_call import describe_error
from rtmm_protocol.conformance.outcomes import CheckFailure, CheckResult, CheckSkipped, Outcome
from rtmm_protocol.conformance.registry import CheckImpl, implementations
from rtmm_protocol.conformance.settings import RunSettings
from rtmm_protocol.conformance.targets import Factory, detect_kind
from rtmm_protocol.conformance.timeout import TimedOut, run_with_timeout
from rtmm_protocol.conformance.xfail import XfailEntry

__all__ = ["KindProbe", "PlannedCheck", "SuiteRunner", "judge", "probe_kind"]


@dataclass(frozen=True)
class KindProbe:
    """What building the target once told: its kind, or why it could not be told."""

    kind: TargetKind | None
    note: str


def probe_kind(factory: Factory, settings: RunSettings) -> KindProbe:
    """Build the target once (non-realtime, else realtime) to learn which kind it is.

    Runs under the check time limit and catches whatever the factory raises: a broken
    factory must not stop the run before the checks can say what is wrong with it.
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
            target = run_with_timeout(partial(factory, parts.ctx), settings.timeout_s)
        except ModeNotSupported as refusal:
            notes.append(f"{mode}: {refusal.reason}")
            continue
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # reported, then the checks say the rest
            return KindProbe(None, f"the factory raised {describe_error(error)}")
        if isinstance(target, TimedOut):
            return KindProbe(None, f"the factory did not return within {target.limit_s:g} s")
        kind = detect_kind(target)
        if kind is None:
            return KindProbe(
                None, f"the factory returned a {type(target).__name__}, which is neither kind"
            )
        return KindProbe(kind, "")
    return KindProbe(None, "the factory refused every mode (" + "; ".join(notes) + ")")


@dataclass(frozen=True)
class PlannedCheck:
    """One check in one mode, as collected."""

    impl: CheckImpl
    mode: Mode | None

    @property
    def label(self) -> str:
        """``CHECK-ID[mode]``."""
        return self.impl.id if self.mode is None else f"{self.impl.id}[{self.mode}]"


class SuiteRunner:
    """Runs the checks that apply to one target and remembers their raw results."""

    def __init__(
        self,
        factory: Factory,
        factory_spec: str,
        settings: RunSettings,
        kind: TargetKind,
        checks: Mapping[str, CheckImpl] | None = None,
    ) -> None:
        self.factory = factory
        self.factory_spec = factory_spec
        self.settings = settings
        self.kind = kind
        self.checks = dict(implementations() if checks is None else checks)
        self._results: dict[tuple[str, Mode | None], CheckResult] = {}

    def plan(self) -> list[PlannedCheck]:
        """Every (check, mode) that applies to this kind of target and requirement set."""
        wanted = version_key(self.settings.version)
        return [
            PlannedCheck(impl, mode)
            for impl in self.checks.values()
            if self.kind in impl.info.targets and version_key(impl.info.since) <= wanted
            for mode in impl.modes
        ]

    def run(self, check_id: str, mode: Mode | None) -> CheckResult:
        """The raw result of one check in one mode (run once, then remembered)."""
        key = (check_id, mode)
        if key not in self._results:
            self._results[key] = self._run(self.checks[check_id], mode)
        return self._results[key]

    def _run(self, impl: CheckImpl, mode: Mode | None) -> CheckResult:
        blocked = self._prerequisite_verdict(impl, mode)
        if blocked is not None:
            return blocked
        if impl.needs_cuda and self.settings.device.type != "cuda":
            return CheckResult(
                impl.id,
                mode,
                Outcome.SKIPPED,
                "needs a CUDA device (run with --conformance-device=cuda where one is present)",
            )
        run = CheckRun(
            check_id=impl.id,
            factory=self.factory,
            factory_spec=self.factory_spec,
            settings=self.settings,
            mode=mode,
            kind=self.kind,
        )
        default_dtype = torch.get_default_dtype()
        start = time.perf_counter()
        try:
            outcome = run_with_timeout(lambda: impl.run(run), self.settings.timeout_s)
        except CheckFailure as failure:
            return self._result(impl, mode, Outcome.FAILED, failure.what, failure.render(), start)
        except CheckSkipped as skip:
            return self._result(impl, mode, Outcome.SKIPPED, skip.reason, "", start)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # a target that escaped the check's own handling
            return self._result(
                impl,
                mode,
                Outcome.FAILED,
                f"unexpected {describe_error(error)}",
                "".join(traceback.format_exception(error)),
                start,
            )
        finally:
            torch.set_default_dtype(default_dtype)  # a target may have changed it
        if isinstance(outcome, TimedOut):
            stopped = "" if outcome.stopped else " (it is still running in the background)"
            return self._result(
                impl,
                mode,
                Outcome.FAILED,
                f"did not finish within {outcome.limit_s:g} s: the target hangs or is very "
                f"slow{stopped}",
                "raise the limit with --conformance-timeout=SECONDS if the target is just slow",
                start,
            )
        return self._result(impl, mode, Outcome.PASSED, "", "", start)

    def _result(
        self,
        impl: CheckImpl,
        mode: Mode | None,
        outcome: Outcome,
        reason: str,
        details: str,
        start: float,
    ) -> CheckResult:
        if outcome is Outcome.FAILED:
            details = self._explain(impl.info, mode, details)
        return CheckResult(
            impl.id,
            mode,
            outcome,
            reason,
            details,
            time.perf_counter() - start,
        )

    def _explain(self, info: CheckInfo, mode: Mode | None, details: str) -> str:
        where = "" if mode is None else f" [{mode}]"
        header = (
            f"{info.id}{where}: {info.level}, SPEC {info.clause} ({CLAUSES[info.clause]}); "
            f"see docs {spec_anchor(info.clause)}\n"
            f"requirement: {info.statement}"
        )
        footer = f"seed: {self.settings.seed} (--conformance-seed={self.settings.seed})"
        return f"{header}\n{details}\n{footer}" if details else f"{header}\n{footer}"

    def _prerequisite_verdict(self, impl: CheckImpl, mode: Mode | None) -> CheckResult | None:
        for prerequisite in impl.prerequisites:
            other = self.checks.get(prerequisite)
            if other is None:
                continue
            modes = [mode] if mode in other.modes else list(other.modes)
            results = [self.run(prerequisite, m) for m in modes]
            failed = [r for r in results if r.outcome in (Outcome.FAILED, Outcome.BLOCKED)]
            if failed:
                first = failed[0]
                # Name the check that failed at the root, not the one in between.
                reason = (
                    first.reason
                    if first.outcome is Outcome.BLOCKED
                    else f"blocked by {first.label}: {first.reason}"
                )
                return CheckResult(impl.id, mode, Outcome.BLOCKED, reason)
            if results and all(r.outcome is Outcome.SKIPPED for r in results):
                return CheckResult(impl.id, mode, Outcome.SKIPPED, results[0].reason)
        return None


def judge(
    result: CheckResult,
    info: CheckInfo,
    *,
    strict: bool,
    expected_failure: XfailEntry | None,
) -> CheckResult:
    """The reported outcome: the raw one after the expected-failures file and the level.

    A check listed as an expected failure that fails is ``xfailed``; one that passes
    stays ``passed`` here, and the report lists its entry as stale (an entry may cover
    a whole clause, so staleness is decided over all the checks it covers).
    """
    if result.outcome is Outcome.FAILED:
        if expected_failure is not None:
            return result.with_outcome(
                Outcome.XFAILED,
                f"expected failure ({expected_failure.where}: {expected_failure.reason}); "
                f"was: {result.reason}",
            )
        if info.level == "SHOULD" and not strict:
            return result.with_outcome(Outcome.WARNING)
    return result
