"""The Architecture page stays true: its layers are the enforced import contracts, the
files of the trip of one failing check are those a traced run enters, and the files it
names on the path of clause G5 exist, cite G5, and number at most eight."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from types import FrameType

import pytest
from suite.gallery import gatherer

import rtmm_conformance
from rtmm_conformance.api import check_model_state

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "architecture.md"


def _g5_path() -> list[str]:
    block = (
        PAGE.read_text(encoding="utf-8").split("<!-- g5-path -->")[1].split("<!-- /g5-path -->")[0]
    )
    return re.findall(r"`([^`]+\.(?:py|md))`", block)


def test_the_g5_path_is_short_and_every_file_on_it_cites_g5() -> None:
    files = _g5_path()
    assert 1 < len(files) <= 8, files
    for name in files:
        path = REPO / name
        assert path.is_file(), f"{name} is named on the page but does not exist"
        assert re.search(r"\bG5\b", path.read_text(encoding="utf-8")), f"{name} does not cite G5"


def test_the_g5_path_follows_the_imports() -> None:
    """Each suite and reference file on the path is reached from the one before it."""
    files = _g5_path()
    modules = [
        f.removeprefix("conformance/").removesuffix(".py").replace("/", ".")
        for f in files
        if f.endswith(".py")
    ]
    check, run, call = modules[0], modules[1], modules[2]
    python_files = [f for f in files if f.endswith(".py")]
    sources = {
        m: (REPO / f).read_text(encoding="utf-8")
        for m, f in zip(modules, python_files, strict=True)
    }
    assert f"from {run} import" in sources[check]
    assert f"from {call} import" in sources[run]
    assert "from rtmm_protocol.testing.oracle import" in sources[call]
    assert (
        "rtmm_protocol.reference.gather_plan import"
        in sources["rtmm_protocol.reference.gather_planner"]
    )


def test_the_layers_named_on_the_page_are_the_enforced_contracts() -> None:
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml")
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    kinds = {c["type"] for c in contracts}
    assert {"forbidden", "acyclic_siblings"} <= kinds
    packages = {
        m
        for c in contracts
        for key in ("source_modules", "forbidden_modules")
        for m in c.get(key, [])
    }
    page = PAGE.read_text(encoding="utf-8")
    for package in (
        "rtmm_protocol.testing",
        "rtmm_protocol.reference",
        "rtmm_conformance",
    ):
        assert package in packages
        assert f"`{package}`" in page
    # Every module of the suite's layers contract is on the page's table of its layers.
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    modules = [m.strip() for layer in layers for m in re.split(r"[|:]", layer)]
    for module in modules:
        name = module.removeprefix("rtmm_conformance.")
        assert f"`{name}.py`" in page or f"`{name}/`" in page, module


def _trip() -> list[str]:
    block = PAGE.read_text(encoding="utf-8").split("<!-- trip -->")[1].split("<!-- /trip -->")[0]
    return re.findall(r"^\| [^|]+ \| `([^`]+\.py)` \|", block, flags=re.MULTILINE)


def test_the_trip_of_a_failing_check_is_the_files_a_traced_run_enters() -> None:
    """Run G5 on a target that breaks it, in this process, and note each suite file whose
    functions run (module bodies, which imports run, do not count)."""
    suite = os.path.dirname(rtmm_conformance.__file__) + os.sep
    entered: set[str] = set()

    def note(frame: FrameType, event: str, arg: object) -> None:
        name = frame.f_code.co_filename
        if event == "call" and name.startswith(suite) and frame.f_code.co_name != "<module>":
            entered.add(name.removeprefix(suite).replace(os.sep, "/"))

    def run() -> str:
        report = check_model_state(
            gatherer("off-by-one-embed-rows"),
            checks=["G5-rows-match-mask"],
            device="cpu",
            isolation="off",
            examples=2,
        )
        return report.summary_line()

    run()  # imports, caches
    entered.clear()
    sys.setprofile(note)
    try:
        summary = run()
    finally:
        sys.setprofile(None)
    assert "1 failed (MUST)" in summary
    listed = _trip()
    assert len(listed) == len(set(listed)), listed
    assert sorted(entered) == sorted(listed)
    assert f"these {len(listed)} suite files" in PAGE.read_text(encoding="utf-8")
