"""The configuration of the model a state is built for (SPEC M3), carried by the toy model.

Real model states read their model when they are built: ``model.config`` (a Hugging
Face configuration), an engine's view of it (vLLM's ``model_config.hf_config`` and
``hf_text_config``) and attributes of the model itself (vLLM's DeepSeek state reads
``model.token_lookback_depth``). A :class:`ModelConfiguration` is what a user names for
such a state: a checkpoint's ``config.json`` (and its ``generation_config.json``), or a
configuration object from Python, and the model's attributes. :func:`attach_configuration`
gives it to the toy model the suite builds the state around, sized as the suite sizes
the toy (its hidden size, vocabulary and dtype), so that a buffer the state allocates
from the configuration has the shape the suite expects. The toy keeps answering the
contract's own calls: the encoder, ``embed_input_ids`` and the realtime marker are never
replaced by an attribute.

This module imports neither torch nor transformers: the pytest plugin reads a
configuration in every run. A configuration object is built from the values where the
model is built (:func:`config_object`), with the configuration class of the model's
``model_type`` when one is known, else as :class:`ConfigValues`.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import json
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CONFIG_OPTION",
    "MODEL_ATTR_OPTION",
    "PROTECTED_ATTRIBUTES",
    "ConfigClassResolver",
    "ConfigValues",
    "DerivedAttribute",
    "ModelConfiguration",
    "attach_configuration",
    "attribute_owner",
    "config_object",
    "parse_attribute",
    "size_config",
]

#: The pytest option that names a checkpoint's configuration (``config.json``).
CONFIG_OPTION = "--conformance-model-config"
#: The pytest option that gives the model an attribute, ``NAME=VALUE`` (repeatable).
MODEL_ATTR_OPTION = "--conformance-model-attr"

#: What the toy model answers for the contract, which an attribute may not replace.
PROTECTED_ATTRIBUTES = frozenset(
    {
        "embed_multimodal",
        "embed_input_ids",
        "embed_tokens",
        "supports_realtime",
        "hidden_size",
        "vocab_size",
        "dtype",
        "device",
        "config",
        "generation_config",
    }
)

#: ``model_type -> configuration class`` (``None``: not known). An engine's adapter
#: passes its own registry; without one, transformers' is asked where it is installed.
ConfigClassResolver = Callable[[str], "type | None"]


@dataclass(frozen=True)
class DerivedAttribute:
    """An attribute value computed when the model is built: ``build(config, model)``.

    For attributes that are objects rather than values (a module made from the
    configuration, say); ``build`` must be importable by name so that a worker process
    can receive it. ``description`` says what it is, for reports.
    """

    build: Callable[[Any, Any], object]
    description: str

    def __call__(self, config: object, model: object) -> object:
        return self.build(config, model)


@dataclass(frozen=True)
class ModelConfiguration:
    """A model's configuration values, generation settings and attributes (SPEC M3).

    ``config`` holds what a checkpoint's ``config.json`` holds (nested mappings for
    sub-configurations); ``generation_config`` what its ``generation_config.json``
    holds; ``attributes`` maps attribute names of the model (dotted for an attribute of
    an attribute, ``model.specialized_decode_config``) to values or
    :class:`DerivedAttribute`\\ s. ``source`` says where it came from.
    """

    config: Mapping[str, Any] = field(default_factory=dict)
    generation_config: Mapping[str, Any] = field(default_factory=dict)
    attributes: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""

    def __post_init__(self) -> None:
        for name in self.attributes:
            problem = _attribute_problem(name)
            if problem:
                raise ValueError(f"model attribute {name!r}: {problem}")

    @classmethod
    def load(cls, path: str | Path) -> ModelConfiguration:
        """A checkpoint's configuration: ``path`` is its ``config.json`` or the folder
        holding it; a ``generation_config.json`` beside it is read too. ``ValueError``
        names the file when it is missing or not a JSON object."""
        given = Path(path)
        config_file = given / "config.json" if given.is_dir() else given
        config = _read_json_object(config_file, f"{CONFIG_OPTION}={path}")
        generation_file = config_file.with_name("generation_config.json")
        generation = (
            _read_json_object(generation_file, f"{CONFIG_OPTION}={path}")
            if generation_file.is_file()
            else {}
        )
        return cls(config, generation, source=str(config_file))

    @classmethod
    def of(cls, config: object) -> ModelConfiguration:
        """``config`` as a configuration: a :class:`ModelConfiguration` as it is, a path
        (:meth:`load`), a mapping of ``config.json`` values, or a configuration object
        with ``to_dict()`` (a transformers ``PretrainedConfig``)."""
        if isinstance(config, ModelConfiguration):
            return config
        if isinstance(config, (str, Path)):
            return cls.load(config)
        if isinstance(config, Mapping):
            return cls(dict(config), source="a mapping of configuration values")
        to_dict = getattr(config, "to_dict", None)
        if callable(to_dict):
            values = to_dict()
            if isinstance(values, Mapping):
                return cls(dict(values), source=f"a {type(config).__name__} object")
        raise TypeError(
            "model_config must be a path to a config.json (or its folder), a mapping of "
            "its values, or a configuration object with to_dict() such as a transformers "
            f"PretrainedConfig, got {type(config).__name__}"
        )

    def with_attributes(self, attributes: Mapping[str, Any]) -> ModelConfiguration:
        """The same configuration with ``attributes`` added (replacing those of the same name)."""
        if not attributes:
            return self
        return ModelConfiguration(
            self.config,
            self.generation_config,
            {**self.attributes, **attributes},
            self.source,
        )

    def over(self, default: ModelConfiguration | None) -> ModelConfiguration:
        """This configuration where it says something, else ``default``'s: a user's
        ``config.json`` replaces a default one, and their attributes add to its own."""
        if default is None:
            return self
        return ModelConfiguration(
            self.config or default.config,
            self.generation_config or default.generation_config,
            {**default.attributes, **self.attributes},
            self.source if self.config else default.source,
        )

    def values_with_dtype(self, dtype: str) -> dict[str, Any]:
        """The configuration values, their dtype set to the suite's (``dtype``)."""
        values: dict[str, Any] = copy.deepcopy(dict(self.config))
        values["dtype"] = dtype
        return values

    def describe(self) -> str:
        """One line for reports: where the values came from and which attributes are set."""
        parts = []
        if self.config:
            parts.append(self.source or "configuration values")
        if self.attributes:
            shown = ", ".join(
                f"{name}={value.description if isinstance(value, DerivedAttribute) else value!r}"
                for name, value in self.attributes.items()
            )
            parts.append(f"model attributes {shown}")
        return "; ".join(parts) or "none"


