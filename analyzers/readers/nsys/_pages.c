/* The rows of one table of an SQLite file, read from its pages -> Arrow columns.
 *
 * An Nsight Systems export of a serving step holds millions of rows (5M NVTX ranges, 1M kernels, 1.7M runtime
 * calls); SQLite's virtual machine steps them at about 0.7 us a row and column, most of an nsys import's time.
 * The rows of an ordinary (rowid) table sit in the leaves of one b-tree, each a record: a header of serial types
 * and the values after it (https://www.sqlite.org/fileformat2.html, sections 1.6, 2.1). This walks that b-tree
 * in rowid order, the order a ``SELECT ... FROM t`` scans it, and writes the columns the caller names straight
 * into Arrow buffers (64-bit integers, or UTF-8 text as string views) that polars takes without a copy.
 *
 * A large table is read in parts (a share of the root's children each, in threads): the rows of each part are
 * counted first (the leaves' cell counts: no record is read), and every part writes its rows into one buffer
 * per column at its own offset (a ``Table``), so each column reaches polars as one chunk. (Parts in buffers of
 * their own were columns of several chunks, which polars copies into one at the first join that meets a
 * single-chunk column: 0.15 s and 125k page faults of docs/BENCHMARKS.md's 1M + 5M export.) Text is written as
 * Arrow string views, each part's longer strings in a data buffer of its own.
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

/* -- one output column of one part while it is filled --------------------------------------------------- */
typedef struct {
    int kind;       /* K_INT, K_TEXT or K_ROWID (an integer column whose value is the row's rowid) */
    int src;        /* its index in the record */
    int missing_ok; /* a record shorter than ``src`` gives NULL (the column's default) rather than declining */
    int64_t n, cap, nulls; /* rows written, rows counted for this part, NULLs among them */
    int64_t *v;      /* K_INT / K_ROWID: the part's values, in the table's buffer at its offset */
    uint8_t *views;  /* K_TEXT: the part's 16-byte string views, in the table's buffer at its offset */
    uint8_t *valid;  /* the part's own validity bitmap (bit 0 its first row), merged into the column's at the end */
    char *data;      /* K_TEXT: the part's text longer than 12 bytes (shorter text lives in its view) */
    int64_t dlen, dcap;
    int32_t buf;     /* K_TEXT: the index of ``data`` among the column's data buffers */
} Out;

enum { OUT_FULL = -2, OUT_BIG = -3 }; /* out_*: more rows than counted; a part's text past 2 GiB */

/* Room for one more row; sets its validity bit (clears it for a NULL). */
static inline int out_row(Out *o, int is_valid) {
    if (o->n == o->cap) return OUT_FULL;
    if ((o->n & 7) == 0) o->valid[o->n >> 3] = 0; /* a fresh byte of the bitmap */
    if (is_valid)
        o->valid[o->n >> 3] |= (uint8_t)(1u << (o->n & 7));
    else
        o->nulls++;
    return 0;
}

static inline int out_int(Out *o, int is_valid, int64_t x) {
    int r = out_row(o, is_valid);
    if (r) return r;
    o->v[o->n++] = is_valid ? x : 0;
    return 0;
}

/* An Arrow string view: the length, then the text itself (12 bytes at most) or its first 4 bytes, the data
 * buffer's index and the offset in it (little-endian int32s, as the format's machines are). */
