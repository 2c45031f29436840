/*
 * tracekit.parsers._kineto_scan: the native scanner of Kineto (PyTorch profiler) trace events.
 *
 * It does in C what the pure-Python path of tracekit/parsers/kineto.py does with msgspec and
 * DuckDB's read_json: walk the elements of the "traceEvents" array, validate them as JSON, count
 * every event (all, python_function, flow), and keep the complete events ("ph": "X") that are
 * stored, as text columns handed to DuckDB through the Arrow C stream interface (no pyarrow):
 *
 *   cat, name, pid, tid, ts, dur, a0 .. a{n-1}    (a<i>: the value of args[arg_keys[i]])
 *   ts_ns, dur_ns                                  (int64, exact; NULL where the SQL converts)
 *
 * Values are rendered exactly as DuckDB's read_json renders a JSON value read as VARCHAR, so the
 * SQL that converts them (exact decimal us -> ns, TRY_CAST of args) is the same for both paths:
 * strings unescaped; integers as written; other numbers as the shortest round-trip double
 * (Python repr style: 1.5, 1000.0, 1e-07); true/false; null -> NULL; arrays and objects as
 * minified JSON with their numbers rendered the same way and strings re-escaped.
 *
 * The scanner is fed a buffer that starts inside the array (just after '[' or after an earlier
 * call's last consumed byte); it consumes whole elements only and reports how many bytes it
 * consumed, so the caller keeps the partial tail for the next block. The GIL is released while
 * scanning. Two tables (0: device activity, 1: host events) accumulate rows until take().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "_json_text.h"

/* ------------------------------------------------------------------------------------------ */
/* Arrow C data interface (https://arrow.apache.org/docs/format/CDataInterface.html)          */

#define ARROW_FLAG_NULLABLE 2

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

struct ArrowArrayStream {
    int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *out);
    int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *out);
    const char *(*get_last_error)(struct ArrowArrayStream *);
    void (*release)(struct ArrowArrayStream *);
    void *private_data;
};

/* ------------------------------------------------------------------------------------------ */
/* Column buffers: from 64 KiB up they are mapped pages of their own (mremap grows them), so a
 * freed batch goes back to the OS at once instead of staying on a malloc heap of the read-ahead
 * thread: that kept the peak RSS of a 62 MB ingest 8-10 MB higher (docs/performance.md).      */

#if defined(__linux__)
#include <sys/mman.h>
#define OWN_PAGES 65536
static void *cbuf_alloc(size_t n) {
    if (n < OWN_PAGES) return malloc(n);
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}
static void *cbuf_realloc(void *p, size_t old, size_t n) {
    if (old >= OWN_PAGES) {
        void *q = mremap(p, old, n, MREMAP_MAYMOVE);
        return q == MAP_FAILED ? NULL : q;
    }
    if (n < OWN_PAGES) return realloc(p, n);
    void *q = cbuf_alloc(n);
    if (!q) return NULL;
    memcpy(q, p, old);
    free(p);
    return q;
}
static void cbuf_free(void *p, size_t n) {
    if (!p) return;
    if (n >= OWN_PAGES) munmap(p, n);
    else free(p);
}
#else
static void *cbuf_alloc(size_t n) { return malloc(n); }
static void *cbuf_realloc(void *p, size_t old, size_t n) { (void)old; return realloc(p, n); }
static void cbuf_free(void *p, size_t n) { (void)n; free(p); }
#endif

/* ------------------------------------------------------------------------------------------ */
/* Column storage: utf8 columns (int32 offsets, validity bitmap), reference-counted tables.    */

#define N_FIXED 6 /* cat name pid tid ts dur */
#define MAX_ARGS 64
#define N_INT 2 /* ts_ns dur_ns: int64 columns after the text columns */
#define MAX_COLS (N_FIXED + MAX_ARGS + N_INT)

typedef struct {
    char *data;    /* utf8 bytes; int64 columns: unused */
    int64_t len, cap;
    int32_t *offs; /* utf8: rows + 1 offsets; int64 columns: the values */
    uint8_t *valid;
    int64_t nulls;
} Col;

typedef struct {
    atomic_long refs;
    int64_t rows, cap_rows;
    int ncols;
    int64_t bytes;
    Col cols[MAX_COLS];
} Table;

static int is_int_col(const Table *t, int i) { return i >= t->ncols - N_INT; }

/* bytes per row of the offsets (utf8) or values (int64) array */
static size_t col_width(const Table *t, int i) { return is_int_col(t, i) ? sizeof(int64_t) : sizeof(int32_t); }

static atomic_long LIVE_TABLES; /* tables not yet freed (leak checks in the tests) */

static Table *table_new(int ncols) {
    Table *t = calloc(1, sizeof(Table));
    if (!t) return NULL;
    atomic_fetch_add(&LIVE_TABLES, 1);
    atomic_init(&t->refs, 1);
    t->ncols = ncols;
    t->cap_rows = 1024;
    for (int i = 0; i < ncols; i++) {
        Col *c = &t->cols[i];
        c->offs = cbuf_alloc(col_width(t, i) * (t->cap_rows + 1));
        c->valid = cbuf_alloc((t->cap_rows + 7) / 8);
        if (c->valid) memset(c->valid, 0, (t->cap_rows + 7) / 8);
        c->cap = 4096;
        c->data = cbuf_alloc(c->cap);
        if (!c->offs || !c->valid || !c->data) return NULL; /* leak on OOM: process is dying */
        c->offs[0] = 0;
    }
    return t;
}

static void table_decref(Table *t) {
    if (!t) return;
    if (atomic_fetch_sub(&t->refs, 1) == 1) {
        for (int i = 0; i < t->ncols; i++) {
            cbuf_free(t->cols[i].data, (size_t)t->cols[i].cap);
            cbuf_free(t->cols[i].offs, col_width(t, i) * (size_t)(t->cap_rows + 1));
            cbuf_free(t->cols[i].valid, (size_t)(t->cap_rows + 7) / 8);
        }
        free(t);
        atomic_fetch_sub(&LIVE_TABLES, 1);
    }
}

