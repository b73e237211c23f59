"""The docs are tested: their examples run, the spec page matches the suite, the site builds.

- Every fenced ``python`` block of ``docs/**/*.md`` runs, page by page, in one namespace
  per page (later blocks may use names from earlier ones). A block is skipped only when
  its first line says why, visibly: ``# docs-test: skip (REASON)``; a block that starts
  with ``# docs-test: needs-cuda`` runs only where CUDA is available. A block
  whose first line is ``# file: NAME.py`` is written to the working directory and
  imported as that module, so later blocks and commands can import it (its names are
  also given to later blocks).
- The specification page has an anchored heading for every clause, and every clause has
  a check in the suite's registry and vice versa.
- ``mkdocs build --strict`` passes with torch and numpy made unimportable, so the build
  provably reads the source statically; the built site references nothing off-site.
"""

from __future__ import annotations

import contextlib
import html
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from html.parser import HTMLParser
from pathlib import Path
from types import ModuleType

import pytest
from docs_pages import DOCS, NEEDS_CUDA, REPO, code_blocks

from rtmm_conformance.catalog import CHECKS
from rtmm_conformance.clauses import CLAUSES, LEVELS, CheckInfo, Level
from rtmm_protocol import PROTOCOL_VERSION

SPEC_PAGE = DOCS / "specification.md"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


catalog_tools = _load("rtmm_docs_catalog", DOCS / "_hooks" / "rtmm_docs_catalog.py")


PAGES = sorted(p for p in DOCS.rglob("*.md") if not p.relative_to(DOCS).parts[0].startswith("_"))
PAGES_WITH_PYTHON = [p for p in PAGES if any(b.language == "python" for b in code_blocks(p))]


@pytest.mark.parametrize("page", PAGES_WITH_PYTHON, ids=lambda p: str(p.relative_to(DOCS)))
def test_python_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run a page's Python blocks in order; skip only blocks that say why."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    skipped: list[str] = []
    ran = 0
    blocks = code_blocks(page)
    for position, block in enumerate(blocks):
        if block.language != "python":
            continue
        reason = block.skip_reason
        if reason is not None:
            assert reason, f"{block.page}:{block.line}: a skipped block must say why"
            skipped.append(f"line {block.line}: {reason}")
            continue
        printed = io.StringIO()
        if block.file_name is not None:
            target = tmp_path / block.file_name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code + "\n", "utf-8")
            # Import it as the module it is (dataclasses and the like need one), and give
            # later blocks its names.
            module_name = block.file_name.removesuffix(".py").replace("/", ".")
            with contextlib.redirect_stdout(printed):
                module = importlib.import_module(module_name)
            namespace.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
        else:
            # Pad so that tracebacks point at the line of the Markdown file.
            source = "\n" * (block.line - 1) + block.code
            with contextlib.redirect_stdout(printed):
                exec(compile(source, str(page), "exec"), namespace)
        ran += 1
        shown = blocks[position + 1] if position + 1 < len(blocks) else None
        if shown is not None and shown.is_output:
            assert printed.getvalue().rstrip("\n") == shown.code.rstrip("\n"), (
                f"{shown.page}:{shown.line}: the Output block differs from what the "
                f"example at line {block.line} prints:\n{printed.getvalue()}"
            )
    # Forget the modules the page wrote, so that other pages start clean.
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None) or ""
        if origin.startswith(str(tmp_path)):
            del sys.modules[name]
    assert ran > 0, f"{page}: every Python block is skipped ({skipped})"


def test_skip_markers_give_reasons() -> None:
    """No block is skipped silently: a skip marker without a reason is an error."""
    for page in PAGES:
        for block in code_blocks(page):
            first = block.code.split("\n", 1)[0]
            if "docs-test" in first and not NEEDS_CUDA.match(first.strip()):
                assert block.skip_reason, f"{block.page}:{block.line}: malformed skip marker"


