/* Native commit log record scanner: hanet.store._speedups.scan.
 *
 * The same validation as hanet/store/_scanner.py (RecordScanner, the reference), in one call
 * over a whole region, returning columnar rows instead of one Python object per field:
 *
 *     scan(buf, start=0, end=None, base_offset=0, limit=None, check_crc=True,
 *          check_physical_offset=False)
 *       -> (position, reason, detail, blank_size, count, rows)
 *
 * position: buffer position of the stop (right after the last valid record); reason: a stop
 * code (0 END, 1 BLANK, 2 UNWRITTEN, 3 INCOMPLETE, 4 INVALID); detail: RecordScanner's exact
 * detail string; blank_size: a blank record's space-left field (BLANK only); count: valid
 * records; rows: count packed structs, native byte order, no padding (struct "=qiiqiqqii"):
 * physical offset, size, queue id, queue offset, tags hash, store timestamp, topic start and
 * topic length (buffer positions of the topic's UTF-8 bytes) and topic id (distinct topic
 * bytes numbered 0, 1, ... in the order they first appear: the caller decodes each once).
 *
 * The buffer comes from the network (HA replication) or from disk: every read is bounds
 * checked against values read once into locals, so concurrent writers cannot move a read
 * out of the buffer. The GIL is released for large regions (it is taken back only to decode
 * a non-ASCII TAGS value with Python's own UTF-8 decoder, so the hash matches bit for bit).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_CLMUL_CRC 1
#endif

#define MAGIC_V1 0xDAA320A7u
#define MAGIC_V2 0xDAA320ABu
#define BLANK_MAGIC 0xCBD43194u
#define BLANK_RECORD_SIZE 8
#define HEADER_V4 88
#define MIN_RECORD_SIZE 91
#define BORN_V6 0x10
#define STORE_V6 0x20
#define SYS_FLAG_KNOWN_BITS 0x7FF
#define CRC32_RESERVED_LEN 20 /* "__CRC32#" \x01 10 digits \x02 */

enum { R_END = 0, R_BLANK = 1, R_UNWRITTEN = 2, R_INCOMPLETE = 3, R_INVALID = 4 };

#define ROW_SIZE 52 /* q i i q i q q i i */
#define RELEASE_GIL_BYTES (256 * 1024)

static inline uint32_t rd_u32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline int32_t rd_i32(const unsigned char *p) { return (int32_t)rd_u32(p); }
static inline int16_t rd_i16(const unsigned char *p) {
    return (int16_t)(uint16_t)(((uint16_t)p[0] << 8) | p[1]);
}
static inline int64_t rd_i64(const unsigned char *p) {
    return (int64_t)(((uint64_t)rd_u32(p) << 32) | rd_u32(p + 4));
}

#ifdef HAVE_CLMUL_CRC
/* CRC-32 (zlib's) of len bytes, len >= 64 and a multiple of 16, by carry-less multiplication
 * folding (Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ", as in
 * Chromium's zlib crc32_simd.c). crc is the running CRC, pre- and post-inverted by the caller;
 * zlib finishes any tail. Checked against zlib by the differential tests. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc32_clmul(const unsigned char *buf,
                                                                       size_t len,
                                                                       uint32_t crc) {
    static const uint64_t __attribute__((aligned(16))) k1k2[] = {0x0154442bd4, 0x01c6e41596};
    static const uint64_t __attribute__((aligned(16))) k3k4[] = {0x01751997d0, 0x00ccaa009e};
    static const uint64_t __attribute__((aligned(16))) k5k0[] = {0x0163cd6124, 0x0000000000};
    static const uint64_t __attribute__((aligned(16))) poly[] = {0x01db710641, 0x01f7011641};
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;

    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = _mm_load_si128((const __m128i *)k1k2);
    buf += 64;
    len -= 64;
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
        buf += 64;
        len -= 64;
    }
    /* Fold the four lanes into one. */
    x0 = _mm_load_si128((const __m128i *)k3k4);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    /* 128 bits to 64, then Barrett reduction to 32. */
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_loadl_epi64((const __m128i *)k5k0);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_load_si128((const __m128i *)poly);
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}

static int have_clmul = 0;
#endif

/* zlib's CRC-32 table (reflected polynomial 0xEDB88320), filled at import: the tail of fewer
 * than 16 bytes after the carry-less blocks is done inline, a zlib call costs more. */
static uint32_t crc_table[256];

static void crc_table_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

/* zlib's crc32(crc, buf, len) for a short len, bytewise. */
static inline uint32_t crc32_tail(uint32_t crc, const unsigned char *buf, size_t len) {
    uint32_t c = ~crc;
    while (len--) c = crc_table[(c ^ *buf++) & 0xFF] ^ (c >> 8);
    return ~c;
}

/* zlib's crc32 of buf[:len]: carry-less multiplication for the 16-byte blocks when the CPU
 * has it (zlib's table CRC is the memory-bandwidth floor of a scan otherwise). */
static uint32_t body_crc32(const unsigned char *buf, size_t len) {
    uint32_t crc = 0;
#ifdef HAVE_CLMUL_CRC
    if (have_clmul && len >= 64) {
        size_t blocks = len & ~(size_t)15;
        crc = ~crc32_clmul(buf, blocks, ~(uint32_t)0);
        buf += blocks;
        len -= blocks;
        if (len == 0) return crc;
    }
#endif
    return (uint32_t)crc32(crc, buf, (uInt)len);
}

/* zlib's crc32(crc, buf, len): a running CRC continued over buf[:len], by carry-less
 * multiplication for the 16-byte blocks when the CPU has it (as body_crc32). */
static uint32_t crc32_continue(uint32_t crc, const unsigned char *buf, size_t len) {
#ifdef HAVE_CLMUL_CRC
    if (have_clmul && len >= 64) {
        size_t blocks = len & ~(size_t)15;
        crc = ~crc32_clmul(buf, blocks, ~crc);
        return crc32_tail(crc, buf + blocks, len - blocks);
    }
#endif
    return (uint32_t)crc32(crc, buf, (uInt)len);
}

/* Strict UTF-8, exactly what Python's "strict" decoder accepts. */
static int utf8_valid(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n) return 0;
            unsigned char c1 = s[i + 1];
            unsigned char lo = 0x80, hi = 0xBF;
            if (c == 0xE0) lo = 0xA0;
            else if (c == 0xED) hi = 0x9F;
            if (c1 < lo || c1 > hi || (s[i + 2] & 0xC0) != 0x80) return 0;
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n) return 0;
            unsigned char c1 = s[i + 1];
            unsigned char lo = 0x80, hi = 0xBF;
            if (c == 0xF0) lo = 0x90;
            else if (c == 0xF4) hi = 0x8F;
            if (c1 < lo || c1 > hi || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
                return 0;
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

typedef struct {
    PyThreadState *released; /* non-NULL while the GIL is released */
} gil_state;

/* Java String.hashCode of the TAGS property (0 without tags or with empty tags), as
 * MessageRecord.tags_hash: the properties are decoded with "replace" and split on \x02, each
 * piece on its first \x01; the last TAGS wins. \x01 and \x02 are ASCII, which a UTF-8
 * decoder never folds into a replaced sequence, so splitting the bytes first is the same.
 * Returns 0 and sets *ok = 0 when decoding raised (MemoryError). *tags: where the value is
 * in p (-1 without TAGS), *tags_len its length. */
static int32_t tags_hash(const unsigned char *p, Py_ssize_t n, gil_state *gil, int *ok,
                         int64_t *tags, int32_t *tags_len) {
    const unsigned char *value = NULL;
    Py_ssize_t value_len = 0;
    Py_ssize_t i = 0;
    while (i <= n) {
        const unsigned char *piece = p + i;
        const unsigned char *stop = memchr(piece, 0x02, (size_t)(n - i));
        Py_ssize_t len = stop ? (Py_ssize_t)(stop - piece) : n - i;
        const unsigned char *sep = memchr(piece, 0x01, (size_t)len);
        if (sep && sep - piece == 4 && memcmp(piece, "TAGS", 4) == 0) {
            value = sep + 1;
            value_len = len - 5;
        }
        i += len + 1;
    }
    *tags = value == NULL ? -1 : (int64_t)(value - p);
    *tags_len = (int32_t)value_len;
    if (value == NULL || value_len == 0) return 0;
    uint32_t h = 0;
    int ascii = 1;
    for (Py_ssize_t k = 0; k < value_len; k++) {
        if (value[k] & 0x80) {
            ascii = 0;
            break;
        }
        h = 31u * h + value[k];
    }
    if (ascii) return (int32_t)h;
    /* Non-ASCII: Python's own decoder ("replace"), then Java's UTF-16 code units. */
    if (gil->released) PyEval_RestoreThread(gil->released);
    PyObject *text = PyUnicode_DecodeUTF8((const char *)value, value_len, "replace");
    h = 0;
    if (text == NULL) {
        *ok = 0;
    } else {
        Py_ssize_t len = PyUnicode_GET_LENGTH(text);
        int kind = PyUnicode_KIND(text);
        const void *data = PyUnicode_DATA(text);
        for (Py_ssize_t k = 0; k < len; k++) {
            Py_UCS4 cp = PyUnicode_READ(kind, data, k);
            if (cp > 0xFFFF) {
                cp -= 0x10000;
                h = 31u * h + (0xD800u + (cp >> 10));
                h = 31u * h + (0xDC00u + (cp & 0x3FF));
            } else {
                h = 31u * h + cp;
            }
        }
        Py_DECREF(text);
    }
    if (gil->released) gil->released = PyEval_SaveThread();
    return (int32_t)h;
}

/* Distinct topics of one scan: open addressing on (hash, bytes), ids in first-seen order. */
typedef struct {
    int64_t start;
    int32_t len;
    int32_t id; /* -1: empty slot */
    uint64_t hash;
} topic_slot;

typedef struct {
    topic_slot *slots;
    size_t cap; /* a power of two */
    int32_t count;
} topic_table;

static uint64_t fnv1a(const unsigned char *p, int32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int topics_grow(topic_table *t) {
    size_t cap = t->cap ? t->cap * 2 : 16;
    topic_slot *slots = PyMem_RawMalloc(cap * sizeof(topic_slot));
    if (slots == NULL) return 0;
    for (size_t i = 0; i < cap; i++) slots[i].id = -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i].id < 0) continue;
        size_t j = t->slots[i].hash & (cap - 1);
        while (slots[j].id >= 0) j = (j + 1) & (cap - 1);
        slots[j] = t->slots[i];
    }
    PyMem_RawFree(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 1;
}

/* The id of the topic at buf[start:start + len] (a new id for new bytes), -1 on no memory. */
static int32_t topic_id(topic_table *t, const unsigned char *buf, int64_t start, int32_t len) {
    if ((size_t)(t->count + 1) * 2 > t->cap && !topics_grow(t)) return -1;
    uint64_t h = fnv1a(buf + start, len);
    size_t j = h & (t->cap - 1);
    while (t->slots[j].id >= 0) {
        topic_slot *s = &t->slots[j];
        if (s->hash == h && s->len == len && memcmp(buf + s->start, buf + start, (size_t)len) == 0)
            return s->id;
        j = (j + 1) & (t->cap - 1);
    }
    t->slots[j].start = start;
    t->slots[j].len = len;
    t->slots[j].hash = h;
    t->slots[j].id = t->count;
    return t->count++;
}

typedef struct {
    unsigned char *data;
    size_t len;
    size_t cap;
} rows_buf;

static int rows_reserve(rows_buf *r) {
    if (r->len + ROW_SIZE <= r->cap) return 1;
    size_t cap = r->cap ? r->cap * 2 : 64 * ROW_SIZE;
    unsigned char *data = PyMem_RawRealloc(r->data, cap);
    if (data == NULL) return 0;
    r->data = data;
    r->cap = cap;
    return 1;
}

static const unsigned char CRC32_NAME[8] = {'_', '_', 'C', 'R', 'C', '3', '2', '#'};

/* Whether the 20 bytes at t claim to be the whole-record CRC property: a name at most 2 bytes
 * off "__CRC32#". One 8-byte compare for the common cases (no property, an intact one). */
static inline int crc32_claimed(const unsigned char *t) {
    if (t[0] != '_' && t[1] != '_' && t[2] != 'C') return 0; /* 3 bytes off already */
    int matches = 0;
    for (int i = 0; i < 8; i++) matches += t[i] == CRC32_NAME[i];
    return matches >= 6;
}

/* The INVALID detail of a record whose properties end in a zero byte (_scanner.ZERO_TAIL). */
#define ZERO_TAIL "properties end in a zero byte (a zeroed tail)"

/* Why the whole-record CRC property (RocketMQ 5's "__CRC32#", enabledAppendPropCRC) claimed
 * by the last 20 bytes of the record at buf[pos:rec_end] (crc32_claimed) fails, or NULL. The
 * CRC (zlib's, & 0x7FFFFFFF, of every byte before the property's 20) is one pass over the
 * record by carry-less multiplication. As the scan loop of _scanner.py. */
static const char *crc32_problem(const unsigned char *buf, int64_t pos, int64_t rec_end,
                                 int32_t props_len, int check_crc) {
    const unsigned char *t = buf + rec_end - CRC32_RESERVED_LEN;
    int matches = 0;
    for (int i = 0; i < 8; i++) matches += t[i] == CRC32_NAME[i];
    int well_formed = matches == 8 && t[8] == 1 && t[19] == 2 &&
                      (props_len == CRC32_RESERVED_LEN || t[-1] == 2);
    uint64_t expected = 0;
    for (int i = 9; well_formed && i >= 0 && i < 19; i++) {
        if (t[i] < '0' || t[i] > '9') well_formed = 0;
    }
    if (!well_formed) return "whole-record CRC property is malformed";
    if (!check_crc) return NULL;
    for (int i = 18; i >= 9; i--) expected = expected * 10 + (uint64_t)(t[i] - '0');
    uint32_t crc = crc32_continue(0, buf + pos, (size_t)(t - (buf + pos)));
    if ((uint64_t)(crc & 0x7FFFFFFFu) != expected) return "whole-record CRC mismatch";
    return NULL;
}

/* What scan_record() found of a valid record. */
typedef struct {
    int32_t total, queue_id, thash, topic_len, tags_len;
    int64_t queue_offset, store_ts, topic_start;
    int64_t tags_start; /* the TAGS value in buf, -1 without it */
} scanned_record;

#define DETAIL_SIZE 200

/* One step of scan(): validate the record at buf[pos:end] (limit: the end of its file, as
 * scan's). Returns -1 when buf[pos:pos + f->total] is a valid record (f filled), else the stop
 * reason, with detail (DETAIL_SIZE bytes) and *blank set as scan() reports them; *ok = 0 when
 * memory ran out (decoding a non-ASCII TAGS value). Also what pull_gather() checks a record
 * with. */
