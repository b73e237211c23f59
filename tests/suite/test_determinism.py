"""Same seed, same verdicts: the draws are a function of the seed, the check, the mode and
the suite's and Hypothesis's versions alone.

A target whose fault only random examples find (rows dropped for long features) is run
with ``pytest --conformance`` as a user would, once as a baseline and once per thing that
must not matter: a literal of a user module on the path, a wheel instead of the editable
install, isolation off from a folder with a ``conftest.py`` full of literals,
``pytest -n 2``, another hash seed. Each run gives the same outcome, reason, cause and
details (the smallest case, a stateful life's steps included) for every check and mode.
Then the switch behind it: without it a module's literal changes what Hypothesis draws;
with it, not.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import Phase, given, seed, settings
from hypothesis import strategies as st

from rtmm_conformance.driving.hypothesis_local_constants import (
    has_local_constants,
    without_local_constants,
)

#: A user's module on the path (imported by the target module) and the target module.
_HELPER = "LIMIT = {literal}\nNAMES = ('{literal}-a', {literal}.5)\n"
_TARGET = """
import det_helper  # noqa: F401  (its literals must not move a draw)
from suite.gallery import gatherer

make = gatherer("long-feature-row-dropped")
"""
#: A conftest.py in the folder a run starts from, with literals of its own.
_CONFTEST = "THRESHOLD = 500\nSCALE = 0.75\nLABEL = 'cutoff'\n"
#: One random gather check and the stateful life: both fail on random examples only.
_SELECTION = "G5-rows-match-mask or G8-stateful-life"
_EXAMPLES = 8
TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent


@dataclass(frozen=True)
class Variant:
    """How one run differs from the baseline (editable, worker processes, an empty
    folder, serial, literal 500, hash seed 1)."""

    literal: int = 500
    wheel: bool = False
    isolation_off_with_conftest: bool = False
    xdist: bool = False
    hash_seed: str = "1"


VARIANTS = {
    "a-user-literal-changed": Variant(literal=50),
    "wheel-not-editable": Variant(wheel=True),
    "isolation-off-beside-a-conftest": Variant(isolation_off_with_conftest=True),
    "pytest-n-2": Variant(xdist=True),
    "another-hash-seed": Variant(hash_seed="2"),
}


def _wheel_site(root: Path) -> Path:
    """The package built as a wheel and installed into a folder named like site-packages
    (which Hypothesis takes for installed code, as it would a virtual environment's)."""
    site = root / "wheel" / "site-packages"
    if not site.is_dir():
        dist = root / "dist"
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
        subprocess.run(
            [*pip, "wheel", "--no-deps", "--wheel-dir", str(dist), str(REPO)],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        wheel = next(dist.glob("rtmm_protocol-*.whl"))
        subprocess.run(
            [*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
    return site


def _run(root: Path, name: str, variant: Variant) -> dict[str, Any]:
    """One ``pytest --conformance`` run in a fresh folder; its outcomes and causes."""
    modules, folder = root / name / "modules", root / name / "run"
    modules.mkdir(parents=True)
    folder.mkdir()
    (modules / "det_helper.py").write_text(_HELPER.format(literal=variant.literal), "utf-8")
    (modules / "det_target.py").write_text(_TARGET, "utf-8")
    path = [str(modules), str(TESTS)]
    if variant.wheel:
        path.insert(0, str(_wheel_site(root)))
    environment = {**os.environ, "PYTHONHASHSEED": variant.hash_seed}
    environment["PYTHONPATH"] = os.pathsep.join(path)
    report = root / name / "report.json"
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
        "--conformance=det_target:make", f"--conformance-examples={_EXAMPLES}",
        f"--conformance-report={report}", "-k", _SELECTION,
    ]  # fmt: skip
    if variant.isolation_off_with_conftest:
        (folder / "conftest.py").write_text(_CONFTEST, "utf-8")
        command.append("--conformance-isolation=off")
    if variant.xdist:
        command += ["-n", "2"]
    done = subprocess.run(
        command, cwd=folder, env=environment, capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # the target fails
    where = subprocess.run(
        [sys.executable, "-c", "import rtmm_conformance as c; print(c.__file__)"],
        cwd=folder, env=environment, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    data: dict[str, Any] = json.loads(report.read_text("utf-8"))
    return {
        "suite": where,
        "checks": [
            [check["id"], mode, result["outcome"], result["reason"], result["details"],
             (result["cause"] or {}).get("key")]
            for check in data["checks"]
            for mode, result in check["modes"].items()
        ],
        "causes": [[c["key"], c["title"], c["checks"]] for c in data["causes"]],
    }  # fmt: skip


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run(tmp_path_factory.mktemp("determinism"), "baseline", Variant())


def test_the_baseline_fails_on_random_examples_a_stateful_life_included(
    baseline: dict[str, Any],
) -> None:
    failed = [row for row in baseline["checks"] if row[2] == "failed"]
    assert {row[0] for row in failed} == {
        "G5-rows-match-mask",
        "G8-stateful-life-matches-oracle",
    }, baseline["checks"]
    assert all("a hand-written life" not in row[4] for row in failed)
    assert any("state.step" in row[4] for row in failed), "a life's steps are compared too"


@pytest.mark.parametrize("name", list(VARIANTS))
def test_a_run_that_differs_in_what_must_not_matter_gives_the_same_verdicts(
    name: str, baseline: dict[str, Any], tmp_path: Path
) -> None:
    variant = VARIANTS[name]
    other = _run(tmp_path, name, variant)
    in_site_packages = "site-packages" in other["suite"]
    assert in_site_packages is variant.wheel, other["suite"]
    assert other["checks"] == baseline["checks"]
    assert other["causes"] == baseline["causes"]


# ------------------------------------------------------------ the local-constants switch

#: A literal no other loaded module has, in a range Hypothesis's own constants miss.
_LITERAL = 987_654
_RANGE = (987_000, 988_000)


def _draws(count: int) -> list[int]:
    """``count`` integers from one seed, as the suite draws them (no database, no shrink)."""
    seen: list[int] = []

    @settings(max_examples=count, database=None, phases=[Phase.generate], deadline=None)
    @seed(7)
    @given(st.integers(*_RANGE))
    def draw(value: int) -> None:
        seen.append(value)

    draw()
    return seen


def _load_module_with_literal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "holds_a_literal.py").write_text(f"LIMIT = {_LITERAL}\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "holds_a_literal", raising=False)
    importlib.import_module("holds_a_literal")


def test_this_hypothesis_is_covered() -> None:
    """The switch reaches the pool wherever Hypothesis has one (6.131.1 on); a version that
    moved it fails here rather than drawing from the user's literals unnoticed."""
    version = tuple(int(part) for part in hypothesis.__version__.split(".")[:3])
    has_pool = version >= (6, 131, 1)
    assert has_local_constants() is has_pool


@pytest.mark.skipif(not has_local_constants(), reason="this Hypothesis has no local constants")
def test_without_the_switch_a_module_literal_changes_draws_and_with_it_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with without_local_constants():
        before = _draws(300)
    _load_module_with_literal(tmp_path, monkeypatch)
    plain = _draws(300)
    with without_local_constants():
        after = _draws(300)
    again = _draws(300)
    assert _LITERAL in plain, "Hypothesis no longer draws module literals: the switch is moot"
    assert _LITERAL not in after
    assert after == before
    assert again == plain, "the switch must put Hypothesis back as it was"


def test_the_switch_does_nothing_where_hypothesis_has_no_local_constants(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As on Hypothesis before 6.131.1: no reader of the pool, nothing replaced."""
    providers = importlib.import_module("hypothesis.internal.conjecture.providers")
    monkeypatch.delattr(providers, "_get_local_constants", raising=False)
    before = dict(vars(providers))
    assert not has_local_constants()
    with without_local_constants():
        assert dict(vars(providers)) == before
    assert dict(vars(providers)) == before


@pytest.mark.skipif(not has_local_constants(), reason="this Hypothesis has no local constants")
def test_the_switch_nests_and_restores_on_an_error() -> None:
    providers = importlib.import_module("hypothesis.internal.conjecture.providers")
    original = providers._get_local_constants

    def nested() -> None:
        with without_local_constants():
            with without_local_constants():
                assert providers._get_local_constants is not original
            assert providers._get_local_constants is not original
            raise KeyError("inside")

    with pytest.raises(KeyError):
        nested()
    assert providers._get_local_constants is original