def test_spec_page_anchors_every_clause() -> None:
    """Every clause has exactly one anchored heading, a level badge and a checks list."""
    text = SPEC_PAGE.read_text("utf-8")
    assert catalog_tools.spec_clause_ids(text) == list(CLAUSES)
    sections = re.split(r"^### ", text, flags=re.M)[1:]
    for clause, section in zip(CLAUSES, sections, strict=True):
        assert f"{{#{clause}}}" in section.splitlines()[0], clause
        assert "rtmm-level-" in section, f"{clause} has no level badge"
        assert f"<!-- checks: {clause} -->" in section, f"{clause} lists no checks"
        assert "**Why.**" in section, f"{clause} gives no rationale"
        assert "**Example.**" in section, f"{clause} gives no example"


def clause_level_badges(checks: Iterable[CheckInfo], clause: str) -> list[Level]:
    """The level badges a clause's section shows, by the rule the page follows: first the
    clause's level, the strongest level among its contract checks (SHOULD where it has
    only robustness checks, which are SHOULD for third parties); then each other level
    among its contract checks (G6's SHOULD for the ``modality`` tag). Robustness checks
    add no badge: the section's words say the reference must meet them."""
    contract = [c.level for c in checks if c.clause == clause and c.profile == "contract"]
    return [level for level in LEVELS if level in contract] or ["SHOULD"]


def badge_problems(text: str, checks: Sequence[CheckInfo]) -> list[str]:
    """Where a clause's level badges (the paragraph under its heading) differ from what the
    registry's checks give it by :func:`clause_level_badges`."""
    problems = []
    sections = re.split(r"^### ", text, flags=re.M)[1:]
    for clause, section in zip(CLAUSES, sections, strict=True):
        lead = section.split("\n\n", 2)[1]  # the paragraph under the heading
        shown = re.findall(r'<span class="rtmm-level rtmm-level-(\w+)">(\w+)</span>', lead)
        badges = [word for css, word in shown if css == word.lower()]
        wanted = clause_level_badges(checks, clause)
        if badges != wanted or len(shown) != len(badges):
            problems.append(
                f"{clause} shows {' then '.join(w for _, w in shown) or 'no badge'}, "
                f"but its checks give {' then '.join(wanted)}"
            )
    return problems


def test_spec_page_badges_are_the_registry_levels() -> None:
    """Each clause's badge is its level as the decorators of its checks give it, exactly."""
    assert badge_problems(SPEC_PAGE.read_text("utf-8"), CHECKS) == []


def test_a_wrong_badge_is_caught() -> None:
    """The rule fails a badge that says MUST for a SHOULD clause, or leaves a level out."""
    text = SPEC_PAGE.read_text("utf-8")
    should = '<span class="rtmm-level rtmm-level-should">SHOULD</span>'
    must = '<span class="rtmm-level rtmm-level-must">MUST</span>'
    d5 = text.index("{#D5}")
    wrong = text[:d5] + text[d5:].replace(should, must, 1)
    assert badge_problems(wrong, CHECKS) == ["D5 shows MUST, but its checks give SHOULD"]
    g6 = text.index("{#G6}")
    short = text[:g6] + text[g6:].replace(f"(the `modality` tag: {should})", "", 1)
    assert badge_problems(short, CHECKS) == ["G6 shows MUST, but its checks give MUST then SHOULD"]


def test_spec_page_names_the_protocol_version() -> None:
    text = SPEC_PAGE.read_text("utf-8")
    assert f"this is protocol version **{PROTOCOL_VERSION}**" in text


def test_spec_clauses_match_check_catalog() -> None:
    """Each clause on the spec page has a check; each check names a clause on the page."""
    module = catalog_tools.load_catalog_module()
    checks = catalog_tools.read_checks(module)
    spec = catalog_tools.spec_clause_ids(SPEC_PAGE.read_text("utf-8"))
    assert catalog_tools.coverage_problems(spec, checks) == []
    titles = catalog_tools.spec_clause_titles(SPEC_PAGE.read_text("utf-8"))
    assert titles == catalog_tools.read_clauses(module), "headings differ from CLAUSES titles"


