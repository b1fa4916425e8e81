#!/usr/bin/env node
// A toy engine in Node.js 20, standard library only, speaking the falsify engine protocol 1.1
// (docs/engine-protocol.md) on stdio: generate with the harness's cancel poll, states, stepped prefill, a lane host
// (capability lanes) and a sampler (capability sample), for a toy model:
//   logits[j] = ((last * 31 + pos * 17 + j * 7) % 101) / 10   (float32), where `last` is the last token fed and
//   `pos` the state's position after it. A state is the list of tokens it consumed.
// Run it:  falsify gate --pack serving --engine exec:"node examples/node-engine/engine.js"
"use strict";

const readline = require("node:readline");
const crypto = require("node:crypto");
const { LaneHost, LaneRefused } = require("./lanes.js");
const { Sampler, pickGreedy } = require("./sampler.js");

const PROTOCOL_VERSION = "falsify-engine/1.2";
const VERSIONS = { "falsify-engine/1": ["generate", "state", "prefill"] };
VERSIONS["falsify-engine/1.1"] = [...VERSIONS["falsify-engine/1"], "lanes", "sample"];
VERSIONS[PROTOCOL_VERSION] = VERSIONS["falsify-engine/1.1"]; // 1.2 adds only batched calls (V12)
const MAX_DRAWS = 65536;
const VOCAB = 512;
const CONTEXT = 4096;
const INVALID_REQUEST = -32600, METHOD_NOT_FOUND = -32601, INVALID_PARAMS = -32602, INTERNAL_ERROR = -32603;
const UNSUPPORTED_PROTOCOL_VERSION = -32001, SERVER_NOT_INITIALIZED = -32002, INVALID_INPUT = -32010;
const UNKNOWN_HANDLE = -32011, LANE_REFUSED = -32013;
const DEFAULT_CHUNK_CAP = 64; // chunk_cap null: prefill chunks of 64 tokens

// -- base protocol: one JSON object per line on stdout; replies to our own requests resolve promises -------------
function send(message) {
  process.stdout.write(JSON.stringify(message) + "\n");
}

let nextId = 0;
const waiting = new Map(); // id of our request -> {resolve, reject}
let stdinClosed = false;

function request(method, params) {
  if (stdinClosed) process.exit(1); // its reply can never come
  nextId += 1;
  const id = nextId;
  return new Promise((resolve, reject) => {
    waiting.set(id, { resolve, reject });
    send({ id, method, params });
  });
}

function notify(method, params) {
  send({ method, params });
}

class Refusal extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

// -- the toy model ------------------------------------------------------------------------------------------------
function logitsAfter(last, pos) {
  const out = new Float32Array(VOCAB);
  for (let j = 0; j < VOCAB; j++) out[j] = ((last * 31 + pos * 17 + j * 7) % 101) / 10;
  return out;
}

function greedy(logits) {
  let best = 0;
  for (let j = 1; j < logits.length; j++) if (logits[j] > logits[best]) best = j; // lowest id wins a tie
  return best;
}

function f32(array, shape = [array.length]) {
  const bytes = Buffer.from(array.buffer, array.byteOffset, array.byteLength); // little-endian on x86 and arm64
  return { dtype: "float32", shape, data: bytes.toString("base64") };
}

function unpack(obj, what, dtype) {
  if (obj === null || typeof obj !== "object" || obj.dtype !== dtype || !Array.isArray(obj.shape)) {
    throw new Refusal(INVALID_PARAMS, `${what}: a ${dtype} array`);
  }
  const bytes = Buffer.from(obj.data, "base64");
  const size = dtype === "float32" ? 4 : 8;
  const n = obj.shape.reduce((a, b) => a * b, 1);
  if (bytes.length !== n * size) throw new Refusal(INVALID_PARAMS, `${what}: ${bytes.length} bytes for ${obj.shape}`);
  const copy = new ArrayBuffer(bytes.length); // aligned
  new Uint8Array(copy).set(bytes);
  return dtype === "float32" ? new Float32Array(copy) : new Float64Array(copy);
}

// -- the engine's state ---------------------------------------------------------------------------------------------
let initialized = false;
let version = PROTOCOL_VERSION;
let shutDown = false;
let handles = 0;
const sessions = new Map(); // handle -> {history: tokens the state consumed}
const states = new Map(); // handle -> {history}
const prefills = new Map(); // handle -> an open stepped prefill
const hosts = new Map(); // handle -> a lane host (lanes.js)
const samplers = new Map(); // handle -> a sampler (lanes.js)