#if defined(__GNUC__)
__attribute__((always_inline)) /* scan()'s loop body: as fast as when it was written there */
#endif
static inline int scan_record(const unsigned char *buf, int64_t pos, int64_t end, int64_t limit,
                       int64_t base, int check_crc, int check_offset, gil_state *gil, int *ok,
                       scanned_record *f, char *detail, int64_t *blank) {
    int64_t avail = end - pos;
    if (avail < 8) {
        if (pos >= end) return R_END;
        strcpy(detail, "a partial record header");
        return R_INCOMPLETE;
    }
    const unsigned char *r = buf + pos;
    int32_t total = rd_i32(r);
    uint32_t magic = rd_u32(r + 4);
    if (magic == MAGIC_V1 || magic == MAGIC_V2) {
        /* a message */
    } else if (magic == BLANK_MAGIC) {
        if (total < BLANK_RECORD_SIZE || (int64_t)total > limit - pos) {
            snprintf(detail, DETAIL_SIZE, "blank record of bad size %d", (int)total);
            return R_INVALID;
        }
        *blank = total;
        return R_BLANK;
    } else if (magic == 0 && total == 0) {
        return R_UNWRITTEN;
    } else {
        snprintf(detail, DETAIL_SIZE, "unknown magic code 0x%08X", (unsigned)magic);
        return R_INVALID;
    }
    if (total < MIN_RECORD_SIZE) {
        snprintf(detail, DETAIL_SIZE, "total size %d is too small", (int)total);
        return R_INVALID;
    }
    if ((int64_t)total > limit - pos) {
        snprintf(detail, DETAIL_SIZE, "total size %d goes beyond the end of the file",
                 (int)total);
        return R_INVALID;
    }
    if ((int64_t)total > avail) {
        snprintf(detail, DETAIL_SIZE, "a record of %d bytes is partial", (int)total);
        return R_INCOMPLETE;
    }
    /* From here total >= 91 bytes of the record are in the buffer. */
    int64_t rec_end = pos + total;
    int32_t sys_flag = rd_i32(r + 36);
    if (sys_flag & ~SYS_FLAG_KNOWN_BITS) {
        snprintf(detail, DETAIL_SIZE, "sys flag 0x%X has bits no RocketMQ version defines",
                 (unsigned)sys_flag);
        return R_INVALID;
    }
    int born6 = (sys_flag & BORN_V6) ? 12 : 0;
    int store6 = (sys_flag & STORE_V6) ? 12 : 0;
    int64_t hsize = HEADER_V4 + born6 + store6;
    if (hsize + 3 > total) {
        snprintf(detail, DETAIL_SIZE, "total size %d is too small", (int)total);
        return R_INVALID;
    }
    int64_t physical = rd_i64(r + 28);
    if (check_offset && physical != base + pos) {
        snprintf(detail, DETAIL_SIZE,
                 "physical offset field %lld does not match the record's offset",
                 (long long)physical);
        return R_INVALID;
    }
    int32_t body_crc = rd_i32(r + 8);
    int32_t queue_id = rd_i32(r + 12);
    int64_t queue_offset = rd_i64(r + 20);
    if (queue_id < 0) {
        snprintf(detail, DETAIL_SIZE, "queue id %d is negative", (int)queue_id);
        return R_INVALID;
    }
    if (queue_offset < 0) {
        snprintf(detail, DETAIL_SIZE, "queue offset %lld is negative", (long long)queue_offset);
        return R_INVALID;
    }
    int64_t store_ts = rd_i64(r + 56 + born6);
    int32_t body_len = rd_i32(r + hsize - 4);
    int64_t p = pos + hsize;
    if (body_len < 0 || (int64_t)body_len > rec_end - p - 3) {
        snprintf(detail, DETAIL_SIZE, "body length %d does not fit", (int)body_len);
        return R_INVALID;
    }
    const unsigned char *body = buf + p;
    p += body_len;
    int32_t topic_len;
    if (magic == MAGIC_V1) {
        topic_len = buf[p];
        p += 1;
    } else {
        topic_len = rd_i16(buf + p);
        p += 2;
    }
    if (topic_len < 0 || p + topic_len + 2 > rec_end) {
        snprintf(detail, DETAIL_SIZE, "topic length %d does not fit", (int)topic_len);
        return R_INVALID;
    }
    if (!utf8_valid(buf + p, topic_len)) {
        strcpy(detail, "topic is not UTF-8");
        return R_INVALID;
    }
    int64_t topic_start = p;
    p += topic_len;
    int32_t props_len = rd_i16(buf + p);
    p += 2;
    if (props_len < 0 || p + props_len != rec_end) {
        snprintf(detail, DETAIL_SIZE,
                 "total size %d does not match its fields (properties length %d)", (int)total,
                 (int)props_len);
        return R_INVALID;
    }
    /* Properties never end in a zero byte (a writer ends them with a property's value or
     * a separator): a tail zeroed by a lost write that took the whole-record CRC property
     * with it would otherwise read as an unsealed record whose body CRC still matches. */
    if (props_len > 0 && buf[rec_end - 1] == 0) {
        strcpy(detail, ZERO_TAIL);
        return R_INVALID;
    }
    /* The CRCs last. A matching whole-record CRC covers the body and BODYCRC too: the
     * body is not read twice (a mismatch says which CRC fails). */
    if (props_len >= CRC32_RESERVED_LEN && crc32_claimed(buf + rec_end - CRC32_RESERVED_LEN)) {
        const char *problem = crc32_problem(buf, pos, rec_end, props_len, check_crc);
        if (problem != NULL) {
            if (check_crc &&
                (int64_t)(body_crc32(body, (size_t)body_len) & 0x7FFFFFFFu) != (int64_t)body_crc)
                problem = "body CRC mismatch";
            strcpy(detail, problem);
            return R_INVALID;
        }
    } else if (check_crc &&
               (int64_t)(body_crc32(body, (size_t)body_len) & 0x7FFFFFFFu) != (int64_t)body_crc) {
        strcpy(detail, "body CRC mismatch");
        return R_INVALID;
    }
    f->thash = tags_hash(buf + p, props_len, gil, ok, &f->tags_start, &f->tags_len);
    if (f->tags_start >= 0) f->tags_start += p;
    f->total = total;
    f->queue_id = queue_id;
    f->queue_offset = queue_offset;
    f->store_ts = store_ts;
    f->topic_start = topic_start;
    f->topic_len = topic_len;
    return -1;
}

#define PUT(type, value)                         \
    do {                                         \
        type v_ = (type)(value);                 \
        memcpy(row, &v_, sizeof(type));          \
        row += sizeof(type);                     \
    } while (0)

/* scan()'s and scan_columns()'s range: end (None: the buffer's end; never past it) and limit
 * (None: the buffer's end) from their objects, start and base checked. 0 with an exception
 * set when they are unusable. */
static int scan_range(PyObject *end_obj, PyObject *limit_obj, Py_ssize_t start, long long base,
                      int64_t n, int64_t *end, int64_t *limit) {
    *end = n;
    *limit = n;
    if (end_obj != Py_None) {
        long long e = PyLong_AsLongLong(end_obj);
        if (e == -1 && PyErr_Occurred()) return 0;
        if (e < *end) *end = e;
    }
    if (limit_obj != Py_None) {
        long long l = PyLong_AsLongLong(limit_obj);
        if (l == -1 && PyErr_Occurred()) return 0;
        *limit = l;
    }
    if (start < 0) {
        PyErr_SetString(PyExc_ValueError, "start must not be negative");
        return 0;
    }
    if (base < 0 || base > INT64_MAX - n) {
        PyErr_SetString(PyExc_ValueError, "base_offset out of range");
        return 0;
    }
    return 1;
}

/* The last topic a scan met (its id, where its name is): consecutive records of one topic
 * skip the table. */
typedef struct {
    int32_t id;
    int64_t start;
    int32_t len;
} last_topic;

/* Append the row of the valid record f at pos (scan()'s row layout) to rows; the row, or NULL
 * when memory ran out. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline unsigned char *append_row(rows_buf *rows, topic_table *topics, last_topic *last,
                                        const unsigned char *buf, int64_t base, int64_t pos,
                                        const scanned_record *f) {
    int32_t tid = last->id;
    if (f->topic_len != last->len ||
        memcmp(buf + last->start, buf + f->topic_start, (size_t)f->topic_len) != 0) {
        tid = topic_id(topics, buf, f->topic_start, f->topic_len);
        if (tid < 0) return NULL;
        last->id = tid;
        last->start = f->topic_start;
        last->len = f->topic_len;
    }
    if (!rows_reserve(rows)) return NULL;
    unsigned char *first = rows->data + rows->len, *row = first;
    PUT(int64_t, base + pos);
    PUT(int32_t, f->total);
    PUT(int32_t, f->queue_id);
    PUT(int64_t, f->queue_offset);
    PUT(int32_t, f->thash);
    PUT(int64_t, f->store_ts);
    PUT(int64_t, f->topic_start);
    PUT(int32_t, f->topic_len);
    PUT(int32_t, tid);
    rows->len += ROW_SIZE;
    return first;
}

static PyObject *scan(PyObject *Py_UNUSED(self), PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"buf",   "start",     "end",
                             "base_offset", "limit", "check_crc",
                             "check_physical_offset", NULL};
    Py_buffer view;
    Py_ssize_t start = 0;
    PyObject *end_obj = Py_None, *limit_obj = Py_None;
    long long base = 0;
    int check_crc = 1, check_offset = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*|nOLO$pp:scan", kwlist, &view, &start,
                                     &end_obj, &base, &limit_obj, &check_crc, &check_offset))
        return NULL;
    PyObject *result = NULL;
    rows_buf rows = {NULL, 0, 0};
    topic_table topics = {NULL, 0, 0};
    last_topic last = {-1, 0, -1};
    const unsigned char *buf = view.buf;
    int64_t n = view.len;
    int64_t end, limit;
    if (!scan_range(end_obj, limit_obj, start, base, n, &end, &limit)) goto done;

    int reason = R_END;
    int64_t blank = 0;
    char detail[DETAIL_SIZE];
    detail[0] = '\0';
    int ok = 1;
    int64_t pos = start;
    gil_state gil = {NULL};
    if (end - pos > RELEASE_GIL_BYTES) gil.released = PyEval_SaveThread();

    for (;;) {
        scanned_record f;
        int step = scan_record(buf, pos, end, limit, base, check_crc, check_offset, &gil, &ok, &f,
                               detail, &blank);
        if (!ok) break;
        if (step >= 0) {
            reason = step;
            break;
        }
        if (append_row(&rows, &topics, &last, buf, base, pos, &f) == NULL) {
            ok = 0;
            break;
        }
        pos += f.total;
    }
    if (gil.released) PyEval_RestoreThread(gil.released);
    if (!ok) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    result = Py_BuildValue("(LisLny#)", (long long)pos, reason, detail, (long long)blank,
                           (Py_ssize_t)(rows.len / ROW_SIZE), rows.data ? (const char *)rows.data : "",
                           (Py_ssize_t)rows.len);
done:
    PyMem_RawFree(rows.data);
    PyMem_RawFree(topics.slots);
    PyBuffer_Release(&view);
    return result;
}

/* ---- columns(): per-column buffers from a scan's rows (hanet.spark's Arrow batches) ----
 *
 *     columns(buf, rows, base_offset, names) -> list, one item per name
 *
 * rows: rows of a scan of buf with this base_offset (ROW_SIZE bytes each). Fixed-width
 * columns are bytes of native-endian values, one per row: "physical_offset" "queue_offset"
 * "store_timestamp" "born_timestamp" "magic" (int64); "size" "queue_id" "tags_hash"
 * "topic_id" "body_crc" "flag" "sys_flag" "reconsume_times" (int32). Variable-width columns
 * are Arrow's string/binary layout, (offsets, data, validity, null_count): offsets int32
 * (count + 1 of them), validity None or an LSB-first bitmap: "topic" "body" "properties"
 * (the raw field) "tags" "keys" (the property's value, the last one; null without it)
 * "born_host" "store_host" (the raw address and port: 8 or 20 bytes) "msg_id" (RocketMQ's
 * offset message id, upper hex). The reference is hanet.store._index.record_columns_py.
 * Every read is bounds checked: a row that does not describe a record of buf raises
 * ValueError. */

enum {
    C_PHYSICAL, C_SIZE, C_QUEUE_ID, C_QUEUE_OFFSET, C_TAGS_HASH, C_STORE_TS, C_TOPIC_ID,
    C_MAGIC, C_BODY_CRC, C_FLAG, C_SYS_FLAG, C_BORN_TS, C_RECONSUME,
    C_FIXED_END,
    C_TOPIC = C_FIXED_END, C_BODY, C_PROPERTIES, C_TAGS, C_KEYS, C_BORN_HOST, C_STORE_HOST,
    C_MSG_ID,
};

static const struct {
    const char *name;
    int code;
    int width;
} column_names[] = {
    {"physical_offset", C_PHYSICAL, 8}, {"size", C_SIZE, 4},
    {"queue_id", C_QUEUE_ID, 4},        {"queue_offset", C_QUEUE_OFFSET, 8},
    {"tags_hash", C_TAGS_HASH, 4},      {"store_timestamp", C_STORE_TS, 8},
    {"topic_id", C_TOPIC_ID, 4},        {"magic", C_MAGIC, 8},
    {"body_crc", C_BODY_CRC, 4},        {"flag", C_FLAG, 4},
    {"sys_flag", C_SYS_FLAG, 4},        {"born_timestamp", C_BORN_TS, 8},
    {"reconsume_times", C_RECONSUME, 4}, {"topic", C_TOPIC, 0},
    {"body", C_BODY, 0},                {"properties", C_PROPERTIES, 0},
    {"tags", C_TAGS, 0},                {"keys", C_KEYS, 0},
    {"born_host", C_BORN_HOST, 0},      {"store_host", C_STORE_HOST, 0},
    {"msg_id", C_MSG_ID, 0},            {NULL, 0, 0},
};

/* One row and where its record's fields are in buf. */
typedef struct {
    int64_t physical, queue_offset, store_ts, topic_start, pos, body_start, props_start;
    int32_t size, queue_id, tags_hash, topic_len, topic_id, born6, store6, body_len, props_len;
    const unsigned char *r;
    int tags_known; /* tags_start / tags_len found by the scan (scan_columns) */
    int64_t tags_start;
    int32_t tags_len;
} col_row;

