"""Same seed, same verdicts: the draws are a function of (seed, check, mode) alone.

Two runs of a failing target in separate processes (with different hash seeds, so that
nothing may depend on the order of a set of strings) give the same outcome, reason and
details for every check and mode, the stateful lives and their printed steps included.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import hypothesis
import pytest
from hypothesis import Phase, given, seed, settings
from hypothesis import strategies as st

from rtmm_protocol.conformance.driving.hypothesis_local_constants import (
    has_local_constants,
    without_local_constants,
)

_RUN = """
import json, sys
from suite.gallery import gatherer
from rtmm_protocol.conformance import check_model_state

if __name__ == "__main__":
    report = check_model_state(
        gatherer("stale-feature-memo"), device="cpu", examples=15,
        checks=["G5", "G8", "C2", "G1-zero-scheduled-contributes-nothing"],
    )
    rows = [
        [check["id"], mode, result["outcome"], result["reason"], result["details"]]
        for check in report.to_json()["checks"]
        for mode, result in check["modes"].items()
    ]
    json.dump(rows, sys.stdout)
"""


def _verdicts(tmp_path: Path, hash_seed: str) -> list[list[str]]:
    script = tmp_path / "run.py"
    script.write_text(_RUN, encoding="utf-8")
    tests = str(Path(__file__).resolve().parents[1])
    environment = {**os.environ, "PYTHONHASHSEED": hash_seed}
    environment["PYTHONPATH"] = os.pathsep.join([tests, environment.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(script)], env=environment, capture_output=True, text=True,
        timeout=600, check=True,
    )  # fmt: skip
    rows: list[list[str]] = json.loads(done.stdout)
    return rows


def test_two_runs_with_the_same_seed_give_the_same_verdicts(tmp_path: Path) -> None:
    first, second = _verdicts(tmp_path, "1"), _verdicts(tmp_path, "2")
    assert any(row[2] == "failed" for row in first), "the target must fail for this to say much"
    stateful = [
        row for row in first if row[0].startswith(("G8-stateful", "C2")) and row[2] == "failed"
    ]
    assert stateful, "a stateful life must fail, so that its steps are compared too"
    assert first == second


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
