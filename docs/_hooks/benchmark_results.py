"""MkDocs hook: put the latest measured benchmark figures on the performance page.

The page marks four spots: ``<!-- benchmark-vs-vllm -->`` for the comparison with vLLM
(``python -m benchmarks --vs-vllm``), ``<!-- benchmark-results -->`` for the
comparison with the self-written loop (``python -m benchmarks``),
``<!-- benchmark-against -->`` for the reference against an earlier revision
(``python -m benchmarks --against REV --output ...``) and ``<!-- benchmark-step-profile -->``
for each step against its limit (``python -m benchmarks.step_profile --output ...``). At
build time the
newest results file of each kind in ``benchmarks/results/`` is rendered as tables — the
newest full run if there is one, else the newest quick run, flagged as such — and the
plots it lists are copied into the site and shown with a caption. Where no results
exist the page says so instead of showing numbers. ``RTMM_DOCS_BENCHMARK_RESULTS=DIR``
reads another folder (to preview a run kept elsewhere). The JSON layout is the
benchmark's (``rtmm-protocol-benchmark/2``); list sections this hook does not know are
still rendered, generically. Nothing here imports the package.
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
#: Marker -> the ``comparison`` of the results rendered there.
MARKERS = {
    "<!-- benchmark-vs-vllm -->": "vllm",
    "<!-- benchmark-results -->": "loop",
    "<!-- benchmark-against -->": "against",
    "<!-- benchmark-step-profile -->": "step-profile",
}
#: The command that makes each comparison's results, for the note where there are none.
_COMMANDS = {
    "vllm": "python -m benchmarks --vs-vllm",
    "loop": "python -m benchmarks",
    "against": "python -m benchmarks --against REV --output PATH",
    "step-profile": "python -m benchmarks.step_profile --output PATH",
}
MARKER = "<!-- benchmark-results -->"
_SITE_DIR = "assets/benchmarks"

#: Column titles of the known record fields.
_TITLES = {
    "workload": "workload",
    "hidden_size": "hidden size",
    "rows_mib": "rows (MiB)",
    "loop_ms": "loop",
    "loop_rows_ms": "loop + cat",
    "list_ms": "list form",
    "rows_ms": "rows()",
    "copy_floor_ms": "copy floor",
    "step_ms": "whole step",
    "checks_ms": "input checks",
    "list_x": "list form speed-up",
    "rows_x": "rows() speed-up",
    "list_x@vllm": "vLLM / reference",
    "rows_x@vllm": "vLLM / reference",
    "vllm_step_ms": "vLLM",
    "ours_step_ms": "reference",
    "ours_checks_ms": "reference's input checks",
    "step_x": "vLLM / reference",
    "vllm_list_ms": "vLLM",
    "ours_list_ms": "reference",
    "vllm_rows_ms": "vLLM (list + cat)",
    "ours_rows_ms": "reference (rows)",
    "rows_over_floor": "reference / floor",
    "axis": "sweep",
    "requests": "requests",
    "features_per_request": "features",
    "target": "target",
    "goal": "goal",
    "measured": "measured",
    "met": "met",
    "path": "path",
    "new_over_old": "new/old",
    "spread": "spread",
    "old_ms": "old (ms)",
    "new_ms": "new (ms)",
    "limit_us": "limit (us)",
    "step_us": "whole step (us)",
    "step_over_limit": "step / limit",
    "floor_us": "copy floor",
    "mask_us": "mask to device",
    "merge_us": "model's merge",
    "buffer_us": "buffer copy",
    "check_us": "batch check",
    "encoder_us": "encoder pass",
    "plan_us": "plan",
    "rows_us": "rows",
}

#: The tables of the comparisons rendered by record section: caption and columns.
_RECORD_TABLES: dict[str, tuple[str, list[tuple[str, list[str]]]]] = {
    "against": (
        "against",
        [
            (
                "New/old per workload and path: the earlier revision's median time over this "
                "checkout's in each round, the median over the rounds and its spread (above 1: "
                "this checkout is faster), and both sides' median times.",
                ["workload", "path", "new_over_old", "spread", "old_ms", "new_ms"],
            ),
        ],
    ),
    "step-profile": (
        "step_profile",
        [
            (
                "Each real step against its limit (copy floor of its rows, mask to the device, "
                "the model's merge, the buffer copy), median microseconds, and the target of "
                "step / limit.",
                [
                    "workload",
                    "hidden_size",
                    "limit_us",
                    "step_us",
                    "step_over_limit",
                    "target",
                    "met",
                ],
            ),
            (
                "The limit's parts, median microseconds.",
                ["workload", "hidden_size", "floor_us", "mask_us", "merge_us", "buffer_us"],
            ),
            (
                "The step's own parts before the merge, median microseconds (rows: the copy "
                "floor and the lookup of each output's copy).",
                ["workload", "hidden_size", "check_us", "encoder_us", "plan_us", "rows_us"],
            ),
        ],
    ),
}

#: The loop comparison's tables, in page order: the section, caption and columns (none:
#: every flat field). A table whose columns are all absent falls back to every flat field
#: only if it is the section's first (results of an older layout show once).
_LOOP_TABLES: list[tuple[str, str, list[str]]] = [
    (
        "scenarios",
        "Median milliseconds per step on each workload. The copy floor is one "
        "<code>index_select</code> of the same rows; the whole step includes the toy "
        "model's merge, which the loop does not do.",
        ["workload", "loop_ms", "list_ms", "loop_rows_ms", "rows_ms", "copy_floor_ms", "step_ms"],
    ),
    (
        "scenarios",
        "What the reference's input checks add to each step, median milliseconds (validation "
        "is off on the timed paths above).",
        ["workload", "step_ms", "checks_ms"],
    ),
    (
        "scenarios",
        "Speed-ups over the loop: the loop's median time over the list form's, and the "
        "loop and <code>torch.cat</code>'s over <code>rows()</code>'.",
        ["workload", "list_x", "rows_x"],
    ),
    (
        "scaling",
        "Scaling sweeps (realtime decode): median milliseconds per step as the number of "
        "requests, then of features per request, grows.",
        ["axis", "requests", "features_per_request", "loop_ms", "list_ms", "rows_ms", "step_ms"],
    ),
]

#: The vLLM comparison's tables: caption and columns, all over the ``vs_vllm`` records.
_PEER_TABLES: list[tuple[str, list[str]]] = [
    (
        "vLLM's median time over the reference's (higher is better for the reference) for "
        "the list form, the rows as one tensor and the whole step.",
        ["workload", "hidden_size", "list_x", "rows_x", "step_x"],
    ),
    (
        "The whole real step, median milliseconds: vLLM's gather and <code>get_inputs_embeds</code> "
        "against the reference's <code>get_mm_embeddings</code>, the same toy model merging; "
        "the reference's input checks are what validation would add to its step.",
        ["workload", "hidden_size", "vllm_step_ms", "ours_step_ms", "step_x", "ours_checks_ms"],
    ),
    (
        "The list form <code>(mm_embeds, is_mm_embed)</code>, median milliseconds.",
        ["workload", "hidden_size", "vllm_list_ms", "ours_list_ms", "list_x"],
    ),
    (
        "The gathered rows as one tensor, median milliseconds, against the copy floor: one "
        "<code>index_select</code> of the same rows from one contiguous tensor.",
        [
            "workload",
            "hidden_size",
            "rows_mib",
            "vllm_rows_ms",
            "ours_rows_ms",
            "copy_floor_ms",
            "rows_over_floor",
        ],
    ),
]

#: The results chosen for this build (set by ``on_files``), per comparison.
_chosen: dict[str, tuple[Path, dict[str, Any]] | None] = {}


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


def choose_results(
    results_dir: Path = RESULTS_DIR, comparison: str = "loop"
) -> tuple[Path, dict[str, Any]] | None:
    """The newest full run of ``comparison``, else its newest run of any mode, else ``None``.

    Files without a ``comparison`` field are loop comparisons (the older layout).
    """
    loaded = []
    for path in results_dir.glob("*.json"):
        data = _load(path)
        if data is not None and data.get("comparison", "loop") == comparison:
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


def _number(value: float) -> str:
    """The page's one number format: about three significant digits, no exponent or separator."""
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    if 0 < magnitude < 0.001:
        return f"{value:.4f}"
    return f"{value:.3g}"


