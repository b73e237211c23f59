"""The suite's step in vLLM's types: ``InputBatch``, request states, dummy batches, and what
a CPU installation of vLLM lacks.

vLLM's model states read more of a batch than the contract names: ``prepare_inputs``
reads ``idx_mapping``, the ``query_start_loc`` tensor, ``positions``, ``num_draft_tokens``;
the request states' device arrays (``num_computed_tokens.gpu``, ``all_token_ids.gpu``).
:class:`VllmEngine` builds vLLM's own ``InputBatch`` from the suite's contract batch, field
by field as vLLM's runner fills it for a scheduled step (no draft tokens, each request in
its own request-state row), and a request-state object with vLLM's ``RequestState``
attributes (vLLM's own class pins host memory, which needs a GPU). Dummy batches are made
by vLLM's ``InputBatch.make_dummy``, as its runner makes them. Nothing is corrected: the
values are the step's.
"""

from __future__ import annotations

import dataclasses
import linecache
import re
import traceback
import types
from typing import Any

import numpy as np
import torch

from rtmm_conformance.driving.engine import dummy_batch, missing_on_this_machine
from rtmm_conformance.frames import frame_kind
from rtmm_protocol.adapters.vllm.availability import import_vllm
from rtmm_protocol.testing.input_batch import ReferenceInputBatch

__all__ = ["VLLM_ENGINE", "VllmEngine", "VllmRequestStates"]

#: A Triton kernel launch, ``kernel[grid](...)``, as vLLM's code writes it.
_KERNEL_LAUNCH = re.compile(r"\w\[.*\]\(")


def _device_array(values: np.ndarray, device: torch.device) -> types.SimpleNamespace:
    """One of vLLM's host/device array pairs: ``.np`` (host) and ``.gpu`` (the device's)."""
    return types.SimpleNamespace(np=values, gpu=torch.from_numpy(values.copy()).to(device))


class VllmRequestStates:
    """vLLM's ``RequestState`` attributes for one step's requests, request ``i`` of the
    batch in row ``i``: ``req_id_to_index``, ``prompt_len``, ``prefill_len``,
    ``num_computed_tokens`` (each with ``.np``/``.gpu``), ``num_computed_tokens_np``,
    ``num_computed_prefill_tokens`` and ``all_token_ids`` (the token ids up to each
    request's window end: the step's own where it schedules them)."""

    def __init__(self, batch: ReferenceInputBatch) -> None:
        device = batch.input_ids.device
        num_reqs = batch.num_reqs
        computed = np.asarray(batch.num_computed_tokens_np, dtype=np.int32)
        prefill = np.asarray(batch.prefill_len_np, dtype=np.int32)
        scheduled = np.asarray(batch.num_scheduled_tokens, dtype=np.int32)
        self.req_id_to_index = {req_id: i for i, req_id in enumerate(batch.req_ids)}
        self.index_to_req_id = dict(enumerate(batch.req_ids))
        self.prompt_len = _device_array(prefill.copy(), device)
        self.prefill_len = _device_array(prefill.copy(), device)
        self.num_computed_tokens = _device_array(computed.copy(), device)
        self.num_computed_tokens_np = computed.copy()
        self.num_computed_prefill_tokens = np.minimum(computed, prefill)
        ends = computed + scheduled
        width = int(ends.max()) + 1 if num_reqs else 1
        history = (np.arange(width)[None, :] * 7 + np.arange(num_reqs)[:, None] * 13 + 1) % 32
        starts = np.asarray(batch.query_start_loc_np)
        ids = batch.input_ids.detach().cpu().numpy()
        for i in range(num_reqs):
            first = int(computed[i])
            history[i, first : int(ends[i])] = ids[int(starts[i]) : int(starts[i + 1])]
        self.all_token_ids = types.SimpleNamespace(
            gpu=torch.from_numpy(history.astype(np.int32)).to(device)
        )

    @property
    def num_reqs(self) -> int:
        """The number of requests (``RequestState.num_reqs``)."""
        return len(self.req_id_to_index)


def _positions(batch: ReferenceInputBatch) -> np.ndarray:
    """Each scheduled slot's position in its request, padding slots at 0."""
    positions = np.zeros(batch.num_tokens_after_padding, dtype=np.int64)
    starts = np.asarray(batch.query_start_loc_np)
    for i in range(batch.num_reqs):
        start, end = int(starts[i]), int(starts[i + 1])
        first = int(batch.num_computed_tokens_np[i])
        positions[start:end] = np.arange(first, first + end - start)
    return positions


