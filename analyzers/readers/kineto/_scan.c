/* A chunk of a Kineto trace's event array (``[event, ...]``) -> columns of the events tracekit keeps.
 *
 * The fast path of ``part.py``: where msgspec builds a Python object per event (11M of them in a 1M-kernel trace)
 * and Python then sorts them into kinds, this scans the JSON text once and writes the fields the frames use
 * straight into arrays: the event's category (an index into the categories the caller keeps), ``ph``, ``name``
 * (an index into a table of distinct strings), ``pid`` / ``tid``, ``ts`` / ``dur`` as integer ns, the byte span
 * of ``args`` and, from ``args``, the fields the caller names. ``native.py`` turns the arrays into the same
 * ``Part`` that ``part.make_part`` builds.
 *
 * It decides nothing it is not sure of: anything outside the plain form Kineto writes (a value that is not
 * JSON, a key with an escape, a repeated field, an integer past 64 bits, a time in exponent notation or as a
 * string, an event that is not an object, bytes that are not UTF-8 ...) makes ``scan`` return None, and the
 * caller decodes the chunk the general way (``decode.py``), whose results this must equal (tests/readers/
 * test_kineto_native.py). So being stricter than msgspec is always safe; being looser never is.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MAX_CATS 64
#define MAX_KEYS 32
#define MAX_DEPTH 256

typedef struct {
    unsigned char *p;
    size_t n, cap, size;
} Col;

/* A new zeroed element at the end of ``c``, or NULL when out of memory. */
static void *col_add(Col *c) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 4096;
        unsigned char *p = realloc(c->p, cap * c->size);
        if (!p) return NULL;
        c->p = p;
        c->cap = cap;
    }
    void *at = c->p + c->n++ * c->size;
    memset(at, 0, c->size);
    return at;
}

static int col_push(Col *c, const void *v) {
    void *at = col_add(c);
    if (!at) return -1;
    memcpy(at, v, c->size);
    return 0;
}

/* -- the table of distinct strings (names, string pids / tids) -------------------------------------------- */
typedef struct {
    const unsigned char *s;
    size_t len;
} Entry;

typedef struct {
    uint64_t hash;
    int32_t code; /* 1-based; 0: an empty slot */
} Slot;

typedef struct {
    Slot *slots;
    size_t cap, n;
    Col entries; /* code - 1 -> its bytes */
    const unsigned char **owned; /* unescaped copies, freed at the end */
    size_t n_owned, cap_owned;
} Table;

static uint64_t hash_bytes(const unsigned char *s, size_t n) {
    uint64_t h = 1469598103934665603ULL ^ n, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ s[i]) * 1099511628211ULL;
    return h ^ (h >> 32);
}

