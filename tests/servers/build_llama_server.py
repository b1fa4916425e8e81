"""Build llama.cpp's llama-server from the llama.cpp vendored in the llama-cpp-python 0.3.36 sdist, once.

    python tests/servers/build_llama_server.py      # prints the path of the llama-server binary

CPU only, the llama-server target alone, with the machine's own vector units (GGML_NATIVE, as the llamacpp tox
env builds llama-cpp-python). The result is cached under $FALSIFY_CACHE (default ~/.cache/falsify) in a folder
keyed by the sdist's sha256, so a second run finds it and builds nothing; `build-seconds.txt` there records the
cold build's wall time.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

SDIST = "llama-cpp-python==0.3.36"
CMAKE_ARGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",
    "-DGGML_BLAS=OFF",
    "-DGGML_CUDA=OFF",
    "-DGGML_METAL=OFF",
    "-DGGML_VULKAN=OFF",
    "-DGGML_OPENCL=OFF",
    "-DGGML_RPC=OFF",
    "-DGGML_CPU_ALL_VARIANTS=OFF",
    "-DGGML_BACKEND_DL=OFF",
    "-DGGML_CCACHE=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
]


def cache_root() -> Path:
    return Path(os.environ.get("FALSIFY_CACHE") or Path.home() / ".cache" / "falsify")


def build() -> Path:
    downloads = cache_root() / "sdist"
    downloads.mkdir(parents=True, exist_ok=True)
    tarballs = sorted(downloads.glob("llama_cpp_python-0.3.36.tar.gz"))
    if not tarballs:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                SDIST,
                "-d",
                str(downloads),
            ],
            check=True,
        )
        tarballs = sorted(downloads.glob("llama_cpp_python-0.3.36.tar.gz"))
    sdist = tarballs[0]
    sha = hashlib.sha256(sdist.read_bytes()).hexdigest()
    home = cache_root() / f"llama-server-{sha[:16]}"
    binary = home / "bin" / "llama-server"
    if binary.is_file():
        return binary
    with tempfile.TemporaryDirectory(dir=cache_root()) as tmp:
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        source = Path(tmp) / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp"
        out = Path(tmp) / "build"
        start = time.monotonic()
        subprocess.run(["cmake", "-S", str(source), "-B", str(out), *CMAKE_ARGS], check=True)
        subprocess.run(["cmake", "--build", str(out), "--target", "llama-server", "-j", "2"], check=True)
        seconds = time.monotonic() - start
        (home / "bin").mkdir(parents=True, exist_ok=True)
        (out / "bin" / "llama-server").replace(binary)
        (home / "build-seconds.txt").write_text(f"{seconds:.0f}\n", encoding="utf-8")
        (home / "sdist-sha256.txt").write_text(sha + "\n", encoding="utf-8")
    return binary


if __name__ == "__main__":
    print(build())
