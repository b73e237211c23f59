"""The replay a stateful failure prints replays it, whatever Hypothesis version is installed.

A failing life's steps are recorded by the suite's own state machine (not taken from
Hypothesis's printout, which moved between versions), so the snippet under "replay, as
ready-to-run Python" rebuilds the machine and calls its rules in order. Each test runs
the suite on a gallery target in a fresh process, takes the snippet from the failure, runs
it in another fresh process, and sees the same failure: with the Hypothesis the tests run
with, and with the oldest one the package allows (``RTMM_OLDEST_HYPOTHESIS`` names a
folder holding it; CI installs it there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
OLDEST_ALLOWED = "6.100.0"

_TARGETS = """
from suite.gallery import FaultyGatherer


def _gatherer(ctx, fault):
    return FaultyGatherer(
        ctx.model, ctx.max_num_tokens, ctx.hidden_size, ctx.encoder_cache, ctx.dtype,
        ctx.device, validate=ctx.validate, fault=fault,
    )


def realtime_ignored(ctx):
    return _gatherer(ctx, "realtime-ignored")


def stale_memo(ctx):
    return _gatherer(ctx, "stale-feature-memo")


def stale_output(ctx):
    return _gatherer(ctx, "stale-output-memo")
"""

_RUN = """
import json, sys
import hypothesis
from rtmm_conformance import check_model_state

if __name__ == "__main__":
    report = check_model_state(sys.argv[1], device="cpu", examples=30, checks=[sys.argv[2]])
    failed = [r for r in report.results if r.outcome.value == "failed"]
    print(json.dumps({"hypothesis": hypothesis.__version__, "details": failed[0].details}))
"""


def _hypotheses() -> list[object]:
    oldest = os.environ.get("RTMM_OLDEST_HYPOTHESIS")
    return [
        pytest.param(None, id="installed"),
        pytest.param(
            oldest,
            id="oldest-allowed",
            marks=pytest.mark.skipif(
                not oldest,
                reason=f"set RTMM_OLDEST_HYPOTHESIS to a folder holding hypothesis=={OLDEST_ALLOWED}",
            ),
        ),
    ]


def _python(
    tmp_path: Path, hypothesis_dir: str | None, *args: str
) -> subprocess.CompletedProcess[str]:
    paths = [*([hypothesis_dir] if hypothesis_dir else []), str(TESTS), str(tmp_path)]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, *sys.path])}
    return subprocess.run(
        [sys.executable, *args], cwd=tmp_path, env=environment, capture_output=True,
        text=True, timeout=600, check=False,
    )  # fmt: skip


def _snippet(details: str) -> str:
    lines = details.splitlines()
    start = lines.index("replay, as ready-to-run Python:") + 1
    body = []
    for line in lines[start:]:
        if not line.startswith("    "):
            break
        body.append(line[4:])
    return "\n".join(body)


@pytest.mark.parametrize("hypothesis_dir", _hypotheses())
@pytest.mark.parametrize(
    ("factory", "check", "drawn"),
    [
        ("realtime_ignored", "G8-stateful-life-matches-oracle", True),  # a life Hypothesis shrank
        ("stale_memo", "G8-stateful-life-matches-oracle", False),  # a hand-written life
        ("stale_output", "C2-changes-never-stale", False),  # a life with changes between steps
    ],
    ids=["drawn-life", "hand-written-life", "changing-life"],
)
def test_the_printed_steps_replay_the_failure(
    tmp_path: Path, hypothesis_dir: str | None, factory: str, check: str, drawn: bool
) -> None:
    (tmp_path / "replay_targets.py").write_text(_TARGETS, encoding="utf-8")
    (tmp_path / "run_suite.py").write_text(textwrap.dedent(_RUN), encoding="utf-8")
    run = _python(tmp_path, hypothesis_dir, "run_suite.py", f"replay_targets:{factory}", check)
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout.splitlines()[-1])
    if hypothesis_dir:
        assert found["hypothesis"] == OLDEST_ALLOWED
    details: str = found["details"]
    snippet = _snippet(details)
    steps = [line for line in snippet.splitlines() if line.startswith("state.")]
    assert steps, details
    assert ("hand-written life" in details) is not drawn
    replayed = _python(tmp_path, hypothesis_dir, "-c", snippet)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "CheckFailure" in replayed.stderr
    what = details.splitlines()[2]  # after the header and the requirement
    assert what in replayed.stderr, replayed.stderr
    # The failure comes at the last step: the replay goes no further than the failure.
    assert f"line {len(snippet.splitlines())}" in replayed.stderr


def test_a_hand_written_life_leaves_out_a_step_whose_precondition_fails() -> None:
    """A target may change the cache itself; a scripted step with nothing to act on is left
    out, as Hypothesis leaves it out, instead of crashing in the suite's own code."""
    from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

    from rtmm_conformance.checks.stateful import _run_script, when

    calls: list[str] = []

    class Life(RuleBasedStateMachine):
        items: list[int]

        def __init__(self) -> None:
            super().__init__()
            self.items = []

        @rule()
        def add(self) -> None:
            calls.append("add")
            self.items.append(1)

        @precondition(when(lambda self: bool(self.items)))
        @rule()
        def remove(self) -> None:
            calls.append("remove")
            self.items.pop()

    _run_script(Life, [("remove", {}), ("add", {}), ("remove", {}), ("remove", {})], True)
    assert calls == ["add", "remove"]