static inline int out_text(Out *o, int is_valid, const uint8_t *s, int64_t len) {
    int r = out_row(o, is_valid);
    if (r) return r;
    uint8_t *view = o->views + 16 * o->n;
    memset(view, 0, 16);
    if (is_valid && len) {
        if (len > 12) {
            if (o->dlen + len > INT32_MAX) return OUT_BIG;
            if (o->dlen + len > o->dcap) {
                int64_t cap = o->dcap ? o->dcap : 65536;
                while (cap < o->dlen + len) cap *= 2;
                char *d = realloc(o->data, (size_t)cap);
                if (!d) return -1;
                o->data = d;
                o->dcap = cap;
            }
            memcpy(o->data + o->dlen, s, (size_t)len);
            int32_t at = (int32_t)o->dlen;
            memcpy(view + 4, s, 4);
            memcpy(view + 8, &o->buf, 4);
            memcpy(view + 12, &at, 4);
            o->dlen += len;
        } else {
            memcpy(view + 4, s, (size_t)len);
        }
        int32_t l = (int32_t)len;
        memcpy(view, &l, 4);
    }
    o->n++;
    return 0;
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
    int64_t counted; /* rows counted by a walk without outputs */
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
    int col = 0, r = 0;
    for (int j = 0; j < nout; j++) {
        Out *o = &outs[order[j]];
        if (o->kind == K_ROWID) {
            if ((r = out_int(o, 1, rowid))) goto out;
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
            if ((r = o->kind == K_TEXT ? out_text(o, 0, NULL, 0) : out_int(o, 0, 0))) goto out;
            continue;
        }
        const uint8_t *val = payload + off;
        int64_t len = serial_size(t);
        off += (uint64_t)len;
        if (t == 0) {
            if ((r = o->kind == K_TEXT ? out_text(o, 0, NULL, 0) : out_int(o, 0, 0))) goto out;
        } else if (o->kind == K_INT) {
            if (t == 7 || t >= 12) {
                db->why = "a real, text or blob in an integer column";
                return -1;
            }
            if ((r = out_int(o, 1, read_int(val, t)))) goto out;
        } else {
            if (t < 13 || !(t & 1)) {
                db->why = "a number or blob in a text column";
                return -1;
            }
            if (!utf8_ok(val, len)) {
                db->why = "text that is not UTF-8";
                return -1;
            }
            if ((r = out_text(o, 1, val, len))) goto out;
        }
    }
    return 0;
out:
    db->why = r == OUT_FULL  ? "more rows than its leaves count (a damaged b-tree)"
              : r == OUT_BIG ? "more than 2 GiB of text in one part"
                             : "out of memory";
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

/* The rows under children [lo, hi) of an interior root page, in rowid order; with no ``outs``, only counted
 * (into ``db->counted``). */
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
            if (!outs) { /* counting: the leaf's cells are its rows */
                uint32_t ncells = get16(page + hdr + 3);
                if (hdr + 8 + 2 * (uint64_t)ncells > db->usable) {
                    db->why = "a cell pointer array past its page";
                    return -1;
                }
                db->counted += ncells;
            } else if (read_leaf(db, page, hdr, outs, nout, order)) {
                return -1;
            }
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

/* -- a table being read: one buffer per column that every part writes at its offset ----------------------- */
typedef struct {
    PyObject_HEAD int ncols, nparts;
    int64_t rows;
    int kinds[MAX_COLS];
    void *shared[MAX_COLS]; /* int64 values or 16-byte views, ``rows`` of them */
    int64_t *offset, *count; /* per part: where its rows start, how many (set when it is read) */
    uint8_t *done;           /* per part: 1 being read (or declined), 2 read */
    uint8_t **valid;         /* per column and part: the part's validity bitmap */
    int64_t *nulls;          /* per column and part */
    char **data;             /* per column and part: the part's text buffer (K_TEXT) */
    int64_t *dlen;
    int handed;              /* the columns were taken */
} Table;

static void table_free_parts(Table *t) {
    for (int64_t i = 0; i < (int64_t)t->ncols * t->nparts; i++) {
        if (t->valid) free(t->valid[i]);
        if (t->data) free(t->data[i]);
    }
    free(t->valid);
    free(t->data);
    free(t->nulls);
    free(t->dlen);
    free(t->offset);
    free(t->count);
    free(t->done);
    t->valid = NULL;
    t->data = NULL;
    t->nulls = t->dlen = t->offset = t->count = NULL;
    t->done = NULL;
}

static void table_dealloc(Table *t) {
    for (int i = 0; i < t->ncols; i++) free(t->shared[i]);
    table_free_parts(t);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyObject *table_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    (void)kwargs;
    PyObject *kinds;
    Py_ssize_t rows;
    int nparts;
    if (!PyArg_ParseTuple(args, "Oni", &kinds, &rows, &nparts)) return NULL;
    if (!PyTuple_Check(kinds) || PyTuple_GET_SIZE(kinds) < 1 || PyTuple_GET_SIZE(kinds) > MAX_COLS || rows < 0 ||
        nparts < 1 || nparts > 1024) {
        PyErr_SetString(PyExc_ValueError, "Table(kinds: tuple of 1 to 64 ints, rows >= 0, parts 1 to 1024)");
        return NULL;
    }
    Table *t = (Table *)type->tp_alloc(type, 0);
    if (!t) return NULL;
    t->ncols = (int)PyTuple_GET_SIZE(kinds);
    t->nparts = nparts;
    t->rows = rows;
    for (int i = 0; i < t->ncols; i++) {
        long k = PyLong_AsLong(PyTuple_GET_ITEM(kinds, i));
        if (k < K_INT || k > K_ROWID) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a column's kind is 0, 1 or 2");
            Py_DECREF(t);
            return NULL;
        }
        t->kinds[i] = (int)k;
        /* one item more than needed: an empty column still has a buffer */
        t->shared[i] = malloc((size_t)(rows + 1) * (k == K_TEXT ? 16 : sizeof(int64_t)));
        if (!t->shared[i]) {
            Py_DECREF(t);
            return PyErr_NoMemory();
        }
    }
    size_t cells = (size_t)t->ncols * (size_t)nparts;
    t->offset = calloc((size_t)nparts, sizeof(int64_t));
    t->count = calloc((size_t)nparts, sizeof(int64_t));
    t->done = calloc((size_t)nparts, 1);
    t->valid = calloc(cells, sizeof(uint8_t *));
    t->nulls = calloc(cells, sizeof(int64_t));
    t->data = calloc(cells, sizeof(char *));
    t->dlen = calloc(cells, sizeof(int64_t));
    if (!t->offset || !t->count || !t->done || !t->valid || !t->nulls || !t->data || !t->dlen) {
        Py_DECREF(t);
        return PyErr_NoMemory();
    }
    return (PyObject *)t;
}

