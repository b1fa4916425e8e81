// The Node example's sampler (capability sample, docs/engine-protocol.md §4.15): softmax(logits / temperature), cut
// to the top-k logits, then to the top-p nucleus, renormalised; the kept tokens laid out on [0, 1) in descending
// logit order (ties: lower id first), each over its probability; a draw is the token whose interval holds u.
"use strict";

function pickGreedy(logits) {
  let best = 0;
  for (let j = 1; j < logits.length; j++) if (logits[j] > logits[best]) best = j; // lowest id wins a tie
  return best;
}

// splitmix32-style generator: 53-bit uniforms in [0, 1), one per draw, fixed by the seed.
function rng(seed) {
  let a = (seed >>> 0) ^ 0x9e3779b9;
  const next = () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return (t ^ (t >>> 14)) >>> 0;
  };
  return () => ((next() >>> 5) * 67108864 + (next() >>> 6)) / 9007199254740992;
}

class Sampler {
  constructor(temperature, topK, topP, seed) {
    // 1e-6, the protocol's floor: below it logits / temperature can overflow and the CDF turn NaN (issue #48)
    if (typeof temperature !== "number" || !Number.isFinite(temperature) || temperature < 1e-6) {
      throw new Error(`temperature must be a finite number >= 1e-6, got ${JSON.stringify(temperature)}`);
    }
    if (topK !== null && (typeof topK !== "number" || !Number.isInteger(topK) || topK < 1)) {
      throw new Error(`top_k must be an integer >= 1 or null, got ${JSON.stringify(topK)}`);
    }
    if (topP !== null && (typeof topP !== "number" || !(topP > 0 && topP <= 1))) {
      throw new Error(`top_p must be a number in (0, 1] or null, got ${JSON.stringify(topP)}`);
    }
    if (!Number.isInteger(seed)) throw new Error(`seed must be an integer, got ${JSON.stringify(seed)}`);
    Object.assign(this, { temperature, topK, topP, random: rng(seed) });
  }

  layout(logits) {
    let order = Array.from(logits.keys()).sort((i, j) => logits[j] - logits[i] || i - j);
    if (this.topK !== null) order = order.slice(0, this.topK);
    const z0 = logits[order[0]] / this.temperature;
    let cdf = [];
    let sum = 0;
    for (const i of order) {
      sum += Math.exp(logits[i] / this.temperature - z0);
      cdf.push(sum);
    }
    if (this.topP !== null && this.topP < 1) {
      const goal = this.topP * sum;
      let keep = cdf.findIndex((c) => c >= goal) + 1;
      if (keep === 0) keep = cdf.length;
      order = order.slice(0, keep);
      cdf = cdf.slice(0, keep);
    }
    return { order, cdf };
  }

  // The token whose interval holds each u (the layout computed once for all of them).
  pick(logits, us) {
    const { order, cdf } = this.layout(logits);
    const total = cdf[cdf.length - 1];
    return Array.from(us, (u) => {
      const goal = u * total;
      let lo = 0, hi = cdf.length; // the first index whose running sum exceeds goal
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (cdf[mid] <= goal) lo = mid + 1;
        else hi = mid;
      }
      return order[Math.min(lo, order.length - 1)];
    });
  }

  draw(logits) {
    return this.pick(logits, [this.random()])[0]; // exactly one uniform per draw
  }
}

module.exports = { Sampler, pickGreedy };
