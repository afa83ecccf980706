/* The rows of one table of an SQLite file, read from its pages -> Arrow columns.
 *
 * An Nsight Systems export of a serving step holds millions of rows (5M NVTX ranges, 1M kernels, 1.7M runtime
 * calls); SQLite's virtual machine steps them at about 0.7 us a row and column, most of an nsys import's time.
 * The rows of an ordinary (rowid) table sit in the leaves of one b-tree, each a record: a header of serial types
 * and the values after it (https://www.sqlite.org/fileformat2.html, sections 1.6, 2.1). This walks that b-tree
 * in rowid order, the order a ``SELECT ... FROM t`` scans it, and writes the columns the caller names straight
 * into Arrow buffers (64-bit integers, or UTF-8 text with 64-bit offsets) that polars takes without a copy.
 *
 * It decides nothing it is not sure of. ``read`` returns a reason (a str) instead of columns where the file or a
 * value is outside the plain form: a page of a kind other than a table b-tree's, an offset or a chain that runs
 * out of its page or the file, a page visited twice, a value of another type than the column's (a real, a blob,
 * text in an integer column, a number in a text column), text that is not UTF-8, a record with fewer columns
 * than asked where the caller has not said those read as NULL. The caller then reads the table through SQLite
 * (``db.py``), whose frames these must equal (tests/readers/test_nsys_pages.py). The file is mapped read-only
 * and never changed. Only the caller knows what SQLite's schema says (which column is the rowid's alias, whether
 * the file is in WAL mode with pages outside it): ``pages.py`` checks that before it calls this.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../_arrow.h"

#ifndef _WIN32
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#endif

#define MAX_COLS 64
#define MAX_DEPTH 40 /* a b-tree of 2^32 pages with the smallest fan-out SQLite writes is far shallower */

enum { K_INT = 0, K_TEXT = 1, K_ROWID = 2 };

/* -- one output column while it is filled ---------------------------------------------------------------- */
typedef struct {
    int kind;       /* K_INT, K_TEXT or K_ROWID (an integer column whose value is the row's rowid) */
    int src;        /* its index in the record */
    int missing_ok; /* a record shorter than ``src`` gives NULL (the column's default) rather than declining */
    int64_t n, cap, nulls;
    int64_t *v;      /* the values (K_INT, K_ROWID) or the n + 1 offsets into ``data`` (K_TEXT) */
    uint8_t *valid;  /* Arrow's validity bitmap, a bit per row */
    char *data;      /* K_TEXT: the bytes of all values */
    int64_t dlen, dcap;
} Out;

static int out_grow(Out *o) {
    int64_t cap = o->cap ? o->cap * 2 : 4096;
    int64_t *v = realloc(o->v, (size_t)(cap + 1) * sizeof(int64_t));
    if (!v) return -1;
    o->v = v;
    uint8_t *valid = realloc(o->valid, (size_t)(cap + 7) / 8);
    if (!valid) return -1;
    o->valid = valid;
    o->cap = cap;
    return 0;
}

/* Room for one more row; sets its validity bit (clears it for a NULL). */
static inline int out_row(Out *o, int is_valid) {
    if (o->n == o->cap && out_grow(o)) return -1;
    if ((o->n & 7) == 0) o->valid[o->n >> 3] = 0; /* a fresh byte of the bitmap */
    if (is_valid)
        o->valid[o->n >> 3] |= (uint8_t)(1u << (o->n & 7));
    else
        o->nulls++;
    return 0;
}

static inline int out_int(Out *o, int is_valid, int64_t x) {
    if (out_row(o, is_valid)) return -1;
    o->v[o->n++] = is_valid ? x : 0;
    return 0;
}

static inline int out_text(Out *o, int is_valid, const uint8_t *s, int64_t len) {
    if (out_row(o, is_valid)) return -1;
    if (o->n == 0) o->v[0] = 0;
    if (is_valid && len) {
        if (o->dlen + len > o->dcap) {
            int64_t cap = o->dcap ? o->dcap : 65536;
            while (cap < o->dlen + len) cap *= 2;
            char *d = realloc(o->data, (size_t)cap);
            if (!d) return -1;
            o->data = d;
            o->dcap = cap;
        }
        memcpy(o->data + o->dlen, s, (size_t)len);
        o->dlen += len;
    }
    o->v[++o->n] = o->dlen;
    return 0;
}

