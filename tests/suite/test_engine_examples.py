"""vLLM's own classes through the adapter, against the known-gaps files of the installed release.

Runs only where vLLM is importable (``.ci/vllm.sh`` installs each tested release with
``tools/install_vllm_cpu.sh``); elsewhere the tests skip and say so. Each tested release
has a known-gaps file per level in ``examples/vllm_*/``. Here the hand-placed cases
alone run (no random examples): enough to see that the adapter builds vLLM's classes,
that every failure they show is listed, and that vLLM's deterministic deviations are
still caught (so a file cannot hide a target that no longer runs). That each file lists
*exactly* what fails at the suite's defaults is ``.ci/vllm.sh``'s strict run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rtmm_conformance import check_model_state
from rtmm_conformance.results import Outcome
from rtmm_protocol.adapters.vllm import TESTED_VERSIONS, installed_vllm_version, load_target

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
VLLM = installed_vllm_version()

pytest.importorskip(
    "vllm.v1.worker.gpu.mm.encoder_runner",
    reason="vLLM is not installed (bash tools/install_vllm_cpu.sh VENV makes a CPU-only one)",
)

LEVELS = [
    pytest.param(
        "vllm_encoder_runner",
        "vllm.v1.worker.gpu.mm.encoder_runner:EncoderRunner",
        {"T3-realtime-guard-semantics", "E3-no-silent-truncation"},
        id="encoder-runner",
    ),
    pytest.param(
        "vllm_model_state",
        "vllm.v1.worker.gpu.model_states.default:DefaultModelState",
        {"T3-realtime-guard-semantics", "E3-no-silent-truncation", "D1-text-only-returns-none"},
        id="model-state",
    ),
]


def _known_gaps(example: str) -> Path:
    path = EXAMPLES / example / f"known-gaps-vllm-{VLLM}.txt"
    if not path.exists():
        pytest.skip(f"no known-gaps file for vLLM {VLLM} (tested releases: {TESTED_VERSIONS})")
    return path


@pytest.mark.parametrize(("example", "spec", "always_caught"), LEVELS)
def test_vllm_fails_only_its_known_gaps(example: str, spec: str, always_caught: set[str]) -> None:
    report = check_model_state(
        load_target(spec).factory, device="cpu", examples=0, xfail=_known_gaps(example)
    )
    assert report.ok, report.table()
    xfailed = {r.check_id for r in report.results if r.outcome is Outcome.XFAILED}
    assert always_caught <= xfailed, f"no longer caught: {sorted(always_caught - xfailed)}"