def _read_json_object(path: Path, option: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"{option}: cannot read {path} ({error.strerror or error})") from None
    try:
        values = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{option}: {path} is not JSON ({error})") from None
    if not isinstance(values, dict):
        raise ValueError(f"{option}: {path} holds a {type(values).__name__}, not a JSON object")
    return values


def _attribute_problem(name: str) -> str:
    """What is wrong with an attribute name ("" if nothing)."""
    parts = name.split(".")
    if not all(part.isidentifier() for part in parts):
        return "give a Python attribute name, dotted for an attribute of an attribute"
    if parts[0] in PROTECTED_ATTRIBUTES:
        return (
            "the toy model answers this one for the contract (its encoder, embed_input_ids, "
            "the realtime marker, its sizes and its config), so the suite sets it itself"
        )
    return ""


def parse_attribute(text: str) -> tuple[str, object]:
    """``NAME=VALUE`` as given to :data:`MODEL_ATTR_OPTION`: the value is read as JSON
    (``4``, ``null``, ``true``, ``[1, 2]``, ``{"k": 1}``), else kept as a string."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ValueError(
            f"{MODEL_ATTR_OPTION} expects NAME=VALUE (for example token_lookback_depth=4), "
            f"got {text!r}"
        )
    problem = _attribute_problem(name)
    if problem:
        raise ValueError(f"{MODEL_ATTR_OPTION} {text}: {problem}")
    try:
        value: object = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return name, value


class ConfigValues(types.SimpleNamespace):
    """Configuration values read as attributes, where no configuration class is known.

    Nested mappings are sub-configurations; :meth:`get_text_config` returns the
    ``text_config`` when there is one, as transformers' configurations do. Reading a
    value it does not hold raises ``AttributeError`` naming the value and the option
    that supplies it.
    """

    def __init__(self, values: Mapping[str, Any]) -> None:
        super().__init__(
            **{
                key: ConfigValues(value) if isinstance(value, Mapping) else value
                for key, value in values.items()
            }
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"the model's configuration has no value {name!r}: give the checkpoint's "
            f"config.json with {CONFIG_OPTION}=PATH",
            name=name,
            obj=self,
        )

    def __iter__(self) -> Iterator[str]:
        return iter(vars(self))

    def get_text_config(self, decoder: bool = False) -> ConfigValues:
        """The language model's configuration: ``text_config`` if present, else this one."""
        text = vars(self).get("text_config")
        return text if isinstance(text, ConfigValues) else self

    def to_dict(self) -> dict[str, Any]:
        """The values as plain mappings, as ``config.json`` holds them."""
        return {
            key: value.to_dict() if isinstance(value, ConfigValues) else value
            for key, value in vars(self).items()
        }


