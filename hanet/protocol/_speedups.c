/* Native remoting header codec: hanet.protocol._speedups.
 *
 * The per-request work of the broker port that Python spends most on, for the JSON header
 * RocketMQ clients send (the reference is hanet/protocol/_remoting.py, which keeps every rule):
 *
 *     decode_json_header(buf) -> (code, language, version, opaque, flag, remark, ext) | None
 *
 * Parses a header such as {"code":310,"language":"JAVA","opaque":2,"flag":0,"version":121,
 * "extFields":{"a":"g","d":4,"k":false}} in one pass. ``ext`` holds the ext fields as strings,
 * as Java would have sent them (a number as its digits, true/false, a null value left out),
 * in the order given; None when the header has no (or a null) ``extFields``. ``language`` is
 * the value as given (a str or an int; "JAVA" when absent); code, version, opaque and flag are
 * the 32-bit integers (0 when absent, code excepted). Returns None for anything else than
 * that plain shape (a float, a nested value, a number out of range, a surrogate escape, bytes
 * that are not UTF-8, no code, not JSON at all): the caller then takes the pure-Python path,
 * which reads what it can and names what is wrong. So the native path never accepts what
 * the reference refuses, and what it accepts decodes to the same values.
 *
 *     encode_json_header(code, ext, flag, language, opaque, remark, version) -> bytes
 *
 * The JSON header 4.9.8 writes, keys in its order (code, extFields, flag, language, opaque,
 * remark, serializeTypeCurrentRPC, version): ``ext`` a list of (key, value) string pairs in
 * the order to write them, or None (no extFields); ``remark`` a str or None (left out).
 * Strings are escaped as Python's json module with ensure_ascii=False (the same bytes); a
 * string that is not valid Unicode (a lone surrogate) raises UnicodeEncodeError as str.encode.
 *
 *     read_header(cls, fields, spec) -> cls instance | None
 *
 * A typed header (a frozen attrs class) from a command's ext fields (a dict of str), without
 * its __init__: ``spec`` is one (attr, key, kind, maximum, required, default) per field in
 * declaration order, kind 0 a string, 1 a boolean ("true" or "1", "false", "0" or ""), 2 a
 * number (ASCII digits, at most 19, no sign, at most ``maximum``); key None: never on the wire
 * (then required means missing). An absent optional field takes ``default``. Returns None for anything else (a
 * missing required field, a value of another shape, fields not a dict): the caller's Python
 * reader (the reference, hanet/protocol/_headers.py) then reads it or names what is wrong.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ---- decoding --------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
    char *scratch; /* unescaped string bytes */
    Py_ssize_t cap;
} Parser;

