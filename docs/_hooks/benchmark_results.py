"""MkDocs hook: put the latest measured benchmark figures on the performance page.

The page marks the spot with ``<!-- benchmark-results -->``. At build time the newest
JSON file in ``benchmarks/results/`` (by name, then modification time) is rendered as
tables; PNG plots next to it are copied into the site and shown. When no results exist
the page says so instead of showing numbers. Nothing here imports the package.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.benchmark_results")

RESULTS_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
MARKER = "<!-- benchmark-results -->"
_SITE_DIR = "assets/benchmarks"

_plots: list[str] = []


def latest_results(results_dir: Path = RESULTS_DIR) -> Path | None:
    """The newest results file, or ``None`` when the benchmark has not been run."""
    candidates = sorted(results_dir.glob("*.json"), key=lambda p: (p.stat().st_mtime, p.name))
    return candidates[-1] if candidates else None


def _is_flat(value: object) -> bool:
    """A scalar, or a list of scalars: something that fits in one table cell."""
    if isinstance(value, list):
        return not any(isinstance(v, (dict, list)) for v in value)
    return not isinstance(value, dict)


def _scalar(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(_scalar(v) for v in value)
    return str(value).replace("|", "\\|")


def _table(records: Sequence[Mapping[str, object]]) -> list[str]:
    columns: list[str] = []
    for record in records:
        columns += [k for k, v in record.items() if k not in columns and _is_flat(v)]
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for record in records:
        lines.append("| " + " | ".join(_scalar(record.get(c, "")) for c in columns) + " |")
    return lines


def render_results(data: Mapping[str, object], source: str) -> str:
    """Markdown for one results file: its run metadata, then one table per list of records."""
    lines = [f"Figures from `{source}`.", ""]
    metadata = {k: v for k, v in data.items() if _is_flat(v) and not isinstance(v, list)}
    for key, value in data.items():
        if isinstance(value, dict) and all(_is_flat(v) for v in value.values()):
            metadata.update({f"{key}.{k}": v for k, v in value.items()})
    if metadata:
        lines += ["| run | |", "| --- | --- |"]
        lines += [f"| {key} | {_scalar(value)} |" for key, value in metadata.items()]
        lines.append("")
    for key, value in data.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            lines += [f"**{key.replace('_', ' ')}**", "", *_table(value), ""]
    return "\n".join(lines)


def on_files(files: Files, config: Any) -> Files:
    """Copy the benchmark's PNG plots into the site."""
    _plots.clear()
    for plot in sorted(RESULTS_DIR.glob("*.png")):
        uri = f"{_SITE_DIR}/{plot.name}"
        files.append(File.generated(config, uri, abs_src_path=str(plot)))
        _plots.append(plot.name)
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Replace the marker with the latest results, or with a note that there are none."""
    if MARKER not in markdown:
        return markdown
    path = latest_results()
    if path is None:
        body = (
            '!!! note "No measurements yet"\n'
            "    `benchmarks/results/` holds no results file, so this page shows no figures. "
            "Run the benchmark (see above) and rebuild the docs."
        )
    else:
        try:
            data = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError) as error:
            log.warning("benchmark results: cannot read %s: %s", path, error)
            data = {}
        if not isinstance(data, dict):
            log.warning("benchmark results: %s does not hold a JSON object", path)
            data = {}
        body = render_results(data, f"benchmarks/results/{path.name}")
    page_dir = Path(page.file.src_uri).parent
    depth = len(page_dir.parts)
    prefix = "../" * depth
    for name in _plots:
        body += f"\n\n![{name}]({prefix}{_SITE_DIR}/{name})"
    return markdown.replace(MARKER, body)
