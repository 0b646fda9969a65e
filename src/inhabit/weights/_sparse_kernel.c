/* Compiled inner loop of the sparse delta decoder (inhabit.weights.sparse.apply).
 *
 * The numpy decoder makes about a dozen passes over every block of changes (widen the gaps,
 * prefix-sum them, gather the old values, split them by exponent bucket, scatter each bucket's
 * value bytes, widen, add, scatter the new values); each pass costs 0.1-1.5 ns per change, so a
 * delta with millions of changes spends most of its decode time there. This loop does the same
 * work in one pass per change, reading the same streams and writing the same result bit for bit.
 * It is optional: when it is not built (no C compiler at install), sparse.py uses numpy.
 *
 * apply(target, old, g8, gap_escapes, parts, cuts, value_escapes, itemsize, hash)
 *     -> (done, error, checksum)
 * set_hash(create_state, free_state, reset, update, digest)
 *
 * target   writable buffer of n elements of `itemsize` bytes (little-endian unsigned bit patterns)
 * old      writable buffer of k elements: receives the value of each changed element before it
 *          changed (what undoing the update takes)
 * g8       k gap bytes; 0 marks a gap found in the gap escapes
 * gap_escapes, value_escapes   the escape streams as stored: (u64 index, u64 value) pairs, little
 *          endian; gaps over 255, and values outside -127..127 (marked -128 in the parts)
 * parts    tuple of int8 buffers, one per exponent bucket, in bucket order
 * cuts     tuple of bucket thresholds, already shifted to compare with the magnitude bits
 * hash     whether to take xxh3-64 of the whole target as written (needs `set_hash` first)
 *
 * Returns how many changes were written (all k on success), an error code (0: none) and the
 * checksum of the target after the update (None unless asked for and no error). The
 * escapes are checked before anything is written (indices strictly increasing and below k,
 * escaped gaps 1..n), the rules sparse.py checks before its numpy decoder runs. On a later error
 * the first `done` changes have been written and `old` holds what they replaced, so the caller
 * can restore the target, finding the positions again the way the numpy decoder does (which is
 * why an escape is taken wherever its index says, as numpy does). Positions are bounds-checked
 * before every access.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_BUCKETS 16

enum { OK = 0, E_RANGE = 1, E_GAP = 2, E_SHORT = 3, E_VALUE = 4, E_LEFT = 5, E_ESCAPES = 6 };

typedef struct {
    const uint8_t *g8;
    int64_t k;
    const uint8_t *gaps; /* (index, gap) pairs */
    int64_t n_gap;
    const int8_t *parts[MAX_BUCKETS];
    int64_t part_len[MAX_BUCKETS];
    uint64_t cuts[MAX_BUCKETS];
    int n_cuts;
    const uint8_t *values; /* (index, value) pairs */
    int64_t n_val;
} Streams;

/* Word w of an escape stream (2e: index of escape e, 2e + 1: its value); memcpy because a
 * stream inside a blob has no alignment. */
static inline uint64_t word(const uint8_t *stream, int64_t w) {
    uint64_t v;
    memcpy(&v, stream + 8 * w, 8);
    return v;
}

/* Index of escape e of a stream, or INT64_MAX once the stream is used up (no change has it). */
static inline int64_t next_index(const uint8_t *stream, int64_t e, int64_t count) {
    return e < count ? (int64_t)word(stream, 2 * e) : INT64_MAX;
}

static int check_escapes(const uint8_t *stream, int64_t count, int64_t k, int64_t max_value) {
    uint64_t prev = 0;
    for (int64_t e = 0; e < count; e++) {
        const uint64_t idx = word(stream, 2 * e);
        if (idx >= (uint64_t)k || (e > 0 && idx <= prev)) return E_ESCAPES;
        prev = idx;
        if (max_value > 0) {
            const uint64_t v = word(stream, 2 * e + 1);
            if (v < 1 || v > (uint64_t)max_value) return E_ESCAPES;
        }
    }
    return OK;
}

/* xxh3-64 (the per-tensor checksum), taken from the xxhash module that Python already loaded:
 * sparse.py hands over the addresses of its exported streaming functions once (`set_hash`).
 * With them the loop hashes each region of the target right after writing it, while the region
 * is still in cache, instead of the caller reading the whole tensor from memory again. */
typedef void *(*xxh_create_fn)(void);
typedef int (*xxh_free_fn)(void *);
typedef int (*xxh_reset_fn)(void *);
typedef int (*xxh_update_fn)(void *, const void *, size_t);
typedef uint64_t (*xxh_digest_fn)(const void *);
static struct {
    xxh_create_fn create;
    xxh_free_fn free;
    xxh_reset_fn reset;
    xxh_update_fn update;
    xxh_digest_fn digest;
} xxh;

