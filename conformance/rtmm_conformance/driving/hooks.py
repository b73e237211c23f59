"""A state's model-inputs hooks (SPEC M1), and whether it hands the model ``inputs_embeds``
at all (SPEC M2): the two facts about a ModelState that decide how the suite drives it
and which clauses apply to it."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["HOOKS", "hands_no_inputs_embeds", "has_hooks"]

#: The model-inputs hooks of SPEC M1 (:class:`~rtmm_protocol.ModelInputsHooks`).
HOOKS = ("prepare_inputs", "prepare_dummy_inputs")


def has_hooks(target: object) -> bool:
    """Whether ``target`` has both model-inputs hooks (and is judged through them)."""
    return all(callable(getattr(target, name, None)) for name in HOOKS)


def hands_no_inputs_embeds(target: object) -> bool:
    """Whether a dummy run hands the model no ``inputs_embeds`` at all, as a state whose
    model takes encoder outputs by cross-attention does (SPEC M2): ``None`` from
    ``dummy_inputs_embeds(1)`` and none from ``prepare_dummy_inputs(1, 1)``. A call that
    raises says nothing here (the checks report it), so the answer is then ``False``."""
    try:
        if target.dummy_inputs_embeds(1) is not None:  # type: ignore[attr-defined]
            return False
        if has_hooks(target):
            entries = target.prepare_dummy_inputs(1, 1)  # type: ignore[attr-defined]
            return isinstance(entries, Mapping) and entries.get("inputs_embeds") is None
    except Exception:
        return False
    return True
