/* The OTLP trace scanner: the attribution job's fast path through a Kafka message.
 *
 * Walks the protobuf wire bytes of one ExportTraceServiceRequest and returns, column by
 * column, the spans that are plainly a touchpoint or an order (exactly what
 * pipelines/codec/otlp.py makes of them), counts the spans that are plainly a valid GPU
 * call or plain tracing, and names every other span for the general Python path. It
 * decides nothing it is unsure of: a message whose bytes it does not fully accept (a
 * group, a known field with an unexpected wire type, invalid UTF-8, nesting deeper than
 * it follows, ...) is returned as None and decoded the general way, which is also what
 * dead-letters malformed input. Only the rules' fast cases live here; every rule has its
 * general form in Python (schemas/telemetry.py), and tests hold the two to the same
 * output on random and rule-by-rule spans.
 *
 * scan(payload: bytes, latest_ns: int, buckets: int) -> None | (
 *     spans, unbuilt_gpu_calls, ignored,
 *     touches: (seq, bucket, ts_ms, users, channels, campaigns, trace_ids, span_ids),
 *     orders: (seq, bucket, ts_ms, users, order_ids, revenues, currencies, trace_ids,
 *              span_ids),
 *     general: bytes of int32 quadruples (resource, scope, span, seq))
 * seq and bucket are bytes of int32, ts_ms of int64, revenues of float64; the rest lists
 * of str. seq is the span's place in the message; bucket is zlib.crc32(user) % buckets.
 *
 * scan_packed(payload, latest_ns, buckets) -> None | (
 *     spans, unbuilt_gpu_calls, ignored, ts_ms: bytes of int64 (every touch and order, in
 *     message order), {bucket: (newest ts_ms, (touches, orders, [touch columns],
 *                                               [order columns]))})
 * the same reading, for a message whose every span is plainly a touch, an order, a GPU
 * call or plain tracing: each bucket's events already in the form of
 * schemas.events.pack (a column of strings as one str joined by NUL, numbers as bytes),
 * so that no Python object is made per event. None (use scan) for anything else: a span
 * for the general path, a value holding a NUL, bytes scan gives up on.
 * Both give None for a request without spans: the general rules dead-letter it.
 *
 * scan_packed_group(payloads, latest_ns, buckets, min_ts, order_after) -> (
 *     per payload: None (left to the caller: not bytes, a value holding a NUL, an
 *                  order at or before order_after (behind the watermark)) or
 *                  (spans, unbuilt_gpu_calls, ignored, events, late, general),
 *     segments: [(first, end, {bucket: (newest ts_ms, packed, order messages)})])
 * scan_packed for several messages at once, so that each bucket's events of consecutive
 * messages come as one packed batch (a Python object per bucket and segment, not per
 * message): a segment holds the messages first..end-1, every one scanned (a message left
 * to the caller ends the segment before it, so events keep the messages' order); order
 * messages: bytes of int32, each order's message (its place in payloads). An event before
 * its message's min_ts (late by arrival) is left out of the buckets and counted in
 * `late` (not in `events`): the caller reads those events from the message itself. So
 * is a span for the general path: named in `general` (None: none; else as scan names
 * them), for the caller to decode, and to scan the group again without the message if
 * such a span is a touch or an order after all.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_TEXT 256 /* characters: schemas.telemetry.MAX_TEXT */
#define MAX_DEPTH 24 /* nested AnyValues followed before giving the message up */

/* ---- CRC-32 (zlib's) ------------------------------------------------------------- */

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static uint32_t crc32_of(const uint8_t *p, Py_ssize_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (Py_ssize_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* ---- wire format ----------------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} Cursor;

/* 0 on success; -1 on anything upb might read otherwise (the caller gives up) */
static int varint(Cursor *c, uint64_t *out) {
    uint64_t value = 0;
    for (int i = 0; i < 10; i++) {
        if (c->p >= c->end) return -1;
        uint8_t byte = *c->p++;
        if (i == 9 && byte > 1) return -1;
        value |= (uint64_t)(byte & 0x7F) << (7 * i);
        if (!(byte & 0x80)) {
            *out = value;
            return 0;
        }
    }
    return -1;
}

static int tag(Cursor *c, uint32_t *field, int *wire) {
    uint64_t t;
    if (varint(c, &t) || t > 0xFFFFFFFFu) return -1;
    *field = (uint32_t)(t >> 3);
    *wire = (int)(t & 7);
    return *field == 0 ? -1 : 0;
}

static int delimited(Cursor *c, Cursor *inner) {
    uint64_t n;
    if (varint(c, &n) || n > (uint64_t)(c->end - c->p)) return -1;
    inner->p = c->p;
    inner->end = c->p + n;
    c->p += n;
    return 0;
}

static int fixed64(Cursor *c, uint64_t *out) {
    if (c->end - c->p < 8) return -1;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | c->p[i];
    c->p += 8;
    *out = v;
    return 0;
}

/* an unknown field: skipped as upb skips it (groups are left to upb) */
static int skip(Cursor *c, int wire) {
    uint64_t v;
    Cursor inner;
    switch (wire) {
    case 0: return varint(c, &v);
    case 1: return fixed64(c, &v);
    case 2: return delimited(c, &inner);
    case 5:
        if (c->end - c->p < 4) return -1;
        c->p += 4;
        return 0;
    default: return -1;
    }
}

/* Strict UTF-8 (no overlong forms, no surrogates, at most U+10FFFF), as upb checks a
 * proto3 string; counts the characters (what Python's len gives). -1 if invalid. */
static Py_ssize_t utf8_chars(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t chars = 0, i = 0;
    while (i < n) {
        uint8_t b = s[i];
        if (b < 0x80) {
            i += 1;
        } else if (b >= 0xC2 && b <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return -1;
            i += 2;
        } else if (b >= 0xE0 && b <= 0xEF) {
            if (i + 2 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80)
                return -1;
            if (b == 0xE0 && s[i + 1] < 0xA0) return -1; /* overlong */
            if (b == 0xED && s[i + 1] >= 0xA0) return -1; /* surrogate */
            i += 3;
        } else if (b >= 0xF0 && b <= 0xF4) {
            if (i + 3 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 ||
                (s[i + 3] & 0xC0) != 0x80)
                return -1;
            if (b == 0xF0 && s[i + 1] < 0x90) return -1; /* overlong */
            if (b == 0xF4 && s[i + 1] >= 0x90) return -1; /* above U+10FFFF */
            i += 4;
        } else {
            return -1;
        }
        chars++;
    }
    return chars;
}

/* Whether valid UTF-8 text holds a control character: C0 (below U+0020, NUL included),
 * DEL, or C1 (U+0080..U+009F, encoded C2 80..C2 9F). No sink takes a NUL (PostgreSQL text
 * refuses it), and none belongs in a channel, campaign, user or order id: such a span goes
 * the general way, where schemas.telemetry dead-letters it with the reason. */
static int has_control(const uint8_t *s, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t b = s[i];
        if (b < 0x20 || b == 0x7F) return 1;
        if (b == 0xC2 && i + 1 < n && s[i + 1] >= 0x80 && s[i + 1] <= 0x9F) return 1;
    }
    return 0;
}

