"""Hypothesis's local constants, switched off while the suite draws.

From 6.131.1 on, Hypothesis draws about one value in twenty from a pool of constants, in
part read from the literals of every loaded module outside site-packages: the user's and
the target's, a ``conftest.py``, this package when installed editable. There is no public
setting for it; :func:`without_local_constants` replaces the private function that reads
the pool (``providers._get_local_constants``) with one returning an empty pool, and puts
it back on exit. Hypothesis's own constants stay, the same for one Hypothesis version.

Covers 6.131.1 (the pool a dict of sets by choice type) to 6.170.17 (a ``Constants``
object); tried on 6.131.1, 6.135.0, 6.140.0, 6.150.0 and 6.170.17. Before 6.131.1 there
is no pool and nothing is done; a later version that moved it fails the package's tests.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

try:  # older Hypothesis (6.100 among them) has neither this module nor the pool
    providers: Any = importlib.import_module("hypothesis.internal.conjecture.providers")
except ImportError:  # pragma: no cover - depends on the Hypothesis installed
    providers = None

__all__ = ["has_local_constants", "without_local_constants"]


def has_local_constants() -> bool:
    """Whether this Hypothesis draws from the literals of loaded modules (6.131.1 on)."""
    return callable(getattr(providers, "_get_local_constants", None))


def _clear_cache() -> None:
    """Forget the constants cached per kind of draw: the cache does not say their pool."""
    cache: Any = getattr(providers, "CONSTANTS_CACHE", None)
    getattr(getattr(cache, "cache", None), "clear", lambda: None)()


@contextlib.contextmanager
def without_local_constants() -> Iterator[None]:
    """Draw without the literals of loaded modules inside the block (a no-op where
    Hypothesis has none). Nests; not for draws in several threads at once."""
    if not has_local_constants():
        yield
        return
    try:
        from hypothesis.internal.constants_ast import Constants  # 6.135.0 on
    except ImportError:  # 6.131.1 and the releases right after it
        empty: object = {"integer": (), "float": (), "bytes": (), "string": ()}
    else:
        empty = Constants()
    original = providers._get_local_constants
    providers._get_local_constants = lambda: empty
    _clear_cache()
    try:
        yield
    finally:
        providers._get_local_constants = original
        _clear_cache()
