"""Draw one small batch, its windows and the resulting masks as an SVG for the docs.

The masks and encoder-output rows in the picture are not drawn by hand: they are what
the reference :class:`~rtmm_protocol.reference.EncoderRunner` returns for the batch
below, once with a non-realtime model and once with a realtime one, without and with a
drafter look-ahead. ``tests/test_docs.py`` regenerates the SVG and compares it with the
committed file, so the picture cannot drift from the code.

Run ``python docs/_gen/batch_figure.py`` to rewrite ``docs/assets/batch-figure.svg``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np
import torch

from rtmm_protocol import EncoderCache, MultiModalFeature, PlaceholderRange
from rtmm_protocol.reference import EncoderRunner
from rtmm_protocol.testing import ToyRealtimeModel, ToyReplaceModel

OUTPUT = Path(__file__).resolve().parent.parent / "assets" / "batch-figure.svg"
HIDDEN_SIZE = 4


@dataclass(frozen=True)
class _Feature:
    identifier: str
    modality: str
    offset: int
    length: int
    is_embed: tuple[bool, ...] | None = None
    cached: bool = True

    def embeds(self, index: int) -> bool:
        return self.is_embed is None or self.is_embed[index]


@dataclass(frozen=True)
class _Request:
    req_id: str
    prefill_len: int
    num_computed_tokens: int
    num_scheduled_tokens: int
    features: tuple[_Feature, ...]
    positions: int  # how many positions the picture shows
    caption: str


#: The pictured batch: a prompt chunk crossing an image whose first and last placeholder
#: positions are not embeds, a realtime stream decoding (its next frame not encoded yet),
#: and the last chunk of a prompt whose audio runs past the prompt.
BATCH = (
    _Request(
        "a",
        prefill_len=12,
        num_computed_tokens=2,
        num_scheduled_tokens=6,
        features=(_Feature("img0", "image", 3, 6, (False, True, True, True, True, False)),),
        positions=13,
        caption="prompt chunk across an image",
    ),
    _Request(
        "b",
        prefill_len=4,
        num_computed_tokens=9,
        num_scheduled_tokens=1,
        features=(
            _Feature("aud0", "audio", 1, 3),
            _Feature("aud1", "audio", 9, 1),
            _Feature("aud2", "audio", 10, 1, cached=False),
        ),
        positions=13,
        caption="stream decoding; aud2 not encoded yet",
    ),
    _Request(
        "c",
        prefill_len=8,
        num_computed_tokens=7,
        num_scheduled_tokens=1,
        features=(_Feature("aud3", "audio", 6, 3),),
        positions=13,
        caption="last prompt token; audio runs past the prompt",
    ),
)

# Colours: readable on white, distinct without colour too (labels carry the meaning).
_PROMPT = "#dbeafe"
_DECODE = "#fde68a"
_COMPUTED_TEXT = "#9ca3af"
_EMBED = "#16a34a"
_NON_EMBED = "#9ca3af"
_WINDOW = "#1d4ed8"
_MISSING = "#dc2626"
_SLOT = "#f3f4f6"
_TRUE = "#bbf7d0"

_CELL = 30
_LEFT = 210
_TOP_PAD = 14


@dataclass(frozen=True)
class GatherOutcome:
    """What the reference gather returned for the pictured batch."""

    mask: list[bool]
    #: For each True slot: ``identifier[row]`` of the encoder-output row it receives.
    row_labels: list[str]


def _build_cache() -> EncoderCache:
    cache = EncoderCache(hidden_size=HIDDEN_SIZE)
    for request in BATCH:
        features = []
        for spec in request.features:
            mask = None if spec.is_embed is None else torch.tensor(spec.is_embed)
            features.append(
                MultiModalFeature(
                    spec.identifier, spec.modality, PlaceholderRange(spec.offset, spec.length, mask)
                )
            )
        cache.add_request(request.req_id, features)
        for spec, feature in zip(request.features, features, strict=True):
            if spec.cached:
                rows = feature.mm_position.get_num_embeds()
                # Row r of the output holds r in every column, so a gathered row names itself.
                output = torch.arange(rows, dtype=torch.float32).unsqueeze(1).repeat(1, HIDDEN_SIZE)
                cache.put_encoder_output(spec.identifier, output)
    return cache


def gather_outcome(*, realtime: bool, draft_lookahead: int) -> GatherOutcome:
    """Run the reference gather on the pictured batch."""
    model = ToyRealtimeModel(HIDDEN_SIZE) if realtime else ToyReplaceModel(HIDDEN_SIZE)
    cache = _build_cache()
    runner = EncoderRunner(model, 64, HIDDEN_SIZE, cache, torch.float32, "cpu", validate=True)
    scheduled = np.array([r.num_scheduled_tokens for r in BATCH], dtype=np.int32)
    query_start_loc = np.concatenate([[0], np.cumsum(scheduled)]).astype(np.int32)
    pieces, mask = runner.gather_mm_embeddings(
        [r.req_id for r in BATCH],
        int(scheduled.sum()),
        scheduled,
        query_start_loc,
        np.array([r.prefill_len for r in BATCH], dtype=np.int32),
        np.array([r.num_computed_tokens for r in BATCH], dtype=np.int32),
        draft_lookahead,
    )
    rows = torch.cat(pieces) if pieces else torch.empty(0, HIDDEN_SIZE)
    # Each piece is a view of one cached output; find which, to label the rows.
    owners: list[str] = []
    for piece in pieces:
        for identifier, output in cache.encoder_outputs.items():
            if piece.untyped_storage().data_ptr() == output.untyped_storage().data_ptr():
                owners.extend([identifier] * piece.shape[0])
                break
    labels = [f"{owner}[{int(row[0])}]" for owner, row in zip(owners, rows, strict=True)]
    return GatherOutcome([bool(flag) for flag in mask.tolist()], labels)


class _Svg:
    """A tiny SVG writer: rectangles, lines and text, in the order added."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def rect(self, x: float, y: float, w: float, h: float, fill: str, **attrs: str) -> None:
        extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
        self.items.append(
            f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" fill="{fill}"{extra}/>'
        )

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str, **attrs: str) -> None:
        extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
        self.items.append(
            f'<line x1="{x1:g}" y1="{y1:g}" x2="{x2:g}" y2="{y2:g}" stroke="{stroke}"{extra}/>'
        )

    def text(self, x: float, y: float, body: str, *, size: int = 11, **attrs: str) -> None:
        extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
        self.items.append(
            f'<text x="{x:g}" y="{y:g}" font-size="{size}"{extra}>{escape(body)}</text>'
        )


