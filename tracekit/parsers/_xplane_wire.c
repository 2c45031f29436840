/*
 * tracekit.parsers._xplane_wire: the metadata id of every XEvent, read from the serialized XSpace.
 *
 * The XPlane reader drops Python-tracer events by metadata id (they are ~95 % of the events of a
 * capture with the Python tracer on). Reading 800k ids through protobuf's per-element Python
 * wrappers costs ~0.15 s; walking the wire format here costs ~10 ms. Only the fields on the path
 * are decoded (field numbers from tracekit/parsers/proto/xplane.proto):
 *
 *   XSpace.planes = 1 -> XPlane.lines = 3 -> XLine.events = 4 -> XEvent.metadata_id = 1
 *
 * Returns (ids, lines): ids is the int64 metadata ids (native byte order) of all events in
 * document order, lines[p][l] the event count of line l of plane p, matching the order of the
 * parsed message's repeated fields. The data has already been parsed by protobuf, so any
 * malformation here raises ValueError and the caller falls back to the wrappers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t *v;
    Py_ssize_t n, cap;
} Ids;

typedef struct {
    Py_ssize_t *v; /* per line: event count; plane boundaries kept in `planes` */
    Py_ssize_t n, cap;
} Counts;

static int grow(void **p, Py_ssize_t *cap, Py_ssize_t need, size_t width) {
    if (need <= *cap) return 0;
    Py_ssize_t nc = *cap ? *cap * 2 : 1024;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * width);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

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

/* Iterate the fields of a message [p, end). For each: *field, *wt, and for length-delimited
 * fields the payload [*s, *e); for varints *val. Returns 1 per field, 0 at the end, -1 bad. */
static int next_field(const uint8_t **pp, const uint8_t *end, uint32_t *field, int *wt,
                      const uint8_t **s, const uint8_t **e, uint64_t *val) {
    if (*pp >= end) return 0;
    uint64_t key;
    if (varint(pp, end, &key)) return -1;
    *field = (uint32_t)(key >> 3);
    *wt = (int)(key & 7);
    switch (*wt) {
        case 0:
            return varint(pp, end, val) ? -1 : 1;
        case 1:
            if (end - *pp < 8) return -1;
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
            *pp += 4;
            return 1;
        default:
            return -1; /* groups: not in XPlane */
    }
}

static int walk_line(const uint8_t *p, const uint8_t *end, Ids *ids, Py_ssize_t *count) {
    uint32_t f;
    int wt, r;
    const uint8_t *s = NULL, *e = NULL;
    uint64_t val = 0;
    while ((r = next_field(&p, end, &f, &wt, &s, &e, &val)) == 1) {
        if (f != 4 || wt != 2) continue;
        int64_t id = 0;
        const uint8_t *q = s;
        uint32_t f2;
        int wt2, r2;
        const uint8_t *s2, *e2;
        uint64_t v2 = 0;
        while ((r2 = next_field(&q, e, &f2, &wt2, &s2, &e2, &v2)) == 1)
            if (f2 == 1 && wt2 == 0) id = (int64_t)v2;
        if (r2 < 0) return -1;
        if (grow((void **)&ids->v, &ids->cap, ids->n + 1, sizeof(int64_t))) return -2;
        ids->v[ids->n++] = id;
        (*count)++;
    }
    return r;
}

static PyObject *event_metadata_ids(PyObject *m, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Ids ids = {NULL, 0, 0};
    Counts lines = {NULL, 0, 0};
    Py_ssize_t *plane_lines = NULL, n_planes = 0, cap_planes = 0;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    const uint8_t *p = view.buf, *end = p + view.len;
    uint32_t f;
    int wt, r;
    const uint8_t *s = NULL, *e = NULL;
    uint64_t val = 0;
    while (!bad && (r = next_field(&p, end, &f, &wt, &s, &e, &val)) == 1) {
        if (f != 1 || wt != 2) continue; /* XSpace.planes */
        if (grow((void **)&plane_lines, &cap_planes, n_planes + 1, sizeof(Py_ssize_t))) { bad = -2; break; }
        plane_lines[n_planes] = 0;
        const uint8_t *q = s;
        uint32_t f2;
        int wt2, r2;
        const uint8_t *s2 = NULL, *e2 = NULL;
        uint64_t v2 = 0;
        while ((r2 = next_field(&q, e, &f2, &wt2, &s2, &e2, &v2)) == 1) {
            if (f2 != 3 || wt2 != 2) continue; /* XPlane.lines */
            if (grow((void **)&lines.v, &lines.cap, lines.n + 1, sizeof(Py_ssize_t))) { bad = -2; break; }
            Py_ssize_t count = 0;
            int rl = walk_line(s2, e2, &ids, &count);
            if (rl < 0) { bad = rl; break; }
            lines.v[lines.n++] = count;
            plane_lines[n_planes]++;
        }
        if (!bad && r2 < 0) bad = -1;
        n_planes++;
    }
    if (!bad && r < 0) bad = -1;
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *out = NULL;
    if (bad == -2) {
        PyErr_NoMemory();
    } else if (bad) {
        PyErr_SetString(PyExc_ValueError, "malformed XSpace wire data");
    } else {
        PyObject *b = PyBytes_FromStringAndSize((const char *)ids.v, ids.n * (Py_ssize_t)sizeof(int64_t));
        PyObject *planes = PyList_New(n_planes);
        Py_ssize_t k = 0;
        for (Py_ssize_t i = 0; planes && i < n_planes; i++) {
            PyObject *l = PyList_New(plane_lines[i]);
            if (!l) { Py_CLEAR(planes); break; }
            for (Py_ssize_t j = 0; j < plane_lines[i]; j++) PyList_SET_ITEM(l, j, PyLong_FromSsize_t(lines.v[k++]));
            PyList_SET_ITEM(planes, i, l);
        }
        if (b && planes) out = PyTuple_Pack(2, b, planes);
        Py_XDECREF(b);
        Py_XDECREF(planes);
    }
    free(ids.v);
    free(lines.v);
    free(plane_lines);
    return out;
}

static PyMethodDef methods[] = {
    {"event_metadata_ids", event_metadata_ids, METH_O,
     "event_metadata_ids(raw) -> (ids: bytes of int64, lines: list[list[int]]): the metadata id "
     "of every XEvent of a serialized XSpace, and the event count of each line of each plane."},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_xplane_wire",
    "XEvent metadata ids read from the XSpace wire format (see tracekit/parsers/_xplane_read.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__xplane_wire(void) { return PyModule_Create(&module); }