static void out_free(Out *o) {
    free(o->v);
    free(o->valid);
    free(o->data);
    o->v = NULL;
    o->valid = NULL;
    o->data = NULL;
}

/* -- UTF-8 ----------------------------------------------------------------------------------------------- */
/* Whether s[0:len] is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static int utf8_ok(const uint8_t *s, int64_t len) {
    int64_t i = 0;
    while (i < len) {
        if (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
        } else if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= len || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= len || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && s[i + 1] < 0xA0) return 0; /* overlong */
            if (c == 0xED && s[i + 1] > 0x9F) return 0; /* surrogate */
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= len || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 ||
                (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if (c == 0xF0 && s[i + 1] < 0x90) return 0; /* overlong */
            if (c == 0xF4 && s[i + 1] > 0x8F) return 0; /* past U+10FFFF */
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

/* -- the file -------------------------------------------------------------------------------------------- */
typedef struct {
    const uint8_t *map;
    uint64_t size;
    uint32_t psize, usable, npages;
    const char *why; /* set where the walk declines */
    uint8_t *scratch; /* a payload that spills to overflow pages, put back together */
    uint64_t scratch_cap;
    uint64_t visited;
} Db;

static uint32_t get16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }
static uint32_t get32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static const uint8_t *page_at(Db *db, uint32_t pgno) {
    if (pgno < 1 || pgno > db->npages) {
        db->why = "a page number past the end of the file";
        return NULL;
    }
    return db->map + (uint64_t)(pgno - 1) * db->psize;
}

/* An SQLite varint at p (bounded by end) into *out; the bytes it took, or 0 where it runs past end. */
static inline int varint(const uint8_t *p, const uint8_t *end, uint64_t *out) {
    if (p < end && !(*p & 0x80)) { /* most are one byte: serial types below 64, small sizes */
        *out = *p;
        return 1;
    }
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        if (p + i >= end) return 0;
        v = (v << 7) | (p[i] & 0x7F);
        if (!(p[i] & 0x80)) {
            *out = v;
            return i + 1;
        }
    }
    if (p + 8 >= end) return 0;
    *out = (v << 8) | p[8];
    return 9;
}

/* The size of a value of serial type t; -1 for the reserved types 10 and 11. */
static inline int64_t serial_size(uint64_t t) {
    static const int8_t small[12] = {0, 1, 2, 3, 4, 6, 8, 8, 0, 0, -1, -1};
    if (t < 12) return small[t];
    return (int64_t)((t - 12) / 2);
}

static inline int64_t read_int(const uint8_t *p, uint64_t t) {
    if (t == 8) return 0;
    if (t == 9) return 1;
    int n = (int)serial_size(t);
    int64_t v = (int8_t)p[0]; /* big-endian two's complement: the first byte carries the sign */
    for (int i = 1; i < n; i++) v = (int64_t)((uint64_t)v << 8 | p[i]);
    return v;
}