static inline int64_t row_i64(const unsigned char *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline int32_t row_i32(const unsigned char *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Fill *c from row i; 0 (ValueError set) when the row is not a record of buf. */
static int col_locate(const unsigned char *buf, int64_t n, const unsigned char *row,
                      int64_t base, Py_ssize_t i, col_row *c) {
    c->physical = row_i64(row);
    c->size = row_i32(row + 8);
    c->queue_id = row_i32(row + 12);
    c->queue_offset = row_i64(row + 16);
    c->tags_hash = row_i32(row + 24);
    c->store_ts = row_i64(row + 28);
    c->topic_start = row_i64(row + 36);
    c->topic_len = row_i32(row + 44);
    c->topic_id = row_i32(row + 48);
    int64_t pos = c->physical - base;
    if (c->physical < base || c->size < MIN_RECORD_SIZE || pos > n - c->size) goto bad;
    const unsigned char *r = buf + pos;
    int64_t rec_end = pos + c->size;
    int32_t sys_flag = rd_i32(r + 36);
    c->born6 = (sys_flag & BORN_V6) ? 12 : 0;
    c->store6 = (sys_flag & STORE_V6) ? 12 : 0;
    int64_t hsize = HEADER_V4 + c->born6 + c->store6;
    if (hsize + 3 > c->size) goto bad;
    int32_t body_len = rd_i32(r + hsize - 4);
    int64_t p = pos + hsize;
    if (body_len < 0 || (int64_t)body_len > rec_end - p - 3) goto bad;
    c->body_start = p;
    c->body_len = body_len;
    p += body_len;
    int32_t topic_len;
    if (rd_u32(r + 4) == MAGIC_V1) {
        topic_len = buf[p];
        p += 1;
    } else {
        topic_len = rd_i16(buf + p);
        p += 2;
    }
    if (topic_len < 0 || p + topic_len + 2 > rec_end) goto bad;
    if (c->topic_start != p || c->topic_len != topic_len) goto bad;
    p += topic_len;
    int32_t props_len = rd_i16(buf + p);
    p += 2;
    if (props_len < 0 || p + props_len != rec_end) goto bad;
    c->props_start = p;
    c->props_len = props_len;
    c->pos = pos;
    c->r = r;
    c->tags_known = 0;
    return 1;
bad:
    PyErr_Format(PyExc_ValueError, "row %zd does not describe a record of the buffer", i);
    return 0;
}

/* The last value of property key (klen bytes) in p[:n]: its start, or -1 without it. */
static int64_t property_value(const unsigned char *p, int32_t n, const char *key, int32_t klen,
                              int32_t *vlen) {
    int64_t found = -1;
    int32_t i = 0;
    while (i <= n) {
        const unsigned char *piece = p + i;
        const unsigned char *stop = memchr(piece, 0x02, (size_t)(n - i));
        int32_t len = stop ? (int32_t)(stop - piece) : n - i;
        const unsigned char *sep = memchr(piece, 0x01, (size_t)len);
        if (sep && sep - piece == klen && memcmp(piece, key, (size_t)klen) == 0) {
            found = i + klen + 1;
            *vlen = len - klen - 1;
        }
        i += len + 1;
    }
    return found;
}

static const char HEX_UPPER[] = "0123456789ABCDEF";

/* One output column of columns(): fixed-width values, or Arrow's offsets / data / validity. */
typedef struct {
    int code, width;
    PyObject *values;  /* fixed: count * width bytes; var: the data, grown as needed */
    PyObject *offsets; /* var: count + 1 int32 */
    unsigned char *bits; /* var: the validity bitmap */
    Py_ssize_t len, cap, nulls;
} col_out;

/* Room for more bytes of a variable-width column's data; 0 with an exception set. */
static int col_grow(col_out *o, int64_t more) {
    if ((int64_t)o->len + more > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of values in one column");
        return 0;
    }
    if (o->len + more <= o->cap) return 1;
    Py_ssize_t cap = o->cap * 2;
    if (cap < o->len + more) cap = o->len + more;
    if (cap > INT32_MAX) cap = INT32_MAX;
    if (_PyBytes_Resize(&o->values, cap) < 0) return 0;
    o->cap = cap;
    return 1;
}

/* Row i's value of column o (c: its record, located when the column needs it). */
static int col_put(col_out *o, const unsigned char *buf, const unsigned char *row,
                   const col_row *c, Py_ssize_t i) {
    if (o->code < C_FIXED_END) {
        int64_t v64 = 0;
        int32_t v32 = 0;
        switch (o->code) {
        case C_PHYSICAL: v64 = row_i64(row); break;
        case C_SIZE: v32 = row_i32(row + 8); break;
        case C_QUEUE_ID: v32 = row_i32(row + 12); break;
        case C_QUEUE_OFFSET: v64 = row_i64(row + 16); break;
        case C_TAGS_HASH: v32 = row_i32(row + 24); break;
        case C_STORE_TS: v64 = row_i64(row + 28); break;
        case C_TOPIC_ID: v32 = row_i32(row + 48); break;
        case C_MAGIC: v64 = (int64_t)rd_u32(c->r + 4); break;
        case C_BODY_CRC: v32 = rd_i32(c->r + 8); break;
        case C_FLAG: v32 = rd_i32(c->r + 16); break;
        case C_SYS_FLAG: v32 = rd_i32(c->r + 36); break;
        case C_BORN_TS: v64 = rd_i64(c->r + 40); break;
        case C_RECONSUME: v32 = rd_i32(c->r + 72 + c->born6 + c->store6); break;
        }
        unsigned char *out = (unsigned char *)PyBytes_AS_STRING(o->values);
        if (o->width == 8) memcpy(out + (size_t)i * 8, &v64, 8);
        else memcpy(out + (size_t)i * 4, &v32, 4);
        return 1;
    }
    int64_t start = -1;
    int32_t len = 0;
    switch (o->code) {
    case C_TOPIC: start = c->topic_start; len = c->topic_len; break;
    case C_BODY: start = c->body_start; len = c->body_len; break;
    case C_PROPERTIES: start = c->props_start; len = c->props_len; break;
    case C_TAGS:
        if (c->tags_known) {
            start = c->tags_start;
            len = start < 0 ? 0 : c->tags_len;
            break;
        }
        /* fall through */
    case C_KEYS: {
        int64_t at = property_value(buf + c->props_start, c->props_len,
                                    o->code == C_TAGS ? "TAGS" : "KEYS", 4, &len);
        start = at < 0 ? -1 : c->props_start + at;
        if (at < 0) len = 0;
        break;
    }
    case C_BORN_HOST: start = c->pos + 48; len = c->born6 ? 20 : 8; break;
    case C_STORE_HOST: start = c->pos + 64 + c->born6; len = c->store6 ? 20 : 8; break;
    case C_MSG_ID: start = c->pos + 64 + c->born6; len = (c->store6 ? 20 + 8 : 8 + 8) * 2; break;
    }
    int32_t *off = (int32_t *)PyBytes_AS_STRING(o->offsets);
    if (start < 0) {
        o->nulls++;
    } else {
        if (!col_grow(o, len)) return 0;
        o->bits[i >> 3] |= (unsigned char)(1u << (i & 7));
        unsigned char *d = (unsigned char *)PyBytes_AS_STRING(o->values) + o->len;
        if (o->code == C_MSG_ID) {
            /* host bytes (address + port) then the physical offset, big-endian, hex */
            int32_t host_len = len / 2 - 8;
            const unsigned char *h = buf + start;
            for (int32_t k = 0; k < host_len; k++) {
                d[2 * k] = (unsigned char)HEX_UPPER[h[k] >> 4];
                d[2 * k + 1] = (unsigned char)HEX_UPPER[h[k] & 15];
            }
            uint64_t physical = (uint64_t)row_i64(row);
            for (int k = 0; k < 16; k++)
                d[2 * host_len + k] = (unsigned char)HEX_UPPER[(physical >> (60 - 4 * k)) & 15];
        } else {
            memcpy(d, buf + start, (size_t)len);
        }
        o->len += len;
    }
    off[i + 1] = (int32_t)o->len;
    return 1;
}

/* The buffers of columns o[:k] for up to count rows: 1 when a column needs each record
 * located (col_locate), 0 when none does, -1 with an exception set. */
static int col_alloc(col_out *o, Py_ssize_t k, Py_ssize_t count) {
    int locate = 0;
    for (Py_ssize_t j = 0; j < k; j++) {
        if (o[j].code >= C_MAGIC) locate = 1;
        if (o[j].code < C_FIXED_END) {
            o[j].values = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * o[j].width);
            if (o[j].values == NULL) return -1;
            continue;
        }
        o[j].offsets = PyBytes_FromStringAndSize(NULL, ((Py_ssize_t)count + 1) * 4);
        o[j].cap = (count < 8192 ? count : 8192) * 16 + 64; /* grows by doubling */
        o[j].values = PyBytes_FromStringAndSize(NULL, o[j].cap);
        o[j].bits = PyMem_Calloc((size_t)(count + 7) / 8 + 1, 1);
        if (o[j].offsets == NULL || o[j].values == NULL || o[j].bits == NULL) {
            if (!PyErr_Occurred()) PyErr_NoMemory();
            return -1;
        }
        ((int32_t *)PyBytes_AS_STRING(o[j].offsets))[0] = 0;
    }
    return locate;
}

/* Every column of o[:k] over rows[:count], row by row: each record's header is read once for
 * all the columns (not once per column). */
static int col_fill(col_out *o, Py_ssize_t k, const unsigned char *buf, int64_t n,
                    const unsigned char *rows, Py_ssize_t count, int64_t base) {
    int locate = col_alloc(o, k, count);
    if (locate < 0) return 0;
    col_row c = {0};
    for (Py_ssize_t i = 0; i < count; i++) {
        const unsigned char *row = rows + (size_t)i * ROW_SIZE;
        if (locate && !col_locate(buf, n, row, base, i, &c)) return 0;
        for (Py_ssize_t j = 0; j < k; j++)
            if (!col_put(&o[j], buf, row, &c, i)) return 0;
    }
    return 1;
}

/* The finished value of column o for its first count rows (a new reference), or NULL. */
static PyObject *col_result(col_out *o, Py_ssize_t count) {
    if (o->code < C_FIXED_END) {
        if (_PyBytes_Resize(&o->values, count * o->width) < 0) return NULL;
        Py_INCREF(o->values);
        return o->values;
    }
    if (_PyBytes_Resize(&o->values, o->len) < 0) return NULL;
    if (_PyBytes_Resize(&o->offsets, (count + 1) * 4) < 0) return NULL;
    PyObject *validity = o->nulls ? PyBytes_FromStringAndSize((const char *)o->bits,
                                                              (Py_ssize_t)(count + 7) / 8)
                                  : Py_NewRef(Py_None);
    if (validity == NULL) return NULL;
    PyObject *result = Py_BuildValue("(OOOn)", o->offsets, o->values, validity, o->nulls);
    Py_DECREF(validity);
    return result;
}

/* The columns named by names (a sequence of str): *outs (k of them, PyMem_Calloc'd, codes and
 * widths set), or 0 with an exception set. */
static int col_parse(PyObject *names, col_out **outs, Py_ssize_t *k) {
    PyObject *seq = PySequence_Fast(names, "names must be a sequence of column names");
    if (seq == NULL) return 0;
    *k = PySequence_Fast_GET_SIZE(seq);
    *outs = PyMem_Calloc((size_t)*k + 1, sizeof(col_out));
    int good = *outs != NULL;
    if (!good) PyErr_NoMemory();
    for (Py_ssize_t j = 0; good && j < *k; j++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, j);
        const char *name = PyUnicode_Check(item) ? PyUnicode_AsUTF8(item) : NULL;
        int found = -1;
        for (int t = 0; name && column_names[t].name; t++)
            if (strcmp(column_names[t].name, name) == 0) found = t;
        if (found < 0) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "unknown column %R", item);
            good = 0;
            break;
        }
        (*outs)[j].code = column_names[found].code;
        (*outs)[j].width = column_names[found].width;
    }
    Py_DECREF(seq);
    return good;
}

static PyObject *columns(PyObject *Py_UNUSED(self), PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"buf", "rows", "base_offset", "names", NULL};
    Py_buffer view, rows;
    long long base = 0;
    PyObject *names;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*y*LO:columns", kwlist, &view, &rows, &base,
                                     &names))
        return NULL;
    PyObject *result = NULL;
    col_out *outs = NULL;
    Py_ssize_t k = 0;
    if (rows.len % ROW_SIZE) {
        PyErr_SetString(PyExc_ValueError, "rows is not a whole number of rows");
        goto done;
    }
    if (base < 0 || base > INT64_MAX - view.len) {
        PyErr_SetString(PyExc_ValueError, "base_offset out of range");
        goto done;
    }
    Py_ssize_t count = rows.len / ROW_SIZE;
    if (!col_parse(names, &outs, &k)) goto done;
    if (!col_fill(outs, k, view.buf, view.len, rows.buf, count, base)) goto done;
    result = PyList_New(k);
    for (Py_ssize_t j = 0; result != NULL && j < k; j++) {
        PyObject *item = col_result(&outs[j], count);
        if (item == NULL) Py_CLEAR(result);
        else PyList_SET_ITEM(result, j, item);
    }
done:
    for (Py_ssize_t j = 0; outs != NULL && j < k; j++) {
        Py_XDECREF(outs[j].values);
        Py_XDECREF(outs[j].offsets);
        PyMem_Free(outs[j].bits);
    }
    PyMem_Free(outs);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&view);
    return result;
}

/* ---- scan_columns(): scan() and columns() in one pass (the Spark source's batches) ----
 *
 *     scan_columns(buf, start, end, base_offset, limit, names, max_rows, *, check_crc,
 *                  check_physical_offset) -> (scan's 6-tuple, columns)
 *
 * scan(buf, start, end, ...) that also stops (reason END, before the next record) once it has
 * found max_rows records, and columns(buf, rows, base_offset, names) of the rows it found,
 * each record's columns taken right after its checks, while it is in cache (the two calls
 * read every record twice). Holds the GIL. The reference is
 * hanet.store._index.scan_columns_py. */
static PyObject *scan_columns(PyObject *Py_UNUSED(self), PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"buf",   "start", "end",       "base_offset",           "limit",
                             "names", "max_rows", "check_crc", "check_physical_offset", NULL};
    Py_buffer view;
    Py_ssize_t start = 0, max_rows = 0;
    PyObject *end_obj = Py_None, *limit_obj = Py_None, *names;
    long long base = 0;
    int check_crc = 1, check_offset = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*nOLOOn|$pp:scan_columns", kwlist, &view,
                                     &start, &end_obj, &base, &limit_obj, &names, &max_rows,
                                     &check_crc, &check_offset))
        return NULL;
    PyObject *result = NULL, *cols = NULL;
    col_out *outs = NULL;
    Py_ssize_t k = 0;
    rows_buf rows = {NULL, 0, 0};
    topic_table topics = {NULL, 0, 0};
    last_topic last = {-1, 0, -1};
    const unsigned char *buf = view.buf;
    int64_t n = view.len;
    int64_t end, limit;
    if (!scan_range(end_obj, limit_obj, start, base, n, &end, &limit)) goto done;
    if (max_rows < 1) {
        PyErr_SetString(PyExc_ValueError, "max_rows must be positive");
        goto done;
    }
    if (!col_parse(names, &outs, &k)) goto done;
    /* at most one record per MIN_RECORD_SIZE bytes of the range */
    Py_ssize_t cap = max_rows;
    if (end > start && (end - start) / MIN_RECORD_SIZE + 1 < (int64_t)cap)
        cap = (Py_ssize_t)((end - start) / MIN_RECORD_SIZE + 1);
    if (end <= start) cap = 1;
    int locate = col_alloc(outs, k, cap);
    if (locate < 0) goto done;

    int reason = R_END;
    int64_t blank = 0;
    char detail[DETAIL_SIZE];
    detail[0] = '\0';
    int ok = 1, failed = 0;
    int64_t pos = start;
    Py_ssize_t count = 0;
    gil_state gil = {NULL};
    col_row c = {0};
    while (count < cap) {
        scanned_record f;
        int step = scan_record(buf, pos, end, limit, base, check_crc, check_offset, &gil, &ok, &f,
                               detail, &blank);
        if (!ok) break;
        if (step >= 0) {
            reason = step;
            break;
        }
        int64_t rec_end = pos + f.total;
        unsigned char *first = append_row(&rows, &topics, &last, buf, base, pos, &f);
        if (first == NULL) {
            ok = 0;
            break;
        }
        if (locate && !col_locate(buf, n, first, base, count, &c)) failed = 1;
        c.tags_known = 1; /* the scan's parse of the properties: the same TAGS value */
        c.tags_start = f.tags_start;
        c.tags_len = f.tags_len;
        for (Py_ssize_t j = 0; !failed && j < k; j++)
            if (!col_put(&outs[j], buf, first, &c, count)) failed = 1;
        if (failed) break;
        count++;
        pos = rec_end;
    }
    if (failed) goto done;
    if (!ok) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    cols = PyList_New(k);
    for (Py_ssize_t j = 0; cols != NULL && j < k; j++) {
        PyObject *item = col_result(&outs[j], count);
        if (item == NULL) Py_CLEAR(cols);
        else PyList_SET_ITEM(cols, j, item);
    }
    if (cols == NULL) goto done;
    result = Py_BuildValue("((LisLny#)O)", (long long)pos, reason, detail, (long long)blank,
                           (Py_ssize_t)(rows.len / ROW_SIZE),
                           rows.data ? (const char *)rows.data : "", (Py_ssize_t)rows.len, cols);
done:
    for (Py_ssize_t j = 0; outs != NULL && j < k; j++) {
        Py_XDECREF(outs[j].values);
        Py_XDECREF(outs[j].offsets);
        PyMem_Free(outs[j].bits);
    }
    PyMem_Free(outs);
    Py_XDECREF(cols);
    PyMem_RawFree(rows.data);
    PyMem_RawFree(topics.slots);
    PyBuffer_Release(&view);
    return result;
}
/* ---- end of columns() and scan_columns() ---- */

