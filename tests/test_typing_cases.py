"""The typing test cases: what the type checkers must accept and what they must reject.

``tests/typing/pass/*.py`` must type-check without a single finding. Every line of
``tests/typing/fail/*.py`` that a checker must reject carries its expected codes in a
comment: ``# E: <mypy error code>`` and ``# P: <pyright rule>`` (several codes separated
by commas when a line has several findings). Each fail file must produce exactly those
findings, line by line, no more and no fewer. A line with an ``E:`` but no ``P:`` is one
that pyright accepts (``--warn-unreachable`` has no pyright counterpart), and vice versa.

mypy runs once per test session, over both folders, with the repository's configuration
(strict, ``warn_unreachable``) and a cache kept in ``.mypy_cache/typing-tests``; pyright
runs once too when it is installed. The example classes come from
``tests/support/typing_examples.py`` and ``tests/support/vllm_typing_examples.py`` (vLLM's
shapes, written without vLLM), on both checkers' import path, and mypy checks both
catalogues too. Under pytest-xdist the first worker runs each checker
and the others read its result.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
from support.extras import HAS_MYPY, MYPY_MISSING

REPO = Path(__file__).resolve().parent.parent
CASES = REPO / "tests" / "typing"
PASS_FILES = sorted((CASES / "pass").glob("*.py"))
FAIL_FILES = sorted((CASES / "fail").glob("*.py"))
#: The example catalogues the cases import (the contract's spelling, and vLLM's shapes).
EXAMPLES = [
    REPO / "tests" / "support" / "typing_examples.py",
    REPO / "tests" / "support" / "vllm_typing_examples.py",
]
CACHE_DIR = REPO / ".mypy_cache" / "typing-tests"

_EXPECTATION = re.compile(r"#\s*([EP]):\s*([\w-]+(?:\s*,\s*[\w-]+)*)")


@dataclass(frozen=True)
class Finding:
    """One error a type checker reported: where, which code, and its message."""

    file: str
    line: int
    code: str
    message: str


def _case_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _expected(path: Path, marker: str) -> Counter[tuple[int, str]]:
    """The ``(line, code)`` pairs a fail file's comments announce for one checker."""
    expected: Counter[tuple[int, str]] = Counter()
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        for found_marker, codes in _EXPECTATION.findall(text):
            if found_marker == marker:
                expected.update((number, code.strip()) for code in codes.split(","))
    return expected


def _pyright_executable() -> str | None:
    """The pyright next to this interpreter, else the one on PATH."""
    beside = shutil.which("pyright", path=str(Path(sys.executable).parent))
    return beside or shutil.which("pyright")


def _importing_support(variable: str) -> dict[str, str]:
    """The environment with ``tests`` on a checker's import path, for ``support.*``."""
    env = dict(os.environ)
    env[variable] = os.pathsep.join(filter(None, [str(REPO / "tests"), env.get(variable)]))
    return env


