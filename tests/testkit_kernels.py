"""`tox -e kernels`: the model, GDN and serving tests and the contract gate under every OpenBLAS kernel this CPU
can run among KERNELS (issue 24).

numpy's OpenBLAS (built DYNAMIC_ARCH) picks its kernels for the CPU; OPENBLAS_CORETYPE forces a core type. A
float32 product's bytes depend on the kernel, so a claim that two paths give the same bytes holds only when both
reach the same kernel with the same layout. For each name of KERNELS:

- CPU: OpenBLAS does not check that the CPU can run a forced core type (driver/others/dynamic.c,
  force_coretype): a kernel whose instructions the CPU lacks would die on an illegal instruction. The flags each
  needs (NEEDS, from OpenBLAS's own dispatch: support_avx, support_avx2, support_avx512, support_avx512_bf16,
  support_amx_bf16, and the -march each kernel is built with) are looked up in /proc/cpuinfo; a kernel whose
  flags are missing is skipped, by name, with the flags it lacks.
- OpenBLAS: a child process loads numpy under OPENBLAS_CORETYPE=name and asks threadpoolctl which kernel loaded.
  A build without that kernel serves the name with a fallback (numpy's wheels build Prescott, Nehalem,
  Sandybridge, Haswell and SkylakeX only: Zen gets the Haswell kernels, Cooperlake and SapphireRapids SkylakeX's,
  as FALLBACK lists from dynamic.c: the first of its chain the build has); such a name is run once, under the
  kernel that serves it, and says so. A name OpenBLAS does not accept ("Core not found") is skipped with that
  message. Any other kernel than the name or that fallback fails the run: the variable was ignored.
- Run: each kernel's pytest and gate start, side by side, each in a child process that first checks, in itself,
  that threadpoolctl sees the kernel asked for, then runs; the processes those start inherit the same
  OPENBLAS_CORETYPE.

Each kernel's logs, JUnit file and gate output go to .falsify/kernels/, replaced by the next run.

`--skip-default` (for .ci/run, right after `tox -e py`) skips the kernel OpenBLAS loads in this environment
unasked, which the suite has just run under, unless no other kernel can run.

Exit 0 only when at least one kernel ran and every kernel run passed its tests and its gate; 2 when none ran.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

KERNELS = ("Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", "Sandybridge")

_AVX512 = ("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl")  # -march=skylake-avx512
NEEDS: dict[str, tuple[str, ...]] = {
    "Sandybridge": ("avx",),
    "Haswell": ("avx", "avx2", "fma"),
    "Zen": ("avx", "avx2", "fma"),
    "SkylakeX": ("avx", "avx2", "fma", *_AVX512),
    "Cooperlake": ("avx", "avx2", "fma", *_AVX512, "avx512_bf16"),
    "SapphireRapids": ("avx", "avx2", "fma", *_AVX512, "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"),
}

# What a DYNAMIC_LIST build loads for a core type it was not built with (dynamic.c's #define chains), best first.
FALLBACK: dict[str, tuple[str, ...]] = {
    "Sandybridge": ("Nehalem", "Prescott"),
    "Haswell": ("Sandybridge", "Nehalem", "Prescott"),
    "Zen": ("Haswell", "Sandybridge", "Nehalem", "Prescott"),
    "SkylakeX": ("Haswell", "Sandybridge", "Nehalem", "Prescott"),
    "Cooperlake": ("SkylakeX", "Haswell", "Sandybridge", "Nehalem", "Prescott"),
    "SapphireRapids": ("SkylakeX", "Haswell", "Sandybridge", "Nehalem", "Prescott"),
}

# The tests whose claims are byte equalities between paths through BLAS: the model (f32, Q4_K, GGUF, HF golden
# data), the GDN kernels, and serving (sessions, prefill, lanes, the HTTP server, the wire engine).
TESTS = (
    "tests/test_model.py",
    "tests/test_model_unit.py",
    "tests/test_attention_unit.py",
    "tests/test_weights_unit.py",
    "tests/test_gguf_io.py",
    "tests/test_hf_golden.py",
    "tests/test_gdn_unit.py",
    "tests/test_session_unit.py",
    "tests/test_prefill_unit.py",
    "tests/test_lanes_unit.py",
    "tests/test_serve_unit.py",
)

_LOADED = (
    "import json, numpy, threadpoolctl; "
    "print(json.dumps([i.get('architecture') for i in threadpoolctl.threadpool_info() "
    "if i.get('internal_api') == 'openblas']))"
)


@dataclass(frozen=True, slots=True)
class Plan:
    name: str
    kernel: str | None  # the kernel to run under; None: skipped
    why: str  # for a skip, or a fallback, the reason


def cpu_flags(cpuinfo: str) -> set[str]:
    """The flags of /proc/cpuinfo's first processor."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


