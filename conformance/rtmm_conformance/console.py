"""The console's words, in one place: every line of a failure (its header, what was expected
and seen, the smallest case, the replay, the seed, the rerun command, a crash's or a hang's
stack), the ``[yours]``/``[inherited]`` tags, what pytest shows for each outcome, the titles
of causes, and how a check and its node are named. The other layers pass fields; the
report's table and summary lines are :mod:`.reporting.report`'s. Below :mod:`.results`, so
that a :class:`~.results.CheckFailure` raised into a user's replay is written here too.

One name per thing: the *replay* is the ready-to-run Python of the smallest case; the
*rerun* is the ``pytest`` command that runs one check in one mode again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

from rtmm_conformance.clauses import CLAUSES, CheckInfo, spec_anchor
from rtmm_conformance.frames import Frame, frame_kind, short_path
from rtmm_conformance.settings import RunSettings

__all__ = [
    "NODE_PREFIX",
    "Finding",
    "cause_title",
    "crash_text",
    "cuda_note",
    "expected_failure_reason",
    "failure_details",
    "failure_message",
    "finding_text",
    "hang_text",
    "label",
    "origin_tag",
    "outcome_reason",
    "rerun_command",
]

#: First part of every suite node ID: ``rtmm-conformance::G5-rows-match-mask[realtime]``.
NODE_PREFIX: Final = "rtmm-conformance"
_DEFAULTS = RunSettings()  # what a rerun command leaves out


def label(check_id: str, mode: str | None) -> str:
    """``CHECK-ID[mode]`` (or the bare ID of a check that runs once): how pytest, the
    report and every message name one check in one mode."""
    return check_id if mode is None else f"{check_id}[{mode}]"


class Finding(Protocol):
    """What a failure found, as fields (a :class:`~.results.CheckFailure` has them)."""

    what: str
    expected: str | None
    seen: str | None
    context: str | None
    replay: str | None

    @property
    def case_words(self) -> str: ...


def finding_text(finding: Finding) -> str:
    """What, expected, seen, where, the smallest case in words, and its replay."""
    lines = [finding.what]
    if finding.expected is not None:
        lines.append(f"expected: {finding.expected}")
    if finding.seen is not None:
        lines.append(f"seen:     {finding.seen}")
    lines += [finding.context] if finding.context else []
    lines += [f"smallest case: {finding.case_words}"] if finding.case_words else []
    if finding.replay:
        lines.append("replay, as ready-to-run Python:")
        lines.extend("    " + line for line in finding.replay.splitlines())
    return "\n".join(lines)


def failure_details(info: CheckInfo, mode: str | None, seed: int, body: str) -> str:
    """A failure's explanation: the requirement and its clause, ``body``, and the seed."""
    return (
        f"{label(info.id, mode)}: {info.level}, SPEC {info.clause} ({CLAUSES[info.clause]}); "
        f"see docs {spec_anchor(info.clause)}\nrequirement: {info.statement}\n{body}\n"
        f"seed: {seed} (--conformance-seed={seed})"
    )


def rerun_command(
    target: str, seed: object, device: str, label: str, *, dtype: object = _DEFAULTS.dtype
) -> str:
    """The command that reruns one check in one mode (its failure shows the replay): the
    seed, device and dtype are spelled out where they are not the defaults."""
    parts = ["pytest", f"--conformance={target}"]
    if seed is not None and seed != _DEFAULTS.seed:
        parts.append(f"--conformance-seed={seed}")
    if device.startswith("cuda"):
        parts.append(f"--conformance-device={device}")
    if dtype is not None and dtype != _DEFAULTS.dtype:
        parts.append(f"--conformance-dtype={dtype}")
    return " ".join([*parts, f"'{NODE_PREFIX}::{label}'"])


def origin_tag(origin: str | None, baseline: str) -> str:
    """``[yours] `` or ``[inherited from BASELINE] `` for a target with a baseline, else ``""``."""
    if not baseline:
        return ""
    return f"[inherited from {baseline}] " if origin == "inherited" else "[yours] "