static inline void skip_ws(Parser *ps) {
    while (ps->p < ps->end &&
           (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int grow(Parser *ps, Py_ssize_t need) {
    if (need <= ps->cap) return 0;
    Py_ssize_t cap = ps->cap ? ps->cap : 256;
    while (cap < need) cap *= 2;
    char *fresh = PyMem_Realloc(ps->scratch, (size_t)cap);
    if (fresh == NULL) return -1;
    ps->scratch = fresh;
    ps->cap = cap;
    return 0;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A JSON string at ps->p (its opening quote): a new str, or NULL (no error set: not the
 * plain shape; an error set: out of memory). */
static PyObject *parse_string(Parser *ps) {
    const unsigned char *p = ps->p + 1, *end = ps->end;
    const unsigned char *start = p;
    while (p < end && *p != '"' && *p != '\\' && *p >= 0x20) p++;
    if (p >= end || *p < 0x20) return NULL;
    if (*p == '"') {
        PyObject *s = PyUnicode_DecodeUTF8((const char *)start, p - start, NULL);
        if (s == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return NULL;
            PyErr_Clear();
            return NULL;
        }
        ps->p = p + 1;
        return s;
    }
    /* escapes: unescape into the scratch buffer (no longer than the rest of the input: an
     * escape is never shorter than the bytes it stands for) */
    Py_ssize_t n = p - start;
    if (grow(ps, end - start) < 0) {
        PyErr_NoMemory();
        return NULL;
    }
    char *out = ps->scratch;
    memcpy(out, start, (size_t)n);
    while (p < end) {
        unsigned char c = *p;
        if (c == '"') break;
        if (c < 0x20) return NULL;
        if (c != '\\') {
            out[n++] = (char)c;
            p++;
            continue;
        }
        if (end - p < 2) return NULL;
        unsigned char e = p[1];
        p += 2;
        switch (e) {
        case '"': out[n++] = '"'; break;
        case '\\': out[n++] = '\\'; break;
        case '/': out[n++] = '/'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u': {
            if (end - p < 4) return NULL;
            int h0 = hexval(p[0]), h1 = hexval(p[1]), h2 = hexval(p[2]), h3 = hexval(p[3]);
            if ((h0 | h1 | h2 | h3) < 0) return NULL;
            unsigned int cp = (unsigned)((h0 << 12) | (h1 << 8) | (h2 << 4) | h3);
            p += 4;
            if (cp >= 0xD800 && cp <= 0xDFFF) return NULL; /* surrogates: the long way */
            if (cp < 0x80) {
                out[n++] = (char)cp;
            } else if (cp < 0x800) {
                out[n++] = (char)(0xC0 | (cp >> 6));
                out[n++] = (char)(0x80 | (cp & 0x3F));
            } else {
                out[n++] = (char)(0xE0 | (cp >> 12));
                out[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                out[n++] = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default:
            return NULL;
        }
    }
    if (p >= end) return NULL;
    PyObject *s = PyUnicode_DecodeUTF8(out, n, NULL);
    if (s == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return NULL;
        PyErr_Clear();
        return NULL;
    }
    ps->p = p + 1;
    return s;
}

/* A JSON integer literal at ps->p: its digits (a leading '-' kept, "-0" as "0") in *start /
 * *len, or 0 when the value is not a plain integer (a float, leading zeros, too long). */
static int scan_int(Parser *ps, const unsigned char **start, Py_ssize_t *len) {
    const unsigned char *p = ps->p, *end = ps->end, *s = p;
    if (p < end && *p == '-') p++;
    const unsigned char *digits = p;
    while (p < end && *p >= '0' && *p <= '9') p++;
    Py_ssize_t nd = p - digits;
    if (nd == 0 || nd > 18) return 0;
    if (nd > 1 && *digits == '0') return 0;
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) return 0;
    ps->p = p;
    if (nd == 1 && *digits == '0') s = digits; /* -0 is 0 */
    *start = s;
    *len = p - s;
    return 1;
}

static long long int_value(const unsigned char *s, Py_ssize_t len) {
    int neg = 0;
    long long v = 0;
    if (*s == '-') {
        neg = 1;
        s++;
        len--;
    }
    for (Py_ssize_t i = 0; i < len; i++) v = v * 10 + (s[i] - '0');
    return neg ? -v : v;
}

static int literal(Parser *ps, const char *word, size_t n) {
    if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, word, n) == 0) {
        ps->p += n;
        return 1;
    }
    return 0;
}

/* ``dict`` without its None values (steals the reference). */
static PyObject *drop_nulls(PyObject *dict) {
    PyObject *out = PyDict_New(), *key, *value;
    Py_ssize_t pos = 0;
    if (out != NULL) {
        while (PyDict_Next(dict, &pos, &key, &value)) {
            if (value != Py_None && PyDict_SetItem(out, key, value) < 0) {
                Py_CLEAR(out);
                break;
            }
        }
    }
    Py_DECREF(dict);
    return out;
}

/* extFields' object: a new dict of str -> str, or NULL (error set or not, as parse_string). */
static PyObject *parse_ext(Parser *ps) {
    int nulls = 0;
    PyObject *dict = PyDict_New();
    if (dict == NULL) return NULL;
    ps->p++; /* { */
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        return dict;
    }
    for (;;) {
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != '"') goto fail;
        PyObject *key = parse_string(ps);
        if (key == NULL) goto fail;
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != ':') {
            Py_DECREF(key);
            goto fail;
        }
        ps->p++;
        skip_ws(ps);
        PyObject *value = NULL;
        int omit = 0;
        if (ps->p >= ps->end) {
            Py_DECREF(key);
            goto fail;
        }
        unsigned char c = *ps->p;
        if (c == '"') {
            value = parse_string(ps);
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            const unsigned char *s;
            Py_ssize_t len;
            if (scan_int(ps, &s, &len))
                value = PyUnicode_DecodeASCII((const char *)s, len, NULL);
        } else if (literal(ps, "true", 4)) {
            value = PyUnicode_FromStringAndSize("true", 4);
        } else if (literal(ps, "false", 5)) {
            value = PyUnicode_FromStringAndSize("false", 5);
        } else if (literal(ps, "null", 4)) {
            omit = 1;
        }
        if (omit) {
            /* a null value is left out at the end (where a repeated key stands is where it
             * first stood, as in the dict the reference builds) */
            nulls = 1;
            if (PyDict_SetItem(dict, key, Py_None) < 0) {
                Py_DECREF(key);
                goto fail;
            }
        } else {
            if (value == NULL) {
                Py_DECREF(key);
                goto fail;
            }
            int rc = PyDict_SetItem(dict, key, value);
            Py_DECREF(value);
            if (rc < 0) {
                Py_DECREF(key);
                goto fail;
            }
        }
        Py_DECREF(key);
        skip_ws(ps);
        if (ps->p >= ps->end) goto fail;
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p == '}') {
            ps->p++;
            if (nulls) return drop_nulls(dict);
            return dict;
        }
        goto fail;
    }
