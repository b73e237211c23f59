"""The CI scripts' own machinery: a step past its limit leaves nothing running."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

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


# ---------------------------------------------------------------- the GPU script

GPU_SCRIPT = REPO / ".ci" / "gpu"


def _run_gpu_script(
    tmp_path: Path, *args: str, pythonpath: str = ""
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "PYTHONPATH": pythonpath}
    done = subprocess.run(
        ["bash", str(GPU_SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120
    )
    summary_path = out / "gpu-summary.json"
    summary = json.loads(summary_path.read_text("utf-8")) if summary_path.exists() else {}
    return done, summary


def test_gpu_script_dry_run_lists_every_cuda_step_reference_tests_first(tmp_path: Path) -> None:
    done, summary = _run_gpu_script(tmp_path, "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dry run: nothing was run" in done.stdout
    assert summary["result"] == "dry-run"
    names = [step["name"] for step in summary["steps"]]
    steps = {step["name"]: step for step in summary["steps"]}
    assert names[0] == "reference-cuda-tests"
    assert {"suite-cuda-tests", "conformance-reference", "conformance-runner"} <= set(steps)
    assert {"benchmark-bfloat16", "benchmark-float32"} <= set(steps)
    assert "-m cuda" in steps["reference-cuda-tests"]["command"]
    assert "tests/test_cuda_reference.py" in steps["reference-cuda-tests"]["command"]
    for name in ("conformance-reference", "conformance-runner"):
        assert "--conformance-device=cuda" in steps[name]["command"]
    assert "reference_gatherer" in steps["conformance-runner"]["command"]
    assert "--device cuda" in steps["benchmark-bfloat16"]["command"]
    assert all(step["status"] == "not run" for step in steps.values())
    # Every step has a limit, and together they fit the overall deadline (within the 7
    # minutes the script promises), so that no step is ever cut short by it.
    # (The comparison with vLLM, where vLLM is installed, is the one step left out.)
    limits = dict(re.findall(r"\[([a-z0-9-]+), at most (\d+) s\]", done.stdout))
    assert set(limits) == set(steps)
    limits.pop("benchmark-vs-vllm", None)
    deadline = re.search(r"DEADLINE=\$\(\( SECONDS \+ (\d+) \)\)", GPU_SCRIPT.read_text())
    assert deadline is not None
    assert sum(map(int, limits.values())) <= int(deadline.group(1)) < 7 * 60
    # The checks that setsid, ps and pkill are there ran.
    assert "tools: setsid, ps, pkill" in done.stdout
    # One hidden size on the GPU keeps the benchmark steps short.
    for dtype in ("bfloat16", "float32"):
        command = steps[f"benchmark-{dtype}"]["command"]
        assert re.search(r"--hidden-sizes \d+ ", command), command
    # The launch cost on the device: host and device time of each workload's step.
    assert "--host-time" in steps["benchmark-bfloat16"]["command"]


#: The comment table in .ci/gpu: ``#   STEP  LIMIT  CPU  WALL  ...``.
_LIMIT_ROW = re.compile(
    r"^#\s+(?P<step>[a-z0-9-]+)\s+(?P<limit>\d+)\s+(?P<cpu>\d+)\s+(?P<wall>\d+)\b", re.M
)


def test_gpu_script_limits_hold_the_measured_step_times_with_margin(tmp_path: Path) -> None:
    """The script's table of measured step times names every step with its real limit;
    each limit holds the step's CPU time at least 1.5 times, and its longest wall time."""
    done, summary = _run_gpu_script(tmp_path, "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    table = {
        m["step"]: (int(m["limit"]), int(m["cpu"]), int(m["wall"]))
        for m in _LIMIT_ROW.finditer(GPU_SCRIPT.read_text())
    }
    total = table.pop("total")
    steps = {step["name"]: step["limit_seconds"] for step in summary["steps"]}
    steps.pop("benchmark-vs-vllm", None)  # only where vLLM is installed: not measured
    assert set(steps) == set(table), sorted(set(steps) ^ set(table))
    for name, limit in steps.items():
        assert table[name][0] == limit, f"{name}: the table says {table[name][0]} s"
    for name, (limit, cpu, wall) in table.items():
        assert limit >= 1.5 * cpu, f"{name}: {limit} s holds {cpu} s by less than 1.5x"
        assert limit >= wall, f"{name}: {limit} s is less than the {wall} s it took"
    assert total == tuple(sum(row[i] for row in table.values()) for i in range(3))


