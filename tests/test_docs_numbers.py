"""The numbers the docs show come from the code as it is: each is rerun or checked here.

- The console outputs a page shows are not typed into it: the page includes a file of
  ``docs/_gen/outputs/``, which ``docs/_gen/console_outputs.py`` cuts from a real run.
  Each is rerun here and must be what the file holds. No page types a summary line
  (``contract: 34 passed, ...``) of its own, but below a Python example that
  ``tests/test_docs.py`` runs and compares, and the README, which quotes the
  reference's from its file.
- The ``python -m rtmm_protocol typecheck`` outputs of the typing guide are rerun and
  compared line for line.
- Every timing a page quotes sits in a section that names the machine it was measured
  on, and the tutorial's table of ``pytest -n`` timings names the suite it measured and
  agrees with its advice (``tests/measure_docs_timings.py`` measures it).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import console_outputs as outputs
import pytest
from console_outputs import ShownRun
from docs_pages import DOCS, REPO, CodeBlock, code_blocks

from rtmm_protocol.typecheck import main as typecheck_main
from rtmm_protocol.typecheck.cache import CACHE_DIR_ENV_VAR
from rtmm_protocol.typecheck.static import find_pyright

#: The pages whose numbers this file keeps honest: the README and the site's pages, but
#: for the performance page, whose numbers come from the committed benchmark results (the
#: benchmark hook keeps those), the reference implementation guide, which points to the performance page for
#: its figures, and the changelog, which records what each version said at the time.
OTHER_PAGES = {"performance.md", "reference-implementation.md", "changelog.md"}
PAGES = [
    REPO / "README.md",
    *sorted(
        page
        for page in DOCS.rglob("*.md")
        if not page.relative_to(DOCS).parts[0].startswith("_")
        and str(page.relative_to(DOCS)) not in OTHER_PAGES
    ),
]
SUMMARY_LINE = re.compile(r"contract: \d+ passed[^\n`]*")


def _include(name: str) -> str:
    return f'--8<-- "docs/_gen/outputs/{name}.txt"'


@pytest.mark.slow  # each a whole run of the suite, or most of one
@pytest.mark.parametrize("shown", outputs.SHOWN_RUNS, ids=lambda shown: shown.name)
def test_shown_console_output_is_a_real_runs(shown: ShownRun) -> None:
    """The file a page includes is what its command prints today (but the versions)."""
    if shown.needs_vllm and not outputs.vllm_installed():
        pytest.skip(f"a run of vLLM's classes: needs vLLM {outputs.VLLM_RELEASE} installed")
    committed = (outputs.OUTPUTS / f"{shown.name}.txt").read_text("utf-8")
    fresh = outputs.excerpt(outputs.run(shown), shown.keep)
    assert outputs.comparable(committed) == outputs.comparable(fresh), (
        f"docs/_gen/outputs/{shown.name}.txt is out of date: run "
        f"python docs/_gen/console_outputs.py {shown.name}\nthe run prints:\n{fresh}"
    )


@pytest.mark.parametrize("shown", outputs.SHOWN_RUNS, ids=lambda shown: shown.name)
def test_each_output_is_included_under_its_command(shown: ShownRun) -> None:
    """The page shows the file in a block titled with the command that made it."""
    page = REPO / shown.page
    blocks = [b for b in code_blocks(page) if b.title == shown.command]
    assert len(blocks) == 1, f"{shown.page} has {len(blocks)} blocks titled {shown.command!r}"
    assert blocks[0].code.strip() == _include(shown.name)


def test_every_output_file_is_made_by_a_run() -> None:
    made = {f"{shown.name}.txt" for shown in outputs.SHOWN_RUNS}
    assert {p.name for p in outputs.OUTPUTS.glob("*.txt")} == made


def _typed_summary_lines(page: Path) -> list[str]:
    """The summary lines a page types, but those in an ``Output`` block below a Python
    example that ``tests/test_docs.py`` runs and compares."""
    found = []
    blocks = code_blocks(page)
    checked = {
        block.line
        for position, block in enumerate(blocks)
        if block.is_output
        and page.is_relative_to(DOCS)
        and position > 0
        and blocks[position - 1].language == "python"
        and blocks[position - 1].skip_reason is None
    }
    lines = page.read_text("utf-8").splitlines()
    starts = sorted(checked)
    for number, line in enumerate(lines, start=1):
        if not SUMMARY_LINE.search(line):
            continue
        inside = any(start <= number < start + 40 for start in starts)  # an Output block
        if not inside:
            found.append(f"{page.relative_to(REPO)}:{number}: {line.strip()}")
    return found


def test_no_page_types_a_summary_line() -> None:
    """Counts change with every check added: pages include them from a run instead.

    The README cannot include a file (it is read as it is), so it quotes the reference's
    summary line, which must be the one ``spec-reference`` holds; the tutorial's timings
    name the suite they measured with its summary line, which stays true of that run.
    """
    typed = [line for page in PAGES for line in _typed_summary_lines(page)]
    readme = [line for line in typed if line.startswith("README.md:")]
    timings = [line for line in typed if "suite: contract:" in line]
    assert [line for line in typed if line not in readme + timings] == []
    reference = (outputs.OUTPUTS / "spec-reference.txt").read_text("utf-8").strip()
    for line in readme:
        quoted = SUMMARY_LINE.search(line)
        assert quoted is not None
        prefix = quoted.group(0).split("...", 1)[0].rstrip()
        assert reference.startswith(prefix), f"{line}\nbut the reference's run gives {reference}"


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
        if page == DOCS / "engines.md":
            continue  # vLLM's install times: measured on a machine its section names
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


def _block(page: Path, title: str) -> CodeBlock:
    found = [block for block in code_blocks(page) if block.title == title]
    assert len(found) == 1, f"{page.relative_to(REPO)} has {len(found)} blocks titled {title!r}"
    return found[0]


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


def test_xdist_timings_name_their_machine_and_suite() -> None:
    """The table has a row for each run the script measures, under a label naming the
    machine and the suite measured."""
    import measure_docs_timings as timings

    block = _block(DOCS / "tutorial.md", XDIST_BLOCK)
    assert MACHINE.search(block.code), "the timings do not name their machine"
    expected = [
        f"{label}, {setting}"
        for setting, _ in timings.XDIST_SETTINGS
        for label, _ in timings.XDIST_VARIANTS
    ]
    assert sorted(_xdist_table()) == sorted(expected)
    # It names the suite it measured (its summary line then), so a check added later
    # does not make it false.
    assert re.search(r"^suite: contract: \d+ passed", block.code, re.M), block.code


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