fail:
    Py_DECREF(dict);
    return NULL;
}

enum { K_OTHER, K_CODE, K_LANGUAGE, K_VERSION, K_OPAQUE, K_FLAG, K_REMARK, K_EXT };

static int key_kind(PyObject *key) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(key, &n);
    if (s == NULL) {
        PyErr_Clear();
        return K_OTHER;
    }
#define IS(word) (n == (Py_ssize_t)sizeof(word) - 1 && memcmp(s, word, sizeof(word) - 1) == 0)
    if (IS("code")) return K_CODE;
    if (IS("language")) return K_LANGUAGE;
    if (IS("version")) return K_VERSION;
    if (IS("opaque")) return K_OPAQUE;
    if (IS("flag")) return K_FLAG;
    if (IS("remark")) return K_REMARK;
    if (IS("extFields")) return K_EXT;
#undef IS
    return K_OTHER;
}

static PyObject *decode_json_header(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Parser ps = {(const unsigned char *)view.buf, (const unsigned char *)view.buf + view.len,
                 NULL, 0};
    long long ints[6] = {0, 0, 0, 0, 0, 0}; /* indexed by kind */
    int have_code = 0;
    PyObject *language = NULL, *remark = NULL, *ext = NULL, *result = NULL;

    skip_ws(&ps);
    if (ps.p >= ps.end || *ps.p != '{') goto plain_no;
    ps.p++;
    skip_ws(&ps);
    if (ps.p < ps.end && *ps.p == '}') {
        ps.p++;
        goto done_object;
    }
    for (;;) {
        skip_ws(&ps);
        if (ps.p >= ps.end || *ps.p != '"') goto plain_no;
        PyObject *key = parse_string(&ps);
        if (key == NULL) goto plain_no;
        int kind = key_kind(key);
        Py_DECREF(key);
        skip_ws(&ps);
        if (ps.p >= ps.end || *ps.p != ':') goto plain_no;
        ps.p++;
        skip_ws(&ps);
        if (ps.p >= ps.end) goto plain_no;
        unsigned char c = *ps.p;
        int is_null = 0;
        if (c == 'n') {
            if (!literal(&ps, "null", 4)) goto plain_no;
            is_null = 1;
        }
        switch (kind) {
        case K_CODE:
        case K_VERSION:
        case K_OPAQUE:
        case K_FLAG: {
            if (is_null) { /* the default (code: present, 0) */
                ints[kind] = 0;
                if (kind == K_CODE) have_code = 1;
                break;
            }
            const unsigned char *s;
            Py_ssize_t len;
            if (!(c == '-' || (c >= '0' && c <= '9')) || !scan_int(&ps, &s, &len)) goto plain_no;
            long long v = int_value(s, len);
            if (v < INT32_MIN || v > INT32_MAX) goto plain_no;
            ints[kind] = v;
            if (kind == K_CODE) have_code = 1;
            break;
        }
        case K_LANGUAGE: {
            if (is_null) goto plain_no;
            PyObject *value = NULL;
            if (c == '"') {
                value = parse_string(&ps);
            } else if (c == '-' || (c >= '0' && c <= '9')) {
                const unsigned char *s;
                Py_ssize_t len;
                if (scan_int(&ps, &s, &len)) value = PyLong_FromLongLong(int_value(s, len));
            }
            if (value == NULL) goto plain_no;
            Py_XSETREF(language, value);
            break;
        }
        case K_REMARK: {
            if (is_null) {
                Py_CLEAR(remark);
                break;
            }
            if (c != '"') goto plain_no;
            PyObject *value = parse_string(&ps);
            if (value == NULL) goto plain_no;
            Py_XSETREF(remark, value);
            break;
        }
        case K_EXT: {
            if (is_null) {
                Py_CLEAR(ext);
                break;
            }
            if (c != '{') goto plain_no;
            PyObject *value = parse_ext(&ps);
            if (value == NULL) goto plain_no;
            Py_XSETREF(ext, value);
            break;
        }
        default: { /* a key the reference ignores: any plain scalar */
            if (is_null) break;
            if (c == '"') {
                PyObject *value = parse_string(&ps);
                if (value == NULL) goto plain_no;
                Py_DECREF(value);
            } else if (c == '-' || (c >= '0' && c <= '9')) {
                const unsigned char *s;
                Py_ssize_t len;
                if (!scan_int(&ps, &s, &len)) goto plain_no;
            } else if (!literal(&ps, "true", 4) && !literal(&ps, "false", 5)) {
                goto plain_no;
            }
        }
        }
        skip_ws(&ps);
        if (ps.p >= ps.end) goto plain_no;
        if (*ps.p == ',') {
            ps.p++;
            continue;
        }
        if (*ps.p == '}') {
            ps.p++;
            break;
        }
        goto plain_no;
    }
done_object:
    skip_ws(&ps);
    if (ps.p != ps.end || !have_code) goto plain_no;
    if (language == NULL) {
        language = PyUnicode_FromStringAndSize("JAVA", 4);
        if (language == NULL) goto out;
    }
    result = Py_BuildValue("(LOLLLOO)", ints[K_CODE], language, ints[K_VERSION],
                           ints[K_OPAQUE], ints[K_FLAG], remark ? remark : Py_None,
                           ext ? ext : Py_None);
    goto out;
plain_no:
    if (PyErr_Occurred()) goto out; /* out of memory: raised */
    result = Py_None;
    Py_INCREF(result);
out:
    Py_XDECREF(language);
    Py_XDECREF(remark);
    Py_XDECREF(ext);
    PyMem_Free(ps.scratch);
    PyBuffer_Release(&view);
    return result;
}