/* group_entries(rows) -> [(topic_id, topic_start, topic_length, queue_id, first_queue_offset,
 *                          count, entries, max_store_timestamp), ...]
 *
 * The consume queue entries of a scan's rows, grouped per (topic id, queue id): one group per
 * run of consecutive queue offsets of one queue, in the order of each group's first row (so
 * in the order of their first physical offsets). A row whose queue offset does not follow the
 * previous row of its queue (a gap or a repeat) starts a new group of that queue. entries:
 * count packed 20-byte consume queue entries (big-endian i64 physical offset, i32 size, i64
 * tags hash), in row order; topic_start/topic_length: the topic bytes of the group's first
 * row; max_store_timestamp: the largest store timestamp of the group's rows. */
typedef struct {
    int32_t tid, qid, tlen, has_next;
    int64_t tstart, first_q, next_q, max_stored;
    Py_ssize_t count;
    unsigned char *out;
} entry_group;

typedef struct {
    uint64_t key;
    Py_ssize_t group; /* -1: empty */
} group_slot;

static inline uint64_t group_key(int32_t tid, int32_t qid) {
    return ((uint64_t)(uint32_t)tid << 32) | (uint64_t)(uint32_t)qid;
}

static inline size_t group_hash(uint64_t key, size_t cap) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);
}

static int group_slots_grow(group_slot **slots, size_t *cap) {
    size_t ncap = *cap ? *cap * 2 : 64;
    group_slot *n = PyMem_RawMalloc(ncap * sizeof(group_slot));
    if (n == NULL) return 0;
    for (size_t i = 0; i < ncap; i++) n[i].group = -1;
    for (size_t i = 0; i < *cap; i++) {
        if ((*slots)[i].group < 0) continue;
        size_t j = group_hash((*slots)[i].key, ncap);
        while (n[j].group >= 0) j = (j + 1) & (ncap - 1);
        n[j] = (*slots)[i];
    }
    PyMem_RawFree(*slots);
    *slots = n;
    *cap = ncap;
    return 1;
}

static inline void put_be64(unsigned char *p, uint64_t v) {
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)v;
        v >>= 8;
    }
}

static inline void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

#define CQ_ENTRY 20

static PyObject *group_entries(PyObject *Py_UNUSED(self), PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL;
    entry_group *groups = NULL;
    Py_ssize_t *group_of = NULL;
    group_slot *slots = NULL;
    size_t cap = 0;
    Py_ssize_t ngroups = 0, gcap = 0;
    if (view.len % ROW_SIZE) {
        PyErr_SetString(PyExc_ValueError, "rows: not a whole number of rows");
        goto done;
    }
    const unsigned char *rows = view.buf;
    Py_ssize_t n = view.len / ROW_SIZE;
    if (n > 0 && (group_of = PyMem_RawMalloc((size_t)n * sizeof(Py_ssize_t))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *row = rows + i * ROW_SIZE;
        int32_t qid, tid, tlen;
        int64_t q, stored, tstart;
        memcpy(&qid, row + 12, 4);
        memcpy(&q, row + 16, 8);
        memcpy(&stored, row + 28, 8);
        memcpy(&tstart, row + 36, 8);
        memcpy(&tlen, row + 44, 4);
        memcpy(&tid, row + 48, 4);
        if ((size_t)(ngroups + 1) * 2 > cap && !group_slots_grow(&slots, &cap)) {
            PyErr_NoMemory();
            goto done;
        }
        uint64_t key = group_key(tid, qid);
        size_t j = group_hash(key, cap);
        while (slots[j].group >= 0 && slots[j].key != key) j = (j + 1) & (cap - 1);
        Py_ssize_t g = slots[j].group;
        if (g < 0 || !groups[g].has_next || groups[g].next_q != q) {
            if (ngroups == gcap) {
                Py_ssize_t ncap = gcap ? gcap * 2 : 16;
                entry_group *ng = PyMem_RawRealloc(groups, (size_t)ncap * sizeof(entry_group));
                if (ng == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                groups = ng;
                gcap = ncap;
            }
            g = ngroups++;
            entry_group *e = &groups[g];
            e->tid = tid;
            e->qid = qid;
            e->tstart = tstart;
            e->tlen = tlen;
            e->first_q = q;
            e->count = 0;
            e->max_stored = stored;
            e->out = NULL;
            slots[j].key = key;
            slots[j].group = g;
        }
        entry_group *e = &groups[g];
        e->has_next = q != INT64_MAX; /* no queue offset follows INT64_MAX */
        e->next_q = e->has_next ? q + 1 : q;
        e->count++;
        if (stored > e->max_stored) e->max_stored = stored;
        group_of[i] = g;
    }
    result = PyList_New(ngroups);
    if (result == NULL) goto done;
    for (Py_ssize_t g = 0; g < ngroups; g++) {
        entry_group *e = &groups[g];
        PyObject *entries = PyBytes_FromStringAndSize(NULL, e->count * CQ_ENTRY);
        if (entries == NULL) goto fail;
        e->out = (unsigned char *)PyBytes_AS_STRING(entries);
        PyObject *item = Py_BuildValue("(iLiiLnNL)", e->tid, (long long)e->tstart, e->tlen, e->qid,
                                       (long long)e->first_q, e->count, entries,
                                       (long long)e->max_stored);
        if (item == NULL) goto fail;
        PyList_SET_ITEM(result, g, item);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const unsigned char *row = rows + i * ROW_SIZE;
        entry_group *e = &groups[group_of[i]];
        int64_t physical;
        int32_t size, tags;
        memcpy(&physical, row, 8);
        memcpy(&size, row + 8, 4);
        memcpy(&tags, row + 24, 4);
        put_be64(e->out, (uint64_t)physical);
        put_be32(e->out + 8, (uint32_t)size);
        put_be64(e->out + 12, (uint64_t)(int64_t)tags);
        e->out += CQ_ENTRY;
    }
    goto done;
fail:
    Py_CLEAR(result);
done:
    PyMem_RawFree(groups);
    PyMem_RawFree(group_of);
    PyMem_RawFree(slots);
    PyBuffer_Release(&view);
    return result;
}

/* populate(buf): fault every page of a writable mapping in for writing, without the GIL
 * (mmap.madvise holds it: pre-faulting a new file in a worker thread would stall the event
 * loop for as long). MADV_POPULATE_WRITE, or a write of each page's first byte where the
 * kernel lacks it. For a file nobody else writes yet (a new mapped file). */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static PyObject *populate(PyObject *Py_UNUSED(self), PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_WRITABLE) < 0) return NULL;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) page = 4096;
    unsigned char *data = view.buf;
    Py_ssize_t n = view.len;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    uintptr_t address = (uintptr_t)data;
    uintptr_t aligned = address - address % (uintptr_t)page;
    if (n > 0 && madvise((void *)aligned, (size_t)(n + (Py_ssize_t)(address - aligned)),
                         MADV_POPULATE_WRITE) != 0) {
        if (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
            volatile unsigned char *p = data;
            for (Py_ssize_t i = 0; i < n; i += page) p[i] = p[i];
        } else {
            failed = errno;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (failed) {
        errno = failed;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

/* ---- seal(): the whole-record CRC property of a record just written (the put path) ----
 *
 *     seal(buf, pos, size) -> None
 *
 * The record at buf[pos:pos + size] ends its properties with the property's reserved 20 bytes
 * ("__CRC32#" \x01 10 digits \x02, name and separators already written): the 10 digits get
 * the CRC (zlib's, & 0x7FFFFFFF) of every byte before those 20, least significant first.
 * The reference is hanet.store._codec.seal_record. */
static PyObject *seal(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, size;
    if (!PyArg_ParseTuple(args, "w*nn:seal", &view, &pos, &size)) return NULL;
    if (pos < 0 || size < CRC32_RESERVED_LEN || pos > view.len - size) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "seal: the record is not inside the buffer");
        return NULL;
    }
    unsigned char *r = (unsigned char *)view.buf + pos;
    uint32_t crc = crc32_continue(0, r, (size_t)(size - CRC32_RESERVED_LEN)) & 0x7FFFFFFFu;
    unsigned char *digits = r + size - CRC32_RESERVED_LEN + 9;
    for (int i = 0; i < 10; i++) {
        digits[i] = (unsigned char)('0' + crc % 10);
        crc /= 10;
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* java_hash(text) -> (hash, length): Java's String.hashCode of text as an unsigned 32-bit int
 * and its length in UTF-16 code units (a code point past the BMP is two surrogates, as in
 * Java); the reference is hanet.store._index_keys.java_hash_py. */
static PyObject *java_hash(PyObject *self, PyObject *text) {
    (void)self;
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "java_hash() takes a str");
        return NULL;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    uint32_t h = 0;
    Py_ssize_t units = n;
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *p = (const Py_UCS1 *)data;
        for (Py_ssize_t i = 0; i < n; i++) h = h * 31u + p[i];
    } else if (kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *p = (const Py_UCS2 *)data;
        for (Py_ssize_t i = 0; i < n; i++) h = h * 31u + p[i];
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, i);
            if (c >= 0x10000) {
                c -= 0x10000;
                h = h * 31u + (0xD800u + (c >> 10));
                h = h * 31u + (0xDC00u + (c & 0x3FFu));
                units++;
            } else {
                h = h * 31u + c;
            }
        }
    }
    return Py_BuildValue("(kn)", (unsigned long)h, units);
}

/* ---- pull_gather(): a PULL_MESSAGE's records, one call per consume queue file ----
 *
 *     pull_gather(entries, log, log_base, floor, tags, budget, taken, topic, queue_id,
 *                 queue_offset, damaged) -> (stop, used, count, pulled_end, budget, body)
 *
 * Walks the consume queue entries (20 bytes each, big-endian i64 physical offset, i32 size,
 * i64 tag hash; entries[0] is queue offset queue_offset) as hanet.broker._pull's reference loop
 * does, for the records inside log (the commit log bytes from physical offset log_base):
 * an entry is skipped when blank (size 0x7FFFFFFF), when tags (None, or a collection of tag
 * hashes) lacks its hash or when it points below floor; a record goes into the answer when it
 * is exactly the valid record its entry names (scan_record() with the body CRC and the
 * physical offset checked, then its queue id, queue offset, tag hash and topic), while it
 * fits in budget (the first of the pull, taken == 0, always goes). damaged: None, or packed
 * native int64 (start, end) pairs of damaged commit log ranges.
 *
 * stop: 0 every entry used; 1 the budget is full at entry `used` (not used); 2 entry `used`
 * needs the reference path (a record that fails a check, a size <= 0, a damaged store's
 * entry that is blank or points into a damaged range): it raises the exact error, or serves
 * it; 3 the record of entry `used` is not inside log: read the log there and call again.
 * used: entries used; count: records gathered; pulled_end: the end of the last (-1 when
 * none); budget: what is left; body: the gathered records, joined (the answer's body).
 * Every read is bounds checked against the buffers: an entry is data from disk. */

#define PULL_DONE 0
#define PULL_FULL 1
#define PULL_STEP 2
#define PULL_MOVE 3
#define CQ_BLANK 0x7FFFFFFF

static int int64_order(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The tag hashes of tags (a collection of ints) into *out, sorted; -1 on error. */
static Py_ssize_t pull_tags(PyObject *tags, int64_t **out) {
    PyObject *seq = PySequence_Fast(tags, "tags must be a collection of ints");
    if (seq == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int64_t *values = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (values == NULL) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1 && PyErr_Occurred()) {
            PyMem_Free(values);
            Py_DECREF(seq);
            return -1;
        }
        values[i] = v;
    }
    Py_DECREF(seq);
    qsort(values, (size_t)n, sizeof(int64_t), int64_order);
    *out = values;
    return n;
}

static inline int pull_tag_wanted(const int64_t *tags, Py_ssize_t n, int64_t hash) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (tags[mid] < hash) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && tags[lo] == hash;
}

