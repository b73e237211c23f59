"""The benchmark harness: its baseline and copy floor are correct, both comparisons run
and report, the targets are judged right, and the GPU script fails clearly without CUDA.

Quick mode checks output correctness only; speed is read from the full run's ratios,
never asserted here.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.gather_check import assert_matches_oracle
from support.profiles import example_budget

from rtmm_protocol import EncoderOutputMissingError
from rtmm_protocol.testing.oracle import oracle_gather
from rtmm_protocol.testing.scenario import GatherScenario
from rtmm_protocol.testing.strategies import gather_scenarios

ROOT = Path(__file__).resolve().parents[1]


def _benchmark_module(name: str) -> ModuleType:
    """A module of the ``benchmarks`` package, which lives at the repository root."""
    sys.path.insert(0, str(ROOT))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT))


@settings(max_examples=example_budget(ci=300, dev=40))
@given(scenario=gather_scenarios(zero_scheduled=True), realtime=st.booleans())
def test_loop_baseline_matches_oracle(scenario: GatherScenario, realtime: bool) -> None:
    loop_gather = _benchmark_module("benchmarks.baseline").loop_gather
    cache = scenario.build_cache()
    arrays = scenario.arrays()
    args = (
        scenario.req_ids,
        scenario.num_tokens,
        arrays["num_scheduled_tokens"],
        arrays["query_start_loc"],
        arrays["prefill_lens"],
        arrays["num_computed_tokens"],
        scenario.draft_lookahead,
    )
    expected = oracle_gather(
        cache.mm_features,
        cache.encoder_outputs,
        is_realtime=realtime,
        req_ids=scenario.req_ids,
        num_scheduled_tokens=arrays["num_scheduled_tokens"],
        query_start_loc=arrays["query_start_loc"],
        prefill_lens=arrays["prefill_lens"],
        num_computed_tokens=arrays["num_computed_tokens"],
        draft_lookahead=scenario.draft_lookahead,
    )
    if expected.raises:
        with pytest.raises(EncoderOutputMissingError):
            loop_gather(cache.mm_features, cache.encoder_outputs, realtime, *args)
        return
    result = loop_gather(cache.mm_features, cache.encoder_outputs, realtime, *args)
    assert_matches_oracle(result, expected, cache.encoder_outputs, scenario.hidden_size)


def _quick_main(args: list[str]) -> int:
    main = _benchmark_module("benchmarks.__main__").main
    threads = torch.get_num_threads()
    try:
        status: int = main(["--quick", "--budget", "0.01", *args])
    finally:
        torch.set_num_threads(threads)
    return status


def _flat(records: list[dict[str, object]]) -> bool:
    """Every record is flat: the docs render each list as a table."""
    return all(not isinstance(v, (dict, list)) for r in records for v in r.values())


def test_quick_loop_comparison_reports_every_path_agreeing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = _benchmark_module("benchmarks.gather_bench").PATHS
    schema = _benchmark_module("benchmarks.report").SCHEMA
    output = tmp_path / "quick.json"
    assert _quick_main(["--output", str(output)]) == 0
    assert "all outputs match: yes" in capsys.readouterr().out
    data = json.loads(output.read_text("utf-8"))
    assert (data["schema"], data["mode"], data["comparison"]) == (schema, "quick", "loop")
    assert data["all_outputs_match"] is True
    assert set(data["paths"]) == set(paths)
    kinds = {record["kind"] for record in data["scenarios"]}
    assert kinds == {
        "realtime-decode",
        "long-streams",
        "non-realtime-mixed",
        "chunked-prefill",
        "image-prefill",
    }
    for record in data["scenarios"]:
        assert record["outputs_match"] is True
        for path in paths:
            assert record[f"{path}_ms"] > 0
        for path, baseline in (("list", "loop"), ("rows", "loop_rows")):
            ratio = record[f"{baseline}_ms"] / record[f"{path}_ms"]
            assert record[f"{path}_x"] == pytest.approx(ratio, rel=0.05, abs=0.01)
    assert {p["axis"] for p in data["scaling"]} == {"requests", "features"}
    assert "rows_vs_requests" in data["scaling_exponents"]
    assert data["targets"] == []  # quick sizes say nothing about speed
    for plot in data["plots"]:
        assert (tmp_path / plot).stat().st_size > 0
    assert _flat(data["scenarios"])
    assert _flat(data["scaling"])


def test_vs_vllm_without_vllm_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A None entry in sys.modules makes the import fail, whether or not vLLM is installed.
    monkeypatch.setitem(sys.modules, "vllm", None)
    output = tmp_path / "vs.json"
    assert _quick_main(["--vs-vllm", "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert "vLLM 0.33.0" in err
    assert "pip install vllm==0.33.0" in err
    assert "python -m benchmarks --vs-vllm" in err
    assert not output.exists()


def test_vs_vllm_quick_agrees_with_vllm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip(
        "vllm.v1.worker.gpu.mm.encoder_runner",
        reason="vLLM is not importable here (run the tests in an environment with vLLM 0.33.0)",
    )
    peer_paths = _benchmark_module("benchmarks.peer_bench").PEER_PATHS
    output = tmp_path / "vs.json"
    assert _quick_main(["--vs-vllm", "--output", str(output)]) == 0
    assert "all outputs match: yes" in capsys.readouterr().out
    data = json.loads(output.read_text("utf-8"))
    assert (data["mode"], data["comparison"]) == ("quick", "vllm")
    assert data["machine"]["vllm"]
    kinds = {record["kind"] for record in data["vs_vllm"]}
    assert kinds == {"realtime-decode", "long-streams", "chunked-prefill"}
    for record in data["vs_vllm"]:
        assert record["outputs_match"] is True
        assert all(record[f"{path}_ms"] > 0 for path in peer_paths)
        ratio = record["vllm_step_ms"] / record["ours_step_ms"]
        assert record["step_x"] == pytest.approx(ratio, rel=0.05, abs=0.01)
    assert data["targets"] == []
    assert _flat(data["vs_vllm"])


def test_copy_floor_copies_the_gathered_rows() -> None:
    scenarios = _benchmark_module("benchmarks.scenarios")
    loop_gather = _benchmark_module("benchmarks.baseline").loop_gather
    copy_floor = _benchmark_module("benchmarks.copy_floor")
    for workload in (
        scenarios.realtime_decode(3, (5, 9), 4, hidden_size=16),
        scenarios.image_prefill(2, 40, image_length=64, row_length=8, hidden_size=16),
    ):
        floor = copy_floor.CopyFloor(workload)
        for step in range(len(workload.steps)):
            pieces, _ = loop_gather(
                workload.mm_features,
                workload.encoder_outputs,
                workload.realtime,
                *workload.gather_args(step),
            )
            assert torch.equal(floor.copy(step), torch.cat(pieces))
            assert floor.num_rows(step) == sum(int(p.shape[0]) for p in pieces)


def test_workload_cache_is_filled_as_vllm_fills_it() -> None:
    scenarios = _benchmark_module("benchmarks.scenarios")
    workload = scenarios.realtime_decode(2, (3, 3), 8, hidden_size=8)
    cache = workload.encoder_cache()
    for req_id, features in workload.mm_features.items():
        assert type(cache.mm_features[req_id]) is list
        assert cache.mm_features[req_id] == features
        assert cache.mm_features[req_id] is not features
    assert all(
        cache.encoder_outputs[key] is value for key, value in workload.encoder_outputs.items()
    )


def test_realtime_decode_rejects_bad_feature_counts() -> None:
    scenarios = _benchmark_module("benchmarks.scenarios")
    with pytest.raises(ValueError, match="features_per_request"):
        scenarios.realtime_decode(2, (5, 3), 8)


def _peer_result(kind: str, requests: int, hidden: int, ours_step_ms: float) -> object:
    peer_bench = _benchmark_module("benchmarks.peer_bench")
    medians = {path: 1000.0 for path in peer_bench.PEER_PATHS}
    medians["vllm_step"] = 10000.0
    medians["ours_step"] = ours_step_ms * 1000
    medians["vllm_rows"] = 30000.0
    medians["copy_floor"] = 400.0
    return peer_bench.PeerResult(
        name=kind,
        kind=kind,
        params={"num_requests": requests, "chunk": 512, "features_max": 1000},
        hidden_size=hidden,
        dtype="float32",
        device="cpu",
        num_tokens=requests,
        num_features=requests,
        num_rows=requests,
        repeats=3,
        median_us=medians,
        outputs_match=True,
    )


def test_targets_are_judged_on_the_stated_width_and_sizes() -> None:
    report = _benchmark_module("benchmarks.report")
    run = report.Report(mode="full", comparison="vllm", machine={})
    run.peer = [
        _peer_result("realtime-decode", 1024, 1280, 0.5),  # step 20x: no goal any more
        _peer_result("realtime-decode", 256, 1280, 5.0),  # step 2x: missed
        _peer_result("realtime-decode", 1024, 4096, 5.0),  # another width: floor only
        _peer_result("chunked-prefill", 8, 1280, 4.0),  # step 2.5x
    ]
    targets = {t["target"]: t for t in run.target_records()}
    # The step at 1,024 streams (10x) and its rows (25x) are withdrawn goals.
    assert "decode R=1024, step" not in targets
    assert "decode R=1024, rows" not in targets
    assert targets["decode R=256, step"]["met"] is False
    assert targets["decode R=256, step"]["measured"] == pytest.approx(2)
    assert targets["prefill 8x512, step"]["met"] is True
    # rows / floor = 1000 / 400, judged wherever the rows reach 4 MiB: 1024 rows of 1280
    # or 4096 floats, not 256 rows of 1280 or 8 of them.
    floor = [t for t in targets.values() if "copy floor" in str(t["target"])]
    assert [t["target"] for t in floor] == [
        "decode R=1024, h=1280: rows / copy floor (5.0 MiB)",
        "decode R=1024, h=4096: rows / copy floor (16.0 MiB)",
    ]
    assert all(t["met"] is False for t in floor)
    assert report.Report(mode="quick", comparison="vllm", machine={}).target_records() == []


# ---------------------------------------------------------------- the performance page


def _results_hook() -> ModuleType:
    pytest.importorskip("mkdocs", reason="the docs extra (mkdocs) is not installed")
    path = ROOT / "docs" / "_hooks" / "benchmark_results.py"
    spec = importlib.util.spec_from_file_location("rtmm_docs_benchmark_results_page", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("comparison", ["vllm", "loop", "against", "step-profile"])
def test_committed_results_render_as_narrow_captioned_tables(comparison: str) -> None:
    hook = _results_hook()
    chosen = hook.choose_results(ROOT / "benchmarks" / "results", comparison)
    assert chosen is not None, f"no committed full run of the {comparison} comparison"
    path, data = chosen
    assert data["mode"] == "full"
    assert data.get("all_outputs_match", True) is True  # the profile compares no outputs
    assert "load_average_start" in data["machine"]
    for plot in data.get("plots", []):
        assert (path.parent / plot).is_file()
    page = hook.render_results(data, path.name) + hook.render_machine(data)
    tables = [line for line in page.splitlines() if line.startswith("| ")]
    headers = [line for line in tables if not any(c.isdigit() for c in line)]
    assert tables
    # Few columns (the text column is 720 px wide), no empty header, one caption per table.
    assert max(line.count(" | ") + 1 for line in tables) <= 7
    assert all(cell.strip() for line in headers for cell in line.strip("|").split("|"))
    separators = [line for line in tables if line.startswith("| --- ")]
    assert page.count("<figcaption>") == len(separators)
    assert "elapsed_s" not in page
    # One number format, without exponents.
    assert "e+" not in page
    assert "e-0" not in page


def _scratch_repo(tmp_path: Path) -> Path:
    """A git repository holding a copy of the package, committed as it is now."""
    repo = tmp_path / "scratch"
    shutil.copytree(
        ROOT / "rtmm_protocol", repo / "rtmm_protocol", ignore=shutil.ignore_patterns("__pycache__")
    )
    git = ["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "base"], check=True)
    return repo


def _plant(repo: Path, module: str, anchor: str, replacement: str) -> None:
    path = repo / "rtmm_protocol" / "reference" / module
    text = path.read_text("utf-8")
    assert anchor in text, f"{module} no longer holds {anchor!r}: plant elsewhere"
    path.write_text(text.replace(anchor, replacement, 1), "utf-8")


def _against(repo: Path) -> list[Any]:
    against = _benchmark_module("benchmarks.against")
    results, text = against.run_against(
        "HEAD",
        quick=True,
        rounds=3,
        budget_s=0.05,
        workloads=["decode-4"],
        repo=repo,
        package_root=repo,
    )
    assert "new/old" in text
    worktrees = subprocess.run(
        ["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert len(worktrees) == 1  # the temporary checkout of the old side is gone
    return list(results)


def test_against_sees_a_slowdown_planted_in_the_hot_path(tmp_path: Path) -> None:
    """The committed copy is the old side, the copy with a sleep in plan_gather the new."""
    repo = _scratch_repo(tmp_path)
    anchor = "    lanes = table.sync(cache.mm_features, req_ids)\n"
    _plant(repo, "gather_planner.py", anchor, "    __import__('time').sleep(0.003)\n" + anchor)
    (result,) = _against(repo)
    assert result.outputs_match
    for path in ("list", "rows", "step", "plan"):
        assert len(result.ratios[path]) == 3
        assert result.ratio(path) < 1, (path, result.ratios[path])


def test_against_compares_outputs(tmp_path: Path) -> None:
    """Rows doubled on the new side: the paths that return rows disagree with the old."""
    repo = _scratch_repo(tmp_path)
    anchor = "return torch.index_select(storage, 0, positions, out=out)"
    _plant(repo, "gather_plan.py", anchor, anchor + ".mul_(2)")
    (result,) = _against(repo)
    assert not result.outputs_match


def test_against_an_unknown_revision_is_a_clear_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _quick_main(["--against", "no-such-revision-anywhere"]) == 2
    assert "--against 'no-such-revision-anywhere': no such commit" in capsys.readouterr().err


def test_no_benchmark_module_imports_the_command_line() -> None:
    """``benchmarks/__main__.py`` imports the comparisons, never the other way round."""
    importers = []
    for path in sorted((ROOT / "benchmarks").glob("*.py")):
        if path.name == "__main__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module is not None:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if any(name.startswith("benchmarks.__main__") for name in names):
                importers.append(path.name)
    assert importers == []


def test_host_time_stops_as_the_call_returns_and_reads_the_device_after_a_sync() -> None:
    """On CUDA the host time is the launch cost: no synchronization inside it, the device
    idle at its start, the end event recorded after the call and read after a sync.
    Pinned here with spies, as the CPU cannot run CUDA."""
    host_time = _benchmark_module("benchmarks.host_time")
    log: list[str] = []
    ticks = iter(range(100))

    class Event:
        def __init__(self) -> None:
            self.name = f"event{len([e for e in log if e.startswith('new')])}"
            log.append(f"new {self.name}")

        def record(self) -> None:
            log.append(f"record {self.name}")

        def elapsed_time(self, end: object) -> float:
            log.append("elapsed")
            return 2.0  # milliseconds

    def clock() -> float:
        log.append("clock")
        return float(next(ticks))

    host, device = host_time.time_calls(
        lambda k: log.append(f"call {k}"),
        2,
        synchronize=lambda: log.append("sync"),
        event=Event,
        clock=clock,
    )
    assert log[:11] == [
        "sync",
        "new event0",
        "record event0",
        "clock",
        "call 0",
        "clock",
        "new event1",
        "record event1",
        "sync",
        "elapsed",
        "sync",
    ]
    assert host == [1.0, 1.0]
    assert device == [0.002, 0.002]
    # On the CPU: nothing to synchronize, no device time.
    host, device = host_time.time_calls(lambda k: k, 3, synchronize=None, event=None)
    assert len(host) == 3
    assert device is None


def test_host_time_quick_run_reports_both_steps_agreeing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "host.json"
    assert _quick_main(["--host-time", "--output", str(output)]) == 0
    assert "Host and device time of a whole step" in capsys.readouterr().out
    records = json.loads(output.read_text("utf-8"))["host_time"]
    assert len(records) == 5
    for record in records:
        assert record["outputs_match"] is True
        assert record["ref_host_us"] > 0
        assert record["loop_host_us"] > 0
        assert record["ref_device_us"] is None  # the CPU has no device time
    assert _flat(records)


def test_step_profile_reports_the_limit_and_step_over_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    step_profile = _benchmark_module("benchmarks.step_profile")
    output = tmp_path / "profile.json"
    args = ["--quick", "--steps", "2", "--hidden-sizes", "32", "--evict-mib", "1"]
    threads = torch.get_num_threads()
    try:
        assert step_profile.main([*args, "--output", str(output)]) == 0
    finally:
        torch.set_num_threads(threads)
    printed = capsys.readouterr().out
    assert "step/limit" in printed
    assert "load average" in printed
    data = json.loads(output.read_text("utf-8"))
    assert (data["mode"], data["comparison"]) == ("quick", "step-profile")
    records = data["step_profile"]
    assert [r["hidden_size"] for r in records] == [32, 32, 32]
    for r in records:
        limit = sum(r[f"{part}_us"] for part in step_profile.LIMIT_PARTS)
        assert r["limit_us"] == pytest.approx(limit, abs=0.3)
        assert r["step_over_limit"] == pytest.approx(r["step_us"] / r["limit_us"], rel=0.01)
        assert "target" not in r  # quick sizes are judged against nothing
    assert _flat(records)


def test_cold_caches_take_a_copy_of_twice_the_last_level_cache() -> None:
    timing = _benchmark_module("benchmarks.timing")
    llc = timing.last_level_cache_bytes()
    cold = timing.Eviction("cold")
    assert cold.mib >= 64
    if llc is not None:
        assert cold.mib >= min(2 * llc >> 20, 1024)
    assert timing.Eviction("warm").mib == 8
    with pytest.raises(ValueError, match="--caches must be one of cold, warm"):
        timing.Eviction("lukewarm")
    with pytest.raises(ValueError, match="--evict-mib must be positive"):
        timing.Eviction("cold", 0)


def test_cold_applies_to_against_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _quick_main(["--cold"])
    assert "--cold applies to --against only" in capsys.readouterr().err


def test_the_performance_page_marks_every_results_section() -> None:
    """Each comparison the hook renders has its spot on the page."""
    hook = _results_hook()
    page = (ROOT / "docs" / "performance.md").read_text("utf-8")
    for marker in hook.MARKERS:
        assert page.count(marker) == 1, marker
