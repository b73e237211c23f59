"""A new clause with its first check is written in the files the Architecture page names
(the clause list, the check, its spec section, its gallery fault), and nowhere else: in a
copy of the checkout with just those four edits, the catalog tests, the docs tests (the
spec page's examples and badges, the strict site build, the check catalog page) and the
gallery's rule that every clause has a fault pass, and so does the harness's line budget,
which counts no check. Leaving out any one of the four fails them.

What the copy does not rerun are the tests of generated text: a new check changes the
counts of the console outputs the pages include, which ``docs/_gen/console_outputs.py``
rewrites (Architecture page, "How to add a check or a clause").
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: The clause added in the copy: the one a maintainer's trial added by hand.
_CLAUSE_LINE = '        "G11": "A window that ends at a placeholder\'s end gathers its last row",\n'

_CHECK = """

@check(
    "G11-window-end-gathers-last-row",
    "MUST",
    "A window that ends where a placeholder ends marks that placeholder's last position.",
    strategy=_every_kind,
    cases=[*cases.WINDOW_CASES],
)
def _window_end_last_row(run: CheckRun, scenario: GatherScenario) -> None:
    call = run.gather_fresh(scenario)
    gathered = call.unpack()
    start = 0
    for request in scenario.requests:
        end = request.num_computed_tokens + scenario.draft_lookahead + request.num_scheduled_tokens
        last = start + request.num_scheduled_tokens - 1
        ends_there = any(f.offset + f.length == end for f in request.features)
        if ends_there and request.num_scheduled_tokens and call.oracle.mask[last]:
            if not bool(gathered.mask[last]):
                raise CheckFailure(
                    "the last position of a window that ends at a placeholder's end is not marked",
                    expected=f"True at slot {last}",
                    seen="False",
                )
        start += request.num_scheduled_tokens
"""

_SPEC_SECTION = """### G11 · A window that ends at a placeholder's end gathers its last row {#G11}

<span class="rtmm-level rtmm-level-must">MUST</span>

**Requirement.** When a request's window ends where one of its placeholders ends, the
window's last slot is marked and gathers that placeholder's last embedding row.

**Why.** An off-by-one at a placeholder's end loses one row per chunk boundary.

**Example.**

```python
pieces, mask = make_state(ToyRealtimeModel(HIDDEN), cache=make_cache()).gather_mm_embeddings(
    make_batch(), 0
)
assert mask.dtype == torch.bool
```

**Checked by:**

<!-- checks: G11 -->

"""

_GALLERY_ENTRY = """    BrokenTarget(
        "last row of a window dropped",
        model_state("drops-lookahead"),
        "G11",
        "G11-window-end-gathers-last-row",
    ),
"""


def _copy_checkout(to: Path) -> None:
    """The checkout's files as git sees them (tracked and untracked, not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            target = to / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def _insert(path: Path, text: str, *, before: str = "", after: str = "") -> None:
    """Put ``text`` in ``path`` right before the first line that starts with ``before``,
    or right after the first line that holds ``after``."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    if before:
        at = next(i for i, line in enumerate(lines) if line.startswith(before))
    else:
        at = next(i for i, line in enumerate(lines) if after in line) + 1
    path.write_text("".join([*lines[:at], text, *lines[at:]]), encoding="utf-8")


def _add_clause_g11(root: Path) -> None:
    """The four edits of a new clause, as the Architecture page lists them. The gallery
    entry's fault is one that exists (a real one is the maintainer's to write): only the
    gallery's static rule, every clause has a fault, runs here."""
    _insert(root / "conformance/rtmm_conformance/clauses.py", _CLAUSE_LINE, after='"G10": ')
    gather = root / "conformance/rtmm_conformance/checks/gather.py"
    gather.write_text(gather.read_text(encoding="utf-8") + _CHECK, encoding="utf-8")
    _insert(root / "docs/specification.md", _SPEC_SECTION, before="## Changes between steps")
    _insert(root / "tests/suite/gallery.py", _GALLERY_ENTRY, after="GALLERY: tuple[BrokenTarget")


@pytest.mark.slow
def test_a_new_clause_and_its_check_need_no_other_edit(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    _copy_checkout(root)
    _add_clause_g11(root)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root / "conformance"), str(root)]),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    tests = [
        "tests/suite/test_catalog.py",
        "tests/test_docs.py",
        "tests/suite/test_gallery.py::test_every_clause_has_a_gallery_entry",
        "tests/test_layout.py::test_the_suite_harness_stays_within_its_line_budget",
    ]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *tests],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    # The copy's suite was the one under test: its catalog holds the new check.
    listed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import rtmm_conformance.catalog as c; print(c.__file__, c.CHECKS_BY_ID['G11-window-end-gathers-last-row'].clause)",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert re.search(rf"^{re.escape(str(root))}\S+ G11$", listed.strip()), listed