def test_coverage_problems_reports_both_directions() -> None:
    """The drift check itself notices a clause without checks and an unknown clause."""
    check = catalog_tools.CheckRow("G9-x", "G9", "MUST", "gather", "s", "1.0", ("model_state",))
    problems = catalog_tools.coverage_problems(["G1"], [check])
    assert problems == [
        "clause G1 is on the specification page but no check enforces it",
        "check G9-x names clause G9, which the specification page lacks",
    ]


def test_missing_registry_fails_clearly() -> None:
    """Without the suite's registry the catalog cannot be built, and says why."""
    with pytest.raises(catalog_tools.CatalogUnavailableError, match="CHECKS and CLAUSES"):
        catalog_tools.load_catalog_module("rtmm_conformance.no_such_catalog")


def test_from_scratch_guide_shows_the_example_as_it_is() -> None:
    """Each module the guide shows is, line for line, the one CI checks under examples/."""
    package = REPO / "examples" / "from_scratch_state"
    shown = {
        block.file_name: block.code.split("\n", 1)[1]
        for block in code_blocks(DOCS / "write-your-own.md")
        if block.file_name is not None
    }
    assert sorted(shown) == [
        "from_scratch_state/factory.py",
        "from_scratch_state/state.py",
        "from_scratch_state/window.py",
    ]
    for name, code in shown.items():
        assert code + "\n" == (package / name).read_text("utf-8"), (
            f"docs/write-your-own.md shows {name} differently from examples/from_scratch_state"
        )


def test_install_page_lists_every_extra() -> None:
    """The install page's extras table names exactly the extras pyproject.toml defines."""
    pyproject = (REPO / "pyproject.toml").read_text("utf-8")
    section = pyproject.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = set(re.findall(r"^([a-z]+) = \[", section, flags=re.M))
    page = (DOCS / "install.md").read_text("utf-8")
    table = page.split("| extra | installs | needed for |", 1)[1].split("\n\n", 1)[0]
    listed = set(re.findall(r"^\| `([a-z]+)` \|", table, flags=re.M))
    assert extras >= {"conformance", "typecheck", "docs"}
    assert listed == extras


def _torch_install_lines(page: Path) -> list[str]:
    """The shell lines of ``page`` that install torch, as written."""
    return [
        line.strip()
        for block in code_blocks(page)
        if block.language in {"bash", "sh", "shell", "console"}
        for line in block.code.splitlines()
        if re.search(r"\bpip install\b.*\btorch\b", line)
    ]


def test_torch_install_lines_say_what_they_install_and_agree() -> None:
    """README and install page give the same torch lines, each saying which build for whom.

    From PyPI on Linux, ``pip install torch`` is the CUDA build; a CPU-only machine wants
    the CPU index. A line that does not say which it is misleads one of the two.
    """
    readme = _torch_install_lines(REPO / "README.md")
    install = _torch_install_lines(DOCS / "install.md")
    assert readme, "the README shows no torch install line"
    assert readme == install, "README.md and docs/install.md give different torch lines"
    for line in readme:
        command, _, comment = line.partition("#")
        assert comment.strip(), f"{line!r} does not say what it installs, for whom"
        if "download.pytorch.org/whl/cpu" in command:
            assert "CPU build" in comment, line
        else:
            assert "CUDA build" in comment, line


def test_batch_figure_is_current() -> None:
    """The committed SVG is exactly what the generator draws from the reference gather."""
    generator = _load("rtmm_docs_batch_figure", DOCS / "_gen" / "batch_figure.py")
    committed = (DOCS / "assets" / "batch-figure.svg").read_text("utf-8")
    assert generator.render_batch_figure() == committed, (
        "docs/assets/batch-figure.svg is stale: run python docs/_gen/batch_figure.py"
    )