function newHandle(kind) {
  handles += 1;
  return `${kind}-${handles}`;
}

function getHandle(map, handle, kind) {
  const obj = map.get(handle);
  if (obj === undefined) throw new Refusal(UNKNOWN_HANDLE, `no ${kind} ${handle}`);
  return obj;
}

// A state's bytes: its tokens as little-endian int32 (equal content, equal bytes); the digest is their sha256.
function stateBytes(history) {
  return Buffer.from(Int32Array.from(history).buffer);
}

function digest(history) {
  return crypto.createHash("sha256").update(stateBytes(history)).digest("hex");
}

// One forward over `fed` from the state's position: logits [fed.length, VOCAB], the state advanced.
function forwardRows(history, fed) {
  const out = new Float32Array(fed.length * VOCAB);
  fed.forEach((t, i) => {
    history.push(t);
    out.set(logitsAfter(t, history.length), i * VOCAB);
  });
  return out;
}

function checkIds(ids, what) {
  if (Array.isArray(ids) && ids.some((t) => typeof t !== "number")) throw new Refusal(INVALID_PARAMS, `${what}: integers`);
  if (!Array.isArray(ids) || !ids.every(Number.isInteger)) throw new Refusal(INVALID_PARAMS, `${what}: integers`);
  ids.forEach((t, i) => {
    if (t < 0 || t >= VOCAB) throw new Refusal(INVALID_INPUT, `${what}[${i}] = ${t} is outside [0, ${VOCAB})`);
  });
}

async function generate(params, rid) {
  const session = sessions.get(params.session);
  if (session === undefined) throw new Refusal(UNKNOWN_HANDLE, `no session ${params.session}`);
  const { prompt, max_tokens: maxTokens, stop_tokens: stopTokens, sampler } = params;
  checkIds(prompt, "prompt");
  checkIds(stopTokens, "stop_tokens");
  if (prompt.length === 0) throw new Refusal(INVALID_INPUT, "prompt is empty");
  if (!Number.isInteger(maxTokens) || maxTokens < 0) throw new Refusal(INVALID_PARAMS, "max_tokens: integer >= 0");
  if (prompt.length + Math.max(maxTokens, 1) - 1 > CONTEXT) throw new Refusal(INVALID_INPUT, "context exceeded");
  const stops = new Set(stopTokens);
  const tokens = [];
  let decodeForwards = 0, prefillForwards = 0, polls = 0, logits = null;

  const forward = (start, fed) => {
    notify("$/forward", { request: rid, start, tokens: fed }); // reported before it runs
    session.history.length = start;
    session.history.push(...fed);
    logits = logitsAfter(fed[fed.length - 1], session.history.length);
  };

  for (;;) {
    if (tokens.length > 0 && stops.has(tokens[tokens.length - 1])) break;
    if (tokens.length >= maxTokens) break;
    polls += 1;
    const { cancelled } = await request("$/poll", { request: rid });
    if (cancelled) break;
    if (tokens.length === 0) {
      forward(0, prompt); // no prefix reuse: the state starts over at 0 for each prompt
      prefillForwards += 1;
    } else {
      forward(session.history.length, [tokens[tokens.length - 1]]);
      decodeForwards += 1;
    }
    let token;
    if (sampler === "harness") {
      token = (await request("$/sample", { request: rid, logits: f32(logits) })).token;
    } else {
      token = greedy(logits);
    }
    tokens.push(token);
    notify("$/token", { request: rid, token });
  }
  let stopReason = "cancelled";
  if (tokens.length > 0 && stops.has(tokens[tokens.length - 1])) stopReason = "stop_token";
  else if (tokens.length >= maxTokens) stopReason = "max_tokens";
  return {
    tokens,
    stop_reason: stopReason,
    claims: { decode_forwards: decodeForwards, prefill_forwards: prefillForwards, polls },
  };
}

