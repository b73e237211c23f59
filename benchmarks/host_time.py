"""Host and device time of a real step: the reference's against the per-request loop's.

On CUDA an engine step costs the serving loop the host time it takes to launch its
work: the kernels run on the device while the host goes on. This module times, per
workload, two whole steps on the workload's device and dtype:

- ``ref``: the reference's :meth:`~rtmm_protocol.reference.ReferenceModelState.get_mm_embeddings`
  (validation off);
- ``loop``: the benchmark's per-request loop (:func:`benchmarks.baseline.loop_gather`,
  the algorithm vLLM's ``EncoderRunner`` runs), then what vLLM's default model state does
  with its result: the mask to the device, the model's merge, the copy into a
  persistent buffer.

The **host time** of a call runs from its start to its return, with the device idle at
the start (synchronized before, untimed) and nothing synchronized inside. The **device
time** is the time between two CUDA events recorded on the current stream around the
call, read after synchronizing. On the CPU every kernel runs inside the call: the host
time is the whole time and there is no device time (``None``).
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from benchmarks.baseline import loop_gather
from benchmarks.reference_side import ReferenceSide, toy_model
from benchmarks.report import short_name
from benchmarks.scenarios import NUM_STEPS, Workload

__all__ = ["HOST_PATHS", "HostTimes", "measure_host_time", "time_calls"]

#: The steps timed, by the name of their columns.
HOST_PATHS = {
    "ref": "the reference's get_mm_embeddings (validation off)",
    "loop": "the per-request loop's gather, the mask to the device, the merge, the buffer copy",
}


class _Event(Protocol):
    def record(self) -> None: ...

    def elapsed_time(self, end: Any) -> float: ...


@dataclass
class HostTimes:
    """Medians in microseconds per path: host time, and device time (``None`` on CPU)."""

    workload: str
    hidden_size: int
    dtype: str
    device: str
    calls: int
    host_us: dict[str, float]
    device_us: dict[str, float | None]

    def record(self) -> dict[str, object]:
        """A flat record for the JSON file and the GPU script's summary."""
        record: dict[str, object] = {
            "workload": self.workload,
            "hidden_size": self.hidden_size,
            "dtype": self.dtype,
            "device": self.device,
            "calls": self.calls,
        }
        for path in HOST_PATHS:
            record[f"{path}_host_us"] = round(self.host_us[path], 1)
            device = self.device_us[path]
            record[f"{path}_device_us"] = None if device is None else round(device, 1)
        record["loop_over_ref_host"] = round(self.host_us["loop"] / self.host_us["ref"], 3)
        return record


def time_calls(
    fn: Callable[[int], object],
    calls: int,
    *,
    synchronize: Callable[[], None] | None,
    event: Callable[[], _Event] | None,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[list[float], list[float] | None]:
    """Seconds of host time per call of ``fn(k)``, ``k`` the call's number, and of device
    time (``None`` without ``event``): ``synchronize`` before each call, untimed; the host
    time stops as ``fn`` returns; the end event is recorded then, and read after the
    next ``synchronize``, so no synchronization falls inside a call's host time."""
    host: list[float] = []
    device: list[float] | None = None if event is None else []
    enabled = gc.isenabled()
    gc.disable()  # as benchmarks.timing.alternate
    try:
        for k in range(calls):
            if synchronize is not None:
                synchronize()
            start = None
            if event is not None:
                start = event()
                start.record()
            t0 = clock()
            result = fn(k)
            host.append(clock() - t0)
            if event is not None and start is not None and device is not None:
                end = event()
                end.record()
                if synchronize is not None:
                    synchronize()
                device.append(start.elapsed_time(end) * 1e-3)  # milliseconds
            del result
    finally:
        if enabled:
            gc.enable()
    return host, device


def _cuda_event() -> _Event:
    event: _Event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    return event


def _loop_step(
    workload: Workload, model: Any, buffer: torch.Tensor
) -> Callable[[int], torch.Tensor]:
    """The per-request loop's whole step, as vLLM's default model state runs it."""
    features, outputs, realtime = workload.mm_features, workload.encoder_outputs, workload.realtime
    args = [workload.gather_args(k) for k in range(NUM_STEPS)]
    input_ids = [workload.input_batch(k).input_ids for k in range(NUM_STEPS)]
    n, device = workload.num_tokens, workload.device

    def step(k: int) -> torch.Tensor:
        pieces, mask = loop_gather(features, outputs, realtime, *args[k % NUM_STEPS])
        mask = mask.to(device, non_blocking=True)
        merged: torch.Tensor = model.embed_input_ids(input_ids[k % NUM_STEPS][:n], pieces, mask)
        buffer[:n] = merged
        return buffer

    return step


def measure_host_time(
    workload: Workload, *, budget_s: float, max_calls: int = 25
) -> tuple[HostTimes, bool]:
    """Both steps' host and device times on ``workload``, after checking that they give
    the same merged embeddings on every step; the times and whether they did. Each path
    is called in two turns of 3 to ``max_calls`` calls, as many as fit ``budget_s``."""
    model = toy_model(workload)
    side = ReferenceSide(workload, model, max(1, workload.num_tokens))
    batches = [workload.input_batch(k) for k in range(NUM_STEPS)]
    n = workload.num_tokens
    buffer = torch.zeros(
        max(1, n), workload.hidden_size, dtype=workload.dtype, device=workload.device
    )
    paths: dict[str, Callable[[int], object]] = {
        "ref": lambda k: side.step(batches[k % NUM_STEPS]),
        "loop": _loop_step(workload, model, buffer),
    }
    agree = True
    started = time.perf_counter()
    for k in range(NUM_STEPS):  # also the warm-up
        ours = side.step(batches[k])
        theirs = paths["loop"](k)
        assert isinstance(theirs, torch.Tensor)
        agree = agree and ours is not None and torch.equal(ours[:n], theirs[:n])
    per_call = (time.perf_counter() - started) / (2 * NUM_STEPS)
    calls = max(3, min(max_calls, int(budget_s / (4 * per_call))))
    cuda = workload.device.type == "cuda"
    synchronize = torch.cuda.synchronize if cuda else None
    event = _cuda_event if cuda else None
    host: dict[str, list[float]] = {path: [] for path in paths}
    device: dict[str, list[float]] = {path: [] for path in paths}
    for turn in range(2):  # each path first once: neither always runs after the other
        for path in list(paths)[:: 1 if turn == 0 else -1]:
            h, d = time_calls(paths[path], calls, synchronize=synchronize, event=event)
            host[path] += h
            device[path] += d or []
    times = HostTimes(
        short_name(workload.kind, workload.params),
        workload.hidden_size,
        str(workload.dtype).removeprefix("torch."),
        str(workload.device),
        2 * calls,
        {path: statistics.median(v) * 1e6 for path, v in host.items()},
        {path: statistics.median(v) * 1e6 if v else None for path, v in device.items()},
    )
    return times, agree
