"""Contracts and mutants as validated data: load every file, collect every problem, then report.

Data flows one way: YAML file -> located document -> schema check -> typed records -> cross-file checks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from falsify.contracts.corners import Budget
from falsify.contracts.formula import Formula
from falsify.contracts.formula_checks import Corner, checked_corners, checked_formula, empty_range
from falsify.contracts.packs import contracts_dir, help_for, is_pack_file
from falsify.contracts.yamlfile import Located, format_path, load_yaml
from falsify.errors import ContractError, Problem
from falsify.project import Project, find_project, find_project_or_none, schema_path, source_problem
from falsify.untrusted.safefile import link_out_of

YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True, slots=True)
class Prediction:
    id: str
    contract: str
    claim: str
    formula: Formula
    domain: dict[str, Any]
    if_fails: str
    mutants: tuple[str, ...]
    file: str
    line: int
    requires: tuple[str, ...] = ()  # beyond the contract's: capabilities, or `oracle:MODULE`
    min_checks: int = 1  # non-vacuous checks needed before it can PASS
    unproven_because: str | None = None  # reviewed reason no mutant turns it red
    corners: tuple[Corner, ...] = ()  # corners of the domain its checks must reach
    catches: tuple[str, ...] = ()  # the bug classes it exists to catch (mutants name them: `class`, else id)

    @property
    def parameters(self) -> tuple[str, ...]:
        return tuple(self.domain)

    @property
    def oracles(self) -> tuple[str, ...]:
        """Python packages this prediction's falsifiers need (`requires: [oracle:MODULE]`)."""
        return tuple(r.partition(":")[2] for r in self.requires if r.startswith("oracle:"))

    @property
    def capabilities(self) -> tuple[str, ...]:
        return tuple(r for r in self.requires if not r.startswith("oracle:"))


@dataclass(frozen=True, slots=True)
class Cost:
    name: str
    formula: Formula
    per: str
    unit: str
    checked_by: str


@dataclass(frozen=True, slots=True)
class Contract:
    id: str
    version: str
    title: str
    file: str
    sha256: str
    requires: tuple[str, ...]
    observables: dict[str, dict[str, Any]]
    predictions: tuple[Prediction, ...]
    costs: tuple[Cost, ...]


@dataclass(frozen=True, slots=True)
class Mutant:
    id: str
    description: str
    file: str
    function: str  # "" for op text
    op: str
    statement: str  # "" for op text
    anchor: str | None
    where: str | None
    replacement: str | None
    kills: tuple[str, ...]
    path: str
    line: int
    snippet: str | None = None  # op text: the exact text replaced (must occur once)
    regex: str | None = None  # op text: or a regex that must match once
    build: str | None = None  # op text: command run in the mutated copy before the falsifiers
    engine: str | None = None  # op text: the --engine the falsifiers run against in the copy
    bug_class: str = ""  # the class it plants, as `catches` names it (`class`, default: the id)

    @property
    def plants(self) -> str:
        return self.bug_class or self.id


@dataclass(slots=True)
class Corpus:
    contracts: list[Contract] = field(default_factory=list)
    mutants: list[Mutant] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    files: int = 0
    # find()'s index: the contract count it was built at, and each prediction id's (prediction, its contract)
    _index: tuple[int, dict[str, tuple[Prediction, Contract]]] = field(
        default_factory=lambda: (-1, {}), init=False, repr=False, compare=False
    )

    @property
    def predictions(self) -> dict[str, Prediction]:
        return {p.id: p for c in self.contracts for p in c.predictions}

    def find(self, prediction_id: str) -> tuple[Prediction, Contract] | None:
        """The prediction and the (first) contract that defines it, or None; indexed once per contract count
        (falsify.check looks one up for every check, ~6,000 a gate run)."""
        if self._index[0] != len(self.contracts):
            self._index = (
                len(self.contracts),
                {p.id: (p, c) for c in reversed(self.contracts) for p in c.predictions},
            )
        return self._index[1].get(prediction_id)

    def contract_of(self, prediction_id: str) -> Contract:
        for contract in self.contracts:
            if any(p.id == prediction_id for p in contract.predictions):
                return contract
        raise KeyError(prediction_id)


