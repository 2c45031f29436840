/*
 * tracekit.parsers._xplane_wire: XEvents read straight from the serialized XSpace.
 *
 * Reading events through protobuf's Python wrappers costs microseconds per event and per stat
 * (~0.15 s just to read the metadata ids of 800k events, ~6 us per kept event with its stats);
 * walking the wire format here costs a few nanoseconds per byte. The XSpace has already been
 * checked by split_space (or parsed by protobuf) when scan_line runs; a malformation raises
 * ValueError and the caller falls back to protobuf. Field numbers from
 * tracekit/parsers/proto/xplane.proto:
 *
 *   XSpace.planes = 1 -> XPlane.lines = 3 -> XLine.events = 4
 *   XEvent: metadata_id = 1, offset_ps = 2 | num_occurrences = 5 (oneof), duration_ps = 3, stats = 4
 *   XStat: metadata_id = 1, value oneof: double 2, uint64 3, int64 4, str 5, bytes 6, ref 7,
 *          compressed_str 8
 *
 * split_space(raw): the XSpace without its events (for protobuf), and where each line's bytes are.
 * scan_line(line, names, drop_ids, split, op_ids, start, max_rows): the columns of a line's events.
 * The semantics are those of the pure-Python reader in _xplane_read.py (_line_events_py), which
 * the tests hold this module to.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "_json_text.h"


static int grow(void **p, Py_ssize_t *cap, Py_ssize_t need, size_t width) {
    if (need <= *cap) return 0;
    Py_ssize_t nc = *cap ? *cap * 2 : 256;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * width);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

static int put_i64(Buf *b, int64_t x) { return buf_put(b, (const char *)&x, sizeof x); }

/* varint at *pp (< end): value in *out; 0 ok, -1 malformed */
static int varint(const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (p >= end) return -1;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *pp = p;
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* Iterate the fields of a message [p, end). For each: *field, *wt; for length-delimited fields
 * the payload [*s, *e); for fixed64/fixed32 *s points at the little-endian bytes; for varints
 * *val. Returns 1 per field, 0 at the end, -1 malformed. */
static int next_field(const uint8_t **pp, const uint8_t *end, uint32_t *field, int *wt,
                      const uint8_t **s, const uint8_t **e, uint64_t *val) {
    if (*pp >= end) return 0;
    uint64_t key;
    if (varint(pp, end, &key)) return -1;
    if ((key >> 3) == 0 || (key >> 3) > 0x1FFFFFFF) return -1; /* field numbers are 1 .. 2^29-1 */
    *field = (uint32_t)(key >> 3);
    *wt = (int)(key & 7);
    switch (*wt) {
        case 0:
            return varint(pp, end, val) ? -1 : 1;
        case 1:
            if (end - *pp < 8) return -1;
            *s = *pp;
            *pp += 8;
            return 1;
        case 2: {
            uint64_t len;
            if (varint(pp, end, &len) || len > (uint64_t)(end - *pp)) return -1;
            *s = *pp;
            *e = *pp + len;
            *pp += len;
            return 1;
        }
        case 5:
            if (end - *pp < 4) return -1;
            *s = *pp;
            *pp += 4;
            return 1;
        default:
            return -1; /* groups: not in XPlane */
    }
}

/* ---------------------------------------------------------------------------------------- */
/* split_space */

static int put_varint(Buf *b, uint64_t v) {
    char tmp[10];
    int n = 0;
    do {
        uint8_t byte = v & 0x7F;
        v >>= 7;
        tmp[n++] = (char)(v ? byte | 0x80 : byte);
    } while (v);
    return buf_put(b, tmp, n);
}

/* key + length + payload of a length-delimited field */
static int put_message(Buf *b, uint32_t field, const char *s, Py_ssize_t n) {
    return put_varint(b, ((uint64_t)field << 3) | 2) || put_varint(b, (uint64_t)n) || buf_put(b, s, n);
}

/* Strict UTF-8 (no overlong forms, no surrogates, at most U+10FFFF), as protobuf checks proto3
 * strings: 1 valid, 0 not. */
static int utf8_valid(const uint8_t *s, const uint8_t *end) {
    while (s < end) {
        uint8_t c = *s;
        if (c < 0x80) { s++; continue; }
        int n;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) { n = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { n = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { n = 3; cp = c & 0x07; }
        else return 0;
        if (end - s <= n) return 0;
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i] & 0x3F);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        s += n + 1;
    }
    return 1;
}

/* Walk every field of an XEvent [p, end) and of its XStats: the structure protobuf would check,
 * and the UTF-8 of the stats' str_value (a proto3 string). 0 ok, -1 malformed. */
static int check_message(const uint8_t *p, const uint8_t *end, int is_event) {
    uint32_t f;
    int wt, r;
    const uint8_t *s = NULL, *e = NULL;
    uint64_t val = 0;
    while ((r = next_field(&p, end, &f, &wt, &s, &e, &val)) == 1) {
        if (is_event && f == 4 && wt == 2 && check_message(s, e, 0) < 0) return -1;
        if (!is_event && f == 5 && wt == 2 && !utf8_valid(s, e)) return -1;
    }
    return r;
}

/* One XLine without its events (field 4) into *out; the events are checked and counted. */
static int strip_line(const uint8_t *p, const uint8_t *end, Buf *out, Py_ssize_t *n_events) {
    uint32_t f;
    int wt, r;
    const uint8_t *s = NULL, *e = NULL, *at = p;
    uint64_t val = 0;
    while ((r = next_field(&p, end, &f, &wt, &s, &e, &val)) == 1) {
        if (f == 4 && wt == 2) {
            if (check_message(s, e, 1) < 0) return -1;
            (*n_events)++;
        } else if (buf_put(out, (const char *)at, p - at)) {
            return -2;
        }
        at = p;
    }
    return r;
}

