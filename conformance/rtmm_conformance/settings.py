"""The knobs of one conformance run, and the merge tolerances. Nothing here asks torch
whether CUDA is available (that initialises CUDA here): the checks' process resolves it."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rtmm_conformance.defaults import (
    DEFAULT_EXAMPLES,
    DEFAULT_SEED,
    DEFAULT_TIMEOUT_S,
    DTYPE_NAMES,
    FAIL_ON,
    ISOLATIONS,
)
from rtmm_protocol._version import PROTOCOL_VERSION

__all__ = ["DTYPES", "ISOLATIONS", "MERGE_TOLERANCES", "RunSettings", "Tolerance", "parse_dtype"]

#: dtype names accepted on the command line.
DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}


@dataclass(frozen=True)
class Tolerance:
    """``torch.testing.assert_close`` tolerances for merged embeddings of one dtype."""

    rtol: float
    atol: float


#: Merged embeddings are compared with these tolerances: the merge does arithmetic in
#: the state's dtype (the realtime toy adds rows), and a state may order it differently.
#: The gather itself is compared exactly: its pieces are views of cached rows.
MERGE_TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(rtol=1e-5, atol=1e-5),
    torch.float16: Tolerance(rtol=1e-3, atol=1e-3),
    torch.bfloat16: Tolerance(rtol=1.6e-2, atol=1e-2),
}


def parse_dtype(name: str) -> torch.dtype:
    """The dtype named on the command line, or ``ValueError`` listing the choices."""
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPES)}") from None


@dataclass(frozen=True)
class RunSettings:
    """Options of a run. ``version`` selects the requirement set the run is scored against."""

    device: torch.device
    #: ``device`` stands for "CUDA where available, else the CPU", to be resolved where the
    #: checks run.
    device_is_default: bool = False
    dtype: torch.dtype = torch.float32
    seed: int = DEFAULT_SEED
    examples: int = DEFAULT_EXAMPLES
    timeout_s: float = DEFAULT_TIMEOUT_S
    #: The strict profile: robustness and SHOULD failures fail too, as do stale
    #: expected-failure entries (``fail_on == "all"``).
    strict: bool = False
    #: What fails the run: one of :data:`FAIL_ON`; ``None`` for the default, ``own`` when
    #: the target has a baseline and ``contract`` otherwise (see :meth:`fails_on`).
    fail_on: str | None = None
    version: str = PROTOCOL_VERSION
    #: Shrink failing examples (off only where detection is all that matters).
    shrink: bool = True
    #: Where checks run: one of :data:`ISOLATIONS`.
    isolation: str = "auto"
    hidden_size: int = 4
    max_num_tokens: int = 128
    max_num_reqs: int = 8

    def __post_init__(self) -> None:
        if self.examples < 0:
            raise ValueError(f"examples must be >= 0, got {self.examples}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")
        if self.dtype not in MERGE_TOLERANCES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype}")
        if self.fail_on == "all" and not self.strict:
            object.__setattr__(self, "strict", True)  # one setting, two spellings
        if self.fail_on is not None and self.fail_on not in FAIL_ON:
            raise ValueError(f"fail_on must be one of {', '.join(FAIL_ON)}, got {self.fail_on!r}")
        if self.strict and self.fail_on not in (None, "all"):
            raise ValueError(
                f"strict fails the run on every failure, which fail_on={self.fail_on!r} "
                "contradicts; give one of them"
            )
        if self.isolation not in ISOLATIONS:
            raise ValueError(
                f"isolation must be one of {', '.join(ISOLATIONS)}, got {self.isolation!r}"
            )

    def fails_on(self, has_baseline: bool) -> str:
        """What fails the run, the default resolved: ``all`` when strict; else ``own`` for
        a target with a baseline (its inherited failures are the baseline's), ``contract``
        for any other."""
        if self.strict or self.fail_on == "all":
            return "all"
        return self.fail_on or ("own" if has_baseline else "contract")

    @property
    def tolerance(self) -> Tolerance:
        """Merge tolerance for this run's dtype."""
        return MERGE_TOLERANCES[self.dtype]
