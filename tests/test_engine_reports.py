"""The Engines page's matrix and causes are what the committed reports say."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

RENDER = Path(__file__).resolve().parent.parent / "examples" / "engine_reports" / "render.py"


def _render_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("engine_reports_render", RENDER)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {RENDER}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["matrix", "causes"])
def test_committed_rendering_is_up_to_date(name: str) -> None:
    render = _render_module()
    path = {"matrix": render.MATRIX_FILE, "causes": render.CAUSES_FILE}[name]
    fresh = {"matrix": render.render_matrix, "causes": render.render_causes}[name]()
    assert path.read_text(encoding="utf-8") == fresh, (
        f"{path.name} is out of date: run python {RENDER.relative_to(RENDER.parents[2])}"
    )


def test_reports_hold_no_machine_paths() -> None:
    render = _render_module()
    for target in render.TARGETS:
        text = (render.REPORTS / target.report).read_text(encoding="utf-8")
        assert "site-packages/" not in text, target.report
        assert str(render.REPO) not in text, target.report