# --------------------------------------------------------------------------- the build

#: Why the build tests skip without the docs extra, and how to get them to run.
DOCS_EXTRA_MISSING = (
    "needs the docs extra, which is not installed: {module} is missing "
    '(pip install "rtmm-protocol[docs]", or -e ".[docs]" in a checkout)'
)


def require_docs_extra() -> None:
    """Skip, saying which package is missing and how to install it, without the docs extra."""
    for module in ("mkdocs", "material", "mkdocstrings"):
        pytest.importorskip(module, reason=DOCS_EXTRA_MISSING.format(module=module))


_BUILD = """
import sys
from mkdocs.__main__ import cli
sys.argv = ["mkdocs", "build", "--strict", "--site-dir", sys.argv[1]]
cli()
"""


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the site once for this module, strictly. The build imports the suite's catalog
    (and so torch, a dependency of the package) to list the checks."""
    require_docs_extra()
    site = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-c", _BUILD, str(site)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{log}"
    assert "WARNING" not in log, f"the build logged warnings:\n{log}"
    return site


def test_site_builds_strictly_without_torch(built_site: Path) -> None:
    """Every page of the nav is built, and the spec page carries every clause anchor."""
    for page in ("index.html", "specification/index.html", "checks/index.html"):
        assert (built_site / page).is_file(), page
    spec_html = (built_site / "specification" / "index.html").read_text("utf-8")
    for clause in CLAUSES:
        assert f'id="{clause}"' in spec_html, clause
    assert (built_site / "assets" / "batch-figure.svg").is_file()
    assert (built_site / "search" / "search_index.json").is_file()


_PRE = re.compile(r"<pre\b[^>]*>(?P<body>.*?)</pre>", re.S)
_TAG = re.compile(r"<[^>]+>")
_MARKER_LINE = re.compile(r"^\s*#\s*docs-test:", re.M)


def test_site_shows_no_docs_test_markers(built_site: Path) -> None:
    """The docs tests' markers stay in the Markdown: no rendered code block shows one.

    The pages do have marked blocks (the check would pass vacuously otherwise).
    """
    marked = [
        f"{block.page}:{block.line}"
        for page in PAGES
        for block in code_blocks(page)
        if _MARKER_LINE.match(block.code)
    ]
    assert marked, "no page has a docs-test marker: this test would prove nothing"
    shown = []
    for page in built_site.rglob("*.html"):
        for pre in _PRE.finditer(page.read_text("utf-8")):
            text = html.unescape(_TAG.sub("", pre.group("body")))
            shown += [
                f"{page.relative_to(built_site)}: {line.strip()}"
                for line in text.splitlines()
                if _MARKER_LINE.match(line)
            ]
    assert shown == [], f"rendered docs-test markers (from {marked}):\n" + "\n".join(shown)


def test_strip_markers_removes_only_a_blocks_first_line() -> None:
    """The hook drops a marker that opens a block, indented or not, and nothing else."""
    hook = _load("rtmm_docs_test_markers", DOCS / "_hooks" / "docs_test_markers.py")
    page = "\n".join(
        [
            "Prose may quote `# docs-test: skip (why)`.",
            "```python",
            "# docs-test: needs-cuda",
            "x = 1",
            "# docs-test: skip (not a first line, so not a marker)",
            "```",
            "1. A list item:",
            "",
            "    ```python",
            "    # docs-test: skip (needs vLLM)",
            "    y = 2",
            "    ```",
            "````markdown",
            "```python",
            "# docs-test: skip (inside an outer block: its first line is the inner fence)",
            "```",
            "````",
        ]
    )
    assert hook.strip_markers(page).split("\n") == [
        "Prose may quote `# docs-test: skip (why)`.",
        "```python",
        "x = 1",
        "# docs-test: skip (not a first line, so not a marker)",
        "```",
        "1. A list item:",
        "",
        "    ```python",
        "    y = 2",
        "    ```",
        "````markdown",
        "```python",
        "# docs-test: skip (inside an outer block: its first line is the inner fence)",
        "```",
        "````",
    ]


def _whole_words_hook() -> ModuleType:
    return _load("rtmm_docs_whole_words", DOCS / "_hooks" / "whole_words.py")


def test_keep_words_whole_wraps_text_only() -> None:
    """Check IDs in text and the words of code in table cells get a span; tags do not."""
    hook = _whole_words_hook()
    page = (
        '<p>See <a href="../checks/#G5-rows-match-mask"><code>G5-rows-match-mask</code></a>'
        " and D1-D5.</p>"
        '<table><tr><td><span id="G1-window-slots"></span><code>G1-window-slots</code></td>'
        "<td><code>--conformance-report=PATH</code> or <code>pytest -k G3</code></td></tr>"
        "</table>"
        "<pre><code>rerun: 'rtmm-conformance::G3-realtime-decode-gathers[realtime]'</code></pre>"
        '<script>var x = "G1-window-slots";</script>'
    )
    check = '<span class="rtmm-check-id">{}</span>'
    word = '<span class="rtmm-code-word">{}</span>'
    assert hook.keep_words_whole(page) == (
        '<p>See <a href="../checks/#G5-rows-match-mask"><code>'
        + check.format("G5-rows-match-mask")
        + "</code></a> and D1-D5.</p>"
        '<table><tr><td><span id="G1-window-slots"></span><code>'
        + word.format("G1-window-slots")
        + "</code></td><td><code>"
        + word.format("--conformance-report=PATH")
        + "</code> or <code>"
        + word.format("pytest")
        + " "
        + word.format("-k")
        + " "
        + word.format("G3")
        + "</code></td></tr></table><pre><code>rerun: 'rtmm-conformance::"
        + check.format("G3-realtime-decode-gathers[realtime]")
        + "'</code></pre>"
        '<script>var x = "G1-window-slots";</script>'
    )


def test_site_keeps_every_check_id_whole(built_site: Path) -> None:
    """Every check ID the built pages show sits in a span the stylesheet keeps on one line.

    The browser test measures the result in Chromium; this one needs no browser.
    """
    hook = _whole_words_hook()
    css = (built_site / "stylesheets" / "extra.css").read_text("utf-8")
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)  # comments may name the classes too
    for css_class in (hook.CHECK_ID_CLASS, hook.CODE_WORD_CLASS):
        rule = re.search(rf"\.{css_class}\b[^{{]*\{{(?P<body>[^}}]*)\}}", css)
        assert rule is not None, f"the stylesheet has no rule for .{css_class}"
        assert "white-space: nowrap" in rule.group("body"), css_class
    checks = {c.id for c in catalog_tools.read_checks(catalog_tools.load_catalog_module())}
    bare = []
    shown = 0
    for page in built_site.rglob("*.html"):
        parts = re.split(r"(<[^>]*>)", page.read_text("utf-8"))
        wrapped = False
        for index, part in enumerate(parts):
            if index % 2:
                wrapped = re.search(r'class="rtmm-(check-id|code-word)"', part) is not None
                continue
            for found in re.finditer(r"\b[GCDRET][0-9]+(?:-[a-z0-9]+)+", part):
                if found.group(0) in checks:
                    shown += 1
                    if not (wrapped and found.start() == 0):
                        bare.append(f"{page.relative_to(built_site)}: {found.group(0)}")
    assert shown > len(checks), "the site should show every check ID at least once"
    assert bare == []


class _ExternalRefs(HTMLParser):
    """Collects the URLs a page would load (scripts, styles, images, fonts, frames)."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag in {"script", "img", "iframe", "source", "audio", "video"}:
            self.loaded.append(values.get("src") or "")
        if tag == "link" and (values.get("rel") or "") not in {"canonical", "alternate"}:
            self.loaded.append(values.get("href") or "")


