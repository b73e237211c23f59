"""The package's layers, checked by import-linter on the checkout as it is.

``lint-imports`` runs with the contracts in ``pyproject.toml`` over both packages,
``rtmm_protocol`` (the contract, the testing helpers, the reference) and
``rtmm_conformance`` (the suite, layered from its results up to its plugin and API).
Function-level imports count. The second test plants a cycle in a copy of the suite to
show that the checker sees one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(
    not (REPO / "conformance" / "rtmm_conformance").is_dir() or not LINT_IMPORTS.exists(),
    reason="needs a checkout and import-linter (the test extra)",
)


def _lint(*roots: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the packages found first under ``roots``."""
    path = os.pathsep.join([*map(str, roots), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(REPO / "pyproject.toml")],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_import_contracts_hold() -> None:
    result = _lint(REPO, REPO / "conformance")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_function_level_cycle_breaks_them(tmp_path: Path) -> None:
    """The checker sees imports inside functions: a cycle through one is reported."""
    suite = tmp_path / "rtmm_conformance"
    shutil.copytree(
        REPO / "conformance" / "rtmm_conformance", suite,
        ignore=shutil.ignore_patterns("__pycache__"),
    )  # fmt: skip
    with (suite / "reporting" / "report.py").open("a", encoding="utf-8") as source:
        source.write("\n\ndef _cycle() -> None:\n    from rtmm_conformance import plugin\n")
    result = _lint(tmp_path, REPO)
    assert result.returncode != 0
    assert "No import cycles, at any depth BROKEN" in result.stdout
