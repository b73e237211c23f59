"""Hypothesis's local constants, switched off while the suite draws.

From 6.131.1 on, Hypothesis draws about one integer, float, string or bytes value in
twenty from a pool of constants, part of which it reads from the literals of every
loaded module that is not installed in site-packages: the target's and the user's
modules, a ``conftest.py`` in the working directory, and this package itself when it is
installed editable. The same seed would then draw differently when a user edits an
unrelated constant, installs the package another way or runs from another folder.

:func:`without_local_constants` empties that local pool for the suite's draws. Hypothesis
has no public setting for it, so the function replaces the private
``hypothesis.internal.conjecture.providers._get_local_constants`` (the one place the
pool is read) with one that returns an empty pool, and puts it back on exit. Hypothesis's
own constants (powers of two, special floats and strings, the same for every run of one
Hypothesis version) are still drawn: what stays is a function of the Hypothesis version.

Versions covered: from 6.131.1, where the pool is a dict of sets by choice type, to
6.170.17, where it is a ``Constants`` object (tried on 6.131.1, 6.135.0, 6.140.0,
6.150.0 and 6.170.17). Before 6.131.1 there is no such pool and the function does
nothing. Should a later version move the pool, the package's tests fail on it
(``tests/suite/test_determinism.py``).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

__all__ = ["has_local_constants", "without_local_constants"]

_PROVIDERS = "hypothesis.internal.conjecture.providers"
_READER = "_get_local_constants"
_CACHE = "CONSTANTS_CACHE"


def _providers() -> ModuleType | None:
    try:
        return importlib.import_module(_PROVIDERS)
    except ImportError:  # pragma: no cover - every supported Hypothesis has the module
        return None


def has_local_constants() -> bool:
    """Whether this Hypothesis draws from the literals of loaded modules (6.131.1 on)."""
    providers = _providers()
    return providers is not None and callable(getattr(providers, _READER, None))


def _empty_pool() -> object:
    """An empty pool in the shape this Hypothesis reads."""
    try:
        from hypothesis.internal.constants_ast import Constants  # 6.135.0 and later
    except ImportError:  # 6.131.1 and the versions right after it: a dict by choice type
        return {"integer": (), "float": (), "bytes": (), "string": ()}
    return Constants()


def _clear_cache(providers: ModuleType) -> None:
    """Forget the permitted constants Hypothesis cached per kind of draw: the cache does
    not say which pool they came from."""
    cache: Any = getattr(providers, _CACHE, None)
    inner = getattr(cache, "cache", None)
    if inner is not None and hasattr(inner, "clear"):
        inner.clear()


@contextlib.contextmanager
def without_local_constants() -> Iterator[None]:
    """Draw without the literals of loaded modules inside the block; nothing changes where
    Hypothesis does not have them. Nests; not for draws in several threads at once."""
    providers = _providers()
    if providers is None or not has_local_constants():
        yield
        return
    original: Callable[[], object] = getattr(providers, _READER)
    pool = _empty_pool()

    def no_local_constants() -> object:
        return pool

    setattr(providers, _READER, no_local_constants)
    _clear_cache(providers)
    try:
        yield
    finally:
        setattr(providers, _READER, original)
        _clear_cache(providers)