static int table_grow(Table *t) {
    size_t cap = t->cap ? t->cap * 2 : 1024;
    Slot *slots = calloc(cap, sizeof(Slot));
    if (!slots) return -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->slots[i].code) continue;
        size_t j = t->slots[i].hash & (cap - 1);
        while (slots[j].code) j = (j + 1) & (cap - 1);
        slots[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

/* The 0-based code of string ``s``, adding it if new; -1 when out of memory. ``owned``: s is a heap copy the table
 * takes over (else it outlives the table). */
static int32_t table_code(Table *t, const unsigned char *s, size_t len, int owned) {
    if ((t->n + 1) * 2 > t->cap && table_grow(t) < 0) return -1;
    uint64_t h = hash_bytes(s, len);
    size_t j = h & (t->cap - 1);
    Entry *entries = (Entry *)t->entries.p;
    while (t->slots[j].code) {
        Slot *o = &t->slots[j];
        Entry *e = &entries[o->code - 1];
        if (o->hash == h && e->len == len && memcmp(e->s, s, len) == 0) {
            if (owned) free((void *)s);
            return o->code - 1;
        }
        j = (j + 1) & (t->cap - 1);
    }
    if (owned) {
        if (t->n_owned == t->cap_owned) {
            size_t cap = t->cap_owned ? t->cap_owned * 2 : 64;
            const unsigned char **p = realloc(t->owned, cap * sizeof(*p));
            if (!p) return -1;
            t->owned = p;
            t->cap_owned = cap;
        }
        t->owned[t->n_owned++] = s;
    }
    Entry e = {s, len};
    if (col_push(&t->entries, &e) < 0) return -1;
    t->n++;
    t->slots[j].hash = h;
    t->slots[j].code = (int32_t)t->n;
    return (int32_t)t->n - 1;
}

static void table_free(Table *t) {
    for (size_t i = 0; i < t->n_owned; i++) free((void *)t->owned[i]);
    free(t->owned);
    free(t->slots);
    free(t->entries.p);
}

/* One UTF-8 sequence at p (first byte >= 0x80): its length, or 0 if it is not valid UTF-8. */
static int utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    if (c >= 0xC2 && c <= 0xDF) return (end - p >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (end - p < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0; /* overlong */
        if (c == 0xED && p[1] >= 0xA0) return 0; /* a surrogate */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (end - p < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0;
        if (c == 0xF4 && p[1] >= 0x90) return 0;
        return 4;
    }
    return 0;
}

/* -- output memory kept from one scan to the next --------------------------------------------------------------
 * A chunk's record arrays are tens of MB. Fresh from malloc, every page of them is faulted in and zeroed by the
 * kernel as it is first written, and copying them into bytes did it twice: on a 1M-kernel trace that was a third
 * of the whole import's page faults. So a scan takes its arrays from a small pool and hands them to Python as
 * ``Block`` objects (a buffer, no copy); a block's memory goes back to the pool when its last view goes, and
 * ``release()`` frees the pool at the end of a read. The pool is only touched with the GIL held. */
#define POOL 8
static struct {
    void *p;
    size_t cap;
} pool[POOL];
static int pool_n;

/* A buffer of at least ``want`` bytes (its size in *cap), or NULL when out of memory. */
static void *pool_take(size_t want, size_t *cap) {
    int best = -1;
    for (int i = 0; i < pool_n; i++)
        if (pool[i].cap >= want && (best < 0 || pool[i].cap < pool[best].cap)) best = i;
    if (best >= 0) {
        void *p = pool[best].p;
        *cap = pool[best].cap;
        pool[best] = pool[--pool_n];
        return p;
    }
    void *p = malloc(want);
    *cap = p ? want : 0;
    return p;
}

static void pool_give(void *p, size_t cap) {
    if (!p) return;
    int smallest = -1;
    for (int i = 0; i < pool_n; i++)
        if (smallest < 0 || pool[i].cap < pool[smallest].cap) smallest = i;
    if (pool_n < POOL) {
        pool[pool_n].p = p;
        pool[pool_n++].cap = cap;
    } else if (pool[smallest].cap < cap) { /* full: keep the larger buffers */
        free(pool[smallest].p);
        pool[smallest].p = p;
        pool[smallest].cap = cap;
    } else {
        free(p);
    }
}

typedef struct {
    PyObject_HEAD void *p;
    size_t len, cap;
} Block;

static int block_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Block *b = (Block *)self;
    return PyBuffer_FillInfo(view, self, b->p, (Py_ssize_t)b->len, 1, flags);
}

static void block_dealloc(PyObject *self) {
    Block *b = (Block *)self;
    pool_give(b->p, b->cap);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs BLOCK_BUFFER = {block_getbuffer, NULL};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_scan.Block",
    .tp_basicsize = sizeof(Block),
    .tp_dealloc = block_dealloc,
    .tp_as_buffer = &BLOCK_BUFFER,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A scan's record array (read-only buffer); its memory goes back to the scanner's pool when freed.",
};

/* ``c``'s records as a Block under ``key`` of ``d``; the block owns the memory from here (c->p is NULL after). */
static int put_col(PyObject *d, const char *key, Col *c) {
    Block *b = PyObject_New(Block, &BlockType);
    if (!b) return -1;
    b->p = c->p;
    b->len = c->n * c->size;
    b->cap = c->cap * c->size;
    c->p = NULL;
    c->cap = c->n = 0;
    int r = PyDict_SetItemString(d, key, (PyObject *)b);
    Py_DECREF(b);
    return r;
}

/* -- the scanner ------------------------------------------------------------------------------------------- */
typedef struct {
    const unsigned char *start, *p, *end;
    int bail; /* 1: not the plain form this scanner is sure of: the caller takes the general way */
} Scan;

static unsigned char PLAIN[256]; /* 1: a byte that ends a fast run inside a string */


static unsigned char BLANK[256]; /* 1: JSON whitespace */

static inline void skip_ws(Scan *s) {
    const unsigned char *p = s->p, *end = s->end; /* locals: writes through byte pointers may alias s->p */
    if (p < end && *p > ' ') return;
    if (end - p >= 2 && p[0] == ' ' && p[1] > ' ') { /* one space: after most colons and commas */
        s->p = p + 1;
        return;
    }
    while (p < end && BLANK[*p]) p++;
    s->p = p;
}

static inline int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex4(const unsigned char *p, const unsigned char *end) {
    if (end - p < 4) return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* A string at s->p (on its opening quote): sets [*a, *b) to its raw body and *esc to whether it holds escapes;
 * validates escapes and UTF-8. */
static int scan_string(Scan *s, const unsigned char **a, const unsigned char **b, int *esc) {
    const unsigned char *p = s->p + 1, *end = s->end;
    *a = p;
    *esc = 0;
    for (;;) {
#ifdef __SSE2__
        /* sixteen bytes at a time: to the first quote, backslash, control byte or byte past ASCII (a signed
         * compare below 0x20 takes both of the last two) */
        const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\'), low = _mm_set1_epi8(0x20);
        while (end - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            int hit = _mm_movemask_epi8(
                _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash)), _mm_cmplt_epi8(v, low)));
            if (hit) {
                p += __builtin_ctz((unsigned)hit);
                break;
            }
            p += 16;
        }
#endif
        /* eight bytes at a time while none is a quote, a backslash, a control byte or past ASCII */
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            uint64_t q = w ^ 0x2222222222222222ULL, bs = w ^ 0x5C5C5C5C5C5C5C5CULL;
            uint64_t hit = ((q - 0x0101010101010101ULL) & ~q) | ((bs - 0x0101010101010101ULL) & ~bs) |
                           ((w - 0x2020202020202020ULL) & ~w) | w;
            if (hit & 0x8080808080808080ULL) break;
            p += 8;
        }
        while (p < end && !PLAIN[*p]) p++;
        if (p >= end) return s->bail = 1, -1;
        unsigned char c = *p;
        if (c == '"') break;
        if (c == '\\') {
            *esc = 1;
            if (p + 1 >= end) return s->bail = 1, -1;
            unsigned char e = p[1];
            if (e == 'u') {
                int v = read_hex4(p + 2, end);
                if (v < 0) return s->bail = 1, -1;
                p += 6;
                if (v >= 0xD800 && v <= 0xDBFF) { /* a high surrogate must pair with a low one */
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u') return s->bail = 1, -1;
                    int w = read_hex4(p + 2, end);
                    if (w < 0xDC00 || w > 0xDFFF) return s->bail = 1, -1;
                    p += 6;
                } else if (v >= 0xDC00 && v <= 0xDFFF) {
                    return s->bail = 1, -1;
                }
                continue;
            }
            if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                p += 2;
                continue;
            }
            return s->bail = 1, -1;
        }
        if (c < 0x20) return s->bail = 1, -1;
        int n = utf8_len(p, end);
        if (!n) return s->bail = 1, -1;
        p += n;
    }
    *b = p;
    s->p = p + 1;
    return 0;
}

