/* An adopter's compiled engine, for tests/test_adopter.py: a toy model in C (C99, libc only) behind the falsify
 * engine protocol on stdio (docs/engine-protocol.md), capability `generate`.
 *
 * The model folds each token into a 64-bit hash of the history; the logits after a token are a function of it:
 *     h = h * 6364136223846793005 + token + 1          (mod 2^64, from h = 1442695040888963407)
 *     logits[j] = ((h >> 29) ^ (j * 2654435761)) % 1009 / 100.0f
 * Build: cc -std=c99 -O2 -o build/tinyc tinyc.c       Run: falsify gate --engine exec:build/tinyc
 *
 * The JSON reader is only what this protocol's compact messages need (the harness writes no spaces): a member is
 * found by its quoted key followed by a colon.
 */
#define _POSIX_C_SOURCE 200809L /* getline */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB 64
#define CONTEXT 4096
#define MAX_SESSIONS 65536 /* the harness keeps a session per run it observes */

static int64_t next_id = 0;
static int initialized = 0, shut_down = 0, handles = 0;
static int session_len[MAX_SESSIONS];  /* tokens in each session's state, -1: free */
static int *session_hist[MAX_SESSIONS];  /* the tokens the state consumed, grown as needed */
static int session_cap[MAX_SESSIONS];

/* -- reading ---------------------------------------------------------------------------------------------------- */
static char *line = NULL;
static size_t cap = 0;

static int read_line(void) {
    ssize_t n = getline(&line, &cap, stdin);
    if (n <= 0) return 0;
    if (line[n - 1] == '\n') line[n - 1] = 0;
    return 1;
}

static const char *member(const char *from, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *at = strstr(from, pattern);
    return at ? at + strlen(pattern) : NULL;
}

static int int_member(const char *from, const char *key, long long *out) {
    const char *at = member(from, key);
    if (!at || !(*at == '-' || (*at >= '0' && *at <= '9'))) return 0;
    *out = strtoll(at, NULL, 10);
    return 1;
}

static int str_member(const char *from, const char *key, char *out, size_t size) {
    const char *at = member(from, key);
    if (!at || *at != '"') return 0;
    const char *end = strchr(at + 1, '"');
    if (!end || (size_t)(end - at - 1) >= size) return 0;
    memcpy(out, at + 1, end - at - 1);
    out[end - at - 1] = 0;
    return 1;
}

/* an array of integers: its length, or -1 when absent or not integers */
static int ints_member(const char *from, const char *key, long long *out, int most) {
    const char *at = member(from, key);
    if (!at || *at != '[') return -1;
    int n = 0;
    at++;
    while (*at && *at != ']') {
        char *end;
        long long v = strtoll(at, &end, 10);
        if (end == at || n >= most) return -1;
        out[n++] = v;
        at = end;
        if (*at == ',') at++;
    }
    return n;
}

/* -- writing ---------------------------------------------------------------------------------------------------- */
static void reply_error(long long id, int code, const char *message) {
    printf("{\"id\":%lld,\"error\":{\"code\":%d,\"message\":\"%s\"}}\n", id, code, message);
    fflush(stdout);
}

static void print_ints(const long long *v, int n) {
    putchar('[');
    for (int i = 0; i < n; i++) printf(i ? ",%lld" : "%lld", v[i]);
    putchar(']');
}

/* send a request of ours and wait for its reply (the harness sends nothing else meanwhile, but a $/cancelRequest) */
static int ask(const char *method, long long request, const char *extra) {
    next_id++;
    printf("{\"id\":%lld,\"method\":\"%s\",\"params\":{\"request\":%lld%s}}\n", (long long)next_id, method,
           request, extra);
    fflush(stdout);
    while (read_line()) {
        long long id;
        if (member(line, "method")) continue; /* a notification ($/cancelRequest): nothing here runs long */
        if (int_member(line, "id", &id) && id == next_id) return 1;
    }
    exit(1); /* stdin closed mid-request */
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void base64(const unsigned char *in, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) | (i + 2 < n ? in[i + 2] : 0);
        out[o++] = B64[v >> 18 & 63];
        out[o++] = B64[v >> 12 & 63];
        out[o++] = i + 1 < n ? B64[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? B64[v & 63] : '=';
    }
    out[o] = 0;
}

