"""Hand-placed gather scenarios: the boundaries each clause names, run before random ones.

Random batches find what nobody thought of; these make sure the cases the contract
names explicitly are always run, whatever the example budget: the look-ahead boundary,
the last prefill chunk, a feature starting exactly at the processed end, zero scheduled
tokens inside a placeholder, windows starting inside masked features, batches where
every request decodes.
"""

from __future__ import annotations

from rtmm_protocol.testing.scenario import FeatureSpec, GatherScenario, RequestSpec

__all__ = [
    "ALL_SKIPPED_CASES",
    "ANY_CASES",
    "LOOKAHEAD_MISS_CASES",
    "MASK_CASES",
    "MISS_CASES",
    "NON_EMBED_MISS_CASES",
    "PIECE_CASES",
    "PROMPT_STEP_CASES",
    "DECODE_STEP_CASES",
    "KIND_CASES",
    "MISS_KIND_CASES",
    "REALTIME_DECODE_CASES",
    "ROW_CASES",
    "SKIP_CASES",
    "WINDOW_CASES",
    "ZERO_SCHEDULED_CASES",
]

_F, _T = False, True


def _f(
    identifier: str,
    offset: int,
    length: int,
    mask: tuple[bool, ...] | None = None,
    *,
    cached: bool = True,
) -> FeatureSpec:
    return FeatureSpec(identifier, offset, length, mask, cached)


def _r(
    req_id: str, prefill: int, computed: int, scheduled: int, *features: FeatureSpec
) -> RequestSpec:
    return RequestSpec(req_id, prefill, computed, scheduled, tuple(features))


def _s(*requests: RequestSpec, lookahead: int = 0, padding: int = 0) -> GatherScenario:
    return GatherScenario(requests=requests, draft_lookahead=lookahead, padding=padding)


#: G1: windows in the prompt, several requests, look-ahead, windows starting mid-feature.
WINDOW_CASES = (
    _s(_r("a", 20, 0, 6, _f("a0", 2, 3)), _r("b", 20, 3, 5, _f("b0", 5, 4))),
    _s(_r("a", 20, 0, 4, _f("a0", 2, 2)), _r("b", 20, 1, 3, _f("b0", 4, 2)), lookahead=2),
    _s(_r("a", 30, 4, 6, _f("a0", 2, 5), _f("a1", 8, 2))),
    _s(
        _r("a", 20, 3, 1, _f("a0", 2, 4)),
        _r("b", 20, 0, 4, _f("b0", 1, 2)),
        _r("c", 20, 2, 3, _f("c0", 3, 3)),
        lookahead=1,
    ),
)

#: G1: requests with zero scheduled tokens, inside placeholders, cached or not.
ZERO_SCHEDULED_CASES = (
    _s(_r("a", 20, 3, 0, _f("a0", 2, 4)), _r("b", 20, 0, 3, _f("b0", 0, 3))),
    _s(_r("a", 20, 3, 0, _f("a0", 2, 4, cached=False)), _r("b", 20, 0, 2, _f("b0", 0, 2))),
    _s(_r("a", 20, 4, 0, _f("a0", 2, 4))),
    _s(_r("a", 2, 5, 0, _f("a0", 4, 4)), _r("b", 9, 1, 2, _f("b0", 2, 2)), lookahead=1),
    _s(_r("z", 10, 3, 0, _f("z0", 2, 4)), _r("p", 10, 0, 4, _f("p0", 1, 5))),
)

#: G2: prefill requests first, then requests the non-realtime skip applies to, including
#: the look-ahead boundary (num_computed_tokens < prefill_len <= num_computed_tokens + L).
SKIP_CASES = (
    _s(_r("a", 10, 0, 4, _f("a0", 1, 2)), _r("b", 4, 6, 3, _f("b0", 6, 3))),
    _s(_r("a", 10, 0, 3, _f("a0", 0, 2)), _r("b", 5, 4, 2, _f("b0", 5, 3)), lookahead=1),
    _s(_r("a", 3, 3, 2, _f("a0", 3, 3)), _r("b", 2, 7, 1, _f("b0", 6, 3))),
    _s(_r("a", 6, 4, 2, _f("a0", 5, 2)), _r("b", 5, 5, 3, _f("b0", 3, 6))),
)

