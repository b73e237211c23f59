"""The pooled encoder cache: allocator, pool, cache, merger and the pooled model state.

Capacity, eviction and free-list behaviour are checked directly; the gathers over a pool
are compared with the oracle in ``test_gather_plan.py``. The CUDA test captures the
merger's one-kernel gather in a CUDA graph and replays it after loading a new plan.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from rtmm_protocol import EncoderCache, MultiModalFeature, PlaceholderRange
from rtmm_protocol.reference import (
    EncoderOutputPool,
    EncoderRunner,
    MMGatherPlan,
    PoolCapacityError,
    PooledEncoderCache,
    PooledReferenceModelState,
    PooledRowMerger,
    ReferenceInputBatch,
    ReferenceModelState,
    RowExtentAllocator,
    ToyRealtimeModel,
    ToyReplaceModel,
    ToyTextModel,
    make_input_features,
    make_pooled_model_state,
)

HIDDEN = 4


def _rows(n: int, tag: float) -> torch.Tensor:
    return tag + torch.arange(n * HIDDEN, dtype=torch.float32).view(n, HIDDEN)


# ---------------------------------------------------------------------- allocator


def test_allocator_first_fit_and_coalescing() -> None:
    allocator = RowExtentAllocator(10)
    assert [allocator.allocate(n) for n in (3, 3, 3)] == [0, 3, 6]
    assert allocator.rows_free == 1
    allocator.release(3, 3)
    assert allocator.free_extents() == [(3, 3), (9, 1)]
    assert allocator.allocate(4) is None  # 4 free rows, but not contiguous
    assert allocator.largest_free == 3
    allocator.release(0, 3)
    allocator.release(6, 3)  # merges with both neighbours
    assert allocator.free_extents() == [(0, 10)]
    assert allocator.allocate(10) == 0
    assert allocator.rows_free == 0
    assert allocator.allocate(0) == 0  # nothing to place


def test_allocator_rejects_bad_releases() -> None:
    allocator = RowExtentAllocator(8)
    start = allocator.allocate(4)
    assert start == 0
    with pytest.raises(ValueError, match=r"range \[6, 10\) is outside the pool of 8 rows"):
        allocator.release(6, 4)
    allocator.release(0, 4)
    with pytest.raises(ValueError, match=r"range \[2, 4\) is already \(partly\) free"):
        allocator.release(2, 2)
    with pytest.raises(ValueError, match="capacity must be an int >= 0"):
        RowExtentAllocator(-1)
    with pytest.raises(ValueError, match="negative number of rows"):
        allocator.allocate(-1)


# ---------------------------------------------------------------------- pool


def test_store_returns_a_view_of_the_pool_and_keeps_the_null_row_zero() -> None:
    pool = EncoderOutputPool(8, HIDDEN)
    view = pool.store("a", _rows(3, 1.0))
    assert view.untyped_storage().data_ptr() == pool.storage.untyped_storage().data_ptr()
    assert torch.equal(view, _rows(3, 1.0))
    assert pool.rows_used == 3
    assert pool.null_row == 8
    assert torch.equal(pool.storage[pool.null_row], torch.zeros(HIDDEN))
    starts, rows = pool.locate(["a"], [view]) or (None, None)
    assert starts is not None
    assert rows is not None
    assert (starts.tolist(), rows.tolist()) == ([0], [3])
    assert pool.locate(["a"], [_rows(3, 1.0)]) is None  # another tensor: not resident


def test_storing_again_replaces_and_release_frees() -> None:
    pool = EncoderOutputPool(8, HIDDEN)
    pool.store("a", _rows(3, 1.0))
    pool.store("a", _rows(5, 2.0))
    assert pool.rows_used == 5
    assert len(pool) == 1
    assert pool.release("a")
    assert not pool.release("a")
    assert pool.rows_free == 8
    assert pool.free_extents() == [(0, 8)]


def test_capacity_error_names_identifier_rows_needed_and_free() -> None:
    pool = EncoderOutputPool(8, HIDDEN)
    pool.store("a", _rows(6, 0.0))
    with pytest.raises(PoolCapacityError) as info:
        pool.store("big", _rows(3, 0.0))
    error = info.value
    assert isinstance(error, RuntimeError)
    assert (error.identifier, error.rows_needed, error.rows_free) == ("big", 3, 2)
    message = str(error)
    assert "'big'" in message
    assert "needs 3 contiguous rows but only 2 rows are free" in message
    assert "too few rows are free" in message


def test_capacity_error_tells_fragmentation_apart() -> None:
    pool = EncoderOutputPool(6, HIDDEN)
    for name in "abc":
        pool.store(name, _rows(2, 0.0))
    pool.release("a")
    pool.release("c")
    with pytest.raises(PoolCapacityError, match=r"largest contiguous block 2.*fragmented"):
        pool.store("d", _rows(3, 0.0))


def test_mirrors_are_reused_refreshed_and_evicted_but_owned_rows_are_not() -> None:
    pool = EncoderOutputPool(6, HIDDEN)
    owned = pool.store("owned", _rows(2, 0.0))
    tensor = _rows(2, 5.0)
    start = pool.adopt("mirror", tensor)
    assert pool.adopt("mirror", tensor) == start  # same tensor: no copy
    assert torch.equal(pool.storage[start : start + 2], tensor)
    newer = _rows(2, 9.0)
    start = pool.adopt("mirror", newer)  # a new tensor under the name: copied again
    assert torch.equal(pool.storage[start : start + 2], newer)
    pool.adopt("mirror2", _rows(2, 7.0))
    assert pool.rows_free == 0
    pool.adopt("needed", _rows(2, 3.0), keep={"mirror2"})  # evicts "mirror" only ...
    assert "mirror" not in pool
    assert "mirror2" in pool
    assert torch.equal(owned, _rows(2, 0.0))  # ... never the owned rows
    with pytest.raises(PoolCapacityError):
        pool.adopt("more", _rows(2, 0.0), keep={"mirror2", "needed"})


def test_reclaim_frees_rows_of_entries_gone_from_the_dict() -> None:
    pool = EncoderOutputPool(6, HIDDEN)
    live = {"a": pool.store("a", _rows(2, 0.0)), "b": pool.store("b", _rows(2, 0.0))}
    del live["a"]
    live["b"] = _rows(2, 1.0)  # replaced behind the pool's back
    assert pool.reclaim(live) == 4
    assert pool.rows_free == 6
    # A full pool reclaims by itself when told which dict is live.
    live = {"c": pool.store("c", _rows(6, 0.0))}
    live.clear()
    pool.store("d", _rows(6, 2.0), live=live)
    assert "c" not in pool


def test_owner_serials_expire_when_rows_change_hands() -> None:
    pool = EncoderOutputPool(4, HIDDEN)
    pool.store("a", _rows(2, 0.0))
    (first,) = pool.serials(["a"]).tolist()
    assert pool.owner[0] == first
    pool.release("a")
    assert pool.owner[0] == 0
    pool.store("b", _rows(2, 0.0))
    assert pool.owner[0] not in (0, first)


def test_pool_rejects_outputs_of_another_width_by_name() -> None:
    pool = EncoderOutputPool(4, HIDDEN)
    with pytest.raises(
        ValueError, match=r"encoder output of 'w' has shape \(2, 3\).*hidden_size=4"
    ):
        pool.store("w", torch.ones(2, 3))
    with pytest.raises(ValueError, match="capacity_rows must be positive"):
        EncoderOutputPool(0, HIDDEN)


# ---------------------------------------------------------------------- cache


def _feature(identifier: str, offset: int, length: int, data: object = None) -> MultiModalFeature:
    return MultiModalFeature(identifier, "audio", PlaceholderRange(offset, length), data)


def test_pooled_cache_stores_checked_outputs_in_its_pool() -> None:
    cache = PooledEncoderCache(8, HIDDEN)
    cache.add_request("a", [_feature("a0", 0, 3), _feature("a1", 5, 2)])
    cache.put_encoder_output("a0", _rows(3, 1.0))
    stored = cache.encoder_outputs["a0"]
    assert (
        stored.untyped_storage().data_ptr()
        == cache.output_pool.storage.untyped_storage().data_ptr()
    )
    assert torch.equal(stored, _rows(3, 1.0))
    with pytest.raises(ValueError, match=r"'a1' has 3 rows but its placeholder has num_embeds=2"):
        cache.put_encoder_output("a1", _rows(3, 0.0))
    assert "a1" not in cache.encoder_outputs
    assert cache.output_pool.rows_used == 3
    cache.free_encoder_output("a0")
    assert "a0" not in cache.encoder_outputs
    assert cache.output_pool.rows_used == 0


def test_pooled_cache_reports_capacity_and_reclaims_direct_deletes() -> None:
    cache = PooledEncoderCache(4, HIDDEN)
    cache.add_request("a", [_feature("a0", 0, 3), _feature("a1", 5, 3)])
    cache.put_encoder_output("a0", _rows(3, 0.0))
    with pytest.raises(PoolCapacityError, match=r"'a1'.*needs 3 contiguous rows but only 1"):
        cache.put_encoder_output("a1", _rows(3, 0.0))
    assert "a1" not in cache.encoder_outputs
    del cache.encoder_outputs["a0"]  # directly: the pool still holds the rows ...
    assert cache.output_pool.rows_used == 3
    cache.put_encoder_output("a1", _rows(3, 2.0))  # ... until a full pool reclaims them
    assert torch.equal(cache.encoder_outputs["a1"], _rows(3, 2.0))
    assert cache.reclaim() == 0


def test_runner_caches_what_it_encodes_in_the_pool() -> None:
    model = ToyReplaceModel(HIDDEN)
    cache = EncoderCache()
    data = {"input_features": make_input_features(0, 3)}
    cache.add_request("a", [_feature("a0", 0, 3, data)])
    pool = EncoderOutputPool(8, HIDDEN)
    runner = EncoderRunner(model, 8, HIDDEN, cache, torch.float32, "cpu", output_pool=pool)
    assert runner.execute_encoder({"a": [0]}) == 1
    output = cache.encoder_outputs["a0"]
    assert output.untyped_storage().data_ptr() == pool.storage.untyped_storage().data_ptr()
    assert torch.allclose(output, model.embed_multimodal(**data)[0])
    with pytest.raises(ValueError, match=r"output_pool holds rows of hidden_size=4.*hidden_size=5"):
        EncoderRunner(ToyReplaceModel(5), 8, 5, cache, torch.float32, "cpu", output_pool=pool)


# ---------------------------------------------------------------------- merger


def _plan_two_requests(cache: PooledEncoderCache) -> MMGatherPlan:
    """A prefill of 2 x 4 tokens over features at [1, 3) and [4, 8) of each request."""
    for r in "ab":
        cache.add_request(r, [_feature(f"{r}0", 1, 2), _feature(f"{r}1", 4, 4)])
        cache.put_encoder_output(f"{r}0", _rows(2, 100.0 if r == "a" else 200.0))
        cache.put_encoder_output(f"{r}1", _rows(4, 300.0 if r == "a" else 400.0))
    runner = EncoderRunner(ToyReplaceModel(HIDDEN), 16, HIDDEN, cache, torch.float32, "cpu")
    return runner.plan_mm_gather(
        ["a", "b"],
        8,
        np.array([4, 4]),
        np.array([0, 4, 8]),
        np.array([8, 8]),
        np.array([0, 2]),
    )


def test_merger_fills_slot_aligned_rows_in_one_gather() -> None:
    cache = PooledEncoderCache(16, HIDDEN)
    plan = _plan_two_requests(cache)
    merger = PooledRowMerger(cache.output_pool, 12)
    rows = merger.merge(plan, 10)  # two padding slots past the 8 scheduled tokens
    assert rows.shape == (10, HIDDEN)
    assert rows.untyped_storage().data_ptr() == merger.slot_rows.untyped_storage().data_ptr()
    expected = torch.zeros(10, HIDDEN)
    expected[plan.slots] = plan.rows()
    assert torch.equal(rows, expected)
    # A smaller load resets what the larger one set: every slot past it gathers zeros.
    empty = EncoderRunner(ToyReplaceModel(HIDDEN), 16, HIDDEN, cache, torch.float32, "cpu")
    none = empty.plan_mm_gather(
        ["a"], 1, np.array([1]), np.array([0, 1]), np.array([8]), np.array([0])
    )
    merger.load(none, 1)
    assert torch.equal(merger.gather_slot_rows(10), torch.zeros(10, HIDDEN))


def test_merger_scatters_rows_into_a_buffer_and_leaves_other_rows() -> None:
    cache = PooledEncoderCache(16, HIDDEN)
    plan = _plan_two_requests(cache)
    merger = PooledRowMerger(cache.output_pool, 8)
    buffer = torch.full((8, HIDDEN), -1.0)
    merger.scatter_into(plan, buffer)
    expected = torch.full((8, HIDDEN), -1.0)
    expected[plan.is_mm_embed] = torch.cat(plan.pieces())
    assert torch.equal(buffer, expected)


def test_merger_rejects_mismatched_plans_sizes_and_buffers() -> None:
    cache = PooledEncoderCache(16, HIDDEN)
    plan = _plan_two_requests(cache)
    other = PooledRowMerger(EncoderOutputPool(4, HIDDEN), 8)
    with pytest.raises(ValueError, match="another pool"):
        other.load(plan, 8)
    merger = PooledRowMerger(cache.output_pool, 8)
    with pytest.raises(ValueError, match=r"num_tokens=9 is outside \[0, max_num_tokens=8\]"):
        merger.load(plan, 9)
    with pytest.raises(ValueError, match="covers 8 slots, more than num_tokens=4"):
        merger.load(plan, 4)
    with pytest.raises(ValueError, match=r"buffer has shape \(8, 3\)"):
        merger.scatter_into(plan, torch.zeros(8, 3))
    with pytest.raises(ValueError, match="max_num_tokens must be positive"):
        PooledRowMerger(cache.output_pool, 0)


@pytest.mark.cuda
def test_merger_gather_replays_in_a_cuda_graph(cuda_device: torch.device) -> None:
    cache = PooledEncoderCache(16, HIDDEN, device=cuda_device)
    plan = _plan_two_requests(cache)
    merger = PooledRowMerger(cache.output_pool, 8)
    merger.load(plan, 8)
    merger.gather_slot_rows(8)  # warm up outside the capture (kernel loading)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = merger.gather_slot_rows(8)
    # New contents for the same slots: a graph replay must read them.
    for r, tag in (("a", 1000.0), ("b", 2000.0)):
        cache.put_encoder_output(f"{r}1", _rows(4, tag).to(cuda_device))
    replanned = EncoderRunner(
        ToyReplaceModel(HIDDEN, device=cuda_device), 16, HIDDEN, cache, torch.float32, cuda_device
    ).plan_mm_gather(
        ["a", "b"], 8, np.array([4, 4]), np.array([0, 4, 8]), np.array([8, 8]), np.array([0, 2])
    )
    merger.load(replanned, 8)
    graph.replay()
    torch.cuda.synchronize()
    expected = torch.zeros(8, HIDDEN, device=cuda_device)
    expected[replanned.slots.to(cuda_device)] = replanned.rows()
    assert torch.equal(captured, expected)


# ---------------------------------------------------------------------- pooled state


def _context(model: object, max_num_tokens: int = 16) -> SimpleNamespace:
    return SimpleNamespace(
        model=model,
        encoder_cache=EncoderCache(),
        hidden_size=HIDDEN,
        max_num_tokens=max_num_tokens,
        dtype=torch.float32,
        device=torch.device("cpu"),
        validate=True,
    )


@pytest.mark.parametrize("model_type", [ToyReplaceModel, ToyRealtimeModel])
def test_pooled_state_matches_the_reference_state(model_type: type[ToyReplaceModel]) -> None:
    ctx = _context(model_type(HIDDEN))
    pooled = make_pooled_model_state(ctx)
    assert isinstance(pooled, PooledReferenceModelState)
    assert pooled.output_pool is not None
    reference_cache = EncoderCache()
    reference = ReferenceModelState(
        ctx.model,
        reference_cache,
        hidden_size=HIDDEN,
        max_num_tokens=16,
        dtype=torch.float32,
        device="cpu",
    )
    for cache in (ctx.encoder_cache, reference_cache):
        cache.add_request(
            "a", [_feature("a0", 1, 3, {"input_features": make_input_features(1, 3)})]
        )
        cache.add_request("b", [_feature("b0", 0, 2)])
        cache.encoder_outputs["b0"] = _rows(2, 9.0)  # placed directly, not encoded
    batch = ReferenceInputBatch.from_requests(
        ["a", "b"], [6, 6], [0, 0], [5, 3], num_tokens_after_padding=10
    )
    got = pooled.get_mm_embeddings({"a": [0]}, batch)
    want = reference.get_mm_embeddings({"a": [0]}, batch)
    assert got is not None
    assert want is not None
    assert torch.equal(got[:8], want[:8])
    pool = pooled.output_pool
    encoded = ctx.encoder_cache.encoder_outputs["a0"]
    assert encoded.untyped_storage().data_ptr() == pool.storage.untyped_storage().data_ptr()
    dummy = pooled.dummy_inputs_embeds(4)
    assert dummy is not None
    assert dummy.untyped_storage().data_ptr() == got.untyped_storage().data_ptr()


def test_pooled_state_of_a_text_model_has_no_pool() -> None:
    state = make_pooled_model_state(_context(ToyTextModel(HIDDEN)))
    assert state.output_pool is None
    assert state.dummy_inputs_embeds(4) is None


def test_a_failed_store_keeps_the_earlier_output() -> None:
    pool = EncoderOutputPool(6, HIDDEN)
    pool.store("other", _rows(2, 0.0))
    earlier = pool.store("a", _rows(3, 1.0))
    with pytest.raises(PoolCapacityError, match=r"'a'.*needs 5 contiguous rows"):
        pool.store("a", _rows(5, 2.0))
    located = pool.locate(["a"], [earlier])
    assert located is not None
    assert located[0].tolist() == [2]
    assert torch.equal(earlier, _rows(3, 1.0))
    assert pool.rows_free == 1
    assert pool.store("b", _rows(1, 3.0)).shape == (1, HIDDEN)  # the free row is still free


def test_allocator_claims_a_specific_free_range() -> None:
    allocator = RowExtentAllocator(10)
    allocator.claim(3, 4)
    assert allocator.free_extents() == [(0, 3), (7, 3)]
    with pytest.raises(ValueError, match=r"range \[2, 5\) is not free"):
        allocator.claim(2, 3)
    allocator.claim(0, 3)
    assert allocator.free_extents() == [(7, 3)]