/* One loop per element width, over the target in regions of REGION bytes, in address order:
 * a first pass over the region loads one byte of each cache line, then the changes that land in
 * the region are applied, then the region is hashed. At RL learning rates a change lands every
 * 10-100 elements, irregularly: a loop that visits only the changed elements waits on memory for
 * nearly every one (the hardware prefetcher cannot follow it), and the checksum then reads every
 * line from memory again. The first pass issues independent loads in address order, which the
 * prefetcher follows and which overlap one another; after it, both the changes and the hash find
 * the region in cache. Measured on bf16 deltas of 1.4-2.4% changed, all of a 65 MB state: the
 * loop plus the hash in about half the time of the block loop with separate prefetches that came
 * before it plus a separate hash pass; software prefetches ahead of the region (1-8 regions,
 * read or write intent) were slower than none, and regions of 2-4 KiB beat 1 KiB and 8 KiB.
 *
 * The bucket of a change is how many cuts its old magnitude reaches (the sign bit masked off),
 * the same rule the encoder used to split the value bytes. */
#define REGION 4096
#define LINE 64

/* Position of change i (pos: the previous one), or an error; the gap escape wins over the gap
 * byte, as in numpy. Keeps next_ge, the index of the next gap escape, up to date. */
#define NEXT_POSITION()                                                                          \
    do {                                                                                         \
        int64_t g = s->g8[i];                                                                    \
        if (i == next_ge) {                                                                      \
            g = (int64_t)word(s->gaps, 2 * ge++ + 1);                                            \
            next_ge = next_index(s->gaps, ge, s->n_gap);                                         \
        } else if (g == 0) {                                                                     \
            *err = E_GAP;                                                                        \
            return i;                                                                            \
        }                                                                                        \
        if (g > n - 1 - pos) {                                                                   \
            *err = E_RANGE;                                                                      \
            return i;                                                                            \
        }                                                                                        \
        pos += g;                                                                                \
    } while (0)

/* A run of the fast path (see below): changes i..stop - 1 at most, while positions stay below r1.
 * In its own function so that its state stays in registers (inlined into the general loop, the
 * compiler spilled half of it to the stack). Returns why it stopped. */
typedef struct {
    int64_t i, pos;
    const int8_t *p0, *p1; /* the next value byte of each bucket */
} Run;

enum { RUN_DONE = 0, RUN_GAP = 1, RUN_VALUE = 2 };

#define DEFINE_RUN(T, NAME)                                                                      \
    __attribute__((noinline)) static int NAME(T *t, T *old,                                     \
                                              const uint8_t *g8, Run *run, int64_t stop,          \
                                              int64_t r1, int64_t next_ge, T cut) {              \
        const T magnitude = (T)(((T)~(T)0) >> 1);                                               \
        int64_t i = run->i, pos = run->pos;                                                     \
        const int8_t *p0 = run->p0, *p1 = run->p1;                                              \
        int how = RUN_DONE;                                                                     \
        do {                                                                                    \
            const int8_t d0 = *p0, d1 = *p1;                                                    \
            const T o = t[pos];                                                                 \
            old[i] = o;                                                                         \
            const int64_t b = (T)(o & magnitude) >= cut;                                        \
            const int8_t d = (int8_t)(d0 ^ ((d0 ^ d1) & -(int8_t)b));                           \
            if (d == -128) { /* a marker with no value escape (none comes before stop) */       \
                how = RUN_VALUE;                                                                \
                break;                                                                          \
            }                                                                                   \
            p0 += 1 - b;                                                                        \
            p1 += b;                                                                            \
            t[pos] = (T)(o + (T)(int64_t)d);                                                    \
            const int64_t g = g8[++i]; /* i <= stop <= k - 1 */                                 \
            if (g == 0 || i == next_ge) { /* the general path decodes this position */          \
                how = RUN_GAP;                                                                  \
                break;                                                                          \
            }                                                                                   \
            pos += g;                                                                           \
        } while (i < stop && pos < r1);                                                         \
        run->i = i;                                                                             \
        run->pos = pos;                                                                         \
        run->p0 = p0;                                                                           \
        run->p1 = p1;                                                                           \
        return how;                                                                             \
    }

DEFINE_RUN(uint8_t, apply_u8_run)
DEFINE_RUN(uint16_t, apply_u16_run)
DEFINE_RUN(uint32_t, apply_u32_run)
DEFINE_RUN(uint64_t, apply_u64_run)