static PyObject *pull_gather(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer entries, log, topic, damaged = {0};
    long long log_base, floor, budget, queue_offset;
    Py_ssize_t taken;
    int queue_id;
    PyObject *tags_obj, *damaged_obj;
    if (!PyArg_ParseTuple(args, "y*y*LLOLny*iLO:pull_gather", &entries, &log, &log_base, &floor,
                          &tags_obj, &budget, &taken, &topic, &queue_id, &queue_offset,
                          &damaged_obj))
        return NULL;
    PyObject *result = NULL;
    int64_t *tags = NULL;
    Py_ssize_t ntags = -1; /* -1: every tag */
    int64_t *spans = NULL;
    int have_damaged = 0;
    int ok = 1;
    if (entries.len % CQ_ENTRY) {
        PyErr_SetString(PyExc_ValueError, "entries: not a whole number of consume queue entries");
        goto done;
    }
    if (log_base < 0 || queue_offset < 0 || taken < 0 ||
        queue_offset > INT64_MAX - entries.len / CQ_ENTRY) {
        PyErr_SetString(PyExc_ValueError, "log_base, queue_offset and taken must be >= 0");
        goto done;
    }
    if (damaged_obj != Py_None) {
        if (PyObject_GetBuffer(damaged_obj, &damaged, PyBUF_SIMPLE) < 0) goto done;
        have_damaged = 1;
        if (damaged.len % 16) {
            PyErr_SetString(PyExc_ValueError, "damaged: not a whole number of int64 pairs");
            goto done;
        }
    }
    if (tags_obj != Py_None && (ntags = pull_tags(tags_obj, &tags)) < 0) goto done;
    Py_ssize_t n = entries.len / CQ_ENTRY;
    if (n > 0 && (spans = PyMem_Malloc((size_t)n * 2 * sizeof(int64_t))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const unsigned char *cq = entries.buf;
    const unsigned char *buf = log.buf;
    const int64_t log_len = log.len;
    const int64_t *ranges = damaged.buf;
    const Py_ssize_t nranges = have_damaged ? damaged.len / 16 : 0;
    int64_t pulled_end = -1;
    int64_t total_bytes = 0;
    Py_ssize_t count = 0, i = 0;
    int stop = PULL_DONE;
    gil_state gil = {NULL};
    char detail[DETAIL_SIZE];
    int64_t blank = 0;
    for (; i < n; i++) {
        const unsigned char *e = cq + i * CQ_ENTRY;
        int64_t physical = rd_i64(e);
        int32_t size = rd_i32(e + 8);
        int64_t hash = rd_i64(e + 12);
        if (have_damaged) {
            if (size == CQ_BLANK || physical > INT64_MAX - CQ_BLANK) {
                stop = PULL_STEP; /* a gap: the reference looks around it */
                break;
            }
            int64_t end = physical + (size > 1 ? size : 1);
            int hit = 0;
            for (Py_ssize_t k = 0; k < nranges && !hit; k++)
                hit = physical < ranges[2 * k + 1] && ranges[2 * k] < end;
            if (hit) {
                stop = PULL_STEP;
                break;
            }
        }
        if (size == CQ_BLANK || (ntags >= 0 && !pull_tag_wanted(tags, ntags, hash)) ||
            physical < floor)
            continue;
        if ((taken || count) && (int64_t)size > budget) {
            stop = PULL_FULL;
            break;
        }
        if (size <= 0) {
            stop = PULL_STEP;
            break;
        }
        if (physical < log_base || physical - log_base > log_len - size) {
            stop = PULL_MOVE;
            break;
        }
        int64_t at = physical - log_base;
        scanned_record f;
        int step = scan_record(buf, at, at + size, at + size, log_base, 1, 1, &gil, &ok, &f,
                               detail, &blank);
        if (!ok) goto done;
        if (step >= 0 || f.total != size || f.queue_id != queue_id ||
            f.queue_offset != queue_offset + i || (int64_t)f.thash != hash ||
            f.topic_len != topic.len ||
            memcmp(buf + f.topic_start, topic.buf, (size_t)topic.len) != 0) {
            stop = PULL_STEP;
            break;
        }
        spans[2 * count] = at;
        spans[2 * count + 1] = size;
        count++;
        total_bytes += size;
        budget -= size;
        pulled_end = physical + size;
    }
    PyObject *body = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total_bytes);
    if (body == NULL) goto done;
    char *out = PyBytes_AS_STRING(body);
    for (Py_ssize_t k = 0; k < count; k++) {
        memcpy(out, buf + spans[2 * k], (size_t)spans[2 * k + 1]);
        out += spans[2 * k + 1];
    }
    result = Py_BuildValue("(innLLN)", stop, i, count, (long long)pulled_end, budget, body);
done:
    if (!ok && !PyErr_Occurred()) PyErr_NoMemory();
    PyMem_Free(spans);
    PyMem_Free(tags);
    if (have_damaged) PyBuffer_Release(&damaged);
    PyBuffer_Release(&entries);
    PyBuffer_Release(&log);
    PyBuffer_Release(&topic);
    return result;
}

/* ---- end of pull_gather() ---- */

/* ---- decode_records(): the records of a pull answer's body as MessageRecord tuples ----
 *
 *     decode_records(buf, start, cls) -> (records, position)
 *
 * Decodes the records of buf from start, each checked by scan_record() (body CRC and the
 * whole-record CRC property checked, the physical offset not), into instances of cls (a tuple
 * subclass of 19 fields: hanet.store.MessageRecord), as hanet.store.decode_record does one by
 * one (the reference; its RecordScanner builds the same tuple). Stops at the buffer's end or at
 * the first thing that is not a valid record: position is where (the caller decodes that one
 * with the reference, which raises its exact error). Every read is bounds checked. */

#define RECORD_FIELDS 19

static PyObject *decode_records(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t start;
    PyTypeObject *cls;
    if (!PyArg_ParseTuple(args, "y*nO!:decode_records", &view, &start, &PyType_Type, &cls))
        return NULL;
    PyObject *records = NULL, *topic = NULL, *result = NULL;
    if (!PyType_IsSubtype(cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "decode_records: cls must be a tuple subclass");
        goto done;
    }
    if (start < 0) {
        PyErr_SetString(PyExc_ValueError, "start must not be negative");
        goto done;
    }
    records = PyList_New(0);
    if (records == NULL) goto done;
    const unsigned char *buf = view.buf;
    const int64_t n = view.len;
    int64_t pos = start;
    int64_t topic_start = 0;
    int32_t topic_len = -1;
    gil_state gil = {NULL};
    int ok = 1;
    char detail[DETAIL_SIZE];
    int64_t blank = 0;
    while (pos < n) {
        scanned_record f;
        int step = scan_record(buf, pos, n, n, 0, 1, 0, &gil, &ok, &f, detail, &blank);
        if (!ok) goto fail;
        if (step >= 0) break;
        /* scan_record() checked every length below against the record's end. */
        const unsigned char *r = buf + pos;
        int32_t sys_flag = rd_i32(r + 36);
        int born = (sys_flag & BORN_V6) ? 16 : 4;
        int store = (sys_flag & STORE_V6) ? 16 : 4;
        const unsigned char *s = r + 48 + born + 4; /* the store timestamp */
        int64_t hsize = HEADER_V4 + (born - 4) + (store - 4);
        int32_t body_len = rd_i32(r + hsize - 4);
        int64_t props_start = f.topic_start + f.topic_len + 2;
        if (f.topic_len != topic_len ||
            memcmp(buf + topic_start, buf + f.topic_start, (size_t)f.topic_len) != 0) {
            Py_XSETREF(topic, PyUnicode_DecodeUTF8((const char *)buf + f.topic_start,
                                                   f.topic_len, "strict"));
            if (topic == NULL) goto fail;
            topic_start = f.topic_start;
            topic_len = f.topic_len;
        }
        PyObject *record = cls->tp_alloc(cls, RECORD_FIELDS);
        if (record == NULL) goto fail;
        PyObject *items[RECORD_FIELDS] = {
            PyLong_FromLong(f.total),
            PyLong_FromUnsignedLong(rd_u32(r + 4)),
            PyLong_FromLong(rd_i32(r + 8)),
            PyLong_FromLong(f.queue_id),
            PyLong_FromLong(rd_i32(r + 16)),
            PyLong_FromLongLong(f.queue_offset),
            PyLong_FromLongLong(rd_i64(r + 28)),
            PyLong_FromLong(sys_flag),
            PyLong_FromLongLong(rd_i64(r + 40)),
            PyBytes_FromStringAndSize((const char *)r + 48, born),
            PyLong_FromLong(rd_i32(r + 48 + born)),
            PyLong_FromLongLong(rd_i64(s)),
            PyBytes_FromStringAndSize((const char *)s + 8, store),
            PyLong_FromLong(rd_i32(s + 8 + store)),
            PyLong_FromLong(rd_i32(s + 12 + store)),
            PyLong_FromLongLong(rd_i64(s + 16 + store)),
            PyBytes_FromStringAndSize((const char *)r + hsize, body_len),
            topic,
            PyBytes_FromStringAndSize((const char *)buf + props_start,
                                      (Py_ssize_t)(pos + f.total - props_start)),
        };
        Py_INCREF(topic);
        int failed = 0;
        for (int k = 0; k < RECORD_FIELDS; k++) {
            if (items[k] == NULL) failed = 1;
            PyTuple_SET_ITEM(record, k, items[k]); /* NULL items are skipped by dealloc */
        }
        if (failed || PyList_Append(records, record) < 0) {
            Py_DECREF(record);
            goto fail;
        }
        Py_DECREF(record);
        pos += f.total;
    }
    result = Py_BuildValue("(OL)", records, (long long)pos);
    goto done;
fail:
    if (!PyErr_Occurred()) PyErr_NoMemory();
done:
    Py_XDECREF(records);
    Py_XDECREF(topic);
    PyBuffer_Release(&view);
    return result;
}

/* ---- end of decode_records() ---- */
/* ---- key_batch(): the index keys of a scan window's records (the put path's index) ----
 *
 *     key_batch(buf, base, rows, indexed, skip) -> list[(key hash, offset, store timestamp)]
 *
 * For each record of rows (scan() rows over buf, whose byte 0 is at offset base) at offset
 * indexed or later and not a rolled back transaction: the keys of its properties (the last
 * UNIQ_KEY, then each non-empty space-separated key of the last KEYS), each as RocketMQ's
 * indexKeyHashMethod of "topic#key" (Java's String.hashCode over UTF-16, its absolute value,
 * 0 for Integer.MIN_VALUE); the first skip keys of the record at indexed are left out.
 * Non-ASCII text is decoded as the reference does (topic strict UTF-8, keys with
 * replacement) and hashed over its UTF-16 units. Every position of a row is checked
 * against the buffer. The reference is hanet.store._index_file.key_batch_py. */
#define KB_ROLLBACK (0x3 << 2)
#define KB_SYS_FLAG_AT 36

/* Continue Java's String.hashCode h over a str's UTF-16 units. */
static uint32_t kb_hash_str(uint32_t h, PyObject *text) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 0x10000) {
            c -= 0x10000;
            h = h * 31u + (0xD800u + (c >> 10));
            h = h * 31u + (0xDC00u + (c & 0x3FFu));
        } else {
            h = h * 31u + c;
        }
    }
    return h;
}

/* Continue h over bytes p[0:n] as UTF-8 (errors: NULL = strict, else "replace"); -1 on error
 * (an exception set), else 0 with *out the hash. */
static int kb_hash_utf8(uint32_t h, const unsigned char *p, Py_ssize_t n, const char *errors,
                        uint32_t *out) {
    int ascii = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] & 0x80) {
            ascii = 0;
            break;
        }
    }
    if (ascii) {
        for (Py_ssize_t i = 0; i < n; i++) h = h * 31u + p[i];
        *out = h;
        return 0;
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)p, n, errors);
    if (text == NULL) return -1;
    *out = kb_hash_str(h, text);
    Py_DECREF(text);
    return 0;
}

static inline long kb_positive(uint32_t value) {
    if (value < 0x80000000u) return (long)value;
    if (value == 0x80000000u) return 0;
    return (long)(0x100000000ull - value);
}

static int kb_append(PyObject *batch, uint32_t hash, int64_t offset, int64_t stored) {
    PyObject *item = Py_BuildValue("(lLL)", kb_positive(hash), (long long)offset,
                                   (long long)stored);
    if (item == NULL) return -1;
    int failed = PyList_Append(batch, item);
    Py_DECREF(item);
    return failed;
}

static PyObject *key_batch(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view, rows;
    long long base, indexed;
    Py_ssize_t skip;
    if (!PyArg_ParseTuple(args, "y*Ly*Ln:key_batch", &view, &base, &rows, &indexed, &skip))
        return NULL;
    PyObject *batch = PyList_New(0);
    const unsigned char *buf = view.buf;
    Py_ssize_t len = view.len;
    Py_ssize_t count = rows.len / ROW_SIZE;
    int32_t cached_id = -1;
    uint32_t prefix = 0;
    if (batch == NULL) goto fail;
    if (rows.len % ROW_SIZE) {
        PyErr_SetString(PyExc_ValueError, "key_batch: rows are not whole rows");
        goto fail;
    }
    for (Py_ssize_t r = 0; r < count; r++) {
        const unsigned char *row = (const unsigned char *)rows.buf + r * ROW_SIZE;
        int64_t offset, stored, t_start;
        int32_t t_length, t_id;
        memcpy(&offset, row, 8);
        memcpy(&stored, row + 28, 8);
        memcpy(&t_start, row + 36, 8);
        memcpy(&t_length, row + 44, 4);
        memcpy(&t_id, row + 48, 4);
        if (offset < indexed) continue;
        if (t_start < 0 || t_length < 0 || t_start > len - t_length - 2) goto bad_row;
        Py_ssize_t at = (Py_ssize_t)(t_start + t_length + 2);
        Py_ssize_t plen = ((Py_ssize_t)buf[at - 2] << 8) | buf[at - 1];
        if (plen > len - at) goto bad_row;
        const unsigned char *props = buf + at;
        /* the last UNIQ_KEY and KEYS values (a Java HashMap keeps the last) */
        const unsigned char *uniq = NULL, *keys = NULL;
        Py_ssize_t uniq_len = 0, keys_len = 0;
        Py_ssize_t i = 0;
        while (i <= plen) {
            const unsigned char *seg = props + i;
            const unsigned char *stop = memchr(seg, 0x02, (size_t)(plen - i));
            Py_ssize_t seg_len = stop ? (Py_ssize_t)(stop - seg) : plen - i;
            if (seg_len >= 5 && memcmp(seg, "KEYS\x01", 5) == 0) {
                keys = seg + 5;
                keys_len = seg_len - 5;
            } else if (seg_len >= 9 && memcmp(seg, "UNIQ_KEY\x01", 9) == 0) {
                uniq = seg + 9;
                uniq_len = seg_len - 9;
            }
            if (stop == NULL) break;
            i += seg_len + 1;
        }
        if (uniq == NULL && keys == NULL) continue;
        long long at_record;
        if (__builtin_sub_overflow((long long)offset, base, &at_record) || at_record < 0 ||
            at_record > (long long)len - KB_SYS_FLAG_AT - 4)
            goto bad_row;
        if ((rd_i32(buf + at_record + KB_SYS_FLAG_AT) & KB_ROLLBACK) == KB_ROLLBACK) continue;
        if (t_id != cached_id || cached_id < 0) {
            uint32_t h;
            if (kb_hash_utf8(0, buf + t_start, t_length, NULL, &h) < 0) goto fail;
            prefix = h * 31u + '#';
            cached_id = t_id;
        }
        Py_ssize_t left = (offset == indexed && skip > 0) ? skip : 0;
        uint32_t h;
        if (uniq != NULL) {
            if (left > 0) {
                left--;
            } else {
                if (kb_hash_utf8(prefix, uniq, uniq_len, "replace", &h) < 0) goto fail;
                if (kb_append(batch, h, offset, stored) < 0) goto fail;
            }
        }
        if (keys != NULL) {
            Py_ssize_t k = 0;
            while (k < keys_len) {
                const unsigned char *key = keys + k;
                const unsigned char *space = memchr(key, ' ', (size_t)(keys_len - k));
                Py_ssize_t key_len = space ? (Py_ssize_t)(space - key) : keys_len - k;
                if (key_len > 0) {
                    if (left > 0) {
                        left--;
                    } else {
                        if (kb_hash_utf8(prefix, key, key_len, "replace", &h) < 0) goto fail;
                        if (kb_append(batch, h, offset, stored) < 0) goto fail;
                    }
                }
                k += key_len + 1;
            }
        }
    }
    PyBuffer_Release(&view);
    PyBuffer_Release(&rows);
    return batch;
bad_row:
    PyErr_SetString(PyExc_ValueError, "key_batch: a row points outside the buffer");
fail:
    Py_XDECREF(batch);
    PyBuffer_Release(&view);
    PyBuffer_Release(&rows);
    return NULL;
}
/* ---- end of key_batch() ---- */

/* ---- write_record(), put_properties(): one commit log record in one call (the put path) ----
 *
 *     write_record(buf, pos, size, queue_id, flag, queue_offset, physical_offset, sys_flag,
 *                  born_timestamp, born_host, born_port, store_timestamp, store_host,
 *                  store_port, reconsume_times, prepared_transaction_offset, body, topic,
 *                  properties) -> None
 *
 * Writes a V1 record (topic at most 127 bytes) at buf[pos:pos + size]: the header, the body
 * and its CRC, the topic, the properties (which end with the whole-record CRC property's 20
 * reserved bytes), then seals it (the property's digits, as seal()). size must be the
 * record's size; the hosts' lengths must match sys_flag's host bits; a number out of its
 * field's range is struct.error, as struct.pack_into. The reference is
 * hanet.store._writer.write_record_py.
 *
 *     put_properties(properties) -> bytes
 *
 * A put's properties field: "name\x01value\x02" for each item of the dict but __CRC32#, in
 * order, then the reserved "__CRC32#\x01" 10 zeros "\x02". Names and values are str (others
 * are formatted with str()); the reference is hanet.store._writer.put_properties_py. */
static PyObject *struct_error = NULL;

static int load_struct_error(void) {
    if (struct_error == NULL) {
        PyObject *module = PyImport_ImportModule("struct");
        if (module == NULL) return -1;
        struct_error = PyObject_GetAttrString(module, "error");
        Py_DECREF(module);
        if (struct_error == NULL) return -1;
    }
    return 0;
}

static int wr_range_error(const char *what) {
    if (load_struct_error() < 0) return -1;
    PyErr_Format(struct_error, "write_record: %s is out of range", what);
    return -1;
}

/* arg as an int in [low, high]; -1 with an exception set otherwise. */
static int wr_int(PyObject *arg, long long low, long long high, const char *what,
                  long long *out) {
    if (!PyLong_Check(arg)) {
        if (load_struct_error() < 0) return -1;
        PyErr_Format(struct_error, "write_record: %s is not an integer", what);
        return -1;
    }
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (value == -1 && PyErr_Occurred()) return -1;
    if (overflow || value < low || value > high) return wr_range_error(what);
    *out = value;
    return 0;
}

static inline void wr_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}
static inline void wr_u64(unsigned char *p, uint64_t v) {
    wr_u32(p, (uint32_t)(v >> 32));
    wr_u32(p + 4, (uint32_t)v);
}

