"""The differential check of a gather against the oracle, shared by the gather tests.

:func:`check_scenario` runs one :class:`GatherScenario` through the reference runner and
compares everything SPEC G1-G10 fix: the mask (G1-G4), the rows (G5), the pieces as views
with their modality (G6), misses (G7), no side effects on the cache (G8) or the arrays
(G9), and agreement of the state-level call (G10). Requests skipped by G2 must not have
their encoder outputs read, which an instrumented cache records.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from rtmm_protocol import EncoderCache, EncoderOutputMissingError, MultiModalFeature
from rtmm_protocol.compat import LegacyGathererAdapter
from rtmm_protocol.reference import EncoderRunner, ReferenceModelState
from rtmm_protocol.testing import ReferenceInputBatch, ToyRealtimeModel, ToyReplaceModel
from rtmm_protocol.testing.oracle import OracleResult, oracle_gather
from rtmm_protocol.testing.scenario import GatherScenario
from support.cache_snapshot import ArraySnapshot, CacheSnapshot
from support.recording_dict import RecordingDict

__all__ = [
    "GatherResult",
    "assert_matches_oracle",
    "assert_same_result",
    "assert_view_of",
    "GatherCall",
    "call_runner",
    "check_gather_call",
    "check_scenario",
    "model_for",
    "scenario_arrays",
]

GatherResult = tuple[list[torch.Tensor], torch.Tensor]


@functools.cache
def model_for(realtime: bool, hidden_size: int) -> ToyReplaceModel | ToyRealtimeModel:
    """A toy model of the wanted kind; gathers never change a model, so it is shared."""
    return ToyRealtimeModel(hidden_size) if realtime else ToyReplaceModel(hidden_size)


def scenario_arrays(
    scenario: GatherScenario, dtype: type[np.integer] = np.int32
) -> dict[str, np.ndarray]:
    """The scenario's batch arrays in the given integer dtype."""
    return {name: array.astype(dtype) for name, array in scenario.arrays().items()}


@dataclass(frozen=True)
class GatherCall:
    """The arguments of one runner-level gather: request ids, the batch arrays, look-ahead."""

    req_ids: list[str]
    arrays: Mapping[str, np.ndarray]
    draft_lookahead: int = 0

    @property
    def total(self) -> int:
        """``total_num_scheduled_tokens`` of the call."""
        return int(self.arrays["num_scheduled_tokens"].sum())

    def run(self, gatherer: EncoderRunner | LegacyGathererAdapter) -> GatherResult:
        """Call ``gatherer`` the way engines do: every argument positionally."""
        return gatherer.gather_mm_embeddings(
            self.req_ids,
            self.total,
            self.arrays["num_scheduled_tokens"],
            self.arrays["query_start_loc"],
            self.arrays["prefill_lens"],
            self.arrays["num_computed_tokens"],
            self.draft_lookahead,
        )

    def expected(self, cache: EncoderCache, realtime: bool) -> OracleResult:
        """The oracle's answer for this call over ``cache``."""
        # Plain dict reads keep the oracle's look-ups off an instrumented cache's read log.
        features: dict[str, list[MultiModalFeature]] = dict(dict.items(cache.mm_features))
        outputs: dict[str, torch.Tensor] = dict(dict.items(cache.encoder_outputs))
        return oracle_gather(
            features,
            outputs,
            is_realtime=realtime,
            req_ids=self.req_ids,
            num_scheduled_tokens=self.arrays["num_scheduled_tokens"],
            query_start_loc=self.arrays["query_start_loc"],
            prefill_lens=self.arrays["prefill_lens"],
            num_computed_tokens=self.arrays["num_computed_tokens"],
            draft_lookahead=self.draft_lookahead,
        )

    def readable_identifiers(self, cache: EncoderCache, realtime: bool) -> set[str]:
        """Identifiers of the requests that gather; G2 forbids reading any other's output."""
        allowed: set[str] = set()
        for i, req_id in enumerate(self.req_ids):
            start = int(self.arrays["num_computed_tokens"][i]) + self.draft_lookahead
            if realtime or start < int(self.arrays["prefill_lens"][i]):
                features = dict.get(cache.mm_features, req_id, [])
                allowed.update(f.identifier for f in features)
        return allowed


def call_runner(
    runner: EncoderRunner | LegacyGathererAdapter,
    scenario: GatherScenario,
    arrays: Mapping[str, np.ndarray],
) -> GatherResult:
    """Call a runner-level gather on a scenario's arguments, every one positionally."""
    return GatherCall(scenario.req_ids, arrays, scenario.draft_lookahead).run(runner)


def assert_view_of(piece: torch.Tensor, output: torch.Tensor, row_start: int, row_end: int) -> None:
    """Fail unless ``piece`` is ``output[row_start:row_end]`` as a view sharing its storage."""
    assert tuple(piece.shape) == (row_end - row_start, output.shape[1]), (
        f"piece has shape {tuple(piece.shape)}, expected rows [{row_start}, {row_end}) "
        f"of an output of shape {tuple(output.shape)}"
    )
    assert piece.untyped_storage().data_ptr() == output.untyped_storage().data_ptr(), (
        "piece is a copy, not a view of the cached encoder output"
    )
    expected_offset = output.storage_offset() + row_start * output.stride(0)
    assert piece.storage_offset() == expected_offset, (
        f"piece starts at storage offset {piece.storage_offset()}, expected {expected_offset} "
        f"(row {row_start})"
    )
    assert piece.stride() == output.stride(), "piece does not share the output's layout"