/* ---- AnyValue -------------------------------------------------------------------- */

enum { K_NONE = 0, K_STR, K_BOOL, K_INT, K_DOUBLE, K_ARRAY, K_KVLIST, K_BYTES };

typedef struct {
    int present;     /* the key occurs */
    int kind;        /* which of the oneof was set last (K_NONE: none) */
    const uint8_t *s; /* K_STR: the text */
    Py_ssize_t len;  /* bytes */
    Py_ssize_t chars;
    int control;     /* K_STR: holds a control character (C0, DEL or C1) */
    int64_t i;       /* K_INT */
    double d;        /* K_DOUBLE */
} Value;

static int any_value(Cursor c, Value *out, int depth);

static int key_value(Cursor c, int depth);

/* ArrayValue {repeated AnyValue values = 1} and KeyValueList {repeated KeyValue values = 1} */
static int repeated_values(Cursor c, int depth, int key_values) {
    uint32_t field;
    int wire;
    while (c.p < c.end) {
        Cursor inner;
        if (tag(&c, &field, &wire)) return -1;
        if (field != 1) {
            if (skip(&c, wire)) return -1;
            continue;
        }
        if (wire != 2 || delimited(&c, &inner)) return -1;
        Value ignored;
        if (key_values ? key_value(inner, depth + 1) : any_value(inner, &ignored, depth + 1))
            return -1;
    }
    return 0;
}

static int value_list(Cursor c, int depth) { return repeated_values(c, depth, 0); }
static int key_value_list(Cursor c, int depth) { return repeated_values(c, depth, 1); }

static int key_value(Cursor c, int depth) { /* KeyValue {1: key, 2: AnyValue} */
    uint32_t field;
    int wire;
    int keys = 0, values = 0;
    while (c.p < c.end) {
        Cursor inner;
        if (tag(&c, &field, &wire)) return -1;
        if (field == 1 || field == 2) {
            if (wire != 2 || delimited(&c, &inner)) return -1;
            if (field == 1) {
                if (keys++ || utf8_chars(inner.p, inner.end - inner.p) < 0) return -1;
            } else {
                Value ignored;
                if (values++ || any_value(inner, &ignored, depth + 1)) return -1;
            }
        } else if (skip(&c, wire)) {
            return -1;
        }
    }
    return 0;
}

/* An AnyValue, validated in full (nested values too); out holds the last oneof set. A
 * oneof message set twice would be merged by upb: given up. */
static int any_value(Cursor c, Value *out, int depth) {
    uint32_t field;
    int wire;
    int messages = 0;
    if (depth > MAX_DEPTH) return -1;
    out->kind = K_NONE;
    while (c.p < c.end) {
        Cursor inner;
        uint64_t v;
        if (tag(&c, &field, &wire)) return -1;
        switch (field) {
        case 1: /* string_value */
            if (wire != 2 || delimited(&c, &inner)) return -1;
            out->chars = utf8_chars(inner.p, inner.end - inner.p);
            if (out->chars < 0) return -1;
            out->control = has_control(inner.p, inner.end - inner.p);
            out->kind = K_STR;
            out->s = inner.p;
            out->len = inner.end - inner.p;
            break;
        case 2: /* bool_value */
            if (wire != 0 || varint(&c, &v)) return -1;
            out->kind = K_BOOL;
            break;
        case 3: /* int_value */
            if (wire != 0 || varint(&c, &v)) return -1;
            out->kind = K_INT;
            out->i = (int64_t)v;
            break;
        case 4: /* double_value */
            if (wire != 1 || fixed64(&c, &v)) return -1;
            out->kind = K_DOUBLE;
            memcpy(&out->d, &v, sizeof v);
            break;
        case 5: /* array_value */
        case 6: /* kvlist_value */
            if (wire != 2 || delimited(&c, &inner) || messages++) return -1;
            if (field == 5 ? value_list(inner, depth) : key_value_list(inner, depth))
                return -1;
            out->kind = field == 5 ? K_ARRAY : K_KVLIST;
            break;
        case 7: /* bytes_value */
            if (wire != 2 || delimited(&c, &inner)) return -1;
            out->kind = K_BYTES;
            break;
        default:
            if (skip(&c, wire)) return -1;
        }
    }
    return 0;
}

/* ---- attribute keys the rules read ----------------------------------------------- */

enum {
    A_CHANNEL, A_CAMPAIGN, A_USER, A_USER_LEGACY, A_ORDER, A_REVENUE, A_CURRENCY,
    A_GPU_UUID, A_GPU_WORKLOAD, A_POD, A_NAMESPACE,
    A_URL_FULL, A_URL_QUERY, A_HTTP_URL, A_HTTP_TARGET, A_REFERER, A_COUNT
};
static const char *const KEYS[A_COUNT] = {
    "marketing.channel", "marketing.campaign", "user.id", "enduser.id", "order.id",
    "order.revenue", "order.currency", "gpu.uuid", "gpu.workload", "k8s.pod.name",
    "k8s.namespace.name", "url.full", "url.query", "http.url", "http.target",
    "http.request.header.referer"};
