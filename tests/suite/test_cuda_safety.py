"""The process the user starts never initialises CUDA: a run stays CUDA-safe on a GPU machine.

``torch.cuda.is_available()`` (without ``PYTORCH_NVML_BASED_CUDA_CHECK=1``) initialises
the CUDA driver, after which a forked child can no longer use CUDA. These tests run the
suite's entry points in a torch that reports itself as a CUDA build, with spies on every
function that initialises the driver, and fail if one is called in the process the user
started (worker processes may call them: that is where the checks run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.extras import conformance_plugin_args

#: Loaded at start-up by every Python process of the run (as ``sitecustomize``): makes
#: torch look like a CUDA build with no device, and logs each call of a function that
#: would initialise the CUDA driver, and each process start or fork, with its pid.
_SPIES = """
import json, os

_LOG = os.environ["RTMM_CUDA_SPY_LOG"]


def _note(event):
    with open(_LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps({"pid": os.getpid(), "event": event}) + "\\n")


_note("start")
os.register_at_fork(after_in_child=lambda: _note("fork"))

import torch
import torch.cuda
import torch.version


def _spy(name, value):
    def spy(*args, **kwargs):
        _note("cuda:" + name)
        return value

    return spy


torch._C._cuda_getDeviceCount = _spy("_cuda_getDeviceCount", 0)  # a "CUDA build"
torch.version.cuda = "12.8"
for _name, _value in [
    ("is_available", False),
    ("init", None),
    ("_lazy_init", None),
    ("device_count", 0),
    ("current_device", 0),
    ("get_device_properties", None),
    ("get_device_name", "spy"),
    ("get_device_capability", (9, 0)),
    ("synchronize", None),
    ("set_device", None),
    ("mem_get_info", (0, 0)),
]:
    setattr(torch.cuda, _name, _spy(_name, _value))
"""

#: Most worker processes one reference run may start.
MAX_WORKERS = 8

REPO = Path(__file__).resolve().parents[2]


def _run_spied(
    tmp_path: Path, *command: str, cwd: Path | None = None
) -> tuple[int, list[dict[str, object]], str]:
    """Run ``command`` with the spies (in ``cwd``, else ``tmp_path``); return its pid, the
    spy log and its output."""
    spies = tmp_path / "spies"
    spies.mkdir(exist_ok=True)
    (spies / "sitecustomize.py").write_text(_SPIES, encoding="utf-8")
    log = tmp_path / "spy-log.jsonl"
    log.write_text("", encoding="utf-8")
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(spies), *sys.path]),
        "RTMM_CUDA_SPY_LOG": str(log),
    }
    environment.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
    process = subprocess.Popen(
        [sys.executable, *command],
        cwd=cwd or tmp_path,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output
    events = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert any(e["pid"] == process.pid and e["event"] == "start" for e in events), output
    return process.pid, events, output


def _cuda_calls(events: list[dict[str, object]], pid: int) -> list[object]:
    return [e["event"] for e in events if e["pid"] == pid and str(e["event"]).startswith("cuda:")]


def test_the_pytest_plugin_never_initialises_cuda_in_the_pytest_process(tmp_path: Path) -> None:
    pid, events, output = _run_spied(
        tmp_path, "-m", "pytest", *conformance_plugin_args(), "-p", "no:cacheprovider", "-q",
        "--conformance", "--conformance-examples=0",
    )  # fmt: skip
    assert "0 failed (MUST)" in output
    assert _cuda_calls(events, pid) == []
    # The checks ran in workers, which did ask CUDA (and were told: no device).
    assert any(str(e["event"]).startswith("cuda:") for e in events if e["pid"] != pid)
    workers = {e["pid"] for e in events if e["event"] == "fork"}
    assert 1 <= len(workers) <= MAX_WORKERS, events


def test_a_run_from_the_repository_root_never_initialises_cuda_in_the_pytest_process(
    tmp_path: Path,
) -> None:
    """From the repository root (as ``.ci/gpu`` runs the suite) pytest also loads
    ``tests/conftest.py``, whose hooks see the conformance checks: it must not ask CUDA."""
    pid, events, output = _run_spied(
        tmp_path, "-m", "pytest", *conformance_plugin_args(), "-p", "no:cacheprovider", "-q",
        "--trace-config", "--conformance", "--conformance-examples=0", "-k", "T1 or G5",
        cwd=REPO,
    )  # fmt: skip
    assert str(REPO / "tests" / "conftest.py") in output, "tests/conftest.py was not loaded"
    assert "failed (MUST)" in output
    assert _cuda_calls(events, pid) == []


def test_check_model_state_never_initialises_cuda_in_the_calling_process(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        from rtmm_conformance import check_model_state

        if __name__ == "__main__":
            report = check_model_state(
                "rtmm_conformance.targets:reference_model_state", examples=0
            )
            print(report.summary_line())
        """
    )
    (tmp_path / "run_suite.py").write_text(script, encoding="utf-8")
    pid, events, output = _run_spied(tmp_path, "run_suite.py")
    assert "0 failed (MUST)" in output
    assert _cuda_calls(events, pid) == []


def test_the_command_line_never_initialises_cuda(tmp_path: Path) -> None:
    from rtmm_conformance import check_model_state

    check_model_state(
        "rtmm_conformance.targets:reference_gatherer", device="cpu", examples=0
    ).write_json(tmp_path / "report.json")
    pid, events, _ = _run_spied(tmp_path, "-m", "rtmm_conformance", "matrix", "report.json")
    assert _cuda_calls(events, pid) == []
    if not Path(sys.executable).with_name("mypy").exists():
        pytest.skip("typecheck needs mypy (the typecheck extra)")
    pid, events, _ = _run_spied(
        tmp_path, "-m", "rtmm_protocol", "typecheck", "--no-pyright",
        "rtmm_protocol.reference:ReferenceModelState",
    )  # fmt: skip
    assert _cuda_calls(events, pid) == []
