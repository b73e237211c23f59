"""Example implementations of the contract, conforming and not, for the typing tests.

One catalogue serves three consumers: the typing cases (``tests/typing``; mypy and pyright
judge assignments of these classes to the Protocols), the ``typecheck`` command's tests and
the run-time signature check's tests. Each docstring says what is wrong, if anything, and
which checks see it. The classes are valid code on their own; only assigning a broken one
to its Protocol is an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, Literal

import numpy as np
import numpy.typing as npt
import torch

from rtmm_protocol import InputBatch, IntArray, SupportsRealtime

# ---------------------------------------------------------------------- gatherers


def _no_rows(total_num_scheduled_tokens: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    return [], torch.zeros(total_num_scheduled_tokens, dtype=torch.bool)


class KeywordOnlyGatherer:
    """Conforms: the two post-rename arguments are keyword-only, as in the Protocol."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        *,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 0,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return _no_rows(total_num_scheduled_tokens)


class PositionalGatherer:
    """Conforms: accepts every argument by position too, in the order of SPEC §2."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 0,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return _no_rows(total_num_scheduled_tokens)


class OldNameGatherer:
    """Still calls the argument ``computed_prefill_lens`` (every check; mypy only because
    the Protocol makes ``num_computed_tokens`` keyword-only)."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        computed_prefill_lens: IntArray,
        draft_lookahead: int = 0,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return _no_rows(total_num_scheduled_tokens)


class PreRenameGatherer:
    """The signature before the rename: ``computed_prefill_lens`` and no look-ahead.

    Not an ``MMEmbeddingGatherer`` (every check), but what
    :func:`rtmm_protocol.compat.adapt_legacy_gatherer` adapts.
    """

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        computed_prefill_lens: IntArray,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return _no_rows(total_num_scheduled_tokens)


class RenamedWithoutLookaheadGatherer:
    """Renamed the argument but never added ``draft_lookahead`` (every check)."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return _no_rows(total_num_scheduled_tokens)


class LookaheadWithoutDefaultGatherer:
    """``draft_lookahead`` has no default (every check)."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
        draft_lookahead: int,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return _no_rows(total_num_scheduled_tokens)