def loaded_kernel(name: str) -> tuple[list[str], str]:
    """The OpenBLAS kernels threadpoolctl sees in a fresh process under OPENBLAS_CORETYPE=name, and its stderr."""
    env = dict(os.environ, OPENBLAS_CORETYPE=name, OPENBLAS_VERBOSE="2")
    done = subprocess.run(
        [sys.executable, "-c", _LOADED], env=env, capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise SystemExit(
            f"kernels: loading numpy under OPENBLAS_CORETYPE={name} failed:\n{done.stderr[-2000:]}"
        )
    return list(json.loads(done.stdout.splitlines()[-1])), done.stderr


def plan(name: str, flags: set[str]) -> Plan:
    missing = [f for f in NEEDS[name] if f not in flags]
    if missing:
        return Plan(
            name, None, f"this CPU lacks {', '.join(missing)} (/proc/cpuinfo), which {name}'s kernels need"
        )
    loaded, stderr = loaded_kernel(name)
    if len(loaded) != 1:
        raise SystemExit(f"kernels: numpy loaded {len(loaded)} OpenBLAS libraries ({loaded}), expected one")
    kernel = loaded[0]
    if "Core not found" in stderr:
        return Plan(
            name, None, f'this OpenBLAS does not accept the name ("Core not found"; it picked {kernel})'
        )
    if kernel.lower() == name.lower():
        return Plan(name, kernel, "")
    # the fallback is the first of the chain this build has: a name it loads as itself
    built = next((f for f in FALLBACK[name] if loaded_kernel(f)[0] == [f]), None)
    if kernel == built:
        return Plan(name, kernel, f"this OpenBLAS has no {name} kernels and serves the name with {kernel}'s")
    raise SystemExit(
        f"kernels: OPENBLAS_CORETYPE={name} was ignored: OpenBLAS loaded {kernel}, which is neither {name} nor "
        f"the fallback this build has for it ({built or 'none of ' + ', '.join(FALLBACK[name])})"
    )


def default_kernel() -> str | None:
    """The kernel OpenBLAS loads in this environment as it is (OPENBLAS_CORETYPE as set, or unset: its own pick
    for the CPU), i.e. the one `tox -e py` just ran the suite under; None when that is not one kernel."""
    done = subprocess.run([sys.executable, "-c", _LOADED], capture_output=True, text=True, timeout=120)
    loaded = json.loads(done.stdout.splitlines()[-1]) if done.returncode == 0 and done.stdout.strip() else []
    return loaded[0] if len(loaded) == 1 else None


def without_default(plans: list[Plan]) -> list[Plan]:
    """--skip-default (.ci/run, right after the suite): the names served by the kernel this environment loads
    anyway are skipped, saying so; its tests just ran in the suite, and the evidence step runs its gate. When
    that would leave no kernel, nothing is skipped: a run checks at least one kernel."""
    default = default_kernel()
    if default is None or all(p.kernel in (None, default) for p in plans):
        return plans
    why = f"{default} is the kernel OpenBLAS loads here unasked, which the suite has just run under (--skip-default)"
    return [Plan(p.name, None, why) if p.kernel == default else p for p in plans]


def under(kernel: str, argv: list[str]) -> int:
    """In this process: check that OpenBLAS runs `kernel`, then run pytest or falsify with `argv`."""
    import numpy  # noqa: F401  (loads the OpenBLAS threadpoolctl must see)
    import threadpoolctl

    loaded = [
        i.get("architecture") for i in threadpoolctl.threadpool_info() if i.get("internal_api") == "openblas"
    ]
    if loaded != [kernel]:
        print(
            f"kernels: OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')} loaded {loaded}, not [{kernel!r}]"
        )
        return 3
    if argv[0] == "pytest":
        import pytest

        return int(pytest.main(argv[1:]))
    from falsify.cli import main as falsify_main

    return int(falsify_main(argv[1:]) or 0)


def junit_counts(path: Path) -> str:
    if not path.is_file():
        return "no junit report"
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return "no test suite in the junit report"
    n = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")}
    passed = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
    return f"{passed} passed, {n['failures']} failed, {n['errors']} errors, {n['skipped']} skipped of {n['tests']}"


def child(kernel: str, argv: list[str], log: Path) -> tuple[int, float]:
    env = dict(os.environ, OPENBLAS_CORETYPE=kernel)
    start = time.perf_counter()
    with log.open("w", encoding="utf-8") as out:
        code = subprocess.run(
            [sys.executable, __file__, "--under", kernel, "--", *argv], env=env, stdout=out, stderr=out
        ).returncode
    return code, time.perf_counter() - start


def verdict_line(log: Path, command: str) -> str:
    """The command's own one-line verdict ("gate: PASS — ..."), else where to look."""
    lines = log.read_text(encoding="utf-8").splitlines()
    found = [line for line in lines if line.startswith((f"{command}: PASS", f"{command}: FAIL"))]
    return found[-1] if found else f"(no {command} verdict; see {log})"


def main(args: list[str]) -> int:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # progress shows while tests run
    if args[:1] == ["--under"]:
        return under(args[1], args[3:])
    try:
        flags = cpu_flags(Path("/proc/cpuinfo").read_text(encoding="utf-8"))
    except OSError as e:
        print(f"kernels: cannot read /proc/cpuinfo ({e.strerror}): no kernel can be chosen; nothing was run")
        return 2
    skip_default = "--skip-default" in args
    args = [a for a in args if a != "--skip-default"]
    plans = [plan(name, flags) for name in KERNELS]
    if skip_default:
        plans = without_default(plans)
    runs: dict[str, list[str]] = {}
    for p in plans:
        if p.kernel is None:
            print(f"kernels: SKIP {p.name}: {p.why}")
        else:
            runs.setdefault(p.kernel, []).append(p.name)
            print(f"kernels: RUN {p.name}" + (f": {p.why}" if p.why else ""))
    if not runs:
        print("kernels: no kernel of " + ", ".join(KERNELS) + " can run here: nothing was checked")
        return 2
    # The logs stay in the project, replaced by each run (not one more directory in /tmp per run).
    out = Path(__file__).resolve().parent.parent / ".falsify" / "kernels"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    failed = []
    started = time.perf_counter()
    for kernel, names in runs.items():
        junit, test_log, gate_log = (
            out / f"{kernel}.xml",
            out / f"{kernel}-tests.log",
            out / f"{kernel}-gate.log",
        )
        # The kernel's tests and its gate are independent (own logs, junit file and --out): run side by side, one
        # single-threaded child per core of CI's two.
        with ThreadPoolExecutor(max_workers=2) as pool:
            tests_run = pool.submit(
                child,
                kernel,
                ["pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *args, *TESTS],
                test_log,
            )
            gate_run = pool.submit(
                child, kernel, ["falsify", "gate", "--out", str(out / f"gate-{kernel}")], gate_log
            )
            (tests_rc, tests_s), (gate_rc, gate_s) = tests_run.result(), gate_run.result()
        label = kernel if names == [kernel] else f"{kernel} (as {', '.join(names)})"
        print(f"kernels: {label}: tests exit {tests_rc} in {tests_s:.0f} s: {junit_counts(junit)}")
        print(f"kernels: {label}: gate exit {gate_rc} in {gate_s:.0f} s: {verdict_line(gate_log, 'gate')}")
        if tests_rc or gate_rc:
            failed.append(kernel)
            for log in (test_log, gate_log):
                print(f"--- {log} (last 40 lines)")
                print("\n".join(log.read_text(encoding="utf-8").splitlines()[-40:]))
    ran = ", ".join(runs)
    skipped = [p.name for p in plans if p.kernel is None]
    verdict = "FAIL" if failed else "PASS"
    print(
        f"kernels: {verdict} — {len(runs)} kernels run ({ran}), {len(failed)} failed"
        + (f" ({', '.join(failed)})" if failed else "")
        + f"; {len(skipped)} of {len(KERNELS)} names skipped"
        + (f" ({', '.join(skipped)})" if skipped else "")
        + f"; {time.perf_counter() - started:.0f} s; logs in {out}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
