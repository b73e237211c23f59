"""MkDocs hook: put the latest measured benchmark figures on the performance page.

The page marks the spot with ``<!-- benchmark-results -->``. At build time the newest
results file in ``benchmarks/results/`` is rendered as tables — the newest full run
if there is one, else the newest quick run, flagged as such — and the plots it lists
are copied into the site and shown. When no results exist the page says so instead of
showing numbers. ``RTMM_DOCS_BENCHMARK_RESULTS=DIR`` reads another folder (to preview a
run kept elsewhere). The JSON layout is the benchmark's (``rtmm-protocol-benchmark/1``);
sections this hook does not know are still rendered, generically. Nothing here imports
the package.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.benchmark_results")

REPO = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO / "benchmarks" / "results"
RESULTS_DIR_ENV_VAR = "RTMM_DOCS_BENCHMARK_RESULTS"
MARKER = "<!-- benchmark-results -->"
_SITE_DIR = "assets/benchmarks"

#: Known sections, in page order, with their headings and preferred columns.
_SECTIONS: dict[str, tuple[str, list[str]]] = {
    "targets": ("Targets", []),
    "scenarios": (
        "Gather: median microseconds per call, and loop / path ratios",
        [
            "scenario",
            "tokens",
            "features",
            "loop_us",
            "plan_us",
            "plan_rows_us",
            "list_us",
            "plan_x",
            "plan_rows_x",
            "list_x",
            "outputs_match",
        ],
    ),
    "merge": ("Merge throughput (bytes read + written per second)", []),
    "scaling": ("Scaling (realtime decode): median microseconds", []),
}


#: The results file chosen for this build (set by ``on_files``), and its data.
_chosen: dict[str, Any] = {"path": None, "data": {}}


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as error:
        log.warning("benchmark results: cannot read %s: %s", path, error)
        return None
    if not isinstance(data, dict):
        log.warning("benchmark results: %s does not hold a JSON object", path)
        return None
    return data


def choose_results(results_dir: Path = RESULTS_DIR) -> tuple[Path, dict[str, Any]] | None:
    """The newest full run, else the newest run of any mode; ``None`` if there is none."""
    loaded = []
    for path in results_dir.glob("*.json"):
        data = _load(path)
        if data is not None:
            loaded.append((data.get("mode") == "full", path.stat().st_mtime, path.name, path, data))
    if not loaded:
        return None
    *_, path, data = max(loaded, key=lambda entry: entry[:3])
    return path, data


def _is_flat(value: object) -> bool:
    """A scalar, or a list of scalars: something that fits in one table cell."""
    if isinstance(value, list):
        return not any(isinstance(v, (dict, list)) for v in value)
    return not isinstance(value, dict)


def _cell(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(_cell(v) for v in value)
    return str(value).replace("|", "\\|")


def _table(records: Sequence[Mapping[str, object]], preferred: Sequence[str] = ()) -> list[str]:
    columns = [c for c in preferred if any(c in r for r in records)]
    if not columns:
        for record in records:
            columns += [k for k, v in record.items() if k not in columns and _is_flat(v)]
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for record in records:
        lines.append("| " + " | ".join(_cell(record.get(c, "")) for c in columns) + " |")
    return lines


def _pairs(mapping: Mapping[str, object], left: str, right: str) -> list[str]:
    lines = [f"| {left} | {right} |", "| --- | --- |"]
    lines += [f"| {key} | {_cell(value)} |" for key, value in mapping.items() if _is_flat(value)]
    return lines


def render_results(data: Mapping[str, Any], source: str) -> str:
    """Markdown for one results file: what run it was, then one table per section."""
    machine = data.get("machine") if isinstance(data.get("machine"), dict) else {}
    lines = [
        f"Figures from `{source}`: a **{data.get('mode', '?')}** run of "
        f"{data.get('created', 'unknown date')}, on {machine.get('cpu_count', '?')} CPU cores "
        f"(torch {machine.get('torch', '?')}, numpy {machine.get('numpy', '?')}, "
        f"Python {machine.get('python', '?')}).",
        "",
    ]
    if "all_outputs_match" in data:
        lines += [
            f"Every path's output matched the baseline: {_cell(data['all_outputs_match'])}.",
            "",
        ]
    if data.get("mode") != "full":
        lines += [
            '!!! warning "Not a measurement"',
            "    This is a quick run: small sizes, run to check that every path agrees with the "
            "baseline. Its timings say nothing about speed.",
            "",
        ]
    paths = data.get("paths")
    if isinstance(paths, dict) and paths:
        lines += ["The paths compared:", "", *_pairs(paths, "path", "what it does"), ""]
    rendered = {"schema", "mode", "created", "all_outputs_match", "machine", "paths", "plots"}
    for key, (title, preferred) in _SECTIONS.items():
        records = data.get(key)
        rendered.add(key)
        if isinstance(records, list) and records and all(isinstance(r, dict) for r in records):
            lines += [f"### {title}", "", *_table(records, preferred), ""]
        if key == "scaling" and isinstance(data.get("scaling_exponents"), dict):
            rendered.add("scaling_exponents")
            lines += [
                "Growth exponents: the slope of log(time) over log(size) for each path and "
                "sweep (1 is linear, 0 is flat).",
                "",
                *_pairs(data["scaling_exponents"], "path and sweep", "exponent"),
                "",
            ]
    for key, value in data.items():  # sections added to the benchmark later
        if key in rendered:
            continue
        if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
            lines += [f"### {key.replace('_', ' ').capitalize()}", "", *_table(value), ""]
        elif isinstance(value, dict) and value:
            lines += [f"### {key.replace('_', ' ').capitalize()}", "", *_pairs(value, "", ""), ""]
        elif _is_flat(value):
            lines += [f"- {key}: {_cell(value)}"]
    if machine:
        lines += ["", "### Machine", "", *_pairs(machine, "", ""), ""]
    return "\n".join(lines)


def _plots(path: Path, data: Mapping[str, Any]) -> list[Path]:
    names = data.get("plots")
    if not isinstance(names, list):
        return []
    found = []
    for name in names:
        plot = path.parent / str(name)
        if plot.is_file():
            found.append(plot)
        else:
            log.warning("benchmark results: %s lists plot %s, which does not exist", path, plot)
    return found


def on_files(files: Files, config: Any) -> Files:
    """Choose the results file for this build and copy its plots into the site."""
    chosen = choose_results(Path(os.environ.get(RESULTS_DIR_ENV_VAR) or RESULTS_DIR))
    _chosen["path"], _chosen["data"] = chosen if chosen is not None else (None, {})
    if chosen is not None:
        for plot in _plots(*chosen):
            uri = f"{_SITE_DIR}/{plot.name}"
            files.append(File.generated(config, uri, abs_src_path=str(plot)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the marker with the chosen results, or with a note that there are none."""
    if MARKER not in markdown:
        return markdown
    path, data = _chosen["path"], _chosen["data"]
    if path is None:
        body = (
            '!!! note "No measurements yet"\n'
            "    `benchmarks/results/` holds no results file, so this page shows no figures. "
            "Run the benchmark (see above) and rebuild the docs."
        )
        return markdown.replace(MARKER, body)
    source = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    body = render_results(data, str(source))
    prefix = "../" * len(Path(page.file.src_uri).parent.parts)
    for plot in _plots(path, data):
        body += f"\n\n![{plot.stem.replace('_', ' ')}]({prefix}{_SITE_DIR}/{plot.name})"
    return markdown.replace(MARKER, body)