static Py_ssize_t KEY_LENGTHS[A_COUNT];

static int key_index(const uint8_t *s, Py_ssize_t n) {
    for (int k = 0; k < A_COUNT; k++)
        if (KEY_LENGTHS[k] == n && memcmp(KEYS[k], s, (size_t)n) == 0) return k;
    return -1;
}

/* One map entry {1: key, 2: AnyValue}; the key's value recorded if it is one of KEYS
 * (a later entry of the same key replaces it, as in a protobuf map). */
static int attribute(Cursor c, Value *values) {
    uint32_t field;
    int wire;
    const uint8_t *key = (const uint8_t *)"";
    Py_ssize_t key_len = 0;
    Value value = {0};
    int keys = 0, vals = 0;
    while (c.p < c.end) {
        Cursor inner;
        if (tag(&c, &field, &wire)) return -1;
        if (field == 1 || field == 2) {
            if (wire != 2 || delimited(&c, &inner)) return -1;
            if (field == 1) {
                if (keys++ || utf8_chars(inner.p, inner.end - inner.p) < 0) return -1;
                key = inner.p;
                key_len = inner.end - inner.p;
            } else {
                if (vals++ || any_value(inner, &value, 0)) return -1;
            }
        } else if (skip(&c, wire)) {
            return -1;
        }
    }
    int k = key_index(key, key_len);
    if (k >= 0) {
        value.present = 1;
        values[k] = value;
    }
    return 0;
}

static int text_ok(const Value *v) { /* non-empty text of at most MAX_TEXT characters */
    return v->kind == K_STR && v->chars > 0 && v->chars <= MAX_TEXT && !v->control;
}

/* ---- output columns -------------------------------------------------------------- */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Bytes;

static int put(Bytes *b, const void *value, Py_ssize_t n) {
    if (b->len + n > b->cap) {
        Py_ssize_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->len + n) cap *= 2;
        char *data = PyMem_Realloc(b->data, (size_t)cap);
        if (!data) {
            PyErr_NoMemory();
            return -1;
        }
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->len, value, (size_t)n);
    b->len += n;
    return 0;
}

static PyObject *take_bytes(Bytes *b) {
    PyObject *out = PyBytes_FromStringAndSize(b->data ? b->data : "", b->len);
    PyMem_Free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    return out;
}

static int append_str(PyObject *list, const uint8_t *s, Py_ssize_t n) {
    PyObject *text = PyUnicode_DecodeUTF8((const char *)s, n, NULL);
    if (!text) return -1;
    int rc = PyList_Append(list, text);
    Py_DECREF(text);
    return rc;
}

static int append_hex(PyObject *list, const uint8_t *s, Py_ssize_t n) {
    static const char digits[] = "0123456789abcdef";
    PyObject *text = PyUnicode_New(2 * n, 127);
    if (!text) return -1;
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(text);
    for (Py_ssize_t i = 0; i < n; i++) {
        out[2 * i] = (Py_UCS1)digits[s[i] >> 4];
        out[2 * i + 1] = (Py_UCS1)digits[s[i] & 15];
    }
    int rc = PyList_Append(list, text);
    Py_DECREF(text);
    return rc;
}

static int append_literal(PyObject *list, PyObject *value) { return PyList_Append(list, value); }

/* ---- spans ----------------------------------------------------------------------- */

typedef struct {
    const uint8_t *trace, *span_id;
    Py_ssize_t trace_len, span_len;
    uint64_t start, end;
    Value values[A_COUNT];
} Span;

static int span_of(Cursor c, Span *s) {
    uint32_t field;
    int wire;
    memset(s, 0, sizeof *s);
    s->trace = s->span_id = (const uint8_t *)"";
    while (c.p < c.end) {
        Cursor inner;
        if (tag(&c, &field, &wire)) return -1;
        switch (field) {
        case 1:
        case 2:
        case 5: /* trace_id, span_id, name */
            if (wire != 2 || delimited(&c, &inner)) return -1;
            if (field == 1) {
                s->trace = inner.p;
                s->trace_len = inner.end - inner.p;
            } else if (field == 2) {
                s->span_id = inner.p;
                s->span_len = inner.end - inner.p;
            } else if (utf8_chars(inner.p, inner.end - inner.p) < 0) {
                return -1;
            }
            break;
        case 7:
        case 8: /* start_time_unix_nano, end_time_unix_nano */
            if (wire != 1 || fixed64(&c, field == 7 ? &s->start : &s->end)) return -1;
            break;
        case 9: /* attributes */
            if (wire != 2 || delimited(&c, &inner) || attribute(inner, s->values)) return -1;
            break;
        default:
            if (skip(&c, wire)) return -1;
        }
    }
    return 0;
}

/* What the resource's attributes allow the span rules to take for granted. */
typedef struct {
    int general;        /* it names touches or orders: every span goes the general way */
    int gpu_checkable;  /* _gpu_calls_checked_by_span */
    int has[A_COUNT];
} Resource;

static int resource_of(Cursor c, Resource *r) {
    uint32_t field;
    int wire;
    Value values[A_COUNT];
    memset(values, 0, sizeof values);
    while (c.p < c.end) {
        Cursor inner;
        if (tag(&c, &field, &wire)) return -1;
        if (field == 1) {
            if (wire != 2 || delimited(&c, &inner) || attribute(inner, values)) return -1;
        } else if (skip(&c, wire)) {
            return -1;
        }
    }
    memset(r, 0, sizeof *r);
    for (int k = 0; k < A_COUNT; k++) r->has[k] = values[k].present;
    r->general = r->has[A_CHANNEL] || r->has[A_CAMPAIGN] || r->has[A_USER] ||
                 r->has[A_USER_LEGACY] || r->has[A_ORDER] || r->has[A_REVENUE] ||
                 r->has[A_CURRENCY];
    r->gpu_checkable = 1;
    for (int k = A_GPU_UUID; k <= A_NAMESPACE; k++)
        if (values[k].present && !(values[k].kind == K_STR && values[k].chars <= MAX_TEXT &&
                                   !values[k].control))
            r->gpu_checkable = 0;
    return 0;
}

