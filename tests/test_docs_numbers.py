"""The numbers the docs show come from the code as it is: each is rerun or checked here.

- Every conformance summary line (``contract: 34 passed, ...``) that a page shows in
  a code block is either the output of the Python example just above it (which
  ``tests/test_docs.py`` runs and compares) or listed in :data:`SHOWN_RUNS` with the
  run that produces it; that run is made here, through the suite's public API
  (:func:`~rtmm_conformance.check_model_state`), and its
  ``summary_line()`` must be the line the page shows. A check added to the suite
  changes the counts, and this test then names every page to update.
- The ``python -m rtmm_protocol typecheck`` outputs of the typing guide are rerun and
  compared line for line.
- Every timing a page quotes sits in a section that names the machine it was measured
  on, and the tutorial's table of ``pytest -n`` timings agrees with its advice and was
  measured on the suite as it is now (``tests/measure_docs_timings.py`` measures it).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from docs_pages import DOCS, REPO, CodeBlock, code_blocks

from rtmm_conformance import ConformanceReport, check_model_state
from rtmm_protocol.typecheck import main as typecheck_main
from rtmm_protocol.typecheck.cache import CACHE_DIR_ENV_VAR
from rtmm_protocol.typecheck.static import find_pyright

#: The pages whose numbers this file keeps honest: the README and the site's pages, but
#: for the engines and performance pages, whose numbers come from the committed engine
#: reports and benchmark results (tests/test_engine_reports.py and the benchmark hook keep
#: those), the reference implementation guide, which points to the performance page for
#: its figures, and the changelog, which records what each version said at the time.
OTHER_PAGES = {"engines.md", "performance.md", "reference-implementation.md", "changelog.md"}
PAGES = [
    REPO / "README.md",
    *sorted(
        page
        for page in DOCS.rglob("*.md")
        if not page.relative_to(DOCS).parts[0].startswith("_")
        and str(page.relative_to(DOCS)) not in OTHER_PAGES
    ),
]
SUMMARY_LINE = re.compile(r"contract: \d+ passed[^\n]*")
ITEMS_LINE = re.compile(r"^(?P<items>\d+) pytest items = (?P<checks>\d+) checks", re.M)


@dataclass(frozen=True)
class ShownRun:
    """A code block of a page that shows a conformance run, and how to make that run.

    ``page`` is relative to the repository, ``title`` is the block's title (what the
    reader sees above it, the command where there is one). The factory and its modules
    come from the page's own ``# file:`` blocks; ``xfail_block`` names the page's block
    that holds the expected-failures file, written out under its title.
    """

    page: str
    title: str
    factory: str
    checks: tuple[str, ...] | None = None
    examples: int | None = None
    xfail_block: str | None = None

    @property
    def id(self) -> str:
        return f"{self.page}: {self.title}"


SHOWN_RUNS = (
    ShownRun(
        "docs/specification.md",
        "pytest --conformance",
        "rtmm_conformance:reference_model_state",
    ),
    ShownRun(
        "docs/tutorial.md",
        "pytest --conformance=my_engine_factory:make_state",
        "my_engine_factory:make_state",
    ),
    ShownRun(
        "docs/tutorial.md",
        "pytest --conformance=early_exit_state:make_state",
        "early_exit_state:make_state",
    ),
    ShownRun(
        "docs/tutorial.md",
        "pytest --conformance=early_exit_state:make_state --conformance-xfail=known-gaps.txt",
        "early_exit_state:make_state",
        xfail_block="known-gaps.txt",
    ),
    ShownRun(
        "docs/tutorial.md",
        "python tests/measure_docs_timings.py xdist --rounds 3",
        "rtmm_conformance:reference_model_state",
    ),
    ShownRun(
        "docs/write-your-own.md",
        "pytest --conformance=from_scratch_state.factory:make_state",
        "from_scratch_state.factory:make_state",
    ),
    ShownRun(
        "docs/report.md",
        "pytest --conformance=targets:make_crashing -k 'G1 or D5' --conformance-examples=0",
        "targets:make_crashing",
        # -k G1 selects the checks of G10 too
        checks=("G1", "G10", "D5"),
        examples=0,
    ),
)


def _block(page: Path, title: str) -> CodeBlock:
    found = [block for block in code_blocks(page) if block.title == title]
    assert len(found) == 1, f"{page.relative_to(REPO)} has {len(found)} blocks titled {title!r}"
    return found[0]


@contextlib.contextmanager
def _page_files(page: Path, directory: Path) -> Iterator[None]:
    """Write the page's ``# file:`` blocks to ``directory`` and import from there."""
    for block in code_blocks(page):
        if block.file_name is not None:
            target = directory / block.file_name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code + "\n", "utf-8")
    sys.path.insert(0, str(directory))
    try:
        yield
    finally:
        sys.path.remove(str(directory))
        for name, module in list(sys.modules.items()):
            if (getattr(module, "__file__", None) or "").startswith(str(directory)):
                del sys.modules[name]