/* ---- encoding --------------------------------------------------------------------------- */

typedef struct {
    char *buf;
    Py_ssize_t len, cap;
} Out;

static int out_reserve(Out *o, Py_ssize_t more) {
    if (o->len + more <= o->cap) return 0;
    Py_ssize_t cap = o->cap ? o->cap : 512;
    while (cap < o->len + more) cap *= 2;
    char *fresh = PyMem_Realloc(o->buf, (size_t)cap);
    if (fresh == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->buf = fresh;
    o->cap = cap;
    return 0;
}

static int out_raw(Out *o, const char *s, Py_ssize_t n) {
    if (out_reserve(o, n) < 0) return -1;
    memcpy(o->buf + o->len, s, (size_t)n);
    o->len += n;
    return 0;
}

static int out_int(Out *o, PyObject *value) {
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred()) return -1;
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%lld", v);
    return out_raw(o, tmp, n);
}

/* A JSON string as json.dumps(ensure_ascii=False) writes it, in UTF-8. */
static int out_str(Out *o, PyObject *value) {
    if (!PyUnicode_Check(value)) {
        PyErr_Format(PyExc_TypeError, "a header string is %.80s, not str",
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(value, &n);
    if (s == NULL) return -1; /* a lone surrogate: UnicodeEncodeError, as str.encode */
    if (out_reserve(o, n * 6 + 2) < 0) return -1;
    char *w = o->buf + o->len;
    *w++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *w++ = (char)c;
            continue;
        }
        *w++ = '\\';
        switch (c) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '\n': *w++ = 'n'; break;
        case '\r': *w++ = 'r'; break;
        case '\t': *w++ = 't'; break;
        case '\b': *w++ = 'b'; break;
        case '\f': *w++ = 'f'; break;
        default: {
            static const char hex[] = "0123456789abcdef";
            *w++ = 'u';
            *w++ = '0';
            *w++ = '0';
            *w++ = hex[c >> 4];
            *w++ = hex[c & 0xF];
        }
        }
    }
    *w++ = '"';
    o->len = w - o->buf;
    return 0;
}

