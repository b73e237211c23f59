"""The console outputs the docs pages show, cut from real runs of the suite.

A page that shows what a ``pytest --conformance=...`` run prints does not type it: it
includes a file of ``docs/_gen/outputs/`` (``--8<-- "docs/_gen/outputs/NAME.txt"`` inside
the code block), which this script writes. Each :class:`ShownRun` says which command the
page shows, which page's ``# file:`` blocks hold the modules it imports, and which lines
of its output the page keeps (:class:`Keep` a line, :class:`Span` a block of lines); the
lines left out between them become ``...``. So a check added to the suite changes the
counts here, by rerunning this script, and nowhere in the pages.

    python docs/_gen/console_outputs.py            # rerun every command, rewrite the files
    python docs/_gen/console_outputs.py tutorial   # those whose name holds "tutorial"
    python docs/_gen/console_outputs.py --check    # exit 1 where a file is out of date

``tests/test_docs_numbers.py`` reruns each command and compares it with its file. The
``versions:`` line of the run's header names the machine's torch, Hypothesis and Python,
so it is the one line not compared.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "OUTPUTS",
    "ENGINE_RUNS",
    "SHOWN_RUNS",
    "Keep",
    "ShownRun",
    "Span",
    "comparable",
    "excerpt",
    "page_files",
    "run",
    "vllm_installed",
]

REPO = Path(__file__).resolve().parents[2]
OUTPUTS = Path(__file__).resolve().parent / "outputs"
_FILE_BLOCK = re.compile(
    r"^```python\n(?P<code># file: (?P<name>[\w./-]+\.py)\n.*?)^```$", re.M | re.S
)
#: The vLLM release the outputs of vLLM's classes come from.
VLLM_RELEASE = "0.33.0"
#: The header's line of the machine's versions, the one line a rerun may change.
_VERSIONS = re.compile(r"^  versions: ")


@dataclass(frozen=True)
class Keep:
    """Keep every line that matches ``pattern`` (a regular expression, searched)."""

    pattern: str


@dataclass(frozen=True)
class Span:
    """Keep the lines from the first that matches ``start`` up to, not including, the next
    that matches ``stop`` (or the end)."""

    start: str
    stop: str


@dataclass(frozen=True)
class ShownRun:
    """A run a page shows: its ``name`` (the file ``outputs/NAME.txt``), the ``page`` whose
    ``# file:`` blocks hold its modules, the ``command`` (a ``pytest`` command line, as the
    page's block title shows it; ``VENV/bin/python -m pytest ...`` is run with this
    script's Python) and which of its lines the page keeps, in order. ``folder`` (relative
    to the repository) is where it runs instead of a fresh folder holding the page's
    modules; ``needs_vllm``: it checks one of vLLM's classes (run this script with the
    Python of an environment that has vLLM 0.33.0)."""

    name: str
    page: str
    command: str
    keep: tuple[Keep | Span, ...]
    folder: str | None = None
    needs_vllm: bool = False


_SUMMARY = Keep(r"^contract: \d+ passed")
_ITEMS = Keep(r"^\d+ pytest items = ")
_HEADER = Span(r"^rtmm-protocol conformance suite$", r"^(?!  )")
_TABLE_TOP = Span(r"^=+ rtmm-protocol conformance =+$", r"^(?!clause)")
_ROWS = Span(r"^\S+\s+(contract|robustness)\s", r"^$")
_CAUSES = Span(r"^\d+ failed checks?, \d+ causes?:$", r"^\d+ pytest items = ")


def _row(check: str) -> Keep:
    """The table row of one check."""
    return Keep(rf"^\S+\s+\S+\s+\S+\s+{re.escape(check)}\s")


def _failure(label: str) -> Span:
    """A failure's section, from its ``____ LABEL ____`` line to the next section."""
    return Span(rf"^_+ {re.escape(label)} _+$", r"^(_{5,} \S| ?={5,})")