/* The unescaped bytes of a string body with escapes (a heap copy; *len set), or NULL. */
static unsigned char *unescape(const unsigned char *a, const unsigned char *b, size_t *len) {
    unsigned char *out = malloc((size_t)(b - a) + 1), *o = out;
    if (!out) return NULL;
    const unsigned char *p = a;
    while (p < b) {
        if (*p != '\\') {
            *o++ = *p++;
            continue;
        }
        unsigned char e = p[1];
        p += 2;
        switch (e) {
            case 'b': *o++ = '\b'; break;
            case 'f': *o++ = '\f'; break;
            case 'n': *o++ = '\n'; break;
            case 'r': *o++ = '\r'; break;
            case 't': *o++ = '\t'; break;
            case 'u': {
                uint32_t v = (uint32_t)read_hex4(p, b);
                p += 4;
                if (v >= 0xD800 && v <= 0xDBFF) {
                    uint32_t w = (uint32_t)read_hex4(p + 2, b);
                    p += 6;
                    v = 0x10000 + ((v - 0xD800) << 10) + (w - 0xDC00);
                }
                if (v < 0x80) {
                    *o++ = (unsigned char)v;
                } else if (v < 0x800) {
                    *o++ = (unsigned char)(0xC0 | (v >> 6));
                    *o++ = (unsigned char)(0x80 | (v & 0x3F));
                } else if (v < 0x10000) {
                    *o++ = (unsigned char)(0xE0 | (v >> 12));
                    *o++ = (unsigned char)(0x80 | ((v >> 6) & 0x3F));
                    *o++ = (unsigned char)(0x80 | (v & 0x3F));
                } else {
                    *o++ = (unsigned char)(0xF0 | (v >> 18));
                    *o++ = (unsigned char)(0x80 | ((v >> 12) & 0x3F));
                    *o++ = (unsigned char)(0x80 | ((v >> 6) & 0x3F));
                    *o++ = (unsigned char)(0x80 | (v & 0x3F));
                }
                break;
            }
            default: *o++ = e; /* " \ / */
        }
    }
    *len = (size_t)(o - out);
    return out;
}

