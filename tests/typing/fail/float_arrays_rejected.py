"""IntArray parameters reject float arrays."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from rtmm_protocol import IntArray
from rtmm_protocol.reference import EncoderRunner


def gather_with_float_counts(runner: EncoderRunner) -> None:
    ints = np.zeros(1, dtype=np.int64)
    floats = np.zeros(1)
    runner.gather_mm_embeddings(["a"], 1, floats, ints, ints, ints)  # E: arg-type  # P: reportArgumentType
    runner.gather_mm_embeddings(["a"], 1, ints, ints, ints, num_computed_tokens=floats)  # E: arg-type  # P: reportArgumentType


def as_int_array(values: npt.NDArray[np.float32]) -> IntArray:
    return values  # E: return-value  # P: reportReturnType