SHOWN_RUNS: tuple[ShownRun, ...] = (
    ShownRun("spec-reference", "docs/specification.md", "pytest --conformance", (_SUMMARY,)),
    ShownRun(
        "tutorial-first-run",
        "docs/tutorial.md",
        "pytest --conformance=my_engine_factory:make_state",
        (
            _HEADER,
            _TABLE_TOP,
            _row("T1-factory-builds"),
            _row("G5-rows-match-mask"),
            _row("D4-dummy-no-allocation"),
            _row("M1-hooks-hand-model-inputs"),
            _row("R4-cuda-graph-replay-matches-eager"),
            _row("E3-no-silent-truncation"),
            _ITEMS,
            _SUMMARY,
        ),
    ),
    ShownRun(
        "tutorial-early-exit",
        "docs/tutorial.md",
        "pytest --conformance=early_exit_state:make_state",
        (_failure("G3-realtime-decode-gathers[realtime]"), _SUMMARY),
    ),
    ShownRun(
        "tutorial-known-gaps",
        "docs/tutorial.md",
        "pytest --conformance=early_exit_state:make_state --conformance-xfail=known-gaps.txt",
        (_row("G3-realtime-decode-gathers"), Keep(r"^stale expected failure: "), _SUMMARY),
    ),
    ShownRun(
        "write-your-own",
        "docs/write-your-own.md",
        "pytest --conformance=from_scratch_state.factory:make_state",
        (_SUMMARY,),
    ),
    ShownRun(
        "report-crash",
        "docs/report.md",
        "pytest --conformance=targets:make_crashing -k 'G1- or D5-' --conformance-examples=0",
        (_TABLE_TOP, _ROWS, _CAUSES, _ITEMS, _SUMMARY),
    ),
)


_ENGINES = "docs/engines.md"
_STATES = "vllm.v1.worker.gpu.model_states"
_TARGET = Keep(r"^  target: ")
_NOTES = Keep(r"^clauses not applicable to ")
_SKIPPED = Keep(r"^\S+\s+\S+\s+\S+\s+\S+\s+skipped\s")

#: The runs of vLLM's classes the Engines page shows (run from the repository's root,
#: where the tests' folder is on the path, or from the example's folder).
ENGINE_RUNS: tuple[ShownRun, ...] = (
    ShownRun(
        "engines-copying-dummy",
        _ENGINES,
        "pytest --conformance=vllm:vllm_gallery:CopyingDummyState",
        (
            _TABLE_TOP,
            *(
                _row(check)
                for check in (
                    "T3-realtime-guard-semantics",
                    "G8-stateful-life-matches-oracle",
                    "C1-changes-accepted",
                    "C2-changes-never-stale",
                    "D2-dummy-views-share-storage",
                    "D2-real-path-shares-storage",
                    "E3-no-silent-truncation",
                )
            ),
            _CAUSES,
            _ITEMS,
            _SUMMARY,
        ),
        folder=".",
        needs_vllm=True,
    ),
    ShownRun(
        "engines-known-gaps",
        _ENGINES,
        ".ci/vllm-venv/bin/python -m pytest "
        f"--conformance=vllm:{_STATES}.default:DefaultModelState "
        "--conformance-xfail=examples/vllm_model_state/known-gaps-vllm-0.33.0.txt "
        "--conformance-strict",
        (_SUMMARY,),
        folder=".",
        needs_vllm=True,
    ),
    ShownRun(
        "engines-encoder-decoder",
        _ENGINES,
        f"pytest --conformance=vllm:{_STATES}.encoder_decoder:EncoderDecoderModelState",
        (
            _TARGET,
            Keep(r"^  clauses: "),
            _row("M2-no-inputs-embeds"),
            _row("M2-encoder-outputs-reach-model"),
            _row("R1-encodes-scheduled-items"),
            _NOTES,
            _ITEMS,
            _SUMMARY,
        ),
        folder=".",
        needs_vllm=True,
    ),
    ShownRun(
        "engines-deepseek",
        _ENGINES,
        "pytest --conformance=vllm:vllm.models.deepseek_v41.nvidia.model_state:DeepseekV41ModelState",
        (
            _TARGET,
            _row("G5-rows-match-mask"),
            _row("D2-real-path-shares-storage"),
            _row("R4-cuda-graph-replay-matches-eager"),
            _SUMMARY,
        ),
        folder=".",
        needs_vllm=True,
    ),
    ShownRun(
        "engines-own-state-unconfigured",
        _ENGINES,
        "pytest --conformance=vllm:replay_state:ReplayWindowState",
        (_failure("T1-factory-builds[realtime]"), _SUMMARY),
        folder="examples/vllm_own_state",
        needs_vllm=True,
    ),
    ShownRun(
        "engines-own-state",
        _ENGINES,
        "pytest --conformance=vllm:replay_state:ReplayWindowState "
        "--conformance-model-config=checkpoint/config.json",
        (_TARGET, _row("D2-real-path-shares-storage"), _SUMMARY),
        folder="examples/vllm_own_state",
        needs_vllm=True,
    ),
)

SHOWN_RUNS = (*SHOWN_RUNS, *ENGINE_RUNS)


def page_files(page: Path) -> dict[str, str]:
    """The page's ``# file: NAME.py`` blocks: file name -> code."""
    text = page.read_text(encoding="utf-8")
    return {m.group("name"): m.group("code") for m in _FILE_BLOCK.finditer(text)}


