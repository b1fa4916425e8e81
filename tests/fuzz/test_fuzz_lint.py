"""A hypothesis-driven corpus fuzzer for `falsify lint` (issue #19).

Each example is a directory of 1-4 hostile entries: contracts and mutants with fields replaced by random YAML
values, generated formulas (attack atoms included), byte-level damage, YAML oddities (tags, anchors, dates, huge
numbers, deep nesting) and special files (FIFOs, device links, link loops, directories named like contracts).
Properties, for every corpus:
- lint returns, within a wall-clock limit (no hang), with no exception and no `internal` problem;
- every problem names a file and a rule;
- nothing invalid is accepted: every accepted contract is a regular file whose YAML re-validates against the
  schema with jsonschema directly, and every accepted formula evaluates to a bool or a FormulaError (never
  another exception) within the time limit at its corner points; every accepted mutant names a regular file
  inside the project, reached without a symlink.

CI runs FUZZ_EXAMPLES corpora (derandomized: the same ones each run); `HYPOTHESIS_PROFILE=thorough` (or
FALSIFY_FUZZ=thorough) runs 20x more with fresh randomness. docs/hardening.md has the measured figure.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from falsify.contracts.corners import corners_of
from falsify.contracts.corpus import load_corpus
from falsify.errors import FormulaError
from falsify.project import find_project, schema_path

THOROUGH = "thorough" in (os.environ.get("HYPOTHESIS_PROFILE", ""), os.environ.get("FALSIFY_FUZZ", ""))
FUZZ_EXAMPLES = 20_000 if THOROUGH else 1_000
SECONDS = 20  # per corpus; the slowest measured is well under 2 s
ROOT = Path(__file__).resolve().parent.parent.parent
SCHEMA = json.loads(schema_path("contract-v1").read_text(encoding="utf-8"))
NAMES = ["emitted", "decode_forwards", "tokens", "wasted_forwards", "n", "reference_tokens", "zz"]

# ---- formulas -------------------------------------------------------------------------------------------------

ATOMS = st.sampled_from(
    [
        *NAMES,
        *["0", "1", "-1", "2", "64", "65", "1e300", "1e-300", "0.0", "9" * 40, "2**31", "9**64"],
        *["True", "False", "None", "'cancelled'", "'%999999999d'", "'10'", "''", "[]", "[0]", "[[0]]"],
        *["range(1000000)", "[0] * 1000000", "range(n)", "range(emitted)", "tokens[::0]", "tokens[-1]"],
    ]
)
BINOPS = st.sampled_from(["+", "-", "*", "/", "//", "%", "**"])
COMPARES = st.sampled_from(["==", "!=", "<", "<=", ">", ">=", " in ", " not in "])
CALLS = st.sampled_from(["abs", "min", "max", "len", "all", "any", "sum", "range", "is_prefix"])
FORBIDDEN = st.sampled_from(
    [
        "({}).real",
        "[t for t in {}]",
        "{} << 4000",
        "{} is None",
        "open({})",
        "__import__({})",
        "{} @ 1",
        "~{}",
    ]
)


def _compose(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(children, BINOPS, children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(children, COMPARES, children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(children, st.sampled_from([" and ", " or "]), children).map(lambda t: f"({''.join(t)})"),
        children.map(lambda c: f"(not {c})"),
        children.map(lambda c: f"-({c})"),
        st.tuples(CALLS, st.lists(children, max_size=3)).map(lambda t: f"{t[0]}({', '.join(t[1])})"),
        st.tuples(children, children).map(lambda t: f"({t[0]})[{t[1]}]"),
        st.tuples(children, children, children).map(lambda t: f"({t[0]})[{t[1]}:{t[2]}]"),
        st.lists(children, max_size=3).map(lambda xs: f"[{', '.join(xs)}]"),
        st.tuples(children, children, children).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
    )


VALID_SHAPES = st.recursive(ATOMS, _compose, max_leaves=12)
LONG_FORMULAS = ("+".join(["n"] * 700), "(" * 120 + "n" + ")" * 120, "not " * 400 + "n", "x" * 3000)
FORMULAS = st.one_of(
    *[VALID_SHAPES] * 6,
    st.tuples(FORBIDDEN, VALID_SHAPES).map(lambda t: t[0].format(t[1])),
    st.integers(0, 3).map(lambda i: LONG_FORMULAS[i]),
    st.text(max_size=60),
)

# ---- YAML values ------------------------------------------------------------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["int", "float", "bool", "str", "list", "generate", "FALSIFY-DEMO-001", "poll-deleted"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
RAW = (
    "version: 2020-13-45\n",
    "max: " + "9" * 5000 + "\n",
    "a: " + "[" * 990 + "]" * 990 + "\n",
    "[" * 5000,
    "a: &x [1]\nb: *x\n",
    "a: !!binary aGVsbG8=\n",
    "a: !!python/object/apply:os.system [true]\n",
    "a: !!timestamp 2001-12-14\n",
    "? [1, 2]\n: x\n",
    "on: 1\nyes: 2\n",
    "a: 1\n---\nb: 2\n",
    "a: 1\na: 2\n",
    "<<: {a: 1}\n",
    "\ufeffa: 1\n",
    "a:\t1\n",
    "",
    "~\n",
    "- 1\n- 2\n",
    "a: .nan\n",
    "a: 0x" + "f" * 200 + "\n",
    "a: 1:2:3:4:5:6:7:8:9:10:11:12:13:14:15:16:17:18:19:20:21:22:23:24:25\n",
)
RAW_YAML = st.integers(0, len(RAW) - 1).map(lambda i: RAW[i])  # by index: no 5 kB strings in reprs
SPECIALS = st.sampled_from(
    ["fifo", "dev-zero", "dev-urandom", "dev-null", "self-loop", "dangling", "dir-yaml", "dir-link"]
)


def _good_contract(stem: str) -> dict[str, Any]:
    return {
        "contract": stem,
        "version": "1.0.0",
        "title": "t",
        "description": "d",
        "references": ["r"],
        "requires": ["generate"],
        "observables": {
            "emitted": {"meaning": "m", "type": "int"},
            "decode_forwards": {"meaning": "m", "type": "int"},
            "tokens": {"meaning": "m", "type": "list"},
            "wasted_forwards": {"meaning": "m", "type": "int"},
        },
        "predictions": [
            {
                "id": "FALSIFY-FUZZ-001",
                "claim": "c",
                "formula": "decode_forwards == emitted - 1",
                "domain": {"n": {"type": "int", "min": 1, "max": 16}},
                "if_fails": "f",
            },
            {
                "id": "FALSIFY-FUZZ-002",
                "claim": "c",
                "formula": "is_prefix(tokens, reference_tokens) and len(tokens) <= n",
                "domain": {"n": {"type": "int", "min": 0, "max": 16}, "reference_tokens": {"type": "list"}},
                "if_fails": "f",
            },
        ],
        "costs": [
            {"name": "w", "formula": "wasted_forwards <= 0", "per": "p", "checked_by": "FALSIFY-FUZZ-001"}
        ],
    }


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    doc[path[0]] = _set(doc[path[0]], path[1:], value)
    return doc


@st.composite
def contract_text(draw: st.DrawFn, stem: str) -> bytes:
    doc = _good_contract(stem)
    # Formulas and domains first (the structure is still whole), then random values and deletions anywhere.
    for _ in range(draw(st.integers(1, 2))):
        doc["predictions"][draw(st.integers(0, 1))]["formula"] = draw(FORMULAS)
    if draw(st.booleans()):
        decl = draw(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["int", "float", "list", "bool", "str"])},
                optional={"min": SCALARS, "max": SCALARS, "values": st.lists(SCALARS, max_size=4)},
            )
        )
        doc["predictions"][draw(st.integers(0, 1))]["domain"][draw(st.sampled_from(NAMES))] = decl
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):
        path = draw(st.sampled_from(_paths(doc)))
        if draw(st.booleans()) and path:
            parent = doc
            for part in path[:-1]:
                parent = parent[part]
            del parent[path[-1]]
        else:
            doc = _set(doc, path, draw(VALUES))
    try:
        body = yaml.safe_dump(doc, allow_unicode=True, sort_keys=False, width=10_000).encode("utf-8")
    except (yaml.YAMLError, ValueError, UnicodeEncodeError):
        body = b"contract: broken\n"
    if draw(st.integers(0, 14)) == 0:  # byte-level damage
        data = bytearray(body)
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, max(0, len(data) - 1)))
            data[at : at + 1] = draw(st.binary(max_size=3))
        body = bytes(data)
    return body


@st.composite
def mutant_text(draw: st.DrawFn, stem: str) -> bytes:
    file = draw(
        st.sampled_from(
            ["reference/session.py", "/etc/hostname", "../outside.py", "reference/../reference/session.py",
             "linked.py", "reference", "nope.py", "", "reference/./session.py", "~/x.py"]
        )
    )  # fmt: skip
    doc = {
        "id": stem,
        "description": "d",
        "file": file,
        "function": "generate",
        "op": draw(st.sampled_from(["delete", "replace", "move_after"])),
        "statement": "x",
        "kills": ["FALSIFY-FUZZ-001"],
    }
    return yaml.safe_dump(doc).encode("utf-8")


ENTRY = st.one_of(
    st.tuples(st.just("contract"), st.just(b"")),
    st.tuples(st.just("contract"), st.just(b"")),
    st.tuples(st.just("contract"), st.just(b"")),
    st.tuples(st.just("mutant"), st.just(b"")),
    st.tuples(st.just("raw"), RAW_YAML.map(lambda s: s.encode("utf-8"))),
    st.tuples(st.just("bytes"), st.binary(max_size=200)),
    st.tuples(st.just("special"), SPECIALS.map(lambda s: s.encode("ascii"))),
)


@st.composite
def corpora(draw: st.DrawFn) -> list[tuple[str, str, bytes]]:
    entries = []
    for i in range(draw(st.integers(1, 4))):
        kind, payload = draw(ENTRY)
        stem = f"fuzz{i}-v1" if draw(st.integers(0, 4)) else f"Bad_{i}"
        if kind == "contract":
            payload = draw(contract_text(stem))
        elif kind == "mutant":
            stem = f"mutant-{i}"
            payload = draw(mutant_text(stem))
        entries.append((kind, stem + draw(st.sampled_from([".yaml", ".yml"])), payload))
    return entries


def _materialize(root: Path, entries: list[tuple[str, str, bytes]]) -> None:
    for kind, name, payload in entries:
        path = root / name
        if kind != "special":
            path.write_bytes(payload)
            continue
        special = payload.decode("ascii")
        if special == "fifo":
            os.mkfifo(path)
        elif special.startswith("dev-"):
            path.symlink_to("/dev/" + special[4:])
        elif special == "self-loop":
            path.symlink_to(path.name)
        elif special == "dangling":
            path.symlink_to("missing-target.yaml")
        elif special == "dir-yaml":
            path.mkdir()
        elif special == "dir-link":
            path.symlink_to(".")


class Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise Hang(f"lint did not finish within {SECONDS} s")


STATS: dict[str, int] = {}


def check_corpus(entries: list[tuple[str, str, bytes]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _materialize(root, entries)
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(SECONDS)
        try:
            corpus = load_corpus([root])
            for contract in corpus.contracts:
                check_accepted_contract(root, contract)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
        assert corpus.files >= len(entries)
        STATS["accepted contracts"] = STATS.get("accepted contracts", 0) + len(corpus.contracts)
        STATS["accepted mutants"] = STATS.get("accepted mutants", 0) + len(corpus.mutants)
        for rule in {p.rule for p in corpus.problems}:
            STATS[rule] = STATS.get(rule, 0) + 1
        for p in corpus.problems:
            assert p.rule != "internal", str(p)
            assert p.file and p.rule and p.message, p
        project = find_project()
        for mutant in corpus.mutants:
            target = project.root / mutant.file
            assert not os.path.isabs(mutant.file) and ".." not in Path(mutant.file).parts, mutant.file
            assert stat.S_ISREG(os.lstat(target).st_mode), mutant.file
            assert target.resolve().is_relative_to(project.root.resolve()), mutant.file


def check_accepted_contract(root: Path, contract: Any) -> None:
    path = root / Path(contract.file).name
    assert stat.S_ISREG(os.stat(path).st_mode), contract.file
    data = yaml.safe_load(path.read_bytes().decode("utf-8"))
    jsonschema.validate(data, SCHEMA)  # an oracle independent of the loader's own path
    assert data["contract"] == path.stem
    for prediction in contract.predictions:
        decls = {**contract.observables, **prediction.domain}
        corners = corners_of(prediction.formula, decls)
        for i in range(3):
            point = {name: values[(i * 7) % len(values)] for name, values in corners.items()}
            with contextlib.suppress(FormulaError):  # any value or a FormulaError; nothing else may escape
                prediction.formula.evaluate(point)


def test_lint_fuzz() -> None:
    """FUZZ_EXAMPLES hostile corpora; the count is asserted so a silently shrunk run cannot pass."""
    seen: list[float] = []

    @settings(
        max_examples=FUZZ_EXAMPLES,
        deadline=None,
        derandomize=not THOROUGH,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(corpora())
    def run(entries: list[tuple[str, str, bytes]]) -> None:
        start = time.monotonic()
        check_corpus(entries)
        seen.append(time.monotonic() - start)

    run()
    assert len(seen) >= FUZZ_EXAMPLES, f"only {len(seen)} corpora ran"
    print(f"lint fuzz: {len(seen)} corpora, slowest {max(seen):.2f} s, total {sum(seen):.1f} s")
    print("lint fuzz: corpora per problem rule, and records accepted:", dict(sorted(STATS.items())))


DECLS: dict[str, dict[str, Any]] = {
    "emitted": {"type": "int"},
    "decode_forwards": {"type": "int"},
    "tokens": {"type": "list"},
    "wasted_forwards": {"type": "float"},
    "n": {"type": "int", "min": 0, "max": 16},
    "reference_tokens": {"type": "list"},
    "zz": {"type": "str"},
}
OBSERVED = st.fixed_dictionaries(
    {
        "emitted": st.integers(-(2**70), 2**70),
        "decode_forwards": st.one_of(st.integers(), st.booleans()),
        "tokens": st.lists(st.one_of(st.integers(), st.floats(), st.text(max_size=3)), max_size=5),
        "wasted_forwards": st.floats(),
        "n": st.integers(0, 16),
        "reference_tokens": st.lists(st.integers(0, 9), max_size=5),
        "zz": st.text(max_size=5),
    }
)


def test_formula_fuzz() -> None:
    """Generated formulas through parse, the static cost bound, the cannot-fail rule and evaluation on random
    observations: only FormulaError ever escapes, and each step finishes within the time limit."""
    seen: list[int] = []

    @settings(
        max_examples=2 * FUZZ_EXAMPLES,
        deadline=None,
        derandomize=not THOROUGH,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(FORMULAS, OBSERVED)
    def run(source: str, observed: dict[str, Any]) -> None:
        from falsify.contracts.corners import cannot_fail
        from falsify.contracts.cost import check_cost
        from falsify.contracts.formula import parse

        old = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(SECONDS)
        try:
            try:
                formula = parse(source)
            except FormulaError:
                seen.append(0)
                return
            decls = {k: v for k, v in DECLS.items() if k in formula.names}
            static = check_cost(formula, decls)
            cannot_fail(formula, decls)
            try:
                formula.evaluate(observed)
                seen.append(2 if not static else 3)
            except FormulaError:
                seen.append(1)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)

    run()
    assert len(seen) >= 2 * FUZZ_EXAMPLES, f"only {len(seen)} formulas ran"
    counts = {
        k: seen.count(v)
        for k, v in (("refused at parse", 0), ("named error", 1), ("value", 2), ("value, cost-refused", 3))
    }
    print(f"formula fuzz: {len(seen)} formulas: {counts}")