/* split_space(raw) -> (stripped, lines): the XSpace without any XEvent (for protobuf to parse
 * the names, metadata and stats in a few ms), and per plane per line (offset, size, n_events) of
 * the line's bytes in raw, for scan_line. Every event and stat is checked on the way. */
static PyObject *split_space(PyObject *m, PyObject *arg) {
    (void)m;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Buf out = {0}, plane = {0}, line = {0};
    PyObject *planes = PyList_New(0), *result = NULL;
    const uint8_t *base = view.buf, *p = base, *end = base + view.len, *at = p;
    uint32_t f;
    int wt, r, bad = 0;
    const uint8_t *s = NULL, *e = NULL;
    uint64_t val = 0;
    if (!planes) goto done;
    while (!bad && (r = next_field(&p, end, &f, &wt, &s, &e, &val)) == 1) {
        if (f != 1 || wt != 2) { /* hostnames, errors, ...: as they are */
            if (buf_put(&out, (const char *)at, p - at)) bad = -2;
            at = p;
            continue;
        }
        at = p;
        PyObject *lines = PyList_New(0);
        if (!lines || PyList_Append(planes, lines) < 0) { Py_XDECREF(lines); goto done; }
        Py_DECREF(lines);
        plane.len = 0;
        const uint8_t *q = s, *qat = s;
        uint32_t f2;
        int wt2, r2;
        const uint8_t *s2 = NULL, *e2 = NULL;
        uint64_t v2 = 0;
        while (!bad && (r2 = next_field(&q, e, &f2, &wt2, &s2, &e2, &v2)) == 1) {
            if (f2 != 3 || wt2 != 2) {
                if (buf_put(&plane, (const char *)qat, q - qat)) bad = -2;
                qat = q;
                continue;
            }
            qat = q;
            line.len = 0;
            Py_ssize_t n_events = 0;
            int rl = strip_line(s2, e2, &line, &n_events);
            if (rl < 0) { bad = rl; break; }
            if (put_message(&plane, 3, line.data, line.len)) { bad = -2; break; }
            PyObject *span = Py_BuildValue("(nnn)", (Py_ssize_t)(s2 - base), (Py_ssize_t)(e2 - s2), n_events);
            if (!span || PyList_Append(lines, span) < 0) { Py_XDECREF(span); goto done; }
            Py_DECREF(span);
        }
        if (!bad && r2 < 0) bad = -1;
        if (!bad && put_message(&out, 1, plane.data, plane.len)) bad = -2;
    }
    if (!bad && r < 0) bad = -1;
    if (bad == -2) {
        PyErr_NoMemory();
    } else if (bad) {
        PyErr_SetString(PyExc_ValueError, "malformed XSpace wire data");
    } else {
        PyObject *stripped = PyBytes_FromStringAndSize(out.data ? out.data : "", out.len);
        if (stripped) result = PyTuple_Pack(2, stripped, planes);
        Py_XDECREF(stripped);
    }
done:
    Py_XDECREF(planes);
    free(out.data);
    free(plane.data);
    free(line.data);
    PyBuffer_Release(&view);
    return result;
}

/* ---------------------------------------------------------------------------------------- */
/* scan_line */

typedef struct {
    int64_t id;
    const char *s;
    Py_ssize_t n;
    PyObject *obj; /* the str (borrowed from the names dict) */
} Name;

static int name_cmp(const void *a, const void *b) {
    int64_t x = ((const Name *)a)->id, y = ((const Name *)b)->id;
    return (x > y) - (x < y);
}

static const Name *find_name(const Name *names, Py_ssize_t n, int64_t id) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (names[mid].id < id) lo = mid + 1;
        else if (names[mid].id > id) hi = mid;
        else return &names[mid];
    }
    return NULL;
}

static int in_sorted(const int64_t *v, Py_ssize_t n, int64_t x) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (v[mid] < x) lo = mid + 1;
        else if (v[mid] > x) hi = mid;
        else return 1;
    }
    return 0;
}

/* The ids to drop: a bitmap when they are small (metadata ids count up from 1), else the sorted
 * array. */
typedef struct {
    const int64_t *v;
    Py_ssize_t n;
    uint8_t *bits;
    int64_t max;
} Drops;

static int drops_init(Drops *d, const int64_t *v, Py_ssize_t n) {
    d->v = v;
    d->n = n;
    d->bits = NULL;
    d->max = -1;
    if (!n || v[0] < 0 || v[n - 1] >= ((int64_t)1 << 26)) return 0;
    d->max = v[n - 1];
    d->bits = calloc((size_t)(d->max / 8 + 1), 1);
    if (!d->bits) return -1;
    for (Py_ssize_t i = 0; i < n; i++) d->bits[v[i] >> 3] |= (uint8_t)(1u << (v[i] & 7));
    return 0;
}

static int is_dropped(const Drops *d, int64_t id) {
    if (d->bits) return id >= 0 && id <= d->max && (d->bits[id >> 3] >> (id & 7)) & 1;
    return in_sorted(d->v, d->n, id);
}

enum { V_NONE = 0, V_DOUBLE = 2, V_U64 = 3, V_I64 = 4, V_STR = 5, V_BYTES = 6, V_REF = 7, V_COMPRESSED = 8 };