/* A number at s->p: its token [*a, *b); *is_int when it has no fraction and no exponent. */
static int scan_number(Scan *s, const unsigned char **a, const unsigned char **b, int *is_int) {
    const unsigned char *p = s->p, *end = s->end;
    *a = p;
    *is_int = 1;
    if (p < end && *p == '-') p++;
    if (p >= end || *p < '0' || *p > '9') return s->bail = 1, -1;
    if (*p == '0') {
        p++;
    } else {
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && *p == '.') {
        *is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return s->bail = 1, -1;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return s->bail = 1, -1;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    *b = p;
    s->p = p;
    return 0;
}

/* An integer token -> int64; bails past an int64 (msgspec keeps such a number; the general way decides). */
static int int_value(Scan *s, const unsigned char *a, const unsigned char *b, int64_t *out) {
    int neg = *a == '-';
    if (neg) a++;
    if (b - a > 19) return s->bail = 1, -1; /* 19 digits fit a uint64 (< 1.8e19) */
    uint64_t v = 0;
    for (; a < b; a++) v = v * 10 + (uint64_t)(*a - '0');
    if ((!neg && v > (uint64_t)INT64_MAX) || (neg && v > (uint64_t)INT64_MAX + 1)) return s->bail = 1, -1;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* A number token -> double (strtod is correctly rounded); bails on an infinite result. */
static int float_value(Scan *s, const unsigned char *a, const unsigned char *b, double *out) {
    char tmp[64];
    size_t n = (size_t)(b - a);
    if (n >= sizeof tmp) return s->bail = 1, -1;
    memcpy(tmp, a, n);
    tmp[n] = 0;
    double v = strtod(tmp, NULL);
    if (v > 1.7976931348623157e308 || v < -1.7976931348623157e308) return s->bail = 1, -1;
    *out = v;
    return 0;
}

/* Microseconds as Kineto writes them -> ns, exactly as part.times_ns reads the text: digits past the third
 * decimal round half up on the fourth; null (*ok = 0) past an Int64. Bails on exponent notation and on more than
 * 18 whole digits (the general way reads those). */
static int time_ns(Scan *s, const unsigned char *a, const unsigned char *b, int64_t *out, uint8_t *ok) {
    int neg = *a == '-';
    const unsigned char *p = a + neg;
    __int128 whole = 0;
    int digits = 0;
    while (p < b && *p >= '0' && *p <= '9') {
        whole = whole * 10 + (*p++ - '0');
        digits++;
    }
    if (digits > 18) return s->bail = 1, -1;
    int64_t frac = 0;
    int round_up = 0;
    if (p < b && *p == '.') {
        p++;
        int i = 0;
        while (p < b && *p >= '0' && *p <= '9') {
            if (i < 3) frac = frac * 10 + (*p - '0');
            else if (i == 3) round_up = *p >= '5';
            i++;
            p++;
        }
        for (; i < 3; i++) frac *= 10;
    }
    if (p != b) return s->bail = 1, -1; /* an exponent */
    __int128 v = whole * 1000 + frac + round_up;
    if (neg) v = -v;
    if (v > INT64_MAX || v < INT64_MIN) {
        *ok = 0;
        *out = 0;
    } else {
        *ok = 1;
        *out = (int64_t)v;
    }
    return 0;
}

static int skip_value(Scan *s, int depth);

/* A container at s->p (``{`` or ``[``) opened: 1 if it is empty (then closed too), 0 if members follow. */
static inline int open_container(Scan *s) {
    unsigned char close = *s->p == '{' ? '}' : ']';
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 1;
    }
    return 0;
}

/* An object member's key at s->p, its colon and the blanks after: the key's raw body in [*a, *b). */
static inline int member_key(Scan *s, const unsigned char **a, const unsigned char **b, int *esc) {
    if (s->p >= s->end || *s->p != '"' || scan_string(s, a, b, esc) < 0) return s->bail = 1, -1;
    skip_ws(s);
    if (s->p >= s->end || *s->p != ':') return s->bail = 1, -1;
    s->p++;
    skip_ws(s);
    if (s->p >= s->end) return s->bail = 1, -1;
    return 0;
}

/* After a member's value: 1 at a comma (taken, with the blanks after: a member follows), 0 at ``close`` (taken:
 * the container ends), -1 at anything else. */
static inline int next_member(Scan *s, unsigned char close) {
    skip_ws(s);
    if (s->p < s->end && *s->p == ',') {
        s->p++;
        skip_ws(s);
        return 1;
    }
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 0;
    }
    return s->bail = 1, -1;
}

static int skip_container(Scan *s, int depth) {
    unsigned char close = *s->p == '{' ? '}' : ']';
    int object = *s->p == '{', more;
    if (depth > MAX_DEPTH) return s->bail = 1, -1;
    if (open_container(s)) return 0;
    for (;;) {
        const unsigned char *a, *b;
        int esc;
        if (object && member_key(s, &a, &b, &esc) < 0) return -1;
        if (skip_value(s, depth + 1) < 0) return -1;
        if ((more = next_member(s, close)) <= 0) return more;
    }
}

static int match_lit(Scan *s, const char *lit, size_t n) {
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, lit, n) != 0) return s->bail = 1, -1;
    s->p += n;
    return 0;
}

static int skip_value(Scan *s, int depth) {
    if (s->p >= s->end) return s->bail = 1, -1;
    unsigned char c = *s->p;
    const unsigned char *a, *b;
    int flag;
    switch (c) {
        case '"': return scan_string(s, &a, &b, &flag);
        case '{':
        case '[': return skip_container(s, depth);
        case 't': return match_lit(s, "true", 4);
        case 'f': return match_lit(s, "false", 5);
        case 'n': return match_lit(s, "null", 4);
        default: return scan_number(s, &a, &b, &flag);
    }
}

/* -- what one event holds ----------------------------------------------------------------------------------- */
enum { T_NONE = 0, T_INT = 1, T_FLOAT = 2, T_LIST3 = 3, T_OTHER = 4, T_STR = 5 };

typedef struct {
    int seen;
    uint8_t type; /* T_NONE (missing or null), T_INT, T_STR, T_OTHER */
    int64_t ival;
    const unsigned char *a, *b; /* string body, or a number token */
    int esc;
} Field;

typedef struct {
    PyObject *cats;
    Py_ssize_t n_cats;
    const char *cat_s[MAX_CATS];
    Py_ssize_t cat_n[MAX_CATS];
    int cat_args[MAX_CATS]; /* the category's events get an args record */
    Py_ssize_t n_keys;
    const char *key_s[MAX_KEYS];
    Py_ssize_t key_n[MAX_KEYS];
    int key_dims[MAX_KEYS];
    Py_ssize_t n_dims, dim_at[MAX_KEYS]; /* the keys holding [x, y, z]: their place among those */
    /* output: one record per kept event, and one of its args fields (layout: ``arg_layout``) */
    Col rec, arg;
    size_t off_f, off_d, off_t, off_dt;
    Table strings;
    Py_ssize_t count;
} Out;

