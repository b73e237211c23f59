"""The GPU page shows what a CPU-only user really sees when asking for CUDA."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.extras import conformance_plugin_args

PAGE = Path(__file__).resolve().parents[1] / "docs" / "gpu.md"


@pytest.mark.skipif(torch.cuda.is_available(), reason="shows what a machine without CUDA sees")
def test_the_page_quotes_the_usage_error_for_a_missing_cuda_device(tmp_path: Path) -> None:
    quoted = re.search(r"^ERROR: --conformance options: device cuda .*$", PAGE.read_text(), re.M)
    assert quoted is not None
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *conformance_plugin_args(), "-p", "no:cacheprovider",
         "--conformance", "--conformance-device=cuda"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 4, run.stdout + run.stderr
    # The page shows the torch of the machine it was written on; compare the rest.
    expected = re.sub(r"torch \S+ sees", f"torch {torch.__version__} sees", quoted.group(0))
    assert expected in run.stderr.splitlines(), run.stderr
    assert re.search(r"exit status\s+4\b", PAGE.read_text()), "the page names the exit status"


def test_the_page_names_the_gpu_scripts_modes_and_the_tools_it_checks() -> None:
    page = " ".join(PAGE.read_text().split())  # one line: markdown wraps anywhere
    script = (PAGE.parents[1] / ".ci" / "gpu").read_text()
    usage = re.search(r'usage="usage: bash \.ci/gpu ([^"]+)"', script)
    assert usage is not None
    for flag in re.findall(r"--[a-z-]+", usage.group(1)):
        assert flag in page, f"the page does not name {flag}"
    for mode in ("--dry-run", "--rehearse-on-cpu", "--rehearse-on-cpu --gpu-sizes"):
        assert f"`bash .ci/gpu {mode}`" in page
    for tool in ("setsid", "ps", "pkill"):
        assert f"`{tool}`" in page
    assert "(exit status 5)" in page
    assert re.search(r"^# .*\b5 setsid,$", script, re.M), "the script's header says 5, too"


def test_the_page_names_the_cuda_errors_that_end_a_worker() -> None:
    from rtmm_conformance.running import verdict

    page = " ".join(PAGE.read_text().split())
    for text in verdict._CUDA_MESSAGES[:2]:  # the messages that make a RuntimeError one
        assert f"`{text}`" in page
    for name in ("torch.AcceleratorError", "torch.cuda.CudaError"):
        assert f"`{name}`" in page
