"""The contract's names on a vLLM class, added by a subclass made at run time.

vLLM's ModelRunner V2 model states do what the contract's ``ModelState`` does under
other names. :func:`with_contract_names` returns a subclass of the user's class that adds
only the names the class lacks, each a plain alias of what vLLM already does:

* ``get_mm_embeddings(scheduled_encoder_inputs, input_batch, req_states)`` calls
  ``prepare_inputs_embeds`` with the same arguments (vLLM 0.29 renamed the method; 0.28
  still calls it ``get_mm_embeddings``, and then nothing is added);
* ``hidden_size`` is ``inputs_embeds_size``, the width of vLLM's ``inputs_embeds``;
* ``is_realtime`` is vLLM's own guard, ``supports_realtime(model)``, as its encoder runner
  evaluates it (a truthy value that is not ``True`` shows as it is).

A name the class already has (its own method, or a class attribute) is left alone, and an
instance attribute the class's ``__init__`` assigns to ``hidden_size`` or ``is_realtime``
is kept and read back: the subclass never hides what the user's class does. Encoder
runners need no names: vLLM's gather is the contract's runner-level gather.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from rtmm_protocol.adapters.vllm.availability import import_vllm
from rtmm_protocol.adapters.vllm.class_kind import Level

__all__ = ["DerivedAttribute", "added_names", "with_contract_names"]

_SUBCLASSES: dict[tuple[type, Level], type] = {}


class DerivedAttribute:
    """An attribute computed from the instance unless the instance has assigned its own.

    A data descriptor: reading returns the value the instance assigned, if any, else
    ``compute(instance)``; assigning stores the value on the instance.
    """

    def __init__(self, name: str, compute: Callable[[Any], object], doc: str) -> None:
        self.name = name
        self.compute = compute
        self.__doc__ = doc

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return self
        assigned: dict[str, object] = vars(instance)
        if self.name in assigned:
            return assigned[self.name]
        return self.compute(instance)

    def __set__(self, instance: object, value: object) -> None:
        vars(instance)[self.name] = value


def _inputs_embeds_size(state: Any) -> object:
    return state.inputs_embeds_size


def _realtime_guard(state: Any) -> object:
    interfaces = import_vllm("vllm.model_executor.models.interfaces")
    return interfaces.supports_realtime(state.model)


def _get_mm_embeddings(
    self: Any,
    scheduled_encoder_inputs: Mapping[str, Sequence[int]],
    input_batch: Any,
    req_states: Any,
) -> torch.Tensor | None:
    """Encode, gather and merge one step: vLLM's ``prepare_inputs_embeds``, same arguments."""
    result: torch.Tensor | None = self.prepare_inputs_embeds(
        scheduled_encoder_inputs, input_batch, req_states
    )
    return result


def added_names(cls: type, level: Level) -> dict[str, object]:
    """The contract's names ``cls`` lacks at ``level``, as a class namespace."""
    if level == "encoder_runner":
        return {}
    names: dict[str, object] = {}
    if not hasattr(cls, "get_mm_embeddings") and hasattr(cls, "prepare_inputs_embeds"):
        names["get_mm_embeddings"] = _get_mm_embeddings
    if not hasattr(cls, "hidden_size"):
        names["hidden_size"] = DerivedAttribute(
            "hidden_size",
            _inputs_embeds_size,
            "Width of ``inputs_embeds`` (``inputs_embeds_size``).",
        )
    if not hasattr(cls, "is_realtime"):
        names["is_realtime"] = DerivedAttribute(
            "is_realtime", _realtime_guard, "vLLM's realtime guard on the state's model."
        )
    return names


def with_contract_names(cls: type, level: Level) -> type:
    """``cls`` itself when it has every name, else a subclass adding the missing ones.

    The subclass keeps the class's name, qualified name and module, so reports and
    tracebacks name the user's class; it is made once per class.
    """
    key = (cls, level)
    if key not in _SUBCLASSES:
        names = added_names(cls, level)
        if not names:
            _SUBCLASSES[key] = cls
        else:
            namespace: dict[str, object] = {
                **names,
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
                "__doc__": cls.__doc__,
            }
            _SUBCLASSES[key] = type(cls.__name__, (cls,), namespace)
    return _SUBCLASSES[key]
