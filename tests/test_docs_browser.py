"""The built docs in a real browser: home, specification anchors and search in headless Chromium.

Marked ``slow`` (deselect with ``-m 'not slow'``) and skipped where no Chromium binary
is installed (``apt-get install -y chromium``) or the docs extra is missing. The same
check runs on its own with ``python docs/_gen/browser_check.py``.
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
    """No console error, every clause anchor present, the search finds results."""
    pytest.importorskip("mkdocs", reason="the docs extra (mkdocs) is not installed")
    pytest.importorskip("material", reason="the docs extra (mkdocs-material) is not installed")
    browser_check = _browser_check_module()
    chromium = browser_check.find_chromium()
    if chromium is None:
        pytest.skip("no Chromium binary (apt-get install -y chromium)")
    site = tmp_path / "site"
    browser_check.build_site(site)
    report = browser_check.check_site(site, tmp_path / "shots", chromium)
    assert report.problems == []
    assert all(shot.stat().st_size > 0 for shot in report.screenshots)