static int string_code(Out *o, Scan *s, const unsigned char *a, const unsigned char *b, int esc, int32_t *code) {
    int32_t c;
    if (esc) {
        size_t len;
        unsigned char *u = unescape(a, b, &len);
        if (!u) return s->bail = 1, -1;
        c = table_code(&o->strings, u, len, 1);
    } else {
        c = table_code(&o->strings, a, (size_t)(b - a), 0);
    }
    if (c < 0) return s->bail = 1, -1;
    *code = c;
    return 0;
}

static int id_field(Scan *s, Field *f) {
    unsigned char c = *s->p;
    int flag;
    if (c == '"') {
        f->type = T_STR;
        return scan_string(s, &f->a, &f->b, &f->esc);
    }
    if (c == 'n') {
        f->type = T_NONE;
        return match_lit(s, "null", 4);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        if (scan_number(s, &f->a, &f->b, &flag) < 0) return -1;
        if (!flag) {
            f->type = T_OTHER;
            return 0;
        }
        f->type = T_INT;
        return int_value(s, f->a, f->b, &f->ival);
    }
    f->type = T_OTHER;
    return skip_value(s, 1);
}

static int time_field(Scan *s, Field *f) {
    int flag;
    if (*s->p == 'n') {
        f->type = T_NONE;
        return match_lit(s, "null", 4);
    }
    if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9')) {
        f->type = T_INT;
        return scan_number(s, &f->a, &f->b, &flag);
    }
    return s->bail = 1, -1; /* a string or other value: the general way reads it */
}

typedef struct {
    int64_t pid, tid, ts, dur, args_off, args_len;
    int32_t name;   /* an index into the strings; -1: not a string */
    int32_t arg_at; /* the event's args record; -1: its category wants none */
    uint8_t cat, ph, pid_t, tid_t, ts_ok, dur_ok, pad[2];
} Rec;

/* The args record: int64 i[n_keys], double f[n_keys], int64 d[n_dims * 3], uint8 t[n_keys], uint8 dt[n_dims * 3],
 * padded to 8 bytes. */
static void arg_layout(Out *o) {
    o->off_f = 8 * (size_t)o->n_keys;
    o->off_d = o->off_f + 8 * (size_t)o->n_keys;
    o->off_t = o->off_d + 24 * (size_t)o->n_dims;
    o->off_dt = o->off_t + (size_t)o->n_keys;
    o->arg.size = (o->off_dt + 3 * (size_t)o->n_dims + 7) & ~(size_t)7;
    if (!o->arg.size) o->arg.size = 8;
}

/* ``args`` of a kept event, at in->p (its value, any JSON): the caller's keys, each as a type and an int or a
 * float (and, for keys holding [x, y, z], the three ints), written into a new args record. Validates what it
 * reads and leaves in->p after the value. */
static int read_args(Out *o, Scan *in) {
    unsigned char *r = col_add(&o->arg);
    if (!r) return in->bail = 1, -1;
    int64_t *ri = (int64_t *)r, *rd = (int64_t *)(r + o->off_d);
    double *rf = (double *)(r + o->off_f);
    uint8_t *rt = r + o->off_t, *rdt = r + o->off_dt;
    uint64_t seen = 0;
    if (*in->p != '{') return skip_value(in, 1); /* not an object: every field null */
    if (open_container(in)) return 0;
    for (;;) {
        const unsigned char *ka, *kb;
        int esc, flag, more;
        if (member_key(in, &ka, &kb, &esc) < 0) return -1;
        if (esc) return in->bail = 1, -1;
        int k = -1;
        for (Py_ssize_t j = 0; j < o->n_keys; j++) {
            if (o->key_n[j] == kb - ka && memcmp(o->key_s[j], ka, (size_t)(kb - ka)) == 0) {
                k = (int)j;
                break;
            }
        }
        unsigned char c = *in->p;
        if (k >= 0) {
            if (seen & (1ULL << k)) return in->bail = 1, -1; /* a repeated key */
            seen |= 1ULL << k;
        }
        if (k >= 0 && (c == '-' || (c >= '0' && c <= '9'))) {
            const unsigned char *na, *nb;
            if (scan_number(in, &na, &nb, &flag) < 0) return -1;
            if (flag) {
                rt[k] = T_INT;
                if (int_value(in, na, nb, &ri[k]) < 0) return -1;
            } else {
                rt[k] = T_FLOAT;
                if (float_value(in, na, nb, &rf[k]) < 0) return -1;
            }
        } else if (k >= 0 && c == '[' && o->key_dims[k]) { /* [x, y, z]: each an int or not */
            int64_t dv[3] = {0, 0, 0};
            uint8_t dt[3] = {0, 0, 0};
            int n = 0;
            if (!open_container(in)) {
                for (;;) {
                    if (in->p >= in->end) return in->bail = 1, -1;
                    c = *in->p;
                    if (c == '-' || (c >= '0' && c <= '9')) {
                        const unsigned char *na, *nb;
                        if (scan_number(in, &na, &nb, &flag) < 0) return -1;
                        if (flag && n < 3) {
                            if (int_value(in, na, nb, &dv[n]) < 0) return -1;
                            dt[n] = 1;
                        }
                    } else if (skip_value(in, 3) < 0) {
                        return -1;
                    }
                    n++;
                    if ((more = next_member(in, ']')) < 0) return -1;
                    if (!more) break;
                }
            }
            rt[k] = n == 3 ? T_LIST3 : T_OTHER;
            if (n == 3) {
                int at = (int)o->dim_at[k] * 3;
                for (int d = 0; d < 3; d++) {
                    rd[at + d] = dv[d];
                    rdt[at + d] = dt[d];
                }
            }
        } else {
            if (k >= 0) rt[k] = *in->p == '[' ? T_OTHER : T_NONE;
            if (skip_value(in, 2) < 0) return -1;
        }
        if ((more = next_member(in, '}')) <= 0) return more;
    }
}