typedef struct {
    int64_t mid;
    const char *key;
    Py_ssize_t key_n;
    char keybuf[24]; /* the decimal id, for a stat without metadata */
    int kind;
    uint64_t u;
    const uint8_t *s;
    Py_ssize_t sn;
    int skip;  /* a later stat with the same key holds the value */
    int split; /* index into `split`, or -1 */
} Stat;

/* A double as msgspec writes it: Python's shortest round-trip digits; fixed notation for decimal
 * exponents -5..15 (".0" on integers), otherwise d[.ddd]e[-]x; inf and nan as null. */
static int put_json_double(Buf *b, double d) {
    if (!isfinite(d)) return buf_put(b, "null", 4);
    char *r = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (!r) return -1;
    int rc;
    char *ep = strchr(r, 'e');
    if (!ep) {
        rc = buf_put(b, r, (Py_ssize_t)strlen(r));
    } else {
        int exp10 = atoi(ep + 1);
        if (exp10 == -5) { /* Python writes 1.5e-05, msgspec 0.000015 */
            char digits[32];
            int nd = 0;
            for (char *c = r; c < ep && nd < 31; c++)
                if (*c >= '0' && *c <= '9') digits[nd++] = *c;
            rc = buf_put(b, r[0] == '-' ? "-0.0000" : "0.0000", r[0] == '-' ? 7 : 6);
            if (!rc) rc = buf_put(b, digits, nd);
        } else {
            char tail[16];
            int nt = snprintf(tail, sizeof tail, "e%d", exp10);
            rc = buf_put(b, r, ep - r);
            if (!rc) rc = buf_put(b, tail, nt);
        }
    }
    PyMem_Free(r);
    return rc;
}

/* Longest inflated compressed_str_value (bytes): set by scan_line's max_str. */
static Py_ssize_t max_inflated = (Py_ssize_t)64 << 20;

/* A zlib.decompressobj(wbits) inflate of the whole stream, at most max_inflated bytes out, as
 * _inflate_stat in Python: gzip/zlib auto-detection, then raw deflate; decoded as UTF-8 with
 * replacement; the hex of the bytes when neither inflates to the stream's end. A longer result
 * raises OverflowError (the caller reports the limit) without inflating past it. */
static PyObject *inflate_str(const uint8_t *s, Py_ssize_t n) {
    PyObject *zlib = PyImport_ImportModule("zlib");
    if (!zlib) return NULL;
    PyObject *data = PyBytes_FromStringAndSize((const char *)s, n);
    PyObject *out = NULL;
    int failed = 0;
    for (int i = 0; data && i < 2 && !out && !failed; i++) {
        PyObject *d = PyObject_CallMethod(zlib, "decompressobj", "i", i == 0 ? 47 : -15);
        if (!d) { failed = 1; break; }
        PyObject *raw = PyObject_CallMethod(d, "decompress", "On", data, max_inflated + 1);
        if (raw) {
            PyObject *eof = PyObject_GetAttrString(d, "eof");
            int done = eof ? PyObject_IsTrue(eof) : -1;
            Py_XDECREF(eof);
            if (done < 0) failed = 1;
            else if (PyBytes_GET_SIZE(raw) > max_inflated) {
                PyErr_Format(PyExc_OverflowError, "a compressed string stat inflates past %zd bytes", max_inflated);
                failed = 1;
            } else if (done) {
                out = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw), "replace");
                if (!out) failed = 1;
            }
            Py_DECREF(raw);
        } else { /* zlib.error: try the next format; anything else (MemoryError, ...) propagates */
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyObject *zerr = PyObject_GetAttrString(zlib, "error");
            int is_zlib = zerr && PyErr_GivenExceptionMatches(type, zerr);
            Py_XDECREF(zerr);
            if (!is_zlib) {
                if (zerr) PyErr_Restore(type, value, tb);
                else { Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(tb); }
                failed = 1;
            } else {
                Py_XDECREF(type);
                Py_XDECREF(value);
                Py_XDECREF(tb);
            }
        }
        Py_DECREF(d);
    }
    if (failed) { Py_XDECREF(out); out = NULL; }
    else if (data && !out) out = PyObject_CallMethod(data, "hex", NULL);
    Py_XDECREF(data);
    Py_DECREF(zlib);
    return out;
}

static PyObject *stat_object(const Stat *st, const Name *names, Py_ssize_t n_names) {
    switch (st->kind) {
        case V_DOUBLE: {
            double d;
            memcpy(&d, &st->u, sizeof d);
            return PyFloat_FromDouble(d);
        }
        case V_U64: return PyLong_FromUnsignedLongLong(st->u);
        case V_I64: return PyLong_FromLongLong((long long)(int64_t)st->u);
        case V_STR: return PyUnicode_DecodeUTF8((const char *)st->s, st->sn, "replace");
        case V_BYTES: return PyBytes_FromStringAndSize((const char *)st->s, st->sn);
        case V_REF: {
            const Name *nm = st->u > INT64_MAX ? NULL : find_name(names, n_names, (int64_t)st->u);
            if (nm) { Py_INCREF(nm->obj); return nm->obj; }
            return PyUnicode_FromStringAndSize("", 0);
        }
        case V_COMPRESSED: return inflate_str(st->s, st->sn);
        default: Py_RETURN_NONE;
    }
}