/* make room for one more row; 0 on success */
static int table_grow_rows(Table *t) {
    if (t->rows < t->cap_rows) return 0;
    int64_t nc = t->cap_rows * 2;
    for (int i = 0; i < t->ncols; i++) {
        Col *c = &t->cols[i];
        size_t w = col_width(t, i);
        int32_t *o = cbuf_realloc(c->offs, w * (size_t)(t->cap_rows + 1), w * (size_t)(nc + 1));
        if (!o) return -1;
        c->offs = o;
        uint8_t *v = cbuf_realloc(c->valid, (size_t)(t->cap_rows + 7) / 8, (size_t)(nc + 7) / 8);
        if (!v) return -1;
        memset(v + (t->cap_rows + 7) / 8, 0, (nc + 7) / 8 - (t->cap_rows + 7) / 8);
        c->valid = v;
    }
    t->cap_rows = nc;
    return 0;
}

static int col_reserve(Col *c, int64_t extra) {
    if (c->len + extra <= c->cap) return 0;
    int64_t nc = c->cap * 2;
    while (nc < c->len + extra) nc *= 2;
    if (nc > INT32_MAX) return -1;
    char *d = cbuf_realloc(c->data, (size_t)c->cap, (size_t)nc);
    if (!d) return -1;
    c->data = d;
    c->cap = nc;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* JSON scanning                                                                                */

enum { T_ABSENT = 0, T_STR, T_NUM, T_NULL, T_TRUE, T_FALSE, T_OBJ, T_ARR };

typedef struct {
    const char *s, *e; /* T_STR: the contents between the quotes; others: the whole value */
    int type;
    int esc; /* T_STR: has a backslash; T_NUM: not a plain integer */
} Span;

typedef struct {
    const char *end;
    const char *err;    /* message when malformed */
    const char *errpos; /* where */
    int depth;
} P;

#define INCOMPLETE NULL
#define FAIL(c, p, msg) \
    do {                  \
        (c)->err = (msg); \
        (c)->errpos = (p);\
        return NULL;      \
    } while (0)

/* byte classes: 1 = ends a plain run inside a string ('"', '\\', control characters) */
static unsigned char STR_STOP[256];
static signed char HEXVAL[256];

static inline const char *ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

/* p: just after the opening quote */
static const char *scan_str(P *c, const char *p, Span *sp) {
    const char *s = p, *end = c->end;
    int esc = 0;
    for (;;) {
        while (p < end && !STR_STOP[(unsigned char)*p]) p++;
        if (p >= end) return INCOMPLETE;
        if (*p == '"') break;
        if (*p == '\\') {
            esc = 1;
            if (p + 1 >= end) return INCOMPLETE;
            char x = p[1];
            if (x == 'u') {
                if (p + 6 > end) return INCOMPLETE;
                uint32_t cp = 0;
                for (int i = 2; i < 6; i++) {
                    if (HEXVAL[(unsigned char)p[i]] < 0) FAIL(c, p, "invalid \\u escape in a string");
                    cp = cp << 4 | (uint32_t)HEXVAL[(unsigned char)p[i]];
                }
                /* a lone UTF-16 surrogate is refused, as msgspec (the pure-Python path) refuses it */
                if (cp >= 0xDC00 && cp <= 0xDFFF) FAIL(c, p, "lone UTF-16 surrogate in a string");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (p + 12 > end) return INCOMPLETE;
                    uint32_t lo = 0;
                    int ok = p[6] == '\\' && p[7] == 'u';
                    for (int i = 8; ok && i < 12; i++) {
                        if (HEXVAL[(unsigned char)p[i]] < 0) ok = 0;
                        else lo = lo << 4 | (uint32_t)HEXVAL[(unsigned char)p[i]];
                    }
                    if (!ok || lo < 0xDC00 || lo > 0xDFFF) FAIL(c, p, "lone UTF-16 surrogate in a string");
                    p += 6;
                }
                p += 6;
            } else if (x == '"' || x == '\\' || x == '/' || x == 'b' || x == 'f' || x == 'n' ||
                       x == 'r' || x == 't') {
                p += 2;
            } else {
                FAIL(c, p, "invalid escape in a string");
            }
            continue;
        }
        FAIL(c, p, "control character in a string");
    }
    sp->s = s;
    sp->e = p;
    sp->type = T_STR;
    sp->esc = esc;
    return p + 1;
}

static inline int isdig(char ch) { return ch >= '0' && ch <= '9'; }

static const char *scan_num(P *c, const char *p, Span *sp) {
    const char *s = p, *end = c->end;
    int frac = 0;
    if (*p == '-') {
        if (++p >= end) return INCOMPLETE;
    }
    if (*p == '0') {
        p++;
    } else if (isdig(*p)) {
        while (p < end && isdig(*p)) p++;
    } else {
        FAIL(c, p, "invalid number");
    }
    if (p >= end) return INCOMPLETE;
    if (*p == '.') {
        frac = 1;
        if (++p >= end) return INCOMPLETE;
        if (!isdig(*p)) FAIL(c, p, "invalid number");
        while (p < end && isdig(*p)) p++;
        if (p >= end) return INCOMPLETE;
    }
    if (*p == 'e' || *p == 'E') {
        frac = 1;
        if (++p >= end) return INCOMPLETE;
        if (*p == '+' || *p == '-')
            if (++p >= end) return INCOMPLETE;
        if (!isdig(*p)) FAIL(c, p, "invalid number");
        while (p < end && isdig(*p)) p++;
        if (p >= end) return INCOMPLETE;
    }
    sp->s = s;
    sp->e = p;
    sp->type = T_NUM;
    sp->esc = frac;
    return p;
}

static const char *scan_lit(P *c, const char *p, const char *word, int type, Span *sp) {
    size_t n = strlen(word);
    size_t have = (size_t)(c->end - p);
    if (have < n) {
        if (memcmp(p, word, have) == 0) return INCOMPLETE;
        FAIL(c, p, "invalid literal");
    }
    if (memcmp(p, word, n) != 0) FAIL(c, p, "invalid literal");
    sp->s = p;
    sp->e = p + n;
    sp->type = type;
    return p + n;
}

static const char *scan_value(P *c, const char *p, Span *sp);

/* An object member's key and colon at p: the key in *k; returns where its value starts. */
static const char *scan_key(P *c, const char *p, Span *k) {
    const char *end = c->end;
    if (*p != '"') FAIL(c, p, "expected a key");
    p = scan_str(c, p + 1, k);
    if (!p) return NULL;
    p = ws(p, end);
    if (p >= end) return INCOMPLETE;
    if (*p != ':') FAIL(c, p, "expected ':'");
    p = ws(p + 1, end);
    if (p >= end) return INCOMPLETE;
    return p;
}