def _draw_request(svg: _Svg, request: _Request, y: float, draft_lookahead: int) -> None:
    start = request.num_computed_tokens + draft_lookahead
    end = start + request.num_scheduled_tokens
    svg.text(
        8,
        y + 12,
        f"req {request.req_id!r}: prefill_len={request.prefill_len}",
        size=12,
        font_weight="bold",
    )
    svg.text(
        8,
        y + 27,
        f"computed={request.num_computed_tokens}, scheduled={request.num_scheduled_tokens}",
        size=10,
    )
    svg.text(8, y + 41, request.caption, size=10, fill="#4b5563")
    for p in range(request.positions):
        x = _LEFT + p * _CELL
        fill = _PROMPT if p < request.prefill_len else _DECODE
        svg.rect(x, y, _CELL - 2, _CELL - 4, fill, rx="3")
        colour = _COMPUTED_TEXT if p < request.num_computed_tokens else "#111827"
        svg.text(x + _CELL / 2 - 1, y + 17, str(p), text_anchor="middle", fill=colour)
    # Placeholders: a bar under the positions, one tick per position (embed or not).
    for feature in request.features:
        x0 = _LEFT + feature.offset * _CELL
        bar_y = y + _CELL - 1
        for k in range(feature.length):
            colour = _EMBED if feature.embeds(k) else _NON_EMBED
            svg.rect(x0 + k * _CELL, bar_y, _CELL - 2, 7, colour)
        label = feature.identifier + ("" if feature.cached else " (not cached)")
        svg.text(
            x0,
            bar_y + 17,
            label,
            size=10,
            fill=_MISSING if not feature.cached else "#111827",
        )
    # The window [s, e): solid for the target model's window, shifted when L > 0.
    if end > start:
        svg.rect(
            _LEFT + start * _CELL - 2,
            y - 3,
            (end - start) * _CELL + 2,
            _CELL + 2,
            "none",
            stroke=_WINDOW,
            stroke_width="2.5",
            stroke_dasharray="6 3" if draft_lookahead else "none",
            rx="4",
        )