static int put_json_value(Buf *b, const Stat *st, const Name *names, Py_ssize_t n_names) {
    char num[32];
    int k;
    switch (st->kind) {
        case V_DOUBLE: {
            double d;
            memcpy(&d, &st->u, sizeof d);
            return put_json_double(b, d);
        }
        case V_U64:
            k = snprintf(num, sizeof num, "%llu", (unsigned long long)st->u);
            return buf_put(b, num, k);
        case V_I64:
            k = snprintf(num, sizeof num, "%lld", (long long)(int64_t)st->u);
            return buf_put(b, num, k);
        case V_STR: return put_json_str(b, (const char *)st->s, st->sn, JSON_HEX_LOWER);
        case V_BYTES: /* serialized protos and the like: their size, not their bytes */
            k = snprintf(num, sizeof num, "\"<%zd bytes>\"", st->sn);
            return buf_put(b, num, k);
        case V_REF: {
            const Name *nm = st->u > INT64_MAX ? NULL : find_name(names, n_names, (int64_t)st->u);
            return nm ? put_json_str(b, nm->s, nm->n, JSON_HEX_LOWER) : buf_put(b, "\"\"", 2);
        }
        case V_COMPRESSED: {
            PyObject *o = inflate_str(st->s, st->sn);
            if (!o) return -1;
            Py_ssize_t n;
            const char *u = PyUnicode_AsUTF8AndSize(o, &n);
            int rc = u ? put_json_str(b, u, n, JSON_HEX_LOWER) : -1;
            Py_DECREF(o);
            return rc;
        }
        default: return buf_put(b, "null", 4);
    }
}

/* one XStat [p, end) into *st: 0 ok, -1 malformed */
static int read_stat(const uint8_t *p, const uint8_t *end, Stat *st) {
    uint32_t f;
    int wt, r;
    const uint8_t *s = NULL, *e = NULL;
    uint64_t val = 0;
    st->mid = 0;
    st->kind = V_NONE;
    st->u = 0;
    st->s = NULL;
    st->sn = 0;
    while ((r = next_field(&p, end, &f, &wt, &s, &e, &val)) == 1) {
        if (f == 1 && wt == 0) st->mid = (int64_t)val;
        else if (f == 2 && wt == 1) { st->kind = V_DOUBLE; memcpy(&st->u, s, 8); } /* little-endian hosts */
        else if ((f == 3 || f == 4 || f == 7) && wt == 0) { st->kind = (int)f; st->u = val; }
        else if ((f == 5 || f == 6 || f == 8) && wt == 2) { st->kind = (int)f; st->s = s; st->sn = e - s; }
    }
    return r;
}

typedef struct {
    Buf ids, offsets, durs, flags;
    Py_ssize_t rows;
} Cols;