/* An object (close == '}') or an array (close == ']') starting at p; validated whole. */
static const char *scan_container(P *c, const char *p, Span *sp, char close) {
    const char *s = p, *end = c->end;
    /* the limit is kineto.MAX_NESTING; the pure-Python path refuses the same depth */
    if (++c->depth > 512) FAIL(c, p, "nesting deeper than 512 levels");
    p = ws(p + 1, end);
    if (p >= end) return INCOMPLETE;
    if (*p != close) {
        for (;;) {
            Span k, v;
            if (close == '}' && !(p = scan_key(c, p, &k))) return NULL;
            p = scan_value(c, p, &v);
            if (!p) return NULL;
            p = ws(p, end);
            if (p >= end) return INCOMPLETE;
            if (*p == close) break;
            if (*p != ',') FAIL(c, p, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
            p = ws(p + 1, end);
            if (p >= end) return INCOMPLETE;
        }
    }
    c->depth--;
    sp->s = s;
    sp->e = p + 1;
    sp->type = close == '}' ? T_OBJ : T_ARR;
    return p + 1;
}

static const char *scan_value(P *c, const char *p, Span *sp) {
    switch (*p) {
        case '"': return scan_str(c, p + 1, sp);
        case '{': return scan_container(c, p, sp, '}');
        case '[': return scan_container(c, p, sp, ']');
        case 't': return scan_lit(c, p, "true", T_TRUE, sp);
        case 'f': return scan_lit(c, p, "false", T_FALSE, sp);
        case 'n': return scan_lit(c, p, "null", T_NULL, sp);
        default:
            if (*p == '-' || isdig(*p)) return scan_num(c, p, sp);
            FAIL(c, p, "unexpected character");
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Rendering values into columns                                                                */

/* Unescape the contents of a JSON string (already validated) into out; returns bytes written.
 * out needs at most (e - s) bytes. Lone surrogates become U+FFFD. */
static int64_t unescape(const char *s, const char *e, char *out) {
    char *o = out;
    while (s < e) {
        const char *bs = memchr(s, '\\', (size_t)(e - s));
        if (!bs) bs = e;
        memcpy(o, s, (size_t)(bs - s));
        o += bs - s;
        s = bs;
        if (s >= e) break;
        char x = s[1];
        s += 2;
        switch (x) {
            case 'b': *o++ = '\b'; break;
            case 'f': *o++ = '\f'; break;
            case 'n': *o++ = '\n'; break;
            case 'r': *o++ = '\r'; break;
            case 't': *o++ = '\t'; break;
            case 'u': {
                uint32_t cp = (uint32_t)(HEXVAL[(unsigned char)s[0]] << 12 | HEXVAL[(unsigned char)s[1]] << 8 |
                                         HEXVAL[(unsigned char)s[2]] << 4 | HEXVAL[(unsigned char)s[3]]);
                s += 4;
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (e - s >= 6 && s[0] == '\\' && s[1] == 'u') {
                        uint32_t lo = (uint32_t)(HEXVAL[(unsigned char)s[2]] << 12 | HEXVAL[(unsigned char)s[3]] << 8 |
                                                 HEXVAL[(unsigned char)s[4]] << 4 | HEXVAL[(unsigned char)s[5]]);
                        if (lo >= 0xDC00 && lo <= 0xDFFF) {
                            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                            s += 6;
                        } else {
                            cp = 0xFFFD;
                        }
                    } else {
                        cp = 0xFFFD;
                    }
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    cp = 0xFFFD;
                }
                if (cp < 0x80) {
                    *o++ = (char)cp;
                } else if (cp < 0x800) {
                    *o++ = (char)(0xC0 | (cp >> 6));
                    *o++ = (char)(0x80 | (cp & 0x3F));
                } else if (cp < 0x10000) {
                    *o++ = (char)(0xE0 | (cp >> 12));
                    *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
                    *o++ = (char)(0x80 | (cp & 0x3F));
                } else {
                    *o++ = (char)(0xF0 | (cp >> 18));
                    *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
                    *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
                    *o++ = (char)(0x80 | (cp & 0x3F));
                }
                break;
            }
            default: *o++ = x; break; /* " \ / */
        }
    }
    return o - out;
}

/* 1 if [s, e) is valid UTF-8 */
static int utf8_ok(const unsigned char *s, const unsigned char *e) {
    while (s < e) {
        while (e - s >= 8) { /* ASCII runs eight bytes at a time */
            uint64_t w;
            memcpy(&w, s, 8);
            if (w & 0x8080808080808080ULL) break;
            s += 8;
        }
        if (s >= e) break;
        if (*s < 0x80) {
            s++;
            continue;
        }
        int n;
        uint32_t cp;
        if ((*s & 0xE0) == 0xC0) { n = 1; cp = *s & 0x1F; }
        else if ((*s & 0xF0) == 0xE0) { n = 2; cp = *s & 0x0F; }
        else if ((*s & 0xF8) == 0xF0) { n = 3; cp = *s & 0x07; }
        else return 0;
        if (e - s <= n) return 0;
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i] & 0x3F);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        s += n + 1;
    }
    return 1;
}

/* A non-integer JSON number as DuckDB renders it: the shortest round-trip double, Python repr
 * style. Writes to out (>= 32 bytes); returns length, or -1 when the text is kept as written
 * (out of double range). */
static int render_double_as(const char *s, const char *e, char *out, int nested);

static int render_double(const char *s, const char *e, char *out) { return render_double_as(s, e, out, 0); }

/* The same number as yyjson writes it inside an array or object (DuckDB renders nested values
 * with yyjson): the shortest round-trip digits, fixed notation when the decimal exponent is in
 * [-6, 20] (".0" added to whole numbers), else "1.5e-7" / "1e308" (no '+', no zero padding). */
static int render_double_nested(const char *s, const char *e, char *out) { return render_double_as(s, e, out, 1); }

/* Fixed notation of the significant digits mant[0..m) with decimal exponent exp10 (the first
 * digit's place): "0.000123" for exp10 < 0, "1230.0" / "12.3" otherwise; returns the end. */
static char *write_fixed(char *o, const char *mant, int m, int exp10) {
    if (exp10 < 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -exp10 - 1; i++) *o++ = '0';
        memcpy(o, mant, (size_t)m);
        return o + m;
    }
    for (int i = 0; i <= exp10; i++) *o++ = i < m ? mant[i] : '0';
    *o++ = '.';
    if (m > exp10 + 1) {
        memcpy(o, mant + exp10 + 1, (size_t)(m - exp10 - 1));
        return o + m - exp10 - 1;
    }
    *o++ = '0';
    return o;
}

