"""Whether two conformance reports of one target reach the same verdicts.

The Engines page is rendered from the reports committed in ``reports/``; continuous
integration runs the suites again and fails when a fresh report disagrees with the
committed one. Two runs with the same seed give the same verdicts, but not the same
file: timings differ, and so do the machine's paths (a site-packages folder, a checkout)
and the cause keys hashed from them. :func:`verdicts` keeps what a report *says* and
drops the rest:

* the target, the class it derives from (its baseline), its kind, the settings that decide the draws (seed, examples, protocol
  version, dtype, device) and the notes;
* per check and mode: the outcome, the reason, the title of its cause and, for a
  subclass of an engine's class, whether a failure is its own or inherited; and whether
  the check ran through the compat adapter of the ``computed_prefill_lens`` rename;
* per cause: its title, and the checks and items it fails, in order;
* the vLLM version of the environment, where there is one.

A fresh run may use a known-gaps file (``--conformance-xfail``) where the committed
report was written without one: an *expected* failure then reads as the failure it
expected (``failed`` at MUST level, ``warning`` at SHOULD level, with the check's own
reason), so one strict run both proves the known-gaps file exact and the committed
report current.

    python examples/engine_reports/compare.py COMMITTED.json FRESH.json   # exit 1 on a difference
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["differences", "main", "strip_machine_paths", "verdicts"]

# A path up to and including a site-packages folder, or an absolute path up to a checkout
# folder of this repository (``.../rtmm_protocol/...``, ``.../examples/...``).
_SITE_PACKAGES = re.compile(r"(?:[A-Za-z]:)?[^\s\"'()\[\]]*?[/\\]site-packages[/\\]")
_CHECKOUT = re.compile(
    r"(?:[A-Za-z]:)?/[^\s\"'()\[\]]*?/(?=(?:rtmm_protocol|conformance|examples|tests)/)"
)
_EXPECTED = "expected failure ("
_WAS = "; was: "
_SETTINGS = ("seed", "examples", "version", "dtype", "device")


def strip_machine_paths(text: str) -> str:
    """``text`` with site-packages and checkout prefixes removed from the paths it holds."""
    return _CHECKOUT.sub("", _SITE_PACKAGES.sub("", text))


def _as_committed(mode: Mapping[str, Any], level: str) -> tuple[str, str]:
    """A mode's outcome and reason as a run without a known-gaps file reports them."""
    outcome = str(mode.get("outcome", ""))
    reason = str(mode.get("reason", ""))
    if outcome == "xfailed":
        outcome = "failed" if level == "MUST" else "warning"
        if reason.startswith(_EXPECTED) and _WAS in reason:
            reason = reason.partition(_WAS)[2]
    return outcome, reason


def _cause_title(cause: object) -> str:
    if isinstance(cause, Mapping):
        return strip_machine_paths(str(cause.get("title", "")))
    return ""


def verdicts(report: Mapping[str, Any]) -> dict[str, Any]:
    """What a report says about its target, without timings, paths or cause hashes."""
    settings = report.get("settings", {})
    checks: dict[str, dict[str, object]] = {}
    for check in report.get("checks", []):
        level = str(check.get("level", ""))
        modes: dict[str, object] = {}
        for name, mode in check.get("modes", {}).items():
            outcome, reason = _as_committed(mode, level)
            modes[name] = (
                outcome,
                strip_machine_paths(reason),
                _cause_title(mode.get("cause")),
                mode.get("origin"),
            )
        modes["via_compat"] = bool(check.get("via_compat", False))
        checks[str(check.get("id"))] = modes
    causes = [
        (
            strip_machine_paths(str(cause.get("title", ""))),
            list(cause.get("checks", [])),
            list(cause.get("items", [])),
        )
        for cause in report.get("causes", [])
    ]
    return {
        "target": report.get("target"),
        "baseline": report.get("baseline"),
        "kind": report.get("kind"),
        "settings": {key: settings.get(key) for key in _SETTINGS},
        "vllm": report.get("environment", {}).get("vllm"),
        "notes": [strip_machine_paths(str(note)) for note in report.get("notes", [])],
        "checks": checks,
        "causes": causes,
    }


def differences(committed: Mapping[str, Any], fresh: Mapping[str, Any]) -> list[str]:
    """One line per thing the two reports say differently (empty when they agree)."""
    old, new = verdicts(committed), verdicts(fresh)
    lines = [
        f"{key}: {old[key]!r} -> {new[key]!r}"
        for key in ("target", "baseline", "kind", "settings", "vllm", "notes")
        if old[key] != new[key]
    ]
    for check_id in sorted(set(old["checks"]) | set(new["checks"])):
        before, after = old["checks"].get(check_id), new["checks"].get(check_id)
        if before is None or after is None:
            lines.append(f"{check_id}: {'only in the fresh run' if before is None else 'not run'}")
            continue
        for mode in sorted(set(before) | set(after)):
            if before.get(mode) != after.get(mode):
                lines.append(f"{check_id}[{mode}]: {before.get(mode)!r} -> {after.get(mode)!r}")
    if old["causes"] != new["causes"]:
        lines.append("causes: " + _first_cause_difference(old["causes"], new["causes"]))
    return lines


def _first_cause_difference(old: Sequence[Any], new: Sequence[Any]) -> str:
    for number, (before, after) in enumerate(zip(old, new, strict=False), start=1):
        if before != after:
            return f"cause {number}: {before!r} -> {after!r}"
    return f"{len(old)} causes -> {len(new)} causes"


def main(argv: Sequence[str] | None = None) -> int:
    """Compare a committed report with a fresh one; print the differences; 1 if any."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("committed", type=Path)
    parser.add_argument("fresh", type=Path)
    args = parser.parse_args(argv)
    committed = json.loads(args.committed.read_text(encoding="utf-8"))
    fresh = json.loads(args.fresh.read_text(encoding="utf-8"))
    lines = differences(committed, fresh)
    if lines:
        print(
            f"{args.committed} is stale against the fresh run {args.fresh}:\n  "
            + "\n  ".join(lines)
            + "\nregenerate the reports: python examples/engine_reports/refresh.py",
            file=sys.stderr,
        )
        return 1
    print(f"{args.committed}: same verdicts as {args.fresh}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
