"""What a check function receives: the target's factory, the run's settings, and helpers
to build a fresh target per example and to run hand-placed then random scenarios."""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import torch
from hypothesis import HealthCheck, Phase, Verbosity, given, seed
from hypothesis import settings as draw_settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky

from rtmm_conformance.clauses import TargetKind
from rtmm_conformance.driving.context import (
    ContextParts,
    Factory,
    Mode,
    ModeNotSupported,
    build_context,
)
from rtmm_conformance.driving.engine import CONTRACT_ENGINE, Engine, engine_of
from rtmm_conformance.driving.factories import detect_kind
from rtmm_conformance.driving.gather_call import GatherCall, call_gather, describe_error
from rtmm_conformance.driving.hypothesis_local_constants import without_local_constants
from rtmm_conformance.driving.model_reads import what_the_state_read
from rtmm_conformance.results import CheckFailure, CheckSkipped
from rtmm_conformance.settings import RunSettings
from rtmm_protocol.protocols import MultiModalModel
from rtmm_protocol.testing.scenario import CaseKind, GatherScenario
from rtmm_protocol.testing.toy_models import ToyReplaceModel

__all__ = ["Built", "CheckRun", "build_target", "first_check_failure"]

_R = TypeVar("_R")


@dataclass
class Built(ContextParts):
    """A freshly built target, next to its context, instrumented model and cache."""

    target: object
    kind: TargetKind


def build_target(
    factory: Factory,
    settings: RunSettings,
    modes: tuple[Mode, ...],
    *,
    hidden_size: int | None = None,
    model_class: type[ToyReplaceModel] | None = None,
    engine: Engine | None = None,
) -> Built:
    """A fresh context and a fresh target from ``factory``, in the first of ``modes`` it
    accepts: :class:`CheckSkipped` if it refuses them all, :class:`CheckFailure` (chained to
    its error) if it raises or returns neither kind of target. ``engine``: the factory's
    (:func:`~.engine.engine_of`) unless given."""
    refusals = []
    engine = engine or engine_of(factory)
    for candidate in modes:
        try:
            parts = build_context(
                candidate,
                settings,
                hidden_size=hidden_size,
                model_class=model_class,
                config_class=engine.config_class,
            )
        except ValueError as error:  # the run's model configuration (SPEC M3)
            raise CheckFailure(
                "the model configuration the run names does not build",
                expected="a configuration its model_type's configuration class accepts",
                seen=str(error),
            ) from error
        try:
            target = factory(parts.ctx)
        except ModeNotSupported as refusal:
            refusals.append(f"{candidate}: {refusal.reason}")
            continue
        except Exception as error:
            raise CheckFailure(
                "the factory raised while building the target",
                expected=f"a target built for a {candidate} context",
                seen=describe_error(error),
                context=what_the_state_read(error, parts.model),
            ) from error
        kind = detect_kind(target, multimodal=isinstance(parts.model, MultiModalModel))
        if kind is None:
            raise CheckFailure(
                "the factory returned neither a ModelState nor a gatherer",
                expected="an object with dummy_inputs_embeds/get_mm_embeddings, or "
                "gather_mm_embeddings",
                seen=type(target).__name__,
            )
        return Built(**vars(parts), target=target, kind=kind)
    raise CheckSkipped("the factory does not support this mode (" + "; ".join(refusals) + ")")