/* One record (``payload[0:size]``, of row ``rowid``) into the output columns ``want`` (sorted by ``src``). */
static int add_record(Db *db, const uint8_t *payload, uint64_t size, int64_t rowid, Out *outs, int nout,
                      const int *order) {
    const uint8_t *end = payload + size;
    uint64_t hsize;
    int k = varint(payload, end, &hsize);
    if (!k || hsize > size || hsize < (uint64_t)k) {
        db->why = "a record header that runs past its record";
        return -1;
    }
    const uint8_t *h = payload + k, *hend = payload + hsize;
    uint64_t off = hsize;
    int col = 0;
    for (int j = 0; j < nout; j++) {
        Out *o = &outs[order[j]];
        if (o->kind == K_ROWID) {
            if (out_int(o, 1, rowid)) goto nomem;
            continue;
        }
        uint64_t t = 0;
        int found = 0;
        while (h < hend) {
            int n = varint(h, hend, &t);
            if (!n) {
                db->why = "a serial type that runs past its record header";
                return -1;
            }
            h += n;
            int64_t len = serial_size(t);
            if (len < 0) {
                db->why = "a reserved serial type (10 or 11)";
                return -1;
            }
            if (col++ == o->src) {
                found = 1;
                if (off + (uint64_t)len > size) {
                    db->why = "a value that runs past its record";
                    return -1;
                }
                break;
            }
            off += (uint64_t)len;
        }
        if (!found) {
            if (!o->missing_ok) {
                db->why = "a record shorter than its table, where the column has a default";
                return -1;
            }
            if ((o->kind == K_TEXT ? out_text(o, 0, NULL, 0) : out_int(o, 0, 0))) goto nomem;
            continue;
        }
        const uint8_t *val = payload + off;
        int64_t len = serial_size(t);
        off += (uint64_t)len;
        if (t == 0) {
            if ((o->kind == K_TEXT ? out_text(o, 0, NULL, 0) : out_int(o, 0, 0))) goto nomem;
        } else if (o->kind == K_INT) {
            if (t == 7 || t >= 12) {
                db->why = "a real, text or blob in an integer column";
                return -1;
            }
            if (out_int(o, 1, read_int(val, t))) goto nomem;
        } else {
            if (t < 13 || !(t & 1)) {
                db->why = "a number or blob in a text column";
                return -1;
            }
            if (!utf8_ok(val, len)) {
                db->why = "text that is not UTF-8";
                return -1;
            }
            if (out_text(o, 1, val, len)) goto nomem;
        }
    }
    return 0;
nomem:
    db->why = "out of memory";
    return -1;
}

/* The leaf cells of a table b-tree page into the columns. */
static int read_leaf(Db *db, const uint8_t *page, uint32_t hdr, Out *outs, int nout, const int *order) {
    const uint8_t *end = page + db->usable;
    uint32_t ncells = get16(page + hdr + 3);
    if (hdr + 8 + 2 * (uint64_t)ncells > db->usable) {
        db->why = "a cell pointer array past its page";
        return -1;
    }
    uint64_t U = db->usable, X = U - 35;
    uint64_t M = ((U - 12) * 32 / 255) - 23;
    for (uint32_t i = 0; i < ncells; i++) {
        uint32_t at = get16(page + hdr + 8 + 2 * i);
        if (at >= db->usable) {
            db->why = "a cell past its page";
            return -1;
        }
        const uint8_t *p = page + at;
        uint64_t size, rowid;
        int n = varint(p, end, &size);
        if (!n) goto bad;
        p += n;
        n = varint(p, end, &rowid);
        if (!n) goto bad;
        p += n;
        const uint8_t *payload = p;
        if (size <= X) {
            if (p + size > end) goto bad;
        } else {
            /* spills: ``local`` bytes here, then a chain of overflow pages of U - 4 bytes each */
            uint64_t K = M + ((size - M) % (U - 4));
            uint64_t local = K <= X ? K : M;
            if (p + local + 4 > end) goto bad;
            if (size > db->scratch_cap) {
                uint8_t *s = realloc(db->scratch, size);
                if (!s) {
                    db->why = "out of memory";
                    return -1;
                }
                db->scratch = s;
                db->scratch_cap = size;
            }
            memcpy(db->scratch, p, local);
            uint64_t got = local;
            uint32_t next = get32(p + local);
            uint64_t hops = 0;
            while (got < size) {
                if (++hops > db->npages) {
                    db->why = "an overflow chain that loops";
                    return -1;
                }
                const uint8_t *ov = page_at(db, next);
                if (!ov) return -1;
                uint64_t take = size - got < U - 4 ? size - got : U - 4;
                memcpy(db->scratch + got, ov + 4, take);
                got += take;
                next = get32(ov);
            }
            payload = db->scratch;
        }
        if (add_record(db, payload, size, (int64_t)rowid, outs, nout, order)) return -1;
    }
    return 0;
bad:
    db->why = "a cell that runs past its page";
    return -1;
}

typedef struct {
    uint32_t pgno, next, stop; /* the page, the next child to visit, one past the last child to visit */
} Frame;

