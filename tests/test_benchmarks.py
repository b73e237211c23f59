"""The benchmark: its baseline is a correct gather, and quick mode runs and reports.

Quick mode checks output correctness only; speed is read from the full run's ratios,
never asserted here.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from support.gather_check import assert_matches_oracle
from support.profiles import example_budget

from rtmm_protocol import EncoderOutputMissingError
from rtmm_protocol.conformance.oracle import oracle_gather
from rtmm_protocol.conformance.strategies import GatherScenario, gather_scenarios

ROOT = Path(__file__).resolve().parents[1]


def _benchmark_module(name: str) -> ModuleType:
    """A module of the ``benchmarks`` package, which lives at the repository root."""
    sys.path.insert(0, str(ROOT))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT))


@settings(max_examples=example_budget(ci=300, dev=40))
@given(scenario=gather_scenarios(), realtime=st.booleans())
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


def test_quick_mode_reports_every_path_agreeing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main = _benchmark_module("benchmarks.__main__").main
    paths = _benchmark_module("benchmarks.gather_bench").PATHS
    schema = _benchmark_module("benchmarks.report").SCHEMA

    threads = torch.get_num_threads()
    output = tmp_path / "quick.json"
    try:
        status = main(["--quick", "--output", str(output), "--budget", "0.01"])
    finally:
        torch.set_num_threads(threads)
    assert status == 0
    printed = capsys.readouterr().out
    assert "all outputs match the baseline: yes" in printed
    data = json.loads(output.read_text("utf-8"))
    assert data["schema"] == schema
    assert data["mode"] == "quick"
    assert data["all_outputs_match"] is True
    assert set(data["paths"]) == set(paths)
    kinds = {record["kind"] for record in data["scenarios"]}
    assert kinds == {"realtime-decode", "non-realtime-mixed", "chunked-prefill", "image-prefill"}
    for record in data["scenarios"]:
        assert record["outputs_match"] is True
        for path in paths:
            assert record[f"{path}_us"] > 0
            if path != "loop":
                ratio = record["loop_us"] / record[f"{path}_us"]
                assert record[f"{path}_x"] == pytest.approx(ratio, rel=0.02, abs=0.01)
    assert [m["path"] for m in data["merge"]] == ["copy", "rows_scatter", "slot_gather"]
    assert all(m["outputs_match"] and m["effective_gbps"] > 0 for m in data["merge"])
    assert {p["axis"] for p in data["scaling"]} == {"requests", "features"}
    assert "plan_vs_requests" in data["scaling_exponents"]
    assert data["targets"] == []  # quick sizes say nothing about speed
    for plot in data["plots"]:
        assert (tmp_path / plot).stat().st_size > 0
    # Every list is of flat records, which the docs render as tables.
    for key in ("scenarios", "merge", "scaling"):
        assert all(not isinstance(v, (dict, list)) for r in data[key] for v in r.values())
