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
Check that classes satisfy the rtmm-protocol Protocols (ModelState, MMEmbeddingGatherer,
or VllmModelState: the contract in vLLM's ModelRunner V2 spelling, picked for a class with
prepare_inputs_embeds and parametrised with the batch class its methods take, as in
VllmModelState[InputBatch]).

Each class's method signatures and attribute types are compared with the Protocol three
ways: the run-time signature check (parameter names, kinds and defaults, the same check the
conformance suite runs), and mypy and, when it is installed, pyright, both on a generated
module that assigns the class to the Protocol. Both type checkers read the configuration
of the current directory. A class matches only when all of them agree. Both come with the
typecheck extra: pip install "rtmm-protocol[typecheck]".

The rest of the class's module, its method bodies included, is not type-checked here: run
mypy --strict and pyright on your modules for that (the command prints the lines to run).

mypy's cache for these runs is kept apart from the project's .mypy_cache (so plain mypy
runs stay fast): in $RTMM_TYPECHECK_CACHE_DIR, else under the user's cache directory.

exit status: 0 all classes match, 1 some do not (or a checker could not run),
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
    """Print one verdict per class, what the verdicts cover, and what they leave out."""
    failed_checkers = [run for run in runs if run.failure is not None]
    for run in failed_checkers:
        print(f"{run.checker} could not check the classes: {run.failure}", file=out)
    checkers = " and ".join(run.checker for run in runs)
    scope = (
        "checked: its method signatures and attribute types, by the run-time signature "
        f"check and by {checkers} on a generated module"
    )
    matching = 0
    for index, target in enumerate(targets):
        problems = target.runtime_problems()
        findings = [
            finding
            for run in runs
            for finding in run.findings.get(index, []) + run.findings.get(-1, [])
        ]
        if not problems and not findings and not failed_checkers:
            print(f"{target.spec}: matches {target.label} ({scope})", file=out)
            matching += 1
        else:
            print(f"{target.spec}: does not match {target.label}", file=out)
            _print_problems(problems, out)
            _print_findings(findings, out)
        if target.generic and target.batch is None:
            print(
                "  note: no method of the class names its batch class in an annotation that "
                "resolves at run time, so its batch parameters were checked as Any",
                file=out,
            )
    total = len(targets)
    counted = "class matches its" if total == 1 else "classes match their"
    print(f"{matching} of {total} {counted} Protocol", file=out)
    _print_unchecked(targets, out)
    return 0 if matching == total and not failed_checkers else 1


def _print_unchecked(targets: Sequence[Target], out: TextIO) -> None:
    """Say that the classes' modules were not type-checked, and how to check them."""
    # The module that defines the class, which a re-exporting package is not.
    files = list(dict.fromkeys(_module_file(target.cls.__module__) for target in targets))
    print(
        "Not checked: the rest of each class's module, the bodies of its methods included "
        "(mypy and pyright report nothing from there in this run). Type-check the modules "
        "themselves, with your own configuration:",
        file=out,
    )
    print(f"  mypy --strict {' '.join(files)}", file=out)
    print(f"  pyright {' '.join(files)}", file=out)


def _module_file(module: str) -> str:
    """The module's source file, relative to the current directory when it lies under it."""
    origin = getattr(sys.modules.get(module), "__file__", None)
    if not origin:
        return f"-m {module}"
    path = Path(origin)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


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