static int put_id(Out *o, Scan *s, uint8_t *type, int64_t *value, Field *f) {
    *type = f->type;
    if (f->type == T_INT) *value = f->ival;
    if (f->type == T_STR) {
        int32_t code;
        if (string_code(o, s, f->a, f->b, f->esc, &code) < 0) return -1;
        *value = code;
    }
    return 0;
}

static int put_time(Scan *s, int64_t *value, uint8_t *ok, Field *f) {
    if (f->type == T_INT) return time_ns(s, f->a, f->b, value, ok);
    return 0;
}

/* The index of a category among the kept ones; -1 if it is not kept (or not a string), -2 if it holds an escape
 * (the general way reads it). */
static int cat_index(Out *o, Field *cat) {
    if (cat->type != T_STR) return -1;
    if (cat->esc) return -2;
    for (Py_ssize_t j = 0; j < o->n_cats; j++) {
        if (o->cat_n[j] == cat->b - cat->a && memcmp(o->cat_s[j], cat->a, (size_t)(cat->b - cat->a)) == 0) {
            return (int)j;
        }
    }
    return -1;
}

#define KEY(lit) (kb - ka == (Py_ssize_t)sizeof(lit) - 1 && memcmp(ka, lit, sizeof(lit) - 1) == 0)

static int scan_event(Out *o, Scan *s) {
    Field ph, cat, name, pid, tid, ts, dur, args;
    Field *all[] = {&ph, &cat, &name, &pid, &tid, &ts, &dur, &args};
    for (int i = 0; i < 8; i++) all[i]->seen = 0, all[i]->type = T_NONE, all[i]->esc = 0;
    int c = -1;        /* the category's index among the kept ones, once known */
    int args_read = 0; /* args already read into a record (the category came first and is kept) */
    size_t recs = o->arg.n;
    if (*s->p != '{') return s->bail = 1, -1; /* not an object: the general way counts it */
    if (open_container(s)) goto done;
    for (;;) {
        const unsigned char *ka, *kb;
        int esc, more;
        if (member_key(s, &ka, &kb, &esc) < 0) return -1;
        if (esc) return s->bail = 1, -1;
        Field *f = NULL;
        int kind = 0; /* 1 string-or-other, 2 id, 3 time, 4 args */
        if (KEY("ph")) f = &ph, kind = 1;
        else if (KEY("cat")) f = &cat, kind = 1;
        else if (KEY("name")) f = &name, kind = 1;
        else if (KEY("pid")) f = &pid, kind = 2;
        else if (KEY("tid")) f = &tid, kind = 2;
        else if (KEY("ts")) f = &ts, kind = 3;
        else if (KEY("dur")) f = &dur, kind = 3;
        else if (KEY("args")) f = &args, kind = 4;
        if (f) {
            if (f->seen++) return s->bail = 1, -1; /* a repeated field */
            if (kind == 1) {
                if (*s->p == '"') {
                    f->type = T_STR;
                    if (scan_string(s, &f->a, &f->b, &f->esc) < 0) return -1;
                } else if (*s->p == 'n') {
                    f->type = T_NONE;
                    if (match_lit(s, "null", 4) < 0) return -1;
                } else {
                    f->type = T_OTHER;
                    if (skip_value(s, 1) < 0) return -1;
                }
            } else if (kind == 2) {
                if (id_field(s, f) < 0) return -1;
            } else if (kind == 3) {
                if (time_field(s, f) < 0) return -1;
            } else {
                f->a = s->p;
                f->type = *s->p == '{' ? T_OTHER : T_NONE;
                if (cat.seen && (c = cat_index(o, &cat)) >= 0 && o->cat_args[c]) {
                    if (read_args(o, s) < 0) return -1;
                    args_read = 1;
                } else if (skip_value(s, 1) < 0) {
                    return -1;
                }
                f->b = s->p;
            }
        } else if (skip_value(s, 1) < 0) {
            return -1;
        }
        if ((more = next_member(s, '}')) < 0) return -1;
        if (!more) break;
    }
done:
    o->count++;
    c = cat_index(o, &cat);
    if (c == -2) return s->bail = 1, -1;
    if (c < 0) return 0; /* (args are read early only for a kept category, which a repeat cannot change) */
    if (ph.type == T_STR && ph.esc) return s->bail = 1, -1;
    /* ph: 0 None (missing or null), 1 "X", 2 anything else */
    int phc = ph.type == T_NONE ? 0 : (ph.type == T_STR && ph.b - ph.a == 1 && *ph.a == 'X') ? 1 : 2;
    int32_t nc = -1;
    if (name.type == T_STR && string_code(o, s, name.a, name.b, name.esc, &nc) < 0) return -1;
    Rec *r = col_add(&o->rec);
    if (!r) return s->bail = 1, -1;
    r->cat = (uint8_t)c;
    r->ph = (uint8_t)phc;
    r->name = nc;
    r->arg_at = o->cat_args[c] ? (int32_t)(args_read ? recs : o->arg.n) : -1;
    r->args_off = args.seen ? (int64_t)(args.a - s->start) : -1;
    r->args_len = args.seen ? (int64_t)(args.b - args.a) : 0;
    if (put_id(o, s, &r->pid_t, &r->pid, &pid) < 0 || put_id(o, s, &r->tid_t, &r->tid, &tid) < 0) return -1;
    if (put_time(s, &r->ts, &r->ts_ok, &ts) < 0 || put_time(s, &r->dur, &r->dur_ok, &dur) < 0) return -1;
    if (args_read || !o->cat_args[c]) return 0;
    if (!args.seen) return col_add(&o->arg) ? 0 : (s->bail = 1, -1); /* no args: every field null */
    Scan in = {s->start, args.a, args.b, 0}; /* args came before the category: read them now */
    if (read_args(o, &in) < 0) return s->bail = 1, -1;
    return 0;
}