@cache
def _validator(name: str) -> jsonschema.protocols.Validator:
    path = schema_path(name)
    schema = json.loads(path.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


MAX_WALK = 100_000  # files and directories below one path: `falsify lint /` walked the whole file system
MAX_WALK_DEPTH = 16  # directory levels below one path; a contracts tree needs two or three


def discover(paths: Iterable[Path], root: Path | None = None) -> tuple[list[Path], list[Problem]]:
    """YAML files named by `paths`: files as given, directories searched recursively (skipping `schema/`).

    Nothing is skipped in silence: an unreadable directory, a directory named like a contract file, a symlinked
    directory (never followed: a link loop or a link out of the tree), a file whose link resolves outside `root`
    (default: the project each path lies in, an installed pack's directory for a pack's files) and a file named
    `.YAML` or `.Yml` (falsify reads `.yaml` and `.yml`) are each a problem. A path with more than MAX_WALK
    entries or MAX_WALK_DEPTH levels below it is a ContractError: name the contracts directory. Whether a found
    name is a regular, readable file is for the loader to say (yamlfile.read_regular)."""
    found: list[Path] = []
    problems: list[Problem] = []
    for path in paths:
        base = root or _root_of(path)
        if path.is_symlink() and path.is_dir():
            # The top too (`contracts` a link out of the project), as every directory below it in _walk.
            problems.append(Problem(_display(path), 0, "", "symlinked directory: not followed", "io"))
        elif path.is_dir():
            found.extend(f for f in _walk(path, problems) if _inside(base, f, problems))
        elif os.path.lexists(path):
            if _inside(base, path, problems):
                found.append(path)
        else:
            raise ContractError(Problem(str(path), 0, "", "no such file or directory", "io"))
    return found, problems


def _root_of(path: Path) -> Path:
    """What a file found under `path` must resolve inside: an installed pack's directory, else the project `path`
    lies in, else `path` itself (or its directory)."""
    from falsify.contracts.packs import root as packs_root

    absolute = Path(os.path.abspath(path))
    packs = Path(os.path.abspath(packs_root()))
    if absolute.is_relative_to(packs):
        return packs
    start = absolute if absolute.is_dir() and not absolute.is_symlink() else absolute.parent
    project = find_project_or_none(start)
    return project.root if project is not None else start


def _inside(root: Path, path: Path, problems: list[Problem]) -> bool:
    problem = link_out_of(root, path)
    if problem:
        problems.append(Problem(_display(path), 0, "", problem, "io"))
    return problem is None


def _walk(top: Path, problems: list[Problem]) -> list[Path]:
    found: list[Path] = []
    seen = 0

    def unreadable(exc: OSError) -> None:
        where = exc.filename or str(top)
        problems.append(Problem(_display(Path(where)), 0, "", f"cannot read directory: {exc.strerror}", "io"))

    for directory, dirnames, filenames in os.walk(top, onerror=unreadable, followlinks=False):
        here = Path(directory)
        seen += len(dirnames) + len(filenames)
        depth = len(here.relative_to(top).parts)
        if seen > MAX_WALK or (dirnames and depth >= MAX_WALK_DEPTH):
            too = (
                f"over {MAX_WALK:,} entries" if seen > MAX_WALK else f"over {MAX_WALK_DEPTH} directory levels"
            )
            raise ContractError(
                Problem(
                    _display(top),
                    0,
                    "",
                    f"{too} below it; falsify searches a contracts or mutants directory, not a whole tree: name one",
                    "io",
                )
            )
        dirnames.sort()
        if here == top and "schema" in dirnames:
            dirnames.remove("schema")
        for d in list(dirnames):
            sub = here / d
            if sub.is_symlink():
                dirnames.remove(d)
                problems.append(Problem(_display(sub), 0, "", "symlinked directory: not followed", "io"))
            elif sub.suffix.lower() in YAML_SUFFIXES:
                problems.append(Problem(_display(sub), 0, "", "a directory, not a contract file", "io"))
        for f in sorted(filenames):
            suffix = Path(f).suffix
            if suffix in YAML_SUFFIXES:
                found.append(here / f)
            elif suffix.lower() in YAML_SUFFIXES:
                problems.append(
                    Problem(
                        _display(here / f),
                        0,
                        "",
                        f"not read: name it {suffix.lower()} ({suffix} is not)",
                        "io",
                    )
                )
    return found


PARALLEL_FROM = 256  # files; below this, worker start-up costs more than it saves


def load_corpus(paths: Iterable[Path], mutant_universe: Path | None = None) -> Corpus:
    """Load and lint every contract and mutant under `paths`; never raises for bad content, collects problems.

    `mutant_universe`: where referenced mutant ids are looked up when no mutant file was given.
    Files are checked one by one (in parallel on every core for a large corpus), then across files.
    """
    corpus = Corpus()
    files, corpus.problems = discover(paths)
    corpus.files = len(files) + len(corpus.problems)
    workers = min(os.cpu_count() or 1, 8)
    if len(files) >= PARALLEL_FROM and workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            loaded = list(pool.map(_load_one, files, chunksize=max(1, len(files) // (workers * 4))))
    else:
        loaded = [_load_one(path) for path in files]
    for record, problems in loaded:
        corpus.problems.extend(problems)
        if isinstance(record, Contract):
            corpus.contracts.append(record)
        elif isinstance(record, Mutant):
            corpus.mutants.append(record)
    _cross_check(corpus, mutant_universe)
    corpus.problems.sort(key=lambda p: (p.file, p.line))
    return corpus


def _load_one(path: Path) -> tuple[Contract | Mutant | None, list[Problem]]:
    try:
        return _load_checked(path)
    except (RecursionError, MemoryError, ValueError, TypeError, KeyError, OSError) as exc:
        # A backstop, not a path: every known bad input has its own named problem above. The fuzzer
        # (tests/fuzz/) fails on any `internal` problem, so one found here is a bug to fix, reported without
        # a traceback in the meantime.
        what = f"{type(exc).__name__}: {str(exc)[:200]}"
        return None, [Problem(_display(path), 0, "", f"internal error while checking: {what}", "internal")]


def _load_checked(path: Path) -> tuple[Contract | Mutant | None, list[Problem]]:
    problems: list[Problem] = []
    try:
        doc = load_yaml(path, display=_display(path))
    except ContractError as exc:
        return None, list(exc.problems)
    if (
        isinstance(doc.data, dict)
        and "contract" not in doc.data
        and ("kills" in doc.data or "op" in doc.data)
    ):
        return _mutant(doc, problems), problems
    return _contract(doc, problems), problems


def _display(path: Path) -> str:
    # abspath, not resolve(): the name as found, without following a symlink (which may loop).
    try:
        return str(Path(os.path.abspath(path)).relative_to(Path.cwd()))
    except (ValueError, OSError):
        return str(path)


def _schema_valid(doc: Located, schema: str, problems: list[Problem]) -> bool:
    """Whether the document is valid against `schema`; every violation is added to `problems`."""
    found = _schema_problems(doc, schema)
    problems.extend(found)
    return not found


def _schema_problems(doc: Located, schema: str) -> list[Problem]:
    # jsonschema alone decides validity (draft 2020-12). A fast path (fastjsonschema) was removed: it ignores
    # 2020-12 keywords such as dependentRequired and so accepted documents this check rejects.
    problems = []
    for error in sorted(
        _validator(schema).iter_errors(doc.data), key=lambda e: list(map(str, e.absolute_path))
    ):
        path = tuple(error.absolute_path)
        if (
            error.validator == "additionalProperties"
            and isinstance(error.instance, dict)
            and isinstance(error.schema, dict)
        ):
            allowed = error.schema.get("properties", {})
            extras = [k for k in error.instance if k not in allowed]
            for key in extras:
                problems.append(
                    Problem(
                        doc.file,
                        doc.line((*path, key)),
                        format_path((*path, key)),
                        f"unknown key {key!r}" + (f" (allowed: {', '.join(allowed)})" if allowed else ""),
                        "additionalProperties",
                    )
                )
            if extras:
                continue
        schema_where = "".join(f"[{p!r}]" for p in error.relative_schema_path)
        problems.append(
            Problem(
                doc.file,
                doc.line(path),
                format_path(path),
                f"{error.message} (schema{schema_where})",
                str(error.validator),
            )
        )
    return problems


def _stem_problems(doc: Located, field: str, kind: str) -> list[Problem]:
    """The file's id field must equal its file stem (`kind`-id); the one problem if it does not."""
    stem = Path(doc.file).stem
    if doc.data[field] == stem:
        return []
    message = f"{kind} id {doc.data[field]!r} must equal the file stem {stem!r}"
    return [Problem(doc.file, doc.line((field,)), field, message, f"{kind}-id")]


def _contract(doc: Located, problems: list[Problem]) -> Contract | None:
    if not _schema_valid(doc, "contract-v1", problems):
        return None
    data = doc.data
    stem_problems = _stem_problems(doc, "contract", "contract")
    problems.extend(stem_problems)
    # A mismatched id is still checked through (every problem at once) but the contract is not accepted.
    ok = not stem_problems
    observables: dict[str, dict[str, Any]] = data["observables"]
    predictions = []
    budget = Budget()  # one per file: the cannot-fail rule's work is bounded per file, not per formula
    for i, p in enumerate(data["predictions"]):
        domain = p.get("domain") or {}
        for name in domain:
            if name in observables:
                problems.append(
                    Problem(
                        doc.file,
                        doc.line(("predictions", i, "domain", name)),
                        format_path(("predictions", i, "domain", name)),
                        f"parameter {name!r} shadows an observable of the same name",
                        "domain-shadow",
                    )
                )
                ok = False
            empty = empty_range(domain[name])
            if empty:
                where = ("predictions", i, "domain", name)
                problems.append(Problem(doc.file, doc.line(where), format_path(where), empty, "domain-range"))
                ok = False
        formula = checked_formula(
            doc,
            ("predictions", i, "formula"),
            p["formula"],
            {**observables, **domain},
            "declared observables and parameters",
            problems,
            budget,
        )
        corners = checked_corners(doc, i, p, observables, domain, problems)
        if formula is None or corners is None:
            ok = False
            continue
        predictions.append(
            Prediction(
                p["id"],
                data["contract"],
                p["claim"],
                formula,
                domain,
                p["if_fails"],
                tuple(p.get("mutants", ())),
                doc.file,
                doc.line(("predictions", i)),
                tuple(p.get("requires", ())),
                int(p.get("min_checks", 1)),
                " ".join(p["unproven_because"].split()) if "unproven_because" in p else None,
                corners,
                tuple(p.get("catches", ())),
            )
        )
    ids = {p["id"] for p in data["predictions"]}
    costs = []
    for i, c in enumerate(data.get("costs", [])):
        formula = checked_formula(
            doc, ("costs", i, "formula"), c["formula"], dict(observables), "declared observables", problems
        )
        if c["checked_by"] not in ids:
            problems.append(
                Problem(
                    doc.file,
                    doc.line(("costs", i, "checked_by")),
                    format_path(("costs", i, "checked_by")),
                    f"{c['checked_by']} is not a prediction of this contract",
                    "cost-ref",
                )
            )
            ok = False
        if formula is None:
            ok = False
            continue
        costs.append(Cost(c["name"], formula, c["per"], c.get("unit", ""), c["checked_by"]))
    if not ok:
        return None
    return Contract(
        data["contract"],
        data["version"],
        data["title"],
        doc.file,
        doc.sha256,
        tuple(data.get("requires", ())),
        observables,
        tuple(predictions),
        tuple(costs),
    )


def _mutant(doc: Located, problems: list[Problem]) -> Mutant | None:
    if not _schema_valid(doc, "mutant-v1", problems):
        return None
    d = doc.data
    bad_id = _stem_problems(doc, "id", "mutant")
    if bad_id:
        problems.extend(bad_id)
        return None
    project = find_project_or_none(Path(doc.file).parent)
    root = project.root if project else Path.cwd()
    bad = source_problem(root, d["file"])
    if bad:
        problems.append(Problem(doc.file, doc.line(("file",)), "file", bad, "mutant-file"))
        return None
    return Mutant(
        d["id"],
        d["description"],
        d["file"],
        d.get("function", ""),
        d["op"],
        d.get("statement", ""),
        d.get("anchor"),
        d.get("where"),
        d.get("replacement"),
        tuple(d["kills"]),
        doc.file,
        1,
        d.get("snippet"),
        d.get("regex"),
        d.get("build"),
        d.get("engine"),
        d.get("class", ""),
    )


def _cross_check(corpus: Corpus, mutant_universe: Path | None) -> None:
    problems = corpus.problems
    seen: dict[str, Prediction] = {}
    contracts_seen: dict[str, Contract] = {}
    for contract in corpus.contracts:
        if contract.id in contracts_seen:
            problems.append(
                Problem(
                    contract.file,
                    1,
                    "contract",
                    f"contract id {contract.id} also defined in {contracts_seen[contract.id].file}",
                    "duplicate-id",
                )
            )
        contracts_seen[contract.id] = contract
        for p in contract.predictions:
            if p.id in seen:
                problems.append(
                    Problem(
                        p.file,
                        p.line,
                        "",
                        f"prediction id {p.id} also defined in {seen[p.id].file}:{seen[p.id].line}",
                        "duplicate-id",
                    )
                )
            else:
                seen[p.id] = p
    mutants = {m.id: m for m in corpus.mutants}
    if mutants:
        known = set(mutants)
    else:
        project = find_project_or_none()
        universe = mutant_universe or (project.mutants if project else None)
        known = {p.stem for p in universe.glob("*.y*ml")} if universe and universe.is_dir() else set()
    # A pack's `mutants:` name bugs planted in this repo's reference engine: never required of another project.
    in_pack = {pid for pid, p in seen.items() if is_pack_file(p.file)}
    for p in seen.values():
        for m in p.mutants:
            if m not in known and p.id in in_pack:
                continue
            if m not in known:
                problems.append(
                    Problem(p.file, p.line, p.id, f"mutant {m!r} has no file mutants/{m}.yaml", "mutant-ref")
                )
            elif m in mutants and p.id not in mutants[m].kills:
                problems.append(
                    Problem(
                        p.file,
                        p.line,
                        p.id,
                        f"lists mutant {m!r}, whose `kills` does not name {p.id}",
                        "mutant-kills",
                    )
                )
    if corpus.contracts:
        for mutant in corpus.mutants:
            for pid in mutant.kills:
                if pid not in seen:
                    problems.append(
                        Problem(
                            mutant.path,
                            mutant.line,
                            "kills",
                            f"{pid} is not a prediction of any contract{help_for([pid])}",
                            "mutant-kills",
                        )
                    )
                elif mutant.id not in seen[pid].mutants and pid not in in_pack:
                    problems.append(
                        Problem(
                            mutant.path,
                            mutant.line,
                            "kills",
                            f"{pid} does not list this mutant in its `mutants`",
                            "mutant-kills",
                        )
                    )


@cache
def project_corpus(*contracts_dirs: str) -> Corpus:
    """The contracts of these directories (the project's own and its packs'), cached: what falsify.check and the
    pytest plugin read. With none given: the project's configured contracts and packs."""
    if contracts_dirs:
        return load_corpus([Path(d) for d in contracts_dirs])
    return load_corpus(contract_dirs(find_project()))


def contract_dirs(project: Project, packs: Iterable[str] = ()) -> list[Path]:
    """The project's contracts directory (when it exists or no pack is used) and each pack's contracts."""
    names = list(dict.fromkeys([*project.packs, *packs]))
    own = [project.contracts] if project.contracts.is_dir() or not names else []
    return own + [contracts_dir(name) for name in names]