async function serve(method, params, rid) {
  if (method === "initialize") {
    const offered = VERSIONS[params.protocolVersion];
    if (offered === undefined) {
      throw new Refusal(UNSUPPORTED_PROTOCOL_VERSION, `this engine speaks ${Object.keys(VERSIONS).join(" and ")}`);
    }
    initialized = true;
    version = params.protocolVersion;
    return { protocolVersion: version, engine: { name: "node-toy", version: "1.2.0" }, capabilities: offered };
  }
  if (!initialized) throw new Refusal(SERVER_NOT_INITIALIZED, `${method} before initialize`);
  if (shutDown) throw new Refusal(INVALID_REQUEST, `${method} after shutdown`);
  switch (method) {
    case "shutdown":
      shutDown = true;
      return {};
    case "load_model":
      if (params.weights === "q4_k") throw new Refusal(INVALID_INPUT, "weights q4_k: this engine has no quantized weights");
      handles += 1;
      return { model: `toy-${handles}`, config: { vocab_size: VOCAB, max_position_embeddings: CONTEXT, chunk_size: 1 } };
    case "new_session":
      handles += 1;
      sessions.set(`session-${handles}`, { history: [] });
      return { session: `session-${handles}` };
    case "release_session":
      if (!sessions.delete(params.session)) throw new Refusal(UNKNOWN_HANDLE, `no session ${params.session}`);
      return {};
    case "generate":
      return generate(params, rid);
  }
  const handler = REQUESTS[method];
  if (
    handler === undefined ||
    (version === "falsify-engine/1" && V11.has(method)) ||
    (version !== PROTOCOL_VERSION && V12.has(method))
  ) {
    throw new Refusal(METHOD_NOT_FOUND, `no method ${method}`);
  }
  return handler(params, rid);
}

// -- capability state -----------------------------------------------------------------------------------------------
function checkContext(pos, n) {
  if (pos + n > CONTEXT) throw new Refusal(INVALID_INPUT, `${pos} + ${n} tokens exceed the context of ${CONTEXT}`);
}