def _write_files(page: Path, directory: Path) -> None:
    for name, code in page_files(page).items():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(code, encoding="utf-8")


def _known_gaps(page: Path, directory: Path) -> None:
    """The page's ``known-gaps.txt`` block, where the command names that file."""
    text = page.read_text(encoding="utf-8")
    found = re.search(r'^```text title="known-gaps\.txt"\n(?P<code>.*?)^```$', text, re.M | re.S)
    if found is not None:
        (directory / "known-gaps.txt").write_text(found.group("code"), encoding="utf-8")


def _pytest_arguments(shown: ShownRun) -> list[str]:
    """The arguments after ``pytest`` (or ``PYTHON -m pytest``) in the command."""
    argv = shlex.split(shown.command)
    if argv[0] == "pytest":
        return argv[1:]
    if argv[0].endswith("python") and argv[1:3] == ["-m", "pytest"]:
        return argv[3:]
    raise ValueError(f"{shown.name}: only pytest commands are run, got {shown.command!r}")


def run(shown: ShownRun) -> str:
    """What the command prints, run in ``shown.folder`` or in a fresh folder holding the
    page's modules (and its ``known-gaps.txt``)."""
    arguments = _pytest_arguments(shown)
    with tempfile.TemporaryDirectory() as fresh:
        if shown.folder is not None:
            directory = REPO / shown.folder
        else:
            directory = Path(fresh)
            _write_files(REPO / shown.page, directory)
            _known_gaps(REPO / shown.page, directory)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(directory), *_pythonpath()])}
        env.pop("PYTEST_ADDOPTS", None)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *arguments],
            cwd=directory,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    return done.stdout


def _pythonpath() -> list[str]:
    inherited = os.environ.get("PYTHONPATH", "")
    return [part for part in inherited.split(os.pathsep) if part]


def _kept(lines: Sequence[str], keep: Sequence[Keep | Span]) -> Iterator[int]:
    """The indices of the lines ``keep`` selects."""
    for rule in keep:
        if isinstance(rule, Keep):
            yield from (i for i, line in enumerate(lines) if re.search(rule.pattern, line))
            continue
        starts = [i for i, line in enumerate(lines) if re.search(rule.start, line)]
        if not starts:
            continue
        first = starts[0]
        end = next(
            (i for i in range(first + 1, len(lines)) if re.search(rule.stop, lines[i])),
            len(lines),
        )
        yield from range(first, end)


def excerpt(output: str, keep: Sequence[Keep | Span]) -> str:
    """The lines of ``output`` that ``keep`` selects, in their order, with ``...`` where
    lines were left out between them (an empty line where only empty lines were)."""
    lines = output.splitlines()
    chosen = sorted(set(_kept(lines, keep)))
    shown: list[str] = []
    for position, index in enumerate(chosen):
        previous = chosen[position - 1] if position else index - 1
        if index != previous + 1:
            gap = lines[previous + 1 : index]
            shown.append("" if not any(line.strip() for line in gap) else "...")
        shown.append(lines[index])
    return "\n".join(shown) + "\n"


def vllm_installed() -> bool:
    """Whether the release of the vLLM outputs (0.33.0) is installed here."""
    try:
        return importlib.metadata.version("vllm") == VLLM_RELEASE
    except importlib.metadata.PackageNotFoundError:
        return False


def comparable(text: str) -> str:
    """``text`` without the line of the machine's versions."""
    return "\n".join(line for line in text.splitlines() if not _VERSIONS.match(line))


def main(argv: Sequence[str] | None = None) -> int:
    """Rerun the commands (all, or those whose name holds a given text) and write, or
    check, their outputs."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME")
    parser.add_argument("--check", action="store_true", help="exit 1 where a file is stale")
    args = parser.parse_args(argv)
    chosen = [s for s in SHOWN_RUNS if not args.names or any(n in s.name for n in args.names)]
    if any(s.needs_vllm for s in chosen) and not vllm_installed():
        print("vLLM is not installed: the outputs of vLLM's classes are left as they are")
        chosen = [s for s in chosen if not s.needs_vllm]
    stale = []
    for shown in chosen:
        path = OUTPUTS / f"{shown.name}.txt"
        print(f"{shown.command}  ->  {path.relative_to(REPO)}", flush=True)
        text = excerpt(run(shown), shown.keep)
        if args.check:
            if not path.is_file() or comparable(path.read_text("utf-8")) != comparable(text):
                stale.append(shown.name)
            continue
        OUTPUTS.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    if stale:
        print(f"out of date: {', '.join(stale)}; run python docs/_gen/console_outputs.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
