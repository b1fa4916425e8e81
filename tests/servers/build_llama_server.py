"""Build llama.cpp's llama-server from the llama.cpp vendored in the llama-cpp-python 0.3.36 sdist, once.

    python tests/servers/build_llama_server.py      # prints the path of the llama-server binary

CPU only, the llama-server target alone, statically linked against llama.cpp's own libraries (so the binary runs
from the cache folder), with the machine's own vector units (GGML_NATIVE=ON, as the llamacpp tox env builds
llama-cpp-python, so both servers run the same kernels on this CPU and the findings are this CPU's). No web UI:
LLAMA_USE_PREBUILT_UI=OFF and LLAMA_BUILD_UI=OFF, so the build fetches nothing (its default would download the UI
from a model hub); the server's UI table is empty, the API is whole.

The build lives under $FALSIFY_SERVERS_CACHE (default .falsify/cache/servers in the project, out of git) in a folder
keyed by the sdist's sha256, the cmake options and, since GGML_NATIVE=ON ties the binary to the CPU, the CPU's
flags. A second run finds `build.json` there and builds nothing; an interrupted build resumes where it stopped
(the build tree is kept). `build.json` records the cold build's wall time, CPU time (the compilers', from
getrusage) and the load average before and after.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

VERSION = "0.3.36"
SDIST = f"llama-cpp-python=={VERSION}"
SDIST_NAME = f"llama_cpp_python-{VERSION}.tar.gz"
CMAKE_ARGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=ON",
    "-DGGML_BLAS=OFF",
    "-DGGML_CUDA=OFF",
    "-DGGML_METAL=OFF",
    "-DGGML_VULKAN=OFF",
    "-DGGML_HIP=OFF",
    "-DGGML_OPENCL=OFF",
    "-DGGML_RPC=OFF",
    "-DGGML_CPU_ALL_VARIANTS=OFF",
    "-DGGML_BACKEND_DL=OFF",
    "-DGGML_CCACHE=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
]
JOBS = "2"


def cache_root() -> Path:
    default = Path(__file__).resolve().parents[2] / ".falsify" / "cache" / "servers"
    return Path(os.environ.get("FALSIFY_SERVERS_CACHE") or default)


def cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("flags"):
                return " ".join(sorted(line.split(":", 1)[1].split()))
    except OSError:
        pass
    return ""


def sdist_path() -> Path:
    downloads = cache_root() / "sdist"
    downloads.mkdir(parents=True, exist_ok=True)
    tarball = downloads / SDIST_NAME
    if not tarball.is_file():
        # pip's own client, from the configured index (or its cache): the same sdist the llamacpp env builds.
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                SDIST,
                "-d",
                str(downloads),
            ],
            check=True,
        )
    return tarball


def key(sha: str) -> str:
    options = hashlib.sha256("\n".join([*CMAKE_ARGS, cpu_flags()]).encode()).hexdigest()
    return f"llama-server-{sha[:16]}-{options[:12]}"


def build(quiet: bool = False) -> tuple[Path, dict[str, object]]:
    sdist = sdist_path()
    sha = hashlib.sha256(sdist.read_bytes()).hexdigest()
    home = cache_root() / key(sha)
    binary = home / "build" / "bin" / "llama-server"
    record = home / "build.json"
    if record.is_file() and binary.is_file():
        cached: dict[str, object] = json.loads(record.read_text(encoding="utf-8"))
        cached["cached"] = True
        return binary, cached
    home.mkdir(parents=True, exist_ok=True)
    source = home / "src" / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
    if not (source / "CMakeLists.txt").is_file():
        shutil.rmtree(home / "src", ignore_errors=True)
        with tarfile.open(sdist) as tar:
            tar.extractall(home / "src", filter="data")
    out = home / "build"
    resumed = (out / "CMakeCache.txt").is_file()
    load_before = os.getloadavg()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    stream = subprocess.DEVNULL if quiet else None
    subprocess.run(["cmake", "-S", str(source), "-B", str(out), *CMAKE_ARGS], check=True, stdout=stream)
    subprocess.run(
        ["cmake", "--build", str(out), "--target", "llama-server", "-j", JOBS], check=True, stdout=stream
    )
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    info: dict[str, object] = {
        "sdist_sha256": sha,
        "cmake_args": CMAKE_ARGS,
        "jobs": int(JOBS),
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        # a resumed build's times cover only its last part: the record says so
        "resumed": resumed,
    }
    record.write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    info["cached"] = False
    return binary, info


def main() -> int:
    start = time.monotonic()
    load = os.getloadavg()
    binary, info = build()
    if info.get("cached"):
        print(
            f"llama-server cached: {binary} (found in {time.monotonic() - start:.1f} s at load {load[0]:.2f}; "
            f"its cold build took {info['wall_seconds']} s wall, {info['cpu_seconds']} s CPU, load "
            f"{info['loadavg_before']} -> {info['loadavg_after']})"
        )
    else:
        print(
            f"llama-server built: {binary} ({info['wall_seconds']} s wall, {info['cpu_seconds']} s CPU, "
            f"-j {info['jobs']}, load {info['loadavg_before']} -> {info['loadavg_after']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
