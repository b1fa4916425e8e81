"""Falsifiers of contract openai-serving-v1's request and reply fields (FALSIFY-OAI-011..013): the sampling cuts a
request asks for (top_k, top_p), the logprobs a reply carries, and its usage block.

The request body is the engine's own (`engine.body`: the model, the prompt as the server takes it); the test adds
the field under test and reads the whole JSON reply itself, since these fields are not part of what the engine's
`complete` hands back. A server that refuses a field with a 4xx cannot show the prediction false, and says so.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from typing import Any

import pytest

import falsify
from falsify.engines.deadline_http import DeadlineConnection
from falsify.untrusted import boundedjson

MAX_REPLY = 16 * 2**20  # bytes of one reply read

# Each verdict here times the server or shares it with no other client: `falsify gate --jobs N` runs these alone.
pytestmark = pytest.mark.falsify_serial


def post(engine: Any, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    """Status and JSON reply (None unless 200) of one non-streamed POST, within the engine's request timeout."""
    conn = DeadlineConnection(engine.host, engine.port, time.monotonic() + engine.timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read(MAX_REPLY + 1)
        assert len(data) <= MAX_REPLY, f"POST {path}: a reply over {MAX_REPLY:,} bytes"
        if response.status != 200:
            return response.status, None
        return 200, boundedjson.loads(data, what=f"POST {path}'s reply", max_bytes=MAX_REPLY)
    finally:
        conn.close()


def choice_of(reply: Any) -> dict[str, Any]:
    choices = reply.get("choices") if isinstance(reply, dict) else None
    assert isinstance(choices, list) and choices and isinstance(choices[0], dict), (
        f"no choice in {reply!r:.300}"
    )
    return choices[0]


def _id(entry: Any) -> int | None:
    """A logprob entry's token id, where the server gives one (llama-server's `id`)."""
    tid = entry.get("id") if isinstance(entry, dict) else None
    return tid if isinstance(tid, int) and not isinstance(tid, bool) else None


def tokens_of(choice: dict[str, Any], pid: str) -> list[Any]:
    """The reply's tokens: ids where the server returns them (`token_ids`, or an `id` on every logprob entry),
    else its logprob entries' token strings, in either shape (`logprobs.content`, as chat and llama-server's
    completions give it, or `logprobs.tokens`). A reply with none of them cannot show prediction `pid`."""
    if isinstance(choice.get("token_ids"), list):
        return list(choice["token_ids"])
    found = choice.get("logprobs")
    logprobs: dict[str, Any] = found if isinstance(found, dict) else {}
    content = logprobs.get("content")
    if isinstance(content, list) and all(isinstance(e, dict) for e in content):
        ids = [_id(e) for e in content]
        return ids if all(i is not None for i in ids) else [e.get("token") for e in content]
    if isinstance(logprobs.get("tokens"), list):
        return list(logprobs["tokens"])
    falsify.cannot_show(
        pid,
        f"the reply carries neither token ids nor logprob entries (asked for): {choice!r:.200}",
        whose="engine",
    )


# -- top_k, top_p ------------------------------------------------------------------------------------------------------
CUT_TO_ONE: dict[str, dict[str, Any]] = {"top_k": {"top_k": 1}, "top_p": {"top_p": 1e-6}}
SEEDS = (11, 12)
LENGTH = 12  # tokens per reply


@pytest.mark.falsifies("FALSIFY-OAI-011")
@pytest.mark.parametrize("cut", list(CUT_TO_ONE))
def test_a_cut_to_one_candidate_samples_the_greedy_reply(engine: Any, cut: str) -> None:
    ids = engine.prompt(9000, 12)
    greedy = tokens_of(
        choice_of(post(engine, "/v1/completions", engine.body(ids, LENGTH, logprobs=1))[1]), "FALSIFY-OAI-011"
    )

    def sampled(seed: int, fields: dict[str, Any]) -> list[Any]:
        status, reply = post(
            engine,
            "/v1/completions",
            engine.body(ids, LENGTH, temperature=1.0, seed=seed, logprobs=1) | fields,
        )
        if status != 200:
            falsify.cannot_show(
                "FALSIFY-OAI-011",
                f"the server refused a request with {fields} ({status})",
                cut=cut,
                whose="engine",
            )
        return tokens_of(choice_of(reply), "FALSIFY-OAI-011")

    if all(sampled(seed, {}) == greedy for seed in SEEDS):  # stops at the first seed that differs
        falsify.cannot_show(
            "FALSIFY-OAI-011",
            f"at temperature 1 without a cut, seeds {SEEDS} gave the greedy reply too: a cut cannot be told from none",
            cut=cut,
            whose="engine",
        )
    for seed in SEEDS:
        falsify.check(
            "FALSIFY-OAI-011", tokens=sampled(seed, CUT_TO_ONE[cut]), greedy_tokens=greedy, cut=cut, seed=seed
        )


# -- logprobs ----------------------------------------------------------------------------------------------------------
TOP = 5


@pytest.mark.falsifies("FALSIFY-OAI-012")
def test_logprobs_are_a_distribution_led_by_the_greedy_token(engine: Any) -> None:
    body = engine.body("Count to ten.", 16, chat=True, logprobs=TOP)
    status, reply = post(engine, "/v1/chat/completions", body)
    assert status == 200, f"POST /v1/chat/completions answered {status}"
    content = (choice_of(reply).get("logprobs") or {}).get("content")
    if not isinstance(content, list) or not content:
        falsify.cannot_show(
            "FALSIFY-OAI-012", "the chat reply carries no logprobs.content (asked for)", whose="engine"
        )
    descending, chosen_first, worst_lp, mass = True, True, -math.inf, 0.0
    for entry in content:
        top = entry["top_logprobs"]
        lps = [float(t["logprob"]) for t in top]
        descending = descending and len(top) == TOP and all(a >= b for a, b in itertools.pairwise(lps))
        # the same token by id where the server gives ids on both (llama-server's chosen entry's `token` text
        # also carries an incomplete UTF-8 tail held back from the token before: the text emitted there)
        same = (
            _id(top[0]) == _id(entry)
            if _id(top[0]) is not None and _id(entry) is not None
            else top[0]["token"] == entry["token"]
        )
        chosen_first = chosen_first and same and lps[0] == float(entry["logprob"])
        worst_lp = max(worst_lp, float(entry["logprob"]), *lps)
        mass = max(mass, math.fsum(math.exp(lp) for lp in lps))
    falsify.check(
        "FALSIFY-OAI-012",
        positions=len(content),
        descending=descending,
        chosen_first=chosen_first,
        max_logprob=worst_lp,
        max_top_mass=mass,
        top_logprobs=TOP,
    )


# -- usage -------------------------------------------------------------------------------------------------------------
@pytest.mark.falsifies("FALSIFY-OAI-013")
@pytest.mark.parametrize("max_tokens", [1, 8])
def test_usage_counts_the_prompt_and_adds_up(engine: Any, max_tokens: int) -> None:
    ids = engine.prompt(9100 + max_tokens, 12)
    status, reply = post(engine, "/v1/completions", engine.body(ids, max_tokens, logprobs=1))
    assert status == 200, f"POST /v1/completions answered {status}"
    usage = reply.get("usage")
    if not isinstance(usage, dict) or not all(
        isinstance(usage.get(k), int) for k in ("prompt_tokens", "completion_tokens", "total_tokens")
    ):
        falsify.cannot_show(
            "FALSIFY-OAI-013", f"the reply's usage is not three token counts: {usage!r:.200}", whose="engine"
        )
    falsify.check(
        "FALSIFY-OAI-013",
        usage_prompt_tokens=usage["prompt_tokens"],
        completion_tokens=usage["completion_tokens"],
        usage_total_tokens=usage["total_tokens"],
        n_prompt=len(ids),
        n_tokens=len(tokens_of(choice_of(reply), "FALSIFY-OAI-013")),
        max_tokens=max_tokens,
    )


# -- the stream's framing ----------------------------------------------------------------------------------------------
MAX_LINE = 2**20  # bytes of one SSE line


def sse_data(engine: Any, path: str, body: dict[str, Any]) -> list[str]:
    """The `data:` payloads of one streamed reply, in order, read to the end of the response."""
    conn = DeadlineConnection(engine.host, engine.port, time.monotonic() + engine.timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200, f"POST {path} answered {response.status}"
        out, total = [], 0
        while line := response.readline(MAX_LINE + 1):
            total += len(line)
            assert len(line) <= MAX_LINE and total <= MAX_REPLY, f"POST {path}: a stream past its bounds"
            text = line.decode("utf-8").rstrip("\r\n")
            if text.startswith("data:"):
                out.append(text[5:].strip())
        return out
    finally:
        conn.close()


@pytest.mark.falsifies("FALSIFY-OAI-014")
@pytest.mark.parametrize("chat", [False, True])
def test_a_stream_ends_with_done_after_one_finishing_chunk(engine: Any, chat: bool) -> None:
    ids: list[int] | str = "Say something." if chat else engine.prompt(9200, 12)
    body = engine.body(ids, 8, chat=chat, stream=True, logprobs=1)
    data = sse_data(engine, "/v1/chat/completions" if chat else "/v1/completions", body)
    chunks = [boundedjson.loads(d, what="a stream chunk", max_bytes=MAX_LINE) for d in data if d != "[DONE]"]
    with_choice = [c for c in chunks if isinstance(c, dict) and c.get("choices")]
    finishing = [i for i, c in enumerate(with_choice) if choice_of(c).get("finish_reason") is not None]
    falsify.check(
        "FALSIFY-OAI-014",
        last_data=data[-1] if data else "",
        done_count=data.count("[DONE]"),
        finishing_chunks=len(finishing),
        finishing_is_last=bool(finishing) and finishing[-1] == len(with_choice) - 1,
        chat=chat,
    )