def _cell(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, list):
        return ", ".join(_cell(v) for v in value)
    return str(value).replace("|", "\\|")


def _table(
    records: Sequence[Mapping[str, object]],
    preferred: Sequence[str] = (),
    titles: Mapping[str, str] | None = None,
) -> list[str]:
    columns = [c for c in preferred if any(c in r for r in records)]
    if not columns:
        for record in records:
            columns += [k for k, v in record.items() if k not in columns and _is_flat(v)]
    names = {**_TITLES, **(titles or {})}
    header = [names.get(c, c) for c in columns]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(columns)]
    for record in records:
        lines.append("| " + " | ".join(_cell(record.get(c, "")) for c in columns) + " |")
    return lines


def _captioned(caption: str, table: list[str]) -> list[str]:
    """A table in a figure with its caption above it."""
    return [
        '<figure class="rtmm-table" markdown>',
        f"<figcaption>{caption}</figcaption>",
        "",
        *table,
        "",
        "</figure>",
        "",
    ]


def _pairs(mapping: Mapping[str, object], left: str, right: str) -> list[str]:
    lines = [f"| {left} | {right} |", "| --- | --- |"]
    lines += [f"| {key} | {_cell(value)} |" for key, value in mapping.items() if _is_flat(value)]
    return lines


def _run_line(data: Mapping[str, Any], source: str) -> list[str]:
    found = data.get("machine")
    machine: dict[str, Any] = found if isinstance(found, dict) else {}
    device = machine.get("gpu") or f"{machine.get('cpu_count', '?')} CPU cores"
    versions = f"torch {machine.get('torch', '?')}, Python {machine.get('python', '?')}"
    if "vllm" in machine:
        versions = f"vLLM {machine['vllm']}, " + versions
    lines = [
        f"Figures from `{source}`: a **{data.get('mode', '?')}** run of "
        f"{data.get('created', 'unknown date')} on {device} ({versions}).",
        "",
    ]
    if "all_outputs_match" in data:
        lines += [
            "Every path's output matched its comparison's on every step: "
            f"{_cell(data['all_outputs_match'])}.",
            "",
        ]
    if data.get("mode") != "full":
        lines += [
            '!!! warning "Not a measurement"',
            "    This is a quick run: small sizes, run to check that every path agrees with its "
            "comparison. Its timings say nothing about speed.",
            "",
        ]
    return lines