/* -- the model -------------------------------------------------------------------------------------------------- */
static void logits_of(const int *hist, int len, float *logits) {
    uint64_t h = 1442695040888963407ULL;
    for (int i = 0; i < len; i++) h = h * 6364136223846793005ULL + (uint64_t)hist[i] + 1;
    for (uint32_t j = 0; j < VOCAB; j++) logits[j] = (float)(((h >> 29) ^ (j * 2654435761u)) % 1009) / 100.0f;
}

static int greedy(const float *logits) {
    int best = 0;
    for (int j = 1; j < VOCAB; j++)
        if (logits[j] > logits[best]) best = j; /* the lowest id wins a tie */
    return best;
}

/* -- generate --------------------------------------------------------------------------------------------------- */
static long long prompt[CONTEXT], stops[VOCAB], tokens[CONTEXT];

static int stopped(int n, int n_stops, long long max_tokens) {
    if (n > 0)
        for (int s = 0; s < n_stops; s++)
            if (tokens[n - 1] == stops[s]) return 1;
    return n >= max_tokens;
}

static void forward(long long rid, int s, int start, const long long *fed, int n_fed, float *logits) {
    printf("{\"method\":\"$/forward\",\"params\":{\"request\":%lld,\"start\":%d,\"tokens\":", rid, start);
    print_ints(fed, n_fed);
    printf("}}\n");
    fflush(stdout);
    session_len[s] = start;
    if (start + n_fed > session_cap[s]) {
        session_cap[s] = start + n_fed + 64;
        session_hist[s] = realloc(session_hist[s], sizeof(int) * session_cap[s]);
        if (!session_hist[s]) exit(1);
    }
    for (int i = 0; i < n_fed; i++) session_hist[s][session_len[s]++] = (int)fed[i];
    logits_of(session_hist[s], session_len[s], logits);
}

static void generate(long long rid, const char *params) {
    char handle[32], sampler[16];
    long long max_tokens;
    int s;
    if (!str_member(params, "session", handle, sizeof handle) || sscanf(handle, "session-%d", &s) != 1 || s < 0 ||
        s >= MAX_SESSIONS || session_len[s] < 0) {
        reply_error(rid, -32011, "no such session");
        return;
    }
    int n_prompt = ints_member(params, "prompt", prompt, CONTEXT);
    int n_stops = ints_member(params, "stop_tokens", stops, VOCAB);
    if (n_prompt < 0 || n_stops < 0 || !int_member(params, "max_tokens", &max_tokens) || max_tokens < 0 ||
        !str_member(params, "sampler", sampler, sizeof sampler)) {
        reply_error(rid, -32602, "generate: session, prompt, max_tokens, stop_tokens, sampler");
        return;
    }
    if (n_prompt == 0) {
        reply_error(rid, -32010, "prompt is empty");
        return;
    }
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= VOCAB) {
            reply_error(rid, -32010, "a prompt token id is outside the vocabulary");
            return;
        }
    for (int i = 0; i < n_stops; i++)
        if (stops[i] < 0 || stops[i] >= VOCAB) {
            reply_error(rid, -32010, "a stop token id is outside the vocabulary");
            return;
        }
    if (n_prompt + (max_tokens > 1 ? max_tokens : 1) - 1 > CONTEXT) {
        reply_error(rid, -32010, "context exceeded");
        return;
    }
    int harness = strcmp(sampler, "harness") == 0;
    float logits[VOCAB];
    int n = 0;
    long long decode_forwards = 0, prefill_forwards = 0, polls = 0;
    for (;;) {
        if (stopped(n, n_stops, max_tokens)) break;
        polls++;
        ask("$/poll", rid, "");
        if (strstr(line, "\"cancelled\":true")) break;
        if (n == 0) {
            forward(rid, s, 0, prompt, n_prompt, logits);
            prefill_forwards++;
        } else {
            forward(rid, s, session_len[s], &tokens[n - 1], 1, logits);
            decode_forwards++;
        }
        long long token;
        if (harness) {
            char extra[512];
            char data[(VOCAB * 4 + 2) / 3 * 4 + 1];
            base64((const unsigned char *)logits, sizeof logits, data); /* little-endian on x86-64 and arm64 */
            snprintf(extra, sizeof extra, ",\"logits\":{\"dtype\":\"float32\",\"shape\":[%d],\"data\":\"%s\"}", VOCAB,
                     data);
            ask("$/sample", rid, extra);
            if (!int_member(line, "token", &token)) exit(1);
        } else {
            token = greedy(logits);
        }
        tokens[n++] = token;
        printf("{\"method\":\"$/token\",\"params\":{\"request\":%lld,\"token\":%lld}}\n", rid, token);
        fflush(stdout);
    }
    const char *reason = "cancelled";
    if (n > 0 && stopped(n, n_stops, 1 << 30)) reason = "stop_token";
    else if (n >= max_tokens) reason = "max_tokens";
    printf("{\"id\":%lld,\"result\":{\"tokens\":", rid);
    print_ints(tokens, n);
    printf(",\"stop_reason\":\"%s\",\"claims\":{\"decode_forwards\":%lld,\"prefill_forwards\":%lld,\"polls\":%lld}}}\n",
           reason, decode_forwards, prefill_forwards, polls);
    fflush(stdout);
}

