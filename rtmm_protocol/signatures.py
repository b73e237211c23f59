"""Run-time signature conformance: does a class's method signature fit the Protocol? (SPEC T2).

This module is the one place that decides, at run time, whether the methods and attributes
of a gatherer or a model state match :class:`~rtmm_protocol.MMEmbeddingGatherer` or
:class:`~rtmm_protocol.ModelState`. The conformance suite's signature checks and
``python -m rtmm_protocol typecheck`` both call it, so the two always give the same verdict.

It compares what :func:`inspect.signature` reports for the implementation with the
Protocol's own method, parameter by parameter:

* a parameter the Protocol lets callers pass by position must sit at the same position
  under the same name (callers may pass it by keyword too);
* a keyword-only parameter of the Protocol must exist under that name (positional or
  keyword-only in the implementation); an implementation that accepts it positionally must
  keep the order the Protocol lists them in, so that positional callers of the concrete class stay correct;
* a parameter with a default in the Protocol needs the same default
  (``draft_lookahead=0``), and any extra parameter of the implementation needs a default;
* ``*args`` / ``**kwargs`` absorb what they can, exactly as they do for the type checkers.

Parameter *types* are left to the static checkers. An implementation that still calls the
argument ``computed_prefill_lens`` gets a problem that explains the rename
(:data:`RENAMED_PARAMETERS`).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from typing_extensions import get_protocol_members

from rtmm_protocol.protocols import MMEmbeddingGatherer, ModelState
from rtmm_protocol.vllm_protocols import VllmModelState

__all__ = [
    "RENAMED_PARAMETERS",
    "SignatureProblem",
    "check_gatherer_signature",
    "check_model_state_signature",
    "check_vllm_model_state_signature",
]

#: Old parameter name -> current name, for the renames of the contract's history.
RENAMED_PARAMETERS: Final[Mapping[str, str]] = types.MappingProxyType(
    {"computed_prefill_lens": "num_computed_tokens"}
)

_NEW_TO_OLD: Final[Mapping[str, str]] = {new: old for old, new in RENAMED_PARAMETERS.items()}

_Kind = inspect.Parameter
_POSITIONAL = (_Kind.POSITIONAL_ONLY, _Kind.POSITIONAL_OR_KEYWORD)
_BY_NAME = (_Kind.POSITIONAL_OR_KEYWORD, _Kind.KEYWORD_ONLY)


@dataclass(frozen=True)
class SignatureProblem:
    """One way in which an implementation's member differs from the Protocol's.

    ``method`` names the method or attribute; ``parameter`` the parameter concerned, or
    ``None`` for a problem with the member as a whole. ``expected`` and ``seen`` are plain
    words meant for people ("a parameter named num_computed_tokens ...").
    """

    method: str
    parameter: str | None
    expected: str
    seen: str

    def __str__(self) -> str:
        where = self.method if self.parameter is None else f"{self.method}({self.parameter})"
        return f"{where}: expected {self.expected}; found {self.seen}"


def check_gatherer_signature(target: object) -> list[SignatureProblem]:
    """Compare a gatherer class or instance with :class:`~rtmm_protocol.MMEmbeddingGatherer`.

    Returns the problems found, in Protocol order; an empty list means the signature
    conforms.
    """
    return _check_against(MMEmbeddingGatherer, target)


def check_model_state_signature(target: object) -> list[SignatureProblem]:
    """Compare a model-state class or instance with :class:`~rtmm_protocol.ModelState`.

    Checks the methods as :func:`check_gatherer_signature` does and that the read-only
    attributes exist. On a class, attributes count when declared in the class body
    (annotation, class attribute, property) or assigned as ``self.NAME = ...`` in one of
    its methods, which is what a type checker accepts too; when the source cannot be read,
    only the class body is searched and missing attributes are not reported.
    """
    return _check_against(ModelState, target)


def check_vllm_model_state_signature(target: object) -> list[SignatureProblem]:
    """Compare a class or instance with :class:`~rtmm_protocol.VllmModelState` (the
    contract in vLLM's spelling), as :func:`check_model_state_signature` does."""
    return _check_against(VllmModelState, target)


def _check_against(protocol: type, target: object) -> list[SignatureProblem]:
    problems: list[SignatureProblem] = []
    declared = _declared_attributes(target) if isinstance(target, type) else None
    for name in _protocol_member_order(protocol):
        member = inspect.getattr_static(protocol, name)
        if isinstance(member, property):
            problem = _check_attribute(target, name, declared)
            if problem is not None:
                problems.append(problem)
        else:
            expected = _drop_first(inspect.signature(member))
            actual = _implementation_signature(target, name)
            if isinstance(actual, SignatureProblem):
                problems.append(actual)
            else:
                problems.extend(_compare(name, expected, actual))
    return problems


def _protocol_member_order(protocol: type) -> list[str]:
    """The Protocol's members in the order they are defined in its body."""
    members = get_protocol_members(protocol)
    return [name for name in vars(protocol) if name in members]


# ---------------------------------------------------------------------- attributes


def _check_attribute(
    target: object, name: str, declared: set[str] | None
) -> SignatureProblem | None:
    if isinstance(target, type):
        found = declared is None or name in declared
    else:
        found = _instance_has(target, name)
    if found:
        return None
    return SignatureProblem(name, None, f"an attribute named {name}", "no such attribute")


def _instance_has(target: object, name: str) -> bool:
    try:
        inspect.getattr_static(target, name)
    except AttributeError:
        pass
    else:
        return True
    try:  # a __getattr__ may provide it; whatever it raises means "not there"
        getattr(target, name)
    except Exception:
        return False
    return True


def _declared_attributes(cls: type) -> set[str] | None:
    """Names a type checker would see on instances of ``cls``; None if the source is unreadable."""
    names: set[str] = set()
    readable = True
    for klass in cls.__mro__:
        if klass is object:
            continue
        names.update(vars(klass))
        names.update(inspect.get_annotations(klass))
        assigned = _self_assignments(klass)
        if assigned is None:
            readable = False
        else:
            names.update(assigned)
    return names if readable else None


def _self_assignments(klass: type) -> set[str] | None:
    """Attribute names assigned as ``self.NAME`` in the methods of ``klass``."""
    try:
        source = textwrap.dedent(inspect.getsource(klass))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return None
    names: set[str] = set()
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for target in targets:
            for sub in ast.walk(target):
                if (
                    isinstance(sub, ast.Attribute)
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id == "self"
                ):
                    names.add(sub.attr)
    return names


# ---------------------------------------------------------------------- methods


def _drop_first(signature: inspect.Signature) -> inspect.Signature:
    params = list(signature.parameters.values())
    return signature.replace(parameters=params[1:])


def _implementation_signature(target: object, name: str) -> inspect.Signature | SignatureProblem:
    """The signature callers of ``target.name(...)`` see, without ``self``."""
    missing = SignatureProblem(name, None, f"a method named {name}", "no such method")
    if isinstance(target, type):
        try:
            raw = inspect.getattr_static(target, name)
        except AttributeError:
            return missing
        if isinstance(raw, property):
            return SignatureProblem(name, None, "a method", "a property")
        # A plain function on the class is called with the instance as ``self``;
        # static and class methods are not, and other callables are not bound at all.
        drop_self = isinstance(raw, types.FunctionType)
        candidate: object = raw
        if isinstance(raw, classmethod):
            candidate = getattr(target, name)
        elif isinstance(raw, staticmethod):
            candidate = raw.__func__
    else:
        try:
            candidate = getattr(target, name)
        except AttributeError:
            return missing
        except Exception as error:
            return SignatureProblem(
                name, None, f"a method named {name}", f"reading it raised {error!r}"
            )
        drop_self = False
    if not callable(candidate):
        return SignatureProblem(
            name, None, "a method", f"a non-callable {type(candidate).__name__}"
        )
    try:
        signature = inspect.signature(candidate)
    except (TypeError, ValueError):
        return SignatureProblem(
            name, None, "a method whose signature can be inspected", "no readable signature"
        )
    if drop_self:
        params = list(signature.parameters.values())
        if not params or params[0].kind not in (*_POSITIONAL, _Kind.VAR_POSITIONAL):
            return SignatureProblem(
                name, None, "a method that takes self", "a function without a self parameter"
            )
        if params[0].kind is not _Kind.VAR_POSITIONAL:
            signature = _drop_first(signature)
    return signature


def _compare(
    method: str, expected: inspect.Signature, actual: inspect.Signature
) -> list[SignatureProblem]:
    problems: list[SignatureProblem] = []
    actual_params = list(actual.parameters.values())
    positional = [p for p in actual_params if p.kind in _POSITIONAL]
    by_name = {p.name: p for p in actual_params if p.kind in _BY_NAME}
    var_positional = any(p.kind is _Kind.VAR_POSITIONAL for p in actual_params)
    var_keyword = any(p.kind is _Kind.VAR_KEYWORD for p in actual_params)
    accounted: set[str] = set()

    for index, wanted in enumerate(expected.parameters.values()):
        if wanted.kind in _POSITIONAL:
            found = positional[index] if index < len(positional) else None
            if found is None:
                if wanted.name in by_name:
                    accounted.add(wanted.name)
                if not (var_positional and var_keyword):
                    problems.append(_missing(method, wanted, by_name, positional=index))
                continue
            accounted.add(found.name)
            if found.name != wanted.name:
                problems.append(_misnamed(method, wanted, found, index))
                continue
            if found.kind is _Kind.POSITIONAL_ONLY:
                problems.append(
                    SignatureProblem(
                        method,
                        wanted.name,
                        f"{wanted.name} accepted by keyword as well as by position",
                        "a positional-only parameter",
                    )
                )
        else:
            found = by_name.get(wanted.name)
            if found is None:
                if not var_keyword:
                    old = _NEW_TO_OLD.get(wanted.name)
                    if old is not None and old in actual.parameters:
                        accounted.add(old)
                    problems.append(_missing(method, wanted, by_name, positional=None))
                continue
            accounted.add(found.name)
            if found.kind is _Kind.POSITIONAL_OR_KEYWORD:
                at = positional.index(found)
                if at != index:
                    problems.append(
                        SignatureProblem(
                            method,
                            wanted.name,
                            f"{wanted.name} at position {index + 1} (after self) or keyword-only, "
                            "in the order of the contract",
                            f"it at position {at + 1}",
                        )
                    )
        problem = _check_default(method, wanted, found)
        if problem is not None:
            problems.append(problem)

    for extra in actual_params:
        if (
            extra.name not in accounted
            and extra.kind not in (_Kind.VAR_POSITIONAL, _Kind.VAR_KEYWORD)
            and extra.default is inspect.Parameter.empty
        ):
            problems.append(
                SignatureProblem(
                    method,
                    extra.name,
                    "no required parameters beyond the contract's",
                    f"a required parameter {extra.name} the contract does not pass",
                )
            )
    return problems


def _missing(
    method: str,
    wanted: inspect.Parameter,
    by_name: Mapping[str, inspect.Parameter],
    *,
    positional: int | None,
) -> SignatureProblem:
    old = _NEW_TO_OLD.get(wanted.name)
    if old is not None and old in by_name:
        return _renamed(method, wanted.name, old)
    if positional is not None and wanted.name in by_name:
        return SignatureProblem(
            method,
            wanted.name,
            f"{wanted.name} accepted by position {positional + 1} (after self)",
            "a keyword-only parameter",
        )
    return SignatureProblem(
        method, wanted.name, f"a parameter named {wanted.name}", "no such parameter"
    )


def _misnamed(
    method: str, wanted: inspect.Parameter, found: inspect.Parameter, index: int
) -> SignatureProblem:
    if RENAMED_PARAMETERS.get(found.name) == wanted.name:
        return _renamed(method, wanted.name, found.name)
    return SignatureProblem(
        method,
        found.name,
        f"a parameter named {wanted.name} at position {index + 1} (after self)",
        f"one named {found.name}",
    )


def _renamed(method: str, new: str, old: str) -> SignatureProblem:
    return SignatureProblem(
        method,
        old,
        f"a parameter named {new} (renamed from {old})",
        f"a parameter still named {old}; rename it to {new}",
    )


def _check_default(
    method: str, wanted: inspect.Parameter, found: inspect.Parameter | None
) -> SignatureProblem | None:
    if found is None or wanted.default is inspect.Parameter.empty:
        return None
    expected = f"a default of {wanted.default!r}"
    if found.default is inspect.Parameter.empty:
        return SignatureProblem(method, wanted.name, expected, "no default")
    if type(found.default) is not type(wanted.default) or found.default != wanted.default:
        return SignatureProblem(method, wanted.name, expected, f"a default of {found.default!r}")
    return None