def failure_message(details: str, *, tag: str = "", rerun: str = "") -> str:
    """What pytest shows for a failed check: its tag, its details and its rerun command."""
    return tag + details + (f"\nrerun: {rerun}" if rerun else "")


def outcome_reason(outcome: str, reason: str, *, check: str = "", baseline: str = "") -> str:
    """What pytest shows for a check that neither passed nor failed: ``inherited`` (an
    expected failure that ``fail_on="own"`` forgives), ``robustness`` (a gap, an expected
    failure), ``warning`` (a SHOULD of the contract); else ``reason`` (a blocked check's
    reason says that it is blocked, and by what)."""
    return {
        "inherited": f"inherited from {baseline}: {reason}",
        "robustness": f"robustness gap (SHOULD, outside the contract's domain): {reason}",
        "warning": f"{check} (SHOULD): {reason}",
    }.get(outcome, reason)


def expected_failure_reason(where: str, why: str, was: str) -> str:
    """The reason of a failure that the expected-failures file lists (at ``where``)."""
    return f"expected failure ({where}: {why}); was: {was}"


def cause_title(
    what: str,
    *,
    at: Frame | None = None,
    kind: tuple[int, Sequence[str]] | None = None,
    fallback: str = "",
) -> str:
    """A cause's title: ``what`` (an error's type) and the target's line that raised it;
    or ``what`` on a sort of step (requests and kinds of window); or ``what`` alone (with
    ``fallback``, the check, for a crash or a hang that left no frame of the target's)."""
    if at is not None:
        return f"{what} at {short_path(at[0])}:{at[1]} (in {at[2]})"
    if kind is not None:
        count, kinds = kind
        steps = "1 request" if count == 1 else f"{count} requests"
        return f"{what} (on {steps}: {', '.join(kinds)})"
    return f"{what} ({fallback})" if fallback else what


def crash_text(doing: str, how: str, frames: Sequence[Frame]) -> tuple[str, str]:
    """The reason and details of a check whose process the target crashed ``doing``
    something (`` in METHOD (FILE:LINE)``, or ``""``)."""
    reason = f"the target crashed the check's process{doing}: {how}"
    stack = _stack_text(frames) if frames else "    (no stack: the process left no trace)"
    return reason, (
        f"{reason}.\nThe check ran in a worker process, so the run goes on; the stack "
        f"of the check when the process ended (innermost last):\n{stack}"
    )


def hang_text(limit_s: float, what: str, frames: Sequence[Frame]) -> tuple[str, str]:
    """The reason and details of a check that did not finish in ``what``."""
    reason = f"did not finish within {limit_s:g} s: the target hangs or is very slow in {what}"
    stack = _stack_text(frames) if frames else "    (unknown)"
    return reason, (
        f"{reason}\nraise the limit with --conformance-timeout=SECONDS if the target is just "
        f"slow; later checks that call {what} are reported blocked, not waited out.\nstack "
        f"of the check when its time ran out (innermost last):\n{stack}"
    )


def cuda_note(contained: bool) -> str:
    """What became of the process where a check met a CUDA error."""
    return "a CUDA error leaves the process's CUDA context unusable, " + (
        "so the worker process that ran this check was replaced: the next check starts in a new one"
        if contained
        else "and the checks run in this process (isolation off): later checks that use "
        "CUDA may fail with it too"
    )


def _stack_text(frames: Sequence[Frame]) -> str:
    """The stack from the check's own code down, without the suite's process plumbing."""
    shown = list(frames)
    starts = [i for i, f in enumerate(shown) if f[2] == "run_check" and frame_kind(f[0]) == "suite"]
    if starts:
        shown = shown[starts[-1] + 1 :]
    else:
        kinds = [frame_kind(f[0]) for f in shown]
        if "suite" in kinds:
            shown = shown[kinds.index("suite") :]  # the test runner above it is noise
    shown = [f for f in shown if not f[0].endswith("workers.py")]
    return "\n".join(f"    {short_path(f[0])}:{f[1]} in {f[2]}" for f in shown)