/* -- the Column object: one finished column, handed to polars through __arrow_c_array__ ------------------- */
typedef struct {
    int kind; /* K_TEXT: string views ("vu"), else int64 ("l") */
    int64_t n, nulls;
    void *values;    /* int64 values or 16-byte views */
    uint8_t *valid;  /* NULL where no value is NULL */
    int ndata;       /* K_TEXT: data buffers (one per part), and their sizes */
    char **data;
    int64_t *sizes;
} Col;

static void col_free(Col *c) {
    free(c->values);
    free(c->valid);
    for (int i = 0; c->data && i < c->ndata; i++) free(c->data[i]);
    free(c->data);
    free(c->sizes);
    memset(c, 0, sizeof *c);
}

typedef struct {
    PyObject_HEAD Col c;
    int handed;
} Column;

typedef struct {
    Col c;
    const void **buffers;
} Owned;

static void release_array(struct ArrowArray *a) {
    Owned *own = a->private_data;
    col_free(&own->c);
    free(own->buffers);
    free(own);
    a->release = NULL;
}

static PyObject *column_arrow(Column *self, PyObject *args, PyObject *kwargs) {
    (void)args;
    (void)kwargs; /* a requested schema is a request, not a demand (the PyCapsule interface): ignored */
    if (self->handed) {
        PyErr_SetString(PyExc_ValueError, "this column was already handed over");
        return NULL;
    }
    int text = self->c.kind == K_TEXT;
    int nbuf = text ? 3 + self->c.ndata : 2; /* views: validity, views, the data buffers, their sizes */
    struct ArrowSchema *s = calloc(1, sizeof *s);
    struct ArrowArray *a = calloc(1, sizeof *a);
    Owned *own = calloc(1, sizeof *own);
    const void **buffers = calloc((size_t)nbuf, sizeof(void *));
    if (!s || !a || !own || !buffers) {
        free(s);
        free(a);
        free(own);
        free(buffers);
        return PyErr_NoMemory();
    }
    own->c = self->c;
    memset(&self->c, 0, sizeof self->c);
    self->handed = 1;
    own->buffers = buffers;
    buffers[0] = own->c.nulls ? own->c.valid : NULL;
    buffers[1] = own->c.values;
    if (text) {
        for (int i = 0; i < own->c.ndata; i++) buffers[2 + i] = own->c.data[i];
        buffers[2 + own->c.ndata] = own->c.sizes;
    }
    s->format = text ? "vu" : "l";
    s->name = "";
    s->flags = ARROW_FLAG_NULLABLE;
    s->release = arrow_release_schema;
    a->length = own->c.n;
    a->null_count = own->c.nulls;
    a->n_buffers = nbuf;
    a->buffers = buffers;
    a->release = release_array;
    a->private_data = own;
    return arrow_capsules(s, a);
}