/* The mantissa of exponent notation: "1" or "1.23"; returns the end. */
static char *write_mantissa(char *o, const char *mant, int m) {
    *o++ = mant[0];
    if (m > 1) {
        *o++ = '.';
        memcpy(o, mant + 1, (size_t)(m - 1));
        o += m - 1;
    }
    return o;
}

static int render_double_as(const char *s, const char *e, char *out, int nested) {
    char tmp[64];
    size_t n = (size_t)(e - s);
    if (n >= sizeof tmp) return -1;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    double d = strtod(tmp, NULL);
    if (d != d || d > 1.7976931348623157e308 || d < -1.7976931348623157e308) return -1;
    if (d == 0) {
        /* DuckDB prints -0.0 as "-0.0" like Python */
        return sprintf(out, "%s", (tmp[0] == '-') ? "-0.0" : "0.0");
    }
    char digits[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(digits, sizeof digits, "%.*e", prec - 1, d);
        if (strtod(digits, NULL) == d) break;
    }
    /* digits: [-]D[.DDD]e[+-]XX */
    char mant[24];
    int m = 0, neg = 0;
    const char *q = digits;
    if (*q == '-') { neg = 1; q++; }
    while (*q && *q != 'e') {
        if (*q != '.') mant[m++] = *q;
        q++;
    }
    mant[m] = 0;
    int exp10 = atoi(q + 1);
    char *o = out;
    if (neg) *o++ = '-';
    if (nested) {
        if (exp10 > -7 && exp10 < 21) return (int)(write_fixed(o, mant, m, exp10) - out);
        o = write_mantissa(o, mant, m);
        o += sprintf(o, "e%d", exp10);
        return (int)(o - out);
    }
    /* Python repr switches to exponent form below 1e-4 and from 1e16: repr(0.0001) = '0.0001',
     * repr(0.00001) = '1e-05' */
    if (exp10 >= -4 && exp10 < 16) return (int)(write_fixed(o, mant, m, exp10) - out);
    o = write_mantissa(o, mant, m);
    o += sprintf(o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    return (int)(o - out);
}

/* JSON string contents re-escaped the way DuckDB (yyjson) writes them */
static int put_json_string(Buf *b, const char *s, const char *e, int esc, Buf *scratch) {
    const char *u = s;
    int64_t n = e - s;
    if (esc) {
        if (scratch->cap < n) {
            char *d = realloc(scratch->data, n + 16);
            if (!d) return -1;
            scratch->data = d;
            scratch->cap = n + 16;
        }
        n = unescape(s, e, scratch->data);
        u = scratch->data;
    }
    return put_json_str(b, u, n, JSON_HEX_UPPER);
}

/* an array/object value, minified, numbers and strings re-rendered (already validated) */
static int put_json_min(Buf *b, const char *p, const char *e, Buf *scratch) {
    P c = {e, NULL, NULL, 0};
    while (p < e) {
        char ch = *p;
        if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t') {
            p++;
        } else if (ch == '"') {
            Span sp;
            const char *q = scan_str(&c, p + 1, &sp);
            if (!q) return -1;
            if (put_json_string(b, sp.s, sp.e, sp.esc, scratch)) return -1;
            p = q;
        } else if (ch == '-' || isdig(ch)) {
            const char *q = p;
            while (q < e && (isdig(*q) || *q == '-' || *q == '+' || *q == '.' || *q == 'e' || *q == 'E')) q++;
            char out[48];
            int frac = 0;
            for (const char *r = p; r < q; r++) frac |= (*r == '.' || *r == 'e' || *r == 'E');
            int k = frac ? render_double_nested(p, q, out) : -1;
            if (!frac && q - p == 2 && p[0] == '-' && p[1] == '0') {
                if (buf_put(b, "0", 1)) return -1;
            } else if (k >= 0) {
                if (buf_put(b, out, k)) return -1;
            } else if (buf_put(b, p, q - p)) {
                return -1;
            }
            p = q;
        } else {
            if (buf_put(b, p, 1)) return -1;
            p++;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* The scanner object                                                                           */

enum { S_FIRST = 0, S_VALUE, S_AFTER, S_DONE };

typedef struct {
    PyObject_HEAD
    int state;
    int keep_python;
    int n_args;
    char *arg_keys[MAX_ARGS];
    Py_ssize_t arg_len[MAX_ARGS];
    int n_dev;
    char *dev_cats[32];
    Py_ssize_t dev_len[32];
    Table *tables[2];
    long long n_events, n_python, n_flow;
    Buf scratch, render;
    const char *err;
    Py_ssize_t errpos;
} Scanner;

static int str_eq(const Span *sp, const char *lit, Py_ssize_t n, Buf *scratch) {
    if (sp->type != T_STR) return 0;
    if (!sp->esc) return (sp->e - sp->s) == n && memcmp(sp->s, lit, (size_t)n) == 0;
    int64_t m = sp->e - sp->s;
    if (scratch->cap < m) {
        char *d = realloc(scratch->data, m + 16);
        if (!d) return 0;
        scratch->data = d;
        scratch->cap = m + 16;
    }
    m = unescape(sp->s, sp->e, scratch->data);
    return m == n && memcmp(scratch->data, lit, (size_t)n) == 0;
}

/* Exact integer ns from a JSON number of us written as plain decimal digits with at most 6
 * fractional digits: round(us * 1000), halves away from zero, as the SQL path computes it with
 * DECIMAL(24,6). 0 when the text is anything else (exponent, more digits, out of range): the
 * SQL then converts the text itself. */
static int us_text_to_ns(const char *s, const char *e, int64_t *out) {
    int neg = 0;
    if (s < e && *s == '-') {
        neg = 1;
        s++;
    }
    int64_t ip = 0, frac = 0;
    int nd = 0, nf = 0;
    while (s < e && isdig(*s)) {
        if (ip > 900000000000000LL) return 0; /* ip * 1000 must stay far inside int64 */
        ip = ip * 10 + (*s++ - '0');
        nd++;
    }
    if (nd == 0) return 0;
    if (s < e && *s == '.') {
        s++;
        while (s < e && isdig(*s)) {
            if (nf == 6) return 0;
            frac = frac * 10 + (*s++ - '0');
            nf++;
        }
    }
    if (s != e) return 0;
    for (int i = nf; i < 6; i++) frac *= 10;
    int64_t v = ip * 1000 + frac / 1000 + (frac % 1000 >= 500);
    *out = neg ? -v : v;
    return 1;
}

static void put_int(Col *c, int64_t row, const Span *sp) {
    int64_t v;
    if (sp->type == T_NUM && us_text_to_ns(sp->s, sp->e, &v)) {
        ((int64_t *)c->offs)[row] = v;
        c->valid[row >> 3] |= (uint8_t)(1u << (row & 7));
    } else {
        ((int64_t *)c->offs)[row] = 0;
        c->nulls++;
    }
}

/* append one value to a column; -1 on OOM, -2 on invalid UTF-8. raw_numbers: numbers as
 * written (ts, dur, and the integer-only name/pid/tid), else as DuckDB renders them. */
static int put_value(Scanner *sc, Col *c, int64_t row, const Span *sp, int raw_numbers) {
    int64_t start = c->len;
    switch (sp->type) {
        case T_ABSENT:
        case T_NULL:
            c->nulls++;
            c->offs[row + 1] = (int32_t)c->len;
            return 0;
        case T_STR: {
            int64_t n = sp->e - sp->s;
            if (col_reserve(c, n)) return -1;
            if (sp->esc) {
                c->len += unescape(sp->s, sp->e, c->data + c->len);
            } else {
                memcpy(c->data + c->len, sp->s, (size_t)n);
                c->len += n;
            }
            if (!utf8_ok((const unsigned char *)c->data + start, (const unsigned char *)c->data + c->len))
                return -2;
            break;
        }
        case T_NUM: {
            char out[48];
            int k = -1;
            const char *s = sp->s;
            int64_t n = sp->e - sp->s;
            if (raw_numbers) {
                /* ts/dur: the trace's own digits, converted to DECIMAL exactly in SQL; the
                 * integer -0 (name/pid/tid) as msgspec re-encodes it for the pure path: 0 */
                if (raw_numbers == 2 && n == 2 && s[0] == '-' && s[1] == '0') {
                    s = "0";
                    n = 1;
                }
            } else if (sp->esc) {
                k = render_double(sp->s, sp->e, out);
            } else if (n == 2 && s[0] == '-' && s[1] == '0') {
                s = "0";
                n = 1;
            }
            if (k >= 0) {
                s = out;
                n = k;
            }
            if (col_reserve(c, n)) return -1;
            memcpy(c->data + c->len, s, (size_t)n);
            c->len += n;
            break;
        }
        case T_TRUE:
        case T_FALSE: {
            /* ts/dur (raw_numbers): DuckDB's read_json casts a boolean to DECIMAL 1 or 0 */
            const char *w = raw_numbers ? (sp->type == T_TRUE ? "1" : "0") : (sp->type == T_TRUE ? "true" : "false");
            int64_t n = (int64_t)strlen(w);
            if (col_reserve(c, n)) return -1;
            memcpy(c->data + c->len, w, (size_t)n);
            c->len += n;
            break;
        }
        default: { /* T_OBJ / T_ARR */
            sc->render.len = 0;
            if (put_json_min(&sc->render, sp->s, sp->e, &sc->scratch)) return -1;
            if (col_reserve(c, sc->render.len)) return -1;
            memcpy(c->data + c->len, sc->render.data, (size_t)sc->render.len);
            c->len += sc->render.len;
            if (!utf8_ok((const unsigned char *)c->data + start, (const unsigned char *)c->data + c->len))
                return -2;
            break;
        }
    }
    c->valid[row >> 3] |= (uint8_t)(1u << (row & 7));
    c->offs[row + 1] = (int32_t)c->len;
    return 0;
}

/* Scan one event object at p ('{' expected). Returns the end, NULL when incomplete or bad. */
static const char *scan_event(Scanner *sc, P *c, const char *p) {
    const char *end = c->end;
    Span f[N_FIXED + 2]; /* cat name pid tid ts dur | ph args */
    enum { F_CAT = 0, F_NAME, F_PID, F_TID, F_TS, F_DUR, F_PH, F_ARGS };
    memset(f, 0, sizeof f);
    if (*p != '{') FAIL(c, p, "an event is not a JSON object");
    const char *obj = p;
    p = ws(p + 1, end);
    if (p >= end) return INCOMPLETE;
    if (*p != '}') {
        for (;;) {
            Span k, v;
            if (!(p = scan_key(c, p, &k))) return NULL;
            p = scan_value(c, p, &v);
            if (!p) return NULL;
            int slot = -1;
            const char *ks = k.s;
            Py_ssize_t kl = k.e - k.s;
            if (!k.esc) {
                switch (kl) {
                    case 2:
                        if (ks[0] == 'p' && ks[1] == 'h') slot = F_PH;
                        else if (ks[0] == 't' && ks[1] == 's') slot = F_TS;
                        break;
                    case 3:
                        if (!memcmp(ks, "cat", 3)) slot = F_CAT;
                        else if (!memcmp(ks, "pid", 3)) slot = F_PID;
                        else if (!memcmp(ks, "tid", 3)) slot = F_TID;
                        else if (!memcmp(ks, "dur", 3)) slot = F_DUR;
                        break;
                    case 4:
                        if (!memcmp(ks, "name", 4)) slot = F_NAME;
                        else if (!memcmp(ks, "args", 4)) slot = F_ARGS;
                        break;
                }
            } else {
                static const char *names[] = {"cat", "name", "pid", "tid", "ts", "dur", "ph", "args"};
                for (int i = 0; i < 8 && slot < 0; i++)
                    if (str_eq(&k, names[i], (Py_ssize_t)strlen(names[i]), &sc->scratch)) slot = i;
            }
            if (slot >= 0) {
                /* types as the pure-Python path's msgspec struct accepts them, checked for every
                 * occurrence of a repeated key (msgspec checks each; the last one is kept) */
                if ((slot == F_PH || slot == F_CAT) && (v.type > T_NULL || v.type == T_NUM))
                    FAIL(c, obj, slot == F_PH ? "\"ph\" is not a string" : "\"cat\" is not a string");
                if (slot >= F_NAME && slot <= F_TID && (v.type > T_NULL || (v.type == T_NUM && v.esc)))
                    FAIL(c, obj, "\"name\", \"pid\" or \"tid\" is neither a string nor an integer");
                /* msgspec decodes these as str on every event, stored or not, and refuses
                 * invalid UTF-8 in them (not in other keys, values or args it skips) */
                if (v.type == T_STR && slot != F_TS && slot != F_DUR && slot != F_ARGS &&
                    !utf8_ok((const unsigned char *)v.s, (const unsigned char *)v.e))
                    FAIL(c, obj, "invalid UTF-8 in a string");
                f[slot] = v; /* arrays and objects: s is the opening bracket */
            }
            p = ws(p, end);
            if (p >= end) return INCOMPLETE;
            if (*p == '}') break;
            if (*p != ',') FAIL(c, p, "expected ',' or '}'");
            p = ws(p + 1, end);
            if (p >= end) return INCOMPLETE;
        }
    }
    const char *after = p + 1;


    sc->n_events++;
    int is_x = str_eq(&f[F_PH], "X", 1, &sc->scratch);
    int is_python = str_eq(&f[F_CAT], "python_function", 15, &sc->scratch);
    if (is_python && !sc->keep_python) sc->n_python++; /* counted as skipped only */
    if (str_eq(&f[F_PH], "s", 1, &sc->scratch) || str_eq(&f[F_PH], "f", 1, &sc->scratch) ||
        str_eq(&f[F_PH], "t", 1, &sc->scratch))
        sc->n_flow++;
    if (!is_x) return after;
    int device = 0;
    for (int i = 0; i < sc->n_dev && !device; i++)
        device = str_eq(&f[F_CAT], sc->dev_cats[i], sc->dev_len[i], &sc->scratch);
    if (!device && is_python && !sc->keep_python) return after;
    /* a stored event's args must be an object (or null): DuckDB's read_json on the pure path
     * refuses anything else, so the verdict is the same */
    if (f[F_ARGS].type != T_ABSENT && f[F_ARGS].type != T_NULL && f[F_ARGS].type != T_OBJ)
        FAIL(c, obj, "\"args\" is not an object");

    /* args: the values of the wanted keys */
    Span a[MAX_ARGS];
    memset(a, 0, sizeof(Span) * (size_t)sc->n_args);
    if (f[F_ARGS].type == T_OBJ) {
        /* the pure path hands a stored event's whole args to DuckDB, which checks its UTF-8 */
        if (!utf8_ok((const unsigned char *)f[F_ARGS].s, (const unsigned char *)f[F_ARGS].e))
            FAIL(c, obj, "invalid UTF-8 in a string");
        P c2 = {f[F_ARGS].e, NULL, NULL, 0};
        const char *q = ws(f[F_ARGS].s + 1, c2.end);
        if (*q != '}') {
            for (;;) {
                Span k, v;
                q = scan_key(&c2, q, &k); /* validated already: cannot fail */
                q = scan_value(&c2, q, &v);
                for (int i = 0; i < sc->n_args; i++) {
                    if (str_eq(&k, sc->arg_keys[i], sc->arg_len[i], &sc->scratch)) {
                        /* DuckDB's read_json (the pure path) refuses a duplicate struct field */
                        if (a[i].type != T_ABSENT) FAIL(c, obj, "a key repeated in \"args\"");
                        a[i] = v;
                        break;
                    }
                }
                q = ws(q, c2.end);
                if (*q == '}') break;
                q = ws(q + 1, c2.end); /* ',' */
            }
        }
    }

    Table *t = sc->tables[device ? 0 : 1];
    if (table_grow_rows(t)) FAIL(c, obj, "out of memory");
    int64_t row = t->rows;
    int64_t before = 0;
    for (int i = 0; i < t->ncols - N_INT; i++) before += t->cols[i].len;
    put_int(&t->cols[t->ncols - 2], row, &f[F_TS]);
    put_int(&t->cols[t->ncols - 1], row, &f[F_DUR]);
    for (int i = 0; i < t->ncols - N_INT; i++) {
        const Span *sp = i < N_FIXED ? &f[i] : &a[i - N_FIXED];
        /* raw numbers: 1 for ts/dur (the trace's text), 2 for name/pid/tid (as msgspec writes) */
        int r = put_value(sc, &t->cols[i], row, sp, i < N_FIXED ? (i == F_TS || i == F_DUR ? 1 : 2) : 0);
        if (r == -1) FAIL(c, obj, "out of memory (or a column over 2 GiB)");
        if (r == -2) FAIL(c, obj, "invalid UTF-8 in a string");
    }
    int64_t after_bytes = 0;
    for (int i = 0; i < t->ncols - N_INT; i++) after_bytes += t->cols[i].len;
    t->bytes += after_bytes - before + 24;
    t->rows++;
    return after;
}

static void Scanner_dealloc(Scanner *sc) {
    for (int i = 0; i < sc->n_args; i++) free(sc->arg_keys[i]);
    for (int i = 0; i < sc->n_dev; i++) free(sc->dev_cats[i]);
    table_decref(sc->tables[0]);
    table_decref(sc->tables[1]);
    free(sc->scratch.data);
    free(sc->render.data);
    Py_TYPE(sc)->tp_free((PyObject *)sc);
}

static int copy_keys(PyObject *seq, char **keys, Py_ssize_t *lens, int max, int *n_out, const char *what) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (!fast) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > max) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "too many %s (at most %d)", what, max);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        char *s;
        Py_ssize_t len;
        if (PyBytes_AsStringAndSize(PySequence_Fast_GET_ITEM(fast, i), &s, &len) < 0) {
            Py_DECREF(fast);
            return -1;
        }
        keys[i] = malloc((size_t)len + 1);
        memcpy(keys[i], s, (size_t)len + 1);
        lens[i] = len;
        *n_out = (int)i + 1;
    }
    Py_DECREF(fast);
    return 0;
}