def _run(shown: ShownRun, directory: Path) -> ConformanceReport:
    page = REPO / shown.page
    options: dict[str, Any] = {}
    if shown.checks is not None:
        options["checks"] = list(shown.checks)
    if shown.examples is not None:
        options["examples"] = shown.examples
    with _page_files(page, directory):
        if shown.xfail_block is not None:
            xfail = directory / shown.xfail_block
            xfail.write_text(_block(page, shown.xfail_block).code + "\n", "utf-8")
            options["xfail"] = xfail
        return check_model_state(shown.factory, **options)


@pytest.mark.parametrize(
    "shown",
    [
        # A whole run of the suite takes a while: marked slow (CI runs slow tests too).
        pytest.param(shown, id=shown.id, marks=[pytest.mark.slow] if shown.checks is None else [])
        for shown in SHOWN_RUNS
    ],
)
def test_shown_summary_line_is_a_real_runs(shown: ShownRun, tmp_path: Path) -> None:
    """The summary line a page shows is the one its run prints today."""
    block = _block(REPO / shown.page, shown.title)
    lines = SUMMARY_LINE.findall(block.code)
    assert len(lines) == 1, f"{shown.id}: shows {len(lines)} summary lines"
    report = _run(shown, tmp_path)
    assert lines[0] == report.summary_line(), (
        f"{shown.page} (block {shown.title!r}) shows\n  {lines[0]}\nbut the run gives\n"
        f"  {report.summary_line()}\nupdate the page from a real run"
    )
    items = ITEMS_LINE.search(block.code)
    if items is not None:
        # The JSON report's layout is a documented interface (its schema ships with the
        # suite): its checks and its item count are what this line relates.
        data = report.to_json()
        summary, checks = data["summary"], data["checks"]
        assert isinstance(summary, dict)
        assert isinstance(checks, list)
        shown_counts = (int(items.group("items")), int(items.group("checks")))
        assert shown_counts == (summary["items"], len(checks)), shown.id


def test_every_summary_line_shown_is_checked() -> None:
    """No page shows a summary line that neither this file nor the examples' test reruns."""
    registered = {(shown.page, shown.title) for shown in SHOWN_RUNS}
    unchecked = []
    found = 0
    for page in PAGES:
        blocks = code_blocks(page)
        for position, block in enumerate(blocks):
            if not SUMMARY_LINE.search(block.code):
                continue
            found += 1
            page_name = str(page.relative_to(REPO))
            # tests/test_docs.py runs the site's Python examples and compares their output.
            after_example = (
                block.is_output
                and page.is_relative_to(DOCS)
                and position > 0
                and blocks[position - 1].language == "python"
                and blocks[position - 1].skip_reason is None
            )
            if not after_example and (page_name, block.title) not in registered:
                unchecked.append(f"{page_name}:{block.line} ({block.title!r})")
    assert found >= len(SHOWN_RUNS)
    assert unchecked == [], "summary lines no test reruns; add them to SHOWN_RUNS"