#define RAW(o, lit) out_raw((o), (lit), (Py_ssize_t)sizeof(lit) - 1)

static PyObject *encode_json_header(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_json_header(code, ext, flag, language, opaque, remark, version)");
        return NULL;
    }
    PyObject *code = args[0], *ext = args[1], *flag = args[2], *language = args[3];
    PyObject *opaque = args[4], *remark = args[5], *version = args[6];
    Out o = {NULL, 0, 0};
    PyObject *result = NULL;
    if (RAW(&o, "{\"code\":") < 0 || out_int(&o, code) < 0) goto out;
    if (ext != Py_None) {
        PyObject *seq = PySequence_Fast(ext, "ext must be a sequence of (key, value) pairs");
        if (seq == NULL) goto out;
        Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
        PyObject **items = PySequence_Fast_ITEMS(seq);
        if (RAW(&o, ",\"extFields\":{") < 0) {
            Py_DECREF(seq);
            goto out;
        }
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *pair = items[i];
            if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
                PyErr_SetString(PyExc_TypeError, "ext must hold (key, value) pairs");
                Py_DECREF(seq);
                goto out;
            }
            if ((i && RAW(&o, ",") < 0) || out_str(&o, PyTuple_GET_ITEM(pair, 0)) < 0 ||
                RAW(&o, ":") < 0 || out_str(&o, PyTuple_GET_ITEM(pair, 1)) < 0) {
                Py_DECREF(seq);
                goto out;
            }
        }
        Py_DECREF(seq);
        if (RAW(&o, "}") < 0) goto out;
    }
    if (RAW(&o, ",\"flag\":") < 0 || out_int(&o, flag) < 0) goto out;
    if (RAW(&o, ",\"language\":") < 0 || out_str(&o, language) < 0) goto out;
    if (RAW(&o, ",\"opaque\":") < 0 || out_int(&o, opaque) < 0) goto out;
    if (remark != Py_None) {
        if (RAW(&o, ",\"remark\":") < 0 || out_str(&o, remark) < 0) goto out;
    }
    if (RAW(&o, ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":") < 0 ||
        out_int(&o, version) < 0 || RAW(&o, "}") < 0)
        goto out;
    result = PyBytes_FromStringAndSize(o.buf, o.len);
out:
    PyMem_Free(o.buf);
    return result;
}

/* ---- typed headers ---------------------------------------------------------------------- */

enum { KIND_STR = 0, KIND_BOOL = 1, KIND_NUMBER = 2 };

/* The value of one field read from its text, a new reference; NULL without an error set: not
 * the plain shape (the Python reader decides). */
static PyObject *header_value(PyObject *text, long kind, unsigned long long maximum) {
    if (kind == KIND_STR) {
        Py_INCREF(text);
        return text;
    }
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(text, &n);
    if (p == NULL) {
        PyErr_Clear(); /* a lone surrogate: the reference says what is wrong */
        return NULL;
    }
    if (kind == KIND_BOOL) { /* the C++ client sends "0" and "1" */
        if ((n == 4 && memcmp(p, "true", 4) == 0) || (n == 1 && p[0] == '1')) Py_RETURN_TRUE;
        if ((n == 5 && memcmp(p, "false", 5) == 0) || (n == 1 && p[0] == '0') || n == 0)
            Py_RETURN_FALSE;
        return NULL;
    }
    if (n < 1 || n > 19) return NULL;
    unsigned long long value = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return NULL;
        value = value * 10u + (unsigned long long)(p[i] - '0');
    }
    if (value > maximum) return NULL;
    return PyLong_FromUnsignedLongLong(value);
}

