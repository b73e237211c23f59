"""The benchmark's outputs: a printed table, a JSON file of flat records, a scaling plot.

JSON layout (``schema`` ``rtmm-protocol-benchmark/1``); every list holds flat records so
the docs can render each as a table:

* ``mode``, ``created``, ``elapsed_s``, ``all_outputs_match`` and ``machine`` (platform,
  versions, threads, load average at start and end);
* ``scenarios``: per workload the medians ``loop_us``, ``plan_us``, ``plan_rows_us``,
  ``list_us`` (microseconds), the ratios ``plan_x``, ``plan_rows_x``, ``list_x``
  (loop median over the path's), sizes, repeats and ``outputs_match``;
* ``merge``: per path (``copy``, ``rows_scatter``, ``slot_gather``) the median, the
  effective and moved bandwidth (GB/s) and their ratios to the copy's;
* ``scaling``: one record per sweep point (``axis`` ``requests`` or ``features``),
  and ``scaling_exponents``, the log-log slopes of each path over each sweep;
* ``targets``: each goal with the measured value and whether it is met (full mode only;
  quick sizes say nothing about speed);
* ``plots``: file names of the plots written next to the JSON.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from benchmarks.gather_bench import PATHS, GatherResult
from benchmarks.merge_bench import MergeResult
from benchmarks.scaling import ScalingPoint, growth_exponent

__all__ = ["SCHEMA", "Report", "machine_info", "write_plot"]

SCHEMA = "rtmm-protocol-benchmark/1"
_TIMED = [name for name in PATHS if name != "loop"]


def machine_info() -> dict[str, object]:
    """What the figures depend on: platform, versions, threads, load."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "numpy": np.__version__,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
    }


