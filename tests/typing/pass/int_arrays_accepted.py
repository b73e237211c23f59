"""IntArray takes numpy arrays of any integer dtype, int32 and int64 alike."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch
from typing_extensions import assert_type

from rtmm_protocol import IntArray
from rtmm_protocol.reference import EncoderRunner
from rtmm_protocol.testing import ReferenceInputBatch


def accepts(
    int32: npt.NDArray[np.int32], int64: npt.NDArray[np.int64], uint8: npt.NDArray[np.uint8]
) -> list[IntArray]:
    return [int32, int64, uint8]


def gather_with_mixed_dtypes(runner: EncoderRunner) -> None:
    counts = np.array([3], dtype=np.int32)
    starts = np.array([0, 3], dtype=np.int64)
    prefill = np.arange(1, 2, dtype=np.int32)
    computed = np.zeros(1, dtype=np.int64)
    result = runner.gather_mm_embeddings(["a"], 3, counts, starts, prefill, computed)
    assert_type(result, tuple[list[torch.Tensor], torch.Tensor])


def batch_fields(batch: ReferenceInputBatch) -> None:
    assert_type(batch.num_scheduled_tokens, IntArray)
    assert_type(batch.query_start_loc_np, IntArray)
