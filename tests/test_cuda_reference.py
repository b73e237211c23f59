"""The reference on a CUDA device: buffers and rows on the device, no allocation on dummy runs (D4)
and CUDA-graph replay of a forward captured on a dummy run (R4).

Every test here is marked ``cuda`` and skips with a reason where CUDA is not available.
"""

from __future__ import annotations

import pytest
import torch
from support.toy_state import encodable_feature, make_state

from rtmm_protocol import EncoderCache, MultiModalFeature, PlaceholderRange
from rtmm_protocol.reference import EncoderRunner, ReferenceModelState
from rtmm_protocol.testing import ReferenceInputBatch, ToyRealtimeModel

pytestmark = pytest.mark.cuda

MAX = 32
HIDDEN = 16
#: Counters of the caching allocator that any device allocation moves.
_ALLOCATION_STATS = (
    "allocation.all.allocated",
    "allocated_bytes.all.allocated",
    "segment.all.allocated",
    "reserved_bytes.all.allocated",
)


def _register(state: ReferenceModelState) -> None:
    """A prefill request with an image and a masked audio item, and a streaming one."""
    cache = state.encoder_cache
    cache.add_request(
        "p",
        [
            encodable_feature("p-img", 2, 5, seed=1, modality="image"),
            encodable_feature("p-aud", 9, 4, is_embed=[True, False, True, True], seed=2),
        ],
    )
    cache.add_request("s", [encodable_feature("s-0", 0, 3, seed=3)])
    cache.append_feature("s", encodable_feature("s-1", 20, 4, seed=4))


_SCHEDULED = {"p": [0, 1], "s": [0, 1]}


def _batch(padded: int, device: torch.device) -> ReferenceInputBatch:
    # p: first 12 prompt tokens of 16; s: decoding 3 tokens at 20..22 over streamed audio.
    return ReferenceInputBatch.from_requests(
        ["p", "s"], [16, 5], [0, 20], [12, 3], num_tokens_after_padding=padded, device=device
    )


def _allocator_stats(device: torch.device) -> dict[str, int]:
    torch.cuda.synchronize(device)
    stats = torch.cuda.memory_stats(device)
    return {key: int(stats.get(key, 0)) for key in _ALLOCATION_STATS}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_buffers_and_the_arena_live_on_the_device(
    cuda_device: torch.device, dtype: torch.dtype
) -> None:
    state, _, _ = make_state(
        realtime=True, max_num_tokens=MAX, hidden_size=HIDDEN, dtype=dtype, device=cuda_device
    )
    assert state.device.type == "cuda"
    for n in (0, 1, MAX):
        view = state.dummy_inputs_embeds(n)
        assert view is not None
        assert (view.device.type, view.dtype, tuple(view.shape)) == ("cuda", dtype, (n, HIDDEN))
    assert state.inputs_embeds is not None
    assert state.inputs_embeds.device.type == "cuda"
    assert state.encoder_runner.arena.storage.device.type == "cuda"