#define I32_MIN (-2147483647LL - 1)
#define I32_MAX 2147483647LL

/* write_record() (sealed: the properties end with the reserved 20 bytes, filled last) and
 * write_record_unsealed() (any properties, no seal: a DLedger leader's records, as
 * RocketMQ's, carry no whole-record CRC) */
static PyObject *write_record_any(PyObject *const *args, Py_ssize_t nargs, int sealed) {
    if (nargs != 19) {
        PyErr_Format(PyExc_TypeError, "write_record() takes 19 arguments (%zd given)", nargs);
        return NULL;
    }
    /* pos and size first: the checks of the lengths need them (ValueError, as the
     * reference's comparisons); the fields' numbers after those checks (struct.error) */
    long long pos = 0, size = 0;
    for (int i = 1; i <= 2; i++) {
        if (!PyLong_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "write_record: pos and size are integers");
            return NULL;
        }
        int overflow = 0;
        long long value = PyLong_AsLongLongAndOverflow(args[i], &overflow);
        if (value == -1 && PyErr_Occurred()) return NULL;
        if (overflow) value = overflow < 0 ? -1 : LLONG_MAX; /* out of every buffer */
        if (i == 1) pos = value; else size = value;
    }
    static const int int_at[] = {3, 4, 5, 6, 7, 8, 10, 11, 13, 14, 15};
    static const char *int_names[] = {"queue_id",  "flag",           "queue_offset",
                                      "physical_offset", "sys_flag", "born_timestamp",
                                      "born_port", "store_timestamp", "store_port",
                                      "reconsume_times", "prepared_transaction_offset"};
    static const long long lows[] = {I32_MIN, I32_MIN,   LLONG_MIN, LLONG_MIN, I32_MIN, LLONG_MIN,
                                     I32_MIN, LLONG_MIN, I32_MIN,   I32_MIN,   LLONG_MIN};
    static const long long highs[] = {I32_MAX, I32_MAX,   LLONG_MAX, LLONG_MAX, I32_MAX, LLONG_MAX,
                                      I32_MAX, LLONG_MAX, I32_MAX,   I32_MAX,   LLONG_MAX};
    long long v[11];
    /* sys_flag picks the hosts' lengths: read it first (struct.error if it is no int32) */
    if (wr_int(args[7], I32_MIN, I32_MAX, "sys_flag", &v[4]) < 0) return NULL;
    int32_t sys_flag = (int32_t)v[4];
    Py_buffer out, born, store, body, topic, props;
    if (PyObject_GetBuffer(args[0], &out, PyBUF_WRITABLE) < 0) return NULL;
    Py_buffer *held[6] = {&out, NULL, NULL, NULL, NULL, NULL};
    int nheld = 1;
    PyObject *result = NULL;
    PyObject *const buffers[5] = {args[9], args[12], args[16], args[17], args[18]};
    Py_buffer *views[5] = {&born, &store, &body, &topic, &props};
    for (int i = 0; i < 5; i++) {
        if (PyObject_GetBuffer(buffers[i], views[i], PyBUF_SIMPLE) < 0) goto done;
        held[nheld++] = views[i];
    }
    Py_ssize_t born_len = (sys_flag & BORN_V6) ? 16 : 4;
    Py_ssize_t store_len = (sys_flag & STORE_V6) ? 16 : 4;
    if (born.len != born_len || store.len != store_len) {
        PyErr_SetString(PyExc_ValueError, "write_record: a host's length does not match sys_flag");
        goto done;
    }
    if (topic.len < 1 || topic.len > 127) {
        PyErr_SetString(PyExc_ValueError, "write_record: the topic is not 1 to 127 bytes");
        goto done;
    }
    if ((sealed && props.len < CRC32_RESERVED_LEN) || props.len > 32767) {
        PyErr_SetString(PyExc_ValueError,
                        sealed ? "write_record: the properties are not 20 to 32767 bytes"
                               : "write_record: the properties are over 32767 bytes");
        goto done;
    }
    if (body.len > I32_MAX) {
        wr_range_error("the body's length");
        goto done;
    }
    long long header_len = HEADER_V4 + (born_len - 4) + (store_len - 4);
    long long expected = header_len + body.len + 1 + topic.len + 2 + props.len;
    if (size != expected) {
        PyErr_SetString(PyExc_ValueError, "write_record: size is not the record's size");
        goto done;
    }
    if (pos < 0 || pos > (long long)out.len - size) {
        PyErr_SetString(PyExc_ValueError, "write_record: the record is not inside the buffer");
        goto done;
    }
    for (int i = 0; i < 11; i++) {
        if (wr_int(args[int_at[i]], lows[i], highs[i], int_names[i], &v[i]) < 0) goto done;
    }
    unsigned char *r = (unsigned char *)out.buf + pos;
    unsigned char *p = r;
    wr_u32(p, (uint32_t)size); p += 4;
    wr_u32(p, MAGIC_V1); p += 4;
    wr_u32(p, crc32_continue(0, body.buf, (size_t)body.len) & 0x7FFFFFFFu); p += 4;
    wr_u32(p, (uint32_t)v[0]); p += 4;  /* queue id */
    wr_u32(p, (uint32_t)v[1]); p += 4;  /* flag */
    wr_u64(p, (uint64_t)v[2]); p += 8;  /* queue offset */
    wr_u64(p, (uint64_t)v[3]); p += 8;  /* physical offset */
    wr_u32(p, (uint32_t)sys_flag); p += 4;
    wr_u64(p, (uint64_t)v[5]); p += 8;  /* born timestamp */
    memcpy(p, born.buf, (size_t)born_len); p += born_len;
    wr_u32(p, (uint32_t)v[6]); p += 4;  /* born port */
    wr_u64(p, (uint64_t)v[7]); p += 8;  /* store timestamp */
    memcpy(p, store.buf, (size_t)store_len); p += store_len;
    wr_u32(p, (uint32_t)v[8]); p += 4; /* store port */
    wr_u32(p, (uint32_t)v[9]); p += 4; /* reconsume times */
    wr_u64(p, (uint64_t)v[10]); p += 8; /* prepared transaction offset */
    wr_u32(p, (uint32_t)body.len); p += 4;
    memcpy(p, body.buf, (size_t)body.len); p += body.len;
    *p++ = (unsigned char)topic.len;
    memcpy(p, topic.buf, (size_t)topic.len); p += topic.len;
    *p++ = (unsigned char)(props.len >> 8);
    *p++ = (unsigned char)props.len;
    memcpy(p, props.buf, (size_t)props.len);
    if (sealed) {
        /* the CRC of every byte before the reserved 20, its 10 digits least significant first */
        uint32_t crc = crc32_continue(0, r, (size_t)(size - CRC32_RESERVED_LEN)) & 0x7FFFFFFFu;
        unsigned char *digits = r + size - CRC32_RESERVED_LEN + 9;
        for (int i = 0; i < 10; i++) {
            digits[i] = (unsigned char)('0' + crc % 10);
            crc /= 10;
        }
    }
    result = Py_None;
    Py_INCREF(result);
done:
    for (int i = 0; i < nheld; i++) PyBuffer_Release(held[i]);
    return result;
}

static PyObject *write_record(PyObject *Py_UNUSED(self), PyObject *const *args,
                              Py_ssize_t nargs) {
    return write_record_any(args, nargs, 1);
}

static PyObject *write_record_unsealed(PyObject *Py_UNUSED(self), PyObject *const *args,
                                       Py_ssize_t nargs) {
    return write_record_any(args, nargs, 0);
}

static const char PP_TRAILER[] = "__CRC32#\x01" "0000000000\x02";

static PyObject *put_properties(PyObject *Py_UNUSED(self), PyObject *properties) {
    if (!PyDict_Check(properties)) {
        PyErr_SetString(PyExc_TypeError, "put_properties() takes a dict");
        return NULL;
    }
    /* two passes: the UTF-8 of every item (cached by str objects), then one copy */
    Py_ssize_t total = CRC32_RESERVED_LEN, at = 0;
    PyObject *key, *value;
    PyObject *texts = PyList_New(0); /* str() of non-str names and values, kept alive */
    if (texts == NULL) return NULL;
    Py_ssize_t n = PyDict_GET_SIZE(properties);
    const char **parts = PyMem_Malloc(sizeof(char *) * (size_t)(2 * n + 1));
    Py_ssize_t *lens = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(2 * n + 1));
    PyObject *result = NULL;
    Py_ssize_t count = 0;
    if (parts == NULL || lens == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    while (PyDict_Next(properties, &at, &key, &value)) {
        if (count >= 2 * n) {
            PyErr_SetString(PyExc_RuntimeError, "put_properties: the dict changed size");
            goto done;
        }
        PyObject *item[2] = {key, value};
        const char *text[2];
        Py_ssize_t size[2];
        for (int i = 0; i < 2; i++) {
            PyObject *s = item[i];
            if (!PyUnicode_Check(s)) {
                s = PyObject_Str(s);
                if (s == NULL) goto done;
                int failed = PyList_Append(texts, s);
                Py_DECREF(s);
                if (failed) goto done;
            }
            text[i] = PyUnicode_AsUTF8AndSize(s, &size[i]);
            if (text[i] == NULL) goto done;
        }
        if (size[0] == 8 && memcmp(text[0], "__CRC32#", 8) == 0 && PyUnicode_Check(key))
            continue; /* about another record */
        parts[count] = text[0];
        lens[count++] = size[0];
        parts[count] = text[1];
        lens[count++] = size[1];
        total += size[0] + size[1] + 2;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) goto done;
    char *p = PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < count; i += 2) {
        memcpy(p, parts[i], (size_t)lens[i]);
        p += lens[i];
        *p++ = 0x01;
        memcpy(p, parts[i + 1], (size_t)lens[i + 1]);
        p += lens[i + 1];
        *p++ = 0x02;
    }
    memcpy(p, PP_TRAILER, CRC32_RESERVED_LEN);
done:
    PyMem_Free(parts);
    PyMem_Free(lens);
    Py_DECREF(texts);
    return result;
}
/* ---- end of write_record(), put_properties() ---- */


/* ---- record_place(): the fields that place a DLedger entry's record in the commit log view ----
 *
 *     record_place(record) -> (size, topic, queue_id, store_timestamp, store_host, store_port)
 *
 * record (a bytes-like object) must be exactly one record: a record's magic (v1 or v2), its
 * TOTALSIZE its length, every field up to the topic inside it and the topic valid UTF-8;
 * else ValueError. The body and properties are not checked here (the store checks the whole
 * record when the view appends it). The reference is hanet.dledger._stamp.record_place. */
static PyObject *record_place(PyObject *Py_UNUSED(self), PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *r = (const unsigned char *)view.buf;
    Py_ssize_t len = view.len;
    PyObject *result = NULL;
    const char *why = NULL;
    if (len < 40) {
        why = "not a record: too short";
        goto done;
    }
    uint32_t magic = rd_u32(r + 4);
    int32_t size = rd_i32(r);
    int32_t queue_id = rd_i32(r + 12);
    int32_t sys_flag = rd_i32(r + 36);
    if (magic != MAGIC_V1 && magic != MAGIC_V2) {
        why = "magic is not a record's";
        goto done;
    }
    if ((Py_ssize_t)size != len) {
        why = "a record's size is not its length";
        goto done;
    }
    Py_ssize_t at = 48 + ((sys_flag & BORN_V6) ? 20 : 8);
    Py_ssize_t host_len = (sys_flag & STORE_V6) ? 16 : 4;
    /* store timestamp, store host and port, reconsume times, prepared offset, body length */
    if (at + 8 + host_len + 4 + 4 + 8 + 4 > len) {
        why = "not a record: too short";
        goto done;
    }
    int64_t store_timestamp = rd_i64(r + at);
    at += 8;
    const unsigned char *host = r + at;
    int32_t store_port = rd_i32(r + at + host_len);
    at += host_len + 4 + 4 + 8;
    int32_t body_len = rd_i32(r + at);
    if (body_len < 0) {
        why = "a negative body length";
        goto done;
    }
    at += 4 + (Py_ssize_t)body_len;
    Py_ssize_t topic_len;
    if (magic == MAGIC_V2) {
        if (at + 2 > len) {
            why = "not a record: too short";
            goto done;
        }
        topic_len = ((Py_ssize_t)r[at] << 8) | r[at + 1];
        at += 2;
    } else {
        if (at + 1 > len) {
            why = "not a record: too short";
            goto done;
        }
        topic_len = r[at];
        at += 1;
    }
    if (at + topic_len > len) {
        why = "its topic runs past its end";
        goto done;
    }
    PyObject *topic = PyUnicode_DecodeUTF8((const char *)r + at, topic_len, "strict");
    if (topic == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            why = "not a record: its topic is not UTF-8";
        }
        goto done;
    }
    result = Py_BuildValue("(iNiLy#i)", (int)size, topic, (int)queue_id,
                           (long long)store_timestamp, (const char *)host, host_len,
                           (int)store_port);
done:
    PyBuffer_Release(&view);
    if (why != NULL) PyErr_SetString(PyExc_ValueError, why);
    return result;
}
/* ---- end of record_place() ---- */

/* ---- index_entries(): an index file's entries for a batch of keys (the put path's index) ----
 *
 *     index_entries(buf, keys, count, slots, begin, begin_phy, used, end_phy, end_stamp)
 *       -> (packed, pending, begin, begin_phy, used, end_phy, end_stamp, number)
 *
 * buf: the index file's bytes (its hash slots read, never written); keys: (key hash,
 * physical offset, store timestamp) tuples; count: the entries it holds. The entries
 * RocketMQ's putKey writes for each key in turn (">iqii": hash, offset, seconds since the
 * file's begin timestamp, the slot's previous entry), the slots to write ({position: entry
 * number}, in first-touched order) and the header's fields updated. A slot outside buf is
 * ValueError, a number out of its field's range struct.error. The reference is
 * hanet.store._index_file.index_entries_py. */
#define IE_HEADER 40
#define IE_SLOT 4
#define IE_ENTRY 20

static int ie_item(PyObject *item, long long *out, const char *what) {
    int overflow = 0;
    if (!PyLong_Check(item)) {
        if (load_struct_error() < 0) return -1;
        PyErr_Format(struct_error, "index_entries: the %s is not an integer", what);
        return -1;
    }
    long long value = PyLong_AsLongLongAndOverflow(item, &overflow);
    if (value == -1 && PyErr_Occurred()) return -1;
    if (overflow) {
        if (load_struct_error() < 0) return -1;
        PyErr_Format(struct_error, "index_entries: the %s is out of range", what);
        return -1;
    }
    *out = value;
    return 0;
}

