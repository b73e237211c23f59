"""The static half of the check: a generated module that mypy and pyright judge.

For each class the module holds three lines, an import, a function taking an instance
of the class and its ``return`` annotated with the Protocol, so the checkers compare the
class with the Protocol exactly as they would in the user's code::

    import pkg.mod as target_module_0
    def conforms_0(candidate: target_module_0.MyState) -> ModelState:
        return candidate

A Protocol generic in the batch class (``VllmModelState``) is parametrised with the
class the state's methods take, imported on a line of its own, so every method is
compared with one that takes that class (``Any`` when the command could not tell it)::

    import vllm.v1.worker.gpu.model_states.default as target_module_1
    import vllm.v1.worker.gpu.input_batch as batch_module_1
    def conforms_1(candidate: target_module_1.DefaultModelState) -> VllmModelState[batch_module_1.InputBatch]:
        return candidate

Every finding on those lines belongs to that class. The checkers run in the directory
the command was started from, so they read the user's own configuration (``pyproject.toml``,
``mypy.ini``, ``pyrightconfig.json``), and that directory is put on their import path.
``--disallow-any-unimported`` makes mypy say so when a class degrades to ``Any`` (an
untyped or unresolvable import), rather than accept it silently.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rtmm_protocol.typecheck.targets import Target

__all__ = [
    "CheckModule",
    "CheckerFinding",
    "CheckerRun",
    "find_pyright",
    "run_mypy",
    "run_pyright",
    "write_check_module",
]

_CHECK_MODULE_NAME = "rtmm_protocol_conformance_check.py"
_INT_ARRAY = "ndarray[tuple[Any, ...], dtype[integer[Any]]]"


@dataclass(frozen=True)
class CheckerFinding:
    """One error of one checker on one class: its first line and the plain-words details."""

    checker: str
    summary: str
    details: tuple[str, ...] = ()


@dataclass
class CheckerRun:
    """What one checker said: findings per target index, and whether it ran at all."""

    checker: str
    findings: dict[int, list[CheckerFinding]] = field(default_factory=dict)
    failure: str | None = None


@dataclass(frozen=True)
class CheckModule:
    """The generated module and which target each of its lines belongs to (-1: all)."""

    path: Path
    owners: dict[int, int]

    def owner(self, line: int) -> int:
        """The index of the target that line ``line`` (1-based) checks; -1 for shared lines."""
        return self.owners.get(line, -1)


def write_check_module(targets: Sequence[Target], directory: Path) -> CheckModule:
    """Write the module asserting that each target satisfies its Protocol."""
    lines = [
        '"""Written by python -m rtmm_protocol typecheck: does each class fit its Protocol?"""',
        "",
        f"from rtmm_protocol import {', '.join(sorted({t.protocol for t in targets}))}",
    ]
    owners: dict[int, int] = {}
    for index, target in enumerate(targets):
        alias = f"target_module_{index}"
        imports = [f"import {target.module} as {alias}"]
        protocol = target.protocol
        if target.generic:
            if target.batch is None:
                imports.append("from typing import Any")
                protocol = f"{target.protocol}[Any]"
            else:
                imports.append(f"import {target.batch[0]} as batch_module_{index}")
                protocol = f"{target.protocol}[batch_module_{index}.{target.batch[1]}]"
        lines += [
            "",
            *imports,
            f"def conforms_{index}(candidate: {alias}.{target.qualname}) -> {protocol}:",
            "    return candidate",
        ]
        for offset in range(2 + len(imports)):
            owners[len(lines) - offset] = index
    path = directory / _CHECK_MODULE_NAME
    path.write_text("\n".join(lines) + "\n")
    return CheckModule(path, owners)


def _with_path(variable: str, directory: Path) -> dict[str, str]:
    env = dict(os.environ)
    existing = env.get(variable)
    env[variable] = str(directory) if not existing else f"{directory}{os.pathsep}{existing}"
    return env


def _shorten(text: str) -> str:
    return text.replace(_INT_ARRAY, "IntArray")


def _mypy_details(hint: str | None) -> tuple[str, ...]:
    """Turn mypy's notes on a Protocol mismatch into one line per member."""
    lines = [line.strip() for line in (hint or "").splitlines()]
    details: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if line == "Expected:" and index + 3 < len(lines) and lines[index + 2] == "Got:":
            expected, got = lines[index + 1], lines[index + 3]
            name = re.match(r"def (?:\[[^]]*\] )?(\w+)", expected)
            member = name.group(1) if name else "method"
            details.append(f"{member}: expected {_shorten(expected)}; found {_shorten(got)}")
            index += 4
            continue
        if "is missing following" in line and index + 1 < len(lines):
            details.append(f"missing members: {lines[index + 1]}")
            index += 2
            continue
        if line and not line.startswith("Following member(s)"):
            details.append(_shorten(line))
        index += 1
    return tuple(details)


