"""``python -m rtmm_protocol typecheck``: argument parsing, the combined verdict, the report."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from rtmm_protocol.signatures import SignatureProblem
from rtmm_protocol.typecheck.cache import typecheck_cache_dir
from rtmm_protocol.typecheck.static import (
    CheckerFinding,
    CheckerRun,
    find_pyright,
    run_mypy,
    run_pyright,
    write_check_module,
)
from rtmm_protocol.typecheck.targets import PROTOCOL_NAMES, Target, UsageError, load_target

__all__ = ["TYPECHECK_EXTRA", "main"]

#: The package extra that installs both type checkers.
TYPECHECK_EXTRA = "typecheck"

_DESCRIPTION = """\
Check that classes satisfy the rtmm-protocol Protocols (ModelState or MMEmbeddingGatherer).

Each class is checked three ways: the run-time signature check (parameter names, kinds and
defaults, the same check the conformance suite runs), mypy, and pyright when it is
installed. Both type checkers read the configuration of the current directory. A class
conforms only when all of them agree. Both come with the typecheck extra:
pip install "rtmm-protocol[typecheck]".

mypy's cache for these runs is kept apart from the project's .mypy_cache (so plain mypy
runs stay fast): in $RTMM_TYPECHECK_CACHE_DIR, else under the user's cache directory.

exit status: 0 all classes conform, 1 some do not (or a checker could not run),
2 usage error."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m rtmm_protocol typecheck",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("targets", nargs="+", metavar="MODULE:CLASS", help="the classes to check")
    parser.add_argument(
        "--protocol",
        choices=PROTOCOL_NAMES,
        help="check every class against this Protocol (default: judged from each class's methods)",
    )
    parser.add_argument(
        "--no-pyright", action="store_true", help="do not run pyright even when it is installed"
    )
    return parser


def main(argv: Sequence[str]) -> int:
    """Run the command on ``argv`` (the arguments after ``typecheck``); return the exit status."""
    try:
        try:
            args = _parser().parse_args(list(argv))
        except SystemExit as done:  # --help
            return done.code if isinstance(done.code, int) else 0
        cwd = Path.cwd()
        targets = _load_targets(args.targets, args.protocol, cwd)
        if importlib.util.find_spec("mypy") is None:
            raise UsageError(
                f"mypy is not installed in {sys.executable}; install the typecheck extra: "
                f'pip install "rtmm-protocol[{TYPECHECK_EXTRA}]" (mypy and pyright)'
            )
    except UsageError as error:
        print(f"python -m rtmm_protocol typecheck: error: {error}", file=sys.stderr)
        print("run python -m rtmm_protocol typecheck --help for the usage", file=sys.stderr)
        return 2
    pyright = None if args.no_pyright else find_pyright()
    runs = _run_checkers(targets, cwd, pyright)
    if pyright is None:
        reason = (
            "--no-pyright"
            if args.no_pyright
            else f'not installed; pip install "rtmm-protocol[{TYPECHECK_EXTRA}]" adds it'
        )
        print(f"pyright: skipped ({reason})")
    return _report(targets, runs, sys.stdout)


def _load_targets(specs: Sequence[str], protocol: str | None, cwd: Path) -> list[Target]:
    """Import the classes with the invocation directory first on the import path."""
    sys.path.insert(0, str(cwd))
    try:
        return [load_target(spec, protocol) for spec in specs]
    finally:
        sys.path.remove(str(cwd))


def _run_checkers(targets: Sequence[Target], cwd: Path, pyright: str | None) -> list[CheckerRun]:
    with tempfile.TemporaryDirectory(prefix="rtmm-typecheck-") as directory:
        module = write_check_module(targets, Path(directory))
        runs = [run_mypy(module, cwd, typecheck_cache_dir(cwd))]
        if pyright is not None:
            runs.append(run_pyright(module, cwd, pyright))
    return runs


def _report(targets: Sequence[Target], runs: Sequence[CheckerRun], out: TextIO) -> int:
    failed_checkers = [run for run in runs if run.failure is not None]
    for run in failed_checkers:
        print(f"{run.checker} could not check the classes: {run.failure}", file=out)
    conforming = 0
    for index, target in enumerate(targets):
        problems = target.runtime_problems()
        findings = [
            finding
            for run in runs
            for finding in run.findings.get(index, []) + run.findings.get(-1, [])
        ]
        heading = f"{target.spec} ({target.protocol})"
        if not problems and not findings and not failed_checkers:
            checked = ", ".join(["run-time signature check", *(run.checker for run in runs)])
            print(f"{heading}: conforms ({checked})", file=out)
            conforming += 1
            continue
        print(f"{heading}: does not conform", file=out)
        _print_problems(problems, out)
        _print_findings(findings, out)
    total = len(targets)
    print(f"{conforming} of {total} class{'es' if total != 1 else ''} conform", file=out)
    return 0 if conforming == total and not failed_checkers else 1


def _print_problems(problems: Sequence[SignatureProblem], out: TextIO) -> None:
    if problems:
        print("  run-time signature check:", file=out)
    for problem in problems:
        print(f"    - {problem}", file=out)


def _print_findings(findings: Sequence[CheckerFinding], out: TextIO) -> None:
    for finding in findings:
        print(f"  {finding.checker}: {finding.summary}", file=out)
        for detail in finding.details:
            print(f"    - {detail}", file=out)
