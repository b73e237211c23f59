"""The reference ModelState: dummy runs and the persistent buffer (SPEC D1-D5), the real path (R1-R4)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from support.recording_dict import RecordingDict
from support.toy_state import FEATURE_DIM, CountingReplaceModel, encodable_feature, make_state
from torch.profiler import ProfilerActivity, profile

from rtmm_protocol import EncoderCache, EncoderOutputMissingError, ModelState
from rtmm_protocol.reference import ReferenceModelState
from rtmm_protocol.testing import ReferenceInputBatch, ToyTextModel

MAX = 12
HIDDEN = 4


def _storage_ptr(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def _prefill_batch(num_tokens_after_padding: int | None = None) -> ReferenceInputBatch:
    # a: prompt of 10, first chunk of 6; b: prompt of 4, all of it.
    return ReferenceInputBatch.from_requests(
        ["a", "b"], [10, 4], [0, 0], [6, 4], num_tokens_after_padding=num_tokens_after_padding
    )


def _register_prefill_requests(state: ReferenceModelState) -> None:
    cache = state.encoder_cache
    cache.add_request(
        "a",
        [
            encodable_feature("a-img", 1, 3, seed=1, modality="image"),
            encodable_feature("a-aud", 5, 4, is_embed=[True, False, True, True], seed=2),
        ],
    )
    cache.add_request("b", [encodable_feature("b-img", 0, 2, seed=3, modality="image")])


_ALL_SCHEDULED = {"a": [0, 1], "b": [0]}


# ---------------------------------------------------------------- D1 shape


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("realtime", [False, True])
def test_d1_dummy_inputs_embeds_shape_dtype_device_for_every_n(
    realtime: bool, dtype: torch.dtype
) -> None:
    state, _, _ = make_state(realtime=realtime, max_num_tokens=MAX, hidden_size=HIDDEN, dtype=dtype)
    assert isinstance(state, ModelState)
    for n in range(MAX + 1):
        embeds = state.dummy_inputs_embeds(n)
        assert embeds is not None
        assert tuple(embeds.shape) == (n, HIDDEN)
        assert embeds.dtype == dtype
        assert embeds.device == state.device == torch.device("cpu")


def test_d1_text_only_state_returns_none() -> None:
    model = ToyTextModel(HIDDEN)
    state = ReferenceModelState(
        model,
        EncoderCache(),
        hidden_size=HIDDEN,
        max_num_tokens=MAX,
        dtype=torch.float32,
        device="cpu",
    )
    assert state.supports_mm_inputs is False
    for n in range(MAX + 1):
        assert state.dummy_inputs_embeds(n) is None
    batch = ReferenceInputBatch.from_requests(["t"], [3], [0], [3])
    state.encoder_cache.add_request("t")
    assert state.get_mm_embeddings({}, batch) is None


# ---------------------------------------------------------------- D2 one buffer


@pytest.mark.parametrize("realtime", [False, True])
def test_d2_every_dummy_view_shares_one_storage_from_its_first_row(realtime: bool) -> None:
    state, _, _ = make_state(realtime=realtime, max_num_tokens=MAX, hidden_size=HIDDEN)
    full = state.dummy_inputs_embeds(MAX)
    assert full is not None
    for n in range(MAX + 1):  # n = 0 included: compare storages, not data_ptr()
        view = state.dummy_inputs_embeds(n)
        assert view is not None
        assert _storage_ptr(view) == _storage_ptr(full)
        assert view.storage_offset() == 0
        assert view.stride() == full.stride()
    assert full.untyped_storage().nbytes() >= MAX * HIDDEN * full.element_size()


@pytest.mark.parametrize("realtime", [False, True])
def test_d2_get_mm_embeddings_writes_into_the_dummy_storage(realtime: bool) -> None:
    state, _, _ = make_state(realtime=realtime, max_num_tokens=MAX, hidden_size=HIDDEN)
    _register_prefill_requests(state)
    captured = state.dummy_inputs_embeds(MAX)  # what a CUDA graph would have captured
    empty = state.dummy_inputs_embeds(0)
    assert captured is not None
    assert empty is not None
    out = state.get_mm_embeddings(_ALL_SCHEDULED, _prefill_batch(num_tokens_after_padding=MAX))
    assert out is not None
    assert _storage_ptr(out) == _storage_ptr(captured) == _storage_ptr(empty)
    assert out.storage_offset() == 0
    assert torch.equal(captured[:10], out[:10])  # the captured view sees the real rows


# ---------------------------------------------------------------- D3 no encoder, no cache


@pytest.mark.parametrize("realtime", [False, True])
def test_d3_dummy_run_never_calls_the_encoder_nor_touches_the_cache(realtime: bool) -> None:
    state, model, cache = make_state(realtime=realtime, max_num_tokens=MAX, hidden_size=HIDDEN)
    _register_prefill_requests(state)
    features: RecordingDict[str, list[object]] = RecordingDict(cache.mm_features)
    outputs: RecordingDict[str, torch.Tensor] = RecordingDict(cache.encoder_outputs)
    cache.mm_features = features  # type: ignore[assignment]
    cache.encoder_outputs = outputs
    for n in (0, 1, MAX // 2, MAX, MAX // 2, 0):
        state.dummy_inputs_embeds(n)
    assert model.encoder_calls == []
    assert not features.touched, f"mm_features: reads {features.reads}, writes {features.writes}"
    assert not outputs.touched, f"encoder_outputs: reads {outputs.reads}, writes {outputs.writes}"
    assert outputs == {}


# ---------------------------------------------------------------- D4 no allocation (CPU)


def test_d4_dummy_run_allocates_no_memory_on_cpu() -> None:
    state, _, _ = make_state(realtime=True, max_num_tokens=MAX, hidden_size=HIDDEN)
    reference = state.dummy_inputs_embeds(MAX)
    assert reference is not None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        views = [state.dummy_inputs_embeds(n) for n in range(MAX + 1)]
    allocations = [(e.name, e.cpu_memory_usage) for e in prof.events() if e.cpu_memory_usage > 0]
    assert allocations == []
    assert {_storage_ptr(v) for v in views if v is not None} == {_storage_ptr(reference)}


# ---------------------------------------------------------------- D5 over-size


@pytest.mark.parametrize("n", [MAX + 1, 10 * MAX, -1])
def test_d5_out_of_range_sizes_raise_value_error_naming_both_numbers(n: int) -> None:
    state, _, _ = make_state(realtime=False, max_num_tokens=MAX, hidden_size=HIDDEN)
    with pytest.raises(ValueError, match=str(n)) as info:
        state.dummy_inputs_embeds(n)
    assert str(MAX) in str(info.value)


# ---------------------------------------------------------------- R1 encoder


def test_r1_encodes_only_scheduled_uncached_items_with_data() -> None:
    state, model, cache = make_state(realtime=False, max_num_tokens=MAX, hidden_size=HIDDEN)
    fresh = encodable_feature("fresh", 0, 2, seed=1)
    cached = encodable_feature("cached", 2, 2, seed=2)
    precomputed = encodable_feature("precomputed", 4, 2, with_data=False)
    unscheduled = encodable_feature("unscheduled", 8, 2, seed=4)  # outside the window
    cache.add_request("a", [fresh, cached, precomputed, unscheduled])
    kept = torch.full((2, HIDDEN), 7.0)
    given = torch.full((2, HIDDEN), -3.0)
    cache.put_encoder_output("cached", kept)
    cache.put_encoder_output("precomputed", given)

    batch = ReferenceInputBatch.from_requests(["a"], [10], [0], [6])
    state.get_mm_embeddings({"a": [0, 1, 2]}, batch)

    assert model.encoder_calls == [fresh.data]
    assert cache.encoder_outputs["cached"] is kept
    assert cache.encoder_outputs["precomputed"] is given
    assert "unscheduled" not in cache.encoder_outputs
    expected = model.embed_multimodal(**fresh.data)[0]  # type: ignore[arg-type]
    stored = cache.encoder_outputs["fresh"]
    assert stored.dtype == state.dtype
    assert torch.equal(stored, expected)


def test_r1_outputs_are_cached_in_the_state_dtype_and_device() -> None:
    # The model computes in float32; the state works in bfloat16.
    model = CountingReplaceModel(HIDDEN, feature_dim=FEATURE_DIM)
    cache = EncoderCache(HIDDEN)
    state = ReferenceModelState(
        model, cache, hidden_size=HIDDEN, max_num_tokens=MAX, dtype=torch.bfloat16, device="cpu"
    )
    feature = encodable_feature("f", 0, 3, seed=9)
    cache.add_request("a", [feature])
    state.get_mm_embeddings({"a": [0]}, ReferenceInputBatch.from_requests(["a"], [4], [0], [4]))
    stored = cache.encoder_outputs["f"]
    assert (stored.dtype, stored.device) == (torch.bfloat16, state.device)
    expected = model.embed_multimodal(**feature.data)[0]  # type: ignore[arg-type]
    assert torch.equal(stored, expected.to(torch.bfloat16))


def test_r1_cached_outputs_are_not_re_encoded_on_later_steps() -> None:
    state, model, cache = make_state(realtime=False, max_num_tokens=MAX, hidden_size=HIDDEN)
    _register_prefill_requests(state)
    state.get_mm_embeddings(_ALL_SCHEDULED, _prefill_batch())
    assert len(model.encoder_calls) == 3
    outputs = dict(cache.encoder_outputs)
    second_chunk = ReferenceInputBatch.from_requests(["a"], [10], [6], [4])
    state.get_mm_embeddings({"a": [1]}, second_chunk)
    assert len(model.encoder_calls) == 3
    assert all(cache.encoder_outputs[k] is v for k, v in outputs.items())


def test_r1_item_without_data_is_not_encoded_and_a_needed_one_is_a_miss() -> None:
    state, model, cache = make_state(realtime=False, max_num_tokens=MAX, hidden_size=HIDDEN)
    cache.add_request("a", [encodable_feature("no-data", 1, 2, with_data=False)])
    batch = ReferenceInputBatch.from_requests(["a"], [4], [0], [4])
    before = state.dummy_inputs_embeds(MAX)
    assert before is not None
    snapshot = before.clone()
    with pytest.raises(EncoderOutputMissingError, match="no-data"):
        state.get_mm_embeddings({"a": [0]}, batch)
    assert model.encoder_calls == []
    assert "no-data" not in cache.encoder_outputs
    assert torch.equal(before, snapshot)  # nothing was written


# ---------------------------------------------------------------- R2 merge into the buffer


@pytest.mark.parametrize("realtime", [False, True])
@pytest.mark.parametrize("padding", [0, 2])
def test_r2_returns_the_buffer_prefix_holding_the_eager_merge(realtime: bool, padding: int) -> None:
    state, model, _ = make_state(realtime=realtime, max_num_tokens=MAX, hidden_size=HIDDEN)
    _register_prefill_requests(state)
    batch = _prefill_batch(num_tokens_after_padding=10 + padding)
    assert batch.input_ids.shape[0] == 10 + padding

    out = state.get_mm_embeddings(_ALL_SCHEDULED, batch)

    assert out is not None
    full = state.dummy_inputs_embeds(MAX)
    assert full is not None
    assert tuple(out.shape) == (10 + padding, HIDDEN)
    assert (_storage_ptr(out), out.storage_offset()) == (_storage_ptr(full), 0)
    mm_embeds, is_mm_embed = state.gather_mm_embeddings(batch)
    eager = model.embed_input_ids(batch.input_ids[:10], mm_embeds, is_mm_embed)
    assert torch.equal(out[:10], eager)
    plain = model.embed_tokens(batch.input_ids[:10])
    assert is_mm_embed.tolist() == [False, True, True, True, False, True, True, True, False, False]
    assert not torch.equal(out[:10][is_mm_embed], plain[is_mm_embed])
    assert torch.equal(out[:10][~is_mm_embed], plain[~is_mm_embed])


def test_r2_a_merge_with_autograd_history_leaves_the_buffer_plain_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state, model, _ = make_state(realtime=True, max_num_tokens=MAX, hidden_size=HIDDEN)
    _register_prefill_requests(state)
    weight = torch.ones(HIDDEN, requires_grad=True)
    merge = model.embed_input_ids

    def merged_with_history(
        input_ids: torch.Tensor,
        multimodal_embeddings: Sequence[torch.Tensor] | None = None,
        is_multimodal: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return merge(input_ids, multimodal_embeddings, is_multimodal) * weight

    monkeypatch.setattr(model, "embed_input_ids", merged_with_history)
    out = state.get_mm_embeddings(_ALL_SCHEDULED, _prefill_batch())
    assert out is not None
    assert not out.requires_grad
    assert out.grad_fn is None
    full = state.dummy_inputs_embeds(MAX)
    assert full is not None
    assert not full.requires_grad


def test_r2_second_step_overwrites_the_same_rows() -> None:
    state, model, _ = make_state(realtime=False, max_num_tokens=MAX, hidden_size=HIDDEN)
    _register_prefill_requests(state)
    first = state.get_mm_embeddings(_ALL_SCHEDULED, _prefill_batch())
    assert first is not None
    batch = ReferenceInputBatch.from_requests(["a"], [10], [6], [4])
    second = state.get_mm_embeddings({}, batch)
    assert second is not None
    assert _storage_ptr(first) == _storage_ptr(second)
    mm_embeds, is_mm_embed = state.gather_mm_embeddings(batch)
    assert torch.equal(second, model.embed_input_ids(batch.input_ids, mm_embeds, is_mm_embed))


# ---------------------------------------------------------------- R3 decode steps


def _decode_with_streamed_audio(realtime: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Decode 3 tokens at positions 6..8 over an audio chunk appended at [6, 9)."""
    state, model, cache = make_state(realtime=realtime, max_num_tokens=MAX, hidden_size=HIDDEN)
    cache.add_request("s", [encodable_feature("s-0", 1, 3, seed=5)])
    cache.append_feature("s", encodable_feature("s-1", 6, 3, seed=6))
    batch = ReferenceInputBatch.from_requests(["s"], [5], [6], [3])
    out = state.get_mm_embeddings({"s": [1]}, batch)
    assert out is not None
    audio = cache.encoder_outputs.get("s-1")
    tokens = model.embed_tokens(batch.input_ids)
    return out, tokens, audio if audio is not None else torch.empty(0)


def test_r3_realtime_decode_positions_in_features_get_embeddings() -> None:
    out, tokens, audio = _decode_with_streamed_audio(realtime=True)
    assert tuple(audio.shape) == (3, HIDDEN)
    assert torch.allclose(out, tokens + audio)
    assert not torch.equal(out, tokens)


def test_r3_non_realtime_decode_gets_plain_token_embeddings() -> None:
    out, tokens, _ = _decode_with_streamed_audio(realtime=False)
    assert torch.equal(out, tokens)