def run_mypy(module: CheckModule, cwd: Path, cache_dir: Path) -> CheckerRun:
    """Run mypy on the check module with the configuration found from ``cwd``.

    ``cache_dir`` is the command's own mypy cache (:mod:`rtmm_protocol.typecheck.cache`),
    kept apart from the project's so that neither invalidates the other.
    """
    run = CheckerRun("mypy")
    command = [
        sys.executable,
        "-m",
        "mypy",
        "--cache-dir",
        str(cache_dir),
        "--output",
        "json",
        "--follow-imports",
        "silent",
        "--disallow-any-unimported",
        str(module.path),
    ]
    done = subprocess.run(
        command, cwd=cwd, env=_with_path("MYPYPATH", cwd), capture_output=True, text=True
    )
    records = []
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    if done.returncode not in (0, 1) or (done.returncode == 1 and not records):
        run.failure = f"mypy exited with {done.returncode}: {(done.stderr or done.stdout).strip()}"
        return run
    for record in records:
        if record["severity"] != "error" or Path(record["file"]).name != module.path.name:
            continue
        code = f" [{record['code']}]" if record.get("code") else ""
        finding = CheckerFinding(
            "mypy", _shorten(record["message"]) + code, _mypy_details(record.get("hint"))
        )
        run.findings.setdefault(module.owner(record["line"]), []).append(finding)
    return run


def find_pyright() -> str | None:
    """The pyright executable beside this interpreter, else on PATH; None if absent."""
    beside = shutil.which("pyright", path=str(Path(sys.executable).parent))
    return beside or shutil.which("pyright")


def run_pyright(module: CheckModule, cwd: Path, executable: str) -> CheckerRun:
    """Run pyright on the check module with the configuration found from ``cwd``."""
    run = CheckerRun("pyright")
    command = [executable, "--outputjson", "--pythonpath", sys.executable, str(module.path)]
    # pyright takes its import path from the interpreter, which honours PYTHONPATH.
    done = subprocess.run(
        command, cwd=cwd, env=_with_path("PYTHONPATH", cwd), capture_output=True, text=True
    )
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        report = None
    if done.returncode not in (0, 1) or not isinstance(report, dict):
        run.failure = (
            f"pyright exited with {done.returncode}: {(done.stderr or done.stdout).strip()[:2000]}"
        )
        return run
    for item in report.get("generalDiagnostics", []):
        if item.get("severity") != "error":
            continue
        message = str(item.get("message", "")).replace("\xa0", " ").splitlines()
        rule = f" [{item['rule']}]" if item.get("rule") else ""
        details = tuple(
            line.strip()
            for line in message[1:]
            if line.strip() and "is incompatible with protocol" not in line
        )
        finding = CheckerFinding("pyright", (message[0] if message else "") + rule, details)
        line = int(item["range"]["start"]["line"]) + 1
        run.findings.setdefault(module.owner(line), []).append(finding)
    return run
