"""The repository's layout: the suite's source folder, no symbolic links, clause IDs in
citations. (Which module may import which is checked by import-linter:
``tests/test_import_contracts.py``.)"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import rtmm_protocol
import rtmm_protocol.conformance

PACKAGE_DIR = Path(rtmm_protocol.__file__).resolve().parent
#: The suite's folder: in a checkout the second portion of the package, under the
#: top-level ``conformance/`` folder; in a wheel, inside the package folder.
SUITE_DIR = Path(rtmm_protocol.conformance.__file__).resolve().parent
REPO_ROOT = Path(__file__).resolve().parents[1]


def test_the_repository_holds_no_symbolic_link() -> None:
    """Checkouts without symlink support get the same tree (the suite is a real folder)."""
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listing = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "ls-files", "-s"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    links = [line.split("\t", 1)[1] for line in listing.splitlines() if line.startswith("120000")]
    assert links == []


def test_code_and_docs_cite_clause_ids_not_section_numbers() -> None:
    """The specification page anchors clauses (``#G5``), not numbered sections."""
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "ls-files", "*.py", "*.md", "*.sh", "*.txt", "*.yml"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    section = re.compile(r"§\s?\d")
    citing = [
        f"{name}:{number}"
        for name in tracked
        if (REPO_ROOT / name).is_file()
        for number, line in enumerate(
            (REPO_ROOT / name).read_text(errors="replace").splitlines(), 1
        )
        if section.search(line)
    ]
    assert citing == [], "cite clause IDs (G5, D2, ...) instead of section numbers"


def test_the_suite_is_imported_from_the_top_level_conformance_folder() -> None:
    """In a checkout ``rtmm_protocol.conformance`` is the source under ``conformance/``."""
    if PACKAGE_DIR.parent != REPO_ROOT:
        pytest.skip("the package is installed, not run from this checkout")
    assert REPO_ROOT / "conformance" / "rtmm_protocol" / "conformance" == SUITE_DIR
    assert not (PACKAGE_DIR / "conformance").exists()
    # Nothing under the top-level folder is importable as a top-level ``conformance``:
    # a user's own package of that name is never shadowed by this one.
    assert not (REPO_ROOT / "conformance" / "__init__.py").exists()