static int Scanner_init(Scanner *sc, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"arg_keys", "device_cats", "keep_python", NULL};
    PyObject *keys, *cats;
    int keep = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|p", kwlist, &keys, &cats, &keep)) return -1;
    sc->keep_python = keep;
    if (copy_keys(keys, sc->arg_keys, sc->arg_len, MAX_ARGS, &sc->n_args, "arg_keys")) return -1;
    if (copy_keys(cats, sc->dev_cats, sc->dev_len, 32, &sc->n_dev, "device_cats")) return -1;
    for (int i = 0; i < 2; i++) {
        sc->tables[i] = table_new(N_FIXED + sc->n_args + N_INT);
        if (!sc->tables[i]) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

static PyObject *ScanError;

/* scan(buf, final=False) -> bytes consumed */
static PyObject *Scanner_scan(Scanner *sc, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"buf", "final", NULL};
    Py_buffer view;
    int final = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*|p", kwlist, &view, &final)) return NULL;
    const char *base = view.buf, *end = base + view.len, *p = base;
    P c = {end, NULL, NULL, 0};
    int incomplete = 0;
    Py_BEGIN_ALLOW_THREADS
    while (sc->state != S_DONE) {
        const char *q = ws(p, end);
        if (q >= end) {
            p = q;
            incomplete = 1;
            break;
        }
        if (sc->state == S_AFTER) {
            if (*q == ',') {
                sc->state = S_VALUE;
                p = q + 1;
                continue;
            }
            if (*q == ']') {
                sc->state = S_DONE;
                p = q + 1;
                break;
            }
            c.err = "expected ',' or ']' between events";
            c.errpos = q;
            break;
        }
        if (sc->state == S_FIRST && *q == ']') {
            sc->state = S_DONE;
            p = q + 1;
            break;
        }
        c.depth = 0;
        const char *r = scan_event(sc, &c, q);
        if (!r) {
            if (!c.err) incomplete = 1;
            p = q;
            break;
        }
        p = r;
        sc->state = S_AFTER;
    }
    Py_END_ALLOW_THREADS
    Py_ssize_t consumed = p - base;
    PyBuffer_Release(&view);
    if (c.err) {
        PyObject *e = Py_BuildValue("(sn)", c.err, (Py_ssize_t)(c.errpos - base));
        PyErr_SetObject(ScanError, e);
        Py_XDECREF(e);
        return NULL;
    }
    if (incomplete && final) {
        PyObject *e = Py_BuildValue("(sn)", "truncated", consumed);
        PyErr_SetObject(ScanError, e);
        Py_XDECREF(e);
        return NULL;
    }
    return PyLong_FromSsize_t(consumed);
}

