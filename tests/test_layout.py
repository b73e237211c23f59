"""Dependencies point one way: the contract imports neither the reference nor the suite, the
oracle never imports the reference, and nothing in the package imports benchmarks or tests."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import rtmm_protocol
import rtmm_protocol.conformance

PACKAGE_DIR = Path(rtmm_protocol.__file__).resolve().parent
#: The suite's folder: in a checkout the second portion of the package, under the
#: top-level ``conformance/`` folder; in a wheel, inside the package folder.
SUITE_DIR = Path(rtmm_protocol.conformance.__file__).resolve().parent
ORACLE = SUITE_DIR / "oracle.py"
REPO_ROOT = Path(__file__).resolve().parents[1]

#: Contract modules: everything in the package outside ``reference`` and ``conformance``
#: (``__main__`` dispatches to the command-line tools lazily and is checked separately).
CONTRACT_MODULES = sorted(
    f"rtmm_protocol.{path.stem}"
    for path in PACKAGE_DIR.glob("*.py")
    if path.stem not in {"__init__", "__main__"}
)


def _source_files(*roots: Path) -> Iterator[Path]:
    """Every ``.py`` file under the ``roots`` (each once)."""
    seen: set[Path] = set()
    for root in roots:
        for folder, _, files in os.walk(root):
            for name in sorted(files):
                path = Path(folder) / name
                if name.endswith(".py") and path not in seen:
                    seen.add(path)
                    yield path


def _module_name(path: Path) -> str:
    base = SUITE_DIR.parent.parent if path.is_relative_to(SUITE_DIR) else PACKAGE_DIR.parent
    relative = path.relative_to(base).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported_modules(path: Path, module: str | None = None) -> set[str]:
    """Absolute names of every module ``path`` imports, statically or by a literal name.

    ``module`` is the file's dotted name (derived from its place in the package by default);
    relative imports are resolved against it.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    module = module or _module_name(path)
    package = module if path.stem == "__init__" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if name in {"import_module", "__import__"} and isinstance(first, ast.Constant):
                found.add(str(first.value))
    return found


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _loaded_after_import(modules: list[str]) -> set[str]:
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return set(completed.stdout.split())


def test_contract_modules_are_found() -> None:
    assert "rtmm_protocol.placeholder" in CONTRACT_MODULES
    assert "rtmm_protocol.validation" in CONTRACT_MODULES
    assert ORACLE.is_file()


def test_importing_the_contract_loads_neither_reference_nor_suite() -> None:
    loaded = _loaded_after_import(["rtmm_protocol", *CONTRACT_MODULES])
    assert "rtmm_protocol.placeholder" in loaded
    leaked = sorted(
        m
        for m in loaded
        if _under(m, "rtmm_protocol.reference")
        or _under(m, "rtmm_protocol.conformance")
        or _under(m, "conformance")
    )
    assert leaked == []


@pytest.mark.parametrize("module", CONTRACT_MODULES)
def test_contract_source_imports_neither_reference_nor_suite(module: str) -> None:
    path = PACKAGE_DIR / f"{module.rsplit('.', 1)[1]}.py"
    bad = sorted(
        name
        for name in _imported_modules(path)
        if _under(name, "rtmm_protocol.reference")
        or _under(name, "rtmm_protocol.conformance")
        or _under(name, "conformance")
    )
    assert bad == []


def test_oracle_source_never_imports_the_reference() -> None:
    imported = _imported_modules(ORACLE)
    assert "rtmm_protocol.feature" in imported  # the walk sees its imports at all
    assert sorted(m for m in imported if _under(m, "rtmm_protocol.reference")) == []


def test_importing_the_oracle_loads_no_reference_module() -> None:
    loaded = _loaded_after_import(["rtmm_protocol.conformance.oracle"])
    assert "rtmm_protocol.conformance.oracle" in loaded
    assert sorted(m for m in loaded if _under(m, "rtmm_protocol.reference")) == []


def test_no_package_module_imports_benchmarks_or_tests() -> None:
    offenders = {}
    for path in _source_files(PACKAGE_DIR, SUITE_DIR):
        bad = sorted(
            name
            for name in _imported_modules(path)
            if any(_under(name, top) for top in ("benchmarks", "tests", "support", "conftest"))
        )
        if bad:
            offenders[_module_name(path)] = bad
    assert offenders == {}


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


def test_the_import_walk_sees_relative_and_dynamic_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import importlib\n"
        "from . import placeholder\n"
        "from .testing.toy_models import ToyTextModel\n"
        "importlib.import_module('benchmarks.run')\n"
        "__import__('tests')\n",
        encoding="utf-8",
    )
    found = _imported_modules(sample, "rtmm_protocol.sample")
    assert {
        "importlib",
        "rtmm_protocol.placeholder",
        "rtmm_protocol.testing.toy_models",
        "benchmarks.run",
        "tests",
    } <= found
