"""The workloads each comparison times, by name: one list every benchmark entry point reads.

``python -m benchmarks`` (both comparisons), ``--against`` (its workers build the loop
comparison's workloads by name) and :mod:`benchmarks.step_profile` all take their
workloads from here, so that none of them imports another's command line.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from benchmarks.scenarios import (
    Workload,
    chunked_prefill,
    image_prefill,
    non_realtime_mixed,
    realtime_decode,
)

__all__ = ["Builder", "loop_workloads", "named_loop_workloads", "peer_workloads"]

#: Builds a workload at ``(hidden_size, dtype, device)``.
Builder = Callable[[int, torch.dtype, torch.device], Workload]


def _decode(requests: int, span: tuple[int, int], length: int) -> Builder:
    return lambda h, t, d: realtime_decode(requests, span, length, hidden_size=h, dtype=t, device=d)


def peer_workloads(quick: bool) -> list[Builder]:
    """The comparison with vLLM's: decode at 16, 256 and 1,024 streams, 64 long streams,
    the 8x512 chunked prefill (quick: small sizes of the same kinds)."""
    if quick:
        return [
            _decode(4, (20, 40), 8),
            _decode(4, (200, 200), 1),
            lambda h, t, d: chunked_prefill(2, 64, hidden_size=h, dtype=t, device=d),
        ]
    return [
        *(_decode(r, (200, 1000), 8) for r in (16, 256, 1024)),
        _decode(64, (7500, 7500), 1),
        lambda h, t, d: chunked_prefill(8, 512, hidden_size=h, dtype=t, device=d),
    ]


def named_loop_workloads(quick: bool) -> dict[str, Builder]:
    """The loop comparison's workloads by the names ``--against`` and the profile take."""
    if quick:
        return {
            "decode-4": _decode(4, (20, 40), 8),
            "streams-8": _decode(8, (200, 200), 1),
            "mixed": lambda h, t, d: non_realtime_mixed(
                4, 12, 64, image_length=96, hidden_size=h, dtype=t, device=d
            ),
            "prefill": lambda h, t, d: chunked_prefill(2, 64, hidden_size=h, dtype=t, device=d),
            "image": lambda h, t, d: image_prefill(
                2, 64, image_length=128, hidden_size=h, dtype=t, device=d
            ),
        }
    return {
        "decode-16": _decode(16, (200, 1000), 8),
        "decode-256": _decode(256, (200, 1000), 8),
        "decode-1024": _decode(1024, (200, 1000), 8),
        "streams-64": _decode(64, (7500, 7500), 1),
        "mixed": lambda h, t, d: non_realtime_mixed(32, 224, 256, hidden_size=h, dtype=t, device=d),
        "prefill": lambda h, t, d: chunked_prefill(8, 512, hidden_size=h, dtype=t, device=d),
        "image": lambda h, t, d: image_prefill(8, 512, hidden_size=h, dtype=t, device=d),
    }


def loop_workloads(quick: bool) -> list[Builder]:
    """The loop comparison's workloads, in table order."""
    return list(named_loop_workloads(quick).values())