/* ------------------------------------------------------------------------------------------ */
/* Batch: a taken table, exported as an Arrow C stream (each call a fresh stream)               */

typedef struct {
    PyObject_HEAD
    Table *t;
    int n_args;
    int nsel;          /* the columns exported, by index into the table */
    int sel[MAX_COLS];
} Batch;

static PyTypeObject BatchType;

static PyObject *Scanner_take(Scanner *sc, PyObject *args) {
    int which;
    PyObject *cols = Py_None;
    if (!PyArg_ParseTuple(args, "i|O", &which, &cols)) return NULL;
    if (which != 0 && which != 1) {
        PyErr_SetString(PyExc_ValueError, "table is 0 (device) or 1 (host)");
        return NULL;
    }
    Table *t = sc->tables[which];
    int sel[MAX_COLS], nsel = 0;
    if (cols == Py_None) {
        for (int i = 0; i < t->ncols; i++) sel[nsel++] = i;
    } else {
        PyObject *fast = PySequence_Fast(cols, "columns must be a sequence of column indices");
        if (!fast) return NULL;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
            long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
            if (v < 0 || v >= t->ncols || nsel >= MAX_COLS) {
                Py_DECREF(fast);
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "column index out of range");
                return NULL;
            }
            sel[nsel++] = (int)v;
        }
        Py_DECREF(fast);
    }
    if (t->rows == 0) Py_RETURN_NONE;
    Table *fresh = table_new(t->ncols);
    if (!fresh) return PyErr_NoMemory();
    Batch *b = PyObject_New(Batch, &BatchType);
    if (!b) {
        table_decref(fresh);
        return NULL;
    }
    b->t = t;
    b->n_args = sc->n_args;
    b->nsel = nsel;
    memcpy(b->sel, sel, sizeof(int) * (size_t)nsel);
    sc->tables[which] = fresh;
    return (PyObject *)b;
}