static PyObject *scan_line(PyObject *m, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"line", "names", "drop_ids", "split", "op_ids", "start", "max_rows", "max_str", NULL};
    Py_buffer line, drop = {0}, ops = {0};
    PyObject *names_dict, *drop_obj = Py_None, *split = NULL, *ops_obj = Py_None;
    Py_ssize_t start = 0, max_rows = 0, max_str = (Py_ssize_t)64 << 20;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*O!|OO!Onnn", kwlist, &line, &PyDict_Type,
                                     &names_dict, &drop_obj, &PyTuple_Type, &split, &ops_obj, &start,
                                     &max_rows, &max_str)) {
        return NULL;
    }
    max_inflated = max_str > 0 ? max_str : 0;
    if (start < 0 || start > line.len) {
        PyBuffer_Release(&line);
        PyErr_SetString(PyExc_ValueError, "start is outside the line");
        return NULL;
    }
    PyObject *result = NULL, *arg_list = NULL, *split_lists = NULL;
    Name *names = NULL;
    Stat *stats = NULL;
    Py_ssize_t n_stats_cap = 0;
    Cols c = {{0}};
    Drops drops = {0};
    Buf json = {0};
    int use_ops = ops_obj != Py_None;
    if (drop_obj != Py_None && PyObject_GetBuffer(drop_obj, &drop, PyBUF_SIMPLE) < 0) goto done;
    if (use_ops && PyObject_GetBuffer(ops_obj, &ops, PyBUF_SIMPLE) < 0) goto done;
    const int64_t *drop_v = drop.buf, *ops_v = ops.buf;
    Py_ssize_t n_drop = drop.buf ? drop.len / 8 : 0, n_ops = ops.buf ? ops.len / 8 : 0;
    for (Py_ssize_t j = 1; j < n_drop; j++)
        if (drop_v[j - 1] >= drop_v[j]) { PyErr_SetString(PyExc_ValueError, "drop_ids must be sorted"); goto done; }
    for (Py_ssize_t j = 1; j < n_ops; j++)
        if (ops_v[j - 1] >= ops_v[j]) { PyErr_SetString(PyExc_ValueError, "op_ids must be sorted"); goto done; }
    if (drops_init(&drops, drop_v, n_drop)) { PyErr_NoMemory(); goto done; }

    /* names: stat metadata id -> name, sorted for binary search */
    Py_ssize_t n_names = PyDict_Size(names_dict), pos = 0, i = 0;
    names = PyMem_Calloc(n_names ? (size_t)n_names : 1, sizeof(Name));
    if (!names) { PyErr_NoMemory(); goto done; }
    PyObject *k, *v;
    while (PyDict_Next(names_dict, &pos, &k, &v)) {
        if (!PyLong_Check(k) || !PyUnicode_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "names must map int to str");
            goto done;
        }
        names[i].id = PyLong_AsLongLong(k);
        if (names[i].id == -1 && PyErr_Occurred()) goto done;
        names[i].s = PyUnicode_AsUTF8AndSize(v, &names[i].n);
        if (!names[i].s) goto done;
        names[i].obj = v;
        i++;
    }
    qsort(names, (size_t)n_names, sizeof(Name), name_cmp);

    Py_ssize_t n_split = split ? PyTuple_GET_SIZE(split) : 0;
    const char *split_s[16];
    Py_ssize_t split_n[16];
    if (n_split > 16) { PyErr_SetString(PyExc_ValueError, "at most 16 split stats"); goto done; }
    for (Py_ssize_t j = 0; j < n_split; j++) {
        PyObject *o = PyTuple_GET_ITEM(split, j);
        if (!PyUnicode_Check(o)) { PyErr_SetString(PyExc_TypeError, "split must hold str"); goto done; }
        split_s[j] = PyUnicode_AsUTF8AndSize(o, &split_n[j]);
        if (!split_s[j]) goto done;
    }
    arg_list = PyList_New(0);
    split_lists = PyTuple_New(n_split);
    if (!arg_list || !split_lists) goto done;
    for (Py_ssize_t j = 0; j < n_split; j++) {
        PyObject *l = PyList_New(0);
        if (!l) goto done;
        PyTuple_SET_ITEM(split_lists, j, l);
    }

    long long n_dropped = 0, n_untimed = 0;
    const uint8_t *p = (const uint8_t *)line.buf + start, *end = (const uint8_t *)line.buf + line.len;
    uint32_t f;
    int wt, r;
    const uint8_t *s = NULL, *e = NULL;
    uint64_t val = 0;
    while ((max_rows <= 0 || c.rows < max_rows) && (r = next_field(&p, end, &f, &wt, &s, &e, &val)) == 1) {
        if (f != 4 || wt != 2) continue; /* XLine.events */
        int64_t mid = 0, off = 0, occ = 0, dur = 0;
        int which = 0; /* 2: offset_ps set last, 5: num_occurrences */
        Py_ssize_t ns = 0;
        const uint8_t *q = s;
        uint32_t f2;
        int wt2, r2;
        const uint8_t *s2 = NULL, *e2 = NULL;
        uint64_t v2 = 0;
        /* first pass: the scalar fields (the drop decision needs only the id) */
        while ((r2 = next_field(&q, e, &f2, &wt2, &s2, &e2, &v2)) == 1) {
            if (wt2 == 0) {
                if (f2 == 1) mid = (int64_t)v2;
                else if (f2 == 2) { off = (int64_t)v2; occ = 0; which = 2; }
                else if (f2 == 5) { occ = (int64_t)v2; off = 0; which = 5; }
                else if (f2 == 3) dur = (int64_t)v2;
            } else if (f2 == 4 && wt2 == 2) {
                ns++;
            }
        }
        if (r2 < 0) goto malformed;
        if (n_drop && is_dropped(&drops, mid)) {
            n_dropped++;
            continue;
        }
        if (which == 5 && occ != 0) { n_untimed++; continue; } /* aggregated: no start time */
        /* the stats */
        if (grow((void **)&stats, &n_stats_cap, ns, sizeof(Stat))) { PyErr_NoMemory(); goto done; }
        Py_ssize_t n = 0;
        int is_op = 0;
        q = s;
        while ((r2 = next_field(&q, e, &f2, &wt2, &s2, &e2, &v2)) == 1) {
            if (f2 != 4 || wt2 != 2) continue;
            Stat *st = &stats[n++];
            if (read_stat(s2, e2, st) < 0) goto malformed;
            if (use_ops && !is_op) is_op = in_sorted(ops_v, n_ops, st->mid);
            const Name *nm = find_name(names, n_names, st->mid);
            if (nm) { st->key = nm->s; st->key_n = nm->n; }
            else {
                st->key_n = snprintf(st->keybuf, sizeof st->keybuf, "%lld", (long long)st->mid);
                st->key = st->keybuf;
            }
            st->skip = 0;
            st->split = -1;
            /* a repeated key: the first position keeps the last value (a Python dict's update) */
            for (Py_ssize_t j = 0; j < n - 1; j++) {
                Stat *o = &stats[j];
                if (!o->skip && o->key_n == st->key_n && memcmp(o->key, st->key, (size_t)st->key_n) == 0) {
                    o->kind = st->kind; o->u = st->u; o->s = st->s; o->sn = st->sn;
                    st->skip = 1;
                    break;
                }
            }
        }
        int do_split = n_split && (!use_ops || is_op);
        PyObject *row_split[16] = {NULL};
        int any_arg = 0;
        for (Py_ssize_t j = 0; j < n; j++) {
            Stat *st = &stats[j];
            if (st->skip) continue;
            if (do_split)
                for (Py_ssize_t t = 0; t < n_split; t++)
                    if (split_n[t] == st->key_n && memcmp(split_s[t], st->key, (size_t)st->key_n) == 0) {
                        st->split = (int)t;
                        break;
                    }
            if (st->split < 0) any_arg = 1;
        }
        /* columns */
        if (put_i64(&c.ids, mid) || put_i64(&c.offsets, off) || put_i64(&c.durs, dur) ||
            (use_ops && buf_put(&c.flags, is_op ? "\1" : "\0", 1))) {
            PyErr_NoMemory();
            goto done;
        }
        PyObject *a;
        if (any_arg) {
            json.len = 0;
            int first = 1, bad = buf_put(&json, "{", 1);
            for (Py_ssize_t j = 0; j < n && !bad; j++) {
                Stat *st = &stats[j];
                if (st->skip || st->split >= 0) continue;
                if (!first) bad = buf_put(&json, ",", 1);
                first = 0;
                bad = bad || put_json_str(&json, st->key, st->key_n, JSON_HEX_LOWER) || buf_put(&json, ":", 1) ||
                      put_json_value(&json, st, names, n_names);
            }
            if (bad || buf_put(&json, "}", 1)) {
                if (!PyErr_Occurred()) PyErr_NoMemory();
                goto done;
            }
            a = PyUnicode_DecodeUTF8(json.data, json.len, "replace");
            if (!a) goto done;
        } else {
            a = Py_None;
            Py_INCREF(a);
        }
        int bad = PyList_Append(arg_list, a);
        Py_DECREF(a);
        if (bad) goto done;
        for (Py_ssize_t j = 0; j < n; j++)
            if (!stats[j].skip && stats[j].split >= 0) {
                row_split[stats[j].split] = stat_object(&stats[j], names, n_names);
                if (!row_split[stats[j].split]) {
                    for (Py_ssize_t t = 0; t < n_split; t++) Py_XDECREF(row_split[t]);
                    goto done;
                }
            }
        for (Py_ssize_t t = 0; t < n_split; t++) {
            PyObject *o = row_split[t] ? row_split[t] : Py_None;
            if (!row_split[t]) Py_INCREF(o);
            bad = PyList_Append(PyTuple_GET_ITEM(split_lists, t), o);
            Py_DECREF(o);
            if (bad) {
                for (Py_ssize_t u = t + 1; u < n_split; u++) Py_XDECREF(row_split[u]);
                goto done;
            }
        }
        c.rows++;
    }
    Py_ssize_t next = -1; /* where the next call starts, -1 at the line's end */
    if (max_rows > 0 && c.rows >= max_rows) {
        r = 0;
        if (p < end) next = (Py_ssize_t)(p - (const uint8_t *)line.buf);
    }
    if (r < 0) goto malformed;
    PyObject *ids = PyBytes_FromStringAndSize(c.ids.data, c.ids.len);
    PyObject *offsets = PyBytes_FromStringAndSize(c.offsets.data, c.offsets.len);
    PyObject *durs = PyBytes_FromStringAndSize(c.durs.data, c.durs.len);
    PyObject *flags = use_ops ? PyBytes_FromStringAndSize(c.flags.data, c.flags.len) : (Py_INCREF(Py_None), Py_None);
    if (ids && offsets && durs && flags)
        result = Py_BuildValue("(LLOOOOOOn)", n_dropped, n_untimed, ids, offsets, durs, flags, arg_list,
                               split_lists, next);
    Py_XDECREF(ids);
    Py_XDECREF(offsets);
    Py_XDECREF(durs);
    Py_XDECREF(flags);
    goto done;
