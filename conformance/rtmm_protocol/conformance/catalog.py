"""The check catalog: every conformance check as plain data (ID, clause, level, statement).

This module is pure data and imports only the standard library, so that tools without
torch (the documentation build loads it by path) can list the checks. The code that
runs each check lives in the ``checks_*`` modules and registers itself under these IDs;
a self-test keeps the two in step.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "AREAS",
    "CHECKS",
    "CHECKS_BY_ID",
    "CLAUSES",
    "LEVELS",
    "TARGET_KINDS",
    "Area",
    "CheckInfo",
    "Level",
    "TargetKind",
    "checks_for_clause",
    "clause_of",
    "clauses_for",
    "spec_anchor",
    "version_key",
]

Level = Literal["MUST", "SHOULD"]
Area = Literal[
    "gather", "dummy_run", "real_path", "cuda_graphs", "errors", "signatures", "stateful"
]
TargetKind = Literal["model_state", "gatherer"]

#: Requirement levels, strongest first.
LEVELS: Final[tuple[Level, ...]] = ("MUST", "SHOULD")
#: Spec areas the checks are grouped by, in report order.
AREAS: Final[tuple[Area, ...]] = (
    "signatures",
    "gather",
    "stateful",
    "dummy_run",
    "real_path",
    "cuda_graphs",
    "errors",
)
#: The two kinds of object a factory may return.
TARGET_KINDS: Final[tuple[TargetKind, ...]] = ("model_state", "gatherer")

_BOTH: Final[tuple[TargetKind, ...]] = ("model_state", "gatherer")
_STATE: Final[tuple[TargetKind, ...]] = ("model_state",)


@dataclass(frozen=True)
class CheckInfo:
    """What one check requires, independent of how it is run.

    ``id`` starts with the clause it checks (``G5-rows-match-mask``); ``since`` is the
    protocol version that introduced the check, so a report can be scored against the
    requirement set of an older version; ``targets`` lists the target kinds it applies to.
    """

    id: str
    clause: str
    level: Level
    area: Area
    statement: str
    since: str
    targets: tuple[TargetKind, ...]


#: Clause ID -> short title, for every clause of the specification's sections 3 to 7.
CLAUSES: Final[Mapping[str, str]] = types.MappingProxyType(
    {
        "G1": "The gather window",
        "G2": "Non-realtime decode is skipped",
        "G3": "Realtime models always gather",
        "G4": "The mask",
        "G5": "The rows",
        "G6": "The pieces",
        "G7": "Cache misses",
        "G8": "No side effects",
        "G9": "Inputs are not mutated",
        "G10": "The two levels agree",
        "D1": "Dummy-run shape",
        "D2": "One persistent buffer",
        "D3": "No encoder and no cache in dummy runs",
        "D4": "No allocation in dummy runs",
        "D5": "Over-size dummy runs",
        "R1": "Encoding the scheduled items",
        "R2": "Merged embeddings in the buffer",
        "R3": "Decode steps",
        "R4": "CUDA graphs",
        "E1": "Malformed batches",
        "E2": "Malformed features",
        "E3": "No truncation, no crash",
        "T1": "The Protocols are satisfied",
        "T2": "The num_computed_tokens rename",
        "T3": "Realtime markers",
    }
)


def _check(
    id: str,
    level: Level,
    area: Area,
    statement: str,
    targets: tuple[TargetKind, ...] = _BOTH,
    since: str = "1.0",
) -> CheckInfo:
    return CheckInfo(
        id=id,
        clause=id.split("-", 1)[0],
        level=level,
        area=area,
        statement=statement,
        since=since,
        targets=targets,
    )


#: Every check of the suite, in report order.
CHECKS: Final[tuple[CheckInfo, ...]] = (
    # ------------------------------------------------------------------ signatures
    _check(
        "T1-factory-builds",
        "MUST",
        "signatures",
        "The factory returns a target for the conformance context without raising.",
    ),
    _check(
        "T1-protocol-members",
        "MUST",
        "signatures",
        "The target has every member of the ModelState or MMEmbeddingGatherer Protocol, "
        "with attributes of the declared types.",
    ),
    _check(
        "T2-no-renamed-parameters",
        "MUST",
        "signatures",
        "No method still names a parameter by its pre-rename name (computed_prefill_lens "
        "is now num_computed_tokens).",
    ),
    _check(
        "T2-signature-matches-protocol",
        "MUST",
        "signatures",
        "Method parameters match the Protocol's names, order and defaults.",
    ),
    _check(
        "T3-realtime-guard-semantics",
        "MUST",
        "signatures",
        "Only a class-level supports_realtime that is True makes a model realtime; an "
        "instance attribute or a truthy non-bool does not.",
    ),
    # ------------------------------------------------------------------ gather
    _check(
        "G1-window-slots",
        "MUST",
        "gather",
        "Request i covers positions [num_computed_tokens[i] + L, ... + num_scheduled_tokens[i]) "
        "and position p lands in slot query_start_loc[i] + (p - start).",
    ),
    _check(
        "G1-zero-scheduled-contributes-nothing",
        "MUST",
        "gather",
        "A request with zero scheduled tokens contributes nothing, wherever its window starts.",
    ),
    _check(
        "G2-nonrealtime-decode-skipped",
        "MUST",
        "gather",
        "With a non-realtime model, a request whose window starts at or past prefill_len "
        "contributes no piece and no mask bit.",
    ),
    _check(
        "G2-skipped-outputs-not-read",
        "MUST",
        "gather",
        "The encoder outputs of a skipped non-realtime decode request are not read from the cache.",
    ),
    _check(
        "G2-all-skipped-empty-result",
        "MUST",
        "gather",
        "When every request is skipped the result is ([], an all-False mask).",
    ),
    _check(
        "G3-realtime-decode-gathers",
        "MUST",
        "gather",
        "With a realtime model every request gathers over its window, decode steps included.",
    ),
    _check(
        "G4-mask-type-shape",
        "MUST",
        "gather",
        "is_mm_embed is a bool CPU tensor of shape (total_num_scheduled_tokens,), never the "
        "padded count.",
    ),
    _check(
        "G4-non-embed-positions-false",
        "MUST",
        "gather",
        "A mask slot is True exactly at embed positions of features; positions whose "
        "is_embed is False stay False.",
    ),
    _check(
        "G5-rows-match-mask",
        "MUST",
        "gather",
        "torch.cat(mm_embeds) has is_mm_embed.sum() rows and its j-th row is the encoder-output "
        "row of the j-th True slot.",
    ),
    _check(
        "G6-one-piece-per-feature-window",
        "MUST",
        "gather",
        "mm_embeds holds one piece per (request, feature) pair with an embed position in the "
        "window, in batch order then feature order.",
    ),
    _check(
        "G6-pieces-are-views",
        "MUST",
        "gather",
        "Each piece is a contiguous row slice (a view, no copy) of its feature's cached output.",
    ),
    _check(
        "G6-pieces-carry-modality",
        "SHOULD",
        "gather",
        "Each piece carries its feature's modality as piece.modality.",
    ),
    _check(
        "G7-missing-output-raises",
        "MUST",
        "gather",
        "A needed encoder output missing inside the scheduled tokens raises a RuntimeError "
        "subclass whose message names the identifier.",
    ),
    _check(
        "G7-lookahead-miss-falls-back",
        "MUST",
        "gather",
        "A missing output of a feature starting at or after the scheduled end, reached only "
        "through the look-ahead, falls back to token embeddings without raising.",
    ),
    _check(
        "G7-non-embed-window-needs-nothing",
        "MUST",
        "gather",
        "A window over only non-embed positions of a feature needs no encoder output.",
    ),
    _check(
        "G8-cache-unchanged",
        "MUST",
        "gather",
        "Gathering changes no encoder output, feature or cache dict.",
    ),
    _check(
        "G9-inputs-unchanged",
        "MUST",
        "gather",
        "The numpy arrays passed in are unchanged after the call.",
    ),
    _check(
        "G10-state-matches-oracle",
        "MUST",
        "gather",
        "ModelState.gather_mm_embeddings(batch, L) equals the runner-level gather over the "
        "batch's fields (num_tokens, prefill_len_np, num_computed_tokens_np).",
        _STATE,
    ),
    # ------------------------------------------------------------------ stateful
    _check(
        "G8-stateful-life-matches-oracle",
        "MUST",
        "stateful",
        "Through requests added and removed, chunked prompts, streamed features, outputs "
        "cached and freed and dummy runs in between, every gather equals the oracle.",
    ),
    # ------------------------------------------------------------------ dummy runs
    _check(
        "D1-dummy-shape-dtype-device",
        "MUST",
        "dummy_run",
        "dummy_inputs_embeds(n) has shape (n, hidden_size) and the state's dtype and device "
        "for every 0 <= n <= max_num_tokens.",
        _STATE,
    ),
    _check(
        "D1-text-only-returns-none",
        "MUST",
        "dummy_run",
        "A state built for a text-only model returns None from dummy_inputs_embeds.",
        _STATE,
    ),
    _check(
        "D2-dummy-views-share-storage",
        "MUST",
        "dummy_run",
        "Every dummy_inputs_embeds(n) is a view of one buffer, starting at its first row.",
        _STATE,
    ),
    _check(
        "D2-real-path-shares-storage",
        "MUST",
        "dummy_run",
        "get_mm_embeddings writes into and returns the same buffer the dummy runs hand out.",
        _STATE,
    ),
    _check(
        "D3-dummy-no-encoder-no-cache",
        "MUST",
        "dummy_run",
        "A dummy run neither calls the encoder nor reads or writes the encoder cache, "
        "realtime models included.",
        _STATE,
    ),
    _check(
        "D4-dummy-no-allocation",
        "MUST",
        "dummy_run",
        "A dummy run allocates no device memory (CUDA allocator statistics unchanged).",
        _STATE,
    ),
    _check(
        "D5-oversize-raises",
        "SHOULD",
        "dummy_run",
        "dummy_inputs_embeds(n) with n > max_num_tokens or n < 0 raises ValueError naming "
        "both numbers.",
        _STATE,
    ),
    # ------------------------------------------------------------------ real path
    _check(
        "R1-encodes-scheduled-items",
        "MUST",
        "real_path",
        "get_mm_embeddings runs the encoder for each scheduled item with data and caches "
        "its output under the identifier.",
        _STATE,
    ),
    _check(
        "R1-no-reencode",
        "MUST",
        "real_path",
        "Items already cached, or whose data is None, are not encoded again.",
        _STATE,
    ),
    _check(
        "R2-returns-padded-buffer-slice",
        "MUST",
        "real_path",
        "get_mm_embeddings returns the first num_tokens_after_padding rows of the buffer.",
        _STATE,
    ),
    _check(
        "R2-merged-rows-match-eager",
        "MUST",
        "real_path",
        "The first num_tokens rows equal model.embed_input_ids(input_ids[:num_tokens], "
        "mm_embeds, is_mm_embed) computed eagerly (per-dtype tolerance).",
        _STATE,
    ),
    _check(
        "R3-decode-steps",
        "MUST",
        "real_path",
        "Realtime decode steps get multimodal rows at positions in features; non-realtime "
        "decode steps get plain token embeddings.",
        _STATE,
    ),
    # ------------------------------------------------------------------ CUDA graphs
    _check(
        "R4-cuda-graph-replay-matches-eager",
        "MUST",
        "cuda_graphs",
        "A CUDA graph captured on dummy_inputs_embeds(n) and replayed after get_mm_embeddings "
        "gives the eager forward's output.",
        _STATE,
    ),
    # ------------------------------------------------------------------ errors
    _check(
        "E1-malformed-batch-rejected",
        "SHOULD",
        "errors",
        "A malformed batch (disagreeing lengths, bad query_start_loc, negative counts or "
        "look-ahead, wrong total, unknown req_id) raises ValueError or TypeError.",
    ),
    _check(
        "E1-error-names-field",
        "SHOULD",
        "errors",
        "The error raised for a malformed batch names the offending field.",
    ),
    _check(
        "E2-malformed-feature-rejected",
        "SHOULD",
        "errors",
        "Malformed features (unsorted, overlapping, bad is_embed, mis-shaped encoder output) "
        "raise ValueError naming the identifier.",
    ),
    _check(
        "E3-bad-input-clean-errors",
        "MUST",
        "errors",
        "Bad input raises ValueError or TypeError or is handled, never another exception, "
        "and a rejected call leaves the buffer and the cache untouched.",
    ),
    _check(
        "E3-no-silent-truncation",
        "MUST",
        "errors",
        "A batch larger than max_num_tokens or an encoder output too short for its "
        "placeholder is rejected, not silently cut.",
    ),
)

#: Check ID -> its record.
CHECKS_BY_ID: Final[Mapping[str, CheckInfo]] = types.MappingProxyType({c.id: c for c in CHECKS})


def spec_anchor(clause: str) -> str:
    """The documentation link of a clause: the specification page with the clause ID as anchor."""
    if clause not in CLAUSES:
        raise ValueError(f"unknown clause {clause!r}; known clauses: {', '.join(CLAUSES)}")
    return f"specification.md#{clause}"


def clause_of(check_id: str) -> str:
    """The clause a check ID belongs to (the part before the first hyphen)."""
    return check_id.split("-", 1)[0]


def checks_for_clause(clause: str) -> tuple[CheckInfo, ...]:
    """Every check of one clause, in catalog order."""
    return tuple(c for c in CHECKS if c.clause == clause)


def clauses_for(kind: TargetKind) -> tuple[str, ...]:
    """The clauses with at least one check for this kind of target, in catalog order."""
    return tuple(dict.fromkeys(c.clause for c in CHECKS if kind in c.targets))


def version_key(version: str) -> tuple[int, ...]:
    """Sort key of a protocol version string such as ``"1.0"``."""
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError:
        raise ValueError(
            f"protocol version must look like '1.0' (dot-separated integers), got {version!r}"
        ) from None
