"""Gather checks (SPEC G1-G10): the target against the oracle, one clause at a time.

Each check draws every kind of window its clause speaks of (a prompt's first chunk, a
later chunk, a realtime decode step, the drafter's look-ahead, ``is_embed`` masks) in
steps of every kind (all prompt, all decoding, mixed), all in the contract's domain (every
request has a scheduled token: zero-token requests are robustness, G1's second sentence,
judged by a check of their own), and judges only what its own clause decides, so that
a fault fails the check of the clause it breaks, not half the suite: the window check
compares the slots of embed and outside positions (the non-embed ones are G4's) of the
requests both sides gather (whether a request gathers is G2's and G3's); the mask check
judges non-embed positions where the window is right; the rows and pieces checks judge
where the mask is right; the missing-output check leaves requests the target skipped to
the skip clauses. The whole-state comparison (G10) and the stateful check compare
everything at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch
from hypothesis import strategies as st

from rtmm_conformance.checks import cases
from rtmm_conformance.checks.registry import check
from rtmm_conformance.clauses import STATE_KINDS
from rtmm_conformance.driving.check_run import CheckRun
from rtmm_conformance.driving.gather_call import GatherCall, Gathered, describe_error
from rtmm_conformance.results import CheckFailure
from rtmm_protocol.testing import comparisons
from rtmm_protocol.testing.instruments import EVERY_KEY
from rtmm_protocol.testing.scenario import GatherScenario
from rtmm_protocol.testing.snapshots import CacheSnapshot
from rtmm_protocol.testing.strategies import (
    gather_scenarios,
    lookahead_only_misses,
    non_embed_only_misses,
    prefill_first,
    with_non_embed_windows,
    with_zero_scheduled,
)

__all__: list[str] = []

# ---------------------------------------------------------------------- families


def _every_kind(run: CheckRun) -> st.SearchStrategy[GatherScenario]:
    """Any step of the domain: prompt chunks, decode steps, masks, look-ahead; every output
    cached."""
    return gather_scenarios(windows="mixed", cache_miss_rate=0.0)


def _anything(run: CheckRun) -> st.SearchStrategy[GatherScenario]:
    """Any batch, every output cached."""
    return gather_scenarios(cache_miss_rate=0.0)


def _anything_with_misses(run: CheckRun) -> st.SearchStrategy[GatherScenario]:
    """Any batch, some outputs missing."""
    return gather_scenarios(cache_miss_rate=0.2)


# ---------------------------------------------------------------------- helpers


def _owner_of_identifiers(scenario: GatherScenario) -> dict[str, str]:
    return {f.identifier: r.req_id for r in scenario.requests for f in r.features}


def _decodes(scenario: GatherScenario, index: int) -> bool:
    request = scenario.requests[index]
    return request.num_computed_tokens + scenario.draft_lookahead >= request.prefill_len


def _sources(call: GatherCall, gathered: Gathered) -> list[tuple[str, int] | None]:
    rows = gathered.rows(call.scenario.hidden_size)
    return [call.source_of(row) for row in rows]


def _format_sources(sources: Sequence[tuple[str, int] | None]) -> str:
    if not sources:
        return "no rows"
    shown = ", ".join("?" if s is None else f"{s[0]}[{s[1]}]" for s in sources[:8])
    return shown + (f" ... ({len(sources)} rows)" if len(sources) > 8 else "")


def _expected_sources(call: GatherCall, req_id: str | None = None) -> list[tuple[str, int]]:
    return [
        (row.identifier, row.row)
        for row in call.oracle.rows
        if req_id is None or call.scenario.requests[row.req_index].req_id == req_id
    ]


def _slot_classes(call: GatherCall) -> tuple[list[int], list[str]]:
    """Per scheduled slot, its request's index and its position's class: ``embed``,
    ``non-embed`` (in a placeholder, ``is_embed`` False there) or ``outside``."""
    owners, classes = [], []
    for i, request in enumerate(call.scenario.requests):
        start = request.num_computed_tokens + call.scenario.draft_lookahead
        for position in range(start, start + request.num_scheduled_tokens):
            kind = "outside"
            for f in request.features:
                if f.offset <= position < f.offset + f.length:
                    embed = f.is_embed is None or f.is_embed[position - f.offset]
                    kind = "embed" if embed else "non-embed"
                    break
            owners.append(i)
            classes.append(kind)
    return owners, classes


def _both_gather(
    run: CheckRun, call: GatherCall, gathered: Gathered, owners: list[int]
) -> set[int]:
    """The requests the oracle gathers (G2/G3) that the target gathered for too: the ones
    whose slots the window and mask checks can judge."""
    look = call.scenario.draft_lookahead
    realtime = run.mode == "realtime"
    oracle = {
        i
        for i, r in enumerate(call.scenario.requests)
        if realtime or r.num_computed_tokens + look < r.prefill_len
    }
    target = {owners[s] for s in comparisons.nonzero(gathered.mask).flatten().tolist()}
    return oracle & target


def _mask_differences(call: GatherCall, gathered: Gathered, slots: Sequence[int]) -> list[int]:
    expected = call.oracle.mask
    return [s for s in slots if bool(gathered.mask[s]) != expected[s]]


def _compare_mask(call: GatherCall, gathered: Gathered, what: str) -> None:
    expected = call.oracle.mask_tensor()
    diff = comparisons.nonzero(comparisons.ne(expected, gathered.mask)).flatten().tolist()
    if diff:
        raise CheckFailure(
            what,
            expected=f"True at {call.describe_slots(comparisons.nonzero(expected).flatten().tolist())}"
            if bool(expected.any())
            else "an all-False mask",
            seen=f"the mask differs at {call.describe_slots(diff)}",
        )


def _no_raise_in_window(run: CheckRun, call: GatherCall, what: str) -> None:
    """:func:`_no_raise`, unless the error names only features outside the windows the
    oracle gathers over (a misplaced window: G1's to judge)."""
    if call.error is not None:
        look, realtime = call.scenario.draft_lookahead, run.mode == "realtime"
        inside = set()
        for r in call.scenario.requests:
            start = r.num_computed_tokens + look
            if not realtime and start >= r.prefill_len:
                continue
            end = start + r.num_scheduled_tokens
            inside |= {
                f.identifier for f in r.features if f.offset < end and start < f.offset + f.length
            }
        named = {
            f.identifier for f in call.scenario.feature_specs() if f.identifier in str(call.error)
        }
        if named and not named & inside:
            return
    _no_raise(call, what)


def _no_raise(call: GatherCall, what: str) -> Gathered:
    if call.error is not None:
        raise CheckFailure(
            what,
            expected="a result (no needed output is missing)",
            seen=describe_error(call.error),
        ) from call.error
    return call.unpack()


# ---------------------------------------------------------------------- G1


@check(
    "G1-window-slots",
    "MUST",
    "Request i covers positions [num_computed_tokens[i] + L, ... + num_scheduled_tokens[i]) and position p lands in slot query_start_loc[i] + (p - start).",
    strategy=_every_kind,
    cases=[*cases.WINDOW_CASES, *cases.KIND_CASES],
)
def _window_slots(run: CheckRun, scenario: GatherScenario) -> None:
    call = run.gather_fresh(scenario)
    gathered = call.unpack()
    owners, classes = _slot_classes(call)
    judged = _both_gather(run, call, gathered, owners)
    slots = [
        s
        for s, (i, c) in enumerate(zip(owners, classes, strict=True))
        if i in judged and c != "non-embed"
    ]
    diff = _mask_differences(call, gathered, slots)
    if diff:
        marked = [s for s in slots if call.oracle.mask[s]]
        raise CheckFailure(
            "the mask does not mark the window's embed positions at query_start_loc[i] + (p - start)",
            expected=f"True at {call.describe_slots(marked)}" if marked else "no True slot there",
            seen=f"the mask differs at {call.describe_slots(diff)}",
        )


@check(
    "G1-zero-scheduled-contributes-nothing",
    "SHOULD",
    "A request with zero scheduled tokens contributes nothing, wherever its window starts.",
    profile="robustness",
    strategy=lambda run: with_zero_scheduled(
        gather_scenarios(windows="mixed", cache_miss_rate=0.3)
    ),
    cases=cases.ZERO_SCHEDULED_CASES,
)
def _zero_scheduled(run: CheckRun, scenario: GatherScenario) -> None:
    call = run.gather_fresh(scenario)
    if call.oracle.raises:
        return  # another request misses an output; G7 judges that
    if call.error is not None:
        raise CheckFailure(
            "the gather raised for a batch whose requests with scheduled tokens have "
            "every needed output",
            expected="a result: a request with zero scheduled tokens needs nothing",
            seen=describe_error(call.error),
        ) from call.error
    gathered = call.unpack()
    owners = _owner_of_identifiers(scenario)
    idle = {r.req_id for r in scenario.requests if r.num_scheduled_tokens == 0}
    taken = [s for s in _sources(call, gathered) if s is not None and owners.get(s[0]) in idle]
    if taken:
        raise CheckFailure(
            "a request with zero scheduled tokens contributed rows",
            expected=f"no rows from the features of {sorted(idle)}",
            seen=_format_sources(taken),
        )
    empty = sum(1 for piece in gathered.pieces if piece.shape[0] == 0)
    if idle and empty and len(gathered.pieces) > len(call.oracle.pieces):
        # No pair contributes an empty piece (G6): one more piece than the oracle's, and
        # empty, is a zero-token request's.
        raise CheckFailure(
            "a request with zero scheduled tokens contributed a piece",
            expected=f"{len(call.oracle.pieces)} pieces, none for {sorted(idle)}",
            seen=f"{len(gathered.pieces)} pieces, {empty} of them empty",
        )


# ---------------------------------------------------------------------- G2


def _skip_family(run: CheckRun) -> st.SearchStrategy[GatherScenario]:
    return gather_scenarios(windows="mixed", masks=False, cache_miss_rate=0.0).map(prefill_first)


@check(
    "G2-nonrealtime-decode-skipped",
    "MUST",
    "With a non-realtime model, a request whose window starts at or past prefill_len contributes no piece and no mask bit.",
    strategy=_skip_family,
    cases=cases.SKIP_CASES,
    modes=("non-realtime",),
)
def _decode_skipped(run: CheckRun, scenario: GatherScenario) -> None:
    call = run.gather_fresh(scenario)
    gathered = call.unpack()
    owners = _owner_of_identifiers(scenario)
    skipped = {r.req_id for i, r in enumerate(scenario.requests) if _decodes(scenario, i)}
    taken = [s for s in _sources(call, gathered) if s is not None and owners.get(s[0]) in skipped]
    start = 0
    marked: list[int] = []
    for request in scenario.requests:
        end = start + request.num_scheduled_tokens
        if request.req_id in skipped:
            marked.extend(start + k for k in np.flatnonzero(gathered.mask[start:end].numpy()))
        start = end
    if taken or marked:
        seen = []
        if taken:
            seen.append(f"rows {_format_sources(taken)}")
        if marked:
            seen.append(f"True at {call.describe_slots(marked)}")
        raise CheckFailure(
            "a non-realtime request whose window starts at or past prefill_len contributed",
            expected=f"nothing from {sorted(skipped)} (num_computed_tokens + L >= prefill_len)",
            seen="; ".join(seen),
        )


@check(
    "G2-skipped-outputs-not-read",
    "MUST",
    "The encoder outputs of a skipped non-realtime decode request are not read from the cache.",
    strategy=_skip_family,
    cases=cases.SKIP_CASES,
    modes=("non-realtime",),
)
def _skipped_not_read(run: CheckRun, scenario: GatherScenario) -> None:
    call = run.gather_fresh(scenario)
    skipped_ids = {
        f.identifier
        for i, r in enumerate(scenario.requests)
        if _decodes(scenario, i)
        for f in r.features
    }
    if not skipped_ids:
        return
    read = skipped_ids & call.output_reads
    if EVERY_KEY in call.output_reads:
        read = skipped_ids
    if read:
        raise CheckFailure(
            "the encoder outputs of skipped non-realtime decode requests were read",
            expected="no read of encoder_outputs for their features",
            seen=f"read {sorted(read)}"
            + (" (by iterating over every output)" if EVERY_KEY in call.output_reads else ""),
        )


@check(
    "G2-all-skipped-empty-result",
    "MUST",
    "When every request is skipped the result is ([], an all-False mask).",
    strategy=lambda run: gather_scenarios(windows="decode", cache_miss_rate=0.3),
    cases=cases.ALL_SKIPPED_CASES,
    modes=("non-realtime",),
)
def _all_skipped(run: CheckRun, scenario: GatherScenario) -> None:
    call = run.gather_fresh(scenario)
    if call.error is not None:
        raise CheckFailure(
            "the gather raised for a batch in which every request is skipped",
            expected="([], an all-False mask)",
            seen=describe_error(call.error),
        ) from call.error
    gathered = call.unpack()
    if gathered.pieces or bool(gathered.mask.any()):
        raise CheckFailure(
            "a batch in which every non-realtime request decodes did not give an empty result",
            expected=f"([], {call.total} False entries)",
            seen=f"{len(gathered.pieces)} pieces, {int(gathered.mask.sum())} True entries",
        )


# ---------------------------------------------------------------------- G3


@check(
    "G3-realtime-decode-gathers",
    "MUST",
    "With a realtime model every request gathers over its window, decode steps included.",
    strategy=lambda run: gather_scenarios(
        windows="mixed", masks=False, cache_miss_rate=0.0, lookaheads=(0,)
    ),
    cases=cases.REALTIME_DECODE_CASES,
    modes=("realtime",),
)
def _realtime_gathers(run: CheckRun, scenario: GatherScenario) -> None:
    call = run.gather_fresh(scenario)
    gathered = call.unpack()
    owners, _ = _slot_classes(call)
    marked = {owners[s] for s in comparisons.nonzero(gathered.mask).flatten().tolist()}
    by_feature = _owner_of_identifiers(scenario)
    position = {r.req_id: i for i, r in enumerate(scenario.requests)}
    marked |= {position[by_feature[s[0]]] for s in _sources(call, gathered) if s is not None}
    expected = {owners[s] for s, flag in enumerate(call.oracle.mask) if flag}
    for index, request in enumerate(scenario.requests):
        # Whether a decode step gathers at all is G3's; which slots and rows, G1/G4/G5's.
        if _decodes(scenario, index) and index in expected and index not in marked:
            raise CheckFailure(
                f"realtime request {request.req_id!r} decoding past its prompt did not "
                "gather its window",
                expected=_format_sources(_expected_sources(call, request.req_id)),
                seen="no True slot and no row for it",
            )


# ---------------------------------------------------------------------- G4


@check(
    "G4-mask-type-shape",
    "MUST",
    "is_mm_embed is a bool CPU tensor of shape (total_num_scheduled_tokens,), never the padded count.",
    strategy=_every_kind,
    cases=[*cases.WINDOW_CASES[:1], *cases.MASK_CASES[:1], *cases.KIND_CASES],
)
def _mask_type_shape(run: CheckRun, scenario: GatherScenario) -> None:
    padded = GatherScenario(
        requests=scenario.requests,
        hidden_size=scenario.hidden_size,
        draft_lookahead=scenario.draft_lookahead,
        padding=max(scenario.padding, 1),
        extra_requests=scenario.extra_requests,
    )
    call = run.gather_fresh(padded)
    if call.error is not None:
        raise CheckFailure(
            "the gather raised for a batch whose needed outputs are all cached",
            expected="(mm_embeds, is_mm_embed)",
            seen=describe_error(call.error),
        ) from call.error
    result = call.result
    mask = result[1] if isinstance(result, (tuple, list)) and len(result) == 2 else None
    problems = []
    if not isinstance(mask, torch.Tensor):
        problems.append(f"a {type(mask).__name__}")
    else:
        if mask.dtype != torch.bool:
            problems.append(f"dtype {mask.dtype}")
        if mask.device.type != "cpu":
            problems.append(f"device {mask.device}")
        if tuple(mask.shape) != (call.total,):
            problems.append(
                f"shape {tuple(mask.shape)}"
                + (
                    " (the padded count)"
                    if call.kind != "gatherer"
                    and tuple(mask.shape) == (call.total + padded.padding,)
                    else ""
                )
            )
    if problems:
        raise CheckFailure(
            "is_mm_embed is not a bool CPU tensor over the scheduled tokens",
            expected=f"dtype torch.bool, device cpu, shape ({call.total},)",
            seen=", ".join(problems),
        )


@check(
    "G4-non-embed-positions-false",
    "MUST",
    "A mask slot is True exactly at embed positions of features; positions whose is_embed is False stay False.",
    strategy=_every_kind,
    cases=[*cases.MASK_CASES, *cases.KIND_CASES],
)
def _non_embed_false(run: CheckRun, scenario: GatherScenario) -> None:
    call = run.gather_fresh(scenario)
    gathered = call.unpack()
    _, classes = _slot_classes(call)
    diff = _mask_differences(call, gathered, range(call.total))
    if not diff or any(classes[s] != "non-embed" for s in diff):
        return  # a difference at an embed or outside position is another clause's (G1-G3, G7)
    raise CheckFailure(
        "the mask is True at positions whose is_embed is False",
        expected=f"False at {call.describe_slots(diff)} (non-embed positions keep their "
        "token embedding)",
        seen=f"True at {call.describe_slots(diff)}",
    )


# ---------------------------------------------------------------------- G5


@check(
    "G5-rows-match-mask",
    "MUST",
    "torch.cat(mm_embeds) has is_mm_embed.sum() rows and its j-th row is the encoder-output row of the j-th True slot.",
    strategy=_every_kind,
    cases=[*cases.ROW_CASES, *cases.KIND_CASES],
)
def _rows_match_mask(run: CheckRun, scenario: GatherScenario) -> None:
    call = run.gather_fresh(scenario)
    gathered = call.unpack()
    rows = gathered.rows(scenario.hidden_size)
    true_slots = int(gathered.mask.sum())
    if rows.shape[0] != true_slots:
        raise CheckFailure(
            "torch.cat(mm_embeds) does not have one row per True slot of is_mm_embed",
            expected=f"{true_slots} rows",
            seen=f"{rows.shape[0]} rows: {_format_sources(_sources(call, gathered))}",
        )
    if _mask_differences(call, gathered, range(call.total)):
        return  # which row a wrong slot should hold is not defined: G1-G4 judge the mask
    expected = call.expected_rows()
    if rows.shape != expected.shape or not comparisons.equal(rows, expected):
        raise CheckFailure(
            "the gathered rows are not the encoder-output rows of the True slots",
            expected=_format_sources(_expected_sources(call)),
            seen=_format_sources(_sources(call, gathered)),
        )


# ---------------------------------------------------------------------- G6


@check(
    "G6-one-piece-per-feature-window",
    "MUST",
    "mm_embeds holds one piece per (request, feature) pair with an embed position in the window, in batch order then feature order.",
    strategy=lambda run: st.one_of(
        with_non_embed_windows(gather_scenarios(windows="mixed", cache_miss_rate=0.0)),
        gather_scenarios(windows="mixed", cache_miss_rate=0.0),
    ),
    cases=[*cases.PIECE_CASES, *cases.KIND_CASES],
)
def _one_piece_per_pair(run: CheckRun, scenario: GatherScenario) -> None:
    call = run.gather_fresh(scenario)
    gathered = call.unpack()
    if _mask_differences(call, gathered, range(call.total)):
        return  # which pairs are in a window is G1-G4's to judge; which rows, G5's
    expected = [p.identifier for p in call.oracle.pieces]
    seen = []
    for piece in gathered.pieces:
        sources = [call.source_of(row) for row in piece.detach().to("cpu", torch.float32)]
        owners = {s[0] for s in sources if s is not None}
        rows = [s[1] for s in sources if s is not None]
        one_run = len(owners) == 1 and rows == list(range(rows[0], rows[0] + len(rows)))
        seen.append(
            owners.pop() if one_run else f"<{len(sources)} rows, not one run of one output>"
        )
    if seen != expected:
        raise CheckFailure(
            "mm_embeds is not one piece per (request, feature) pair in batch then feature order",
            expected=", ".join(expected) or "no pieces",
            seen=", ".join(seen) or "no pieces",
        )


@check(
    "G6-pieces-are-views",
    "MUST",
    "Each piece is a contiguous row slice (a view, no copy) of its feature's cached output.",
    strategy=_every_kind,
    cases=[*cases.ANY_CASES, *cases.KIND_CASES],
)
def _pieces_are_views(run: CheckRun, scenario: GatherScenario) -> None:
    call = run.gather_fresh(scenario)
    if call.oracle.raises:
        return  # a missing output: G7's business
    gathered = call.unpack()
    for index, piece in enumerate(gathered.pieces):
        if not _is_row_view(piece, call.outputs.values()):
            raise CheckFailure(
                "a piece of mm_embeds is a copy, not a view of a cached encoder output",
                expected=f"mm_embeds[{index}] sharing storage with its feature's output, "
                "as a contiguous row slice",
                seen=f"storage {piece.untyped_storage().data_ptr():#x}, stride "
                f"{tuple(piece.stride())}, matching no cached output",
            )


def _is_row_view(piece: torch.Tensor, outputs: Iterable[torch.Tensor]) -> bool:
    storage = piece.untyped_storage().data_ptr()
    for output in outputs:
        if output.untyped_storage().data_ptr() != storage:
            continue
        if piece.shape[0] == 0:
            return True
        row = output.stride(0)
        # ``storage_offset`` is typed to allow symbolic ints; these tensors are eager.
        delta = int(piece.storage_offset()) - int(output.storage_offset())
        if piece.stride() == output.stride() and delta % max(row, 1) == 0:
            first = delta // max(row, 1)
            if first >= 0 and first + piece.shape[0] <= output.shape[0]:
                return True
    return False


@check(
    "G6-pieces-carry-modality",
    "SHOULD",
    "Each piece carries its feature's modality as piece.modality.",
    strategy=_every_kind,
    cases=[*cases.ANY_CASES, *cases.KIND_CASES],
)
def _pieces_modality(run: CheckRun, scenario: GatherScenario) -> None:
    call = run.gather_fresh(scenario)
    if call.oracle.raises:
        return  # a missing output: G7's business
    gathered = call.unpack()
    modality = {f.identifier: f.modality for r in scenario.requests for f in r.features}
    for index, piece in enumerate(gathered.pieces):
        if piece.shape[0] == 0:
            continue
        source = call.source_of(piece.detach().to("cpu", torch.float32)[0])
        if source is None:
            continue
        wanted = modality[source[0]]
        seen = getattr(piece, "modality", None)
        if seen != wanted:
            raise CheckFailure(
                "a piece does not carry its feature's modality",
                expected=f"mm_embeds[{index}].modality == {wanted!r} (feature {source[0]})",
                seen="no modality attribute" if seen is None else repr(seen),
            )


# ---------------------------------------------------------------------- G7


@check(
    "G7-missing-output-raises",
    "MUST",
    "A needed encoder output missing inside the scheduled tokens raises a RuntimeError subclass whose message names the identifier.",
    strategy=lambda run: gather_scenarios(windows="mixed", cache_miss_rate=0.5),
    cases=[*cases.MISS_CASES, *cases.MISS_KIND_CASES],
)
def _missing_raises(run: CheckRun, scenario: GatherScenario) -> None:
    call = run.gather_fresh(scenario)
    missing = [identifier for identifier, _ in call.oracle.missing]
    if not missing:
        _no_raise_in_window(run, call, "the gather raised although every needed output is cached")
        return
    error = call.error
    if error is None:
        owners, _ = _slot_classes(call)
        gathered = call.unpack()
        target = {owners[s] for s in comparisons.nonzero(gathered.mask).flatten().tolist()}
        req_index = {r.req_id: i for i, r in enumerate(scenario.requests)}
        # A target that looked a missing output up saw the miss: whatever it returns then
        # (an empty result too) is this clause's. One that neither looked it up nor
        # marked a slot of its request skipped that request: G2 and G3 judge skipping.
        looked_up = [identifier for identifier in missing if identifier in call.output_reads]
        if not looked_up and not {req_index[req_id] for _, req_id in call.oracle.missing} & target:
            return
        raise CheckFailure(
            "a needed encoder output is missing but the gather returned a result",
            expected=f"a RuntimeError subclass naming {missing[0]!r}",
            seen=f"a result, after looking {looked_up[0]!r} up"
            if looked_up
            else "a (partial) result",
        )
    if not isinstance(error, RuntimeError):
        raise CheckFailure(
            "a missing encoder output raised an exception that is not a RuntimeError",
            expected=f"a RuntimeError subclass naming {missing[0]!r}",
            seen=describe_error(error),
        ) from error
    if not any(identifier in str(error) for identifier in missing):
        raise CheckFailure(
            "the error for a missing encoder output does not name the identifier",
            expected=f"a message naming {' or '.join(repr(i) for i in missing)}",
            seen=describe_error(error),
        ) from error


@check(
    "G7-lookahead-miss-falls-back",
    "MUST",
    "A missing output of a feature starting at or after the scheduled end, reached only through the look-ahead, falls back to token embeddings without raising.",
    strategy=lambda run: lookahead_only_misses(
        gather_scenarios(windows="mixed", cache_miss_rate=0.0, lookaheads=(1, 2))
    ),
    cases=cases.LOOKAHEAD_MISS_CASES,
)
def _lookahead_miss(run: CheckRun, scenario: GatherScenario) -> None:
    call = run.gather_fresh(scenario)
    _no_raise_in_window(
        run,
        call,
        "the gather raised for a missing output that only the look-ahead reaches (the "
        "feature starts at or after num_computed_tokens + num_scheduled_tokens)",
    )


@check(
    "G7-non-embed-window-needs-nothing",
    "MUST",
    "A window over only non-embed positions of a feature needs no encoder output.",
    strategy=lambda run: non_embed_only_misses(
        gather_scenarios(windows="mixed", masks=True, cache_miss_rate=0.0)
    ),
    cases=cases.NON_EMBED_MISS_CASES,
)
def _non_embed_miss(run: CheckRun, scenario: GatherScenario) -> None:
    call = run.gather_fresh(scenario)
    _no_raise_in_window(
        run,
        call,
        "the gather raised for a missing output whose window holds only non-embed positions",
    )


# ---------------------------------------------------------------------- G8, G9


@check(
    "G8-cache-unchanged",
    "MUST",
    "Gathering changes no encoder output, feature or cache dict.",
    strategy=_anything_with_misses,
    cases=cases.ANY_CASES,
)
def _cache_unchanged(run: CheckRun, scenario: GatherScenario) -> None:
    built = run.build_loaded(scenario)
    before = CacheSnapshot.take(built.cache)
    run.gather(built, scenario)
    changes = before.changes(built.cache)
    if changes:
        raise CheckFailure(
            "the gather changed the encoder cache",
            expected="encoder outputs, features and the cache dicts unchanged",
            seen="; ".join(changes[:5]),
        )


@check(
    "G9-inputs-unchanged",
    "MUST",
    "The numpy arrays passed in are unchanged after the call.",
    strategy=_anything_with_misses,
    cases=cases.ANY_CASES,
)
def _inputs_unchanged(run: CheckRun, scenario: GatherScenario) -> None:
    call = run.gather_fresh(scenario)
    changed = [
        name
        for name, value in call.passed.items()
        if not (
            isinstance(value, np.ndarray)
            and value.shape == call.before[name].shape
            and value.dtype == call.before[name].dtype
            and comparisons.array_equal(value, call.before[name])
        )
    ]
    if changed:
        name = changed[0]
        raise CheckFailure(
            "the gather modified the arrays it was given",
            expected=f"{', '.join(changed)} unchanged (compute num_computed_tokens + L into a "
            "new array)",
            seen=f"{name} was {call.before[name].tolist()} and is now "
            f"{np.asarray(call.passed[name]).tolist()}",
        )


# ---------------------------------------------------------------------- G10


@check(
    "G10-state-matches-oracle",
    "MUST",
    "ModelState.gather_mm_embeddings(batch, L) equals the runner-level gather over the batch's fields (num_tokens, prefill_len_np, num_computed_tokens_np).",
    kinds=STATE_KINDS,
    strategy=_anything_with_misses,
    cases=cases.ANY_CASES,
    cross_cutting=True,
)
def _state_matches_oracle(run: CheckRun, scenario: GatherScenario) -> None:
    call = run.gather_fresh(scenario)
    if call.oracle.raises:
        if call.error is None:
            raise CheckFailure(
                "the state-level gather returned a result where the runner-level gather raises",
                expected=f"an error naming {call.oracle.missing[0][0]!r}",
                seen="a result",
            )
        return
    gathered = _no_raise(call, "the state-level gather raised where the runner-level one does not")
    _compare_mask(call, gathered, "the state-level mask differs from the runner-level gather")
    rows = gathered.rows(scenario.hidden_size)
    expected = call.expected_rows()
    if rows.shape != expected.shape or not comparisons.equal(rows, expected):
        raise CheckFailure(
            "the state-level rows differ from the runner-level gather",
            expected=_format_sources(_expected_sources(call)),
            seen=_format_sources(_sources(call, gathered)),
        )