enum { SPAN_TOUCH, SPAN_ORDER, SPAN_GPU, SPAN_IGNORED, SPAN_GENERAL };

/* udfs/traffic/landing.py LANDING_MARKS, in the same order: a URL holding one of them (any
 * case) may be a landing, its span goes the general way, as does every span with a
 * referrer; tests hold the two lists to the same spans. */
static const char *const LANDING_MARKS[] = {
    "utm_", "gclid=", "gbraid=", "wbraid=", "dclid=", "msclkid=", "fbclid=", "ttclid=",
    "li_fat_id=", "twclid=", "rdt_cid=", "epik=", "sccid=", "yclid="};

static int has_mark(const Value *v) {
    if (v->kind != K_STR) return 0;
    for (size_t m = 0; m < sizeof LANDING_MARKS / sizeof LANDING_MARKS[0]; m++) {
        const char *mark = LANDING_MARKS[m];
        size_t n = strlen(mark);
        for (Py_ssize_t i = 0; i + (Py_ssize_t)n <= v->len; i++) {
            size_t j = 0;
            while (j < n && tolower(v->s[i + (Py_ssize_t)j]) == mark[j]) j++;
            if (j == n) return 1;
        }
    }
    return 0;
}

static int landing_candidate(const Value *v) {
    return v[A_REFERER].present || has_mark(&v[A_URL_FULL]) || has_mark(&v[A_URL_QUERY]) ||
           has_mark(&v[A_HTTP_URL]) || has_mark(&v[A_HTTP_TARGET]);
}

/* schemas/telemetry.py: EARLIEST_NS, MAX_REVENUE (a span outside them is the general
   rules' to dead-letter) */
#define EARLIEST_NS 946684800000000000ULL
#define MAX_REVENUE 1e12

static int classify(const Span *s, const Resource *r, uint64_t latest_ns) {
    const Value *v = s->values;
    if (v[A_CHANNEL].present) {
        if (text_ok(&v[A_CHANNEL]) && v[A_USER].present && text_ok(&v[A_USER]) &&
            (!v[A_CAMPAIGN].present || text_ok(&v[A_CAMPAIGN])) &&
            s->start >= EARLIEST_NS && s->start <= latest_ns)
            return SPAN_TOUCH;
        return SPAN_GENERAL;
    }
    if (v[A_ORDER].present) {
        if (!text_ok(&v[A_ORDER]) || v[A_USER_LEGACY].present || s->start < EARLIEST_NS ||
            s->start > latest_ns)
            return SPAN_GENERAL;
        if (v[A_USER].present && !text_ok(&v[A_USER])) return SPAN_GENERAL;
        if (v[A_CURRENCY].present) {
            const Value *cur = &v[A_CURRENCY];
            if (cur->kind != K_STR || cur->len != 3) return SPAN_GENERAL;
            for (int i = 0; i < 3; i++)
                if (cur->s[i] < 'A' || cur->s[i] > 'Z') return SPAN_GENERAL;
        }
        const Value *rev = &v[A_REVENUE];
        if (!rev->present) return SPAN_GENERAL;
        if (rev->kind == K_DOUBLE) {
            if (!isfinite(rev->d) || rev->d < 0 || rev->d > MAX_REVENUE) return SPAN_GENERAL;
        } else if (rev->kind != K_INT || rev->i < 0 || rev->i > (int64_t)MAX_REVENUE) {
            return SPAN_GENERAL;
        }
        return SPAN_ORDER;
    }
    int gpu = v[A_GPU_UUID].present || r->has[A_GPU_UUID] ||
              ((v[A_POD].present || r->has[A_POD]) &&
               (v[A_GPU_WORKLOAD].present || r->has[A_GPU_WORKLOAD]));
    if (!gpu) return landing_candidate(v) ? SPAN_GENERAL : SPAN_IGNORED;
    if (!r->gpu_checkable || s->start < EARLIEST_NS || s->start > s->end ||
        s->start > latest_ns)
        return SPAN_GENERAL;
    static const int gpu_keys[] = {A_GPU_UUID, A_GPU_WORKLOAD, A_POD, A_NAMESPACE, A_USER,
                                   A_USER_LEGACY};
    for (size_t i = 0; i < sizeof gpu_keys / sizeof gpu_keys[0]; i++) {
        const Value *value = &v[gpu_keys[i]];
        if (value->present && !text_ok(value)) return SPAN_GENERAL;
    }
    return SPAN_GPU;
}

/* ---- packed buckets ---------------------------------------------------------------- */

/* schemas.events.TouchColumns then OrderColumns, field by field */
enum { T_USER, T_TS, T_CHANNEL, T_CAMPAIGN, T_TRACE, T_SPAN,
       O_USER, O_TS, O_ORDER, O_REVENUE, O_CURRENCY, O_TRACE, O_SPAN, COLUMNS };
static const int TEXT_COLUMN[COLUMNS] = {1, 0, 1, 1, 1, 1, 1, 0, 1, 0, 1, 1, 1};

typedef struct {
    Bytes columns[COLUMNS];
    Bytes order_messages; /* scan_packed_group: each order's message, int32 */
    long touches, orders;
    int64_t newest;
} Bucket;

/* one value of a joined column: NUL before all but the first; 1: the value holds a NUL */
static int put_text(Bytes *b, int first, const uint8_t *s, Py_ssize_t n) {
    if (memchr(s, 0, (size_t)n)) return 1;
    if (!first && put(b, "", 1)) return -1;
    return put(b, s, n);
}

