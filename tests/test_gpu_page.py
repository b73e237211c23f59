"""The GPU page shows what a CPU-only user really sees when asking for CUDA."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

PAGE = Path(__file__).resolve().parents[1] / "docs" / "gpu.md"


@pytest.mark.skipif(torch.cuda.is_available(), reason="shows what a machine without CUDA sees")
def test_the_page_quotes_the_usage_error_for_a_missing_cuda_device(tmp_path: Path) -> None:
    quoted = re.search(r"^ERROR: --conformance options: device cuda .*$", PAGE.read_text(), re.M)
    assert quoted is not None
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--conformance",
         "--conformance-device=cuda"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 4, run.stdout + run.stderr
    # The page shows the torch of the machine it was written on; compare the rest.
    expected = re.sub(r"torch \S+ sees", f"torch {torch.__version__} sees", quoted.group(0))
    assert expected in run.stderr.splitlines(), run.stderr
    assert re.search(r"exit status\s+4\b", PAGE.read_text()), "the page names the exit status"