/* The rows under children [lo, hi) of an interior root page, in rowid order. */
static int walk(Db *db, uint32_t root, uint32_t lo, uint32_t hi, Out *outs, int nout, const int *order) {
    Frame stack[MAX_DEPTH];
    int depth = 0;
    stack[0] = (Frame){root, lo, hi};
    while (depth >= 0) {
        Frame *f = &stack[depth];
        const uint8_t *page = page_at(db, f->pgno);
        if (!page) return -1;
        uint32_t hdr = f->pgno == 1 ? 100 : 0;
        uint8_t type = page[hdr];
        if (type == 0x0D && depth > 0) {
            if (read_leaf(db, page, hdr, outs, nout, order)) return -1;
            depth--;
            continue;
        }
        if (type != 0x05) {
            db->why = "a page that is not a table b-tree page (an index, or damage)";
            return -1;
        }
        uint32_t ncells = get16(page + hdr + 3);
        if (hdr + 12 + 2 * (uint64_t)ncells > db->usable) {
            db->why = "a cell pointer array past its page";
            return -1;
        }
        uint32_t stop = f->stop < ncells + 1 ? f->stop : ncells + 1;
        if (f->next >= stop) {
            depth--;
            continue;
        }
        uint32_t child;
        if (f->next < ncells) {
            uint32_t at = get16(page + hdr + 12 + 2 * f->next);
            if (at + 4 > db->usable) {
                db->why = "a cell past its page";
                return -1;
            }
            child = get32(page + at);
        } else {
            child = get32(page + hdr + 8); /* the right-most pointer */
        }
        f->next++;
        if (depth + 1 >= MAX_DEPTH) {
            db->why = "a b-tree deeper than any SQLite writes";
            return -1;
        }
        if (++db->visited > db->npages) {
            db->why = "more pages than the file has (a loop in the b-tree)";
            return -1;
        }
        stack[++depth] = (Frame){child, 0, UINT32_MAX};
    }
    return 0;
}

/* How many children the root has (0 for a leaf): the caller splits them among threads. */
static int64_t root_children(Db *db, uint32_t root) {
    const uint8_t *page = page_at(db, root);
    if (!page) return -1;
    uint32_t hdr = root == 1 ? 100 : 0;
    if (page[hdr] == 0x0D) return 0;
    if (page[hdr] != 0x05) {
        db->why = "a root page that is not a table b-tree page";
        return -1;
    }
    return (int64_t)get16(page + hdr + 3) + 1;
}

/* -- the Column object: one finished column, handed to polars through __arrow_c_array__ ------------------- */
typedef struct {
    PyObject_HEAD Out o;
} Column;

typedef struct {
    Out o;
    const void *buffers[3];
} Owned;

static void release_array(struct ArrowArray *a) {
    Owned *own = a->private_data;
    out_free(&own->o);
    free(own);
    a->release = NULL;
}

static PyObject *column_arrow(Column *self, PyObject *args, PyObject *kwargs) {
    (void)args;
    (void)kwargs; /* a requested schema is a request, not a demand (the PyCapsule interface): ignored */
    if (self->o.nulls < 0) {
        PyErr_SetString(PyExc_ValueError, "this column was already handed over");
        return NULL;
    }
    struct ArrowSchema *s = calloc(1, sizeof *s);
    struct ArrowArray *a = calloc(1, sizeof *a);
    Owned *own = calloc(1, sizeof *own);
    if (!s || !a || !own) {
        free(s);
        free(a);
        free(own);
        return PyErr_NoMemory();
    }
    Out *o = &self->o;
    if (!o->v && out_grow(o)) { /* an empty column still needs its offsets / values buffer */
        free(s);
        free(a);
        free(own);
        return PyErr_NoMemory();
    }
    if (o->kind == K_TEXT) {
        if (o->n == 0) o->v[0] = 0;
        if (!o->data && !(o->data = malloc(1))) {
            free(s);
            free(a);
            free(own);
            return PyErr_NoMemory();
        }
    }
    own->o = *o;
    memset(o, 0, sizeof *o);
    o->nulls = -1; /* handed over */
    s->format = own->o.kind == K_TEXT ? "U" : "l";
    s->name = "";
    s->flags = ARROW_FLAG_NULLABLE;
    s->release = arrow_release_schema;
    a->length = own->o.n;
    a->null_count = own->o.nulls;
    own->buffers[0] = own->o.nulls ? own->o.valid : NULL;
    own->buffers[1] = own->o.v;
    own->buffers[2] = own->o.data;
    a->n_buffers = own->o.kind == K_TEXT ? 3 : 2;
    a->buffers = own->buffers;
    a->release = release_array;
    a->private_data = own;
    return arrow_capsules(s, a);
}

