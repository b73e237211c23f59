"""The built docs in a real browser: home, specification anchors, search and every page's layout.

Marked ``slow`` (deselect with ``-m 'not slow'``) and skipped, with the reason shown by
``-ra``, where no Chromium binary is installed (``apt-get install -y chromium``) or the
docs extra is missing. CI installs Chromium and runs the same check on its own
(``.ci/browser.sh``, which calls ``python docs/_gen/browser_check.py``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent


def _browser_check_module() -> ModuleType:
    path = REPO / "docs" / "_gen" / "browser_check.py"
    spec = importlib.util.spec_from_file_location("rtmm_docs_browser_check", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_site_in_headless_chromium(tmp_path: Path) -> None:
    """No console error, every clause anchor, search results, nothing wider than its column,
    and no table header, code word or check ID split over two lines."""
    for module in ("mkdocs", "material"):
        pytest.importorskip(
            module,
            reason=f"needs the docs extra, which is not installed: {module} is missing "
            '(pip install "rtmm-protocol[docs]", or -e ".[docs]" in a checkout)',
        )
    browser_check = _browser_check_module()
    chromium = browser_check.find_chromium()
    if chromium is None:
        pytest.skip(
            "needs a Chromium binary: apt-get install -y chromium, or set RTMM_DOCS_CHROMIUM"
        )
    site = tmp_path / "site"
    browser_check.build_site(site)
    report = browser_check.check_site(site, tmp_path / "shots", chromium)
    assert report.problems == [], "\n".join(report.problems)
    assert any(note.startswith("layout: ") for note in report.notes), report.notes
    assert all(shot.stat().st_size > 0 for shot in report.screenshots)


def test_layout_problems_name_page_element_and_widths() -> None:
    """A measured overflow becomes one problem with the page, the element and both widths."""
    browser_check = _browser_check_module()
    measured = {
        "column": 688,
        "found": [
            {
                "element": "table under 'Gather' ('check')",
                "width": 796,
                "kind": "content",
                "box": 720,
            },
            {"element": "img under 'Figure' ('')", "width": 900, "kind": "box"},
        ],
    }
    assert browser_check.layout_problems(measured, "checks/") == [
        "checks/: table under 'Gather' ('check') has content 796px wide in a 720px box "
        "(the 688px column): part of it is hidden",
        "checks/: img under 'Figure' ('') is 900px wide, wider than the 688px column",
    ]
    assert browser_check.layout_problems(None, "") == [
        "home: no content column (article.md-content__inner) to measure"
    ]


def test_wrap_problems_name_page_element_and_word() -> None:
    """A word the layout split over lines becomes one problem naming page, element and word."""
    browser_check = _browser_check_module()
    measured = {
        "found": [
            {"element": "th under 'Compliance matrix'", "word": "clause", "lines": 2},
            {"element": "check ID under 'Gather'", "word": "G1-window-slots", "lines": 3},
        ]
    }
    assert browser_check.wrap_problems(measured, "engines/") == [
        "engines/: th under 'Compliance matrix': 'clause' is split over 2 lines",
        "engines/: check ID under 'Gather': 'G1-window-slots' is split over 3 lines",
    ]
    assert browser_check.wrap_problems({"found": []}, "") == []
    assert browser_check.wrap_problems(None, "") == [
        "home: no content column (article.md-content__inner) to measure"
    ]


def test_site_pages_lists_every_built_page(tmp_path: Path) -> None:
    """Every ``index.html`` of a built site is a page to measure, the home page included."""
    browser_check = _browser_check_module()
    for page in ("index.html", "tutorial/index.html", "api/contract/index.html", "404.html"):
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text("<html></html>")
    assert browser_check.site_pages(tmp_path) == ["", "api/contract/", "tutorial/"]