/* The event array at s->p: ``[event, ...]``. */
static int scan_array(Out *o, Scan *s) {
    int more;
    if (s->p >= s->end || *s->p != '[') return s->bail = 1, -1;
    if (open_container(s)) return 0;
    for (;;) {
        if (s->p >= s->end || scan_event(o, s) < 0) return s->bail = 1, -1;
        if ((more = next_member(s, ']')) <= 0) return more;
    }
}

#define N_META 3
static const char *META_KEYS[N_META] = {"deviceProperties", "distributedInfo", "baseTimeNanoseconds"};

/* A trace object ``{"traceEvents": [...], ...}``: its events, and the spans of the metadata values ``decode.py``
 * reads (``meta``: offset and length of each, -1 where absent). */
static int scan_object(Out *o, Scan *s, int64_t meta[N_META][2]) {
    int events = 0, more;
    if (s->p >= s->end || *s->p != '{') return s->bail = 1, -1;
    if (open_container(s)) return s->bail = 1, -1; /* no events: the general way says so */
    for (;;) {
        const unsigned char *ka, *kb;
        int esc;
        if (member_key(s, &ka, &kb, &esc) < 0 || esc) return s->bail = 1, -1;
        if (KEY("traceEvents")) {
            if (events++ || scan_array(o, s) < 0) return s->bail = 1, -1;
        } else {
            int m = -1;
            for (int j = 0; j < N_META; j++)
                if (kb - ka == (Py_ssize_t)strlen(META_KEYS[j]) && memcmp(ka, META_KEYS[j], (size_t)(kb - ka)) == 0)
                    m = j;
            if (m >= 0 && meta[m][0] >= 0) return s->bail = 1, -1; /* a repeated key */
            const unsigned char *a = s->p;
            if (skip_value(s, 1) < 0) return -1;
            if (m >= 0) {
                meta[m][0] = (int64_t)(a - s->start);
                meta[m][1] = (int64_t)(s->p - a);
            }
        }
        if ((more = next_member(s, '}')) < 0) return -1;
        if (!more) break;
    }
    if (!events) return s->bail = 1, -1;
    return 0;
}

static void scan_all(Out *o, Scan *s, int object, int64_t meta[N_META][2]) {
    skip_ws(s);
    if ((object ? scan_object(o, s, meta) : scan_array(o, s)) < 0) {
        s->bail = 1;
        return;
    }
    skip_ws(s);
    if (s->p != s->end) s->bail = 1;
}