malformed:
    PyErr_SetString(PyExc_ValueError, "malformed XLine wire data");
done:
    Py_XDECREF(arg_list);
    Py_XDECREF(split_lists);
    PyMem_Free(names);
    free(stats);
    free(c.ids.data);
    free(c.offsets.data);
    free(c.durs.data);
    free(c.flags.data);
    free(json.data);
    free(drops.bits);
    PyBuffer_Release(&line);
    if (drop.obj) PyBuffer_Release(&drop);
    if (ops.obj) PyBuffer_Release(&ops);
    return result;
}

/* ---------------------------------------------------------------------------------------- */
/* Streaming: check_space, split_message, field_spans, strip_lines */

enum { M_SPACE, M_PLANE, M_LINE, M_EVENT, M_STAT, M_EMETA_ENTRY, M_SMETA_ENTRY, M_EMETA, M_SMETA, M_LEAF };

/* The message kind of field `f` (length-delimited) inside a message of kind `kind`. */
static int child_kind(int kind, uint32_t f) {
    switch (kind) {
        case M_SPACE: return f == 1 ? M_PLANE : M_LEAF;
        case M_PLANE: return f == 3 ? M_LINE : f == 4 ? M_EMETA_ENTRY : f == 5 ? M_SMETA_ENTRY : f == 6 ? M_STAT : M_LEAF;
        case M_LINE: return f == 4 ? M_EVENT : M_LEAF;
        case M_EVENT: return f == 4 ? M_STAT : M_LEAF;
        case M_EMETA_ENTRY: return f == 2 ? M_EMETA : M_LEAF;
        case M_SMETA_ENTRY: return f == 2 ? M_SMETA : M_LEAF;
        case M_EMETA: return f == 5 ? M_STAT : M_LEAF;
        default: return M_LEAF;
    }
}

typedef struct {
    uint64_t max_leaf;      /* longest string/bytes field */
    const uint8_t *base;    /* start of the buffer */
    const uint8_t *bad_at;  /* where the refusal is */
    int release;            /* drop the pages behind the walk (a read-only file mapping) */
    const uint8_t *released;
    long page;
} Check;

/* Give the pages of [c->released, upto) back to the kernel: only for a read-only file mapping,
 * whose pages are read again from the file if touched (they are not). */
static void release_upto(Check *c, const uint8_t *upto) {
    if (!c->release) return;
    uintptr_t from = ((uintptr_t)c->released + (uintptr_t)c->page - 1) & ~((uintptr_t)c->page - 1);
    uintptr_t to = (uintptr_t)upto & ~((uintptr_t)c->page - 1);
    if (to > from + ((uintptr_t)32 << 20)) {
        madvise((void *)from, to - from, MADV_DONTNEED);
        c->released = (const uint8_t *)to;
    }
}

/* Walk message [p, end) of `kind` and everything in it: the structure protobuf checks, the UTF-8
 * of XStat.str_value, and no string or bytes field longer than c->max_leaf. 0 ok, -1 malformed,
 * -3 a field too long (c->bad_at). */
