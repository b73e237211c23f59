"""How an engine's targets take what the suite hands them: the step's batch and request
states in the engine's own types, a dummy batch as its runner makes one, the class of a
model's configuration, and what this machine lacks that a target's step needs.

The suite builds every step as a contract :class:`~rtmm_protocol.testing.ReferenceInputBatch`.
A target whose methods take another engine's batch (vLLM's model states read fields of
vLLM's ``InputBatch`` that the contract does not name) comes from a factory with an
``engine`` attribute, an :class:`Engine` that translates. Factories without one get
:data:`CONTRACT_ENGINE`, which hands the contract's types on as they are.
"""

from __future__ import annotations

import importlib.util
import traceback
from typing import Protocol

import torch

from rtmm_conformance.frames import Frame, frame_kind, short_path
from rtmm_protocol.testing.input_batch import ReferenceInputBatch
from rtmm_protocol.testing.request_states import request_states_for

__all__ = [
    "CONTRACT_ENGINE",
    "ContractEngine",
    "Engine",
    "dummy_batch",
    "engine_of",
    "missing_on_this_machine",
    "where_needed",
]


class Engine(Protocol):
    """What a factory's ``engine`` attribute provides (every method is a translation)."""

    def config_class(self, model_type: str) -> type | None:
        """The configuration class of ``model_type`` in this engine (``None``: not known)."""
        ...

    def step_batch(self, batch: ReferenceInputBatch) -> object:
        """The step's batch as the target's methods take it."""
        ...

    def request_states(self, batch: ReferenceInputBatch) -> object:
        """The engine's per-request state for the step's requests (``req_states``)."""
        ...

    def dummy_step(
        self, num_reqs: int, num_tokens: int, device: torch.device
    ) -> tuple[object, object]:
        """The batch and request states of a dummy run of ``num_tokens`` tokens over
        ``num_reqs`` requests, as the engine's runner makes them."""
        ...

    def missing_requirement(self, error: BaseException) -> str | None:
        """What this machine lacks that ``error`` shows a step needs (``None``: not that)."""
        ...


class ContractEngine:
    """The contract's own types, handed on as they are."""

    def config_class(self, model_type: str) -> type | None:
        """No engine registry: transformers' classes are asked for (where installed)."""
        return None

    def step_batch(self, batch: ReferenceInputBatch) -> object:
        """The contract batch itself."""
        return batch

    def request_states(self, batch: ReferenceInputBatch) -> object:
        """:func:`~rtmm_protocol.testing.request_states_for` the batch."""
        return request_states_for(batch)

    def dummy_step(
        self, num_reqs: int, num_tokens: int, device: torch.device
    ) -> tuple[object, object]:
        """:func:`dummy_batch` and its request states."""
        batch = dummy_batch(num_reqs, num_tokens, device)
        return batch, request_states_for(batch)

    def missing_requirement(self, error: BaseException) -> str | None:
        """:func:`missing_on_this_machine`."""
        return missing_on_this_machine(error)


def dummy_batch(num_reqs: int, num_tokens: int, device: torch.device) -> ReferenceInputBatch:
    """The batch of a dummy run: ``num_reqs`` fresh requests sharing ``num_tokens`` tokens
    as evenly as can be (the last ones take the remainder), every token id 0, as engines
    make them for warm-up and CUDA-graph capture."""
    if not 0 < num_reqs <= num_tokens:
        raise ValueError(
            f"a dummy batch needs 0 < num_reqs <= num_tokens, got {num_reqs} and {num_tokens}"
        )
    base, extra = divmod(num_tokens, num_reqs)
    counts = [base] * (num_reqs - extra) + [base + 1] * extra
    return ReferenceInputBatch.from_requests(
        [f"_dummy_{i}" for i in range(num_reqs)],
        counts,
        [0] * num_reqs,
        counts,
        input_ids=torch.zeros(num_tokens, dtype=torch.int64, device=device),
    )


#: The engine of factories that name none.
CONTRACT_ENGINE = ContractEngine()


def engine_of(factory: object) -> Engine:
    """The factory's ``engine`` attribute, or :data:`CONTRACT_ENGINE`."""
    engine = getattr(factory, "engine", None)
    return engine if engine is not None else CONTRACT_ENGINE


#: Messages torch raises where a CUDA device or its pinned host memory is asked for and
#: this build or machine has none.
_NO_CUDA = (
    "Torch not compiled with CUDA enabled",
    "no pinned memory allocator is available",
    "Found no NVIDIA driver",
    "No CUDA GPUs are available",
)


def missing_on_this_machine(error: BaseException) -> str | None:
    """What ``error`` shows is missing here rather than wrong in the target: a package
    (``ModuleNotFoundError``), a compiled operator (``torch.ops.NS.NAME`` not registered:
    a kernel built only for accelerators), or a CUDA device. ``None`` for anything else,
    and for an error that names something this machine has: a skip must not be a way
    for a target to avoid being judged."""
    if isinstance(error, ModuleNotFoundError) and error.name:
        if _importable(error.name):
            return None
        return f"the module {error.name!r}, which is not installed here"
    if isinstance(error, AttributeError) and isinstance(
        getattr(error, "obj", None), torch._ops._OpNamespace
    ):
        namespace = getattr(error.obj, "name", "")
        if error.name is None or hasattr(error.obj, error.name):
            return None
        return (
            f"the compiled operator torch.ops.{namespace}.{error.name}, which this "
            "installation does not provide (a kernel built for accelerators)"
        )
    if not torch.cuda.is_available() and any(text in str(error) for text in _NO_CUDA):
        return "a CUDA device, which this machine does not have"
    return None


def _importable(module: str) -> bool:
    """Whether ``module`` is installed here (found without importing it; its parent
    packages are imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def where_needed(error: BaseException, *, skip: frozenset[str] = frozenset()) -> str:
    """``at FILE:LINE (in FUNCTION)`` of the innermost frame of the target's code in
    ``error``'s traceback, with the target's line that called it when that is in
    another file (the state's own line, below an engine's helper). Innermost frames of
    the functions named in ``skip`` are passed over (an attribute lookup's machinery)."""
    frames: list[Frame] = [
        (f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(error.__traceback__)
    ]
    while frames and frames[-1][2] in skip:
        frames.pop()
    own = [f for f in frames if frame_kind(f[0]) == "target"]
    if not own:
        return ""
    inner = own[-1]
    text = f"at {short_path(inner[0])}:{inner[1]} (in {inner[2]})"
    caller = next((f for f in reversed(own[:-1]) if f[0] != inner[0]), None)
    if caller is not None:
        text += f", called from {short_path(caller[0])}:{caller[1]} (in {caller[2]})"
    return text
