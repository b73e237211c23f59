"""How a check ends: the exceptions a check raises, and :class:`CheckResult`, the record of
its verdict that travels as JSON from where it ran to the report."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rtmm_protocol.testing.scenario import CaseKind, GatherScenario

__all__ = [
    "FAILING_OUTCOMES",
    "CheckFailure",
    "CheckResult",
    "CheckSkipped",
    "ConformanceWarning",
    "Outcome",
]


class Outcome(str, enum.Enum):
    """The outcome of one check in one mode, as reports show it."""

    PASSED = "passed"
    FAILED = "failed"
    #: A SHOULD check failed and the run is not strict.
    WARNING = "warning"
    SKIPPED = "skipped"
    #: A prerequisite check failed, so this one could not be judged.
    BLOCKED = "blocked"
    #: Failed as the expected-failures file says it would.
    XFAILED = "xfailed"
    #: Selected but never run to a verdict (the run was interrupted or stopped early).
    NOT_RUN = "not run"


#: Outcomes that say the target does not meet a requirement (whatever the level).
FAILING_OUTCOMES = frozenset({Outcome.FAILED, Outcome.WARNING, Outcome.XFAILED})


class CheckFailure(AssertionError):  # noqa: N818  # a verdict, not an error
    """A target did not meet a requirement: ``what`` in one line, ``expected`` and ``seen``
    in detail, and ``repro``, ready-to-run Python for the smallest case that shows it;
    ``case`` is that case as a scenario, where a scenario shows it (``realtime``: whether the
    model it ran against was realtime, which is how its decode windows are read)."""

    def __init__(
        self,
        what: str,
        *,
        expected: str | None = None,
        seen: str | None = None,
        repro: str | None = None,
        context: str | None = None,
        case: GatherScenario | None = None,
        realtime: bool = False,
    ) -> None:
        self.what = what
        self.expected = expected
        self.seen = seen
        self.repro = repro
        self.context = context
        self.case = case
        self.realtime = realtime
        super().__init__(self.render())

    @property
    def case_kind(self) -> CaseKind | None:
        """The sort of step the smallest case is (``GatherScenario.kind``), if known."""
        return None if self.case is None else self.case.kind(self.realtime)

    def with_repro(self, repro: str, context: str | None = None) -> CheckFailure:
        """The same failure, with a reproduction snippet (and where it happened), still
        chained to the target's exception that caused it."""
        context = context if context is not None else self.context
        return self._copy(repro, context, self.case, self.realtime)

    def with_case(self, case: GatherScenario, *, realtime: bool) -> CheckFailure:
        """The same failure, shown by ``case`` (against a realtime model or not)."""
        return self._copy(self.repro, self.context, case, realtime)

    def _copy(
        self, repro: str | None, context: str | None, case: GatherScenario | None, realtime: bool
    ) -> CheckFailure:
        failure = CheckFailure(
            self.what,
            expected=self.expected,
            seen=self.seen,
            repro=repro,
            context=context,
            case=case,
            realtime=realtime,
        )
        failure.__cause__ = self.__cause__
        return failure

    def render(self) -> str:
        """The full message: what, expected, seen, context and reproduction."""
        lines = [self.what]
        if self.expected is not None:
            lines.append(f"expected: {self.expected}")
        if self.seen is not None:
            lines.append(f"seen:     {self.seen}")
        if self.context:
            lines.append(self.context)
        if self.case is not None:
            lines.append(f"smallest case: {self.case.describe(self.realtime)}")
        if self.repro:
            lines.append("smallest case, as ready-to-run Python:")
            lines.extend("    " + line for line in self.repro.splitlines())
        return "\n".join(lines)


class ConformanceWarning(UserWarning):
    """Emitted for a SHOULD check that failed in a run that is not strict."""


class CheckSkipped(Exception):  # noqa: N818  # a verdict, not an error
    """A check cannot run here (the factory refused the mode, no CUDA device...)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class CheckResult:
    """One check in one mode: its outcome, reason and details; a failure also carries its
    cause, its replay and its ``origin`` (``"inherited"`` when the class the target derives
    from fails the same way, else ``"own"``)."""

    check_id: str
    mode: str | None
    outcome: Outcome
    reason: str = ""
    details: str = ""
    duration_s: float = 0.0
    cause_key: str = ""
    cause_title: str = ""
    replay: str = ""
    origin: str | None = None
    via_compat: bool = False

    @property
    def label(self) -> str:
        """``CHECK-ID[mode]``, the name pytest shows for this check."""
        return self.check_id if self.mode is None else f"{self.check_id}[{self.mode}]"

    def with_outcome(self, outcome: Outcome, reason: str | None = None) -> CheckResult:
        """The same result with another outcome (and reason)."""
        return replace(self, outcome=outcome, reason=self.reason if reason is None else reason)

    def to_json(self) -> str:
        """The record as one JSON string (how it crosses process boundaries)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> CheckResult:
        """The record :meth:`to_json` wrote."""
        fields = json.loads(text)
        fields["outcome"] = Outcome(fields["outcome"])
        return cls(**fields)
