"""Gather arguments, and a strategy that breaks them in one of the ways SPEC E1 lists."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st

from rtmm_protocol.testing import ReferenceInputBatch
from rtmm_protocol.testing.scenario import GatherScenario
from rtmm_protocol.testing.strategies import gather_scenarios

__all__ = ["ARRAY_FIELDS", "CORRUPTIONS", "GatherArgs", "MalformedCase", "malformed_cases"]

#: The integer-array arguments of a runner-level gather.
ARRAY_FIELDS = ("num_scheduled_tokens", "query_start_loc", "prefill_lens", "num_computed_tokens")


@dataclass(frozen=True)
class GatherArgs:
    """The arguments of one runner-level gather call (possibly malformed on purpose)."""

    req_ids: list[Any]
    total_num_scheduled_tokens: Any
    num_scheduled_tokens: Any
    query_start_loc: Any
    prefill_lens: Any
    num_computed_tokens: Any
    draft_lookahead: Any = 0

    @classmethod
    def of(cls, scenario: GatherScenario) -> GatherArgs:
        """The well-formed arguments of a scenario."""
        return cls(
            req_ids=scenario.req_ids,
            total_num_scheduled_tokens=scenario.num_tokens,
            draft_lookahead=scenario.draft_lookahead,
            **scenario.arrays(),
        )

    def call(self, gatherer: Any) -> Any:
        """Call ``gatherer.gather_mm_embeddings`` with these arguments, positionally."""
        return gatherer.gather_mm_embeddings(
            self.req_ids,
            self.total_num_scheduled_tokens,
            self.num_scheduled_tokens,
            self.query_start_loc,
            self.prefill_lens,
            self.num_computed_tokens,
            self.draft_lookahead,
        )

    def arrays(self) -> dict[str, Any]:
        """The array arguments by name."""
        return {name: getattr(self, name) for name in ARRAY_FIELDS}

    def input_batch(self, padding: int = 0) -> ReferenceInputBatch:
        """The same fields as an input batch, built without the builder's checks."""
        total = self.total_num_scheduled_tokens
        padded = total + padding if isinstance(total, int) else total
        return ReferenceInputBatch(
            req_ids=self.req_ids,
            num_reqs=len(self.req_ids),
            num_tokens=total,
            num_tokens_after_padding=padded,
            input_ids=torch.zeros(max(int(padded), 0), dtype=torch.long),
            num_scheduled_tokens=self.num_scheduled_tokens,
            query_start_loc_np=self.query_start_loc,
            prefill_len_np=self.prefill_lens,
            num_computed_tokens_np=self.num_computed_tokens,
        )


@dataclass(frozen=True)
class MalformedCase:
    """A scenario, the broken arguments made from it, and what was broken."""

    scenario: GatherScenario
    args: GatherArgs
    corruption: str


def _with_field(args: GatherArgs, field: str, value: np.ndarray) -> GatherArgs:
    changes: dict[str, Any] = {field: value}
    return replace(args, **changes)


def _with_entry(array: np.ndarray, index: int, value: int) -> np.ndarray:
    changed = array.astype(np.int64)
    changed[index] = value
    return changed.astype(array.dtype)


@st.composite
def _corrupt(draw: st.DrawFn, args: GatherArgs, corruption: str) -> GatherArgs:
    num_reqs = len(args.req_ids)
    field = draw(st.sampled_from(ARRAY_FIELDS))
    array = getattr(args, field)
    if corruption == "wrong_length":
        if field == "query_start_loc":  # longer is allowed (engines pad it): only shorter breaks it
            return replace(args, query_start_loc=array[:num_reqs])
        if draw(st.booleans()):
            return _with_field(args, field, array[:-1])
        longer = np.append(array, draw(st.integers(0, 5))).astype(array.dtype)
        return _with_field(args, field, longer)
    if corruption == "negative_entry":
        index = draw(st.integers(0, array.size - 1))
        return _with_field(args, field, _with_entry(array, index, draw(st.integers(-9, -1))))
    if corruption == "query_start_not_zero":
        shifted = args.query_start_loc + draw(st.integers(1, 4))
        return replace(args, query_start_loc=shifted.astype(args.query_start_loc.dtype))
    if corruption == "query_start_step":
        index = draw(st.integers(1, num_reqs))
        old = int(args.query_start_loc[index])
        new = draw(st.integers(0, old + 4).filter(lambda v: v != old))
        return replace(args, query_start_loc=_with_entry(args.query_start_loc, index, new))
    if corruption == "total":
        delta = draw(st.integers(-3, 3).filter(lambda d: d != 0))
        return replace(args, total_num_scheduled_tokens=args.total_num_scheduled_tokens + delta)
    if corruption == "unknown_req_id":
        index = draw(st.integers(0, num_reqs - 1))
        ids = list(args.req_ids)
        ids[index] = "never-registered"
        return replace(args, req_ids=ids)
    if corruption == "duplicate_req_id":
        first, second = draw(
            st.lists(st.integers(0, num_reqs - 1), min_size=2, max_size=2, unique=True)
        )
        ids = list(args.req_ids)
        ids[second] = ids[first]
        return replace(args, req_ids=ids)
    if corruption == "non_str_req_id":
        ids = list(args.req_ids)
        ids[draw(st.integers(0, num_reqs - 1))] = draw(st.sampled_from([7, None, b"a"]))
        return replace(args, req_ids=ids)
    if corruption == "float_array":
        return _with_field(args, field, array.astype(np.float64))
    if corruption == "two_dimensional":
        return _with_field(args, field, array.reshape(1, -1))
    if corruption == "negative_lookahead":
        return replace(args, draft_lookahead=draw(st.integers(-3, -1)))
    raise AssertionError(f"unknown corruption {corruption!r}")


#: Each corruption and the fewest requests it needs to apply.
CORRUPTIONS = {
    "wrong_length": 1,
    "negative_entry": 1,
    "query_start_not_zero": 0,
    "query_start_step": 1,
    "total": 0,
    "unknown_req_id": 1,
    "duplicate_req_id": 2,
    "non_str_req_id": 1,
    "float_array": 0,
    "two_dimensional": 0,
    "negative_lookahead": 0,
}


@st.composite
def malformed_cases(draw: st.DrawFn) -> MalformedCase:
    """A well-formed scenario (every output cached) with exactly one E1 defect."""
    scenario = draw(gather_scenarios(max_requests=4, cache_miss_rate=0.0))
    num_reqs = len(scenario.requests)
    usable = sorted(name for name, need in CORRUPTIONS.items() if num_reqs >= need)
    corruption = draw(st.sampled_from(usable))
    args = draw(_corrupt(GatherArgs.of(scenario), corruption))
    return MalformedCase(scenario, args, corruption)
