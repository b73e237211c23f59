"""Same seed, same verdicts: the draws are a function of (seed, check, mode) alone.

Two runs of a failing target in separate processes (with different hash seeds, so that
nothing may depend on the order of a set of strings) give the same outcome, reason and
details for every check and mode, the stateful lives and their printed steps included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