@pytest.mark.parametrize("tool", ["setsid", "ps", "pkill"])
def test_gpu_script_dry_run_names_a_missing_tool(tmp_path: Path, tool: str) -> None:
    """Without a tool that .ci/run_step.sh needs, the dry run stops and names it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
        for path in Path(folder).glob("*") if Path(folder).is_dir() else []:
            link = bin_dir / path.name
            if path.name != tool and not link.exists():
                link.symlink_to(path)
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "PATH": str(bin_dir)}
    done = subprocess.run(
        ["bash", str(GPU_SCRIPT), "--dry-run"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 5, done.stdout + done.stderr
    assert f"error: {tool} not found on PATH" in done.stdout
    assert "setsid, ps and pkill" in done.stdout


@pytest.mark.parametrize(
    "args", [["--gpu-sizes"], ["--dry-run", "--gpu-sizes"], ["--rehearse-on-cpu", "--other"]]
)
def test_gpu_script_usage_errors_exit_64(tmp_path: Path, args: list[str]) -> None:
    done, _ = _run_gpu_script(tmp_path, *args)
    assert done.returncode == 64
    assert "usage: bash .ci/gpu [--dry-run | --rehearse-on-cpu [--gpu-sizes]]" in done.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without CUDA")
def test_gpu_script_without_cuda_runs_nothing_and_says_why(tmp_path: Path) -> None:
    done, summary = _run_gpu_script(tmp_path)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "no CUDA device" in done.stdout
    assert summary["result"] == "no-cuda"
    assert summary["passed"] is False


def test_gpu_script_names_a_missing_package(tmp_path: Path) -> None:
    # A package that fails to import shadows the installed hypothesis.
    shadow = tmp_path / "shadow" / "hypothesis"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('simulated: not installed')\n")
    done, _ = _run_gpu_script(tmp_path, "--dry-run", pythonpath=str(shadow.parent))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "MISSING: hypothesis" in done.stdout
    assert "installs nothing" in done.stdout


def test_gpu_script_says_when_the_checkout_does_not_import(tmp_path: Path) -> None:
    """A checkout whose package fails to import: exit status 4 (not 2, a missing package)."""
    copy = tmp_path / "checkout"
    (copy / ".ci").mkdir(parents=True)
    shutil.copy(GPU_SCRIPT, copy / ".ci" / "gpu")
    shutil.copy(RUN_STEP, copy / ".ci" / "run_step.sh")
    (copy / "rtmm_protocol").mkdir()
    (copy / "rtmm_protocol" / "__init__.py").write_text("raise RuntimeError('simulated')\n")
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(copy / ".ci" / "gpu"), "--dry-run"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 4, done.stdout + done.stderr
    assert "does not import" in done.stdout


#: Starts a worker through multiprocessing's forkserver (which outlives this process, as
#: the suite's does) that burns one CPU second, then exits with status 3.
_FORKSERVER_BURN = """
import multiprocessing, sys, time

def burn():
    start = time.process_time()
    while time.process_time() - start < 1.0:
        pass

if __name__ == "__main__":
    worker = multiprocessing.get_context("forkserver").Process(target=burn)
    worker.start()
    worker.join()
    sys.exit(3)
"""


def test_cpu_seconds_counts_workers_of_a_forkserver_and_keeps_the_exit_status(
    tmp_path: Path,
) -> None:
    script = tmp_path / "burn.py"
    script.write_text(_FORKSERVER_BURN)
    output = tmp_path / "step.cpu"
    done = subprocess.run(
        [sys.executable, str(REPO / ".ci" / "cpu_seconds.py"), str(output), sys.executable,
         str(script)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr
    assert float(output.read_text()) >= 0.9