/* -- Python ----------------------------------------------------------------------------------------------- */
static void out_free(Out *o) {
    pool_give(o->rec.p, o->rec.cap * o->rec.size);
    pool_give(o->arg.p, o->arg.cap * o->arg.size);
    table_free(&o->strings);
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer buf;
    PyObject *cats, *keys;
    int object = 0;
    int64_t meta[N_META][2];
    for (int j = 0; j < N_META; j++) meta[j][0] = meta[j][1] = -1;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*O!O!|p", &buf, &PyTuple_Type, &cats, &PyTuple_Type, &keys, &object)) return NULL;
    Out *o = calloc(1, sizeof(Out));
    PyObject *result = NULL;
    if (!o) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    o->n_cats = PyTuple_GET_SIZE(cats);
    o->n_keys = PyTuple_GET_SIZE(keys);
    if (o->n_cats > MAX_CATS || o->n_keys > MAX_KEYS) {
        PyErr_SetString(PyExc_ValueError, "too many categories or keys");
        goto fail;
    }
    for (Py_ssize_t j = 0; j < o->n_cats; j++) {
        PyObject *c = PyTuple_GET_ITEM(cats, j), *cs;
        int want;
        if (!PyTuple_Check(c) || !PyArg_ParseTuple(c, "Sp", &cs, &want)) {
            PyErr_SetString(PyExc_TypeError, "categories must be (bytes, bool) pairs");
            goto fail;
        }
        o->cat_s[j] = PyBytes_AS_STRING(cs);
        o->cat_n[j] = PyBytes_GET_SIZE(cs);
        o->cat_args[j] = want;
    }
    for (Py_ssize_t j = 0; j < o->n_keys; j++) {
        PyObject *k = PyTuple_GET_ITEM(keys, j), *ks;
        int dims;
        if (!PyTuple_Check(k) || !PyArg_ParseTuple(k, "Sp", &ks, &dims)) {
            PyErr_SetString(PyExc_TypeError, "keys must be (bytes, bool) pairs");
            goto fail;
        }
        o->key_s[j] = PyBytes_AS_STRING(ks);
        o->key_n[j] = PyBytes_GET_SIZE(ks);
        o->key_dims[j] = dims;
        if (dims) o->dim_at[j] = o->n_dims++;
    }
    o->rec.size = sizeof(Rec);
    arg_layout(o);
    o->strings.entries.size = sizeof(Entry);
    /* room for one kept event per 128 bytes of text (Kineto's are 200-700): no copy as the arrays grow */
    size_t guess = (size_t)buf.len / 128 + 1;
    size_t got;
    o->rec.p = pool_take(guess * o->rec.size, &got);
    o->rec.cap = got / o->rec.size;
    o->arg.p = pool_take(guess * o->arg.size, &got);
    o->arg.cap = got / o->arg.size;
    Scan s = {buf.buf, buf.buf, (const unsigned char *)buf.buf + buf.len, 0};
    Py_BEGIN_ALLOW_THREADS
    scan_all(o, &s, object, meta);
    Py_END_ALLOW_THREADS
    if (s.bail) {
        result = Py_None;
        Py_INCREF(result);
        goto fail;
    }
    PyObject *d = PyDict_New();
    if (!d) goto fail;
    if (put_col(d, "rec", &o->rec) < 0 || put_col(d, "arg", &o->arg) < 0) goto fail_d;
    PyObject *spans = Py_BuildValue("((LL)(LL)(LL))", (long long)meta[0][0], (long long)meta[0][1],
                                    (long long)meta[1][0], (long long)meta[1][1], (long long)meta[2][0],
                                    (long long)meta[2][1]);
    if (!spans || PyDict_SetItemString(d, "meta", spans) < 0) {
        Py_XDECREF(spans);
        goto fail_d;
    }
    Py_DECREF(spans);
    PyObject *sizes = Py_BuildValue("(nn)", (Py_ssize_t)o->rec.size, (Py_ssize_t)o->arg.size);
    if (!sizes || PyDict_SetItemString(d, "sizes", sizes) < 0) {
        Py_XDECREF(sizes);
        goto fail_d;
    }
    Py_DECREF(sizes);
    PyObject *strings = PyList_New((Py_ssize_t)o->strings.n);
    if (!strings || PyDict_SetItemString(d, "strings", strings) < 0) {
        Py_XDECREF(strings);
        goto fail_d;
    }
    Py_DECREF(strings);
    for (size_t i = 0; i < o->strings.n; i++) {
        Entry *sl = &((Entry *)o->strings.entries.p)[i];
        PyObject *u = PyUnicode_DecodeUTF8((const char *)sl->s, (Py_ssize_t)sl->len, "strict");
        if (!u) goto fail_d;
        PyList_SET_ITEM(strings, (Py_ssize_t)i, u);
    }
    PyObject *count = PyLong_FromSsize_t(o->count);
    if (!count || PyDict_SetItemString(d, "count", count) < 0) {
        Py_XDECREF(count);
        goto fail_d;
    }
    Py_DECREF(count);
    result = d;
    goto fail;
fail_d:
    Py_DECREF(d);
fail:
    out_free(o);
    free(o);
    PyBuffer_Release(&buf);
    return result;
}

static PyObject *release(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    while (pool_n) free(pool[--pool_n].p);
    Py_RETURN_NONE;
}

static PyMethodDef METHODS[] = {
    {"release", release, METH_NOARGS,
     "release(): free the memory kept for the next scans' records (at the end of a read; blocks still alive give "
     "theirs back to the pool when they go)."},
    {"scan", scan, METH_VARARGS,
     "scan(text, categories, keys, object=False) -> dict | None: the kept events of a chunk ``[event, ...]`` "
     "(or, with object, of a trace ``{\"traceEvents\": [...], ...}``) as columns, or None where the text is not "
     "in the plain form the scanner is sure of (decode it the general way)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) {
    PLAIN['"'] = PLAIN['\\'] = 1;
    BLANK[' '] = BLANK['\t'] = BLANK['\n'] = BLANK['\r'] = 1;
    for (int c = 0; c < 0x20; c++) PLAIN[c] = 1;
    for (int c = 0x80; c < 0x100; c++) PLAIN[c] = 1;
    if (PyType_Ready(&BlockType) < 0) return NULL;
    return PyModule_Create(&MODULE);
}
