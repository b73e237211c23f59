"""What a state read from its model that the run did not give it (SPEC M3).

A state that reads its model's configuration or attributes when it is built fails with
an ``AttributeError`` on the toy model (or on its configuration) when the run names no
such value. :func:`what_the_state_read` turns that error into the sentence a user
needs: which attribute, the line of the state that read it, and the option that
supplies it.
"""

from __future__ import annotations

from rtmm_conformance.driving.engine import where_needed
from rtmm_protocol.testing.model_configuration import (
    CONFIG_OPTION,
    MODEL_ATTR_OPTION,
    attribute_owner,
)

__all__ = ["what_the_state_read"]

#: The methods an attribute read passes through before it fails (a configuration class's
#: own lookup, transformers' among them): the read is the line that called them.
_ATTRIBUTE_LOOKUP = frozenset({"__getattr__", "__getattribute__"})


def what_the_state_read(error: BaseException, model: object) -> str | None:
    """The M3 hint for ``error``, raised while a state was built around ``model``; ``None``
    when it is not an attribute the model or its configuration lacks."""
    if not isinstance(error, AttributeError) or not error.name:
        return None
    owner = attribute_owner(model, getattr(error, "obj", None))
    if owner is None:
        return None
    where = where_needed(error, skip=_ATTRIBUTE_LOOKUP)
    read = f"{owner}.{error.name}"
    if owner == "model.config" or owner.startswith("model.config."):
        return (
            f"The state read {read} {where} (its model's configuration; vLLM's "
            "model_config.hf_config and hf_text_config are this configuration), which the "
            f"run's configuration does not hold. Give the checkpoint's config.json with "
            f"{CONFIG_OPTION}=PATH (from Python: model_config=PATH, a mapping or a "
            "transformers configuration); SPEC M3."
        )
    name = read.removeprefix("model.")
    return (
        f"The state read {read} {where}, an attribute the toy model does not have. Give it "
        f"with {MODEL_ATTR_OPTION} {name}=VALUE (from Python: model_attrs={{{name!r}: "
        "VALUE}); SPEC M3."
    )
