"""The pytest plugin: ``pytest --conformance[=MODULE:FACTORY]``.

Installed through the ``pytest11`` entry point, so pytest loads this module in every
run of every project that has the package installed. Without ``--conformance`` it only
declares its options and does nothing else; everything heavy is imported when the
option is given.

With ``--conformance`` pytest runs the suite and nothing else. The suite does not
collect files: its items are built directly (node IDs such as
``rtmm-conformance::G5-rows-match-mask[realtime]``), so a project's ``python_files``
setting, its own ``conformance/`` folder or ``testpaths`` cannot hide or shadow it.
Positional arguments may be such node IDs, to rerun one check. Each item's verdict
travels to the report (through xdist too) as one JSON record in its user properties.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

from rtmm_protocol.conformance.defaults import (
    DEFAULT_EXAMPLES,
    DEFAULT_SEED,
    DEFAULT_TIMEOUT_S,
    DTYPE_NAMES,
    NODE_PREFIX,
    REFERENCE_MODEL_STATE,
)

if TYPE_CHECKING:
    from _pytest._code.code import ExceptionInfo, TerminalRepr
    from _pytest.terminal import TerminalReporter

    from rtmm_protocol.conformance.reporting.report import ConformanceReport
    from rtmm_protocol.conformance.reporting.results import CheckResult
    from rtmm_protocol.conformance.reporting.xfail import XfailFile
    from rtmm_protocol.conformance.running.runner import PlannedCheck, SuiteRunner
    from rtmm_protocol.conformance.settings import RunSettings

__all__ = [
    "ConformanceFailedError",
    "ConformanceItem",
    "pytest_addoption",
    "pytest_collection",
    "pytest_configure",
    "pytest_report_header",
    "pytest_sessionfinish",
    "pytest_terminal_summary",
    "pytest_unconfigure",
]

_STATE = pytest.StashKey["_SuiteSession"]()
#: The user property that carries an item's verdict, as ``CheckResult.to_json()``.
_RECORD = "rtmm_result"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Declare the ``--conformance`` options (the only thing done when they are not used)."""
    add = parser.getgroup("rtmm-conformance", "rtmm-protocol conformance suite").addoption
    # fmt: off
    add("--conformance", nargs="?", const=REFERENCE_MODEL_STATE, default=None,
        metavar="MODULE:FACTORY",
        help="run the conformance suite against FACTORY(ctx) (a ModelState or a runner-level "
        "gatherer); without a value, against the bundled reference. Write "
        "--conformance=MODULE:FACTORY: a bare --conformance takes the next argument")
    add("--conformance-device", default=None, metavar="DEVICE",
        help="device to build targets on (default: cuda where the checks run has one, else cpu)")
    add("--conformance-dtype", default="float32", choices=DTYPE_NAMES,
        help="dtype of the state's buffer (default: float32)")
    add("--conformance-seed", type=int, default=DEFAULT_SEED, metavar="N",
        help=f"seed of the random batches (default: {DEFAULT_SEED}; printed in the header)")
    add("--conformance-examples", type=int, default=DEFAULT_EXAMPLES, metavar="N",
        help=f"random examples per check and mode (default: {DEFAULT_EXAMPLES})")
    add("--conformance-timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
        help=f"time limit of one check in one mode (default: {DEFAULT_TIMEOUT_S:g})")
    add("--conformance-strict", action="store_true", default=False,
        help="fail the run on SHOULD failures and stale expected-failure entries")
    add("--conformance-xfail", default=None, metavar="FILE",
        help="expected failures: one clause or check ID per line, then the reason")
    add("--conformance-report", default=None, metavar="PATH", help="write the JSON report to PATH")
    add("--conformance-isolation", default="auto", choices=("auto", "process", "off"),
        help="where checks run: process (a worker process, CUDA-safe: a crashing or hanging "
        "target fails one check and the run goes on), off (in the pytest process, for "
        "debugging), or auto (default: process, unless the factory cannot be sent to one)")
    add("--conformance-baseline", default=None, metavar="MODULE:FACTORY",
        help="what the target derives from: a failure it shares on the same draws is "
        "reported as inherited, not yours (a vllm:MODULE:CLASS target has one already)")
    add("--conformance-version", default=None, metavar="X",
        help="score against the requirement set of protocol version X (default: current)")
    # fmt: on


