"""The pytest plugin: the `falsifies` marker, both-way binding of predictions to tests, the `engine` fixture,
hypothesis profiles, and a results file the gate reads.

Loaded through the `pytest11` entry point. Polite: in a project with no contracts configured (no `--falsify-contracts`,
no `falsify_contracts` ini, no [tool.falsify] at the rootdir) it registers nothing: no fixture, no hypothesis
profile switch, no collection hooks. Only the `falsifies` marker is declared, so a stray marker is not a warning.
"""

from __future__ import annotations

import gc
import json
import os
from collections import Counter
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from falsify.contracts.corpus import Corpus, contract_dirs, project_corpus
from falsify.contracts.packs import PackError, falsifiers_dir
from falsify.engines.env_settings import test_timeout
from falsify.engines.loading import EngineError, check_engine, engine_forms, resolve_engine, with_boundary
from falsify.errors import terminal_safe
from falsify.harness import checks as check_module
from falsify.harness import fixtures, shards, share, wire_engine
from falsify.harness.alarm import Alarm, FalsifierTimeout
from falsify.harness.checks import CannotShowHere, Observation
from falsify.harness.collection import UnmarkedModules, link_out
from falsify.harness.draws import apply_seed, chosen_profile, draws, register_profiles
from falsify.harness.gate import profile_problem
from falsify.harness.markers import marked_ids, marked_requires, marker_problems
from falsify.harness.results import write_results
from falsify.project import Project, ProjectError, find_project_or_none
from falsify.subcommand import seconds

