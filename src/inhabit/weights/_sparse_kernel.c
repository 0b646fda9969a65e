/* Compiled inner loop of the sparse delta decoder (inhabit.weights.sparse.apply).
 *
 * The numpy decoder makes about a dozen passes over every block of changes (widen the gaps,
 * prefix-sum them, gather the old values, split them by exponent bucket, scatter each bucket's
 * value bytes, widen, add, scatter the new values); each pass costs 0.1-1.5 ns per change, so a
 * delta with millions of changes spends most of its decode time there. This loop does the same
 * work in one pass per change, reading the same streams and writing the same result bit for bit.
 * It is optional: when it is not built (no C compiler at install), sparse.py uses numpy.
 *
 * apply(target, old, g8, gap_idx, gap_val, parts, cuts, val_idx, val_val, itemsize)
 *     -> (done, error)
 *
 * target   writable buffer of n elements of `itemsize` bytes (little-endian unsigned bit patterns)
 * old      writable buffer of k elements: receives the value of each changed element before it
 *          changed (what undoing the update takes)
 * g8       k gap bytes; 0 marks a gap found in the (gap_idx, gap_val) escapes
 * gap_idx, gap_val   int64 arrays; gap_val >= 1 and gap_idx strictly increasing (the caller checks)
 * parts    tuple of int8 buffers, one per exponent bucket, in bucket order
 * cuts     tuple of bucket thresholds, already shifted to compare with the magnitude bits
 * val_idx, val_val   int64 / uint64 arrays: values outside -127..127 (marked -128 in the parts)
 *
 * Returns how many changes were written (all k on success) and an error code (0: none). On an
 * error the first `done` changes have been written and `old` holds what they replaced, so the
 * caller can restore the target, finding the positions again the way the numpy decoder does
 * (which is why an escape is taken wherever its index says, as numpy does). Positions are
 * bounds-checked before every access.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define MAX_BUCKETS 16

enum { OK = 0, E_RANGE = 1, E_GAP = 2, E_SHORT = 3, E_VALUE = 4, E_LEFT = 5 };

typedef struct {
    const uint8_t *g8;
    int64_t k;
    const int64_t *gap_idx, *gap_val;
    int64_t n_gap;
    const int8_t *parts[MAX_BUCKETS];
    int64_t part_len[MAX_BUCKETS];
    uint64_t cuts[MAX_BUCKETS];
    int n_cuts;
    const int64_t *val_idx;
    const uint64_t *val_val;
    int64_t n_val;
} Streams;

/* One loop per element width. The bucket of a change is how many cuts its old magnitude reaches
 * (the sign bit masked off), the same rule the encoder used to split the value bytes. */
#define DEFINE_APPLY(T, NAME)                                                                    \
    static int64_t NAME(T *t, int64_t n, T *old, const Streams *s, int *err) {                  \
        const T magnitude = (T)(((T)~(T)0) >> 1);                                               \
        int64_t pos = -1, ge = 0, ve = 0;                                                       \
        int64_t used[MAX_BUCKETS] = {0};                                                        \
        for (int64_t i = 0; i < s->k; i++) {                                                    \
            int64_t g = s->g8[i];                                                               \
            if (ge < s->n_gap && s->gap_idx[ge] == i) { /* as numpy: the escape wins */          \
                g = s->gap_val[ge++];                                                           \
            } else if (g == 0) {                                                                \
                *err = E_GAP;                                                                   \
                return i;                                                                       \
            }                                                                                   \
            if (g > n - 1 - pos) {                                                              \
                *err = E_RANGE;                                                                 \
                return i;                                                                       \
            }                                                                                   \
            pos += g;                                                                           \
            const T o = t[pos];                                                                 \
            old[i] = o;                                                                         \
            const T mag = (T)(o & magnitude);                                                   \
            int b = 0;                                                                          \
            for (int c = 0; c < s->n_cuts; c++) b += mag >= (T)s->cuts[c];                      \
            if (used[b] >= s->part_len[b]) {                                                    \
                *err = E_SHORT;                                                                 \
                return i;                                                                       \
            }                                                                                   \
            const int8_t d = s->parts[b][used[b]++];                                            \
            T diff = (T)(int64_t)d; /* sign-extended: -1 is all ones, a wrapping subtract */    \
            if (ve < s->n_val && s->val_idx[ve] == i) {                                         \
                diff = (T)s->val_val[ve++];                                                     \
            } else if (d == -128) {                                                             \
                *err = E_VALUE;                                                                 \
                return i;                                                                       \
            }                                                                                   \
            t[pos] = (T)(o + diff);                                                             \
        }                                                                                       \
        if (ge != s->n_gap || ve != s->n_val) *err = E_LEFT;                                    \
        return s->k;                                                                            \
    }