const REQUESTS = {
  new_state: () => {
    const handle = newHandle("state");
    states.set(handle, { history: [] });
    return { state: handle, pos: 0 };
  },
  copy_state: (params) => {
    const state = getHandle(states, params.state, "state");
    const handle = newHandle("state");
    states.set(handle, { history: [...state.history] });
    return { state: handle, pos: state.history.length };
  },
  release_state: (params) => {
    getHandle(states, params.state, "state");
    states.delete(params.state);
    return {};
  },
  forward: (params) => {
    const state = getHandle(states, params.state, "state");
    checkIds(params.tokens, "tokens");
    if (params.tokens.length === 0) throw new Refusal(INVALID_PARAMS, "tokens: at least one");
    checkContext(state.history.length, params.tokens.length);
    const rows = forwardRows(state.history, params.tokens);
    return { logits: f32(rows, [params.tokens.length, VOCAB]), pos: state.history.length };
  },
  state_bytes: (params) => {
    const state = getHandle(states, params.state, "state");
    return { bytes: stateBytes(state.history).toString("base64"), pos: state.history.length };
  },
  state_digest: (params) => {
    const state = getHandle(states, params.state, "state");
    return { digest: digest(state.history), pos: state.history.length };
  },
  prefill_open: prefillOpen,
  prefill_step: prefillStep,
  // capability lanes (1.1)
  lane_host: (params) => {
    const opt = (k, d) => (params[k] === null || params[k] === undefined ? d : params[k]);
    for (const k of ["chunk_cap", "pages", "page_size", "max_streams"]) {
      const v = opt(k, 1);
      if (!Number.isInteger(v) || v < 1) throw new Refusal(INVALID_INPUT, `${k} must be an integer >= 1, got ${v}`);
    }
    const host = new LaneHost({
      chunkCap: opt("chunk_cap", DEFAULT_CHUNK_CAP),
      pages: opt("pages", 256),
      pageSize: opt("page_size", 16),
      maxStreams: opt("max_streams", 8),
      context: CONTEXT,
      step: (history, fed) => forwardRows(history, fed).subarray((fed.length - 1) * VOCAB),
      greedy,
    });
    const handle = newHandle("host");
    hosts.set(handle, host);
    return { host: handle };
  },
  lane_submit: (params) => {
    const host = getHandle(hosts, params.host, "host");
    checkIds(params.prompt, "prompt");
    if (params.prompt.length === 0) throw new Refusal(INVALID_INPUT, "prompt is empty");
    if (!Number.isInteger(params.max_tokens) || params.max_tokens < 1) {
      throw new Refusal(INVALID_INPUT, `max_tokens must be an integer >= 1, got ${params.max_tokens}`);
    }
    try {
      return { stream: host.submit(params.prompt, params.max_tokens, params.cancel) };
    } catch (err) {
      if (err instanceof LaneRefused) throw new Refusal(LANE_REFUSED, err.message);
      throw err;
    }
  },
  lane_round: async (params, rid) => {
    const host = getHandle(hosts, params.host, "host");
    return host.round({
      poll: async (cancel) => (await request("$/poll", { request: rid, cancel })).cancelled,
      forward: (stream, start, tokens) => notify("$/forward", { request: rid, start, tokens, stream }),
      token: (stream, token) => notify("$/token", { request: rid, token, stream }),
    });
  },
  lane_cancel: (params) => streamCall(params, (host, s) => host.cancel(s)),
  lane_resume: (params) => streamCall(params, (host, s) => host.resume(s)),
  lane_leave: (params) => streamCall(params, (host, s) => host.leave(s)),
  lane_status: (params) => getHandle(hosts, params.host, "host").status(),
  lane_digest: (params) => streamCall(params, (host, s) => ({ digest: digest(host.history(s)) })),
  release_lane_host: (params) => {
    getHandle(hosts, params.host, "host");
    hosts.delete(params.host);
    return {};
  },
  // capability sample (1.1)
  new_sampler: (params) => {
    let sampler;
    try {
      sampler = new Sampler(params.temperature, params.top_k, params.top_p, params.seed);
    } catch (err) {
      throw new Refusal(INVALID_INPUT, err.message);
    }
    const handle = newHandle("sampler");
    samplers.set(handle, sampler);
    return { sampler: handle };
  },
  sample_pick: (params) => {
    const sampler = getHandle(samplers, params.sampler, "sampler");
    const logits = unpack(params.logits, "logits", "float32");
    return { tokens: sampler.pick(logits, unpack(params.u, "u", "float64")) };
  },
  sample_draw: (params) => {
    const sampler = getHandle(samplers, params.sampler, "sampler");
    return { token: sampler.draw(unpack(params.logits, "logits", "float32")) };
  },
  greedy_pick: (params) => ({ token: pickGreedy(unpack(params.logits, "logits", "float32")) }),
  // 1.2: count successive sample_draw answers on one row, in one round trip
  sample_draws: (params) => {
    const sampler = getHandle(samplers, params.sampler, "sampler");
    const logits = unpack(params.logits, "logits", "float32");
    const count = params.count;
    if (!Number.isInteger(count) || count < 1 || count > MAX_DRAWS) {
      throw new Refusal(INVALID_PARAMS, `params.count: expected an integer in [1, ${MAX_DRAWS}], got ${JSON.stringify(count)}`);
    }
    const tokens = [];
    for (let i = 0; i < count; i++) tokens.push(sampler.draw(logits));
    return { tokens };
  },
};
const V12 = new Set(["sample_draws"]);
const V11 = new Set([
  "lane_host", "lane_submit", "lane_round", "lane_cancel", "lane_resume", "lane_leave", "lane_status",
  "lane_digest", "release_lane_host", "new_sampler", "sample_pick", "sample_draw", "greedy_pick",
]);

function streamCall(params, action) {
  const host = getHandle(hosts, params.host, "host");
  if (!host.holds(params.stream)) throw new Refusal(INVALID_INPUT, `no stream ${params.stream} on this host`);
  try {
    return action(host, params.stream) || {};
  } catch (err) {
    if (err instanceof LaneRefused) throw new Refusal(INVALID_INPUT, err.message);
    throw err;
  }
}

// -- capability prefill: a pass cut at the first of pos + chunk_cap, the next planned start, the prompt's end ----
function positions(values, what, n) {
  checkIds(values, what);
  values.forEach((v) => {
    if (!(v > 0 && v < n)) throw new Refusal(INVALID_INPUT, `${what} must lie strictly inside the prompt (0, ${n}), got ${v}`);
  });
  return values;
}

