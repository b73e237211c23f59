"""The package's layers, checked by import-linter on the tree a wheel installs.

In a checkout the suite is a second portion of ``rtmm_protocol`` (the top-level
``conformance/`` folder), which import-linter does not follow; the test merges the two
portions as the wheel does, then runs ``lint-imports`` with the contracts in
``pyproject.toml``: contract <- testing <- {reference, suite}, the suite imports the
reference only in its bundled targets, nothing imports benchmarks or tests, and no import
cycle at any depth (function-level imports included).
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
    not (REPO / "conformance" / "rtmm_protocol").is_dir() or not LINT_IMPORTS.exists(),
    reason="needs a checkout and import-linter (the test extra)",
)


def _merged_tree(root: Path) -> Path:
    """``rtmm_protocol`` with the suite at ``rtmm_protocol/conformance``, as a wheel has it."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "rtmm_protocol", root / "rtmm_protocol", ignore=ignore)
    suite = REPO / "conformance" / "rtmm_protocol" / "conformance"
    shutil.copytree(suite, root / "rtmm_protocol" / "conformance", ignore=ignore)
    return root


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(REPO / "pyproject.toml")],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_import_contracts_hold(tmp_path: Path) -> None:
    result = _lint(_merged_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_function_level_cycle_breaks_them(tmp_path: Path) -> None:
    """The checker sees imports inside functions: a cycle through one is reported."""
    root = _merged_tree(tmp_path)
    report = root / "rtmm_protocol" / "conformance" / "reporting" / "report.py"
    with report.open("a", encoding="utf-8") as source:
        source.write(
            "\n\ndef _cycle() -> None:\n    from rtmm_protocol.conformance import plugin\n"
        )
    result = _lint(root)
    assert result.returncode != 0
    assert "No import cycles, at any depth BROKEN" in result.stdout
