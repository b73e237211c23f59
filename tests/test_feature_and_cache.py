"""MultiModalFeature, EncoderCache and the miss error: the contract's data types and the changes between steps (SPEC C1, C2)."""

from __future__ import annotations

import pytest
import torch

from rtmm_protocol import (
    EncoderCache,
    EncoderOutputMissingError,
    MultiModalFeature,
    PlaceholderRange,
)


def _feature(identifier: str, offset: int, length: int) -> MultiModalFeature:
    return MultiModalFeature(identifier, "audio", PlaceholderRange(offset, length))


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (("", "audio", PlaceholderRange(0, 1)), r"identifier must be a non-empty str, got ''"),
        ((3, "audio", PlaceholderRange(0, 1)), r"identifier must be a non-empty str, got 3"),
        (("f", None, PlaceholderRange(0, 1)), r"modality of 'f' must be a str, got None"),
        (("f", "audio", (0, 1)), r"mm_position of 'f' must be a PlaceholderRange, got tuple"),
    ],
)
def test_malformed_features_raise_value_error(args: tuple[object, ...], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        MultiModalFeature(*args)  # type: ignore[arg-type]


def test_feature_data_defaults_to_none() -> None:
    assert _feature("f", 0, 1).data is None


def test_cache_registers_and_removes_requests_but_keeps_outputs() -> None:
    cache = EncoderCache(hidden_size=2)
    features = [_feature("a0", 0, 2), _feature("a1", 2, 1)]
    cache.add_request("a", iter(features))
    assert cache.mm_features == {"a": features}
    cache.put_encoder_output("a0", torch.zeros(2, 2))
    assert cache.find_feature("a1") is features[1]
    assert cache.find_feature("nope") is None
    cache.remove_request("a")
    assert cache.mm_features == {}
    assert "a0" in cache.encoder_outputs  # outputs live until freed
    cache.free_encoder_output("a0")
    cache.free_encoder_output("a0")  # freeing twice is harmless
    assert cache.encoder_outputs == {}


def test_cache_request_without_features() -> None:
    cache = EncoderCache()
    cache.add_request("t")
    assert cache.mm_features == {"t": []}


@pytest.mark.parametrize(
    ("action", "pattern"),
    [
        (lambda c: c.add_request("a"), r"request 'a' is already registered"),
        (lambda c: c.add_request(5), r"req_id must be a str, got 5"),
        (lambda c: c.remove_request("zz"), r"request 'zz' is not registered"),
        (lambda c: c.append_feature("zz", _feature("z0", 0, 1)), r"request 'zz' is not registered"),
        (
            lambda c: c.put_encoder_output("ghost", torch.zeros(1, 2)),
            r"no registered feature has identifier 'ghost'",
        ),
    ],
    ids=[
        "duplicate request",
        "non-str req_id",
        "remove unknown",
        "append to unknown",
        "output for unknown",
    ],
)
def test_cache_misuse_raises_value_error(action: object, pattern: str) -> None:
    cache = EncoderCache(hidden_size=2)
    cache.add_request("a", [_feature("a0", 0, 2)])
    with pytest.raises(ValueError, match=pattern):
        action(cache)  # type: ignore[operator]


def test_cache_rejects_a_non_positive_hidden_size() -> None:
    with pytest.raises(ValueError, match="hidden_size must be positive, got 0"):
        EncoderCache(hidden_size=0)


def test_append_feature_keeps_the_stream_in_order() -> None:
    cache = EncoderCache()
    cache.add_request("s", [_feature("s0", 0, 2)])
    cache.append_feature("s", _feature("s1", 2, 3))
    cache.append_feature("s", _feature("s2", 9, 1))
    assert [f.identifier for f in cache.mm_features["s"]] == ["s0", "s1", "s2"]
    with pytest.raises(ValueError, match=r"'s3' at offset 4 follows 's2' at offset 9"):
        cache.append_feature("s", _feature("s3", 4, 1))


def test_missing_output_error_is_a_runtime_error_naming_identifier_and_request() -> None:
    error = EncoderOutputMissingError("img-3", "req-9")
    assert isinstance(error, RuntimeError)
    assert "'img-3'" in str(error)
    assert "'req-9'" in str(error)
    assert (error.identifier, error.req_id) == ("img-3", "req-9")
