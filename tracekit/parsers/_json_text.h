/* JSON text shared by tracekit's two C modules (_kineto_scan.c, _xplane_wire.c): a growable
 * byte buffer and one writer of a JSON string literal. Include after <Python.h> (Py_ssize_t).
 *
 * Header-only (static functions): each module is its own shared object, so there is no third
 * object file to link, and setup.py lists this file in both extensions' `depends`. */
#ifndef TRACEKIT_JSON_TEXT_H
#define TRACEKIT_JSON_TEXT_H

#include <stdlib.h>
#include <string.h>

/* Bytes written so far (`len`) in `data`, which holds `cap`; zero-initialise, free(data) when done. */
typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

/* Append n bytes; 0, or -1 when out of memory (the buffer is then unchanged). */
static int buf_put(Buf *b, const char *s, Py_ssize_t n) {
    if (b->len + n > b->cap) {
        Py_ssize_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->len + n) nc *= 2;
        char *d = realloc(b->data, (size_t)nc);
        if (!d) return -1;
        b->data = d;
        b->cap = nc;
    }
    memcpy(b->data + b->len, s, (size_t)n);
    b->len += n;
    return 0;
}

/* Hex digits of a \u00XX escape: DuckDB's JSON writer (yyjson) writes them in upper case,
 * msgspec in lower case; each module keeps the text its Python twin writes. */
static const char JSON_HEX_UPPER[] = "0123456789ABCDEF";
static const char JSON_HEX_LOWER[] = "0123456789abcdef";

/* The n bytes at s (already unescaped) as a JSON string literal: '"', '\' and the control
 * characters escaped (the short forms \b \f \n \r \t where JSON has one, else \u00XX with
 * `hex` digits), every other byte as is. 0, or -1 when out of memory. */
static int put_json_str(Buf *b, const char *s, Py_ssize_t n, const char *hex) {
    if (buf_put(b, "\"", 1)) return -1;
    Py_ssize_t run = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        if (buf_put(b, s + run, i - run)) return -1;
        run = i + 1;
        char esc[6] = {'\\', 0};
        int k = 2;
        switch (c) {
            case '"': esc[1] = '"'; break;
            case '\\': esc[1] = '\\'; break;
            case '\b': esc[1] = 'b'; break;
            case '\f': esc[1] = 'f'; break;
            case '\n': esc[1] = 'n'; break;
            case '\r': esc[1] = 'r'; break;
            case '\t': esc[1] = 't'; break;
            default:
                esc[1] = 'u'; esc[2] = '0'; esc[3] = '0'; esc[4] = hex[c >> 4]; esc[5] = hex[c & 15];
                k = 6;
        }
        if (buf_put(b, esc, k)) return -1;
    }
    if (buf_put(b, s + run, n - run)) return -1;
    return buf_put(b, "\"", 1);
}

#endif