class VllmEngine:
    """vLLM's types for the suite's steps (see the module docstring)."""

    def config_class(self, model_type: str) -> type | None:
        """The configuration class vLLM registers for ``model_type`` (``None``: vLLM has
        none of its own, and transformers' is used where it has one)."""
        registry = import_vllm("vllm.transformers_utils.config")._CONFIG_REGISTRY
        if model_type not in registry:
            return None
        cls: type = registry[model_type]
        return cls

    def step_batch(self, batch: ReferenceInputBatch) -> object:
        """vLLM's ``InputBatch`` for the step (the fields of the installed release)."""
        device = batch.input_ids.device
        num_reqs = batch.num_reqs
        scheduled = np.asarray(batch.num_scheduled_tokens, dtype=np.int32)
        computed = np.asarray(batch.num_computed_tokens_np, dtype=np.int32)
        prefill = np.asarray(batch.prefill_len_np, dtype=np.int32)
        query_start_loc_np = np.asarray(batch.query_start_loc_np, dtype=np.int32)
        query_start_loc = torch.from_numpy(query_start_loc_np.copy()).to(device)
        computed_prefill = np.minimum(computed, prefill)
        is_prefilling = computed_prefill < prefill
        seq_lens = computed + scheduled
        idx_mapping_np = np.arange(num_reqs, dtype=np.intp)
        idx_mapping = torch.arange(num_reqs, dtype=torch.int64, device=device)
        padding = torch.zeros(batch.num_tokens_after_padding, dtype=torch.bool, device=device)
        padding[batch.num_tokens :] = True
        values: dict[str, Any] = {
            "req_ids": list(batch.req_ids),
            "num_reqs": num_reqs,
            "num_reqs_after_padding": num_reqs,
            "idx_mapping": idx_mapping,
            "idx_mapping_np": idx_mapping_np,
            "expanded_idx_mapping": idx_mapping,
            "expanded_local_pos": torch.zeros(num_reqs, dtype=torch.int32, device=device),
            "num_scheduled_tokens": scheduled,
            "num_tokens": batch.num_tokens,
            "num_tokens_after_padding": batch.num_tokens_after_padding,
            "num_draft_tokens": 0,
            "num_draft_tokens_per_req": None,
            "query_start_loc": query_start_loc,
            "query_start_loc_np": query_start_loc_np,
            "seq_lens": torch.from_numpy(seq_lens.copy()).to(device),
            "seq_lens_cpu_upper_bound": torch.from_numpy(seq_lens.copy()),
            "dcp_local_seq_lens": None,
            "num_computed_tokens_np": computed,
            "prefill_len_np": prefill,
            "num_computed_prefill_tokens_np": computed_prefill,
            "is_prefilling_np": is_prefilling,
            "has_prefill": bool(is_prefilling.any()),
            "max_seq_len_np": None,  # filled only with pipeline parallelism
            "decode_graph_eligible": not bool(is_prefilling.any()),
            "input_ids": batch.input_ids,
            "positions": torch.from_numpy(_positions(batch)).to(device),
            "is_padding": padding,
            "logits_indices": query_start_loc[1:] - 1,
            "cu_num_logits": torch.arange(num_reqs + 1, dtype=torch.int32, device=device),
            "cu_num_logits_np": np.arange(num_reqs + 1, dtype=np.int32),
            "has_structured_output_reqs": False,
            "prompt_lens": None,
        }
        cls = import_vllm("vllm.v1.worker.gpu.input_batch").InputBatch
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{name: value for name, value in values.items() if name in names})

    def request_states(self, batch: ReferenceInputBatch) -> object:
        """:class:`VllmRequestStates` for the step's requests."""
        return VllmRequestStates(batch)

    def dummy_step(
        self, num_reqs: int, num_tokens: int, device: torch.device
    ) -> tuple[object, object]:
        """A dummy batch as vLLM's runner makes one (``InputBatch.make_dummy``), and the
        request states of as many fresh requests."""
        module = import_vllm("vllm.v1.worker.gpu.input_batch")
        buffers = module.InputBuffers(num_reqs, num_tokens, torch.device(device))
        batch = module.InputBatch.make_dummy(num_reqs, num_tokens, buffers)
        return batch, VllmRequestStates(dummy_batch(num_reqs, num_tokens, device))

    def missing_requirement(self, error: BaseException) -> str | None:
        """What the generic test finds missing, or Triton: vLLM's placeholder for its
        kernels when Triton is not installed is a plain function, which a kernel launch
        ``kernel[grid](...)`` fails to subscript."""
        found = missing_on_this_machine(error)
        if found is not None:
            return found
        if isinstance(error, TypeError) and "is not subscriptable" in str(error):
            triton_utils = import_vllm("vllm.triton_utils")
            if not getattr(triton_utils, "HAS_TRITON", True) and _launches_kernel(error):
                return "Triton, which is not installed here (vLLM runs this step's kernel with it)"
        return None


def _launches_kernel(error: BaseException) -> bool:
    """Whether the innermost line of the target's code in ``error``'s traceback launches a
    Triton kernel."""
    own = [
        f for f in traceback.extract_tb(error.__traceback__) if frame_kind(f.filename) == "target"
    ]
    if not own:
        return False
    line = own[-1].line or linecache.getline(own[-1].filename, own[-1].lineno or 0)
    return bool(_KERNEL_LAUNCH.search(line))


#: The one engine object the adapter's factories share.
VLLM_ENGINE = VllmEngine()