class LookaheadDefaultOneGatherer:
    """``draft_lookahead`` defaults to 1: type checkers ignore default values, so only the
    run-time signature check sees it."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        *,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 1,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return _no_rows(total_num_scheduled_tokens)


class MaskFirstGatherer:
    """Returns ``(is_mm_embed, mm_embeds)``, the wrong order (type checkers only)."""

    def gather_mm_embeddings(
        self,
        req_ids: list[str],
        total_num_scheduled_tokens: int,
        num_scheduled_tokens: IntArray,
        query_start_loc: IntArray,
        prefill_lens: IntArray,
        num_computed_tokens: IntArray,
        draft_lookahead: int = 0,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        rows, mask = _no_rows(total_num_scheduled_tokens)
        return mask, rows


# ---------------------------------------------------------------------- model states


class TextOnlyState:
    """Conforms: a text-only model state (no ``inputs_embeds`` path), plain attributes."""

    def __init__(self, hidden_size: int = 8, max_num_tokens: int = 16) -> None:
        self.is_realtime = False
        self.supports_mm_inputs = False
        self.hidden_size = hidden_size
        self.max_num_tokens = max_num_tokens
        self.dtype = torch.float32
        self.device = torch.device("cpu")

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor | None:
        return None

    def gather_mm_embeddings(
        self, input_batch: InputBatch, draft_lookahead: int = 0
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return _no_rows(input_batch.num_tokens)

    def get_mm_embeddings(
        self,
        scheduled_encoder_inputs: Mapping[str, Sequence[int]],
        input_batch: InputBatch,
        req_states: object = None,
    ) -> torch.Tensor | None:
        return None


class BufferState:
    """Conforms: a persistent buffer; attributes as read-only properties; narrower returns."""

    def __init__(self, buffer: torch.Tensor) -> None:
        self._buffer = buffer

    @property
    def is_realtime(self) -> bool:
        return False

    @property
    def supports_mm_inputs(self) -> bool:
        return True

    @property
    def hidden_size(self) -> int:
        return int(self._buffer.shape[1])

    @property
    def max_num_tokens(self) -> int:
        return int(self._buffer.shape[0])

    @property
    def dtype(self) -> torch.dtype:
        return self._buffer.dtype

    @property
    def device(self) -> torch.device:
        return self._buffer.device

    def dummy_inputs_embeds(self, num_tokens: int) -> torch.Tensor:
        return self._buffer[:num_tokens]

    def gather_mm_embeddings(
        self, input_batch: InputBatch, draft_lookahead: int = 0
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return _no_rows(input_batch.num_tokens)

    def get_mm_embeddings(
        self,
        scheduled_encoder_inputs: Mapping[str, Sequence[int]],
        input_batch: InputBatch,
        req_states: object = None,
    ) -> torch.Tensor:
        return self._buffer[: input_batch.num_tokens_after_padding]


class NumpyDummyState(TextOnlyState):
    """``dummy_inputs_embeds`` returns a numpy array (type checkers only)."""

    def dummy_inputs_embeds(self, num_tokens: int) -> npt.NDArray[np.float32]:  # type: ignore[override]
        return np.zeros((num_tokens, self.hidden_size), dtype=np.float32)


class NoLookaheadDefaultState(TextOnlyState):
    """``draft_lookahead`` lost its default (every check)."""

    def gather_mm_embeddings(  # type: ignore[override]
        self, input_batch: InputBatch, draft_lookahead: int
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        return _no_rows(input_batch.num_tokens)


class EngineRequestStates:
    """An engine's own per-request state class, as an engine would pass it."""

    def __init__(self) -> None:
        self.req_id_to_index: dict[str, int] = {}


class RequiredRequestStatesState(TextOnlyState):
    """Conforms: ``req_states`` without a default, as an engine's subclass declares it."""

    def get_mm_embeddings(  # type: ignore[override]  # drops the base's default
        self,
        scheduled_encoder_inputs: Mapping[str, Sequence[int]],
        input_batch: InputBatch,
        req_states: object,
    ) -> torch.Tensor | None:
        return None


class TypedRequestStatesState(TextOnlyState):
    """Conforms: ``req_states`` annotated with the engine's own request-state class."""

    def get_mm_embeddings(  # type: ignore[override]  # narrower than the base's object
        self,
        scheduled_encoder_inputs: Mapping[str, Sequence[int]],
        input_batch: InputBatch,
        req_states: EngineRequestStates,
    ) -> torch.Tensor | None:
        return None


class NoRequestStatesState(TextOnlyState):
    """Lacks the ``req_states`` argument that engines pass (every check)."""

    def get_mm_embeddings(  # type: ignore[override]
        self, scheduled_encoder_inputs: Mapping[str, Sequence[int]], input_batch: InputBatch
    ) -> torch.Tensor | None:
        return None


class NeitherStateNorGatherer:
    """Has none of the contract's methods, so no Protocol can be chosen for it."""

    def forward(self) -> None:
        return None


# ---------------------------------------------------------------------- realtime markers


class DeclaredMarker:
    """Realtime, declared as SPEC T3 asks."""

    supports_realtime: ClassVar[Literal[True]] = True


class InheritedMarker(SupportsRealtime):
    """Realtime through inheritance, which declares the marker the same way."""


class PlainTrueMarker:
    """``supports_realtime = True`` is inferred as ``bool``: not a realtime marker to the
    type checkers, although the run-time guard accepts it."""

    supports_realtime = True


class ClassVarBoolMarker:
    """``ClassVar[bool]`` could be ``False``: not a realtime marker to the type checkers."""

    supports_realtime: ClassVar[bool] = True