def test_site_loads_nothing_off_site(built_site: Path) -> None:
    """No page loads a script, style, font or image from another host."""
    offenders = []
    for page in built_site.rglob("*.html"):
        parser = _ExternalRefs()
        parser.feed(page.read_text("utf-8"))
        offenders += [
            f"{page.relative_to(built_site)}: {url}"
            for url in parser.loaded
            if re.match(r"^(https?:)?//", url)
        ]
    for css in built_site.rglob("*.css"):
        offenders += [
            f"{css.relative_to(built_site)}: {url}"
            for url in re.findall(r"url\(\s*['\"]?((?:https?:)?//[^)'\"]+)", css.read_text("utf-8"))
        ]
    assert offenders == []


def test_check_catalog_page_lists_every_check(built_site: Path) -> None:
    """The built catalog page has an anchor for each registered check."""
    checks = catalog_tools.read_checks(catalog_tools.load_catalog_module())
    html = (built_site / "checks" / "index.html").read_text("utf-8")
    missing = [c.id for c in checks if f'id="{c.id}"' not in html]
    assert missing == []


class _LinksAndIds(HTMLParser):
    """Collects the ids a page defines and the relative links it makes."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        href = values.get("href") or ""
        if tag == "a" and href and not re.match(r"^([a-z]+:|/)", href):
            self.links.append(href)


def test_site_has_no_broken_internal_links(built_site: Path) -> None:
    """Every relative link of the built site, hooks' links included, reaches a page and id."""
    pages: dict[Path, _LinksAndIds] = {}
    for page in built_site.rglob("*.html"):
        parser = _LinksAndIds()
        parser.feed(page.read_text("utf-8"))
        pages[page.resolve()] = parser
    broken = []
    for page, parser in pages.items():
        for href in parser.links:
            path, _, anchor = href.partition("#")
            target = (page.parent / path).resolve() if path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(built_site.resolve())}: {href}")
            elif anchor and target in pages and anchor not in pages[target].ids:
                broken.append(f"{page.relative_to(built_site.resolve())}: {href} (no such id)")
    assert broken == []


