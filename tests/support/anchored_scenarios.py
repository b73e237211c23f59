"""Gather scenarios whose windows sit exactly on the edges the contract cares about.

The general strategy places windows near features at random; these place them on the
cases SPEC G1-G10 name explicitly, so each is drawn often rather than by luck: the
scheduled end exactly at a feature's start (a miss there is reached only through the
look-ahead), a window ending inside a feature, zero scheduled tokens inside a
placeholder, the last prefill chunk, and prompts ending inside a feature.
"""

from __future__ import annotations

from hypothesis import strategies as st

from rtmm_protocol.testing.scenario import FeatureSpec, GatherScenario, RequestSpec

__all__ = ["WINDOW_ANCHORS", "anchored_scenarios"]

#: Where a request's window is placed relative to one of its features.
WINDOW_ANCHORS = (
    "scheduled_end_at_start",  # computed + scheduled == offset
    "scheduled_end_inside",  # offset < computed + scheduled < end
    "window_start_at_start",  # computed + L == offset
    "window_start_inside",  # offset < computed + L < end
    "window_start_at_end",  # computed + L == end
    "zero_scheduled_inside",  # num_scheduled == 0, computed inside the placeholder
)

#: Where the prompt ends relative to the window or the feature.
PREFILL_ANCHORS = (
    "last_chunk",  # prefill_len == computed + scheduled
    "inside_feature",  # offset <= prefill_len <= end
    "window_start",  # prefill_len == computed + L (first decode step of the window)
    "window_start_plus_one",  # prefill_len == computed + L + 1
    "before_window",  # decode
    "after_everything",  # a long prompt
)


def _mask(length: int) -> st.SearchStrategy[tuple[bool, ...] | None]:
    """No mask, a fixed pattern (all, none, all but the edges), or random flags."""
    patterns = st.sampled_from(
        [
            None,
            (True,) * length,
            (False,) * length,
            tuple(0 < k < length - 1 for k in range(length)),
        ]
    )
    random_flags = st.lists(st.booleans(), min_size=length, max_size=length).map(tuple)
    return st.one_of(patterns, random_flags)


@st.composite
def _request(draw: st.DrawFn, index: int, lookahead: int) -> RequestSpec:
    features = []
    cursor = draw(st.integers(0, 4))
    for k in range(draw(st.integers(1, 3))):
        offset = cursor + draw(st.integers(0, 3))
        length = draw(st.integers(1, 6))
        features.append(
            FeatureSpec(
                identifier=f"q{index}f{k}",
                offset=offset,
                length=length,
                is_embed=draw(_mask(length)),
                cached=draw(st.integers(0, 9)) >= 3,
                modality=draw(st.sampled_from(["audio", "image", "video"])),
            )
        )
        cursor = offset + length
    target = draw(st.sampled_from(features))
    start, end = target.offset, target.offset + target.length
    anchor = draw(st.sampled_from(WINDOW_ANCHORS))
    scheduled = draw(st.integers(1, 7))
    inside = draw(st.integers(1, max(1, target.length - 1)))
    if anchor == "scheduled_end_at_start":
        computed = max(0, start - scheduled)
        scheduled = start - computed
    elif anchor == "scheduled_end_inside":
        computed = max(0, start + inside - scheduled)
        scheduled = start + inside - computed
    elif anchor == "window_start_at_start":
        computed = max(0, start - lookahead)
    elif anchor == "window_start_inside":
        computed = max(0, start + inside - lookahead)
    elif anchor == "window_start_at_end":
        computed = max(0, end - lookahead)
    else:
        computed = start + inside - 1
        scheduled = 0
    window_start = computed + lookahead
    prefill_anchor = draw(st.sampled_from(PREFILL_ANCHORS))
    if prefill_anchor == "last_chunk":
        prefill = computed + scheduled
    elif prefill_anchor == "inside_feature":
        prefill = draw(st.integers(start, end))
    elif prefill_anchor == "window_start":
        prefill = window_start
    elif prefill_anchor == "window_start_plus_one":
        prefill = window_start + 1
    elif prefill_anchor == "before_window":
        prefill = draw(st.integers(0, window_start))
    else:
        prefill = cursor + draw(st.integers(0, 3))
    return RequestSpec(
        req_id=f"anchored-{index}",
        prefill_len=prefill,
        num_computed_tokens=computed,
        num_scheduled_tokens=scheduled,
        features=tuple(features),
    )


@st.composite
def anchored_scenarios(draw: st.DrawFn) -> GatherScenario:
    """One to three requests, each with its window anchored on one of its features."""
    lookahead = draw(st.sampled_from([0, 1, 2]))
    count = draw(st.integers(1, 3))
    return GatherScenario(
        requests=tuple(draw(_request(i, lookahead)) for i in range(count)),
        hidden_size=draw(st.sampled_from([1, 3])),
        draft_lookahead=lookahead,
        padding=draw(st.integers(0, 2)),
    )
