"""The catalog and the implementations list the same checks; every clause has one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rtmm_conformance.catalog import (
    AREAS,
    CHECKS,
    CHECKS_BY_ID,
    CLAUSES,
    LEVELS,
    TARGET_KINDS,
    _decorated_checks,
    checks_for_clause,
    clause_of,
    spec_anchor,
    version_key,
)
from rtmm_conformance.checks.all_checks import implementations

CATALOG_FILE = (
    Path(__file__).resolve().parents[2] / "conformance" / "rtmm_conformance" / "catalog.py"
)


def test_every_check_has_an_implementation_and_back() -> None:
    assert set(implementations()) == set(CHECKS_BY_ID)


def test_every_clause_of_sections_3_to_7_has_a_check() -> None:
    expected = (
        {f"G{i}" for i in range(1, 11)}
        | {"C1", "C2"}
        | {f"D{i}" for i in range(1, 6)}
        | {f"R{i}" for i in range(1, 5)}
        | {f"E{i}" for i in range(1, 4)}
        | {f"T{i}" for i in range(1, 4)}
    )
    assert set(CLAUSES) == expected
    assert {c.clause for c in CHECKS} == expected
    assert all(checks_for_clause(clause) for clause in expected)


def test_check_records_are_well_formed() -> None:
    ids = [c.id for c in CHECKS]
    assert len(ids) == len(set(ids))
    for check in CHECKS:
        assert check.id.startswith(check.clause + "-")
        assert clause_of(check.id) == check.clause
        assert check.level in LEVELS
        assert check.area in AREAS
        assert set(check.targets) <= set(TARGET_KINDS)
        assert check.targets
        assert check.statement.endswith(".")
        assert "\n" not in check.statement
        version_key(check.since)


def test_no_check_id_is_part_of_another() -> None:
    """``-k CHECK-ID`` selects that check and no other."""
    for a in CHECKS:
        for b in CHECKS:
            assert a is b or a.id not in b.id


def test_spec_anchor_names_the_clause() -> None:
    assert spec_anchor("G5") == "specification.md#G5"
    with pytest.raises(ValueError, match="G11"):
        spec_anchor("G11")


def test_registry_modes_and_prerequisites_are_consistent() -> None:
    checks = implementations()
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
    """The catalog's record of a check is the one its decorator states (and is in order)."""
    checks = implementations()
    for info in CHECKS:
        assert checks[info.id].info == info
        assert info.line > 0
    order = list(CLAUSES)
    assert [order.index(c.clause) for c in CHECKS] == sorted(order.index(c.clause) for c in CHECKS)


def test_a_decorator_without_literal_arguments_is_refused() -> None:
    source = (
        "STATEMENT = 'x.'\n@check('G5-sample', 'MUST', STATEMENT)\ndef _sample(run):\n    pass\n"
    )
    with pytest.raises(RuntimeError, match="literals"):
        _decorated_checks("gather", source, "sample.py")


def test_catalog_loads_by_path_without_torch() -> None:
    """The docs build reads the catalog file without the package's dependencies."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('catalog', {str(CATALOG_FILE)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "sys.modules['catalog'] = module\n"
        "spec.loader.exec_module(module)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print(len(module.CHECKS))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == len(CHECKS)