def _record_lists(data: Mapping[str, Any], key: str) -> list[dict[str, Any]] | None:
    records = data.get(key)
    if isinstance(records, list) and records and all(isinstance(r, dict) for r in records):
        return records
    return None


def render_results(data: Mapping[str, Any], source: str) -> str:
    """Markdown for one results file: what run it was, then its tables."""
    lines = _run_line(data, source)
    rendered = {"schema", "mode", "comparison", "created", "all_outputs_match", "machine"}
    rendered |= {"plots", "paths"}
    tables = _RECORD_TABLES.get(str(data.get("comparison")))
    if tables is not None:
        key, captioned = tables
        rendered.add(key)
        records = _record_lists(data, key)
        for caption, columns in captioned if records else []:
            lines += _captioned(caption, _table(records or [], columns))
    elif data.get("comparison") == "vllm":
        rendered.add("vs_vllm")
        peer = _record_lists(data, "vs_vllm")
        if peer:
            for index, (caption, columns) in enumerate(_PEER_TABLES):
                # The ratio table names its columns by path; the others by "vLLM / reference".
                titles = (
                    {"list_x": "list form", "rows_x": "rows", "step_x": "whole step"}
                    if index == 0
                    else {key: _TITLES[f"{key}@vllm"] for key in ("list_x", "rows_x")}
                )
                lines += _captioned(caption, _table(peer, columns, titles))
    else:
        shown: set[str] = set()
        for key, caption, preferred in _LOOP_TABLES:
            rendered.add(key)
            records = _record_lists(data, key)
            present = [c for c in preferred if any(c in r for r in records or ())]
            if records and (present or not preferred or key not in shown):
                lines += _captioned(caption, _table(records, present or preferred))
                shown.add(key)
        if isinstance(data.get("scaling_exponents"), dict):
            rendered.add("scaling_exponents")
            lines += _captioned(
                "Growth exponents: the slope of log(time) over log(size) for each path "
                "and sweep (1 is linear, 0 is flat).",
                _pairs(data["scaling_exponents"], "path and sweep", "exponent"),
            )
    targets = _record_lists(data, "targets")
    rendered.add("targets")
    if targets:
        lines += _captioned(
            "Targets: each goal, the value measured in this run and whether it is met.",
            _table(targets, ["target", "goal", "measured", "met"]),
        )
    for key in data:  # list sections added to the benchmark later
        if key in rendered:
            continue
        records = _record_lists(data, key)
        if records:
            lines += [f"### {key.replace('_', ' ').capitalize()}", "", *_table(records), ""]
    return "\n".join(lines)


