"""One gather call on the target, recorded next to what the oracle expects of it: the
result or the error, the cache keys the target read and the arrays it was given."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from rtmm_conformance.clauses import TargetKind
from rtmm_conformance.frames import TargetError
from rtmm_conformance.results import CheckFailure
from rtmm_protocol.feature import MultiModalFeature
from rtmm_protocol.realtime import supports_realtime
from rtmm_protocol.testing import comparisons
from rtmm_protocol.testing.input_batch import ReferenceInputBatch
from rtmm_protocol.testing.instruments import InstrumentedEncoderCache
from rtmm_protocol.testing.oracle import OracleResult, oracle_gather
from rtmm_protocol.testing.scenario import GatherScenario
from rtmm_protocol.types import IntArray

__all__ = ["GatherCall", "Gathered", "call_gather", "describe_error"]


def describe_error(error: BaseException) -> str:
    """``Type: message (at file:line)`` of an exception a target raised, at the innermost
    frame of the target's own code (not the suite's instrumented cache it went through)."""
    return str(TargetError.of(error))


@dataclass
class Gathered:
    """A well-formed gather result: the pieces and the mask (bool, CPU, scheduled slots)."""

    pieces: list[torch.Tensor]
    mask: torch.Tensor
    raw_mask: torch.Tensor

    def rows(self, hidden_size: int) -> torch.Tensor:
        """``torch.cat(pieces)`` on the CPU in float32 (empty when there are no pieces)."""
        if not self.pieces:
            return torch.empty(0, hidden_size)
        return torch.cat([p.detach().to("cpu", torch.float32) for p in self.pieces])


@dataclass
class GatherCall:
    """A gather call on the target and what the oracle says it should return."""

    scenario: GatherScenario
    kind: TargetKind
    oracle: OracleResult
    outputs: dict[str, torch.Tensor]
    features: dict[str, list[MultiModalFeature]]
    result: object = None
    error: BaseException | None = None
    output_reads: set[object] = field(default_factory=set)
    #: The arrays the target was handed (by name), and copies taken before the call.
    passed: dict[str, IntArray] = field(default_factory=dict)
    before: dict[str, IntArray] = field(default_factory=dict)
    batch: ReferenceInputBatch | None = None

    @property
    def total(self) -> int:
        """``total_num_scheduled_tokens`` of the call."""
        return self.scenario.num_tokens

    def unpack(self) -> Gathered:
        """The result as pieces and mask (moved to the CPU, cut to the scheduled slots: its
        type and shape are G4's business), or a :class:`CheckFailure` saying what is wrong."""
        if self.error is not None:
            raise CheckFailure(
                "the target raised where a result was expected",
                expected="(mm_embeds, is_mm_embed)",
                seen=describe_error(self.error),
            ) from self.error
        result = self.result
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise CheckFailure(
                "the gather returned something other than a pair",
                expected="a tuple (mm_embeds: list[Tensor], is_mm_embed: Tensor)",
                seen=_short_repr(result),
            )
        pieces, mask = result
        if not isinstance(pieces, Sequence) or not all(isinstance(p, torch.Tensor) for p in pieces):
            raise CheckFailure(
                "mm_embeds is not a sequence of tensors",
                expected="list[torch.Tensor]",
                seen=_short_repr(pieces),
            )
        hidden = self.scenario.hidden_size
        for index, piece in enumerate(pieces):
            if piece.dim() != 2 or piece.shape[1] != hidden:
                raise CheckFailure(
                    f"mm_embeds[{index}] does not have the encoder outputs' shape",
                    expected=f"shape (rows, {hidden})",
                    seen=f"shape {tuple(piece.shape)}",
                )
        if not isinstance(mask, torch.Tensor) or mask.dim() != 1:
            raise CheckFailure(
                "is_mm_embed is not a one-dimensional tensor",
                expected=f"a bool tensor of shape ({self.total},)",
                seen=_short_repr(mask),
            )
        if mask.shape[0] < self.total:
            raise CheckFailure(
                "is_mm_embed is shorter than the scheduled tokens",
                expected=f"{self.total} entries",
                seen=f"{mask.shape[0]} entries",
            )
        flat = mask.detach().to("cpu")[: self.total].to(torch.bool)
        return Gathered(pieces=list(pieces), mask=flat, raw_mask=mask)

    def expected_rows(self) -> torch.Tensor:
        """The rows the oracle expects (G5: one per True slot, in slot order), CPU, float32."""
        return self.oracle.rows_tensor(self.outputs, self.scenario.hidden_size).to(torch.float32)

    def source_of(self, row: torch.Tensor) -> tuple[str, int] | None:
        """The ``(identifier, row)`` of the cached output a gathered row was taken from (every
        row of a scenario is distinct), or ``None``."""
        for identifier, output in self.outputs.items():
            matches = (output.detach().to("cpu", torch.float32) == row).all(dim=1)
            hits = comparisons.nonzero(matches)
            if hits.numel():
                return identifier, int(hits[0, 0])
        return None

    def slot_owner(self, slot: int) -> tuple[str, int]:
        """``(req_id, position)`` of a flat slot."""
        offset = 0
        lookahead = self.scenario.draft_lookahead
        for request in self.scenario.requests:
            if slot < offset + request.num_scheduled_tokens:
                return request.req_id, request.num_computed_tokens + lookahead + slot - offset
            offset += request.num_scheduled_tokens
        raise IndexError(f"slot {slot} is past the scheduled tokens ({self.total})")

    def describe_slots(self, slots: Sequence[int]) -> str:
        """``slot 3 (req-0, position 7), ...`` for at most five slots."""
        parts = []
        for slot in list(slots)[:5]:
            req_id, position = self.slot_owner(slot)
            parts.append(f"slot {slot} ({req_id} position {position})")
        more = f" and {len(slots) - 5} more" if len(slots) > 5 else ""
        return ", ".join(parts) + more


def _short_repr(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device})"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def call_gather(
    target: object,
    kind: TargetKind,
    model: object,
    cache: InstrumentedEncoderCache,
    scenario: GatherScenario,
    device: torch.device,
    *,
    lookahead: int | None = None,
    arrays: Mapping[str, IntArray] | None = None,
) -> GatherCall:
    """Call the target's gather on a loaded scenario and record what happened. ``arrays``
    replaces the batch arrays (malformed-input checks); the oracle still uses the scenario's."""
    look = scenario.draft_lookahead if lookahead is None else lookahead
    own = scenario.arrays()
    with cache.paused():
        outputs = dict(dict.items(cache.encoder_outputs))
        features = {k: list(v) for k, v in dict.items(cache.mm_features)}
    realtime = supports_realtime(model)
    oracle = oracle_gather(
        features,
        outputs,
        is_realtime=realtime,
        req_ids=scenario.req_ids,
        draft_lookahead=look,
        **own,
    )
    given = dict(own if arrays is None else arrays)
    call = GatherCall(
        scenario=scenario, kind=kind, oracle=oracle, outputs=outputs, features=features
    )
    if kind != "gatherer":
        batch = scenario.input_batch(device)
        call.batch = batch
        call.passed = {
            "num_scheduled_tokens": batch.num_scheduled_tokens,
            "query_start_loc_np": batch.query_start_loc_np,
            "prefill_len_np": batch.prefill_len_np,
            "num_computed_tokens_np": batch.num_computed_tokens_np,
        }
    else:
        call.passed = given
    call.before = {name: np.array(value, copy=True) for name, value in call.passed.items()}
    method = target.gather_mm_embeddings  # type: ignore[attr-defined]  # kind was detected
    cache.forget()
    try:
        if call.batch is not None:
            call.result = method(call.batch, draft_lookahead=look)
        else:
            call.result = method(
                list(scenario.req_ids),
                scenario.num_tokens,
                given["num_scheduled_tokens"],
                given["query_start_loc"],
                given["prefill_lens"],
                num_computed_tokens=given["num_computed_tokens"],
                draft_lookahead=look,
            )
    except Exception as error:  # a target's failure is an observation, not a crash
        call.error = error
    call.output_reads = cache.output_reads()
    return call
