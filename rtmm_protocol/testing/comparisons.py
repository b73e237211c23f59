"""Comparison functions bound when this module is imported, before any target code runs.

A target runs in the checking process and can replace functions of torch or numpy (on
purpose, or through a test double it leaves behind). Every verdict of the conformance
suite, and the snapshots' own arithmetic, goes through the functions below, bound here
from the modules as they were when the suite (which imports this first) was imported. A target that patches
``torch.equal``, ``torch.nonzero``, ``torch.Tensor.nonzero``, ``torch.isclose``,
``torch.allclose``, ``torch.Tensor.ne`` or ``numpy.array_equal`` afterwards cannot make
a check pass.

What this does not cover: a target that patches tensor operators (``Tensor.__eq__``,
``Tensor.__ne__``), tensor construction or torch's C extension itself; nor a factory
module that patches torch when it is imported before the suite (a factory named on
the command line is imported after it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["allclose", "array_equal", "equal", "isclose", "ne", "nonzero"]

_TORCH_EQUAL = torch.equal
_TORCH_NONZERO = torch.Tensor.nonzero
_TORCH_ISCLOSE = torch.isclose
_TORCH_ALLCLOSE = torch.allclose
_TORCH_NE = torch.Tensor.ne
_NP_ARRAY_EQUAL = np.array_equal


def equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``torch.equal`` as it was at import: same shape and same values."""
    return bool(_TORCH_EQUAL(a, b))


def nonzero(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor.nonzero()`` as it was at import: the indices of its non-zero entries."""
    return _TORCH_NONZERO(tensor)


def ne(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a.ne(b)`` as it was at import: element-wise inequality."""
    return _TORCH_NE(a, b)


def isclose(a: torch.Tensor, b: torch.Tensor, *, rtol: float, atol: float) -> torch.Tensor:
    """``torch.isclose`` as it was at import."""
    return _TORCH_ISCLOSE(a, b, rtol=rtol, atol=atol)


def allclose(a: torch.Tensor, b: torch.Tensor, *, rtol: float, atol: float) -> bool:
    """``torch.allclose`` as it was at import."""
    return bool(_TORCH_ALLCLOSE(a, b, rtol=rtol, atol=atol))


def array_equal(a: Any, b: Any) -> bool:
    """``numpy.array_equal`` as it was at import."""
    return bool(_NP_ARRAY_EQUAL(a, b))