static PyObject *read_header(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyType_Check(args[0]) || !PyTuple_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "read_header(cls, fields, spec)");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    PyObject *fields = args[1], *spec = args[2];
    if (!PyDict_CheckExact(fields)) Py_RETURN_NONE;
    Py_ssize_t count = PyTuple_GET_SIZE(spec);
    PyObject *values[64];
    if (count > 64) Py_RETURN_NONE;
    Py_ssize_t made = 0;
    PyObject *obj = NULL;
    for (; made < count; made++) {
        PyObject *item = PyTuple_GET_ITEM(spec, made);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 6) {
            PyErr_SetString(PyExc_TypeError, "read_header: a spec item is not a 6-tuple");
            goto fail;
        }
        PyObject *key = PyTuple_GET_ITEM(item, 1);
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(item, 2));
        unsigned long long maximum = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(item, 3));
        int required = PyObject_IsTrue(PyTuple_GET_ITEM(item, 4));
        if (PyErr_Occurred() || required < 0) goto fail;
        PyObject *text = NULL;
        if (key != Py_None) {
            text = PyDict_GetItemWithError(fields, key); /* borrowed */
            if (text == NULL && PyErr_Occurred()) goto fail;
        }
        PyObject *value;
        if (text == NULL) {
            if (required) goto plain_not;
            value = PyTuple_GET_ITEM(item, 5);
            Py_INCREF(value);
        } else {
            if (!PyUnicode_CheckExact(text)) goto plain_not;
            value = header_value(text, kind, maximum);
            if (value == NULL) goto plain_not;
        }
        values[made] = value;
    }
    obj = cls->tp_alloc(cls, 0);
    if (obj == NULL) goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        /* object.__setattr__: a frozen class's own __setattr__ refuses, its slots take it */
        if (PyObject_GenericSetAttr(obj, PyTuple_GET_ITEM(PyTuple_GET_ITEM(spec, i), 0),
                                    values[i]) < 0) {
            Py_CLEAR(obj);
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < made; i++) Py_DECREF(values[i]);
    return obj;
plain_not:
    for (Py_ssize_t i = 0; i < made; i++) Py_DECREF(values[i]);
    Py_RETURN_NONE;
fail:
    for (Py_ssize_t i = 0; i < made; i++) Py_DECREF(values[i]);
    return NULL;
}

/* ---- string_to_properties(): a message's properties text to a dict (the send path) ----
 *
 *     string_to_properties(text) -> dict[str, str]
 *
 * "name\x01value" pieces split by "\x02" (a trailing one or none), in order; a piece without
 * "\x01" or with an empty name is skipped; a later name wins. None or "" is {}. The
 * reference is hanet.protocol._message.string_to_properties_py. */
static PyObject *string_to_properties(PyObject *Py_UNUSED(self), PyObject *text) {
    PyObject *out = PyDict_New();
    if (out == NULL || text == Py_None) return out;
    if (!PyUnicode_Check(text)) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_TypeError, "string_to_properties() takes a str or None");
        return NULL;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    Py_ssize_t i = 0;
    while (i < n) {
        Py_ssize_t end = PyUnicode_FindChar(text, 0x02, i, n, 1);
        if (end == -2) goto fail;
        if (end < 0) end = n;
        Py_ssize_t sep = PyUnicode_FindChar(text, 0x01, i, end, 1);
        if (sep == -2) goto fail;
        if (sep > i) {
            PyObject *name = PyUnicode_Substring(text, i, sep);
            PyObject *value = name ? PyUnicode_Substring(text, sep + 1, end) : NULL;
            int failed = value == NULL || PyDict_SetItem(out, name, value) < 0;
            Py_XDECREF(name);
            Py_XDECREF(value);
            if (failed) goto fail;
        }
        i = end + 1;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}
/* ---- end of string_to_properties() ---- */

/* ---- json_command(): the send path's command built natively (send2) ----
 * json_command(data, body, cls, languages, other, serialize_type): the command of a plain
 * JSON header (decode_json_header's), built as hanet.protocol._remoting._trusted builds it:
 * an instance of cls made as object.__new__ does, its nine fields set as object.__setattr__
 * sets them (a frozen attrs class's own __setattr__ is not called). The language name is
 * looked up in languages (other when unknown). None when decode_json_header declines or the
 * language is not a name (the Python path decides). */
static PyObject *jc_names[9];
static const char *const jc_spelled[9] = {"code",   "language",   "version",
                                          "opaque", "flag",       "remark",
                                          "ext_fields", "body",   "serialize_type"};