NOT_APPLICABLE = "NOT APPLICABLE: "
_PREVIOUS_DIRS = pytest.StashKey[tuple[Path, ...]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("falsify")
    group.addoption(
        "--falsify-contracts", help="contracts directory (default: ini falsify_contracts / [tool.falsify])"
    )
    group.addoption(
        "--falsify-strict",
        action="store_true",
        help="fail the session unless every prediction is bound to a collected test",
    )
    group.addoption(
        "--falsify-only", action="store_true", help="run only falsifiers (tests marked `falsifies`)"
    )
    group.addoption("--falsify-results", help="write per-test outcomes and observations as JSON to this file")
    group.addoption(
        "--falsify-no-skip",
        action="store_true",
        help="fail the session if any test was skipped (oracle envs: a missing oracle is a failure)",
    )
    group.addoption(
        "--falsify-test-timeout",
        type=seconds(zero_is_none=True),  # nan, inf, -1, 1e308: pytest's usage error naming the option
        default=None,
        help="seconds one falsifier may run before it is stopped and reported TIMEOUT (0: no limit; default "
        "$FALSIFY_TEST_TIMEOUT, else none)",
    )
    group.addoption(
        "--engine",
        default=None,
        help=engine_forms(),
    )
    group.addoption(
        "--falsify-pack",
        action="append",
        default=[],
        metavar="NAME",
        help="also run the built-in contract pack NAME (repeatable; adds to packs in [tool.falsify])",
    )
    share.add_options(group)
    parser.addini("falsify_contracts", "contracts directory, relative to the rootdir", default="")


class FalsifyPlugin:
    def __init__(self, config: pytest.Config, contracts: tuple[Path, ...], project: Project | None):
        self.config = config
        self.contracts = contracts
        self.project = project
        self.where = ", ".join(map(str, contracts))
        self.corpus: Corpus | None = None
        self._engine: Any = None
        self.results: dict[str, dict[str, Any]] = {}
        self._written: dict[str, str] = {}  # node id -> its finished record, encoded (results.write_results)
        # (len(self.collected), its JSON), for _write_results: encoded once when collection has ended
        self._collected_json: tuple[int, str] = (-1, "")
        self.collected: dict[str, list[str]] = {}  # falsifier node id -> the predictions it names
        # falsifier node id -> its file, relative to the rootdir; absolute for a pack's falsifier installed outside
        # it (site-packages), where its node id alone does not find it again (the mutant runner runs it by path)
        self.paths: dict[str, str] = {}
        self.binding_problems: list[str] = []
        # The run's tally as pytest's terminal summary counts it (per report, by pytest_report_teststatus's
        # category; collection errors and skips; deselected items), so the gate and evidence say pytest's numbers.
        self.counts: Counter[str] = Counter()
        self.unmarked = UnmarkedModules(config)
        self.outside: list[str] = []  # collected paths that are links out of the project (refused)
        self.test_timeout = _test_timeout(config)
        self.hypothesis: dict[str, Any] | None = None  # how hypothesis draws this run's examples (draws.py)
        # The gate's --jobs (shards.py): this process's share; only the first share counts what collection did
        # (each share collects the same), the others count only the tests they ran.
        self.shard: tuple[int, int] | str | None = config.getoption("falsify_shard")
        self.counts_collection = self.shard is None or (isinstance(self.shard, tuple) and self.shard[0] == 1)
        self.held_back = 0

    def load(self) -> Corpus:
        if self.corpus is None:
            self.corpus = project_corpus(*map(str, self.contracts))
            if self.corpus.problems:
                listing = "\n".join(f"  {p}" for p in self.corpus.problems)
                raise pytest.UsageError(f"falsify: contracts in {self.where} do not lint:\n{listing}")
        return self.corpus

    def engine_spec(self) -> str:
        configured = self.project.engine if self.project else None
        where = f"[tool.falsify] in {self.project.pyproject}" if self.project else "[tool.falsify]"
        try:
            return resolve_engine(self.config.getoption("engine"), configured, where)
        except EngineError as exc:
            raise pytest.UsageError(f"falsify: {exc}") from None

    def engine(self) -> Any:
        if self._engine is None:
            roots = self.project.import_roots if self.project else (self.config.rootpath,)
            try:
                self._engine = with_boundary(check_engine(self.engine_spec(), roots))
            except EngineError as exc:
                raise pytest.UsageError(f"falsify: {exc}") from None
        return self._engine

    # -- binding ---------------------------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if self.outside:
            raise pytest.UsageError(f"falsify: {terminal_safe(self.outside[0])}")
        corpus = self.load()
        predictions = corpus.predictions
        bound: dict[str, list[str]] = {pid: [] for pid in predictions}
        problems = []
        for item in items:
            problems.extend(marker_problems(item))
            ids = marked_ids(item)
            if not ids:
                continue
            self.collected[item.nodeid] = ids
            self.paths[item.nodeid] = _posix_or_absolute(item.path, config.rootpath)
            for pid in ids:
                if pid in bound:
                    bound[pid].append(item.nodeid)
                else:
                    problems.append(
                        f"{item.nodeid}: marker names {pid!r}, which no contract in {self.where} defines"
                    )
        if config.getoption("falsify_strict") and not _narrowed(config):
            for pid, tests in bound.items():
                if not tests:
                    p = predictions[pid]
                    problems.append(f"{pid} ({p.file}:{p.line}) is bound to no collected test")
        self.binding_problems = problems
        if problems:
            self._write_results()
            listing = "\n".join(f"  {line}" for line in problems)
            raise pytest.UsageError(f"falsify: {len(problems)} binding problem(s):\n{listing}")
        marked = [i for i in items if marked_ids(i)]
        if (
            marked
            and not config.getoption("collectonly")
            and (self._named_engine() or any(self._needs_engine(i, corpus) for i in marked))
        ):
            self.engine()  # an engine that cannot load is one clear usage error, not an ERROR row per test
        if config.getoption("falsify_only"):
            keep = [i for i in items if marked_ids(i)]
            deselected = [i for i in items if not marked_ids(i)]
            if deselected:
                config.hook.pytest_deselected(items=deselected)
            items[:] = keep

    @pytest.hookimpl(tryfirst=True)
    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        # Nothing runs from outside the project: a test file or directory that is a link out of it is refused,
        # naming it (`tests` a link elsewhere ran that tree's falsifiers as this project's).
        # Not collected, and the run refused at the end of collection (raised here it was a collection error
        # that the binding check's words hid).
        problem = link_out(collection_path, self.project.root if self.project else config.rootpath)
        if problem:
            self.outside.append(f"{collection_path}: {problem}")
            return True
        if config.getoption("falsify_only") and self.unmarked.holds_no_falsifier(collection_path):
            return True
        return None

    def _named_engine(self) -> str | None:
        return (
            self.config.getoption("engine")
            or os.environ.get("FALSIFY_ENGINE")
            or (self.project.engine if self.project else None)
        )

    @staticmethod
    def _needs_engine(item: pytest.Item, corpus: Corpus) -> bool:
        ids = marked_ids(item)
        if not ids:
            return False
        uses_fixture = "engine" in getattr(item, "fixturenames", ())
        return uses_fixture or any(
            corpus.contract_of(pid).requires for pid in ids if pid in corpus.predictions
        )

    # -- applicability and recording -------------------------------------------------------------------------
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        ids = marked_ids(item)
        if not ids:
            return
        wire_engine.restart_broken(self._engine)
        reasons = self.reasons(item, ids)
        if reasons:
            # Recorded here, by the plugin, from the engine's own answer: a test that skips itself with a message
            # that looks the same is NOT RUN, never NOT APPLICABLE (issue #19).
            own = {pid: f"{pid} {'; '.join(why)}" for pid, why in reasons.items()}
            first = next(iter(own.values()))
            by_prediction = {
                pid: own.get(pid)
                or f"{pid}'s test also falsifies {', '.join(own)}, which this engine cannot run: {first}"
                for pid in ids
            }
            self._not_applicable(item, ids, first, by_prediction)

    def reasons(self, item: pytest.Item, ids: list[str]) -> dict[str, list[str]]:
        """Why each of the item's predictions is NOT APPLICABLE here (those that are not: absent)."""
        corpus = self.load()
        narrowed = marked_requires(item)
        # Each prediction's own reasons, from its own needs: one test bound to several predictions must not
        # report one prediction's missing capability as another's (issue #24: PREFILL-009 said "PREFILL-008
        # needs 'lanes'").
        reasons: dict[str, list[str]] = {}
        for pid in ids:
            prediction = corpus.predictions[pid]
            needs = [*corpus.contract_of(pid).requires, *prediction.capabilities]
            for capability in needs if narrowed is None else [c for c in needs if c in narrowed]:
                reason = self.engine().supports(capability)
                if reason:
                    reasons.setdefault(pid, []).append(f"needs {capability!r} (engine): {reason}")
            for oracle in prediction.oracles:
                if not _importable(oracle):
                    reasons.setdefault(pid, []).append(
                        f"needs oracle {oracle!r} (machine): not installed here (tox -e oracle runs it)"
                    )
        return reasons

    def _not_applicable(
        self, item: pytest.Item, ids: list[str], message: str, by_prediction: dict[str, str]
    ) -> None:
        record = self.results.setdefault(item.nodeid, _new_record(ids))
        record["not_applicable"] = message
        record["not_applicable_by"] = by_prediction
        pytest.skip(f"{NOT_APPLICABLE}{message}")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        ids = marked_ids(item)
        observations: list[Observation] = []
        record = self.results.setdefault(item.nodeid, _new_record(ids))
        record["predictions"] = ids
        broken_before = wire_engine.failure(self._engine)
        previous = check_module.recorder
        check_module.recorder = observations.append
        limit = self.test_timeout
        alarm = Alarm(limit) if ids and limit > 0 else None
        try:
            if alarm is not None:
                alarm.start()
            yield
        except CannotShowHere as exc:
            # falsify.cannot_show: the falsifier's sensitivity control found this machine unable to show the
            # prediction false. Honoured only for the test's one prediction, before any check of it.
            checked = [ob for ob in observations if ob.prediction_id == exc.prediction_id]
            if ids != [exc.prediction_id] or checked:
                record["exception"], record["assertion"] = "BindingError", False
                why = "the test is bound to " + (", ".join(ids) or "no prediction")
                if checked:
                    why = f"the test already checked it {len(checked)} time(s)"
                raise AssertionError(f"falsify.cannot_show({exc.prediction_id!r}) refused: {why}") from None
            record["not_applicable"] = str(exc)
            record["cannot_show"] = {k: _clip(v) for k, v in exc.control.items()}
            raise pytest.skip.Exception(f"{NOT_APPLICABLE}{exc}") from None
        except BaseException as exc:
            if broke := wire_engine.wire_break(self._engine, broken_before, ids, self.load()):
                record["exception"], record["assertion"] = broke.name, False  # the row names the break
                raise broke from None
            record["exception"] = type(exc).__name__
            record["assertion"] = isinstance(exc, AssertionError | pytest.fail.Exception)
            raise
        finally:
            if alarm is not None:
                alarm.stop()
            check_module.recorder = previous
            record["observations"] = _summarise(observations)
        unchecked = [pid for pid in ids if pid not in record["observations"]]
        if unchecked:
            record["exception"] = "BindingError"
            names = ", ".join(unchecked)
            raise AssertionError(
                f"bound to {names} but never called falsify.check for it: a bound test that "
                "checks nothing is a defect"
            )

    # -- pytest's own tally ----------------------------------------------------------------------------------
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.hypothesis = draws(self.config)  # after every plugin's configure: the profile is the run's

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # A falsifier-only run (the gate, a mutant's) keeps what collection built (modules, the corpus, hypothesis'
        # strategies) out of the cyclic garbage collector's full passes, each of which walked all of it: 0.2 s CPU
        # of this repository's gate (issue #28). Garbage made later is collected as before.
        if self.config.getoption("falsify_only"):
            gc.freeze()

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if not self.counts_collection:
            return
        # "collected N items": every item collected, before any deselection (the terminal reporter's count)
        self.counts["collected"] += sum(1 for node in report.result if isinstance(node, pytest.Item))
        if report.failed:
            self.counts["errors"] += 1
        elif report.skipped:
            self.counts["skipped"] += 1

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        if self.counts_collection:
            self.counts["deselected"] += len(items)

    def _tally(self, report: pytest.TestReport) -> None:
        category = self.config.hook.pytest_report_teststatus(report=report, config=self.config)[0]
        if category:  # "" is a passing setup or teardown, which pytest does not count either
            self.counts["errors" if category == "error" else category] += 1

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._tally(report)
        ids = self.collected.get(report.nodeid, [])
        record = self.results.setdefault(report.nodeid, _new_record(ids))
        record["duration"] += report.duration
        if report.skipped:
            record["outcome"] = "skipped"
            if isinstance(report.longrepr, tuple):
                record["message"] = report.longrepr[2]
        elif report.failed:
            # FAIL is a falsified claim (an assertion); anything else raised is an ERROR of the test itself.
            record["outcome"] = (
                "timeout"
                if record.get("exception") == FalsifierTimeout.__name__
                else "failed"
                if report.when == "call" and record.get("assertion", True)
                else "error"
            )
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash else report.longreprtext.strip().split("\n")[-1]
            record["message"] = wire_engine.row_message(message)[:1000]
            record["where"] = report.when
        elif report.when == "call" and record["outcome"] == "not run":
            record["outcome"] = "passed"
        if report.when == "teardown":
            # After each test, so a run stopped at the gate's timeout (or killed) keeps what it had found.
            self._written[report.nodeid] = json.dumps(record, sort_keys=True, default=repr)
            self._write_results(compact=True)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.config.getoption("falsify_no_skip"):
            skipped = [nid for nid, r in self.results.items() if r["outcome"] == "skipped"]
            if skipped:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
                tr = self.config.pluginmanager.get_plugin("terminalreporter")
                if tr is not None:
                    tr.write_line(
                        f"falsify: --falsify-no-skip: {len(skipped)} test(s) skipped, failing the run",
                        red=True,
                    )
        self._wire_coverage()
        self._write_results()

    def _wire_coverage(self) -> None:
        self.wire_coverage = wire_engine.coverage(self._engine)
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if self.wire_coverage is not None and tr is not None and self.shard is None:  # a share's: the gate's
            tr.write_line(f"falsify: {wire_engine.coverage_line(self.wire_coverage)}")

    def pytest_report_header(self, config: pytest.Config) -> str:
        corpus = self.load()
        engine = (
            config.getoption("engine")
            or os.environ.get("FALSIFY_ENGINE")
            or (self.project.engine if self.project else None)
        )
        return (
            f"falsify: {len(corpus.contracts)} contracts, {len(corpus.predictions)} predictions in "
            f"{self.where}; engine {engine or '(none configured)'}"
        )

    def _write_results(self, *, compact: bool = False) -> None:
        path = self.config.getoption("falsify_results")
        if not path:
            return
        payload = {
            "engine": self._named_engine(),
            "contracts": self.where,
            "collected": [
                {"nodeid": nid, "predictions": ids, "path": self.paths.get(nid)}
                for nid, ids in self.collected.items()
            ],
            "binding_problems": self.binding_problems,
            "tests": self.results,
            "counts": dict(self.counts),
            **({"wire_coverage": self.wire_coverage} if getattr(self, "wire_coverage", None) else {}),
            **({"hypothesis": self.hypothesis} if self.hypothesis else {}),
            **({"held_back": self.held_back} if self.held_back else {}),
        }
        if compact and self._collected_json[0] != len(self.collected):  # collection ended: encoded once
            self._collected_json = (len(self.collected), json.dumps(payload["collected"], sort_keys=True))
        encoded = {"collected": self._collected_json[1]} if compact else None
        write_results(Path(path), payload, self._written if compact else None, encoded)


def _test_timeout(config: pytest.Config) -> float:
    """--falsify-test-timeout, else $FALSIFY_TEST_TIMEOUT (read here, not as the option's default: a bad value
    there broke every pytest run with a ValueError as the plugin loaded), else 0, no limit."""
    option = config.getoption("falsify_test_timeout")
    if option is not None:
        return float(option)
    return test_timeout(pytest.UsageError)


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _posix_or_absolute(path: Path, root: Path) -> str:
    """A falsifier's file relative to the rootdir (posix), or absolute when it lives elsewhere (an installed pack)."""
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def _narrowed(config: pytest.Config) -> bool:
    """The run names files or node ids (`pytest tests/test_x.py`), so it cannot bind every prediction: strict
    binding is for whole-suite runs (directories), which is how tox and the gate run."""
    return any("::" in arg or Path(arg).is_file() for arg in config.args)


def _new_record(ids: list[str]) -> dict[str, Any]:
    return {"predictions": ids, "outcome": "not run", "duration": 0.0, "message": "", "observations": {}}


def _clip(value: Any, limit: int = 16) -> Any:
    if isinstance(value, list) and len(value) > limit:
        return [*value[:limit], f"... {len(value) - limit} more"]
    return value


def _summarise(observations: list[Observation]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for ob in observations:
        entry = out.setdefault(
            ob.prediction_id,
            {
                "checks": 0,
                "held": 0,
                "vacuous": 0,
                "corners": [],
                "failed_values": None,
                "failed_message": None,
                "last_values": None,
            },
        )
        entry["corners"] = sorted(set(entry["corners"]) | set(ob.corners))
        entry["checks"] += 1
        entry["held"] += int(ob.held)
        entry["vacuous"] += int(ob.held and ob.vacuous)
        values = {k: _clip(v) for k, v in ob.values.items()}
        entry["last_values"] = values
        if not ob.held:
            # The prediction's own failed check: its message is this row's DETAIL, whichever prediction's
            # violation the test raised (a test bound to several checks them all before it fails). The last one:
            # hypothesis replays its shrunk example last, so these are the values the test's failure shows.
            entry["failed_values"] = values
            entry["failed_message"] = ob.message[:1000]
    return out


@pytest.hookimpl(tryfirst=True)  # before hypothesis' configure reads --hypothesis-seed (apply_seed)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "falsifies(*ids): this test falsifies the named contract predictions")
    config.addinivalue_line("markers", "oracle: needs an external oracle package (tox -e oracle)")
    config.addinivalue_line(
        "markers", "llamacpp: needs llama-cpp-python built from its sdist (tox -e llamacpp)"
    )
    config.addinivalue_line(
        "markers",
        f"{shards.SERIAL_MARK}: its verdict depends on time; `falsify gate --jobs N` runs it alone, after the rest",
    )
    try:
        found = _contracts(config)
    except (ProjectError, PackError) as exc:
        raise pytest.UsageError(f"falsify: {exc}") from None
    if found is None:
        return  # not a falsify project: change nothing
    contracts, project, packs = found
    register_profiles()
    apply_seed(config)
    profile = chosen_profile()
    if profile:
        try:
            from hypothesis import settings
        except ImportError:
            pass
        else:
            if not config.getoption("hypothesis_profile", None):
                problem = profile_problem()
                if problem:  # hypothesis' InvalidArgument here was an INTERNALERROR
                    raise pytest.UsageError(f"falsify: {problem}")
                settings.load_profile(profile)
    # Restored at unconfigure: pytester runs nested sessions in one process.
    config.stash[_PREVIOUS_DIRS] = check_module.contracts_dirs
    check_module.contracts_dirs = contracts
    plugin = FalsifyPlugin(config, contracts, project)
    config.pluginmanager.register(plugin, "falsify-core")
    if plugin.shard is not None:
        config.pluginmanager.register(share.Share(plugin), "falsify-share")
    config.pluginmanager.register(fixtures, "falsify-fixtures")
    _collect_packs(config, packs)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _PREVIOUS_DIRS in config.stash:
        check_module.contracts_dirs = config.stash[_PREVIOUS_DIRS]


def _contracts(config: pytest.Config) -> tuple[tuple[Path, ...], Project | None, list[str]] | None:
    """The contract directories of this run, the project, and the packs; None when this is no falsify project."""
    option = config.getoption("falsify_contracts")
    ini = config.getini("falsify_contracts")
    explicit = Path(option).resolve() if option else (Path(config.rootpath, ini) if ini else None)
    project = find_project_or_none(config.rootpath)
    if project is not None and project.root != config.rootpath and explicit is None:
        project = None  # a parent directory's project: this rootdir is not it
    packs = list(dict.fromkeys([*(project.packs if project else ()), *config.getoption("falsify_pack")]))
    if explicit is not None:
        own = [explicit] if explicit.is_dir() or option else []
        from falsify.contracts.packs import contracts_dir

        dirs = own + [contracts_dir(name) for name in packs]
        return (tuple(dirs), project, packs) if dirs else None
    if project is None:
        if packs:
            raise pytest.UsageError("falsify: --falsify-pack needs a [tool.falsify] project at the rootdir")
        return None
    dirs = contract_dirs(project, packs)
    if not any(d.is_dir() for d in dirs):
        return None
    return tuple(dirs), project, packs


def _collect_packs(config: pytest.Config, packs: list[str]) -> None:
    """A whole-suite run also collects the packs' falsifiers (naming files or node ids runs just those)."""
    if not packs or _narrowed(config):
        return
    for name in packs:
        path = str(falsifiers_dir(name))
        if path not in config.args:
            config.args.append(path)