function prefillOpen(params) {
  let stateHandle = params.state;
  let state = getHandle(states, stateHandle, "state");
  const prompt = params.prompt;
  checkIds(prompt, "prompt");
  if (prompt.length === 0) throw new Refusal(INVALID_INPUT, "prompt is empty");
  const cap = params.chunk_cap === null ? DEFAULT_CHUNK_CAP : params.chunk_cap;
  if (!Number.isInteger(cap) || cap < 1) throw new Refusal(INVALID_INPUT, `chunk_cap must be an integer >= 1, got ${cap}`);
  const marks = new Set(positions(params.marks, "marks", prompt.length));
  const planned = [...new Set([...marks, ...positions(params.starts, "starts", prompt.length)])].sort((a, b) => a - b);
  checkContext(0, prompt.length);
  let best = null; // the longest kept prefix the prompt strictly extends
  for (const k of params.kept) {
    const snap = getHandle(states, k.state, "state");
    const n = k.tokens.length;
    const extends_ = n < prompt.length && k.tokens.every((t, i) => t === prompt[i]);
    if (extends_ && snap.history.length === n && (best === null || n > best.tokens.length)) best = { tokens: k.tokens, snap };
  }
  if (best !== null && best.tokens.length > state.history.length) {
    states.delete(stateHandle); // the given state is released; the stream's state is a copy of the snapshot
    stateHandle = newHandle("state");
    state = { history: [...best.snap.history] };
    states.set(stateHandle, state);
  }
  const pos = state.history.length;
  if (!(pos < prompt.length) || !state.history.every((t, i) => t === prompt[i])) {
    throw new Refusal(INVALID_INPUT, `the state holds ${pos} tokens; the prompt must extend them by at least one`);
  }
  const handle = newHandle("prefill");
  prefills.set(handle, { stateHandle, prompt, cap, marks, planned, keepLogits: params.keep_logits === true });
  return { prefill: handle, state: stateHandle, pos, done: false };
}

function nextCut(pos, end, cap, planned) {
  const stop = planned.find((p) => p > pos);
  return Math.min(pos + cap, stop === undefined ? end : stop, end);
}

function prefillStep(params, rid) {
  const pf = getHandle(prefills, params.prefill, "prefill");
  const state = getHandle(states, pf.stateHandle, "state");
  const start = state.history.length;
  if (start >= pf.prompt.length) throw new Refusal(INVALID_INPUT, "the prefill is done");
  const end = nextCut(start, pf.prompt.length, pf.cap, pf.planned);
  const fed = pf.prompt.slice(start, end);
  notify("$/forward", { request: rid, start, tokens: fed });
  const rows = forwardRows(state.history, fed);
  const kept = [];
  if (pf.marks.has(end)) {
    const handle = newHandle("state");
    states.set(handle, { history: [...state.history] });
    kept.push({ tokens: pf.prompt.slice(0, end), state: handle });
  }
  return {
    done: end === pf.prompt.length,
    pos: end,
    logits: f32(rows.slice((fed.length - 1) * VOCAB)),
    chunk_logits: pf.keepLogits ? f32(rows, [fed.length, VOCAB]) : null,
    kept,
  };
}

// One harness request at a time (the protocol is not pipelined); replies to our requests arrive meanwhile.
let queue = Promise.resolve();

const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", (line) => {
  let message;
  try {
    message = JSON.parse(line);
  } catch (err) {
    send({ id: null, error: { code: -32700, message: `not JSON: ${err.message}` } });
    return;
  }
  if (message.method === undefined) {
    const pending = waiting.get(message.id);
    if (pending === undefined) return;
    waiting.delete(message.id);
    if (message.error) pending.reject(new Error(message.error.message));
    else pending.resolve(message.result);
    return;
  }
  if (message.id === undefined) {
    if (message.method === "exit") process.exit(shutDown ? 0 : 1);
    return; // $/cancelRequest: nothing runs long enough here to abandon
  }
  queue = queue.then(async () => {
    try {
      send({ id: message.id, result: await serve(message.method, message.params || {}, message.id) });
    } catch (err) {
      send({ id: message.id, error: { code: err.code || INTERNAL_ERROR, message: err.message } });
    }
  });
});
// stdin closed: answer what was read, then exit 0; waiting for the harness's reply to our own request, exit 1 now.
lines.on("close", () => {
  stdinClosed = true;
  if (waiting.size > 0) process.exit(1);
  queue = queue.then(() => process.exit(0));
});
