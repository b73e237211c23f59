"""Remembering where a target hung, so that later checks calling that entry point are
reported *blocked* instead of waited out (a check that never calls it runs as usual)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from rtmm_conformance.driving.context import ConformanceContext, Factory
from rtmm_conformance.frames import Frame, frame_kind, short_path, target_entry

__all__ = ["ENTRY_METHODS", "Hang", "HangGuard", "TargetBlocked"]

#: The target methods the suite calls; a hang in one blocks later calls of it.
ENTRY_METHODS = (
    "gather_mm_embeddings",
    "get_mm_embeddings",
    "dummy_inputs_embeds",
    "prepare_inputs",
    "prepare_dummy_inputs",
)


class TargetBlocked(RuntimeError):  # noqa: N818  # a verdict, not an error
    """Raised in place of a call into a target method that hung before in this run."""


@dataclass(frozen=True)
class Hang:
    """A target entry point that did not return: where, and in which check. Empty
    ``methods``: the factory or an unknown call hung, so every later build is blocked."""

    label: str
    methods: tuple[str, ...]
    where: str = ""

    @property
    def what(self) -> str:
        """The hung entry point in words."""
        return " / ".join(self.methods) if self.methods else "the factory or an unknown call"

    def reason(self) -> str:
        """The reason a later check that needs the hung entry point is blocked."""
        where = f" at {self.where}" if self.where else ""
        return (
            f"blocked: the target hung in {self.what}{where} during {self.label}; "
            "it is not called again in this run"
        )

    @classmethod
    def from_stack(cls, label: str, frames: Sequence[Frame]) -> Hang:
        """The hang a stack shows: the protocol methods in it below the suite's call."""
        entry, caller = target_entry(frames)
        if entry is None:
            return cls(label, ())
        inner = [f for f in frames[frames.index(entry) :] if frame_kind(f[0]) == "target"]
        methods = tuple(dict.fromkeys(f[2] for f in inner if f[2] in ENTRY_METHODS))
        if caller is not None and caller[2] == "build" and entry[2] not in ENTRY_METHODS:
            methods = ()  # the factory itself hung
        return cls(label, methods, f"{short_path(inner[-1][0])}:{inner[-1][1]}")


@dataclass
class HangGuard:
    """The hangs seen earlier in a run, and whether the running check called into one."""

    hangs: Sequence[Hang] = ()
    #: The hang whose entry point the running check called, if it did.
    hit: Hang | None = None

    def guarded(self, factory: Factory) -> Factory:
        """``factory``, with the hung methods of every target it builds blocked."""
        if not self.hangs:
            return factory

        def build(ctx: ConformanceContext) -> object:
            whole = next((h for h in self.hangs if not h.methods), None)
            if whole is not None:
                self._block(whole)
            target = factory(ctx)
            for hang in self.hangs:
                for method in hang.methods:
                    original = getattr(target, method, None)
                    if original is None:
                        continue
                    blocked = functools.wraps(original)(functools.partial(self._block, hang))
                    try:
                        setattr(target, method, blocked)
                    except (AttributeError, TypeError):  # slots or a frozen object
                        self._block(hang)
            return target

        return build

    def _block(self, hang: Hang, *_args: object, **_kwargs: object) -> NoReturn:
        """Note that the running check needed ``hang``'s entry point, and refuse the call."""
        self.hit = hang
        raise TargetBlocked(hang.reason())