static Py_ssize_t column_len(Column *self) { return self->o.nulls < 0 ? 0 : (Py_ssize_t)self->o.n; }

static void column_dealloc(Column *self) {
    out_free(&self->o);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef COLUMN_METHODS[] = {
    {"__arrow_c_array__", (PyCFunction)(void (*)(void))column_arrow, METH_VARARGS | METH_KEYWORDS,
     "The column as an Arrow array (the PyCapsule interface); its buffers go with it (once only)."},
    {NULL, NULL, 0, NULL}};

static PySequenceMethods COLUMN_SEQ = {.sq_length = (lenfunc)column_len};

static PyTypeObject COLUMN_TYPE = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_pages.Column",
    .tp_basicsize = sizeof(Column),
    .tp_dealloc = (destructor)column_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One column read from a table's pages: 64-bit integers or UTF-8 text, with nulls.",
    .tp_methods = COLUMN_METHODS,
    .tp_as_sequence = &COLUMN_SEQ,
};

/* -- the module ------------------------------------------------------------------------------------------ */
static const Out *SORT_OUTS;
static int cmp_src(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    int sx = SORT_OUTS[x].kind == K_ROWID ? -1 : SORT_OUTS[x].src;
    int sy = SORT_OUTS[y].kind == K_ROWID ? -1 : SORT_OUTS[y].src;
    return sx < sy ? -1 : sx > sy;
}