@pytest.mark.parametrize("rows", [3, 12], ids=["arena", "block-copy"])
def test_plan_rows_on_the_device_equal_the_pieces_and_pick_up_writes(
    cuda_device: torch.device, rows: int
) -> None:
    """Both ways rows() copies (from the arena's copies, or block by block) on the device,
    an output written in place after a step (caught with validation on, C2a), and an
    output that requires grad."""
    cache = EncoderCache(HIDDEN)
    cache.add_request("r", [MultiModalFeature("a", "audio", PlaceholderRange(0, rows))])
    cache.encoder_outputs["a"] = (
        torch.arange(rows * HIDDEN, dtype=torch.float32).reshape(rows, HIDDEN).to(cuda_device)
    )
    model = ToyRealtimeModel(HIDDEN)
    runner = EncoderRunner(model, MAX, HIDDEN, cache, torch.float32, cuda_device, validate=True)
    batch = ReferenceInputBatch.from_requests(["r"], [rows], [0], [rows])
    args = (
        batch.req_ids,
        batch.num_tokens,
        batch.num_scheduled_tokens,
        batch.query_start_loc_np,
        batch.prefill_len_np,
        batch.num_computed_tokens_np,
    )
    plan = runner.plan_mm_gather(*args)
    torch.testing.assert_close(plan.rows(), torch.cat(plan.pieces()), rtol=0, atol=0)
    cache.encoder_outputs["a"].mul_(-1.0)
    plan = runner.plan_mm_gather(*args)
    torch.testing.assert_close(plan.rows(), cache.encoder_outputs["a"], rtol=0, atol=0)
    cache.encoder_outputs["a"] = cache.encoder_outputs["a"].clone().requires_grad_()
    out = torch.empty(rows, HIDDEN, device=cuda_device)
    assert runner.plan_mm_gather(*args).rows(out=out) is out
    torch.testing.assert_close(out, cache.encoder_outputs["a"].detach(), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("realtime", [False, True])
def test_real_path_on_the_device_equals_the_eager_merge(
    cuda_device: torch.device, realtime: bool, dtype: torch.dtype
) -> None:
    """The real path in each dtype engines serve in: rows copied, never recomputed, so
    bfloat16 matches the eager merge exactly too."""
    state, model, cache = make_state(
        realtime=realtime, max_num_tokens=MAX, hidden_size=HIDDEN, dtype=dtype, device=cuda_device
    )
    _register(state)
    batch = _batch(24, cuda_device)
    out = state.get_mm_embeddings(_SCHEDULED, batch)
    assert out is not None
    full = state.dummy_inputs_embeds(MAX)
    assert full is not None
    assert (out.device.type, out.dtype) == ("cuda", dtype)
    assert out.untyped_storage().data_ptr() == full.untyped_storage().data_ptr()
    assert tuple(out.shape) == (24, HIDDEN)
    assert all(cache.encoder_outputs[k].device.type == "cuda" for k in ("p-img", "p-aud"))
    mm_embeds, is_mm_embed = state.gather_mm_embeddings(batch)
    assert is_mm_embed.device.type == "cpu"
    eager = model.embed_input_ids(batch.input_ids[:15], mm_embeds, is_mm_embed.to(cuda_device))
    torch.testing.assert_close(out[:15], eager, rtol=0, atol=0)


def test_back_to_back_steps_each_see_their_own_mask(cuda_device: torch.device) -> None:
    # Each step copies its host-built mask and row index to the device: the second step
    # must see its own, not the first's.
    state, model, _ = make_state(
        realtime=True, max_num_tokens=MAX, hidden_size=HIDDEN, device=cuda_device
    )
    _register(state)
    first_batch = _batch(15, cuda_device)
    first = state.get_mm_embeddings(_SCHEDULED, first_batch)
    assert first is not None
    first_copy = first.clone()
    second_batch = ReferenceInputBatch.from_requests(
        ["p"], [16], [12], [4], num_tokens_after_padding=4, device=cuda_device
    )
    second = state.get_mm_embeddings({"p": [1]}, second_batch)
    assert second is not None
    for batch, got in ((first_batch, first_copy), (second_batch, second)):
        mm_embeds, is_mm_embed = state.gather_mm_embeddings(batch)
        n = batch.num_tokens
        want = model.embed_input_ids(batch.input_ids[:n], mm_embeds, is_mm_embed.to(cuda_device))
        torch.testing.assert_close(got[:n], want, rtol=0, atol=0)


@pytest.mark.parametrize("realtime", [False, True])
def test_d4_dummy_runs_leave_the_allocator_statistics_unchanged(
    cuda_device: torch.device, realtime: bool
) -> None:
    state, model, _ = make_state(
        realtime=realtime, max_num_tokens=MAX, hidden_size=HIDDEN, device=cuda_device
    )
    _register(state)
    before = _allocator_stats(cuda_device)
    views = [state.dummy_inputs_embeds(n) for n in range(MAX + 1)]
    after = _allocator_stats(cuda_device)
    assert after == before
    assert model.encoder_calls == []
    assert len({v.untyped_storage().data_ptr() for v in views if v is not None}) == 1


def _forward(weight: torch.Tensor, inputs_embeds: torch.Tensor) -> torch.Tensor:
    """A toy model body: one projection and a non-linearity over the input rows."""
    return torch.tanh(inputs_embeds @ weight) + inputs_embeds


@pytest.mark.parametrize("realtime", [False, True])
def test_r4_graph_captured_on_a_dummy_run_replays_real_embeddings(
    cuda_device: torch.device, realtime: bool
) -> None:
    padded = 24
    state, _, _ = make_state(
        realtime=realtime, max_num_tokens=MAX, hidden_size=HIDDEN, device=cuda_device
    )
    _register(state)
    generator = torch.Generator(device=cuda_device).manual_seed(0)
    weight = torch.randn(HIDDEN, HIDDEN, device=cuda_device, generator=generator)

    # Warm up on a side stream, as graph capture requires, then capture on a dummy run.
    side = torch.cuda.Stream(cuda_device)  # type: ignore[no-untyped-call]  # untyped in torch
    side.wait_stream(torch.cuda.current_stream(cuda_device))
    with torch.cuda.stream(side):
        for _ in range(3):
            dummy = state.dummy_inputs_embeds(padded)
            assert dummy is not None
            _forward(weight, dummy)
    torch.cuda.current_stream(cuda_device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured_input = state.dummy_inputs_embeds(padded)
        assert captured_input is not None
        static_out = _forward(weight, captured_input)

    # Two real steps: each replay must read what get_mm_embeddings wrote into the buffer.
    steps = [
        (_SCHEDULED, _batch(padded, cuda_device)),
        (
            {"p": [1]},
            ReferenceInputBatch.from_requests(
                ["p", "s"],
                [16, 5],
                [12, 23],
                [4, 1],
                num_tokens_after_padding=padded,
                device=cuda_device,
            ),
        ),
    ]
    for scheduled, batch in steps:
        real = state.get_mm_embeddings(scheduled, batch)
        assert real is not None
        assert real.untyped_storage().data_ptr() == captured_input.untyped_storage().data_ptr()
        graph.replay()
        torch.cuda.synchronize(cuda_device)
        eager = _forward(weight, real)
        torch.testing.assert_close(static_out, eager)