class _SuiteSession:
    """Per-process state of a conformance run: options, target, runner, collected results."""

    def __init__(self, config: pytest.Config) -> None:
        from rtmm_protocol._version import PROTOCOL_VERSION
        from rtmm_protocol.conformance.api import make_settings
        from rtmm_protocol.conformance.driving.factories import FactorySpecError, load_target
        from rtmm_protocol.conformance.reporting.xfail import parse_xfail_file

        self.config = config
        # ``getoption`` is untyped. Every option read here has a default and a ``type``,
        # ``choices`` or ``store_true``, so argparse has converted and checked its value.
        option = config.getoption
        self.spec = cast(str, option("conformance"))
        try:
            self.settings: RunSettings = make_settings(
                device=cast("str | None", option("conformance_device")),
                dtype=cast(str, option("conformance_dtype")),
                seed=cast(int, option("conformance_seed")),
                examples=cast(int, option("conformance_examples")),
                timeout_s=cast(float, option("conformance_timeout")),
                strict=cast(bool, option("conformance_strict")),
                version=cast("str | None", option("conformance_version")) or PROTOCOL_VERSION,
                isolation=cast(str, option("conformance_isolation")),
            )
            search = [config.invocation_params.dir, config.rootpath]
            self.target = load_target(self.spec, search)
            baseline = cast("str | None", option("conformance_baseline"))
            if baseline:
                base = load_target(baseline, search)
                self.target = replace(self.target, baseline=base.factory, baseline_label=baseline)
        except (FactorySpecError, ImportError) as error:
            raise pytest.UsageError(str(error)) from None
        except (ValueError, RuntimeError) as error:
            raise pytest.UsageError(f"--conformance options: {error}") from None
        xfail_path = cast("str | None", option("conformance_xfail"))
        try:
            self.xfail: XfailFile | None = (
                parse_xfail_file(Path(config.invocation_params.dir, xfail_path), xfail_path)
                if xfail_path
                else None
            )
        except ValueError as error:
            raise pytest.UsageError(str(error)) from None
        self.selection = self._node_selection(config)
        #: The (check, mode) items selected to run, as collected (by a worker under xdist).
        self.planned: list[tuple[str, str | None]] = []
        self.records: list[CheckResult] = []
        self.report: ConformanceReport | None = None
        self._runner: SuiteRunner | None = None

    @staticmethod
    def _node_selection(config: pytest.Config) -> list[str]:
        if config.args_source is not pytest.Config.ArgsSource.ARGS:
            return []  # testpaths or the invocation directory: not the user's choice
        args = [str(a) for a in config.args]
        foreign = [a for a in args if a != NODE_PREFIX and not a.startswith(NODE_PREFIX + "::")]
        if foreign:
            raise pytest.UsageError(
                f"with --conformance pytest runs only the conformance suite, but got the "
                f"path(s) {', '.join(foreign)}. Select checks with -k (for example -k G5) or "
                f"by node ID ({NODE_PREFIX}::G5-rows-match-mask); run other tests in a "
                "separate pytest call. If you meant `pytest --conformance PATH`: a bare "
                "--conformance takes the next argument, so write --conformance=MODULE:FACTORY."
            )
        return args

    @property
    def runner(self) -> SuiteRunner:
        """The runner, made on first use: it resolves the device and builds the target once
        where the checks run (a usage error when the device asked for is missing)."""
        if self._runner is None:
            from rtmm_protocol.conformance.running.runner import open_runner

            try:
                self._runner = open_runner(self.target, self.settings)
            except ValueError as error:
                raise pytest.UsageError(f"--conformance options: {error}") from None
            self.settings = self._runner.settings
        return self._runner

    def close(self) -> None:
        """Stop the runner's worker process."""
        if self._runner is not None:
            self._runner.close()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Note each check's verdict (in an xdist controller too: reports carry properties)."""
        if report.when != "call":
            return
        record = next((str(v) for k, v in report.user_properties if k == _RECORD), None)
        if record is not None:
            from rtmm_protocol.conformance.reporting.results import CheckResult

            self.records.append(CheckResult.from_json(record))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        """In an xdist controller: what the workers will run (they all collect the same)."""
        if not self.planned:
            self.planned = [_planned_of(nodeid) for nodeid in ids]


def _planned_of(nodeid: str) -> tuple[str, str | None]:
    """``(check, mode)`` of a suite node ID such as ``rtmm-conformance::G5-x[realtime]``."""
    label = nodeid.removeprefix(NODE_PREFIX + "::")
    check, _, mode = label.partition("[")
    return check, (mode.removesuffix("]") or None)