def _transformers(module: str) -> Any:
    """A module of transformers (an optional dependency), or ``None`` where it is absent."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def _transformers_class(model_type: str) -> type | None:
    """transformers' configuration class for ``model_type``, where it has one."""
    transformers = _transformers("transformers")
    if transformers is None:
        return None
    try:
        cls: type = transformers.CONFIG_MAPPING[model_type]
    except KeyError:
        return None
    return cls


def config_object(values: Mapping[str, Any], resolve: ConfigClassResolver | None = None) -> Any:
    """The configuration object for ``values``: an instance of the configuration class of
    its ``model_type`` (asked of ``resolve``, then of transformers), built the way a
    checkpoint's is (``from_dict``); :class:`ConfigValues` when no class is known."""
    model_type = values.get("model_type")
    cls = None
    if isinstance(model_type, str):
        cls = (resolve(model_type) if resolve is not None else None) or _transformers_class(
            model_type
        )
    from_dict = getattr(cls, "from_dict", None)
    if not callable(from_dict):
        return ConfigValues(values)
    try:
        with _quiet_transformers():
            return from_dict(dict(values))
    except Exception as error:
        name = getattr(cls, "__name__", "its configuration class")
        raise ValueError(
            f"the model configuration (model_type {model_type!r}) does not build as {name}: "
            f"{type(error).__name__}: {error}"
        ) from error


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' warnings off while a configuration is built and sized: a checkpoint's
    special token ids lie outside the toy's small vocabulary, which it would warn about."""
    transformers_logging = _transformers("transformers.utils.logging")
    if transformers_logging is None:
        yield
        return
    previous = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers_logging.set_verbosity(previous)


def size_config(config: Any, *, hidden_size: int, vocab_size: int) -> None:
    """Set the model's sizes on ``config`` and on its language model's part
    (``get_text_config()``: composite multimodal configurations keep them there); a size
    a configuration derives from its parts (a read-only property) is left to them."""
    get_text = getattr(config, "get_text_config", None)
    text = get_text() if callable(get_text) else config
    with _quiet_transformers():
        for owner in [text] if text is config else [text, config]:
            for name, value in (("hidden_size", hidden_size), ("vocab_size", vocab_size)):
                with contextlib.suppress(AttributeError):
                    setattr(owner, name, value)


def _set_attribute(model: object, dotted: str, value: object) -> None:
    """``model.a.b = value``, making ``a`` a namespace when the model has none."""
    *path, last = dotted.split(".")
    owner = model
    for part in path:
        inner = getattr(owner, part, None)
        if inner is None:
            inner = types.SimpleNamespace()
            setattr(owner, part, inner)
        owner = inner
    setattr(owner, last, value)


def attach_configuration(
    model: object,
    configuration: ModelConfiguration | None,
    *,
    hidden_size: int,
    vocab_size: int,
    dtype: str,
    resolve: ConfigClassResolver | None = None,
) -> None:
    """Give ``model`` its configuration: ``model.config`` (sized as the suite sizes the
    model; a configuration holding only the sizes when none is named),
    ``model.generation_config`` and each attribute."""
    configuration = configuration or ModelConfiguration()
    config = config_object(configuration.values_with_dtype(dtype), resolve)
    size_config(config, hidden_size=hidden_size, vocab_size=vocab_size)
    vars(model)["config"] = config
    vars(model)["generation_config"] = dict(configuration.generation_config)
    for name, value in configuration.attributes.items():
        built = value(config, model) if isinstance(value, DerivedAttribute) else value
        _set_attribute(model, name, copy.deepcopy(built) if _is_plain(built) else built)


def _is_plain(value: object) -> bool:
    """Whether ``value`` is JSON-like data (copied per model, so no model shares it)."""
    return isinstance(value, (list, dict, tuple))


def attribute_owner(model: object, obj: object) -> str | None:
    """Where ``obj`` hangs on ``model``: ``"model"`` for the model itself,
    ``"model.config"`` (or a sub-configuration such as ``"model.config.text_config"``)
    for its configuration, ``"model.NAME"`` for a namespace an attribute made; ``None``
    when ``obj`` is none of these."""
    if obj is model:
        return "model"
    seen: set[int] = set()
    frontier: list[tuple[str, object]] = [("model", model)]
    for _ in range(4):  # the depth of a dotted attribute or a nested sub-configuration
        following: list[tuple[str, object]] = []
        for path, owner in frontier:
            if id(owner) in seen:
                continue
            seen.add(id(owner))
            members = _members(owner)
            for name, value in members.items():
                if value is obj:
                    return f"{path}.{name}"
                if isinstance(value, types.SimpleNamespace) or callable(
                    getattr(value, "to_dict", None)
                ):
                    following.append((f"{path}.{name}", value))
        frontier = following
    return None


def _members(owner: object) -> dict[str, object]:
    try:
        return dict(vars(owner))
    except TypeError:
        return {}