static int check_msg(Check *c, const uint8_t *p, const uint8_t *end, int kind) {
    uint32_t f;
    int wt, r;
    const uint8_t *s = NULL, *e = NULL, *at = p;
    uint64_t val = 0;
    while ((r = next_field(&p, end, &f, &wt, &s, &e, &val)) == 1) {
        if (wt == 2) {
            int ck = child_kind(kind, f);
            if (ck == M_LEAF) {
                if ((uint64_t)(e - s) > c->max_leaf) { c->bad_at = at; return -3; }
                if (kind == M_STAT && f == 5 && !utf8_valid(s, e)) { c->bad_at = at; return -1; }
            } else {
                int rc = check_msg(c, s, e, ck);
                if (rc < 0) return rc;
                if (kind == M_PLANE) release_upto(c, e);
            }
        }
        at = p;
    }
    if (r < 0) c->bad_at = at;
    return r;
}

/* check_space(raw, max_leaf, release=False) -> None, or (what, at, n): "malformed" at byte `at`,
 * or "too long": a string/bytes field of n bytes (over max_leaf) whose key is at byte `at`. */
static PyObject *check_space(PyObject *m, PyObject *args, PyObject *kw) {
    (void)m;
    static char *kwlist[] = {"raw", "max_leaf", "release", NULL};
    Py_buffer view;
    unsigned long long max_leaf;
    int release = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*K|p", kwlist, &view, &max_leaf, &release)) return NULL;
    Check c = {(uint64_t)max_leaf, view.buf, view.buf, release, view.buf, sysconf(_SC_PAGESIZE)};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = check_msg(&c, view.buf, (const uint8_t *)view.buf + view.len, M_SPACE);
    release_upto(&c, (const uint8_t *)view.buf + view.len);
    Py_END_ALLOW_THREADS
    Py_ssize_t where = (Py_ssize_t)(c.bad_at - c.base), n = 0;
    if (rc == -3) { /* the refused field's length */
        const uint8_t *p = c.bad_at, *end = c.base + view.len, *s = NULL, *e = NULL;
        uint32_t f;
        int wt;
        uint64_t val;
        if (next_field(&p, end, &f, &wt, &s, &e, &val) == 1) n = (Py_ssize_t)(e - s);
    }
    PyBuffer_Release(&view);
    if (rc == -3) return Py_BuildValue("(snn)", "too long", where, n);
    if (rc < 0) return Py_BuildValue("(snn)", "malformed", where, (Py_ssize_t)0);
    Py_RETURN_NONE;
}

/* split_message(msg, field) -> (rest, n): the message without its length-delimited fields
 * `field` (XSpace without planes, XPlane without lines), and how many there were. */
static PyObject *split_message(PyObject *m, PyObject *args) {
    (void)m;
    Py_buffer view;
    unsigned int field;
    if (!PyArg_ParseTuple(args, "y*I", &view, &field)) return NULL;
    Buf out = {0};
    const uint8_t *p = view.buf, *end = p + view.len, *at = p, *s = NULL, *e = NULL;
    uint32_t f;
    int wt, r, bad = 0;
    uint64_t val = 0;
    Py_ssize_t n = 0;
    while ((r = next_field(&p, end, &f, &wt, &s, &e, &val)) == 1) {
        if (f == field && wt == 2) n++;
        else if (buf_put(&out, (const char *)at, p - at)) { bad = 1; break; }
        at = p;
    }
    PyObject *result = NULL;
    if (bad) PyErr_NoMemory();
    else if (r < 0) PyErr_SetString(PyExc_ValueError, "malformed XSpace wire data");
    else result = Py_BuildValue("(y#n)", out.data ? out.data : "", out.len, n);
    free(out.data);
    PyBuffer_Release(&view);
    return result;
}

/* What walk_fields calls for each payload [s, e) of the field it walks (base: the message's first
 * byte): 0 to go on, 1 when the payload is malformed, -1 with a Python error set. */
typedef int (*FieldVisit)(void *ctx, const uint8_t *base, const uint8_t *s, const uint8_t *e);

/* Visit the payloads of the length-delimited fields `field` of `view` from byte `start`, at most
 * max_n (0: all); *next is where to go on, -1 at the end. 0, or -1 with a Python error set. */
static int walk_fields(const Py_buffer *view, uint32_t field, Py_ssize_t start, Py_ssize_t max_n,
                       FieldVisit visit, void *ctx, Py_ssize_t *next) {
    if (start < 0 || start > view->len) {
        PyErr_SetString(PyExc_ValueError, "start is outside the message");
        return -1;
    }
    const uint8_t *base = view->buf, *p = base + start, *end = base + view->len, *s = NULL, *e = NULL;
    uint32_t f;
    int wt, r = 0;
    uint64_t val = 0;
    Py_ssize_t n = 0;
    while ((max_n <= 0 || n < max_n) && (r = next_field(&p, end, &f, &wt, &s, &e, &val)) == 1) {
        if (f != field || wt != 2) continue;
        int v = visit(ctx, base, s, e);
        if (v < 0) return -1;
        if (v > 0) { r = -1; break; }
        n++;
    }
    if (r < 0) {
        PyErr_SetString(PyExc_ValueError, "malformed XSpace wire data");
        return -1;
    }
    *next = (max_n > 0 && n >= max_n && p < end) ? (Py_ssize_t)(p - base) : (Py_ssize_t)-1;
    return 0;
}

static int append_span(void *ctx, const uint8_t *base, const uint8_t *s, const uint8_t *e) {
    PyObject *span = Py_BuildValue("(nn)", (Py_ssize_t)(s - base), (Py_ssize_t)(e - s));
    int bad = !span || PyList_Append((PyObject *)ctx, span) < 0;
    Py_XDECREF(span);
    return bad ? -1 : 0;
}

/* field_spans(msg, field, start=0, max_n=0) -> (spans, next): (offset, size) of the payloads of
 * the length-delimited fields `field` from byte `start`, at most max_n (0: all); next is where
 * to go on, -1 at the end. */
