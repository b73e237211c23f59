"""The check catalog: every check as plain data, read with :mod:`ast` from the decorators
in ``checks/<area>.py`` that define them; standard library only, so that tools without
torch (the docs build loads this file by path) list the suite's checks."""

from __future__ import annotations

import ast
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, cast, get_args

__all__ = [
    "AREAS",
    "CHECKS",
    "CHECKS_BY_ID",
    "CLAUSES",
    "LEVELS",
    "PROFILES",
    "TARGET_KINDS",
    "Area",
    "CheckInfo",
    "Level",
    "Profile",
    "TargetKind",
    "DEFAULT_SINCE",
    "DEFAULT_TARGETS",
    "checks_for_clause",
    "clause_of",
    "clauses_for",
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
    "signatures", "gather", "stateful", "changes", "dummy_run", "real_path", "cuda_graphs", "errors"
]
#: The two kinds of object a factory may return.
TargetKind = Literal["model_state", "gatherer"]

#: Requirement levels, strongest first.
LEVELS: Final[tuple[Level, ...]] = get_args(Level)
PROFILES: Final[tuple[Profile, ...]] = get_args(Profile)
AREAS: Final[tuple[Area, ...]] = get_args(Area)
TARGET_KINDS: Final[tuple[TargetKind, ...]] = get_args(TargetKind)


@dataclass(frozen=True)
class CheckInfo:
    """What one check requires. ``id`` starts with its clause (``G5-rows-match-mask``);
    ``since`` is the protocol version that introduced it; ``targets`` the kinds it applies to;
    ``profile`` whether it judges the contract or robustness."""

    id: str
    clause: str
    level: Level
    area: Area
    statement: str
    since: str
    targets: tuple[TargetKind, ...]
    profile: Profile = "contract"
    #: Line of the check's decorator in ``checks/<area>.py`` (for messages; not compared).
    line: int = field(default=0, compare=False)


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


#: Targets and protocol version of a check whose decorator does not name them.
DEFAULT_TARGETS: Final[tuple[TargetKind, ...]] = ("model_state", "gatherer")
DEFAULT_SINCE: Final = "1.0"

_CHECKS_DIR = Path(__file__).resolve().parent / "checks"
_DECORATORS = ("check", "scenario_check")


def clause_of(check_id: str) -> str:
    """The clause a check ID belongs to (the part before the first hyphen)."""
    return check_id.split("-", 1)[0]


def _literal(node: ast.expr, where: str) -> object:
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise RuntimeError(
            f"{where}: a check's ID, level, statement, targets, since and profile must be literals "
            "in its decorator (the catalog reads them from the source)"
        ) from None


def _decorated_checks(area: Area, source: str, filename: str) -> list[CheckInfo]:
    """The checks one ``checks/<area>.py`` defines, in source order."""
    decorators = [
        d
        for node in ast.walk(ast.parse(source, filename=filename))
        if isinstance(node, ast.FunctionDef)
        for d in node.decorator_list
        if isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id in _DECORATORS
    ]
    found = []
    for decorator in sorted(decorators, key=lambda d: d.lineno):
        where = f"{filename}:{decorator.lineno}"
        if len(decorator.args) != 3:
            raise RuntimeError(
                f"{where}: @{ast.unparse(decorator.func)} takes (id, level, statement)"
            )
        check_id, level, statement = (_literal(a, where) for a in decorator.args)
        options = {
            k.arg: _literal(k.value, where)
            for k in decorator.keywords
            if k.arg in ("targets", "since", "profile")
        }
        targets = options.get("targets", DEFAULT_TARGETS)
        profile = options.get("profile", "contract")
        if level not in LEVELS or not isinstance(check_id, str):
            raise RuntimeError(f"{where}: level must be one of {LEVELS}, got {level!r}")
        if profile not in PROFILES:
            raise RuntimeError(f"{where}: profile must be one of {PROFILES}, got {profile!r}")
        if profile == "robustness" and level != "SHOULD":
            raise RuntimeError(f"{where}: a robustness check is SHOULD for third parties")
        if not isinstance(targets, tuple) or not set(targets) <= set(TARGET_KINDS):
            raise RuntimeError(f"{where}: targets must be a tuple of {TARGET_KINDS}")
        found.append(
            CheckInfo(
                id=check_id,
                clause=clause_of(check_id),
                level=level,
                area=area,
                statement=str(statement),
                since=str(options.get("since", DEFAULT_SINCE)),
                targets=cast(tuple[TargetKind, ...], targets),
                profile=profile,
                line=decorator.lineno,
            )
        )
    return found


def _read_checks() -> tuple[CheckInfo, ...]:
    """Every check of every area, in clause order (spec order), then source order."""
    found: list[CheckInfo] = []
    for area in AREAS:
        path = _CHECKS_DIR / f"{area}.py"
        found += _decorated_checks(area, path.read_text(encoding="utf-8"), str(path))
    order = {clause: index for index, clause in enumerate(CLAUSES)}
    unknown = sorted({c.id for c in found if c.clause not in order})
    if unknown:
        raise RuntimeError(f"checks {unknown} name no clause of the specification")
    return tuple(sorted(found, key=lambda c: order[c.clause]))


#: Every check of the suite, in clause order.
CHECKS: Final[tuple[CheckInfo, ...]] = _read_checks()

#: Check ID -> its record.
CHECKS_BY_ID: Final[Mapping[str, CheckInfo]] = types.MappingProxyType({c.id: c for c in CHECKS})


def spec_anchor(clause: str) -> str:
    """The documentation link of a clause: the specification page, anchored at the clause."""
    if clause not in CLAUSES:
        raise ValueError(f"unknown clause {clause!r}; known clauses: {', '.join(CLAUSES)}")
    return f"specification.md#{clause}"


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