static PyObject *Scanner_pending(Scanner *sc, PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue("(LLLL)", (long long)sc->tables[0]->rows, (long long)sc->tables[1]->rows,
                         (long long)sc->tables[0]->bytes, (long long)sc->tables[1]->bytes);
}

static PyObject *Scanner_get_done(Scanner *sc, void *closure) { return PyBool_FromLong(sc->state == S_DONE); }
static PyObject *Scanner_get_n_events(Scanner *sc, void *c) { return PyLong_FromLongLong(sc->n_events); }
static PyObject *Scanner_get_n_python(Scanner *sc, void *c) { return PyLong_FromLongLong(sc->n_python); }
static PyObject *Scanner_get_n_flow(Scanner *sc, void *c) { return PyLong_FromLongLong(sc->n_flow); }

static PyMethodDef Scanner_methods[] = {
    {"scan", (PyCFunction)(void (*)(void))Scanner_scan, METH_VARARGS | METH_KEYWORDS,
     "scan(buf, final=False) -> int: scan whole events from the start of buf (inside the "
     "traceEvents array); return the bytes consumed. Raises ScanError((reason, offset))."},
    {"take", (PyCFunction)Scanner_take, METH_VARARGS,
     "take(table, columns=None) -> Batch | None: the rows kept so far in table 0 (device) or 1 "
     "(host); the batch exports only the given column indices (all by default)."},
    {"pending", (PyCFunction)Scanner_pending, METH_NOARGS,
     "pending() -> (device rows, host rows, device bytes, host bytes) not yet taken."},
    {NULL},
};