static PyObject *field_spans(PyObject *m, PyObject *args) {
    (void)m;
    Py_buffer view;
    unsigned int field;
    Py_ssize_t start = 0, max_n = 0, next = -1;
    if (!PyArg_ParseTuple(args, "y*I|nn", &view, &field, &start, &max_n)) return NULL;
    PyObject *result = NULL, *spans = PyList_New(0);
    if (spans && walk_fields(&view, field, start, max_n, append_span, spans, &next) == 0)
        result = Py_BuildValue("(On)", spans, next);
    Py_XDECREF(spans);
    PyBuffer_Release(&view);
    return result;
}

typedef struct {
    Buf out, line;    /* the stripped lines as an XPlane message; one line being stripped */
    PyObject *spans;  /* (offset, size, n_events) per line */
} Strip;

static int strip_one(void *ctx, const uint8_t *base, const uint8_t *s, const uint8_t *e) {
    Strip *st = ctx;
    st->line.len = 0;
    Py_ssize_t n_events = 0;
    int rl = strip_line(s, e, &st->line, &n_events);
    if (rl == -2 || (rl >= 0 && put_message(&st->out, 3, st->line.data, st->line.len))) {
        PyErr_NoMemory();
        return -1;
    }
    if (rl < 0) return 1;
    PyObject *span = Py_BuildValue("(nnn)", (Py_ssize_t)(s - base), (Py_ssize_t)(e - s), n_events);
    int bad = !span || PyList_Append(st->spans, span) < 0;
    Py_XDECREF(span);
    return bad ? -1 : 0;
}

/* strip_lines(plane, start=0, max_lines=0) -> (headers, spans, next): the XPlane's lines from
 * byte `start` (at most max_lines; 0: all) without their events, as an XPlane message holding
 * only them (for protobuf), with (offset, size, n_events) of each line's bytes in `plane`; next
 * is where to go on, -1 at the end. */
static PyObject *strip_lines(PyObject *m, PyObject *args) {
    (void)m;
    Py_buffer view;
    Py_ssize_t start = 0, max_lines = 0, next = -1;
    if (!PyArg_ParseTuple(args, "y*|nn", &view, &start, &max_lines)) return NULL;
    Strip st = {{0}, {0}, PyList_New(0)};
    PyObject *result = NULL;
    if (st.spans && walk_fields(&view, 3, start, max_lines, strip_one, &st, &next) == 0)
        result = Py_BuildValue("(y#On)", st.out.data ? st.out.data : "", st.out.len, st.spans, next);
    Py_XDECREF(st.spans);
    free(st.out.data);
    free(st.line.data);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"check_space", (PyCFunction)(void (*)(void))check_space, METH_VARARGS | METH_KEYWORDS,
     "check_space(raw, max_leaf, release=False) -> None | (what, at, n): walk the whole XSpace "
     "(every plane, line, event, stat and metadata entry) as protobuf would, keeping nothing. "
     "None when it is well formed; ('malformed', at, 0) with the byte where the walk stopped; "
     "('too long', at, n) for a string/bytes field of n bytes, longer than max_leaf, whose key is "
     "at byte `at`. With release, the pages already walked are given back to the kernel (only "
     "for a read-only file mapping)."},
    {"split_message", split_message, METH_VARARGS,
     "split_message(msg, field) -> (rest: bytes, n: int): the message without its "
     "length-delimited fields numbered `field`, and how many there were."},
    {"field_spans", field_spans, METH_VARARGS,
     "field_spans(msg, field, start=0, max_n=0) -> (spans, next): (offset, size) of the payloads "
     "of the length-delimited fields `field` from byte start, at most max_n (0: all); next is "
     "where to go on, -1 at the end."},
    {"strip_lines", strip_lines, METH_VARARGS,
     "strip_lines(plane, start=0, max_lines=0) -> (headers, spans, next): an XPlane's lines from "
     "byte start without their events, as an XPlane message of only those lines, and (offset, "
     "size, n_events) of each line's bytes in plane; next is where to go on, -1 at the end."},
    {"split_space", split_space, METH_O,
     "split_space(raw) -> (stripped: bytes, lines: list[list[tuple[int, int, int]]]): the "
     "serialized XSpace without its XEvents, and (offset, size, n_events) of each XLine of each "
     "XPlane in raw, in the order of the parsed message's repeated fields. Raises ValueError on "
     "malformed wire data (every event and stat is checked)."},
    {"scan_line", (PyCFunction)(void (*)(void))scan_line, METH_VARARGS | METH_KEYWORDS,
     "scan_line(line, names, drop_ids=None, split=(), op_ids=None, start=0, max_rows=0) -> "
     "(n_dropped, n_untimed, ids, offset_ps, dur_ps, is_op, args, split_values, next): the events "
     "of one serialized XLine from byte `start`, at most max_rows kept ones (0: all); next is the "
     "byte to start the next call at, -1 at the end of the line. "
     "Events whose metadata id is in drop_ids (sorted int64 bytes) are counted in n_dropped, "
     "aggregated ones (num_occurrences) in n_untimed; for the others ids/offset_ps/dur_ps are "
     "int64 bytes, args the stats as compact JSON (None when none is "
     "left), split_values[i] the values of stat split[i] (None where absent), taken out of args. "
     "With op_ids (sorted int64 bytes of stat metadata ids), only events carrying one of those "
     "stats are split and is_op is their uint8 flag per event; else is_op is None."},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_xplane_wire",
    "XEvents read from the XSpace wire format (see tracekit/parsers/_xplane_read.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__xplane_wire(void) { return PyModule_Create(&module); }
