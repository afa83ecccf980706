/* Arrow's C data interface (https://arrow.apache.org/docs/format/CDataInterface.html) as tracekit's C modules
 * use it to hand columns to polars and take them from it (the PyCapsule interface): the structs, and the
 * capsules' destructors. Included by analyzers/readers/nsys/_pages.c; needs Python.h
 * first.
 */
#ifndef TRACEKIT_ARROW_H
#define TRACEKIT_ARROW_H

#include <stdint.h>
#include <stdlib.h>

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

#define ARROW_FLAG_NULLABLE 2

/* A schema whose strings are static: nothing to free. */
static void arrow_release_schema(struct ArrowSchema *s) { s->release = NULL; }

/* The capsules' destructors: what the consumer did not take is released, and the struct freed. */
static void arrow_schema_capsule_free(PyObject *cap) {
    struct ArrowSchema *s = PyCapsule_GetPointer(cap, "arrow_schema");
    if (s && s->release) s->release(s);
    free(s);
}

static void arrow_array_capsule_free(PyObject *cap) {
    struct ArrowArray *a = PyCapsule_GetPointer(cap, "arrow_array");
    if (a && a->release) a->release(a);
    free(a);
}

/* ``s`` and ``a`` (malloc'd, filled) as a (schema, array) capsule pair; on failure both are released and freed. */
static PyObject *arrow_capsules(struct ArrowSchema *s, struct ArrowArray *a) {
    PyObject *sc = PyCapsule_New(s, "arrow_schema", arrow_schema_capsule_free);
    if (!sc) {
        a->release(a);
        free(a);
        free(s);
        return NULL;
    }
    PyObject *ac = PyCapsule_New(a, "arrow_array", arrow_array_capsule_free);
    if (!ac) {
        Py_DECREF(sc);
        a->release(a);
        free(a);
        return NULL;
    }
    return Py_BuildValue("(NN)", sc, ac);
}

#endif
