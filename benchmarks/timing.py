"""Side-by-side timing: every path runs in turn, on the same inputs, in one process."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

__all__ = ["CACHE_MODES", "Eviction", "alternate", "last_level_cache_bytes", "median_us"]

#: How the CPU caches are set before a timing: ``cold``, as a forward pass between two
#: engine steps leaves them (nothing of the step's data cached); ``warm``, after a small
#: copy that a large last-level cache holds beside most of the step's data.
CACHE_MODES = ("cold", "warm")
_WARM_MIB = 8
# A cold eviction copies twice the last-level cache, within these bounds.
_MIN_COLD_MIB, _MAX_COLD_MIB = 64, 1024


def alternate(
    paths: Mapping[str, Callable[[], object]],
    *,
    budget_s: float,
    min_repeats: int = 5,
    max_repeats: int = 500,
    before_round: Callable[[int], None] | None = None,
    synchronize: Callable[[], None] | None = None,
) -> dict[str, list[float]]:
    """Time each path repeatedly, interleaved, rotating which goes first; seconds per call.

    One untimed round warms the paths up; the number of rounds then fits ``budget_s``
    within ``[min_repeats, max_repeats]``. ``before_round(k)`` runs (untimed) before
    round ``k``, e.g. to move every path on to the next step's inputs. The garbage
    collector is paused while timing, as ``timeit`` does, so a collection does not land
    on one path at random (the paths make no reference cycles to pile up meanwhile).

    A path's result is freed after its timing stops, and the allocator is then made to
    merge the freed blocks (untimed): otherwise the next path would pay for the previous
    one's garbage (freeing a thousand views takes about a millisecond, and the first
    larger allocation afterwards tens of microseconds), whichever paths those are.

    ``synchronize`` (e.g. ``torch.cuda.synchronize``) runs before each timing starts and
    inside it before it stops, so that a path's time includes the device work it queued.
    """
    sync = synchronize if synchronize is not None else _no_sync
    names = list(paths)
    if before_round is not None:
        before_round(0)
    start = time.perf_counter()
    for name in names:
        paths[name]()
    sync()
    round_s = max(time.perf_counter() - start, 1e-9)
    repeats = max(min_repeats, min(max_repeats, int(budget_s / round_s)))
    samples: dict[str, list[float]] = {name: [] for name in names}
    enabled = gc.isenabled()
    gc.disable()
    try:
        for repeat in range(repeats):
            if before_round is not None:
                before_round(repeat)
            shift = repeat % len(names)
            for name in names[shift:] + names[:shift]:
                fn = paths[name]
                sync()
                t0 = time.perf_counter_ns()
                result = fn()
                sync()
                samples[name].append((time.perf_counter_ns() - t0) * 1e-9)
                del result
                _settle()
    finally:
        if enabled:
            gc.enable()
    return samples


def _no_sync() -> None:
    pass


def _settle() -> None:
    # A block of a few KiB is served from the allocator's large bins, which first merge
    # every small freed block; paying for that here keeps it out of the next timing.
    bytearray(1 << 13)


def median_us(samples: list[float]) -> float:
    """The median of ``samples`` (seconds) in microseconds."""
    return statistics.median(samples) * 1e6


def last_level_cache_bytes() -> int | None:
    """The size of the CPU's largest cache, as Linux reports it (``None`` elsewhere)."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip().upper()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=None)


class Eviction:
    """A copy between two buffers that sets the CPU caches before each timing."""

    def __init__(self, mode: str, mib: int | None = None) -> None:
        if mode not in CACHE_MODES:
            raise ValueError(f"--caches must be one of {', '.join(CACHE_MODES)}, got {mode!r}")
        if mib is None:
            llc = last_level_cache_bytes() or 0
            mib = (
                _WARM_MIB
                if mode == "warm"
                else min(max(_MIN_COLD_MIB, 2 * llc >> 20), _MAX_COLD_MIB)
            )
        if mib <= 0:
            raise ValueError(f"--evict-mib must be positive, got {mib}")
        self.mode, self.mib = mode, mib
        self._source = torch.ones(mib << 20, dtype=torch.uint8)
        self._target = torch.empty_like(self._source)

    def __call__(self) -> None:
        self._target.copy_(self._source)
