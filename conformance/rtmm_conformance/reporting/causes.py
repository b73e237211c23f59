"""Grouping failures by cause, so one fault that breaks ten checks is reported once: failures
that share a cause key (:mod:`..running.cause_keys`) are one cause."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rtmm_conformance.results import FAILING_OUTCOMES, CheckResult

__all__ = ["Cause", "group_causes", "key_digest"]


@dataclass(frozen=True)
class Cause:
    """Failures with one cause: its number, what it is, and the failures in report order."""

    id: str
    title: str
    results: tuple[CheckResult, ...]
    #: A stable name of the cause (a digest of its first failure's main key), which the
    #: junit properties of each failing check carry as well.
    key: str = ""

    @property
    def checks(self) -> list[str]:
        """The IDs of the checks it fails, each once, in report order."""
        return list(dict.fromkeys(r.check_id for r in self.results))

    @property
    def first(self) -> CheckResult:
        """The failure whose replay stands for the whole cause."""
        return self.results[0]


def group_causes(results: Iterable[CheckResult]) -> list[Cause]:
    """Failing results joined by shared cause keys, numbered in the order given."""
    failing = [r for r in results if r.outcome in FAILING_OUTCOMES]
    groups: list[tuple[set[str], list[int]]] = []  # the keys of a group, and its members
    for index, r in enumerate(failing):
        keys = set(r.cause_keys) or {f"what:{r.check_id}:{r.reason}"}
        joined = [g for g in groups if g[0] & keys]
        groups = [g for g in groups if not g[0] & keys]
        members = sorted([index, *(i for g in joined for i in g[1])])
        groups.append((keys.union(*(g[0] for g in joined)), members))
    causes = []
    for number, (_, members) in enumerate(sorted(groups, key=lambda g: g[1][0]), start=1):
        group = tuple(failing[i] for i in members)
        title = next((r.cause_title for r in group if r.cause_title), group[0].reason)
        causes.append(Cause(str(number), title, group, key_digest(group[0].cause_keys)))
    return causes


def key_digest(keys: Sequence[str]) -> str:
    """A short stable name for a failure's main cause key (its first one)."""
    return hashlib.sha1(keys[0].encode()).hexdigest()[:8] if keys else ""
