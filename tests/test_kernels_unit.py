"""tests/testkit_kernels.py (tox -e kernels): which OpenBLAS kernels run, which are skipped and why, decided from the CPU's
flags and from what OpenBLAS actually loads. The loading is faked here; tox -e kernels runs it for real."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import testkit_kernels as kernels

CPUINFO = """\
processor\t: 0
vendor_id\t: AuthenticAMD
flags\t\t: fpu sse avx avx2 fma avx512f avx512cd avx512bw avx512dq avx512vl avx512_bf16
bugs\t\t: sysret_ss_attrs

processor\t: 1
flags\t\t: fpu sse
"""


BUILT = ("Prescott", "Nehalem", "Sandybridge", "Haswell", "SkylakeX")  # numpy's wheels (OpenBLAS 0.3.31)


def numpy_wheel(served: dict[str, str]) -> Callable[[str], tuple[list[str], str]]:
    """A fake probe: each name loads as itself when the build has it, else as `served` says."""
    return lambda n: ([n if n in BUILT else served[n]], "")


def test_the_first_processors_flags_are_read() -> None:
    flags = kernels.cpu_flags(CPUINFO)
    assert {"avx2", "avx512vl", "avx512_bf16"} <= flags and "sysret_ss_attrs" not in flags
    assert kernels.cpu_flags("processor\t: 0\n") == set()


@pytest.mark.parametrize(
    ("name", "loaded", "stderr", "kernel", "why"),
    [
        ("SkylakeX", "SkylakeX", "Core: SkylakeX", "SkylakeX", ""),
        (
            "Zen",
            "Haswell",
            "Core: Haswell",
            "Haswell",
            "this OpenBLAS has no Zen kernels and serves the name with Haswell's",
        ),
        (
            "Cooperlake",
            "SkylakeX",
            "",
            "SkylakeX",
            "this OpenBLAS has no Cooperlake kernels and serves the name with SkylakeX's",
        ),
        (
            "Haswell",
            "SkylakeX",
            "Core not found: Haswell",
            None,
            'this OpenBLAS does not accept the name ("Core not found"; it picked SkylakeX)',
        ),
    ],
)
def test_what_openblas_loads_decides_the_run(
    monkeypatch: pytest.MonkeyPatch, name: str, loaded: str, stderr: str, kernel: str | None, why: str
) -> None:
    probe = numpy_wheel({})
    monkeypatch.setattr(kernels, "loaded_kernel", lambda n: ([loaded], stderr) if n == name else probe(n))
    assert kernels.plan(name, kernels.cpu_flags(CPUINFO)) == kernels.Plan(name, kernel, why)


def test_a_kernel_the_cpu_cannot_run_is_skipped_by_name_without_loading_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never(name: str) -> tuple[list[str], str]:
        raise AssertionError(f"{name} must not be loaded: the CPU would die on an illegal instruction")

    monkeypatch.setattr(kernels, "loaded_kernel", never)
    plan = kernels.plan("SapphireRapids", kernels.cpu_flags(CPUINFO))
    assert plan.kernel is None
    assert plan.why == (
        "this CPU lacks avx512_fp16, amx_tile, amx_bf16 (/proc/cpuinfo), which SapphireRapids's kernels need"
    )
    assert kernels.plan("Sandybridge", {"sse"}).why.startswith("this CPU lacks avx (")


def test_a_coretype_openblas_ignored_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    # Sandybridge is on Cooperlake's chain, but this build has SkylakeX, which comes first
    monkeypatch.setattr(kernels, "loaded_kernel", numpy_wheel({"Cooperlake": "Sandybridge"}))
    with pytest.raises(
        SystemExit,
        match=r"OPENBLAS_CORETYPE=Cooperlake was ignored: OpenBLAS loaded Sandybridge, which is neither "
        r"Cooperlake nor the fallback this build has for it \(SkylakeX\)",
    ):
        kernels.plan("Cooperlake", kernels.cpu_flags(CPUINFO))
    monkeypatch.setattr(kernels, "loaded_kernel", lambda n: (["Haswell", "Haswell"], ""))
    with pytest.raises(SystemExit, match="numpy loaded 2 OpenBLAS libraries"):
        kernels.plan("Haswell", kernels.cpu_flags(CPUINFO))


def test_every_name_has_its_needs_and_fallbacks() -> None:
    assert set(kernels.NEEDS) == set(kernels.FALLBACK) == set(kernels.KERNELS)
    # each kernel needs at least what the one it falls back to needs
    for name, chain in kernels.FALLBACK.items():
        for other in chain:
            assert set(kernels.NEEDS.get(other, ())) <= set(kernels.NEEDS[name]), (name, other)


def test_skip_default_leaves_out_the_kernel_loaded_unasked(monkeypatch: pytest.MonkeyPatch) -> None:
    plans = [
        kernels.Plan("Haswell", "Haswell", ""),
        kernels.Plan("Zen", "Haswell", "served by Haswell"),
        kernels.Plan("SkylakeX", None, "this CPU lacks avx512f"),
        kernels.Plan("Sandybridge", "Sandybridge", ""),
    ]
    monkeypatch.setattr(kernels, "default_kernel", lambda: "Haswell")
    kept = kernels.without_default(plans)
    assert [(p.name, p.kernel) for p in kept] == [
        ("Haswell", None),
        ("Zen", None),
        ("SkylakeX", None),
        ("Sandybridge", "Sandybridge"),
    ]
    assert "--skip-default" in kept[0].why and kept[2].why == "this CPU lacks avx512f"


@pytest.mark.parametrize("default", ["Sandybridge", None])
def test_skip_default_never_leaves_nothing_to_run(
    monkeypatch: pytest.MonkeyPatch, default: str | None
) -> None:
    # only the default can run (or the default cannot be told): every plan stays as it was
    plans = [
        kernels.Plan("Haswell", None, "this CPU lacks avx2"),
        kernels.Plan("Sandybridge", "Sandybridge", ""),
    ]
    monkeypatch.setattr(kernels, "default_kernel", lambda: default)
    assert kernels.without_default(plans) == plans
