"""How a check ends: the exceptions a check raises, and :class:`CheckResult`, the record of
its verdict, which goes as it is from where the check ran to the report (pickled by the
worker process, written as JSON only for pytest-xdist's controller and in the report).
Above :mod:`.console`, whose words its failures are written in, and the vocabulary below."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from rtmm_conformance.console import finding_text, label
from rtmm_conformance.frames import TargetError

if TYPE_CHECKING:
    from rtmm_protocol.testing.scenario import CaseKind, GatherScenario

__all__ = [
    "FAILING_OUTCOMES",
    "CheckBlocked",
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
    """A target did not meet a requirement, as fields: ``what`` in one line, ``expected``
    and ``seen`` in detail, ``context`` (where it happened), ``case``, the smallest case
    that shows it as a scenario where one does (``realtime``: whether the model it ran
    against was realtime, which is how its decode windows are read), and ``replay``,
    ready-to-run Python for that case; the target's exception, if it raised one, is what
    the failure was raised from (:attr:`error`). Adding a case or a replay sets its field:
    the message is written from the fields where it is shown (:func:`~.console.finding_text`)."""

    def __init__(
        self,
        what: str,
        *,
        expected: str | None = None,
        seen: str | None = None,
        context: str | None = None,
        case: GatherScenario | None = None,
        realtime: bool = False,
        replay: str | None = None,
    ) -> None:
        super().__init__(what)
        self.what = what
        self.expected = expected
        self.seen = seen
        self.context = context
        self.case = case
        self.realtime = realtime
        self.replay = replay

    def __str__(self) -> str:
        return finding_text(self)

    @property
    def error(self) -> BaseException | None:
        """The target's exception this failure reports (the first in its chain of causes
        that is no :class:`CheckFailure`), if the target raised one."""
        seen: set[int] = set()
        error = self.__cause__ or self.__context__
        while error is not None and id(error) not in seen:
            seen.add(id(error))
            if not isinstance(error, CheckFailure):
                return error
            error = error.__cause__ or error.__context__
        return None

    @property
    def case_kind(self) -> CaseKind | None:
        """The sort of step the smallest case is (``GatherScenario.kind``), if known."""
        return None if self.case is None else self.case.kind(self.realtime)

    @property
    def case_words(self) -> str:
        """The smallest case in words (``GatherScenario.describe``), or ``""``."""
        return "" if self.case is None else self.case.describe(self.realtime)


class ConformanceWarning(UserWarning):
    """Emitted for a SHOULD check that failed in a run that is not strict."""


class CheckSkipped(Exception):  # noqa: N818  # a verdict, not an error
    """A check cannot run here (the factory refused the mode, no CUDA device...)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CheckBlocked(Exception):  # noqa: N818  # a verdict, not an error
    """A check cannot judge its clause because a call another check owns failed first (a
    model-inputs hook that raised is M1's finding, not D2's): ``what`` happened, and
    ``owner``, the check that reports it. The check is reported blocked, which fails the
    run as a failure does. Raised from the target's exception, if there is one."""

    def __init__(self, what: str, owner: str) -> None:
        self.what = what
        self.owner = owner
        super().__init__(self.reason)

    @property
    def reason(self) -> str:
        """The blocked check's reason: what happened, and which check reports it."""
        return f"blocked: {self.what} ({self.owner} reports it)"

    @property
    def error(self) -> BaseException | None:
        """The target's exception behind the block, if it raised one."""
        return self.__cause__


@dataclass(frozen=True)
class CheckResult:
    """One check in one mode: its outcome, reason and details; a failure also carries its
    cause, its smallest case (as a scenario and in words), its replay and its ``origin``
    (``"inherited"`` when the class the target derives from fails the same way, else
    ``"own"``)."""

    check_id: str
    mode: str | None
    outcome: Outcome
    reason: str = ""
    details: str = ""
    duration_s: float = 0.0
    #: What groups this failure with others of the same fault (:mod:`..reporting.causes`).
    cause_keys: tuple[str, ...] = ()
    cause_title: str = ""
    #: The smallest case that shows the failure, where a scenario does, and in words.
    case: GatherScenario | None = None
    case_words: str = ""
    #: Ready-to-run Python that replays the smallest case.
    replay: str = ""
    origin: str | None = None
    via_compat: bool = False
    #: The exception the target raised, if that is how it failed: its type, message and
    #: the innermost frame of the target's own code.
    error: TargetError | None = None

    @property
    def label(self) -> str:
        """``CHECK-ID[mode]``, as :func:`label` writes it."""
        return label(self.check_id, self.mode)

    def with_outcome(self, outcome: Outcome, reason: str | None = None) -> CheckResult:
        """The same result with another outcome (and reason)."""
        return replace(self, outcome=outcome, reason=self.reason if reason is None else reason)

    def to_json(self) -> str:
        """The record as one JSON string, for a boundary that carries text only (the reports
        pytest-xdist's workers send their controller)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> CheckResult:
        """The record :meth:`to_json` wrote."""
        fields = json.loads(text)
        fields["outcome"] = Outcome(fields["outcome"])
        fields["cause_keys"] = tuple(fields["cause_keys"])
        if fields["error"] is not None:
            fields["error"] = TargetError.from_fields(fields["error"])
        if fields["case"] is not None:
            fields["case"] = _scenario(fields["case"])
        return cls(**fields)


def _scenario(fields: dict[str, Any]) -> GatherScenario:
    """The scenario ``dataclasses.asdict`` gave as ``fields`` (its tuples made lists)."""
    from rtmm_protocol.testing.scenario import FeatureSpec, GatherScenario, RequestSpec

    def feature(f: dict[str, Any]) -> FeatureSpec:
        mask = f["is_embed"]
        return FeatureSpec(**{**f, "is_embed": None if mask is None else tuple(mask)})

    def request(r: dict[str, Any]) -> RequestSpec:
        return RequestSpec(**{**r, "features": tuple(map(feature, r["features"]))})

    return GatherScenario(
        **{
            **fields,
            "requests": tuple(map(request, fields["requests"])),
            "extra_requests": tuple(map(request, fields["extra_requests"])),
        }
    )