static PyObject *pages_read(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *path;
    unsigned int root, part, parts;
    PyObject *spec;
    Py_ssize_t hint;
    if (!PyArg_ParseTuple(args, "sIOIIn", &path, &root, &spec, &part, &parts, &hint)) return NULL;
#ifdef _WIN32
    return PyUnicode_FromString("not built for this platform");
#else
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 1 || PyTuple_GET_SIZE(spec) > MAX_COLS) {
        PyErr_SetString(PyExc_ValueError, "columns: a tuple of 1 to 64 (kind, index, missing_ok) tuples");
        return NULL;
    }
    if (parts < 1 || part >= parts) {
        PyErr_SetString(PyExc_ValueError, "part must be below parts");
        return NULL;
    }
    int nout = (int)PyTuple_GET_SIZE(spec);
    Out outs[MAX_COLS];
    int order[MAX_COLS];
    memset(outs, 0, sizeof outs);
    for (int i = 0; i < nout; i++) {
        int kind, src, missing_ok;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(spec, i), "iip", &kind, &src, &missing_ok)) return NULL;
        if (kind < K_INT || kind > K_ROWID || src < 0) {
            PyErr_SetString(PyExc_ValueError, "a column's kind is 0, 1 or 2 and its index at least 0");
            return NULL;
        }
        outs[i] = (Out){.kind = kind, .src = src, .missing_ok = missing_ok};
        order[i] = i;
    }
    SORT_OUTS = outs; /* under the GIL */
    qsort(order, (size_t)nout, sizeof(int), cmp_src);
    for (int i = 1; i < nout; i++) {
        if (outs[order[i]].kind != K_ROWID && outs[order[i - 1]].kind != K_ROWID &&
            outs[order[i]].src == outs[order[i - 1]].src) {
            PyErr_SetString(PyExc_ValueError, "a record column asked for twice");
            return NULL;
        }
    }
    int fd = open(path, O_RDONLY);
    if (fd < 0) return PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
    }
    Db db = {0};
    db.size = (uint64_t)st.st_size;
    const char *why = NULL;
    void *map = NULL;
    if (db.size < 512) {
        close(fd);
        return PyUnicode_FromString("shorter than one page");
    }
    map = mmap(NULL, (size_t)db.size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
    db.map = map;
    Py_BEGIN_ALLOW_THREADS;
    const uint8_t *h = db.map;
    uint32_t ps = get16(h + 16);
    db.psize = ps == 1 ? 65536 : ps;
    if (memcmp(h, "SQLite format 3", 16) != 0)
        why = "no SQLite header";
    else if (db.psize < 512 || (db.psize & (db.psize - 1)))
        why = "a page size that is not a power of two from 512 to 65536";
    else if (h[18] != 1 || h[19] != 1)
        why = "not a rollback-journal file (WAL mode: pages may live in the -wal file)";
    else if (get32(h + 56) != 1)
        why = "text that is not UTF-8 (a UTF-16 database)";
    else if (h[20] > db.psize - 480)
        why = "reserved space that leaves pages too small";
    if (!why) {
        db.usable = db.psize - h[20];
        db.npages = (uint32_t)(db.size / db.psize < 0xFFFFFFFFu ? db.size / db.psize : 0xFFFFFFFFu);
        int64_t nchild = root_children(&db, root);
        if (nchild < 0) {
            why = db.why;
        } else {
            uint32_t lo, hi;
            if (nchild == 0) { /* a leaf root: part 0 reads it */
                lo = part == 0 ? 0 : 1;
                hi = 1;
            } else {
                lo = (uint32_t)((uint64_t)nchild * part / parts);
                hi = (uint32_t)((uint64_t)nchild * (part + 1) / parts);
            }
            for (int i = 0; i < nout; i++) {
                if (hint > 0) {
                    /* at most 2M rows up front (16 MB an integer column): a span of rowids can be far
                     * larger than the rows it holds, and the arrays grow by doubling past it */
                    int64_t cap = hint < (1 << 21) ? hint : (1 << 21);
                    outs[i].cap = cap / 2; /* out_grow doubles it */
                    if (out_grow(&outs[i])) why = "out of memory";
                }
            }
            if (!why && (nchild > 0 || lo == 0) && lo < hi) {
                if (nchild == 0) {
                    const uint8_t *page = page_at(&db, root);
                    if (read_leaf(&db, page, root == 1 ? 100 : 0, outs, nout, order)) why = db.why;
                } else if (walk(&db, root, lo, hi, outs, nout, order)) {
                    why = db.why;
                }
            }
        }
    }
    munmap(map, (size_t)db.size);
    free(db.scratch);
    Py_END_ALLOW_THREADS;
    if (why) {
        for (int i = 0; i < nout; i++) out_free(&outs[i]);
        return PyUnicode_FromString(why);
    }
    PyObject *cols = PyTuple_New(nout);
    if (!cols) goto fail;
    for (int i = 0; i < nout; i++) {
        Column *c = PyObject_New(Column, &COLUMN_TYPE);
        if (!c) {
            Py_DECREF(cols);
            goto fail;
        }
        c->o = outs[i];
        memset(&outs[i], 0, sizeof outs[i]);
        PyTuple_SET_ITEM(cols, i, (PyObject *)c);
    }
    return cols;
fail:
    for (int i = 0; i < nout; i++) out_free(&outs[i]);
    return NULL;
#endif
}

static PyMethodDef METHODS[] = {
    {"read", pages_read, METH_VARARGS,
     "read(path, root, columns, part, parts, rows_hint) -> tuple of Column, or a str saying why not.\n\n"
     "The rows of the table whose b-tree is rooted at page ``root``, in rowid order; ``columns`` is a tuple of\n"
     "(kind, index, missing_ok): kind 0 an integer column, 1 a text column, 2 the rowid; index the column's\n"
     "place in the record; missing_ok whether a record too short to hold it gives NULL. ``part`` of ``parts``\n"
     "reads that share of the root's children (the parts, concatenated in order, are the table)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_pages", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__pages(void) {
    if (PyType_Ready(&COLUMN_TYPE) < 0) return NULL;
    return PyModule_Create(&MODULE);
}
