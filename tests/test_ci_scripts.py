"""The CI scripts' own machinery: a step past its limit leaves nothing running."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUN_STEP = REPO / ".ci" / "run_step.sh"

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("setsid") is None,
    reason="the CI scripts run on Linux (setsid, ps, pkill)",
)

#: A step whose child leaves the step's process group (as a worker process does) and
#: sleeps; the child writes its pid first.
_ESCAPING_CHILD = """
import os, sys, time
os.setpgid(0, 0)
with open(sys.argv[1], "w") as marker:
    marker.write(str(os.getpid()))
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def _bash(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"source {RUN_STEP}; {script}"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_step_past_its_limit_is_killed_with_every_process_below_it(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    (tmp_path / "child.py").write_text(_ESCAPING_CHILD)
    step = f"{sys.executable} {tmp_path / 'child.py'} {marker} & sleep 600"
    started = time.monotonic()
    done = _bash(f"run_step '{step}' 5 {tmp_path / 'step.log'}; echo status=$?")
    assert "status=124" in done.stdout, done.stdout + done.stderr
    assert time.monotonic() - started < 30
    child = int(marker.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), "the child that left the step's process group survived"


def test_a_step_within_its_limit_gives_its_exit_status(tmp_path: Path) -> None:
    done = _bash(f"run_step 'echo hello; exit 7' 30 {tmp_path / 'step.log'}; echo status=$?")
    assert "status=7" in done.stdout
    assert (tmp_path / "step.log").read_text() == "hello\n"