/* -- the request loop ------------------------------------------------------------------------------------------- */
int main(void) {
    for (int s = 0; s < MAX_SESSIONS; s++) session_len[s] = -1;
    while (read_line()) {
        char method[64], version[64];
        long long id;
        if (!str_member(line, "method", method, sizeof method)) continue; /* a stray reply: nothing waits for it */
        if (!int_member(line, "id", &id)) {                            /* a notification */
            if (strcmp(method, "exit") == 0) return shut_down ? 0 : 1;
            continue;
        }
        const char *params = member(line, "params");
        params = params ? params : "{}";
        if (strcmp(method, "initialize") == 0) {
            if (!str_member(params, "protocolVersion", version, sizeof version) ||
                strcmp(version, "falsify-engine/1") != 0) {
                reply_error(id, -32001, "this engine speaks falsify-engine/1");
                continue;
            }
            initialized = 1;
            printf("{\"id\":%lld,\"result\":{\"protocolVersion\":\"falsify-engine/1\",\"engine\":{\"name\":\"tinyc\","
                   "\"version\":\"1.0.0\"},\"capabilities\":[\"generate\"]}}\n", id);
            fflush(stdout);
        } else if (!initialized) {
            reply_error(id, -32002, "not initialized");
        } else if (shut_down) {
            reply_error(id, -32600, "after shutdown");
        } else if (strcmp(method, "shutdown") == 0) {
            shut_down = 1;
            printf("{\"id\":%lld,\"result\":{}}\n", id);
            fflush(stdout);
        } else if (strcmp(method, "load_model") == 0) {
            printf("{\"id\":%lld,\"result\":{\"model\":\"tinyc-%d\",\"config\":{\"vocab_size\":%d,"
                   "\"max_position_embeddings\":%d,\"chunk_size\":1}}}\n", id, ++handles, VOCAB, CONTEXT);
            fflush(stdout);
        } else if (strcmp(method, "new_session") == 0) {
            int s = 0;
            while (s < MAX_SESSIONS && session_len[s] >= 0) s++;
            if (s == MAX_SESSIONS) {
                reply_error(id, -32603, "too many sessions");
                continue;
            }
            session_len[s] = 0;
            printf("{\"id\":%lld,\"result\":{\"session\":\"session-%d\"}}\n", id, s);
            fflush(stdout);
        } else if (strcmp(method, "release_session") == 0) {
            char handle[32];
            int s;
            if (!str_member(params, "session", handle, sizeof handle) || sscanf(handle, "session-%d", &s) != 1 ||
                s < 0 || s >= MAX_SESSIONS || session_len[s] < 0) {
                reply_error(id, -32011, "no such session");
                continue;
            }
            session_len[s] = -1;
            printf("{\"id\":%lld,\"result\":{}}\n", id);
            fflush(stdout);
        } else if (strcmp(method, "generate") == 0) {
            generate(id, params);
        } else {
            reply_error(id, -32601, "no such method");
        }
    }
    return shut_down ? 0 : 1;
}
