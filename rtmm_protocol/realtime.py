"""The realtime marker and its run-time guard (SPEC T3)."""

from __future__ import annotations

from typing import ClassVar, Literal, Protocol, overload

from typing_extensions import TypeIs

__all__ = ["SupportsRealtime", "supports_realtime"]


class SupportsRealtime(Protocol):
    """A model that needs multimodal embeddings on decode steps too.

    Declare it on the model *class* as ``supports_realtime: ClassVar[Literal[True]] = True``
    or inherit from this class, which does exactly that. A plain ``= True`` (inferred as
    ``bool``) or ``ClassVar[bool]`` does not match: the type checker could not tell a
    realtime model from one that sets the flag to ``False``.

    Not ``runtime_checkable``: ``isinstance`` would only test that the attribute exists,
    not that it is ``True``. Use :func:`supports_realtime` at run time.
    """

    supports_realtime: ClassVar[Literal[True]] = True


# A class narrows to type[SupportsRealtime], anything else to an instance of it. The
# first overload is more specific than the second, which mypy and pyright accept as
# overlapping without conflict.
@overload
def supports_realtime(obj: type[object]) -> TypeIs[type[SupportsRealtime]]: ...


@overload
def supports_realtime(obj: object) -> TypeIs[SupportsRealtime]: ...


def supports_realtime(obj: object) -> bool:
    """Return whether ``obj`` (a model class or instance) is a realtime model.

    Only the class attribute counts and it must be the ``True`` singleton: an instance
    attribute, a truthy non-bool such as ``1`` or a property is not a realtime marker.

    Type checkers narrow the argument: an instance to :class:`SupportsRealtime` (or to the
    members of a union that declare the marker), a class to ``type[SupportsRealtime]``.
    A class that declares the marker as plain ``bool`` is never narrowed to it, so the
    realtime branch looks unreachable; ``--warn-unreachable`` makes mypy say so.
    """
    cls = obj if isinstance(obj, type) else type(obj)
    return getattr(cls, "supports_realtime", False) is True