/* The loop has two paths over the changes of a region. The general one takes any number of
 * buckets, every escape and every check, one change at a time. The fast one takes the common
 * case, one or two buckets (the codec's default), in a run of changes that holds no value escape
 * and cannot empty a bucket (a run is at most as long as the smaller bucket's remaining bytes),
 * so it needs no per-change bounds or escape lookups: its state stays in registers, and the
 * bucket of a change picks between the two next value bytes, both loaded ahead, with a select
 * instead of a branch (the buckets split the changes about evenly and at random, so a branch
 * there mispredicts every other change). The general path's per-bucket read positions live in
 * an array indexed by the bucket, so every change waited on the previous change's store to it;
 * at 8% changed the fast path takes about half the time per change. A run stops at a gap byte of
 * 0 or a gap escape (the general path decodes that position, with its range check), at the
 * region's end, and before the last change; a position past the tensor's end that a run leaves
 * behind ends every later region's loop at once and is reported after the last region, as the
 * range check would have. */
#define DEFINE_APPLY(T, NAME)                                                                    \
    static int64_t NAME(T *t, int64_t n, T *old, const Streams *s, void *hash, int *err) {      \
        const T magnitude = (T)(((T)~(T)0) >> 1);                                               \
        const int64_t per_region = REGION / (int64_t)sizeof(T);                                 \
        const int64_t k = s->k;                                                                 \
        const uint8_t *const g8 = s->g8;                                                        \
        int64_t pos = -1, ge = 0, ve = 0, i = 0;                                                \
        int64_t next_ge = next_index(s->gaps, 0, s->n_gap);                                     \
        int64_t next_ve = next_index(s->values, 0, s->n_val);                                   \
        int64_t used[MAX_BUCKETS] = {0};                                                        \
        /* The fast path's bucket rule: one cut, or none (no magnitude has the top bit). */     \
        const int fast = s->n_cuts <= 1;                                                        \
        const T cut = s->n_cuts == 1 ? (T)s->cuts[0] : (T)((uint64_t)magnitude + 1);             \
        if (k > 0) NEXT_POSITION();                                                             \
        for (int64_t r0 = 0; r0 < n; r0 += per_region) {                                        \
            const int64_t r1 = n - r0 < per_region ? n : r0 + per_region;                       \
            uint8_t touched = 0;                                                                \
            for (const volatile uint8_t *p = (const volatile uint8_t *)(t + r0);               \
                 p < (const volatile uint8_t *)(t + r1); p += LINE)                             \
                touched ^= *p;                                                                  \
            (void)touched;                                                                      \
            while (i < k && pos < r1) {                                                         \
                if (fast) {                                                                     \
                    int64_t stop = k - 1 < next_ve ? k - 1 : next_ve;                           \
                    const int64_t room0 = s->part_len[0] - used[0];                             \
                    const int64_t room1 = s->n_cuts ? s->part_len[1] - used[1] : INT64_MAX;     \
                    if (room0 < stop - i) stop = i + room0;                                     \
                    if (room1 < stop - i) stop = i + room1;                                     \
                    if (i < stop) {                                                             \
                        Run run = {i, pos, s->parts[0] + used[0],                               \
                                   /* One bucket: b is always 0, p1 stays on a byte it may read. */\
                                   s->n_cuts ? s->parts[1] + used[1] : s->parts[0] + used[0]};  \
                        const int how = NAME##_run(t, old, g8, &run, stop, r1, next_ge, cut);  \
                        i = run.i;                                                              \
                        pos = run.pos;                                                          \
                        used[0] = run.p0 - s->parts[0];                                         \
                        if (s->n_cuts) used[1] = run.p1 - s->parts[1];                          \
                        if (how == RUN_VALUE) {                                                 \
                            *err = E_VALUE;                                                     \
                            return i;                                                           \
                        }                                                                       \
                        if (how == RUN_GAP) NEXT_POSITION();                                    \
                        continue;                                                               \
                    }                                                                           \
                }                                                                               \
                const T o = t[pos];                                                             \
                old[i] = o;                                                                     \
                const T mag = (T)(o & magnitude);                                               \
                int b = 0;                                                                      \
                for (int c = 0; c < s->n_cuts; c++) b += mag >= (T)s->cuts[c];                  \
                if (used[b] >= s->part_len[b]) {                                                \
                    *err = E_SHORT;                                                             \
                    return i;                                                                   \
                }                                                                               \
                const int8_t d = s->parts[b][used[b]++];                                        \
                T diff = (T)(int64_t)d; /* sign-extended: -1 is all ones, a wrapping subtract */\
                if (i == next_ve) {                                                             \
                    diff = (T)word(s->values, 2 * ve++ + 1);                                    \
                    next_ve = next_index(s->values, ve, s->n_val);                              \
                } else if (d == -128) {                                                         \
                    *err = E_VALUE;                                                             \
                    return i;                                                                   \
                }                                                                               \
                t[pos] = (T)(o + diff);                                                         \
                if (++i < k) NEXT_POSITION();                                                   \
            }                                                                                   \
            if (hash) xxh.update(hash, t + r0, (size_t)(r1 - r0) * sizeof(T));                  \
        }                                                                                       \
        if (i < k) { /* the fast path's last position ran past the end */                       \
            *err = E_RANGE;                                                                     \
            return i;                                                                           \
        }                                                                                       \
        if (ge != s->n_gap || ve != s->n_val) *err = E_LEFT;                                    \
        return k;                                                                               \
    }

