"""The words a check is described in: requirement levels, profiles, spec areas, target
kinds, the specification's clauses, and :class:`CheckInfo`, what one check requires. The
bottom of the suite with :mod:`.results`: it imports nothing else of it."""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal, get_args

__all__ = [
    "AREAS",
    "CLAUSES",
    "DEFAULT_SINCE",
    "DEFAULT_KINDS",
    "KIND_NAMES",
    "LEVELS",
    "PROFILES",
    "STATE_KINDS",
    "TARGET_KINDS",
    "Area",
    "CheckInfo",
    "Level",
    "Profile",
    "TargetKind",
    "clause_of",
    "spec_anchor",
    "version_key",
]

Level = Literal["MUST", "SHOULD"]
#: What a check judges: the ``contract`` (behaviour on the inputs an engine's scheduler and
#: runner produce, its domain) or ``robustness`` (behaviour outside it: zero-token requests,
#: malformed input, text-only dummy runs, the realtime guard's edge cases, over-size runs).
#: Robustness is SHOULD for third-party implementations and MUST for the bundled reference.
Profile = Literal["contract", "robustness"]
#: Spec areas the checks are grouped by, each the module ``checks/<area>.py``, in report order.
Area = Literal[
    "signatures",
    "gather",
    "stateful",
    "changes",
    "dummy_run",
    "model_inputs",
    "real_path",
    "cuda_graphs",
    "errors",
]
#: The kinds of object a factory may return: a ModelState that hands the model
#: ``inputs_embeds``, a ModelState whose model takes encoder outputs by cross-attention
#: (SPEC M2: no ``inputs_embeds`` at all), or a runner-level gatherer.
TargetKind = Literal["model_state", "cross_attention", "gatherer"]

#: Requirement levels, strongest first.
LEVELS: Final[tuple[Level, ...]] = get_args(Level)
PROFILES: Final[tuple[Profile, ...]] = get_args(Profile)
AREAS: Final[tuple[Area, ...]] = get_args(Area)
TARGET_KINDS: Final[tuple[TargetKind, ...]] = get_args(TargetKind)


@dataclass(frozen=True)
class CheckInfo:
    """What one check requires. ``id`` starts with its clause (``G5-rows-match-mask``);
    ``since`` is the protocol version that introduced it; ``kinds`` the kinds of target it applies to;
    ``profile`` whether it judges the contract or robustness."""

    id: str
    clause: str
    level: Level
    area: Area
    statement: str
    since: str
    kinds: tuple[TargetKind, ...]
    profile: Profile = "contract"


#: Clause ID -> short title, for every clause of the specification, in its order.
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
        "C1": "Allowed changes between steps",
        "C2": "Never stale",
        "D1": "Dummy-run shape",
        "D2": "One persistent buffer",
        "D3": "No encoder and no cache in dummy runs",
        "D4": "No allocation in dummy runs",
        "D5": "Over-size dummy runs",
        "M1": "Judged on the model's inputs",
        "M2": "Cross-attention states",
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


#: The kinds whose targets are ModelStates (checked through the ModelState Protocol).
STATE_KINDS: Final[tuple[TargetKind, ...]] = ("model_state", "cross_attention")
#: What a report calls each kind of target.
KIND_NAMES: Final[Mapping[TargetKind, str]] = types.MappingProxyType(
    {
        "model_state": "ModelState",
        "cross_attention": "ModelState, cross-attention (SPEC M2)",
        "gatherer": "MMEmbeddingGatherer",
    }
)

#: Kinds of target and protocol version of a check whose decorator does not name them.
DEFAULT_KINDS: Final[tuple[TargetKind, ...]] = TARGET_KINDS
DEFAULT_SINCE: Final = "1.0"


def clause_of(check_id: str) -> str:
    """The clause a check ID belongs to (the part before the first hyphen)."""
    return check_id.split("-", 1)[0]


def spec_anchor(clause: str) -> str:
    """The documentation link of a clause: the specification page, anchored at the clause."""
    if clause not in CLAUSES:
        raise ValueError(f"unknown clause {clause!r}; known clauses: {', '.join(CLAUSES)}")
    return f"specification.md#{clause}"


def version_key(version: str) -> tuple[int, ...]:
    """Sort key of a protocol version string such as ``"1.0"``."""
    try:
        return tuple(int(part) for part in version.split("."))
    except ValueError:
        raise ValueError(
            f"protocol version must look like '1.0' (dot-separated integers), got {version!r}"
        ) from None