static int put_hex(Bytes *b, int first, const uint8_t *s, Py_ssize_t n) {
    static const char digits[] = "0123456789abcdef";
    char out[64];
    if (!first && put(b, "", 1)) return -1;
    for (Py_ssize_t i = 0; i < n; i += 32) {
        Py_ssize_t k = n - i < 32 ? n - i : 32;
        for (Py_ssize_t j = 0; j < k; j++) {
            out[2 * j] = digits[s[i + j] >> 4];
            out[2 * j + 1] = digits[s[i + j] & 15];
        }
        if (put(b, out, 2 * k)) return -1;
    }
    return 0;
}

/* ---- the scan -------------------------------------------------------------------- */

typedef struct {
    uint64_t latest_ns;
    long buckets;
    Bucket *packed; /* scan_packed: one per bucket (NULL: scan) */
    Bytes all_ts;   /* scan_packed: every event's time, in message order */
    long message;        /* scan_packed_group: the message scanned (-1: scan_packed) */
    int64_t min_ts;      /* scan_packed_group: an event before it is late by arrival */
    long late;           /* scan_packed_group: the message's events left out as late */
    int64_t order_after; /* scan_packed_group: an order at or before it is held */
    long spans, gpu, ignored;
    Bytes t_seq, t_bucket, t_ts;
    PyObject *t_users, *t_channels, *t_campaigns, *t_traces, *t_spans;
    Bytes o_seq, o_bucket, o_ts, o_revenue;
    PyObject *o_users, *o_orders, *o_currencies, *o_traces, *o_spans;
    Bytes general;
    PyObject *usd, *empty;
} Scan;

static int put_i32(Bytes *b, long value) {
    int32_t v = (int32_t)value;
    return put(b, &v, sizeof v);
}

/* returns 0, 1 (give the message to scan: a value holds a NUL), -1 (Python error) */
static int emit_packed(Scan *st, const Span *s, int kind, long bucket, int64_t ts) {
    const Value *v = s->values;
    const Value *user = &v[A_USER];
    Bucket *b = &st->packed[bucket];
    Bytes *c = b->columns;
    int rc;
    if (st->message >= 0) { /* a group: what the caller sets apart goes to the general path */
        if (ts < st->min_ts) { /* late by arrival: counted, left to the caller */
            st->late++;
            return 0;
        }
        if (kind == SPAN_ORDER && ts <= st->order_after) return 1;
        if (kind == SPAN_ORDER && put_i32(&b->order_messages, st->message)) return -1;
    } else if (put(&st->all_ts, &ts, sizeof ts)) {
        return -1;
    }
    if (b->touches + b->orders == 0 || ts > b->newest) b->newest = ts;
    if (kind == SPAN_TOUCH) {
        int first = b->touches++ == 0;
        const Value *campaign = &v[A_CAMPAIGN];
        if ((rc = put_text(&c[T_USER], first, user->s, user->len)) ||
            (rc = put(&c[T_TS], &ts, sizeof ts)) ||
            (rc = put_text(&c[T_CHANNEL], first, v[A_CHANNEL].s, v[A_CHANNEL].len)) ||
            (rc = campaign->present ? put_text(&c[T_CAMPAIGN], first, campaign->s, campaign->len)
                                    : put_text(&c[T_CAMPAIGN], first, (const uint8_t *)"", 0)) ||
            (rc = put_hex(&c[T_TRACE], first, s->trace, s->trace_len)) ||
            (rc = put_hex(&c[T_SPAN], first, s->span_id, s->span_len)))
            return rc;
        return 0;
    }
    int first = b->orders++ == 0;
    const Value *rev = &v[A_REVENUE];
    double revenue = rev->kind == K_DOUBLE ? rev->d : (double)rev->i;
    const Value *cur = &v[A_CURRENCY];
    if ((rc = user->present ? put_text(&c[O_USER], first, user->s, user->len)
                            : put_text(&c[O_USER], first, (const uint8_t *)"", 0)) ||
        (rc = put(&c[O_TS], &ts, sizeof ts)) ||
        (rc = put_text(&c[O_ORDER], first, v[A_ORDER].s, v[A_ORDER].len)) ||
        (rc = put(&c[O_REVENUE], &revenue, sizeof revenue)) ||
        (rc = cur->present ? put_text(&c[O_CURRENCY], first, cur->s, cur->len)
                           : put_text(&c[O_CURRENCY], first, (const uint8_t *)"USD", 3)) ||
        (rc = put_hex(&c[O_TRACE], first, s->trace, s->trace_len)) ||
        (rc = put_hex(&c[O_SPAN], first, s->span_id, s->span_len)))
        return rc;
    return 0;
}

static int emit(Scan *st, const Span *s, int kind, int32_t seq) {
    const Value *v = s->values;
    const Value *user = &v[A_USER];
    int has_user = user->present;
    uint32_t crc = has_user ? crc32_of(user->s, user->len) : crc32_of((const uint8_t *)"", 0);
    long bucket = (long)(crc % (uint32_t)st->buckets);
    int64_t ts = (int64_t)(s->start / 1000000u);
    if (st->packed) return emit_packed(st, s, kind, bucket, ts);
    if (kind == SPAN_TOUCH) {
        const Value *campaign = &v[A_CAMPAIGN];
        if (put_i32(&st->t_seq, seq) || put_i32(&st->t_bucket, bucket) ||
            put(&st->t_ts, &ts, sizeof ts) || append_str(st->t_users, user->s, user->len) ||
            append_str(st->t_channels, v[A_CHANNEL].s, v[A_CHANNEL].len) ||
            (campaign->present ? append_str(st->t_campaigns, campaign->s, campaign->len)
                               : append_literal(st->t_campaigns, st->empty)) ||
            append_hex(st->t_traces, s->trace, s->trace_len) ||
            append_hex(st->t_spans, s->span_id, s->span_len))
            return -1;
        return 0;
    }
    const Value *rev = &v[A_REVENUE];
    double revenue = rev->kind == K_DOUBLE ? rev->d : (double)rev->i;
    const Value *cur = &v[A_CURRENCY];
    if (put_i32(&st->o_seq, seq) || put_i32(&st->o_bucket, bucket) ||
        put(&st->o_ts, &ts, sizeof ts) || put(&st->o_revenue, &revenue, sizeof revenue) ||
        (has_user ? append_str(st->o_users, user->s, user->len)
                  : append_literal(st->o_users, st->empty)) ||
        append_str(st->o_orders, v[A_ORDER].s, v[A_ORDER].len) ||
        (cur->present ? append_str(st->o_currencies, cur->s, cur->len)
                      : append_literal(st->o_currencies, st->usd)) ||
        append_hex(st->o_traces, s->trace, s->trace_len) ||
        append_hex(st->o_spans, s->span_id, s->span_len))
        return -1;
    return 0;
}