def _session(config: pytest.Config) -> _SuiteSession | None:
    return config.stash.get(_STATE, None)


def pytest_configure(config: pytest.Config) -> None:
    """Check the options and load the factory (usage errors stop the run here)."""
    if config.getoption("conformance", None) is None:
        return
    state = _SuiteSession(config)
    config.stash[_STATE] = state
    config.pluginmanager.register(state, "rtmm-conformance-session")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the worker process the run used."""
    state = _session(config)
    if state is not None:
        state.close()


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """The target, seed and versions, so that a pasted log can be reproduced."""
    state = _session(config)
    if state is None:
        return None
    from rtmm_protocol.conformance.catalog import CHECKS, clauses_for, version_key

    runner = state.runner
    settings, probe, env = runner.settings, runner.probe, runner.environment
    if config.pluginmanager.has_plugin("dsession"):
        runner.close()  # an xdist controller runs no check: its workers have their own
    kind_name = {"model_state": "ModelState", "gatherer": "MMEmbeddingGatherer"}
    if probe.kind is None:
        target = f"{state.spec} (kind unknown: {probe.note})"
        applies = "all clauses (the basic checks will say what is wrong)"
    else:
        target = f"{state.spec} ({kind_name[probe.kind]})"
        own = list(clauses_for(probe.kind))
        other = [c for c in clauses_for("model_state") if c not in own]
        applies = ", ".join(own) + (
            f"; not applicable to this kind of target: {', '.join(other)}" if other else ""
        )
    newer = [c.id for c in CHECKS if version_key(c.since) > version_key(settings.version)]
    where = runner.notes[0] if runner.notes else "a worker process, reused for every check"
    return [
        "rtmm-protocol conformance suite",
        f"  target:   {target}",
        f"  clauses:  {applies}",
        f"  seed:     {settings.seed} (--conformance-seed)   examples: {settings.examples}   "
        f"timeout: {settings.timeout_s:g} s   strict: {'yes' if settings.strict else 'no'}",
        f"  protocol: {env['protocol']} (scored against the {settings.version} requirement set"
        + (f"; {len(newer)} newer checks not run" if newer else "")
        + ")",
        f"  versions: rtmm-protocol {env['rtmm_protocol']}, torch {env['torch']}, "
        f"CUDA {env['cuda']}, Python {env['python']}",
        f"  device:   {env['device']}, dtype {str(settings.dtype).removeprefix('torch.')}",
        f"  isolation: {where}",
    ]


class _SuiteCollector(pytest.Collector):
    """The suite's one collector; its children are the checks, one per mode."""

    def collect(self) -> list[pytest.Item]:
        state = _session(self.config)
        if state is None:
            return []
        return [
            ConformanceItem.from_parent(self, name=planned.label, planned=planned)
            for planned in state.runner.plan()
        ]


class ConformanceFailedError(Exception):
    """A check failed; the message is the full explanation, shown without a traceback."""