static Py_ssize_t column_len(Column *self) { return self->handed ? 0 : (Py_ssize_t)self->c.n; }

static void column_dealloc(Column *self) {
    col_free(&self->c);
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
    .tp_doc = "One column read from a table's pages: 64-bit integers or UTF-8 text (string views), with nulls.",
    .tp_methods = COLUMN_METHODS,
    .tp_as_sequence = &COLUMN_SEQ,
};

/* bits [0, n) of ``from`` to bits [at, at + n) of ``to`` (whose bits there are 0) */
static void copy_bits(uint8_t *to, int64_t at, const uint8_t *from, int64_t n) {
    if ((at & 7) == 0) {
        memcpy(to + (at >> 3), from, (size_t)(n >> 3));
        for (int64_t i = n & ~(int64_t)7; i < n; i++)
            if (from[i >> 3] >> (i & 7) & 1) to[(at + i) >> 3] |= (uint8_t)(1u << ((at + i) & 7));
        return;
    }
    int sh = (int)(at & 7);
    for (int64_t i = 0; i < (n + 7) >> 3; i++) {
        uint8_t b = from[i];
        if (i == (n >> 3)) b &= (uint8_t)((1u << (n & 7)) - 1); /* the last, partial byte's bits past n */
        int64_t j = (at >> 3) + i;
        to[j] |= (uint8_t)(b << sh);
        if (b >> (8 - sh)) to[j + 1] |= (uint8_t)(b >> (8 - sh));
    }
}