@dataclass
class Report:
    """Everything one run measured, turned into tables and JSON."""

    mode: str
    machine: dict[str, object]
    scenarios: list[GatherResult] = field(default_factory=list)
    merge: MergeResult | None = None
    scaling: list[ScalingPoint] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    # ------------------------------------------------------------------ records

    def scenario_records(self) -> list[dict[str, object]]:
        """One flat record per workload."""
        records = []
        for r in self.scenarios:
            record: dict[str, object] = {
                "scenario": r.name,
                "kind": r.kind,
                "tokens": r.num_tokens,
                "features": r.num_features,
                "rows": r.num_rows,
                "pieces": r.num_pieces,
                "repeats": r.repeats,
                "first_call_ms": round(r.first_call_ms, 2),
            }
            record.update({f"{n}_us": round(t, 1) for n, t in r.median_us.items()})
            record.update({f"{n}_x": round(x, 2) for n, x in r.ratios.items()})
            record["outputs_match"] = r.outputs_match
            records.append(record)
        return records

    def merge_records(self) -> list[dict[str, object]]:
        """One flat record per merge path, the copy reference first."""
        m = self.merge
        if m is None:
            return []
        passes = {"copy": 1, "rows_scatter": 2, "slot_gather": 1}
        return [
            {
                "path": path,
                "rows": m.num_rows,
                "hidden_size": m.hidden_size,
                "mib": round(m.bytes / 2**20, 1),
                "median_ms": round(m.median_ms[path], 3),
                "effective_gbps": round(m.gbps(path), 2),
                "moved_gbps": round(m.gbps(path, passes[path]), 2),
                "effective_ratio": round(m.ratio(path), 3),
                "moved_ratio": round(m.ratio(path, passes[path]), 3),
                "outputs_match": m.outputs_match,
            }
            for path in passes
        ]

    def scaling_records(self) -> list[dict[str, object]]:
        """One flat record per sweep point."""
        return [
            {
                "axis": p.axis,
                "requests": p.result.params["num_requests"],
                "features_per_request": p.result.params["features_per_request"],
                **{f"{n}_us": round(t, 1) for n, t in p.result.median_us.items()},
            }
            for p in self.scaling
        ]

    def scaling_exponents(self) -> dict[str, float]:
        """Log-log slope of each path over each sweep (1: linear, 0: flat)."""
        slopes = {}
        for axis in ("requests", "features"):
            for path in PATHS:
                slope = growth_exponent(self.scaling, axis, path)
                if slope is not None:
                    slopes[f"{path}_vs_{axis}"] = round(slope, 3)
        return slopes

    def target_records(self) -> list[dict[str, object]]:
        """The performance goals, each with its measured value (full mode only)."""
        if self.mode != "full":
            return []
        targets: list[dict[str, object]] = []

        def ratio_goal(label: str, kind: str, requests: int | None, path: str, goal: float) -> None:
            picked = [
                r
                for r in self.scenarios
                if r.kind == kind and (requests is None or r.params.get("num_requests") == requests)
            ]
            if picked:
                worst = min(r.ratios[path] for r in picked)
                targets.append(_goal(label, path, f">= {goal:g}x", worst, worst >= goal))

        for path in ("plan", "plan_rows"):
            ratio_goal("realtime decode, R=1024 (worst F)", "realtime-decode", 1024, path, 50)
            ratio_goal("realtime decode, R=16 (worst F)", "realtime-decode", 16, path, 10)
            ratio_goal("chunked prefill 8x512", "chunked-prefill", None, path, 20)
        ratio_goal("list form, realtime decode R=256 (worst F)", "realtime-decode", 256, "list", 5)
        if self.merge is not None:
            for path, passes, basis in (
                ("rows_scatter", 2, "moved"),
                ("slot_gather", 1, "effective"),
            ):
                ratio = self.merge.ratio(path, passes)
                label = f"merge {path}, {basis} bytes / copy bandwidth"
                targets.append(_goal(label, path, ">= 0.5", ratio, ratio >= 0.5))
        slopes = self.scaling_exponents()
        if "plan_vs_requests" in slopes:
            slope = slopes["plan_vs_requests"]
            targets.append(
                _goal(
                    "plan time vs requests (log-log slope)",
                    "plan",
                    "<= 1.2 (linear)",
                    slope,
                    slope <= 1.2,
                )
            )
        features = sorted((p for p in self.scaling if p.axis == "features"), key=lambda p: p.value)
        if len(features) >= 2:
            low, high = features[0], features[-1]
            growth = high.result.median_us["plan"] / low.result.median_us["plan"]
            allowed = math.log(high.value) / math.log(low.value)
            targets.append(
                _goal(
                    f"plan time growth F={low.value}->{high.value}",
                    "plan",
                    f"<= {allowed:.2f} (log F)",
                    growth,
                    growth <= allowed,
                )
            )
        return targets

    @property
    def all_outputs_match(self) -> bool:
        """Whether every path agreed with the baseline everywhere."""
        checks = [r.outputs_match for r in self.scenarios]
        checks += [p.result.outputs_match for p in self.scaling]
        if self.merge is not None:
            checks.append(self.merge.outputs_match)
        return all(checks)

    # ------------------------------------------------------------------ outputs

    def to_json(self) -> dict[str, object]:
        """The JSON document (see the module docstring)."""
        machine = dict(self.machine)
        machine["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        return {
            "schema": SCHEMA,
            "mode": self.mode,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "elapsed_s": round(self.elapsed_s, 1),
            "all_outputs_match": self.all_outputs_match,
            "machine": machine,
            "paths": dict(PATHS),
            "scenarios": self.scenario_records(),
            "merge": self.merge_records(),
            "scaling": self.scaling_records(),
            "scaling_exponents": self.scaling_exponents(),
            "targets": self.target_records(),
            "plots": list(self.plots),
        }

    def write_json(self, path: Path) -> None:
        """Write :meth:`to_json` to ``path`` (its folder is created)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")

    def text(self) -> str:
        """The tables printed at the end of a run."""
        lines = ["", "Gather: median microseconds per call, and loop / path ratios"]
        header = ["scenario", "loop", *_TIMED, *(f"{n} x" for n in _TIMED), "ok"]
        rows = [
            [
                r.name,
                f"{r.median_us['loop']:.1f}",
                *(f"{r.median_us[n]:.1f}" for n in _TIMED),
                *(f"{r.ratios[n]:.1f}" for n in _TIMED),
                "yes" if r.outputs_match else "NO",
            ]
            for r in self.scenarios
        ]
        lines += _format(header, rows)
        if self.merge is not None:
            lines += [
                "",
                f"Merge of {self.merge.num_rows} rows x {self.merge.hidden_size} "
                f"({self.merge.bytes / 2**20:.0f} MiB), bandwidth = bytes read + written per second",
            ]
            rows = [
                [
                    str(rec["path"]),
                    str(rec["median_ms"]),
                    str(rec["effective_gbps"]),
                    str(rec["moved_gbps"]),
                    str(rec["effective_ratio"]),
                    str(rec["moved_ratio"]),
                ]
                for rec in self.merge_records()
            ]
            lines += _format(
                ["path", "median ms", "eff GB/s", "moved GB/s", "eff/copy", "moved/copy"], rows
            )
        if self.scaling:
            lines += ["", "Scaling (realtime decode): median microseconds"]
            rows = [
                [
                    p.axis,
                    str(p.result.params["num_requests"]),
                    str(p.result.params["features_per_request"]),
                    *(f"{p.result.median_us[n]:.1f}" for n in PATHS),
                ]
                for p in self.scaling
            ]
            lines += _format(["sweep", "R", "F", *PATHS], rows)
            slopes = ", ".join(f"{k}={v}" for k, v in self.scaling_exponents().items())
            lines.append(f"log-log slopes: {slopes}")
        targets = self.target_records()
        if targets:
            lines += ["", "Targets"]
            rows = [
                [
                    str(t["target"]),
                    str(t["path"]),
                    str(t["goal"]),
                    f"{t['measured']:.3g}",
                    "met" if t["met"] else "MISSED",
                ]
                for t in targets
            ]
            lines += _format(["target", "path", "goal", "measured", ""], rows)
        lines.append("")
        lines.append(
            "all outputs match the baseline: " + ("yes" if self.all_outputs_match else "NO")
        )
        return "\n".join(lines)


def _goal(label: str, path: str, goal: str, measured: float, met: bool) -> dict[str, object]:
    return {"target": label, "path": path, "goal": goal, "measured": round(measured, 3), "met": met}


def _format(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(header[i]), *(len(row[i]) for row in rows)) for i in range(len(header))]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return out


def write_plot(points: Sequence[ScalingPoint], path: Path) -> str | None:
    """Draw time against R and against F; return why not if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib, or the 'bench' extra)"
    figure, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for axis, ax in (("requests", axes[0]), ("features", axes[1])):
        sweep = sorted((p for p in points if p.axis == axis), key=lambda p: p.value)
        if not sweep:
            continue
        length = sweep[0].result.params["feature_length"]
        xlabel = f"{axis} ({length}-position features)"
        for name in PATHS:
            ax.plot(
                [p.value for p in sweep],
                [p.result.median_us[name] for p in sweep],
                marker="o",
                label=name,
            )
        fixed = sweep[0].result.params
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("median time per step (us)")
        other = (
            f"F={fixed['features_per_request']}"
            if axis == "requests"
            else f"R={fixed['num_requests']}"
        )
        ax.set_title(f"realtime decode, {other}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return None
