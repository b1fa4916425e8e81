// The Node example's lane host (capability lanes, docs/engine-protocol.md §4.14): streams over one toy model, each
// round one decode step per decoding stream, then at most one prefill chunk, round-robin among prefilling streams.
// A submit reserves the pages of its whole run (prompt + max_tokens - 1 positions) from a shared pool, or is
// refused and allocates nothing. Each stream's cancel token is polled (a $/poll naming its handle) before each
// forward that could produce a token: before a decode step, and once before its prefill's first chunk.
"use strict";

class LaneRefused extends Error {}

class LaneHost {
  constructor({ chunkCap, pages, pageSize, maxStreams, context, step, greedy }) {
    Object.assign(this, { chunkCap, pages, pageSize, maxStreams, context, step, greedy });
    this.rounds = 0;
    this.streams = new Map(); // id -> stream
    this.queue = []; // prefilling streams, next chunk's owner first
    this.nextId = 0;
  }

  used() {
    let n = 0;
    for (const s of this.streams.values()) n += s.pages;
    return n;
  }

  submit(prompt, maxTokens, cancel) {
    let held = 0;
    for (const s of this.streams.values()) if (s.pages > 0) held += 1;
    if (held >= this.maxStreams) throw new LaneRefused(`all ${this.maxStreams} lanes are held`);
    const positions = prompt.length + maxTokens - 1; // the last emitted token is never forwarded
    if (positions > this.context) throw new LaneRefused(`${positions} positions exceed the context of ${this.context}`);
    const need = Math.ceil(positions / this.pageSize);
    const free = this.pages - this.used();
    if (need > free) throw new LaneRefused(`${need} pages needed; ${free} of ${this.pages} are free`);
    const id = this.nextId++;
    this.streams.set(id, {
      prompt, maxTokens, cancel, history: [], tokens: [], phase: "prefill", polledFirst: false, pages: need,
    });
    this.queue.push(id);
    return id;
  }

  async poll(io, s) {
    return s.cancel !== null && (await io.poll(s.cancel));
  }

  emit(io, id, s, logits) {
    const token = this.greedy(logits);
    s.tokens.push(token);
    io.token(id, token);
    if (s.tokens.length >= s.maxTokens) this.finish(s);
  }

  finish(s) {
    s.phase = "done";
    s.pages = 0; // the lane and its pages go back to the pool; the history (for its digest) is kept
  }

  async round(io) {
    this.rounds += 1;
    const decoded = [], emitted = [], finished = [];
    for (const [id, s] of [...this.streams].filter(([, s]) => s.phase === "decode")) {
      if (await this.poll(io, s)) {
        this.finish(s);
      } else {
        const fed = [s.tokens[s.tokens.length - 1]];
        io.forward(id, s.history.length, fed);
        const logits = this.step(s.history, fed);
        decoded.push(id);
        this.emit(io, id, s, logits);
        emitted.push(id);
      }
      if (s.phase === "done") finished.push(id);
    }
    let prefilled = null;
    if (this.queue.length > 0) {
      const id = this.queue.shift();
      const s = this.streams.get(id);
      if (!s.polledFirst && (await this.poll(io, s))) {
        this.finish(s);
        finished.push(id);
      } else {
        s.polledFirst = true;
        const start = s.history.length;
        const end = Math.min(start + this.chunkCap, s.prompt.length);
        const fed = s.prompt.slice(start, end);
        io.forward(id, start, fed);
        const logits = this.step(s.history, fed);
        prefilled = [id, start, end];
        if (end === s.prompt.length) {
          s.phase = "decode";
          this.emit(io, id, s, logits);
          emitted.push(id);
          if (s.phase === "done") finished.push(id);
        } else {
          this.queue.push(id);
        }
      }
    }
    return { round: this.rounds, decoded, prefilled, emitted, finished };
  }

  holds(id) {
    return this.streams.has(id);
  }

  cancel(id) {
    const s = this.streams.get(id);
    if (s.phase === "prefill") {
      this.queue = this.queue.filter((q) => q !== id);
      s.phase = "paused";
    } else if (s.phase === "decode") {
      this.finish(s);
    }
  }

  resume(id) {
    const s = this.streams.get(id);
    if (s.phase !== "paused") throw new LaneRefused(`stream ${id} is ${s.phase}, not paused`);
    s.phase = "prefill";
    this.queue.push(id);
  }

  leave(id) {
    this.queue = this.queue.filter((q) => q !== id);
    this.streams.delete(id);
  }

  history(id) {
    return this.streams.get(id).history;
  }

  status() {
    const used = this.used();
    const streams = [...this.streams].map(([id, s]) => ({
      stream: id, phase: s.phase, pos: s.history.length, emitted: s.tokens.length, pages: s.pages,
    }));
    const busy = this.queue.length > 0 || streams.some((s) => s.phase === "decode");
    return { busy, pool: { free: this.pages - used, used, total: this.pages }, streams };
  }
}

module.exports = { LaneHost, LaneRefused };