static PyObject *index_entries(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    PyObject *keys_arg;
    long long count, slots, begin, begin_phy, used, end_phy, end_stamp;
    if (!PyArg_ParseTuple(args, "y*OLLLLLLL:index_entries", &view, &keys_arg, &count, &slots,
                          &begin, &begin_phy, &used, &end_phy, &end_stamp))
        return NULL;
    PyObject *keys = PySequence_Fast(keys_arg, "index_entries: keys are a sequence");
    PyObject *pending = NULL, *packed = NULL, *result = NULL;
    if (keys == NULL) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(keys);
    if (n > PY_SSIZE_T_MAX / IE_ENTRY) {
        PyErr_NoMemory();
        goto done;
    }
    pending = PyDict_New();
    packed = PyBytes_FromStringAndSize(NULL, n * IE_ENTRY);
    if (pending == NULL || packed == NULL) goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(packed);
    const unsigned char *buf = view.buf;
    long long number = count;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(keys, i);
        if (!PyTuple_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "index_entries: a key is not a tuple");
            goto done;
        }
        if (PyTuple_GET_SIZE(item) != 3) {
            PyErr_SetString(PyExc_ValueError, "index_entries: a key is not 3 values");
            goto done;
        }
        long long key_hash, phy, stamp;
        if (ie_item(PyTuple_GET_ITEM(item, 0), &key_hash, "key hash") < 0 ||
            ie_item(PyTuple_GET_ITEM(item, 1), &phy, "physical offset") < 0 ||
            ie_item(PyTuple_GET_ITEM(item, 2), &stamp, "store timestamp") < 0)
            goto done;
        if (slots == 0) {
            PyErr_SetString(PyExc_ZeroDivisionError, "integer modulo by zero");
            goto done;
        }
        long long slot = slots == -1 ? 0 : key_hash % slots; /* Python's floor modulo */
        if (slot != 0 && ((slot < 0) != (slots < 0))) slot += slots;
        if (slot > (LLONG_MAX - IE_HEADER) / IE_SLOT || slot < -(LLONG_MAX / 8)) {
            PyErr_SetString(PyExc_ValueError, "index_entries: a slot is outside the file");
            goto done;
        }
        long long slot_at = IE_HEADER + slot * IE_SLOT;
        PyObject *at_key = PyLong_FromLongLong(slot_at);
        if (at_key == NULL) goto done;
        PyObject *seen = PyDict_GetItemWithError(pending, at_key);
        long long previous;
        if (seen != NULL) {
            previous = PyLong_AsLongLong(seen);
        } else if (PyErr_Occurred()) {
            Py_DECREF(at_key);
            goto done;
        } else {
            if (slot_at < 0 || slot_at > (long long)view.len - IE_SLOT) {
                Py_DECREF(at_key);
                PyErr_SetString(PyExc_ValueError, "index_entries: a slot is outside the file");
                goto done;
            }
            previous = rd_i32(buf + slot_at);
            if (previous <= 0 || previous > count) previous = 0;
        }
        long long diff = 0;
        if (begin > 0 && stamp > begin) {
            diff = (stamp - begin) / 1000;
            if (diff > I32_MAX) diff = I32_MAX;
        }
        if (key_hash < I32_MIN || key_hash > I32_MAX || previous < I32_MIN ||
            previous > I32_MAX) {
            Py_DECREF(at_key);
            if (load_struct_error() == 0)
                PyErr_SetString(struct_error, "index_entries: the key hash is out of range");
            goto done;
        }
        unsigned char *e = out + i * IE_ENTRY;
        wr_u32(e, (uint32_t)key_hash);
        wr_u64(e + 4, (uint64_t)phy);
        wr_u32(e + 12, (uint32_t)diff);
        wr_u32(e + 16, (uint32_t)previous);
        PyObject *value = PyLong_FromLongLong(number);
        if (value == NULL || PyDict_SetItem(pending, at_key, value) < 0) {
            Py_XDECREF(value);
            Py_DECREF(at_key);
            goto done;
        }
        Py_DECREF(value);
        Py_DECREF(at_key);
        if (number <= 1) { /* the file's first key sets its begin (RocketMQ's) */
            begin_phy = phy;
            begin = stamp;
        }
        if (previous == 0) used++;
        end_phy = phy;
        end_stamp = stamp;
        number++;
    }
    result = Py_BuildValue("(OOLLLLLL)", packed, pending, begin, begin_phy, used, end_phy,
                           end_stamp, number);
done:
    Py_XDECREF(keys);
    Py_XDECREF(pending);
    Py_XDECREF(packed);
    PyBuffer_Release(&view);
    return result;
}
/* ---- end of index_entries() ---- */

/* ---- new_message(): the send path's Message built natively (send2) ----
 * new_message(cls, topic, body, queue_id, flag, properties, sys_flag, born_timestamp,
 * born_host, born_port, reconsume_times): an instance of cls (hanet.store.Message, a frozen
 * attrs class with slots) made as object.__new__ does, its fields set as object.__setattr__
 * sets them, prepared_transaction_offset 0: what Message(...) with those ten values
 * positionally makes (attrs has no converter or validator on them), without its __init__.
 * The reference is hanet.store._new_message.new_message_py. */
static PyObject *nm_names[11];
static PyObject *nm_zero;
static const char *const nm_spelled[11] = {
    "topic",          "body",      "queue_id",  "flag",
    "properties",     "sys_flag",  "born_timestamp", "born_host",
    "born_port",      "reconsume_times", "prepared_transaction_offset"};

static PyObject *new_message(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError,
                        "new_message(cls, topic, body, queue_id, flag, properties, sys_flag, "
                        "born_timestamp, born_host, born_port, reconsume_times)");
        return NULL;
    }
    if (!PyType_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "new_message: cls must be a type");
        return NULL;
    }
    if (nm_names[0] == NULL) {
        for (int i = 0; i < 11; i++) {
            nm_names[i] = PyUnicode_InternFromString(nm_spelled[i]);
            if (nm_names[i] == NULL) return NULL;
        }
        nm_zero = PyLong_FromLong(0);
        if (nm_zero == NULL) return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)args[0];
    if (type->tp_new != PyBaseObject_Type.tp_new || type->tp_itemsize != 0) {
        PyErr_SetString(PyExc_TypeError, "new_message: cls must be made by object.__new__");
        return NULL;
    }
    PyObject *message = type->tp_alloc(type, 0);
    if (message == NULL) return NULL;
    for (int i = 0; i < 11; i++) {
        PyObject *value = i < 10 ? args[i + 1] : nm_zero;
        if (PyObject_GenericSetAttr(message, nm_names[i], value) < 0) {
            Py_DECREF(message);
            return NULL;
        }
    }
    return message;
}
/* ---- end of new_message() ---- */

/* ---- append_entries(): a DLedger follower's APPEND entries decoded natively (dledger10) ----
 *
 *     append_entries(frame, pos, count, prev_index, prev_term, term, entry_cls)
 *       -> (entries, end) or None
 *
 * The count entries of an APPEND frame (hanet/dledger/_codec.py) from frame[pos:], each
 * i64 index | i64 term | u8 noop | u32 length | body, checked as the Python decoder checks
 * them: within the frame, the flag 0 or 1, indexes following prev_index, terms not falling
 * (from prev_term) and at most term, a body exactly for a client entry and then exactly one
 * valid record (scan_record(), body CRC included). entries: a tuple of entry_cls(index, term,
 * body, noop) (bodies copied out of the frame); end: the frame position after the last one.
 * None when any check fails (or memory runs out while checking a record): the caller decodes
 * the entries again with its Python loop, the reference, which names the reason. Every
 * length read from the frame is checked against the frame's size before it is used. */
#define AE_HEAD 21 /* q q B I */
static PyObject *append_entries(PyObject *Py_UNUSED(self), PyObject *const *args,
                                Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "append_entries() takes 7 arguments");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *entries = NULL, *result = NULL;
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    long long count = PyLong_AsLongLong(args[2]);
    long long prev_index = PyLong_AsLongLong(args[3]);
    long long last_term = PyLong_AsLongLong(args[4]);
    long long term = PyLong_AsLongLong(args[5]);
    PyObject *cls = args[6];
    if (PyErr_Occurred()) goto done;
    const unsigned char *buf = view.buf;
    int64_t n = view.len;
    /* every refusal below: None, and the Python loop names it */
    if (pos < 0 || pos > n || count < 0 || count > (n - pos) / AE_HEAD) goto refuse;
    if (prev_index < 0 || prev_index > INT64_MAX - count) goto refuse;
    entries = PyTuple_New((Py_ssize_t)count);
    if (entries == NULL) goto done;
    for (long long k = 0; k < count; k++) {
        if (n - pos < AE_HEAD) goto refuse;
        const unsigned char *head = buf + pos;
        int64_t index = rd_i64(head), entry_term = rd_i64(head + 8);
        unsigned noop = head[16];
        int64_t length = (int64_t)rd_u32(head + 17);
        pos += AE_HEAD;
        if (length > n - pos || noop > 1) goto refuse;
        if (index != prev_index + 1 + k) goto refuse;
        if (entry_term < last_term || entry_term > term) goto refuse;
        if ((noop == 1) == (length > 0)) goto refuse;
        if (length > 0) {
            scanned_record f;
            char detail[DETAIL_SIZE];
            int64_t blank = 0;
            int ok = 1;
            gil_state gil = {NULL};
            int step = scan_record(buf + pos, 0, length, length, 0, 1, 0, &gil, &ok, &f, detail,
                                   &blank);
            if (!ok) {
                PyErr_Clear(); /* the Python loop meets it again */
                goto refuse;
            }
            if (step >= 0 || f.total != length) goto refuse;
        }
        PyObject *argv[4];
        argv[0] = PyLong_FromLongLong(index);
        argv[1] = PyLong_FromLongLong(entry_term);
        argv[2] = PyBytes_FromStringAndSize((const char *)buf + pos, (Py_ssize_t)length);
        argv[3] = noop ? Py_True : Py_False;
        PyObject *entry = NULL;
        if (argv[0] != NULL && argv[1] != NULL && argv[2] != NULL)
            entry = PyObject_Vectorcall(cls, argv, 4, NULL);
        Py_XDECREF(argv[0]);
        Py_XDECREF(argv[1]);
        Py_XDECREF(argv[2]);
        if (entry == NULL) goto done;
        PyTuple_SET_ITEM(entries, (Py_ssize_t)k, entry);
        pos += length;
        last_term = entry_term;
    }
    result = Py_BuildValue("(On)", entries, pos);
    goto done;
refuse:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(entries);
    PyBuffer_Release(&view);
    return result;
}
/* ---- end of append_entries() ---- */

/* ---- pack_entries(): a DLedger log's batch of entries packed natively (dledger10) ----
 *
 *     pack_entries(entries, expected, last_term, end, file_size)
 *       -> (data, index_data, terms, positions, sizes) or None
 *
 * entries (a sequence of objects with index, term, body (bytes), noop) appended to a log whose
 * next index is expected, last term last_term and data end end, in files of file_size bytes:
 * data is the entries' bytes (hanet/dledger/_entry.py: a 48-byte header MAGIC 1 | SIZE |
 * INDEX (index - 1) | TERM | POS | 0 | 0 | BODY_CRC (zlib crc32 & 0x7FFFFFFF) | BODY_SIZE,
 * then the body), written from end; index_data their index entries (MAGIC 1 | POS | SIZE |
 * INDEX | TERM); terms, positions and sizes native int64 arrays (array("q") bytes). None when
 * the batch is not the common case this handles: an index out of sequence, a term falling or
 * out of range, a no-op with a body or a client entry without one, a body too large, or
 * entries not all fitting in end's file: the caller's Python loop (the reference) then packs
 * them, or names the error. */
#define PE_HEADER 48
#define PE_INDEX 32
static PyObject *pe_names[4]; /* index, term, body, noop */

static PyObject *pack_entries(PyObject *Py_UNUSED(self), PyObject *const *args,
                              Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "pack_entries() takes 5 arguments");
        return NULL;
    }
    if (pe_names[0] == NULL) {
        static const char *spelled[4] = {"index", "term", "body", "noop"};
        for (int i = 0; i < 4; i++) {
            pe_names[i] = PyUnicode_InternFromString(spelled[i]);
            if (pe_names[i] == NULL) return NULL;
        }
    }
    long long expected = PyLong_AsLongLong(args[1]);
    long long last_term = PyLong_AsLongLong(args[2]);
    long long end = PyLong_AsLongLong(args[3]);
    long long file_size = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred()) return NULL;
    /* a tuple of its own: Python code run by an attribute read cannot change the items */
    PyObject *seq = PySequence_Tuple(args[0]);
    if (seq == NULL) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(seq);
    PyObject **items = &PyTuple_GET_ITEM(seq, 0);
    PyObject *result = NULL, *data = NULL, *index_data = NULL, *terms = NULL, *positions = NULL,
             *sizes = NULL;
    PyObject **bodies = NULL;
    int64_t *fields = NULL; /* index, term per entry */
    if (count == 0 || end < 0 || file_size <= 0 || expected < 1) goto refuse;
    bodies = PyMem_Calloc((size_t)count, sizeof(PyObject *));
    fields = PyMem_Malloc((size_t)count * 2 * sizeof(int64_t));
    if (bodies == NULL || fields == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* every entry checked, and the batch's size summed, before anything is packed */
    int64_t total = 0;
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *entry = items[k];
        PyObject *value = PyObject_GetAttr(entry, pe_names[0]);
        if (value == NULL) goto done;
        long long index = PyLong_AsLongLong(value);
        Py_DECREF(value);
        if (index == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            goto refuse;
        }
        value = PyObject_GetAttr(entry, pe_names[1]);
        if (value == NULL) goto done;
        long long term = PyLong_AsLongLong(value);
        Py_DECREF(value);
        if (term == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            goto refuse;
        }
        PyObject *body = PyObject_GetAttr(entry, pe_names[2]);
        if (body == NULL) goto done;
        bodies[k] = body;
        if (!PyBytes_CheckExact(body)) goto refuse;
        value = PyObject_GetAttr(entry, pe_names[3]);
        if (value == NULL) goto done;
        int noop = PyObject_IsTrue(value);
        Py_DECREF(value);
        if (noop < 0) goto done;
        Py_ssize_t length = PyBytes_GET_SIZE(body);
        if (index != expected + k || term < last_term) goto refuse;
        if (noop == (length > 0)) goto refuse;
        if (length > (int64_t)INT32_MAX - PE_HEADER) goto refuse;
        last_term = term;
        fields[2 * k] = index;
        fields[2 * k + 1] = term;
        total += PE_HEADER + length;
        if (total > file_size) goto refuse;
    }
    if (end % file_size + total > file_size) goto refuse; /* crosses into the next file */
    data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    index_data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * PE_INDEX);
    terms = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * 8);
    positions = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * 8);
    sizes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * 8);
    if (data == NULL || index_data == NULL || terms == NULL || positions == NULL ||
        sizes == NULL)
        goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(data);
    unsigned char *idx = (unsigned char *)PyBytes_AS_STRING(index_data);
    int64_t *term_out = (int64_t *)PyBytes_AS_STRING(terms);
    int64_t *pos_out = (int64_t *)PyBytes_AS_STRING(positions);
    int64_t *size_out = (int64_t *)PyBytes_AS_STRING(sizes);
    int64_t pos = end;
    for (Py_ssize_t k = 0; k < count; k++) {
        const unsigned char *body = (const unsigned char *)PyBytes_AS_STRING(bodies[k]);
        Py_ssize_t length = PyBytes_GET_SIZE(bodies[k]);
        uint32_t size = (uint32_t)(PE_HEADER + length);
        int64_t index = fields[2 * k] - 1, term = fields[2 * k + 1];
        uint32_t crc = length ? (body_crc32(body, (size_t)length) & 0x7FFFFFFFu) : 0;
        put_be32(out, 1);
        put_be32(out + 4, size);
        put_be64(out + 8, (uint64_t)index);
        put_be64(out + 16, (uint64_t)term);
        put_be64(out + 24, (uint64_t)pos);
        put_be32(out + 32, 0);
        put_be32(out + 36, 0);
        put_be32(out + 40, crc);
        put_be32(out + 44, (uint32_t)length);
        if (length) memcpy(out + PE_HEADER, body, (size_t)length);
        out += size;
        put_be32(idx, 1);
        put_be64(idx + 4, (uint64_t)pos);
        put_be32(idx + 12, size);
        put_be64(idx + 16, (uint64_t)index);
        put_be64(idx + 24, (uint64_t)term);
        idx += PE_INDEX;
        term_out[k] = term;
        pos_out[k] = pos;
        size_out[k] = size;
        pos += size;
    }
    result = PyTuple_Pack(5, data, index_data, terms, positions, sizes);
    goto done;
refuse:
    result = Py_NewRef(Py_None);