#: G2: batches where every request is skipped (one of them misses its output).
ALL_SKIPPED_CASES = (
    _s(_r("a", 3, 3, 2, _f("a0", 3, 3)), _r("b", 2, 7, 1, _f("b0", 6, 3))),
    _s(_r("a", 3, 4, 2, _f("a0", 4, 2, cached=False))),
    _s(_r("a", 4, 2, 2, _f("a0", 4, 2)), lookahead=2),
)

#: G3: realtime decode steps, alone, mixed with prefill, and batches that all decode.
REALTIME_DECODE_CASES = (
    _s(_r("a", 4, 6, 3, _f("a0", 5, 5)), _r("b", 2, 3, 2, _f("b0", 3, 2))),
    _s(_r("a", 3, 3, 1, _f("a0", 3, 1))),
    _s(_r("a", 10, 0, 4, _f("a0", 0, 2)), _r("b", 2, 4, 2, _f("b0", 4, 2))),
)

#: G4: one request in its prompt, masked features, windows starting inside them.
MASK_CASES = (
    _s(_r("a", 20, 0, 8, _f("a0", 1, 5, (_T, _F, _T, _T, _F)))),
    _s(_r("a", 20, 3, 4, _f("a0", 1, 6, (_F, _T, _F, _T, _T, _F)))),
    _s(_r("a", 20, 0, 5, _f("a0", 0, 3, (_F, _F, _F)), _f("a1", 3, 2))),
)

#: G5: the row of the first embed position when the window starts inside a feature.
ROW_CASES = (
    _s(_r("a", 20, 3, 3, _f("a0", 1, 6, (_F, _T, _F, _T, _T, _F)))),
    _s(_r("a", 20, 4, 3, _f("a0", 2, 6))),
    _s(_r("a", 20, 2, 4, _f("a0", 2, 4, (_F, _T, _T, _F)))),
)

#: G6: several requests with several features each in their windows.
PIECE_CASES = (
    _s(
        _r("a", 30, 0, 10, _f("a0", 1, 2), _f("a1", 5, 3)),
        _r("b", 30, 2, 6, _f("b0", 2, 2), _f("b1", 6, 1)),
    ),
    _s(_r("a", 30, 2, 4, _f("a0", 1, 2), _f("a1", 4, 5))),
    # "a"'s window [2, 5) holds only non-embed positions of a0: that pair gives no piece
    _s(_r("a", 30, 2, 3, _f("a0", 1, 5, (_T, _F, _F, _F, _T))), _r("b", 30, 0, 4, _f("b0", 1, 2))),
    _s(_r("a", 30, 0, 8, _f("a0", 0, 2), _f("a1", 3, 3, (_F, _F, _F)), _f("a2", 6, 2))),
)

#: G7: a needed output missing inside the scheduled tokens.
MISS_CASES = (
    _s(_r("a", 20, 0, 6, _f("a0", 2, 3, cached=False))),
    _s(_r("a", 20, 0, 3, _f("a0", 0, 2)), _r("b", 20, 0, 4, _f("b0", 1, 2, cached=False))),
    _s(_r("a", 20, 3, 2, _f("a0", 1, 5, cached=False))),
)

#: G7: missing outputs reached only through the look-ahead, including a feature that
#: starts exactly at the processed end (num_computed_tokens + num_scheduled_tokens).
LOOKAHEAD_MISS_CASES = (
    _s(_r("a", 20, 0, 4, _f("a0", 4, 2, cached=False)), lookahead=1),
    _s(_r("a", 20, 0, 4, _f("a0", 5, 3, cached=False)), lookahead=2),
    _s(_r("a", 20, 0, 4, _f("a0", 1, 2), _f("a1", 4, 2, cached=False)), lookahead=1),
)

