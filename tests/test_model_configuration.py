"""The model configuration a state is built with (SPEC M3): read from a checkpoint's files
or given from Python, carried by the toy model, sized as the suite sizes it."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from rtmm_protocol.testing import ToyReplaceModel
from rtmm_protocol.testing.model_configuration import (
    CONFIG_OPTION,
    MODEL_ATTR_OPTION,
    ConfigValues,
    DerivedAttribute,
    ModelConfiguration,
    attach_configuration,
    attribute_owner,
    config_object,
    parse_attribute,
)

CHECKPOINT = {
    "model_type": "acme_speech",
    "hidden_size": 4096,
    "vocab_size": 151_000,
    "num_experts": 8,
    "text_config": {"hidden_size": 2048, "vocab_size": 32_000, "rope_theta": 10_000},
}


def _checkpoint(folder: Path, generation: dict[str, Any] | None = None) -> Path:
    (folder / "config.json").write_text(json.dumps(CHECKPOINT), encoding="utf-8")
    if generation is not None:
        (folder / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    return folder


def _toy() -> Any:
    return ToyReplaceModel(4, dtype=torch.float32, device=torch.device("cpu"), seed=1)


def test_a_checkpoint_is_read_from_its_folder_or_its_config_json(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path, {"temperature": 0.7})
    for path in (folder, folder / "config.json", str(folder)):
        loaded = ModelConfiguration.load(path)
        assert loaded.config == CHECKPOINT
        assert loaded.generation_config == {"temperature": 0.7}
        assert loaded.source == str(folder / "config.json")


@pytest.mark.parametrize(
    ("text", "problem"),
    [(None, "cannot read"), ("{not json", "is not JSON"), ("[1, 2]", "holds a list")],
)
def test_a_bad_checkpoint_is_named_with_the_option(
    tmp_path: Path, text: str | None, problem: str
) -> None:
    if text is not None:
        (tmp_path / "config.json").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=problem) as raised:
        ModelConfiguration.load(tmp_path)
    assert CONFIG_OPTION in str(raised.value)
    assert "config.json" in str(raised.value)


def test_a_configuration_is_taken_from_what_python_hands_it(tmp_path: Path) -> None:
    assert ModelConfiguration.of(CHECKPOINT).config == CHECKPOINT
    assert ModelConfiguration.of(_checkpoint(tmp_path)).config == CHECKPOINT
    with_to_dict = types.SimpleNamespace(to_dict=lambda: dict(CHECKPOINT))
    assert ModelConfiguration.of(with_to_dict).config == CHECKPOINT
    given = ModelConfiguration(CHECKPOINT)
    assert ModelConfiguration.of(given) is given
    with pytest.raises(TypeError, match="model_config must be a path"):
        ModelConfiguration.of(42)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("token_lookback_depth=4", ("token_lookback_depth", 4)),
        ("model.specialized_decode_config=null", ("model.specialized_decode_config", None)),
        ("layers=[1, 2]", ("layers", [1, 2])),
        ("variant=wide", ("variant", "wide")),
    ],
)
def test_an_attribute_is_name_equals_a_json_value(text: str, expected: tuple[str, Any]) -> None:
    assert parse_attribute(text) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("token_lookback_depth", "expects NAME=VALUE"),
        ("=4", "expects NAME=VALUE"),
        ("bad-name=1", "Python attribute name"),
        ("embed_input_ids=1", "the toy model answers this one"),
        ("config=1", "the toy model answers this one"),
    ],
)
def test_a_bad_attribute_is_refused_naming_the_option(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as raised:
        parse_attribute(text)
    assert MODEL_ATTR_OPTION in str(raised.value)
    with pytest.raises(ValueError, match="model attribute"):
        ModelConfiguration(attributes={"supports_realtime": True})


def test_a_named_configuration_replaces_the_carried_one_and_adds_attributes() -> None:
    carried = ModelConfiguration({"model_type": "a"}, attributes={"depth": 2, "x": 1}, source="c")
    named = ModelConfiguration({"model_type": "b"}, attributes={"depth": 3}, source="n")
    merged = named.over(carried)
    assert merged.config == {"model_type": "b"}
    assert merged.attributes == {"depth": 3, "x": 1}
    assert merged.source == "n"
    only_attributes = ModelConfiguration(attributes={"y": 0}).over(carried)
    assert only_attributes.config == {"model_type": "a"}
    assert only_attributes.source == "c"


def test_the_toy_model_carries_the_configuration_sized_as_the_suite_sizes_it() -> None:
    """Hidden size and vocabulary become the toy's, in the language model's part too, so a
    buffer a state allocates from the configuration has the shape the suite expects; the
    other values are the checkpoint's, and the contract's calls stay the toy's."""
    model = _toy()
    encoder = model.embed_multimodal
    built: list[object] = []

    def lookback(config: Any, owner: Any) -> int:
        built.append(owner)
        return int(config.num_experts) // 2

    configuration = ModelConfiguration(
        CHECKPOINT,
        {"max_new_tokens": 16},
        {
            "token_lookback_depth": DerivedAttribute(lookback, "half the experts"),
            "model.layers": [1, 2],
        },
    )
    attach_configuration(model, configuration, hidden_size=4, vocab_size=32, dtype="float32")
    config: Any = model.config
    assert (config.hidden_size, config.vocab_size) == (4, 32)
    text = config.get_text_config()
    assert (text.hidden_size, text.vocab_size, text.rope_theta) == (4, 32, 10_000)
    assert config.num_experts == 8
    assert config.dtype == "float32"
    assert model.generation_config == {"max_new_tokens": 16}
    assert model.token_lookback_depth == 4
    assert built == [model]
    assert model.model.layers == [1, 2]
    assert model.embed_multimodal == encoder
    other = _toy()
    attach_configuration(other, configuration, hidden_size=4, vocab_size=32, dtype="float32")
    assert other.model.layers is not model.model.layers


def test_without_a_named_configuration_the_model_holds_only_its_sizes() -> None:
    model = _toy()
    attach_configuration(model, None, hidden_size=4, vocab_size=32, dtype="bfloat16")
    config: Any = model.config
    assert config.to_dict() == {"dtype": "bfloat16", "hidden_size": 4, "vocab_size": 32}
    with pytest.raises(AttributeError, match=r"no value 'num_experts'.*--conformance-model-config"):
        _ = config.num_experts


def test_a_known_configuration_class_builds_the_configuration() -> None:
    class AcmeConfig(types.SimpleNamespace):
        @classmethod
        def from_dict(cls, values: dict[str, Any]) -> AcmeConfig:
            if "num_experts" not in values:
                raise KeyError("num_experts")
            return cls(**values)

    resolve = {"acme_speech": AcmeConfig}.get
    assert isinstance(config_object(CHECKPOINT, resolve), AcmeConfig)
    assert isinstance(config_object({"model_type": "other"}, resolve), ConfigValues)
    with pytest.raises(ValueError, match="does not build as AcmeConfig: KeyError"):
        config_object({"model_type": "acme_speech"}, resolve)


def test_the_owner_of_a_value_a_state_read_is_found_on_the_model() -> None:
    model = _toy()
    configuration = ModelConfiguration(CHECKPOINT, attributes={"model.layers": [1]})
    attach_configuration(model, configuration, hidden_size=4, vocab_size=32, dtype="float32")
    config: Any = model.config
    assert attribute_owner(model, model) == "model"
    assert attribute_owner(model, config) == "model.config"
    assert attribute_owner(model, config.text_config) == "model.config.text_config"
    assert attribute_owner(model, model.model) == "model.model"
    assert attribute_owner(model, object()) is None