def test_every_registered_block_exists() -> None:
    """Renaming a block's title (its command) must come with updating its run here."""
    for shown in SHOWN_RUNS:
        _block(REPO / shown.page, shown.title)


# ------------------------------------------------------------------ typecheck outputs

TYPECHECK_PREFIX = "python -m rtmm_protocol typecheck "


def _typecheck_blocks() -> list[CodeBlock]:
    return [
        block
        for block in code_blocks(DOCS / "typing.md")
        if (block.title or "").startswith(TYPECHECK_PREFIX)
    ]


@pytest.mark.slow  # a mypy and a pyright run each
@pytest.mark.parametrize("block", _typecheck_blocks(), ids=lambda block: block.title)
def test_typecheck_output_is_a_real_runs(
    block: CodeBlock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each ``typecheck`` output of the typing guide is what the command prints today.

    Run from the repository's root (as the guide says for the bundled classes), or from
    a folder holding the page's ``# file:`` modules when the block checks one of them.
    """
    if find_pyright() is None:
        pytest.skip('the guide shows pyright\'s verdict: needs pyright (the "typecheck" extra)')
    argv = (block.title or "").removeprefix(TYPECHECK_PREFIX).split()
    page_modules = {
        Path(b.file_name).with_suffix("").as_posix().replace("/", ".")
        for b in code_blocks(DOCS / "typing.md")
        if b.file_name is not None
    }
    own = any(arg.split(":", 1)[0] in page_modules for arg in argv)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    monkeypatch.setenv(CACHE_DIR_ENV_VAR, str(REPO / ".mypy_cache" / f"typecheck-cli-{worker}"))
    out = io.StringIO()
    with contextlib.ExitStack() as stack:
        if own:
            stack.enter_context(_page_files(DOCS / "typing.md", tmp_path))
            monkeypatch.chdir(tmp_path)
        else:
            monkeypatch.chdir(REPO)
        stack.enter_context(contextlib.redirect_stdout(out))
        typecheck_main(argv)
    assert out.getvalue().rstrip("\n") == block.code.rstrip("\n"), (
        f"docs/typing.md:{block.line}: the output differs from the command's:\n{out.getvalue()}"
    )


def test_the_typing_guide_shows_typecheck_outputs() -> None:
    """The guide shows a passing and a failing verdict; both are rerun above."""
    titles = [block.title or "" for block in _typecheck_blocks()]
    assert len(titles) == 2, titles


# ------------------------------------------------------------------------------ timings

#: A wall-clock time in prose, a table or a code block: "36.2 s", "22.56s", "ten seconds".
TIMING = re.compile(
    r"\b\d+(?:\.\d+)?\s(?:s|ms|µs|sec|seconds?|minutes?|min)\b"
    r"|\b\d+\.\d+(?:s|ms)\b"
    r"|\b(?:a few|a fraction of a|tens of|one|two|three|four|five|six|seven|eight|nine|ten"
    r"|twenty|thirty) (?:seconds?|minutes?)\b"
)
#: The line ``tests/measure_docs_timings.py`` prints first, naming the machine.
MACHINE = re.compile(r"^machine: \d+ CPU cores, .+$", re.M)
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_HEADING = re.compile(r"^#{1,6} ")


def _sections(page: Path) -> list[tuple[str, str]]:
    """The page cut at its headings (those outside code blocks): (heading, text) pairs."""
    sections: list[tuple[str, list[str]]] = [("(top)", [])]
    fence: str | None = None
    for line in page.read_text("utf-8").splitlines():
        opening = _FENCE.match(line)
        if opening is not None and (fence is None or opening.group(1) == fence):
            fence = opening.group(1) if fence is None else None
        elif fence is None and _HEADING.match(line):
            sections.append((line.strip(), []))
        sections[-1][1].append(line)
    return [(heading, "\n".join(lines)) for heading, lines in sections]


def _prose_and_code(text: str) -> tuple[list[str], list[str]]:
    """The stripped lines of ``text`` outside fenced code blocks, and those inside."""
    prose: list[str] = []
    code: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        opening = _FENCE.match(line)
        if opening is not None and (fence is None or opening.group(1) == fence):
            fence = opening.group(1) if fence is None else None
            continue
        (prose if fence is None else code).append(line.strip())
    return prose, code


def test_timings_name_their_machine() -> None:
    """Every time a page quotes sits in a section that names the machine it was measured on.

    A time limit (a timeout) is a setting, not a measurement: a sentence or line that
    names one does not count.
    """
    unlabelled = []
    for page in PAGES:
        for heading, text in _sections(page):
            prose, code = _prose_and_code(text)
            # Prose as one text, so that a phrase broken over two lines is found too, cut
            # into sentences; code line by line.
            pieces = [*re.split(r"(?<=[.!?])\s+", " ".join(prose)), *code]
            quoted = sorted(
                {
                    match.group(0)
                    for piece in pieces
                    if not re.search(r"timeout|time limit", piece, re.I)
                    for match in TIMING.finditer(piece)
                }
            )
            if quoted and MACHINE.search(text) is None:
                unlabelled.append(f"{page.relative_to(REPO)} ({heading}): {quoted}")
    assert unlabelled == [], (
        "timings without the machine they were measured on (paste the 'machine:' line "
        "tests/measure_docs_timings.py prints):\n" + "\n".join(unlabelled)
    )


XDIST_BLOCK = "python tests/measure_docs_timings.py xdist --rounds 3"


def _xdist_table() -> dict[str, float]:
    """The tutorial's ``pytest -n`` timings: run label -> median seconds."""
    text = (DOCS / "tutorial.md").read_text("utf-8")
    block = _block(DOCS / "tutorial.md", XDIST_BLOCK)
    after = text.split(block.code, 1)[1]
    rows = re.findall(r"^\| (?P<run>[^|]+?) \| (?P<median>[\d.]+) s \|", after, re.M)
    table: dict[str, float] = {}
    for run, median in rows:
        if run in table:
            break  # a later table
        table[run] = float(median)
    return table


def test_xdist_timings_are_of_this_suite_and_this_machine() -> None:
    """The table has a row for each run the script measures, under a machine label."""
    import measure_docs_timings as timings

    block = _block(DOCS / "tutorial.md", XDIST_BLOCK)
    assert MACHINE.search(block.code), "the timings do not name their machine"
    expected = [
        f"{label}, {setting}"
        for setting, _ in timings.XDIST_SETTINGS
        for label, _ in timings.XDIST_VARIANTS
    ]
    assert sorted(_xdist_table()) == sorted(expected)
    # The suite measured is the suite as it is: SHOWN_RUNS reruns the block's summary line.
    assert any(shown.title == XDIST_BLOCK for shown in SHOWN_RUNS)


def test_commands_use_xdist_only_where_the_timings_say_it_pays() -> None:
    """While ``-n`` made the suite slower on the measured machine, no command shown suggests it."""
    table = _xdist_table()
    serial = table["serial, default examples"]
    pays = any(
        seconds < serial
        for run, seconds in table.items()
        if run.endswith(", default examples") and not run.startswith("serial")
    )
    if pays:
        pytest.skip("the measured table says -n pays: commands may use it")
    suggesting = [
        f"{page.relative_to(REPO)}:{block.line}: {line.strip()}"
        for page in PAGES
        for block in code_blocks(page)
        if block.language in {"bash", "sh", "yaml", "yml"}
        for line in block.code.splitlines()
        # `time pytest ... -n 4` measures, it does not recommend
        if "--conformance" in line
        and re.search(r"(^|\s)-n\s*(auto|\d+)", line)
        and not line.strip().startswith("time ")
    ]
    assert suggesting == [], "commands that suggest -n although it was slower:\n" + "\n".join(
        suggesting
    )
