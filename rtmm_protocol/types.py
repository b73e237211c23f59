"""Type aliases shared by the Protocols and the reference implementation."""

from __future__ import annotations

from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

__all__ = ["IntArray"]

#: A numpy array of any integer dtype (int32 and int64 both fit; float arrays do not).
IntArray: TypeAlias = npt.NDArray[np.integer[Any]]
