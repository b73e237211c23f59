"""Regenerate the Engines page's reports and renderings, or check them: run with vLLM's Python.

Runs the conformance suite at its defaults (seed, examples), without a known-gaps file so
that every deviation shows, against each target of the page: the bundled reference (both
levels), vLLM's ``EncoderRunner`` and every model state vLLM ships
(``rtmm_protocol.adapters.vllm.in_tree.IN_TREE_STATES``), each by its name alone. It
writes each JSON report to ``reports/`` with the machine's paths removed, then renders
the page's tables with ``render.py``. Run it with the Python of an environment that has
vLLM and this project (``tools/install_vllm_cpu.sh`` makes one)::

    .ci/vllm-venv/bin/python examples/engine_reports/refresh.py            # every report
    .ci/vllm-venv/bin/python examples/engine_reports/refresh.py states/    # those whose
                                                                           # name holds it
    .ci/vllm-venv/bin/python examples/engine_reports/refresh.py --check states/

``--check`` writes nothing: it reruns the named targets and fails when a fresh run reaches
other verdicts than the committed report (``compare.py``); continuous integration runs it
for vLLM's model states. A state whose module needs a package this environment lacks is
left as it is, and said so: its committed report comes from an environment that has the
package (the Engines page says which).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["REPORTS", "RUNS", "STATE_REPORTS", "main"]

HERE = Path(__file__).resolve().parent
REPORTS = HERE / "reports"


def _state_runs() -> dict[str, str]:
    """``states/KEY.json`` -> ``vllm:SPEC`` for every model state vLLM ships that the suite
    can build (``DefaultModelState`` has its report already, ``vllm-model-state.json``)."""
    from rtmm_protocol.adapters.vllm.in_tree import IN_TREE_STATES

    return {
        f"states/{state.key}.json": f"vllm:{state.spec}"
        for state in IN_TREE_STATES
        if not state.not_buildable and not state.spec.endswith(":DefaultModelState")
    }


#: The report of each of vLLM's model states (those that have one), by file name.
STATE_REPORTS = _state_runs()

#: Report file (under ``reports/``) -> the target the suite runs (``--conformance=NAME``).
RUNS = {
    "reference-model-state.json": "rtmm_conformance.targets:reference_model_state",
    "reference-gatherer.json": "rtmm_conformance.targets:reference_gatherer",
    "vllm-encoder-runner.json": "vllm:vllm.v1.worker.gpu.mm.encoder_runner:EncoderRunner",
    "vllm-model-state.json": "vllm:vllm.v1.worker.gpu.model_states.default:DefaultModelState",
    **STATE_REPORTS,
}


def _unavailable(name: str) -> str | None:
    """Why the target ``name`` cannot be loaded here (a package its module imports is
    missing), or ``None`` when it can."""
    if not name.startswith("vllm:"):
        return None
    from rtmm_protocol.adapters.vllm import VllmSpecError, load_target

    try:
        load_target(name.removeprefix("vllm:"))
    except VllmSpecError as error:
        if "not installed here" in str(error):
            return str(error)
        raise
    return None


def _run(name: str, path: Path, check: bool) -> bool:
    """Run the suite on ``name``; write its report to ``path``, or (``check``) compare it
    with the committed one. ``False`` when a check finds a difference."""
    from compare import differences, strip_machine_paths

    from rtmm_conformance import check_model_state

    missing = _unavailable(name)
    if missing is not None:
        print(f"    not run here: {missing}", flush=True)
        return True
    report = check_model_state(name, device="cpu")
    print(f"    {report.summary_line()}", flush=True)
    fresh = json.loads(strip_machine_paths(json.dumps(report.to_json())))
    if check:
        committed = json.loads(path.read_text(encoding="utf-8"))
        lines = differences(committed, fresh)
        for line in lines:
            print(f"    differs: {line}", flush=True)
        return not lines
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fresh, indent=2) + "\n", encoding="utf-8")
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Rerun the targets (all, or those whose report name holds a given text), store or
    check their reports, and re-render the page's tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help="only reports whose name holds it")
    parser.add_argument(
        "--check", action="store_true", help="compare with the committed reports, write nothing"
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    chosen = {
        report: name
        for report, name in RUNS.items()
        if not args.names or any(part in report for part in args.names)
    }
    if not chosen:
        parser.error(f"no report's name holds {' or '.join(args.names)}; reports: {sorted(RUNS)}")
    stale = []
    for report, name in chosen.items():
        print(f"--conformance={name} -> reports/{report}", flush=True)
        if not _run(name, REPORTS / report, args.check):
            stale.append(report)
    if args.check:
        if stale:
            print(
                f"stale: {', '.join(stale)}; regenerate: python {Path(__file__).name} "
                + " ".join(stale),
                file=sys.stderr,
            )
            return 1
        print(f"{len(chosen)} reports: the same verdicts as the committed ones")
        return 0
    subprocess.run([sys.executable, str(HERE / "render.py")], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