#: G7: windows over only non-embed positions of features whose output is missing.
NON_EMBED_MISS_CASES = (
    _s(_r("a", 20, 6, 2, _f("a0", 2, 6, (_F, _F, _T, _T, _F, _F), cached=False))),
    _s(_r("a", 20, 0, 5, _f("a0", 0, 3, (_F, _F, _F), cached=False), _f("a1", 3, 2))),
    _s(_r("a", 20, 0, 4, _f("a0", 2, 4, (_F, _F, _T, _T), cached=False))),
)

#: Every kind of window in one place: a prompt's first chunk, a later chunk, a realtime
#: decode step (skipped by a non-realtime model), with and without ``is_embed`` masks, with
#: the drafter's look-ahead, and a step in which every request decodes.
#: Windows cover part of each feature, so that a wrong row or slot shows.
KIND_CASES = (
    _s(
        _r("p", 10, 0, 5, _f("p0", 1, 7)),
        _r("c", 10, 4, 4, _f("c0", 3, 5)),
        _r("d", 3, 5, 3, _f("d0", 4, 5)),
    ),
    _s(
        _r("p", 12, 0, 6, _f("p0", 1, 6, (_T, _F, _T, _T, _F, _T))),
        _r("c", 12, 3, 4, _f("c0", 2, 6, (_F, _T, _F, _T, _T, _F))),
        _r("d", 2, 4, 3, _f("d0", 3, 6, (_T, _F, _T, _T, _F, _T))),
    ),
    _s(
        _r("p", 20, 0, 4, _f("p0", 1, 6)),
        _r("c", 20, 3, 3, _f("c0", 2, 7, (_T, _T, _F, _T, _T, _F, _T))),
        _r("d", 2, 4, 2, _f("d0", 4, 6)),
        lookahead=1,
    ),
    # Every request decoding: the steady state of realtime serving.
    _s(
        _r("a", 3, 4, 2, _f("a0", 4, 5)),
        _r("b", 2, 3, 3, _f("b0", 1, 4, (_T, _F, _T, _T)), _f("b1", 5, 2)),
        _r("c", 1, 6, 1, _f("c0", 6, 3)),
    ),
)

#: G7: for each kind of window, a needed output missing inside the scheduled tokens next
#: to a cached one in the same window (so the request visibly gathers).
MISS_KIND_CASES = (
    _s(_r("p", 20, 0, 8, _f("p0", 0, 2), _f("p1", 3, 3, cached=False))),
    _s(_r("c", 20, 4, 6, _f("c0", 4, 2), _f("c1", 7, 2, cached=False))),
    _s(_r("d", 2, 5, 4, _f("d0", 5, 1), _f("d1", 7, 2, cached=False))),
    _s(_r("l", 20, 0, 5, _f("l0", 1, 1), _f("l1", 3, 2, cached=False)), lookahead=1),
    _s(_r("m", 20, 0, 8, _f("m0", 0, 2), _f("m1", 3, 4, (_T, _F, _T, _F), cached=False))),
)

#: A little of everything (look-ahead, masks, several features, a skip, a miss), for the
#: checks that hold for any batch: side effects, views, modality, the whole state.
ANY_CASES = (
    WINDOW_CASES[1],
    MASK_CASES[1],
    PIECE_CASES[0],
    SKIP_CASES[1],
    MISS_CASES[1],
)

#: Real steps in the prompt: outputs cached and to encode, padding (R1, R2).
PROMPT_STEP_CASES = (
    _s(
        _r("a", 12, 0, 6, _f("a0", 1, 3), _f("a1", 4, 2, cached=False)),
        _r("b", 9, 2, 4, _f("b0", 2, 3, cached=False), _f("b1", 5, 1)),
        padding=2,
    ),
)

#: Real steps in which every request decodes past its prompt, features in the window (R3).
DECODE_STEP_CASES = (
    _s(
        _r("a", 3, 4, 2, _f("a0", 4, 3, cached=False)),
        _r("b", 2, 5, 1, _f("b0", 3, 4), _f("b1", 7, 2)),
        padding=1,
    ),
)