done:
    if (bodies != NULL)
        for (Py_ssize_t k = 0; k < count; k++) Py_XDECREF(bodies[k]);
    PyMem_Free(bodies);
    PyMem_Free(fields);
    Py_XDECREF(data);
    Py_XDECREF(index_data);
    Py_XDECREF(terms);
    Py_XDECREF(positions);
    Py_XDECREF(sizes);
    Py_DECREF(seq);
    return result;
}
/* ---- end of pack_entries() ---- */

/* ---- view_records(): a DLedger view's batch of committed records placed natively (dledger10)
 *
 *     view_records(bodies, offset, file_size, queues, queue_start, places)
 *       -> (buf, end, placed) or None
 *
 * The commit log bytes that apply bodies (committed entries' records; an empty body, a
 * no-op, is skipped) at offset of a commit log of file_size-byte files, as the Python loop of
 * hanet.dledger._view.CommitLogView.apply (the reference) makes them: a record that does not
 * fit with a blank after it in the rest of its file is preceded by a blank record filling
 * it; each record's QUEUEOFFSET is the next of its (topic, queue id) in queues (a dict,
 * updated: the next offset of each queue met; a queue not in it starts at
 * queue_start(topic, queue_id)) and its PHYSICALOFFSET its place. buf: a bytearray; end: the
 * offset after it; placed (when places is true, else None): per body (None for a skipped one)
 * (offset, size, queue_id, queue_offset, store_timestamp, store_host, store_port). A body is
 * read as record_place() reads it; None when one is not a record or a file's end leaves less
 * than a blank record's 8 bytes (nothing in queues changed but the starts read): the
 * reference then raises. */
static PyObject *view_records(PyObject *Py_UNUSED(self), PyObject *const *args,
                              Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "view_records() takes 6 arguments");
        return NULL;
    }
    long long offset = PyLong_AsLongLong(args[1]);
    long long file_size = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred()) return NULL;
    PyObject *queues = args[3], *queue_start = args[4];
    int want = PyObject_IsTrue(args[5]);
    if (want < 0) return NULL;
    if (!PyDict_Check(queues)) {
        PyErr_SetString(PyExc_TypeError, "queues must be a dict");
        return NULL;
    }
    if (file_size <= BLANK_RECORD_SIZE || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "view_records(): a bad offset or file size");
        return NULL;
    }
    /* a tuple of its own: queue_start (Python) cannot change the bodies under it */
    PyObject *seq = PySequence_Tuple(args[0]);
    if (seq == NULL) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(seq);
    PyObject **items = &PyTuple_GET_ITEM(seq, 0);
    PyObject *result = NULL, *buf = NULL, *placed = NULL, *updates = NULL;
    PyObject *last_raw = NULL, *last_topic = NULL; /* consecutive records of one topic */
    const unsigned char *last_raw_p = NULL;
    Py_ssize_t last_raw_len = -1;
    /* first pass: every body read and sized (nothing built until all are records) */
    int64_t total = 0, at_offset = offset;
    for (Py_ssize_t k = 0; k < count; k++) {
        if (!PyBytes_Check(items[k])) goto refuse;
        Py_ssize_t len = PyBytes_GET_SIZE(items[k]);
        if (len == 0) continue;
        const unsigned char *r = (const unsigned char *)PyBytes_AS_STRING(items[k]);
        if (len < 40 || (Py_ssize_t)rd_i32(r) != len) goto refuse;
        int64_t space = file_size - at_offset % file_size;
        if (len + BLANK_RECORD_SIZE > space) {
            /* a blank record filling the rest of the file: less room than its 8 bytes is
             * a view no store leaves (the reference raises ValueError) */
            if (space < BLANK_RECORD_SIZE) goto refuse;
            total += space;
            at_offset += space;
        }
        total += len;
        at_offset += len;
    }
    buf = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (buf == NULL) goto done;
    if (want) {
        placed = PyList_New(count);
        if (placed == NULL) goto done;
    }
    updates = PyDict_New(); /* key -> next queue offset, copied into queues at the end */
    if (updates == NULL) goto done;
    unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(buf);
    for (Py_ssize_t k = 0; k < count; k++) {
        Py_ssize_t len = PyBytes_GET_SIZE(items[k]);
        if (len == 0) {
            if (want) PyList_SET_ITEM(placed, k, Py_NewRef(Py_None));
            continue;
        }
        const unsigned char *r = (const unsigned char *)PyBytes_AS_STRING(items[k]);
        /* record_place()'s reading, its checks */
        uint32_t magic = rd_u32(r + 4);
        int32_t queue_id = rd_i32(r + 12);
        int32_t sys_flag = rd_i32(r + 36);
        if (magic != MAGIC_V1 && magic != MAGIC_V2) goto refuse;
        Py_ssize_t at = 48 + ((sys_flag & BORN_V6) ? 20 : 8);
        Py_ssize_t host_len = (sys_flag & STORE_V6) ? 16 : 4;
        if (at + 8 + host_len + 4 + 4 + 8 + 4 > len) goto refuse;
        int64_t store_timestamp = rd_i64(r + at);
        at += 8;
        const unsigned char *host = r + at;
        int32_t store_port = rd_i32(r + at + host_len);
        at += host_len + 4 + 4 + 8;
        int32_t body_len = rd_i32(r + at);
        if (body_len < 0) goto refuse;
        at += 4 + (Py_ssize_t)body_len;
        Py_ssize_t topic_len;
        if (magic == MAGIC_V2) {
            if (at + 2 > len) goto refuse;
            topic_len = ((Py_ssize_t)r[at] << 8) | r[at + 1];
            at += 2;
        } else {
            if (at + 1 > len) goto refuse;
            topic_len = r[at];
            at += 1;
        }
        if (at + topic_len > len) goto refuse;
        if (last_topic == NULL || topic_len != last_raw_len ||
            memcmp(last_raw_p, r + at, (size_t)topic_len) != 0) {
            PyObject *topic = PyUnicode_DecodeUTF8((const char *)r + at, topic_len, "strict");
            if (topic == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) goto done;
                PyErr_Clear();
                goto refuse;
            }
            Py_XSETREF(last_topic, topic);
            Py_XSETREF(last_raw, Py_NewRef(items[k]));
            last_raw_p = r + at;
            last_raw_len = topic_len;
        }
        /* the blank before it */
        int64_t space = file_size - offset % file_size;
        if (len + BLANK_RECORD_SIZE > space) {
            put_be32(out, (uint32_t)space);
            put_be32(out + 4, BLANK_MAGIC);
            memset(out + BLANK_RECORD_SIZE, 0, (size_t)(space - BLANK_RECORD_SIZE));
            out += space;
            offset += space;
        }
        /* its queue offset */
        PyObject *qid = PyLong_FromLong(queue_id);
        if (qid == NULL) goto done;
        PyObject *key = PyTuple_Pack(2, last_topic, qid);
        Py_DECREF(qid);
        if (key == NULL) goto done;
        PyObject *next = PyDict_GetItemWithError(updates, key);
        if (next == NULL && !PyErr_Occurred()) next = PyDict_GetItemWithError(queues, key);
        long long queue_offset;
        if (next != NULL) {
            queue_offset = PyLong_AsLongLong(next);
        } else if (PyErr_Occurred()) {
            Py_DECREF(key);
            goto done;
        } else {
            PyObject *start = PyObject_CallFunctionObjArgs(queue_start, last_topic,
                                                           PyTuple_GET_ITEM(key, 1), NULL);
            if (start == NULL) {
                Py_DECREF(key);
                goto done;
            }
            queue_offset = PyLong_AsLongLong(start);
            Py_DECREF(start);
        }
        if (queue_offset == -1 && PyErr_Occurred()) {
            Py_DECREF(key);
            goto done;
        }
        PyObject *following = PyLong_FromLongLong(queue_offset + 1);
        int failed = following == NULL || PyDict_SetItem(updates, key, following) < 0;
        Py_XDECREF(following);
        Py_DECREF(key);
        if (failed) goto done;
        /* the record, its two offsets stamped */
        memcpy(out, r, (size_t)len);
        put_be64(out + 20, (uint64_t)queue_offset);
        put_be64(out + 28, (uint64_t)offset);
        if (want) {
            PyObject *place = Py_BuildValue("(LiiLLy#i)", (long long)offset, (int)len,
                                            (int)queue_id, queue_offset,
                                            (long long)store_timestamp, (const char *)host,
                                            host_len, (int)store_port);
            if (place == NULL) goto done;
            PyList_SET_ITEM(placed, k, place);
        }
        out += len;
        offset += len;
    }
    if (PyDict_Update(queues, updates) < 0) goto done;
    result = Py_BuildValue("(OLO)", buf, offset, want ? placed : Py_None);
    goto done;
refuse:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(buf);
    Py_XDECREF(placed);
    Py_XDECREF(updates);
    Py_XDECREF(last_raw);
    Py_XDECREF(last_topic);
    Py_DECREF(seq);
    return result;
}
/* ---- end of view_records() ---- */

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_VARARGS | METH_KEYWORDS,
     "scan(buf, start=0, end=None, base_offset=0, limit=None, check_crc=True, "
     "check_physical_offset=False)\n--\n\n"
     "Validate the records of buf[start:end] in one call; see hanet.store._index."},
    /* columns(): the Arrow column block above */
    {"scan_columns", (PyCFunction)(void (*)(void))scan_columns, METH_VARARGS | METH_KEYWORDS,
     "scan() and columns() of its rows in one pass (max_rows records at most)."},
    {"columns", (PyCFunction)(void (*)(void))columns, METH_VARARGS | METH_KEYWORDS,
     "columns(buf, rows, base_offset, names)\n--\n\n"
     "Per-column buffers of a scan's rows; see hanet.store._index.record_columns_py."},
    {"group_entries", (PyCFunction)group_entries, METH_O,
     "group_entries(rows)\n--\n\n"
     "The consume queue entries of scan rows, one packed blob per run of consecutive queue "
     "offsets of one queue; see hanet.store._index."},
    {"seal", (PyCFunction)seal, METH_VARARGS,
     "seal(buf, pos, size)\n--\n\n"
     "Fill the whole-record CRC property ending the record at buf[pos:pos + size]; see "
     "hanet.store._codec.seal_record."},
    {"populate", (PyCFunction)populate, METH_O,
     "populate(buf)\n--\n\n"
     "Fault every page of a writable mapping in for writing, with the GIL released."},
    {"java_hash", (PyCFunction)java_hash, METH_O,
     "java_hash(text)\n--\n\n"
     "Java's String.hashCode of text (unsigned 32-bit) and its length in UTF-16 units; see "
     "hanet.store._index_keys.java_hash_py."},
    /* pull_gather(): the pull block above */
    {"pull_gather", (PyCFunction)pull_gather, METH_VARARGS,
     "pull_gather(entries, log, log_base, floor, tags, budget, taken, topic, queue_id, "
     "queue_offset, damaged)\n--\n\n"
     "A pull's records from one consume queue file's entries; see hanet.broker._pull."},
    /* decode_records(): the pull answer block above */
    {"decode_records", (PyCFunction)decode_records, METH_VARARGS,
     "decode_records(buf, start, cls)\n--\n\n"
     "The valid records of buf from start as cls tuples, and where they stop; see "
     "hanet.store._decode."},
    /* key_batch(): the index keys block above */
    {"key_batch", (PyCFunction)key_batch, METH_VARARGS,
     "key_batch(buf, base, rows, indexed, skip)\n--\n\n"
     "The index keys (hash, offset, store timestamp) of a scan window's records; see "
     "hanet.store._index_file.key_batch_py."},
    /* write_record(), put_properties(): the record writing block above */
    {"write_record", (PyCFunction)(void (*)(void))write_record, METH_FASTCALL,
     "write_record(buf, pos, size, queue_id, flag, queue_offset, physical_offset, sys_flag, "
     "born_timestamp, born_host, born_port, store_timestamp, store_host, store_port, "
     "reconsume_times, prepared_transaction_offset, body, topic, properties)\n--\n\n"
     "Write and seal one V1 record at buf[pos:pos + size]; see "
     "hanet.store._writer.write_record_py."},
    {"write_record_unsealed", (PyCFunction)(void (*)(void))write_record_unsealed,
     METH_FASTCALL,
     "write_record_unsealed(buf, pos, size, queue_id, flag, queue_offset, physical_offset, "
     "sys_flag, born_timestamp, born_host, born_port, store_timestamp, store_host, store_port, "
     "reconsume_times, prepared_transaction_offset, body, topic, properties)\n--\n\n"
     "write_record() of any properties (at most 32767 bytes), not sealed. The reference is "
     "hanet.store._writer.write_record_unsealed_py."},
    {"put_properties", (PyCFunction)put_properties, METH_O,
     "put_properties(properties)\n--\n\n"
     "A put's properties field (the CRC property's reserved bytes last); see "
     "hanet.store._writer.put_properties_py."},
    /* record_place(): the DLedger view's block above */
    {"record_place", (PyCFunction)record_place, METH_O,
     "record_place(record)\n--\n\n"
     "(size, topic, queue_id, store_timestamp, store_host, store_port) of one record; see "
     "hanet.dledger._stamp.record_place."},
    /* index_entries(): the index entries block above */
    {"index_entries", (PyCFunction)index_entries, METH_VARARGS,
     "index_entries(buf, keys, count, slots, begin, begin_phy, used, end_phy, end_stamp)\n--\n\n"
     "An index file's entries and slots for a batch of keys; see "
     "hanet.store._index_file.index_entries_py."},
    /* new_message(): the send path's Message block above (send2) */
    {"new_message", (PyCFunction)(void (*)(void))new_message, METH_FASTCALL,
     "new_message(cls, topic, body, queue_id, flag, properties, sys_flag, born_timestamp, "
     "born_host, born_port, reconsume_times)\n--\n\n"
     "A Message built without its __init__; see hanet.store._new_message.new_message_py."},
    /* append_entries(): a DLedger follower's APPEND decoder block above (dledger10) */
    {"append_entries", (PyCFunction)(void (*)(void))append_entries, METH_FASTCALL,
     "append_entries(frame, pos, count, prev_index, prev_term, term, entry_cls)\n--\n\n"
     "The checked entries of a DLedger APPEND frame and where they end, or None (the Python "
     "loop names the reason); see hanet.dledger._codec.append_entries_py."},
    /* pack_entries(): a DLedger log's batch packing block above (dledger10) */
    {"pack_entries", (PyCFunction)(void (*)(void))pack_entries, METH_FASTCALL,
     "pack_entries(entries, expected, last_term, end, file_size)\n--\n\n"
     "A DLedger log's batch of entries packed (data, index, terms, positions, sizes), or None "
     "(the Python loop packs it); see hanet.dledger._filelog.FileLog.append."},
    /* view_records(): a DLedger view's batch placing block above (dledger10) */
    {"view_records", (PyCFunction)(void (*)(void))view_records, METH_FASTCALL,
     "view_records(bodies, offset, file_size, queues, queue_start, places)\n--\n\n"
     "A DLedger view's committed records placed and stamped in one buffer (buf, end, placed), "
     "or None (the Python loop names the record it refuses); see "
     "hanet.dledger._view.view_records_py."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "hanet.store._speedups",
    "Native record scanner (the reference is hanet.store._scanner.RecordScanner).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    crc_table_init();
#ifdef HAVE_CLMUL_CRC
    unsigned int a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) have_clmul = (c & bit_PCLMUL) && (c & bit_SSE4_1);
    if (getenv("HANET_NO_CLMUL")) have_clmul = 0;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "CLMUL_CRC",
#ifdef HAVE_CLMUL_CRC
                                have_clmul
#else
                                0
#endif
                                ) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "ROW_SIZE", ROW_SIZE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