/* returns 0 (scanned), 1 (give the message to the general path), -1 (Python error) */
static int scan_request(Scan *st, Cursor c) {
    uint32_t field;
    int wire;
    long rs_index = 0;
    while (c.p < c.end) {
        Cursor rs;
        if (tag(&c, &field, &wire)) return 1;
        if (field != 1) {
            if (skip(&c, wire)) return 1;
            continue;
        }
        if (wire != 2 || delimited(&c, &rs)) return 1;
        /* first the resource (it may follow the spans on the wire), then the spans */
        Resource resource;
        Cursor r = rs, found = {NULL, NULL};
        int resources = 0;
        while (r.p < r.end) {
            Cursor inner;
            if (tag(&r, &field, &wire)) return 1;
            if (field == 1 || field == 2) {
                if (wire != 2 || delimited(&r, &inner)) return 1;
                if (field == 1) {
                    if (resources++) return 1; /* upb would merge two */
                    found = inner;
                }
            } else if (skip(&r, wire)) {
                return 1;
            }
        }
        if (found.p == NULL) {
            memset(&resource, 0, sizeof resource);
            resource.gpu_checkable = 1;
        } else if (resource_of(found, &resource)) {
            return 1;
        }
        long ss_index = 0;
        r = rs;
        while (r.p < r.end) { /* well-formed: read once above */
            Cursor ss;
            if (tag(&r, &field, &wire)) return 1;
            if (field != 2) {
                if (skip(&r, wire)) return 1;
                continue;
            }
            if (delimited(&r, &ss)) return 1;
            long span_index = 0;
            while (ss.p < ss.end) {
                Cursor sp;
                if (tag(&ss, &field, &wire)) return 1;
                if (field != 2) {
                    if (skip(&ss, wire)) return 1;
                    continue;
                }
                if (wire != 2 || delimited(&ss, &sp)) return 1;
                Span span;
                if (span_of(sp, &span)) return 1;
                int32_t seq = (int32_t)st->spans++;
                int kind = resource.general ? SPAN_GENERAL : classify(&span, &resource,
                                                                       st->latest_ns);
                if (kind == SPAN_TOUCH || kind == SPAN_ORDER) {
                    int rc = emit(st, &span, kind, seq);
                    if (rc) return rc;
                } else if (kind == SPAN_GPU) {
                    st->gpu++;
                } else if (kind == SPAN_IGNORED) {
                    st->ignored++;
                } else if (st->packed && st->message < 0) {
                    return 1; /* a span for the general path: the message goes to scan */
                } else if (put_i32(&st->general, rs_index) || put_i32(&st->general, ss_index) ||
                           put_i32(&st->general, span_index) || put_i32(&st->general, seq)) {
                    return -1;
                }
                span_index++;
            }
            ss_index++;
        }
        rs_index++;
    }
    return 0;
}

static void scan_free(Scan *st) {
    Bytes *all[] = {&st->t_seq, &st->t_bucket, &st->t_ts, &st->o_seq, &st->o_bucket,
                    &st->o_ts, &st->o_revenue, &st->general, &st->all_ts};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) PyMem_Free(all[i]->data);
    if (st->packed) {
        for (long b = 0; b < st->buckets; b++) {
            for (int k = 0; k < COLUMNS; k++) PyMem_Free(st->packed[b].columns[k].data);
            PyMem_Free(st->packed[b].order_messages.data);
        }
        PyMem_Free(st->packed);
    }
    PyObject *lists[] = {st->t_users, st->t_channels, st->t_campaigns, st->t_traces,
                         st->t_spans, st->o_users, st->o_orders, st->o_currencies,
                         st->o_traces, st->o_spans, st->usd, st->empty};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) Py_XDECREF(lists[i]);
}

/* (payload, latest_ns, buckets) -> the payload's buffer and a cleared Scan; -1: error */
static int scan_args(PyObject *args, Py_buffer *payload, Scan *st) {
    unsigned long long latest_ns;
    long buckets;
    if (!PyArg_ParseTuple(args, "y*Kl", payload, &latest_ns, &buckets)) return -1;
    if (buckets < 1) {
        PyBuffer_Release(payload);
        PyErr_SetString(PyExc_ValueError, "buckets must be at least 1");
        return -1;
    }
    memset(st, 0, sizeof *st);
    st->latest_ns = latest_ns;
    st->buckets = buckets;
    st->message = -1;
    return 0;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer payload;
    Scan st;
    if (scan_args(args, &payload, &st)) return NULL;
    PyObject **lists[] = {&st.t_users, &st.t_channels, &st.t_campaigns, &st.t_traces,
                          &st.t_spans, &st.o_users, &st.o_orders, &st.o_currencies,
                          &st.o_traces, &st.o_spans};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        *lists[i] = PyList_New(0);
        if (!*lists[i]) goto error;
    }
    st.usd = PyUnicode_FromString("USD");
    st.empty = PyUnicode_FromString("");
    if (!st.usd || !st.empty) goto error;
    Cursor c = {(const uint8_t *)payload.buf, (const uint8_t *)payload.buf + payload.len};
    int rc = scan_request(&st, c);
    PyBuffer_Release(&payload);
    if (rc == 0 && st.spans == 0) rc = 1; /* no spans: the general rules dead-letter it */
    if (rc < 0) {
        scan_free(&st);
        return NULL;
    }
    if (rc > 0) {
        scan_free(&st);
        Py_RETURN_NONE;
    }
    PyObject *touches = Py_BuildValue(
        "(NNNOOOOO)", take_bytes(&st.t_seq), take_bytes(&st.t_bucket), take_bytes(&st.t_ts),
        st.t_users, st.t_channels, st.t_campaigns, st.t_traces, st.t_spans);
    PyObject *orders = Py_BuildValue(
        "(NNNOONOOO)", take_bytes(&st.o_seq), take_bytes(&st.o_bucket), take_bytes(&st.o_ts),
        st.o_users, st.o_orders, take_bytes(&st.o_revenue), st.o_currencies, st.o_traces,
        st.o_spans);
    PyObject *out = NULL;
    if (touches && orders)
        out = Py_BuildValue("(lllOON)", st.spans, st.gpu, st.ignored, touches, orders,
                            take_bytes(&st.general));
    Py_XDECREF(touches);
    Py_XDECREF(orders);
    scan_free(&st);
    return out;