def _draw_slots(svg: _Svg, y: float, draft_lookahead: int) -> None:
    svg.text(8, y + 17, "flat slots (request:position)", size=11, font_weight="bold")
    svg.text(8, y - 8, "qsl = query_start_loc[i]", size=9, fill="#6b7280")
    slot = 0
    for request in BATCH:
        start = request.num_computed_tokens + draft_lookahead
        svg.line(_LEFT + slot * 62 - 3, y - 6, _LEFT + slot * 62 - 3, y + 30, "#6b7280")
        svg.text(_LEFT + slot * 62 - 1, y - 8, f"qsl={slot}", size=9, fill="#6b7280")
        for k in range(request.num_scheduled_tokens):
            x = _LEFT + (slot + k) * 62
            svg.rect(x, y, 58, 24, _SLOT, rx="3", stroke="#9ca3af")
            svg.text(x + 29, y + 16, f"{request.req_id}:{start + k}", text_anchor="middle")
        slot += request.num_scheduled_tokens


def _draw_mask(svg: _Svg, y: float, title: str, outcome: GatherOutcome) -> None:
    svg.text(8, y + 16, title, size=11, font_weight="bold")
    labels = iter(outcome.row_labels)
    for slot, flag in enumerate(outcome.mask):
        x = _LEFT + slot * 62
        svg.rect(x, y, 58, 24, _TRUE if flag else "#ffffff", rx="3", stroke="#9ca3af")
        svg.text(
            x + 29,
            y + 16,
            next(labels) if flag else "False",
            text_anchor="middle",
            size=10,
            fill="#14532d" if flag else "#9ca3af",
        )


def _legend(svg: _Svg, y: float) -> float:
    """Draw the legend in two rows; return the y below it."""
    rows = [
        [
            (_PROMPT, "prompt position"),
            (_DECODE, "decode position"),
            (_EMBED, "embed position (is_embed True)"),
            (_NON_EMBED, "placeholder position, not an embed"),
        ],
        [(_TRUE, "mask True: the slot gets row r of output id, shown id[r]")],
    ]
    for entries in rows:
        x = 8.0
        for colour, label in entries:
            svg.rect(x, y, 14, 14, colour, stroke="#9ca3af")
            svg.text(x + 19, y + 11, label, size=10)
            x += 30 + 5.6 * len(label)
        y += 20
    svg.rect(x, y - 21, 26, 16, "none", stroke=_WINDOW, stroke_width="2.5")
    svg.text(x + 31, y - 9, "window [s, e), s = computed + draft_lookahead", size=10)
    svg.text(8, y + 11, "grey numbers: positions already computed", size=10, fill=_COMPUTED_TEXT)
    return y + 20


def render_batch_figure() -> str:
    """Return the SVG text of the batch figure."""
    svg = _Svg()
    y = _legend(svg, float(_TOP_PAD)) + 8
    for lookahead in (0, 1):
        title = (
            "(a) target model, draft_lookahead = 0: window starts at num_computed_tokens"
            if lookahead == 0
            else "(b) drafter, draft_lookahead = 1: every window shifts one position right"
        )
        svg.text(8, y + 12, title, size=13, font_weight="bold")
        y += 26
        for request in BATCH:
            _draw_request(svg, request, y, lookahead)
            y += 62
        y += 10
        _draw_slots(svg, y, lookahead)
        y += 34
        for realtime in (False, True):
            outcome = gather_outcome(realtime=realtime, draft_lookahead=lookahead)
            kind = "realtime" if realtime else "non-realtime"
            _draw_mask(svg, y, f"is_mm_embed, {kind} model", outcome)
            y += 30
        y += 18
    width = _LEFT + max(13 * _CELL, sum(r.num_scheduled_tokens for r in BATCH) * 62) + 40
    height = int(y)
    body = "\n  ".join(svg.items)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" font-family="sans-serif" role="img" '
        'aria-labelledby="batch-figure-title">\n'
        '  <title id="batch-figure-title">A batch of three requests: positions, placeholders, '
        "windows without and with look-ahead, flat slots and the gather masks</title>\n"
        f'  <rect width="{width}" height="{height}" fill="#ffffff"/>\n'
        f"  {body}\n"
        "</svg>\n"
    )


def main() -> int:
    """Write the figure to ``docs/assets/batch-figure.svg``."""
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(render_batch_figure(), encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