@dataclass(kw_only=True, eq=False)
class CheckRun:
    """One check in one mode, against one target factory."""

    check_id: str
    factory: Factory
    factory_name: str
    settings: RunSettings
    mode: Mode | None
    kind: TargetKind
    #: How the targets take the suite's steps (the factory's engine, taken before the
    #: factory is wrapped).
    engine: Engine = field(default_factory=lambda: CONTRACT_ENGINE)

    @property
    def device(self) -> torch.device:
        """The device targets are built for."""
        return self.settings.torch_device

    def build(
        self,
        *,
        mode: Mode | None = None,
        hidden_size: int | None = None,
        model_class: type[ToyReplaceModel] | None = None,
    ) -> Built:
        """A fresh context and a fresh target from the factory. A factory that refuses the
        mode skips the check; one that raises or returns the wrong kind fails it."""
        wanted = mode if mode is not None else self.mode
        modes: tuple[Mode, ...] = (wanted,) if wanted is not None else ("non-realtime", "realtime")
        built = build_target(
            self.factory,
            self.settings,
            modes,
            hidden_size=hidden_size,
            model_class=model_class,
            engine=self.engine,
        )
        if built.kind != self.kind:
            raise CheckFailure(
                "the factory returned a different kind of target than before",
                expected=self.kind,
                seen=built.kind,
            )
        return built

    def build_loaded(self, scenario: GatherScenario) -> Built:
        """A fresh target whose cache holds the scenario's features and outputs."""
        built = self.build(hidden_size=scenario.hidden_size)
        scenario.load_into(built.cache, self.device)
        return built

    def gather(self, built: Built, scenario: GatherScenario, **kwargs: object) -> GatherCall:
        """Call the built target's gather on ``scenario`` (already loaded)."""
        return call_gather(
            built.target,
            built.kind,
            built.model,
            built.cache,
            scenario,
            self.device,
            **kwargs,  # type: ignore[arg-type]  # lookahead / arrays, passed through
        )

    def gather_fresh(self, scenario: GatherScenario) -> GatherCall:
        """Build a target for ``scenario``, load it and gather once: the call G1-G7 and G10
        judge (the rows of G5 among them)."""
        return self.gather(self.build_loaded(scenario), scenario)

    def call(self, description: str, fn: Callable[..., _R], *args: object, **kwargs: object) -> _R:
        """Call a target method; an exception it raises becomes a failure saying so."""
        try:
            return fn(*args, **kwargs)
        except Exception as error:
            raise CheckFailure(
                f"{description} raised", expected="a result", seen=describe_error(error)
            ) from error

    def for_each_scenario(
        self,
        strategy: st.SearchStrategy[GatherScenario],
        cases: Iterable[GatherScenario],
        body: Callable[[GatherScenario], None],
        *,
        examples: int | None = None,
    ) -> None:
        """Run ``body`` on each hand-placed case, then on random scenarios; a failure carries
        the smallest scenario Hypothesis found, as Python that replays it."""
        for case in cases:
            self._run_case(body, case)
        count = self.settings.examples if examples is None else examples
        if count <= 0:
            return

        @self.hypothesis_settings(count)
        @seed(self.example_seed())
        @given(strategy)
        def random_examples(scenario: GatherScenario) -> None:
            self._run_example(body, scenario)

        with self.deterministic("this case"):
            random_examples()

    def hypothesis_settings(self, examples: int, *, stateful_step_count: int = 50) -> draw_settings:
        """The settings of this check's random draws: ``examples`` of them, quiet, without
        a database or deadline, shrunk unless the run says not to."""
        return draw_settings(
            max_examples=examples,
            stateful_step_count=stateful_step_count,
            database=None,
            deadline=None,
            derandomize=False,
            print_blob=False,
            report_multiple_bugs=False,
            verbosity=Verbosity.quiet,
            phases=(Phase.generate, Phase.shrink) if self.settings.shrink else (Phase.generate,),
            # pyright takes the unannotated HealthCheckMeta.__iter__ to yield the metaclass.
            suppress_health_check=list(HealthCheck),  # pyright: ignore[reportArgumentType]
        )

    @contextlib.contextmanager
    def deterministic(self, what: str) -> Iterator[None]:
        """Where every random draw of a check runs, without Hypothesis's constants from the
        literals of loaded modules: the draws are a function of the seed, the check, the
        mode and the suite's and Hypothesis's versions alone. ``Flaky`` is reported as the
        check failure behind it, from a target that did not fail every time on ``what``."""
        try:
            with without_local_constants():
                yield
        except Flaky as flaky:
            inner = first_check_failure(flaky)
            if inner is None:
                raise
            inner.context = (
                f"(the target did not fail every time on {what}: it is not deterministic)"
            )
            inner.replay = inner.replay or ""
            raise inner from None

    def example_seed(self) -> int:
        """The Hypothesis seed of this check and mode, derived from the run's seed."""
        key = f"{self.settings.seed}:{self.check_id}:{self.mode}"
        return zlib.crc32(key.encode())

    def _run_case(self, body: Callable[[GatherScenario], None], case: GatherScenario) -> None:
        """Run a hand-placed case. When it fails, a simpler case that fails the same way
        (one of its requests alone, the plainest window first; no other requests in the
        cache; no masks; no look-ahead) stands for it, and so on while one does: the
        smallest case names what triggers the failure, not the rest of the case."""
        try:
            self._run_example(body, case)
        except CheckFailure as failure:
            smallest = failure
            while (simpler := self._simpler_failure(body, smallest)) is not None:
                smallest = simpler
            if smallest is failure:
                raise
            raise smallest from smallest.__cause__

    def _simpler_failure(
        self, body: Callable[[GatherScenario], None], failure: CheckFailure
    ) -> CheckFailure | None:
        """The failure of the first simpler case than ``failure``'s that fails the same way."""
        if failure.case is None:
            return None
        realtime = self.mode == "realtime"
        tries = failure.case.simpler()
        singles = sorted(
            (t for t in tries if len(t.requests) == 1 < len(failure.case.requests)),
            key=lambda t: _plainness(t.kind(realtime)),
        )
        for simpler in [*singles, *(t for t in tries if t not in singles)]:
            try:
                self._run_example(body, simpler)
            except CheckFailure as again:
                if again.what == failure.what:
                    return again
            except Exception:  # another failure than the case's: not a simpler case of it
                continue
        return None

    def _run_example(
        self, body: Callable[[GatherScenario], None], scenario: GatherScenario
    ) -> None:
        try:
            body(scenario)
        except CheckFailure as failure:
            if failure.replay is None:
                failure.case, failure.realtime = scenario, self.mode == "realtime"
                failure.replay = self.replay(scenario)
            raise

    def replay(self, scenario: GatherScenario) -> str:
        """Python that rebuilds ``scenario`` and replays this check on it."""
        dtype = self.settings.dtype
        return "\n".join(
            [
                "from rtmm_conformance import replay",
                scenario.to_python(),
                f"replay({self.check_id!r}, {self.factory_name!r}, scenario, "
                f"mode={self.mode!r}, device={str(self.device)!r}, dtype={dtype!r})",
            ]
        )


def _plainness(kind: CaseKind) -> tuple[int, bool]:
    """Fewer kinds of window first, and a prompt's first chunk before any other."""
    return len(kind[1]), kind[1] != ("prefill",)


def first_check_failure(error: BaseException | None) -> CheckFailure | None:
    """The failure inside Hypothesis's report that a test is flaky: a member of its
    exception group (newer Hypothesis) or what it was raised from (older ones)."""
    if error is None or isinstance(error, CheckFailure):
        return error
    for inner in (*getattr(error, "exceptions", ()), error.__cause__, error.__context__):
        found = first_check_failure(inner)
        if found is not None:
            return found
    return None