DEFINE_APPLY(uint8_t, apply_u8)
DEFINE_APPLY(uint16_t, apply_u16)
DEFINE_APPLY(uint32_t, apply_u32)
DEFINE_APPLY(uint64_t, apply_u64)

static PyObject *apply(PyObject *self, PyObject *args) {
    Py_buffer target = {0}, old = {0}, g8 = {0}, gaps = {0}, values = {0};
    Py_buffer parts[MAX_BUCKETS];
    PyObject *parts_obj, *cuts_obj, *result = NULL;
    int itemsize, want_hash = 0, n_parts = 0;
    if (!PyArg_ParseTuple(args, "w*w*y*y*O!O!y*i|p", &target, &old, &g8, &gaps, &PyTuple_Type, &parts_obj,
                          &PyTuple_Type, &cuts_obj, &values, &itemsize, &want_hash))
        return NULL;
    void *hash = NULL;
    uint64_t digest = 0;
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
    if (target.len % itemsize || old.len != g8.len * itemsize) {
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
    s.gaps = gaps.buf;
    s.n_gap = gaps.len / 16;
    s.values = values.buf;
    s.n_val = values.len / 16;
    int64_t n = target.len / itemsize, written = 0;
    int err = OK;
    if (want_hash) {
        if (xxh.create == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "set_hash was not called");
            goto done;
        }
        hash = xxh.create();
        if (hash == NULL || xxh.reset(hash) != 0) {
            PyErr_NoMemory();
            goto done;
        }
    }
    if (gaps.len % 16 || values.len % 16) {
        err = E_ESCAPES; /* a torn stream */
    } else {
        /* Only the buffers held above are touched, so other Python threads may run meanwhile
         * (the subscriber decodes tensors on a thread pool). */
        Py_BEGIN_ALLOW_THREADS
        err = check_escapes(s.gaps, s.n_gap, s.k, n);
        if (err == OK) err = check_escapes(s.values, s.n_val, s.k, 0);
        if (err == OK) {
            switch (itemsize) {
                case 1: written = apply_u8(target.buf, n, old.buf, &s, hash, &err); break;
                case 2: written = apply_u16(target.buf, n, old.buf, &s, hash, &err); break;
                case 4: written = apply_u32(target.buf, n, old.buf, &s, hash, &err); break;
                default: written = apply_u64(target.buf, n, old.buf, &s, hash, &err); break;
            }
        }
        if (hash != NULL && err == OK) digest = xxh.digest(hash);
        Py_END_ALLOW_THREADS
    }
    if (hash != NULL && err == OK)
        result = Py_BuildValue("(LiK)", (long long)written, err, (unsigned long long)digest);
    else
        result = Py_BuildValue("(LiO)", (long long)written, err, Py_None);
done:
    if (hash != NULL) xxh.free(hash);
    for (int i = 0; i < n_parts; i++) PyBuffer_Release(&parts[i]);
    PyBuffer_Release(&target);
    PyBuffer_Release(&old);
    PyBuffer_Release(&g8);
    PyBuffer_Release(&gaps);
    PyBuffer_Release(&values);
    return result;
}

/* The addresses of xxhash's XXH3_createState, XXH3_freeState, XXH3_64bits_reset,
 * XXH3_64bits_update and XXH3_64bits_digest, as integers (sparse.py finds them with ctypes). */
static PyObject *set_hash(PyObject *self, PyObject *args) {
    unsigned long long f[5];
    if (!PyArg_ParseTuple(args, "KKKKK", &f[0], &f[1], &f[2], &f[3], &f[4])) return NULL;
    for (int i = 0; i < 5; i++) {
        if (f[i] == 0) {
            PyErr_SetString(PyExc_ValueError, "a null function address");
            return NULL;
        }
    }
    xxh.create = (xxh_create_fn)(uintptr_t)f[0];
    xxh.free = (xxh_free_fn)(uintptr_t)f[1];
    xxh.reset = (xxh_reset_fn)(uintptr_t)f[2];
    xxh.update = (xxh_update_fn)(uintptr_t)f[3];
    xxh.digest = (xxh_digest_fn)(uintptr_t)f[4];
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"apply", apply, METH_VARARGS, "Apply a sparse delta's streams to a target buffer in place."},
    {"set_hash", set_hash, METH_VARARGS, "Hand over xxhash's streaming xxh3-64 functions."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sparse_kernel", "Compiled inner loop of the sparse delta decoder.", -1, methods,
};

PyMODINIT_FUNC PyInit__sparse_kernel(void) { return PyModule_Create(&module); }