static PyObject *json_command(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "json_command(data, body, cls, languages, other, serialize_type)");
        return NULL;
    }
    PyObject *cls = args[2], *languages = args[3];
    if (!PyType_Check(cls) || !PyDict_Check(languages)) {
        PyErr_SetString(PyExc_TypeError, "json_command: cls must be a type, languages a dict");
        return NULL;
    }
    if (((PyTypeObject *)cls)->tp_new != PyBaseObject_Type.tp_new ||
        ((PyTypeObject *)cls)->tp_itemsize != 0) {
        PyErr_SetString(PyExc_TypeError, "json_command: cls must be made by object.__new__");
        return NULL;
    }
    if (jc_names[0] == NULL) {
        for (int i = 0; i < 9; i++) {
            jc_names[i] = PyUnicode_InternFromString(jc_spelled[i]);
            if (jc_names[i] == NULL) return NULL;
        }
    }
    PyObject *plain = decode_json_header(self, args[0]);
    if (plain == NULL || plain == Py_None) return plain;
    if (!PyTuple_Check(plain) || PyTuple_GET_SIZE(plain) != 7) {
        Py_DECREF(plain);
        PyErr_SetString(PyExc_SystemError, "json_command: decode_json_header's tuple");
        return NULL;
    }
    PyObject *name = PyTuple_GET_ITEM(plain, 1);
    if (!PyUnicode_Check(name)) {
        Py_DECREF(plain);
        Py_RETURN_NONE;
    }
    PyObject *language = PyDict_GetItemWithError(languages, name); /* borrowed */
    if (language == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(plain);
            return NULL;
        }
        language = args[4];
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    PyObject *cmd = type->tp_alloc(type, 0);
    if (cmd == NULL) {
        Py_DECREF(plain);
        return NULL;
    }
    PyObject *values[9] = {PyTuple_GET_ITEM(plain, 0), language,
                           PyTuple_GET_ITEM(plain, 2), PyTuple_GET_ITEM(plain, 3),
                           PyTuple_GET_ITEM(plain, 4), PyTuple_GET_ITEM(plain, 5),
                           PyTuple_GET_ITEM(plain, 6), args[1],
                           args[5]};
    for (int i = 0; i < 9; i++) {
        if (PyObject_GenericSetAttr(cmd, jc_names[i], values[i]) < 0) {
            Py_DECREF(cmd);
            Py_DECREF(plain);
            return NULL;
        }
    }
    Py_DECREF(plain);
    return cmd;
}
/* ---- end of json_command() ---- */

static PyMethodDef methods[] = {
    {"decode_json_header", (PyCFunction)decode_json_header, METH_O,
     "decode_json_header(buf)\n--\n\n"
     "(code, language, version, opaque, flag, remark, ext) of a plain JSON remoting header, "
     "or None (the pure-Python path decides); see hanet.protocol._remoting."},
    {"encode_json_header", (PyCFunction)(void (*)(void))encode_json_header, METH_FASTCALL,
     "encode_json_header(code, ext, flag, language, opaque, remark, version)\n--\n\n"
     "The JSON header 4.9.8 writes; see hanet.protocol._remoting."},
    {"read_header", (PyCFunction)(void (*)(void))read_header, METH_FASTCALL,
     "read_header(cls, fields, spec)\n--\n\n"
     "A typed header from plain ext fields, or None (the Python reader decides); see "
     "hanet.protocol._headers."},
    /* string_to_properties(): the send path's properties block above */
    {"string_to_properties", (PyCFunction)string_to_properties, METH_O,
     "string_to_properties(text)\n--\n\n"
     "A message's properties text as a dict; see "
     "hanet.protocol._message.string_to_properties_py."},
    /* json_command(): the send path's command block above (send2) */
    {"json_command", (PyCFunction)(void (*)(void))json_command, METH_FASTCALL,
     "json_command(data, body, cls, languages, other, serialize_type)\n--\n\n"
     "The command of a plain JSON header built natively, or None (the Python path decides); "
     "see hanet.protocol._remoting._decode_json."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "hanet.protocol._speedups",
    "Native remoting header codec (the reference is hanet.protocol._remoting).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) { return PyModule_Create(&module); }