def _run_mypy() -> list[Finding]:
    command = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(REPO / "pyproject.toml"),
        "--cache-dir",
        str(CACHE_DIR / "cache"),
        "--output",
        "json",
        # Report the cases and their example catalogue, not the package they import
        # (the package has its own mypy run).
        "--follow-imports",
        "silent",
        *(str(path) for path in EXAMPLES),
        *(str(path) for path in PASS_FILES + FAIL_FILES),
    ]
    done = subprocess.run(
        command, cwd=REPO, env=_importing_support("MYPYPATH"), capture_output=True, text=True
    )
    if done.returncode not in (0, 1):
        raise RuntimeError(f"mypy failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    findings = []
    for line in done.stdout.splitlines():
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        if record["severity"] != "error":
            continue
        findings.append(
            Finding(
                Path(record["file"]).as_posix(),
                record["line"],
                record["code"] or "",
                record["message"],
            )
        )
    return findings


def _run_pyright(executable: str) -> list[Finding]:
    command = [
        executable,
        "--outputjson",
        "--pythonpath",
        sys.executable,
        *(str(path) for path in PASS_FILES + FAIL_FILES),
    ]
    # pyright takes its import path from the interpreter, which honours PYTHONPATH.
    done = subprocess.run(
        command, cwd=REPO, env=_importing_support("PYTHONPATH"), capture_output=True, text=True
    )
    if done.returncode not in (0, 1):
        raise RuntimeError(f"pyright failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    report = json.loads(done.stdout)
    return [
        Finding(
            Path(item["file"]).as_posix(),
            item["range"]["start"]["line"] + 1,
            item.get("rule", ""),
            item["message"].replace("\xa0", " "),
        )
        for item in report["generalDiagnostics"]
        if item["severity"] == "error"
    ]


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (a no-op where fcntl does not exist)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with lock_path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _once_per_run(name: str, compute: Callable[[], list[Finding]]) -> list[Finding]:
    """Run ``compute`` once per pytest run, even when xdist spreads the tests over workers."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:
        return compute()
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    result_path = CACHE_DIR / f"{name}-{run_id}.json"
    with _exclusive(CACHE_DIR / f"{name}.lock"):
        if result_path.exists():
            return [Finding(**item) for item in json.loads(result_path.read_text())]
        findings = compute()
        for stale in CACHE_DIR.glob(f"{name}-*.json"):
            stale.unlink()
        result_path.write_text(json.dumps([asdict(finding) for finding in findings]))
        return findings


def _relative(findings: list[Finding]) -> list[Finding]:
    """Findings with their file made relative to the repository."""
    relative = []
    for finding in findings:
        path = Path(finding.file)
        if path.is_absolute() and path.is_relative_to(REPO):
            path = path.relative_to(REPO)
        relative.append(Finding(path.as_posix(), finding.line, finding.code, finding.message))
    return relative


@pytest.fixture(scope="session")
def mypy_findings() -> list[Finding]:
    if not HAS_MYPY:
        pytest.skip(MYPY_MISSING)
    return _relative(_once_per_run("mypy", _run_mypy))


@pytest.fixture(scope="session")
def pyright_findings() -> list[Finding]:
    executable = _pyright_executable()
    if executable is None:
        pytest.skip("pyright is not installed (it comes with the test extra)")
    return _relative(_once_per_run("pyright", lambda: _run_pyright(executable)))


def _compare(path: Path, marker: str, findings: list[Finding], checker: str) -> None:
    name = path.relative_to(REPO).as_posix()
    mine = [finding for finding in findings if finding.file == name]
    expected = _expected(path, marker)
    seen = Counter((finding.line, finding.code) for finding in mine)
    missing = expected - seen
    unexpected = seen - expected
    if not missing and not unexpected:
        return
    lines = [f"{checker} findings in {name} differ from the expected ones:"]
    lines += [
        f"  line {line}: expected [{code}] x{expected[line, code]}, "
        f"{checker} reported it x{seen[line, code]}"
        for line, code in missing
    ]
    for finding in mine:
        if (finding.line, finding.code) in unexpected:
            lines.append(
                f"  line {finding.line}: unexpected [{finding.code}] {finding.message.splitlines()[0]}"
            )
    pytest.fail("\n".join(lines), pytrace=False)


@pytest.mark.parametrize("path", PASS_FILES + FAIL_FILES, ids=_case_id)
def test_mypy_findings_match_the_expected_ones(path: Path, mypy_findings: list[Finding]) -> None:
    _compare(path, "E", mypy_findings, "mypy")


@pytest.mark.parametrize("path", PASS_FILES + FAIL_FILES, ids=_case_id)
def test_pyright_findings_match_the_expected_ones(
    path: Path, pyright_findings: list[Finding]
) -> None:
    _compare(path, "P", pyright_findings, "pyright")


def test_the_example_catalogue_type_checks(mypy_findings: list[Finding]) -> None:
    cases = {path.relative_to(REPO).as_posix() for path in PASS_FILES + FAIL_FILES}
    outside = [finding for finding in mypy_findings if finding.file not in cases]
    assert outside == []


def test_case_files_are_well_formed() -> None:
    # mypy names a file outside a package by its stem, so stems must not repeat.
    stems = Counter(path.stem for path in PASS_FILES + FAIL_FILES)
    assert [stem for stem, count in stems.items() if count > 1] == []
    assert PASS_FILES
    assert FAIL_FILES
    for path in PASS_FILES:
        assert _expected(path, "E") == Counter(), f"{path.name} is a pass case with expectations"
        assert _expected(path, "P") == Counter(), f"{path.name} is a pass case with expectations"
    for path in FAIL_FILES:
        assert _expected(path, "E"), f"{path.name} expects no mypy error"