static PyObject *table_columns(Table *t, PyObject *unused) {
    (void)unused;
    if (t->handed) {
        PyErr_SetString(PyExc_ValueError, "the columns were already taken");
        return NULL;
    }
    int64_t total = 0;
    for (int p = 0; p < t->nparts; p++) {
        if (t->done[p] != 2) {
            PyErr_Format(PyExc_ValueError, "part %d was not read", p);
            return NULL;
        }
        total += t->count[p];
    }
    if (total != t->rows) {
        PyErr_SetString(PyExc_ValueError, "the parts' rows do not add up to the table's");
        return NULL;
    }
    PyObject *cols = PyTuple_New(t->ncols);
    if (!cols) return NULL;
    for (int i = 0; i < t->ncols; i++) {
        Column *c = PyObject_New(Column, &COLUMN_TYPE);
        if (!c) {
            Py_DECREF(cols);
            return NULL;
        }
        memset(&c->c, 0, sizeof c->c);
        c->handed = 0;
        PyTuple_SET_ITEM(cols, i, (PyObject *)c);
        Col *k = &c->c;
        k->kind = t->kinds[i] == K_TEXT ? K_TEXT : K_INT;
        k->n = t->rows;
        for (int p = 0; p < t->nparts; p++) k->nulls += t->nulls[i * t->nparts + p];
        if (k->nulls) {
            k->valid = calloc((size_t)(t->rows + 7) / 8 + 1, 1);
            if (!k->valid) goto nomem;
            for (int p = 0; p < t->nparts; p++)
                if (t->count[p]) copy_bits(k->valid, t->offset[p], t->valid[i * t->nparts + p], t->count[p]);
        }
        if (k->kind == K_TEXT) {
            k->ndata = t->nparts;
            k->data = calloc((size_t)t->nparts, sizeof(char *));
            k->sizes = calloc((size_t)t->nparts + 1, sizeof(int64_t));
            if (!k->data || !k->sizes) goto nomem;
            for (int p = 0; p < t->nparts; p++) {
                char **d = &t->data[i * t->nparts + p];
                if (!*d && !(*d = malloc(1))) goto nomem; /* an empty buffer is still a buffer */
                k->data[p] = *d;
                *d = NULL;
                k->sizes[p] = t->dlen[i * t->nparts + p];
            }
        }
        k->values = t->shared[i];
        t->shared[i] = NULL;
    }
    t->handed = 1;
    table_free_parts(t);
    return cols;
nomem:
    t->handed = 1; /* some buffers went to the columns dropped here: the table cannot give them again */
    Py_DECREF(cols);
    return PyErr_NoMemory();
}

static PyMethodDef TABLE_METHODS[] = {
    {"columns", (PyCFunction)table_columns, METH_NOARGS,
     "columns() -> tuple of Column, once every part was read: each column in one chunk."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject TABLE_TYPE = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_pages.Table",
    .tp_basicsize = sizeof(Table),
    .tp_dealloc = (destructor)table_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Table(kinds, rows, parts): the buffers a table's parts are read into (see read).",
    .tp_methods = TABLE_METHODS,
    .tp_new = table_new,
};

/* -- the module ------------------------------------------------------------------------------------------ */
static const Out *SORT_OUTS;
static int cmp_src(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    int sx = SORT_OUTS[x].kind == K_ROWID ? -1 : SORT_OUTS[x].src;
    int sy = SORT_OUTS[y].kind == K_ROWID ? -1 : SORT_OUTS[y].src;
    return sx < sy ? -1 : sx > sy;
}

/* A part being read: the file mapped, and (find_part) the root's children [lo, hi) that are the part's. */
typedef struct {
    Db db;
    void *map;
    int64_t nchild;
    uint32_t lo, hi;
} Open;

/* The file mapped (under the GIL): 0, or -1 with the reason it cannot be read in ``*why`` or, where ``*why``
 * is NULL, a Python exception set. */
static int open_part(const char *path, Open *op, const char **why) {
    memset(op, 0, sizeof *op);
    *why = NULL;
#ifdef _WIN32
    *why = "not built for this platform";
    return -1;
#else
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
        return -1;
    }
    op->db.size = (uint64_t)st.st_size;
    if (op->db.size < 512) {
        close(fd);
        *why = "shorter than one page";
        return -1;
    }
    void *map = mmap(NULL, (size_t)op->db.size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
        return -1;
    }
    op->map = map;
    op->db.map = map;
    return 0;
#endif
}

static void close_part(Open *op) {
#ifndef _WIN32
    if (op->map) munmap(op->map, (size_t)op->db.size);
#endif
    free(op->db.scratch);
    op->map = NULL;
}

