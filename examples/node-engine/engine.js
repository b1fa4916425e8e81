#!/usr/bin/env node
// A toy engine in Node.js 20, standard library only, speaking the falsify engine protocol (docs/engine-protocol.md)
// on stdio. It implements `generate` with the harness's cancel poll for a toy model:
//   logits[j] = ((last * 31 + pos * 17 + j * 7) % 101) / 10   (float32), where `last` is the last token fed.
// Run it:  falsify gate --engine exec:"node examples/node-engine/engine.js"
"use strict";

const readline = require("node:readline");

const PROTOCOL_VERSION = "falsify-engine/1";
const VOCAB = 512;
const CONTEXT = 4096;
const INVALID_REQUEST = -32600, METHOD_NOT_FOUND = -32601, INVALID_PARAMS = -32602, INTERNAL_ERROR = -32603;
const UNSUPPORTED_PROTOCOL_VERSION = -32001, SERVER_NOT_INITIALIZED = -32002, INVALID_INPUT = -32010;
const UNKNOWN_HANDLE = -32011;

// -- base protocol: one JSON object per line on stdout; replies to our own requests resolve promises -------------
function send(message) {
  process.stdout.write(JSON.stringify(message) + "\n");
}

let nextId = 0;
const waiting = new Map(); // id of our request -> {resolve, reject}

function request(method, params) {
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

function f32(array) {
  const bytes = Buffer.from(array.buffer, array.byteOffset, array.byteLength); // little-endian on x86 and arm64
  return { dtype: "float32", shape: [array.length], data: bytes.toString("base64") };
}

// -- the engine's state ---------------------------------------------------------------------------------------------
let initialized = false;
let shutDown = false;
let handles = 0;
const sessions = new Map(); // handle -> {history: tokens the state consumed}

function checkIds(ids, what) {
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
    if (params.protocolVersion !== PROTOCOL_VERSION) {
      throw new Refusal(UNSUPPORTED_PROTOCOL_VERSION, `this engine speaks ${PROTOCOL_VERSION}`);
    }
    initialized = true;
    return {
      protocolVersion: PROTOCOL_VERSION,
      engine: { name: "node-toy", version: "1.0.0" },
      capabilities: ["generate"],
    };
  }
  if (!initialized) throw new Refusal(SERVER_NOT_INITIALIZED, `${method} before initialize`);
  if (shutDown) throw new Refusal(INVALID_REQUEST, `${method} after shutdown`);
  switch (method) {
    case "shutdown":
      shutDown = true;
      return {};
    case "load_model":
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
    default:
      throw new Refusal(METHOD_NOT_FOUND, `no method ${method}`);
  }
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
lines.on("close", () => process.exit(shutDown ? 0 : 1));