error:
    PyBuffer_Release(&payload);
    scan_free(&st);
    return NULL;
}

/* a bucket's events as schemas.events.pack has them (before pickling) */
static PyObject *packed_bucket(Bucket *b) {
    PyObject *columns[COLUMNS] = {NULL};
    for (int k = 0; k < COLUMNS; k++) {
        Bytes *c = &b->columns[k];
        columns[k] = TEXT_COLUMN[k]
                         ? PyUnicode_DecodeUTF8(c->data ? c->data : "", c->len, NULL)
                         : PyBytes_FromStringAndSize(c->data ? c->data : "", c->len);
        if (!columns[k]) {
            for (int j = 0; j < k; j++) Py_DECREF(columns[j]);
            return NULL;
        }
    }
    return Py_BuildValue("(L(ll[NNNNNN][NNNNNNN]))", (long long)b->newest, b->touches,
                         b->orders, columns[T_USER], columns[T_TS], columns[T_CHANNEL],
                         columns[T_CAMPAIGN], columns[T_TRACE], columns[T_SPAN],
                         columns[O_USER], columns[O_TS], columns[O_ORDER],
                         columns[O_REVENUE], columns[O_CURRENCY], columns[O_TRACE],
                         columns[O_SPAN]);
}

static PyObject *scan_packed(PyObject *self, PyObject *args) {
    Py_buffer payload;
    Scan st;
    if (scan_args(args, &payload, &st)) return NULL;
    st.packed = PyMem_Calloc((size_t)st.buckets, sizeof(Bucket));
    if (!st.packed) {
        PyBuffer_Release(&payload);
        return PyErr_NoMemory();
    }
    Cursor c = {(const uint8_t *)payload.buf, (const uint8_t *)payload.buf + payload.len};
    int rc = scan_request(&st, c);
    PyBuffer_Release(&payload);
    if (rc == 0 && st.spans == 0) rc = 1; /* no spans: the general rules dead-letter it */
    if (rc) {
        scan_free(&st);
        if (rc < 0) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *by_bucket = PyDict_New();
    if (!by_bucket) goto error;
    for (long b = 0; b < st.buckets; b++) {
        if (st.packed[b].touches + st.packed[b].orders == 0) continue;
        PyObject *key = PyLong_FromLong(b);
        PyObject *value = key ? packed_bucket(&st.packed[b]) : NULL;
        int failed = !value || PyDict_SetItem(by_bucket, key, value);
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (failed) goto error;
    }
    PyObject *out = Py_BuildValue("(lllNN)", st.spans, st.gpu, st.ignored,
                                  take_bytes(&st.all_ts), by_bucket);
    scan_free(&st);
    return out;
error:
    Py_XDECREF(by_bucket);
    scan_free(&st);
    return NULL;
}

/* the buckets' events scanned so far as {bucket: (newest, packed, order messages)}, the
   buckets emptied for the next segment; NULL: Python error */
static PyObject *take_segment(Scan *st) {
    PyObject *by_bucket = PyDict_New();
    if (!by_bucket) return NULL;
    for (long b = 0; b < st->buckets; b++) {
        Bucket *bucket = &st->packed[b];
        if (bucket->touches + bucket->orders == 0) continue;
        PyObject *key = PyLong_FromLong(b);
        PyObject *packed = key ? packed_bucket(bucket) : NULL; /* (newest, parts) */
        PyObject *messages = packed ? take_bytes(&bucket->order_messages) : NULL;
        PyObject *value = messages ? Py_BuildValue("(OON)", PyTuple_GET_ITEM(packed, 0),
                                                   PyTuple_GET_ITEM(packed, 1), messages)
                                   : NULL;
        int failed = !value || PyDict_SetItem(by_bucket, key, value);
        Py_XDECREF(key);
        Py_XDECREF(packed);
        Py_XDECREF(value);
        if (failed) {
            Py_DECREF(by_bucket);
            return NULL;
        }
        for (int k = 0; k < COLUMNS; k++) bucket->columns[k].len = 0;
        bucket->order_messages.len = 0;
        bucket->touches = bucket->orders = 0;
    }
    return by_bucket;
}

/* undo what the message being scanned added (saved: each bucket's column lengths, then
   its order messages' length, touches, orders and newest) */
static void roll_back(Scan *st, const int64_t *saved) {
    for (long b = 0; b < st->buckets; b++) {
        const int64_t *at = saved + b * (COLUMNS + 4);
        Bucket *bucket = &st->packed[b];
        for (int k = 0; k < COLUMNS; k++) bucket->columns[k].len = (Py_ssize_t)at[k];
        bucket->order_messages.len = (Py_ssize_t)at[COLUMNS];
        bucket->touches = (long)at[COLUMNS + 1];
        bucket->orders = (long)at[COLUMNS + 2];
        bucket->newest = at[COLUMNS + 3];
    }
}

static void save(const Scan *st, int64_t *saved) {
    for (long b = 0; b < st->buckets; b++) {
        int64_t *at = saved + b * (COLUMNS + 4);
        const Bucket *bucket = &st->packed[b];
        for (int k = 0; k < COLUMNS; k++) at[k] = bucket->columns[k].len;
        at[COLUMNS] = bucket->order_messages.len;
        at[COLUMNS + 1] = bucket->touches;
        at[COLUMNS + 2] = bucket->orders;
        at[COLUMNS + 3] = bucket->newest;
    }
}

static PyObject *scan_packed_group(PyObject *self, PyObject *args) {
    PyObject *payloads, *min_ts;
    unsigned long long latest_ns;
    long buckets;
    long long order_after;
    if (!PyArg_ParseTuple(args, "O!KlO!L", &PyList_Type, &payloads, &latest_ns, &buckets,
                          &PyList_Type, &min_ts, &order_after))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(payloads);
    if (buckets < 1 || PyList_GET_SIZE(min_ts) != n) {
        PyErr_SetString(PyExc_ValueError,
                        "buckets must be at least 1, and min_ts as long as payloads");
        return NULL;
    }
    Scan st;
    memset(&st, 0, sizeof st);
    st.latest_ns = latest_ns;
    st.buckets = buckets;
    st.order_after = order_after;
    st.packed = PyMem_Calloc((size_t)buckets, sizeof(Bucket));
    int64_t *saved = PyMem_Calloc((size_t)buckets * (COLUMNS + 4), sizeof(int64_t));
    PyObject *results = PyList_New(n), *segments = PyList_New(0);
    if (!st.packed || !saved || !results || !segments) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto error;
    }
    Py_ssize_t first = 0; /* the open segment's first message */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *payload = PyList_GET_ITEM(payloads, i);
        long long oldest = PyLong_AsLongLong(PyList_GET_ITEM(min_ts, i));
        if (oldest == -1 && PyErr_Occurred()) goto error;
        int rc = 1;
        long spans = st.spans, gpu = st.gpu, ignored = st.ignored;
        long events = 0;
        if (PyBytes_Check(payload) && PyBytes_GET_SIZE(payload) > 0) {
            save(&st, saved);
            st.message = (long)i;
            st.min_ts = oldest;
            st.late = 0;
            st.general.len = 0;
            const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(payload);
            Cursor c = {data, data + PyBytes_GET_SIZE(payload)};
            rc = scan_request(&st, c);
            if (rc < 0) goto error;
            if (rc == 0 && st.spans == spans) rc = 1; /* no spans: the general rules */
            if (rc) {
                roll_back(&st, saved);
            } else {
                for (long b = 0; b < buckets; b++)
                    events += st.packed[b].touches + st.packed[b].orders;
                for (long b = 0; b < buckets; b++)
                    events -= saved[b * (COLUMNS + 4) + COLUMNS + 1] +
                              saved[b * (COLUMNS + 4) + COLUMNS + 2];
            }
        }
        PyObject *result;
        if (rc) {
            st.spans = spans, st.gpu = gpu, st.ignored = ignored;
            if (i > first) { /* the segment before it ends here */
                PyObject *by_bucket = take_segment(&st);
                PyObject *segment = by_bucket ? Py_BuildValue("(nnN)", first, i, by_bucket)
                                              : NULL;
                if (!segment || PyList_Append(segments, segment)) {
                    Py_XDECREF(segment);
                    goto error;
                }
                Py_DECREF(segment);
            }
            first = i + 1;
            Py_INCREF(Py_None);
            result = Py_None;
        } else {
            PyObject *general = st.general.len
                ? PyBytes_FromStringAndSize(st.general.data, st.general.len)
                : (Py_INCREF(Py_None), Py_None);
            if (!general) goto error;
            result = Py_BuildValue("(lllllN)", st.spans - spans, st.gpu - gpu,
                                   st.ignored - ignored, events, st.late, general);
            if (!result) goto error;
        }
        PyList_SET_ITEM(results, i, result);
    }
    if (n > first) {
        PyObject *by_bucket = take_segment(&st);
        PyObject *segment = by_bucket ? Py_BuildValue("(nnN)", first, n, by_bucket) : NULL;
        if (!segment || PyList_Append(segments, segment)) {
            Py_XDECREF(segment);
            goto error;
        }
        Py_DECREF(segment);
    }
    PyMem_Free(saved);
    scan_free(&st);
    return Py_BuildValue("(NN)", results, segments);