/* Without the GIL: the header checked and the part's share of the root's children found. */
static const char *find_part(Open *op, uint32_t root, unsigned part, unsigned parts) {
    Db *db = &op->db;
    const uint8_t *h = db->map;
    uint32_t ps = get16(h + 16);
    db->psize = ps == 1 ? 65536 : ps;
    if (memcmp(h, "SQLite format 3", 16) != 0) return "no SQLite header";
    if (db->psize < 512 || (db->psize & (db->psize - 1)))
        return "a page size that is not a power of two from 512 to 65536";
    if (h[18] != 1 || h[19] != 1) return "not a rollback-journal file (WAL mode: pages may live in the -wal file)";
    if (get32(h + 56) != 1) return "text that is not UTF-8 (a UTF-16 database)";
    if (h[20] > db->psize - 480) return "reserved space that leaves pages too small";
    db->usable = db->psize - h[20];
    db->npages = (uint32_t)(db->size / db->psize < 0xFFFFFFFFu ? db->size / db->psize : 0xFFFFFFFFu);
    op->nchild = root_children(db, root);
    if (op->nchild < 0) return db->why;
    if (op->nchild == 0) { /* a leaf root: part 0 reads it */
        op->lo = part == 0 ? 0 : 1;
        op->hi = 1;
    } else {
        op->lo = (uint32_t)((uint64_t)op->nchild * part / parts);
        op->hi = (uint32_t)((uint64_t)op->nchild * (part + 1) / parts);
    }
    return NULL;
}

/* The rows of the part (outs) or their count (no outs), once find_part found it. */
static const char *walk_part(Open *op, uint32_t root, Out *outs, int nout, const int *order) {
    Db *db = &op->db;
    if (!((op->nchild > 0 || op->lo == 0) && op->lo < op->hi)) return NULL;
    if (op->nchild == 0) {
        const uint8_t *page = page_at(db, root);
        if (!page) return db->why;
        uint32_t hdr = root == 1 ? 100 : 0;
        if (!outs) {
            uint32_t ncells = get16(page + hdr + 3);
            if (hdr + 8 + 2 * (uint64_t)ncells > db->usable) return "a cell pointer array past its page";
            db->counted += ncells;
            return NULL;
        }
        return read_leaf(db, page, hdr, outs, nout, order) ? db->why : NULL;
    }
    return walk(db, root, op->lo, op->hi, outs, nout, order) ? db->why : NULL;
}

static PyObject *pages_count(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *path;
    unsigned int root, part, parts;
    if (!PyArg_ParseTuple(args, "sIII", &path, &root, &part, &parts)) return NULL;
    if (parts < 1 || part >= parts) {
        PyErr_SetString(PyExc_ValueError, "part must be below parts");
        return NULL;
    }
    Open op;
    const char *why;
    if (open_part(path, &op, &why)) return why ? PyUnicode_FromString(why) : NULL;
    Py_BEGIN_ALLOW_THREADS;
    why = find_part(&op, root, part, parts);
    if (!why) why = walk_part(&op, root, NULL, 0, NULL);
    Py_END_ALLOW_THREADS;
    int64_t counted = op.db.counted;
    close_part(&op);
    return why ? PyUnicode_FromString(why) : PyLong_FromLongLong(counted);
}