def _benchmark_hook() -> ModuleType:
    require_docs_extra()
    return _load("rtmm_docs_benchmark_results", DOCS / "_hooks" / "benchmark_results.py")


def test_benchmark_figures_prefer_the_newest_full_run(tmp_path: Path) -> None:
    """A full run wins over a newer quick run; a quick run alone is shown but flagged."""
    hook = _benchmark_hook()
    assert hook.choose_results(tmp_path) is None
    quick = {"mode": "quick", "created": "later", "scenarios": [{"scenario": "s", "plan_x": 1.0}]}
    (tmp_path / "quick.json").write_text(json.dumps(quick), "utf-8")
    path, data = hook.choose_results(tmp_path)
    assert path.name == "quick.json"
    assert "Not a measurement" in hook.render_results(data, "quick.json")
    full = {
        "mode": "full",
        "machine": {"cpu_count": 16, "torch": "2.13.0"},
        "scenarios": [{"scenario": "realtime decode R=1024", "loop_us": 9000.0, "plan_x": 61.5}],
        "scaling_exponents": {"plan_vs_requests": 0.93},
        "future_section": [{"a": 1}],
    }
    (tmp_path / "full.json").write_text(json.dumps(full), "utf-8")
    os.utime(tmp_path / "full.json", (0, 0))  # older than the quick run, still preferred
    path, data = hook.choose_results(tmp_path)
    assert path.name == "full.json"
    page = hook.render_results(data, "full.json")
    assert "Not a measurement" not in page
    assert "| realtime decode R=1024 | 9000 | 61.5 |" in page
    assert "| plan_vs_requests | 0.93 |" in page
    assert "### Future section" in page  # sections the hook does not know still show