error:
    PyMem_Free(saved);
    Py_XDECREF(results);
    Py_XDECREF(segments);
    scan_free(&st);
    return NULL;
}

static PyObject *crc32_bucket(PyObject *self, PyObject *args) {
    Py_buffer data;
    long buckets;
    if (!PyArg_ParseTuple(args, "y*l", &data, &buckets)) return NULL;
    uint32_t crc = crc32_of((const uint8_t *)data.buf, data.len);
    PyBuffer_Release(&data);
    if (buckets < 1) {
        PyErr_SetString(PyExc_ValueError, "buckets must be at least 1");
        return NULL;
    }
    return PyLong_FromUnsignedLong(crc % (uint32_t)buckets);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Scan one OTLP trace request (see the module's source)."},
    {"scan_packed", scan_packed, METH_VARARGS,
     "Scan one OTLP trace request into packed buckets (see the module's source)."},
    {"scan_packed_group", scan_packed_group, METH_VARARGS,
     "Scan consecutive OTLP trace requests into packed buckets (see the module's source)."},
    {"crc32_bucket", crc32_bucket, METH_VARARGS, "zlib.crc32(data) % buckets."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_otlp_scan",
                                    "The attribution job's fast path through OTLP trace "
                                    "requests (pipelines/codec/otlp_scan.c).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__otlp_scan(void) {
    crc_init();
    for (int k = 0; k < A_COUNT; k++) KEY_LENGTHS[k] = (Py_ssize_t)strlen(KEYS[k]);
    return PyModule_Create(&module);
}