static PyObject *pages_read(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *path;
    unsigned int root, part, parts;
    PyObject *spec;
    Table *t;
    Py_ssize_t offset, count;
    if (!PyArg_ParseTuple(args, "sIOIIO!nn", &path, &root, &spec, &part, &parts, &TABLE_TYPE, &t, &offset, &count))
        return NULL;
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 1 || PyTuple_GET_SIZE(spec) > MAX_COLS) {
        PyErr_SetString(PyExc_ValueError, "columns: a tuple of 1 to 64 (kind, index, missing_ok) tuples");
        return NULL;
    }
    if (parts < 1 || part >= parts || (int)parts != t->nparts || t->handed || t->done[part]) {
        PyErr_SetString(PyExc_ValueError, "part must be below parts, the table's, and not read before");
        return NULL;
    }
    if (offset < 0 || count < 0 || offset + count > t->rows) {
        PyErr_SetString(PyExc_ValueError, "the part's rows lie outside the table");
        return NULL;
    }
    int nout = (int)PyTuple_GET_SIZE(spec);
    if (nout != t->ncols) {
        PyErr_SetString(PyExc_ValueError, "the columns are not the table's");
        return NULL;
    }
    Out outs[MAX_COLS];
    int order[MAX_COLS];
    memset(outs, 0, sizeof outs);
    for (int i = 0; i < nout; i++) {
        int kind, src, missing_ok;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(spec, i), "iip", &kind, &src, &missing_ok)) return NULL;
        if (kind < K_INT || kind > K_ROWID || src < 0 || kind != t->kinds[i]) {
            PyErr_SetString(PyExc_ValueError, "a column's kind is 0, 1 or 2 (the table's) and its index at least 0");
            return NULL;
        }
        outs[i] = (Out){.kind = kind, .src = src, .missing_ok = missing_ok, .cap = count, .buf = (int32_t)part};
        if (kind == K_TEXT)
            outs[i].views = (uint8_t *)t->shared[i] + 16 * offset;
        else
            outs[i].v = (int64_t *)t->shared[i] + offset;
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
    t->done[part] = 1; /* started (under the GIL): no other call writes its rows */
    const char *why = NULL;
    for (int i = 0; i < nout && !why; i++)
        if (!(outs[i].valid = malloc((size_t)(count + 7) / 8 + 1))) why = "out of memory";
    Open op;
    if (!why && open_part(path, &op, &why)) {
        for (int i = 0; i < nout; i++) free(outs[i].valid);
        return why ? PyUnicode_FromString(why) : NULL;
    }
    if (!why) {
        Py_BEGIN_ALLOW_THREADS;
        why = find_part(&op, root, part, parts);
        if (!why) why = walk_part(&op, root, outs, nout, order);
        for (int i = 0; i < nout && !why; i++)
            if (outs[i].n != count) why = "fewer rows than its leaves count (a damaged b-tree)";
        Py_END_ALLOW_THREADS;
        close_part(&op);
    }
    if (why) {
        for (int i = 0; i < nout; i++) {
            free(outs[i].valid);
            free(outs[i].data);
        }
        return PyUnicode_FromString(why);
    }
    for (int i = 0; i < nout; i++) {
        t->valid[i * t->nparts + part] = outs[i].valid;
        t->nulls[i * t->nparts + part] = outs[i].nulls;
        t->data[i * t->nparts + part] = outs[i].data;
        t->dlen[i * t->nparts + part] = outs[i].dlen;
    }
    t->offset[part] = offset;
    t->count[part] = count;
    t->done[part] = 2;
    Py_RETURN_NONE;
}

static PyMethodDef METHODS[] = {
    {"count", pages_count, METH_VARARGS,
     "count(path, root, part, parts) -> int, or a str saying why not.\n\n"
     "The rows of ``part`` of ``parts`` (a share of the root's children) of the table whose b-tree is rooted\n"
     "at page ``root``: its leaves' cell counts, no record read."},
    {"read", pages_read, METH_VARARGS,
     "read(path, root, columns, part, parts, table, offset, count) -> None, or a str saying why not.\n\n"
     "The rows of ``part`` of ``parts`` of the table (rooted at page ``root``) in rowid order, written into\n"
     "``table`` (a Table of the columns' kinds) from row ``offset``: exactly ``count`` rows (count's answer),\n"
     "or it declines. ``columns`` is a tuple of (kind, index, missing_ok): kind 0 an integer column, 1 a text\n"
     "column, 2 the rowid; index the column's place in the record; missing_ok whether a record too short to\n"
     "hold it gives NULL. Runs without the GIL; parts of one table may be read at once."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_pages", NULL, -1, METHODS, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__pages(void) {
    if (PyType_Ready(&COLUMN_TYPE) < 0 || PyType_Ready(&TABLE_TYPE) < 0) return NULL;
    PyObject *m = PyModule_Create(&MODULE);
    if (!m) return NULL;
    Py_INCREF(&TABLE_TYPE);
    if (PyModule_AddObject(m, "Table", (PyObject *)&TABLE_TYPE) < 0) {
        Py_DECREF(&TABLE_TYPE);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