class ConformanceItem(pytest.Item):
    """One check in one mode."""

    def __init__(self, *, planned: PlannedCheck, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]  # pytest's node keywords
        self.planned = planned
        info = planned.impl.info
        self.user_properties.extend([("clause", info.clause), ("level", info.level)])

    def runtest(self) -> None:
        """Run the check (or fetch its result) and turn the verdict into pytest's terms."""
        from rtmm_protocol.conformance.reporting.causes import key_digest
        from rtmm_protocol.conformance.reporting.results import ConformanceWarning, Outcome
        from rtmm_protocol.conformance.running.runner import judge

        state = _session(self.config)
        if state is None:
            raise RuntimeError("the conformance plugin is not configured")
        impl = self.planned.impl
        raw = state.runner.run(impl.id, self.planned.mode)
        entry = state.xfail.entry_for(impl.id, self.planned.mode) if state.xfail else None
        result = judge(raw, impl.info, strict=state.settings.strict, expected_failure=entry)
        self.user_properties.append((_RECORD, result.to_json()))
        if result.cause_key:
            cause = f"{key_digest(result.cause_key)}: {result.cause_title}"
            self.user_properties.append(("cause", cause))
        outcome = result.outcome
        if outcome is Outcome.FAILED:
            from rtmm_protocol.conformance.reporting.report import rerun_command

            settings = state.settings
            command = rerun_command(state.spec, settings.seed, str(settings.device), self.name)
            raise ConformanceFailedError(f"{result.details or result.reason}\nrerun: {command}")
        if outcome in (Outcome.SKIPPED, Outcome.BLOCKED):
            # Reported at the check (not at this line), as pytest does for skip marks.
            raise pytest.skip.Exception(result.reason, _use_item_location=True)
        if outcome is Outcome.XFAILED:
            pytest.xfail(result.reason)
        if outcome is Outcome.WARNING:
            warnings.warn(
                ConformanceWarning(f"{self.name} (SHOULD): {result.reason}"), stacklevel=1
            )

    def repr_failure(
        self, excinfo: ExceptionInfo[BaseException], style: object = None
    ) -> str | TerminalRepr:
        """The check's own explanation; a traceback only for errors of the suite itself."""
        if isinstance(excinfo.value, ConformanceFailedError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        """Where the check is: its function's file and line, and its ID as the test name."""
        import inspect

        impl = self.planned.impl
        code = impl.example if impl.example is not None else impl.run
        try:
            source = inspect.getsourcefile(code)
            line = inspect.getsourcelines(code)[1] - 1
        except (OSError, TypeError):
            return self.path, 0, self.name
        return (Path(source) if source else self.path), line, self.name


def pytest_collection(session: pytest.Session) -> bool | None:
    """Collect the suite instead of files (not in an xdist controller: workers collect)."""
    state = _session(session.config)
    if state is None:
        return None
    if session.config.pluginmanager.has_plugin("dsession"):
        return None  # the xdist controller collects nothing; its workers do
    suite = _SuiteCollector.from_parent(session, name=NODE_PREFIX, nodeid=NODE_PREFIX)
    items = list(session.genitems(suite))
    if state.selection:
        items = [i for i in items if _selected(i.nodeid, state.selection)]
    session.items = items
    hook = session.config.hook
    hook.pytest_collection_modifyitems(session=session, config=session.config, items=items)
    state.planned = [
        (i.planned.impl.id, i.planned.mode) for i in items if isinstance(i, ConformanceItem)
    ]
    hook.pytest_collection_finish(session=session)
    session.testscollected = len(items)
    return True


def _selected(nodeid: str, selection: list[str]) -> bool:
    return any(
        nodeid == wanted or wanted == NODE_PREFIX or nodeid.startswith(wanted + "[")
        for wanted in selection
    )


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Build the report, write the JSON file, and set the exit status of runs that are
    incomplete or (strict) have stale expected-failure entries."""
    config = session.config
    state = _session(config)
    if state is None or hasattr(config, "workerinput"):
        return  # under xdist the controller alone writes the report
    if not state.records and not state.planned:
        return
    from rtmm_protocol.conformance.api import report_of
    from rtmm_protocol.conformance.reporting.results import CheckResult, Outcome

    interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
    seen = {(r.check_id, r.mode) for r in state.records}
    why = (
        "not run: the run was interrupted"
        if interrupted
        else "not run: the run stopped before this check (-x, --maxfail, or a lost worker)"
    )
    records = [
        *state.records,
        *(
            CheckResult(check, mode, Outcome.NOT_RUN, why)
            for check, mode in state.planned
            if (check, mode) not in seen
        ),
    ]
    report = report_of(state.runner, records, state.xfail, interrupted=interrupted)
    state.report = report
    path = config.getoption("conformance_report")
    if path:
        report.write_json(Path(config.invocation_params.dir, path))
    if session.exitstatus == 0 and not report.complete:
        session.exitstatus = pytest.ExitCode.INTERRUPTED
    stale = report.stale_expected_failures or report.unknown_expected_failures
    if state.settings.strict and stale and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(
    terminalreporter: TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    """The per-check table and the summary line."""
    state = _session(config)
    if state is None or state.report is None:
        return
    report = state.report
    write = terminalreporter.write_line
    should = report.should_details()
    if should:
        terminalreporter.write_sep(
            "=", "SHOULD failures (warnings; --conformance-strict fails them)"
        )
        for line in should.splitlines():
            write(line)
    terminalreporter.write_sep("=", "rtmm-protocol conformance")
    for line in report.table().splitlines():
        write(line)
    causes = report.causes_text()
    if causes:
        write("")
        for line in causes.splitlines():
            write(line)
    write(report.item_line())
    path = config.getoption("conformance_report")
    if path:
        write(f"JSON report: {Path(config.invocation_params.dir, path)}")
    write(report.summary_line(), bold=True, red=not report.ok)
