"""Regenerate the Engines page's reports and renderings: one command, run with vLLM's Python.

Runs the conformance suite at its defaults (seed, examples), without a known-gaps file so
that every deviation shows, against each target of the page, writes its JSON report to
``reports/`` with the machine's paths removed, then renders ``matrix.md`` and
``causes.md`` with ``render.py``. Run it with the Python of an environment that has vLLM
and this project (``tools/install_vllm_cpu.sh`` makes one)::

    .ci/vllm-venv/bin/python examples/engine_reports/refresh.py

Continuous integration does not rerun this: ``.ci/vllm.sh`` runs the vLLM targets with
their known-gaps files and compares each report with the committed one
(``compare.py``), which fails when this command was due.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["REPORTS", "RUNS", "main"]

HERE = Path(__file__).resolve().parent
REPORTS = HERE / "reports"

#: Report file -> the target spec the suite runs (``--conformance=SPEC``).
RUNS = {
    "reference-model-state.json": "rtmm_conformance.targets:reference_model_state",
    "reference-gatherer.json": "rtmm_conformance.targets:reference_gatherer",
    "vllm-encoder-runner.json": "vllm:vllm.v1.worker.gpu.mm.encoder_runner:EncoderRunner",
    "vllm-model-state.json": "vllm:vllm.v1.worker.gpu.model_states.default:DefaultModelState",
}


def main() -> int:
    """Rerun every target, store its report, re-render the page's tables."""
    sys.path.insert(0, str(HERE))
    from compare import strip_machine_paths

    from rtmm_conformance import check_model_state

    REPORTS.mkdir(exist_ok=True)
    for name, spec in RUNS.items():
        print(f"--conformance={spec} -> reports/{name}", flush=True)
        report = check_model_state(spec, device="cpu")
        print(f"    {report.summary_line()}", flush=True)
        path = REPORTS / name
        report.write_json(path)
        path.write_text(strip_machine_paths(path.read_text(encoding="utf-8")), encoding="utf-8")
    subprocess.run([sys.executable, str(HERE / "render.py")], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