DEFINE_APPLY(uint8_t, apply_u8)
DEFINE_APPLY(uint16_t, apply_u16)
DEFINE_APPLY(uint32_t, apply_u32)
DEFINE_APPLY(uint64_t, apply_u64)

static PyObject *apply(PyObject *self, PyObject *args) {
    Py_buffer target = {0}, old = {0}, g8 = {0}, gi = {0}, gv = {0}, vi = {0}, vv = {0};
    Py_buffer parts[MAX_BUCKETS];
    PyObject *parts_obj, *cuts_obj, *result = NULL;
    int itemsize, n_parts = 0;
    if (!PyArg_ParseTuple(args, "w*w*y*y*y*O!O!y*y*i", &target, &old, &g8, &gi, &gv, &PyTuple_Type,
                          &parts_obj, &PyTuple_Type, &cuts_obj, &vi, &vv, &itemsize))
        return NULL;
    Streams s = {0};
    Py_ssize_t n_buckets = PyTuple_GET_SIZE(parts_obj);
    if (itemsize != 1 && itemsize != 2 && itemsize != 4 && itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "itemsize must be 1, 2, 4 or 8");
        goto done;
    }
    if (n_buckets < 1 || n_buckets > MAX_BUCKETS || PyTuple_GET_SIZE(cuts_obj) != n_buckets - 1) {
        PyErr_SetString(PyExc_ValueError, "need 1-16 value parts and one cut fewer");
        goto done;
    }
    if (target.len % itemsize || old.len != g8.len * itemsize || gi.len != gv.len || gi.len % 8 ||
        vi.len != vv.len || vi.len % 8) {
        PyErr_SetString(PyExc_ValueError, "buffer sizes do not match");
        goto done;
    }
    for (; n_parts < n_buckets; n_parts++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(parts_obj, n_parts), &parts[n_parts], PyBUF_SIMPLE) < 0)
            goto done;
        s.parts[n_parts] = parts[n_parts].buf;
        s.part_len[n_parts] = parts[n_parts].len;
    }
    for (Py_ssize_t c = 0; c < n_buckets - 1; c++) {
        s.cuts[c] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(cuts_obj, c));
        if (PyErr_Occurred()) goto done;
    }
    s.n_cuts = (int)(n_buckets - 1);
    s.g8 = g8.buf;
    s.k = g8.len;
    s.gap_idx = gi.buf;
    s.gap_val = gv.buf;
    s.n_gap = gi.len / 8;
    s.val_idx = vi.buf;
    s.val_val = vv.buf;
    s.n_val = vi.len / 8;
    int64_t n = target.len / itemsize, written = 0;
    int err = OK;
    /* Only the buffers held above are touched, so other Python threads may run meanwhile (the
     * subscriber decodes tensors on a thread pool). */
    Py_BEGIN_ALLOW_THREADS
    switch (itemsize) {
        case 1: written = apply_u8(target.buf, n, old.buf, &s, &err); break;
        case 2: written = apply_u16(target.buf, n, old.buf, &s, &err); break;
        case 4: written = apply_u32(target.buf, n, old.buf, &s, &err); break;
        default: written = apply_u64(target.buf, n, old.buf, &s, &err); break;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(Li)", (long long)written, err);
done:
    for (int i = 0; i < n_parts; i++) PyBuffer_Release(&parts[i]);
    PyBuffer_Release(&target);
    PyBuffer_Release(&old);
    PyBuffer_Release(&g8);
    PyBuffer_Release(&gi);
    PyBuffer_Release(&gv);
    PyBuffer_Release(&vi);
    PyBuffer_Release(&vv);
    return result;
}

static PyMethodDef methods[] = {
    {"apply", apply, METH_VARARGS, "Apply a sparse delta's streams to a target buffer in place."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sparse_kernel", "Compiled inner loop of the sparse delta decoder.", -1, methods,
};

PyMODINIT_FUNC PyInit__sparse_kernel(void) { return PyModule_Create(&module); }