static PyGetSetDef Scanner_getset[] = {
    {"done", (getter)Scanner_get_done, NULL, "the closing ']' of the array was consumed", NULL},
    {"n_events", (getter)Scanner_get_n_events, NULL, "events scanned", NULL},
    {"n_python", (getter)Scanner_get_n_python, NULL, "python_function events scanned", NULL},
    {"n_flow", (getter)Scanner_get_n_flow, NULL, "flow events (ph s/f/t) scanned", NULL},
    {NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracekit.parsers._kineto_scan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
    .tp_getset = Scanner_getset,
    .tp_doc = "Scanner(arg_keys, device_cats, keep_python=False): native Kineto event scanner.",
};

/* --- Arrow export --- */

typedef struct {
    Table *t;
    int n_args;
    int emitted;
    int nsel;
    int sel[MAX_COLS];
} StreamPriv;

typedef struct {
    char names[MAX_COLS][12];
    struct ArrowSchema kids[MAX_COLS];
    struct ArrowSchema *kid_ptrs[MAX_COLS];
} SchemaPriv;

static const char *FIXED_NAMES[N_FIXED] = {"cat", "name", "pid", "tid", "ts", "dur"};

static void release_child_schema(struct ArrowSchema *s) { s->release = NULL; }

static void release_schema(struct ArrowSchema *s) {
    free(s->private_data);
    s->release = NULL;
}

static int stream_get_schema(struct ArrowArrayStream *st, struct ArrowSchema *out) {
    StreamPriv *sp = st->private_data;
    int ncols = sp->t->ncols;
    SchemaPriv *pv = calloc(1, sizeof(SchemaPriv));
    if (!pv) return 12; /* ENOMEM */
    for (int j = 0; j < sp->nsel; j++) {
        int i = sp->sel[j];
        if (i < N_FIXED) snprintf(pv->names[j], 12, "%s", FIXED_NAMES[i]);
        else if (i == ncols - 2) snprintf(pv->names[j], 12, "ts_ns");
        else if (i == ncols - 1) snprintf(pv->names[j], 12, "dur_ns");
        else snprintf(pv->names[j], 12, "a%d", i - N_FIXED);
        struct ArrowSchema *k = &pv->kids[j];
        k->format = is_int_col(sp->t, i) ? "l" : "u";
        k->name = pv->names[j];
        k->flags = ARROW_FLAG_NULLABLE;
        k->release = release_child_schema;
        pv->kid_ptrs[j] = k;
    }
    memset(out, 0, sizeof *out);
    out->format = "+s";
    out->name = "";
    out->n_children = sp->nsel;
    out->children = pv->kid_ptrs;
    out->release = release_schema;
    out->private_data = pv;
    return 0;
}

typedef struct {
    Table *t;
    struct ArrowArray kids[MAX_COLS];
    struct ArrowArray *kid_ptrs[MAX_COLS];
    const void *bufs[MAX_COLS][3];
    const void *top_bufs[1];
} ArrayPriv;

static void release_child_array(struct ArrowArray *a) { a->release = NULL; }

static void release_array(struct ArrowArray *a) {
    ArrayPriv *pv = a->private_data;
    table_decref(pv->t);
    free(pv);
    a->release = NULL;
}

static int stream_get_next(struct ArrowArrayStream *st, struct ArrowArray *out) {
    StreamPriv *sp = st->private_data;
    memset(out, 0, sizeof *out);
    if (sp->emitted) return 0; /* end of stream: out->release == NULL */
    sp->emitted = 1;
    Table *t = sp->t;
    ArrayPriv *pv = calloc(1, sizeof(ArrayPriv));
    if (!pv) return 12;
    atomic_fetch_add(&t->refs, 1);
    pv->t = t;
    for (int j = 0; j < sp->nsel; j++) {
        int i = sp->sel[j];
        Col *c = &t->cols[i];
        struct ArrowArray *k = &pv->kids[j];
        pv->bufs[j][0] = c->valid;
        pv->bufs[j][1] = c->offs;
        pv->bufs[j][2] = c->data;
        k->length = t->rows;
        k->null_count = c->nulls;
        k->n_buffers = is_int_col(t, i) ? 2 : 3;
        k->buffers = pv->bufs[j];
        k->release = release_child_array;
        pv->kid_ptrs[j] = k;
    }
    pv->top_bufs[0] = NULL;
    out->length = t->rows;
    out->n_buffers = 1;
    out->buffers = pv->top_bufs;
    out->n_children = sp->nsel;
    out->children = pv->kid_ptrs;
    out->release = release_array;
    out->private_data = pv;
    return 0;
}

static const char *stream_last_error(struct ArrowArrayStream *st) { return NULL; }

static void stream_release(struct ArrowArrayStream *st) {
    StreamPriv *sp = st->private_data;
    table_decref(sp->t);
    free(sp);
    st->release = NULL;
}

static void capsule_destructor(PyObject *cap) {
    struct ArrowArrayStream *st = PyCapsule_GetPointer(cap, "arrow_array_stream");
    if (st) {
        if (st->release) st->release(st);
        free(st);
    }
}

static PyObject *Batch_arrow_c_stream(Batch *b, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"requested_schema", NULL};
    PyObject *req = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O", kwlist, &req)) return NULL;
    struct ArrowArrayStream *st = calloc(1, sizeof *st);
    StreamPriv *sp = calloc(1, sizeof *sp);
    if (!st || !sp) {
        free(st);
        free(sp);
        return PyErr_NoMemory();
    }
    atomic_fetch_add(&b->t->refs, 1);
    sp->t = b->t;
    sp->n_args = b->n_args;
    sp->nsel = b->nsel;
    memcpy(sp->sel, b->sel, sizeof(int) * (size_t)b->nsel);
    st->get_schema = stream_get_schema;
    st->get_next = stream_get_next;
    st->get_last_error = stream_last_error;
    st->release = stream_release;
    st->private_data = sp;
    return PyCapsule_New(st, "arrow_array_stream", capsule_destructor);
}

static Py_ssize_t Batch_len(Batch *b) { return (Py_ssize_t)b->t->rows; }

static void Batch_dealloc(Batch *b) {
    table_decref(b->t);
    PyObject_Free(b);
}

static PyMethodDef Batch_methods[] = {
    {"__arrow_c_stream__", (PyCFunction)(void (*)(void))Batch_arrow_c_stream, METH_VARARGS | METH_KEYWORDS,
     "Arrow PyCapsule stream of one record batch: utf8 columns cat name pid tid ts dur a0..a{n-1}."},
    {NULL},
};

static PySequenceMethods Batch_seq = {.sq_length = (lenfunc)Batch_len};

static PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracekit.parsers._kineto_scan.Batch",
    .tp_basicsize = sizeof(Batch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)Batch_dealloc,
    .tp_methods = Batch_methods,
    .tp_as_sequence = &Batch_seq,
    .tp_doc = "Rows taken from a Scanner table, readable by DuckDB as an Arrow stream.",
};

static PyObject *live_tables(PyObject *m, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromLong(atomic_load(&LIVE_TABLES));
}

static PyMethodDef module_methods[] = {
    {"live_tables", live_tables, METH_NOARGS, "live_tables() -> int: column tables not yet freed."},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kineto_scan",
    "Native scanner of Kineto trace events (see tracekit/parsers/kineto.py).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__kineto_scan(void) {
    for (int i = 0; i < 256; i++) {
        STR_STOP[i] = (i < 0x20 || i == '"' || i == '\\');
        HEXVAL[i] = -1;
    }
    for (int i = 0; i < 10; i++) HEXVAL['0' + i] = (signed char)i;
    for (int i = 0; i < 6; i++) {
        HEXVAL['a' + i] = (signed char)(10 + i);
        HEXVAL['A' + i] = (signed char)(10 + i);
    }
    if (PyType_Ready(&ScannerType) < 0 || PyType_Ready(&BatchType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    ScanError = PyErr_NewException("tracekit.parsers._kineto_scan.ScanError", PyExc_ValueError, NULL);
    Py_INCREF(&ScannerType);
    Py_INCREF(&BatchType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0 ||
        PyModule_AddObject(m, "Batch", (PyObject *)&BatchType) < 0 ||
        PyModule_AddObject(m, "ScanError", ScanError) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