def assert_matches_oracle(
    result: GatherResult,
    expected: OracleResult,
    encoder_outputs: dict[str, torch.Tensor],
    hidden_size: int,
) -> None:
    """Compare a gather result with the oracle: mask, rows, and every piece (G4-G6)."""
    mm_embeds, is_mm_embed = result
    assert isinstance(is_mm_embed, torch.Tensor)
    assert is_mm_embed.dtype == torch.bool
    assert is_mm_embed.device.type == "cpu"
    assert tuple(is_mm_embed.shape) == (len(expected.mask),)
    assert is_mm_embed.tolist() == expected.mask
    outputs: dict[str, torch.Tensor] = dict(dict.items(encoder_outputs))  # off the read log
    assert isinstance(mm_embeds, list)
    assert len(mm_embeds) == len(expected.pieces), (
        f"{len(mm_embeds)} pieces, expected {len(expected.pieces)}: {expected.pieces}"
    )
    for piece, want in zip(mm_embeds, expected.pieces, strict=True):
        assert_view_of(piece, outputs[want.identifier], want.row_start, want.row_end)
        assert getattr(piece, "modality", None) == want.modality
    rows = torch.cat(mm_embeds) if mm_embeds else torch.empty(0, hidden_size)
    assert rows.shape[0] == int(is_mm_embed.sum())
    assert torch.equal(rows, expected.rows_tensor(outputs, hidden_size))


def assert_same_result(got: GatherResult, want: GatherResult) -> None:
    """Two gather results are the same: equal masks and the same views, with modalities."""
    assert torch.equal(got[1], want[1])
    assert got[1].dtype == want[1].dtype == torch.bool
    assert len(got[0]) == len(want[0])
    for a, b in zip(got[0], want[0], strict=True):
        assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
        assert (a.storage_offset(), tuple(a.shape), a.stride()) == (
            b.storage_offset(),
            tuple(b.shape),
            b.stride(),
        )
        assert getattr(a, "modality", None) == getattr(b, "modality", None)


def _state_result(
    scenario: GatherScenario, cache: EncoderCache, realtime: bool
) -> GatherResult | BaseException:
    state = ReferenceModelState(
        model_for(realtime, scenario.hidden_size),
        cache,
        hidden_size=scenario.hidden_size,
        max_num_tokens=max(1, scenario.num_tokens + scenario.padding),
        dtype=torch.float32,
        device="cpu",
    )
    batch = ReferenceInputBatch.from_requests(
        scenario.req_ids,
        [r.prefill_len for r in scenario.requests],
        [r.num_computed_tokens for r in scenario.requests],
        [r.num_scheduled_tokens for r in scenario.requests],
        num_tokens_after_padding=scenario.num_tokens + scenario.padding,
    )
    try:
        return state.gather_mm_embeddings(batch, scenario.draft_lookahead)
    except Exception as error:  # compared with the runner's outcome below
        return error


def check_gather_call(
    gatherer: EncoderRunner,
    cache: EncoderCache,
    call: GatherCall,
    *,
    realtime: bool,
    hidden_size: int,
) -> GatherResult | BaseException:
    """Run one call and check it against the oracle and G2 (reads), G7-G9; return its outcome.

    Reads are checked when ``cache.encoder_outputs`` is a :class:`RecordingDict`.
    """
    outputs = cache.encoder_outputs
    expected = call.expected(cache, realtime)
    cache_before = CacheSnapshot(cache)
    arrays_before = ArraySnapshot(call.arrays)
    if isinstance(outputs, RecordingDict):
        outputs.reset()

    outcome: GatherResult | BaseException
    if expected.raises:
        with pytest.raises(EncoderOutputMissingError) as info:
            call.run(gatherer)
        assert isinstance(info.value, RuntimeError)
        missing = [identifier for identifier, _ in expected.missing]
        assert any(i in str(info.value) for i in missing), (
            f"error {info.value} names none of the missing identifiers {missing}"
        )
        outcome = info.value
    else:
        outcome = call.run(gatherer)
        assert_matches_oracle(outcome, expected, outputs, hidden_size)

    if isinstance(outputs, RecordingDict):
        read = {key for key in outputs.reads if isinstance(key, str)}
        assert RecordingDict.ALL not in outputs.reads, "the gather read every encoder output"
        forbidden = read - call.readable_identifiers(cache, realtime)
        assert not forbidden, f"G2: outputs of skipped requests were read: {sorted(forbidden)}"
        assert not outputs.writes, f"G8: the gather wrote encoder outputs {outputs.writes}"
    cache_before.assert_unchanged(cache)
    arrays_before.assert_unchanged(call.arrays)
    return outcome


def check_scenario(
    scenario: GatherScenario,
    *,
    realtime: bool,
    int_dtype: type[np.integer] = np.int32,
    validate: bool = False,
) -> None:
    """Run ``scenario`` through the reference and check every gather clause (G1-G10)."""
    cache = scenario.build_cache()
    cache.encoder_outputs = RecordingDict(cache.encoder_outputs)
    runner = EncoderRunner(
        model_for(realtime, scenario.hidden_size),
        max(1, scenario.num_tokens + scenario.padding),
        scenario.hidden_size,
        cache,
        torch.float32,
        "cpu",
        validate=validate,
    )
    call = GatherCall(
        scenario.req_ids, scenario_arrays(scenario, int_dtype), scenario.draft_lookahead
    )
    outcome = check_gather_call(
        runner, cache, call, realtime=realtime, hidden_size=scenario.hidden_size
    )
    cache_before = CacheSnapshot(cache)
    state_outcome = _state_result(scenario, cache, realtime)
    if isinstance(outcome, BaseException):
        assert type(state_outcome) is type(outcome), f"G10: state gave {state_outcome!r}"
        assert str(state_outcome) == str(outcome)
    else:
        assert not isinstance(state_outcome, BaseException), f"G10: state raised {state_outcome!r}"
        assert_same_result(state_outcome, outcome)
    cache_before.assert_unchanged(cache)