def render_machine(data: Mapping[str, Any]) -> str:
    """The run's machine as a two-column table, or nothing."""
    machine = data.get("machine")
    if not isinstance(machine, dict) or not machine:
        return ""
    return "\n".join(_captioned("The machine of this run.", _pairs(machine, "property", "value")))


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


_PLOT_CAPTIONS = {
    "vllm": "The whole step's median time per workload, vLLM against the reference (log "
    "scale), with the copy floor of the step's rows as a black tick.",
    "loop": "How the loop's and the reference's times grow with the number of requests "
    "(left) and of features per request (right), log-log.",
}


def on_files(files: Files, config: Any) -> Files:
    """Choose the results files for this build and copy their plots into the site."""
    folder = Path(os.environ.get(RESULTS_DIR_ENV_VAR) or RESULTS_DIR)
    for comparison in MARKERS.values():
        chosen = choose_results(folder, comparison)
        _chosen[comparison] = chosen
        if chosen is not None:
            for plot in _plots(*chosen):
                uri = f"{_SITE_DIR}/{plot.name}"
                files.append(File.generated(config, uri, abs_src_path=str(plot)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace each marker with its chosen results, or with a note that there are none."""
    for marker, comparison in MARKERS.items():
        if marker not in markdown:
            continue
        chosen = _chosen.get(comparison)
        if chosen is None:
            command = _COMMANDS[comparison]
            body = (
                '!!! note "No measurements yet"\n'
                f"    `benchmarks/results/` holds no results of `{command}`, so this section "
                "shows no figures. Run it and rebuild the docs."
            )
            markdown = markdown.replace(marker, body)
            continue
        path, data = chosen
        source = path.relative_to(REPO) if path.is_relative_to(REPO) else path
        body = render_results(data, str(source))
        prefix = "../" * len(Path(page.file.src_uri).parent.parts)
        for plot in _plots(path, data):
            body += (
                '\n\n<figure class="rtmm-figure" markdown>\n'
                f"![{_PLOT_CAPTIONS[comparison]}]({prefix}{_SITE_DIR}/{plot.name})\n"
                f"<figcaption>{_PLOT_CAPTIONS[comparison]}</figcaption>\n"
                "</figure>"
            )
        body += "\n\n" + render_machine(data)
        markdown = markdown.replace(marker, body)
    return markdown
