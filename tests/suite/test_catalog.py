"""The catalog and the implementations list the same checks; every clause has one."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from rtmm_conformance.catalog import (
    CHECKS,
    CHECKS_BY_ID,
    IMPLEMENTATIONS,
    known_versions,
)
from rtmm_conformance.checks.registry import check
from rtmm_conformance.clauses import (
    AREAS,
    CLAUSES,
    LEVELS,
    TARGET_KINDS,
    clause_of,
    spec_anchor,
    version_key,
)
from rtmm_protocol import PROTOCOL_VERSION


def test_every_check_has_an_implementation_and_back() -> None:
    assert set(IMPLEMENTATIONS) == set(CHECKS_BY_ID)


def test_every_clause_has_a_check() -> None:
    """The clause vocabulary and the registry agree: each clause is enforced by a check,
    and each check names a clause (the spec page's headings are tested against the same
    vocabulary, tests/test_docs.py)."""
    assert [clause for clause in CLAUSES if clause in {c.clause for c in CHECKS}] == list(CLAUSES)
    assert {c.clause for c in CHECKS} <= set(CLAUSES)


def test_check_records_are_well_formed() -> None:
    ids = [c.id for c in CHECKS]
    assert len(ids) == len(set(ids))
    for info in CHECKS:
        assert info.id.startswith(info.clause + "-")
        assert clause_of(info.id) == info.clause
        assert info.level in LEVELS
        assert info.area in AREAS
        assert set(info.kinds) <= set(TARGET_KINDS)
        assert info.kinds
        assert info.statement.endswith(".")
        assert "\n" not in info.statement
        version_key(info.since)


def test_no_check_id_is_part_of_another() -> None:
    """``-k CHECK-ID`` selects that check and no other."""
    for a in CHECKS:
        for b in CHECKS:
            assert a is b or a.id not in b.id


def test_spec_anchor_names_the_clause() -> None:
    assert spec_anchor("G5") == "specification.md#G5"
    with pytest.raises(ValueError, match="Z9"):
        spec_anchor("Z9")


def test_registry_modes_and_prerequisites_are_consistent() -> None:
    checks = IMPLEMENTATIONS
    for impl in checks.values():
        assert impl.modes, impl.id
        for prerequisite in impl.prerequisites:
            assert prerequisite in checks, (impl.id, prerequisite)
            assert checks[prerequisite].prerequisites != (impl.id,)
    assert [i.id for i in checks.values() if i.cross_cutting] == [
        "G8-stateful-life-matches-oracle",
        "G10-state-matches-oracle",
        "C1-changes-accepted",
        "C2-changes-never-stale",
    ]


def test_each_check_is_defined_once_by_its_decorator() -> None:
    """The catalog is the registry: one record per check, in clause order."""
    assert [info.id for info in CHECKS] == list(IMPLEMENTATIONS)
    assert all(IMPLEMENTATIONS[info.id].info is info for info in CHECKS)
    assert len(CHECKS_BY_ID) == len(CHECKS)
    order = list(CLAUSES)
    assert [order.index(c.clause) for c in CHECKS] == sorted(order.index(c.clause) for c in CHECKS)


def _declared_in(area: str) -> Callable[[], None]:
    def sample() -> None:
        pass

    sample.__module__ = f"rtmm_conformance.checks.{area}"
    return sample


@pytest.mark.parametrize(
    ("check_id", "level", "options", "area", "message"),
    [
        ("Z9-no-such-clause", "MUST", {}, "gather", "clause of the specification"),
        ("G5-sample", "MAY", {}, "gather", "level must be one of"),
        ("G5-sample", "MUST", {"profile": "robustness"}, "gather", "robustness check is SHOULD"),
        ("G5-sample", "MUST", {"kinds": ("engine",)}, "gather", "kinds must be"),
        ("G5-sample", "MUST", {}, "helpers", "checks/<area>.py"),
    ],
)
def test_a_bad_declaration_is_refused(
    check_id: str, level: str, options: dict[str, Any], area: str, message: str
) -> None:
    with pytest.raises(RuntimeError, match=re.escape(message)):
        check(check_id, level, "A sample.", **options)(_declared_in(area))  # type: ignore[arg-type]
    assert check_id not in IMPLEMENTATIONS


def test_the_protocol_version_is_that_of_the_newest_checks() -> None:
    """A check added with a new ``since`` raises the protocol version with it (and a new
    protocol version has a check of its own), so neither can go stale alone."""
    assert known_versions()[-1] == PROTOCOL_VERSION
    assert PROTOCOL_VERSION in {c.since for c in CHECKS}
