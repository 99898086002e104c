/* A training forward's saved values in a few blocks.
 *
 * The values a compiled forward computes for its backward (activations,
 * masks) are not one torch tensor each: a few hundred torch allocations a
 * step, each made, converted and saved, were most of a GPT-2 step's host
 * time. They are placed (ptc_host.alloc_output) in SAVED_BLOCKS torch
 * allocations of bytes, and a SavedLayout records where each sits (block,
 * offset, dtype, sizes); only the blocks go to save_for_backward, and the
 * backward takes its saved inputs as ptc tensors into them (cap_ready),
 * with no torch tensor per value.
 *
 * The blocks follow the backward's order of last reads: the first holds the
 * values the backward lets go first, and so on, each about the same bytes.
 * A block is freed when the last of its values has been read, so the
 * backward holds at most one block's worth more than with a tensor each
 * (1/SAVED_BLOCKS of the saved bytes), where one block would hold them all
 * to its end. A block is allocated when the forward makes its first value.
 */
#include "capture/backend/backend.h"

#ifdef PTC_HAVE_RUNTIME

#include <stdlib.h>
#include <string.h>

#include "runtime/runtime.h"

enum { SAVED_BLOCKS = CAP_SAVED_BLOCKS, BLOCK_ALIGN = 256 };

struct cap_placing {
    int first, n;       /* forward outputs [first, first + n): the values to place */
    const int *order;   /* [n]: those values (0..n-1) in the backward's last-read order */
    int *block;         /* [n]: the block of each (-1: not placed) */
    bool *placed;       /* [n]: the run made it in its block (an output the run
                           makes as another's, a repeated value, never asks) */
    int64_t *offset;    /* [n]: its byte offset in the block */
    bool planned;       /* at the run's first output, from all the outputs' sizes */
    int nblocks;
    int64_t bytes[SAVED_BLOCKS];
    PyObject *blocks[SAVED_BLOCKS]; /* torch uint8 tensors, NULL until first needed */
    ptc_tensor *as;                 /* [n]: each placed value as the run made it */
};

static int64_t aligned(int64_t bytes)
{
    return (bytes + BLOCK_ALIGN - 1) / BLOCK_ALIGN * BLOCK_ALIGN;
}

static int64_t value_bytes(const ptc_tensor *t)
{
    return t->ndim < 0 ? 0 : ptc_tensor_numel(t) * (int64_t)ptc_dtype_size(t->dtype);
}

static int64_t placeable_bytes(const ptc_tensor *t)
{
    return t->data || t->storage ? 0 : value_bytes(t);
}

/* Blocks of about equal bytes over the values the run allocates, in
 * last-read order (a value with no bytes stays a tensor of its own, as does
 * one already made: an extern's result handed over as the output before the
 * run's first allocation, which would hold room in a block it never goes
 * to). */
static void plan(cap_placing *pl, const ptc_tensor *outs)
{
    int64_t total = 0;
    for (int j = 0; j < pl->n; j++)
        total += aligned(placeable_bytes(&outs[pl->first + j]));
    int64_t share = (total + SAVED_BLOCKS - 1) / SAVED_BLOCKS;
    for (int k = 0; k < pl->n; k++) {
        int j = pl->order[k];
        int64_t bytes = aligned(placeable_bytes(&outs[pl->first + j]));
        pl->block[j] = -1;
        if (bytes == 0)
            continue;
        if (pl->nblocks == 0 ||
            (pl->bytes[pl->nblocks - 1] >= share && pl->nblocks < SAVED_BLOCKS))
            pl->nblocks++;
        int b = pl->nblocks - 1;
        pl->block[j] = b;
        pl->offset[j] = pl->bytes[b];
        pl->bytes[b] += bytes;
    }
    pl->planned = true;
}

static PyObject *new_block(int64_t bytes, ptc_device dev)
{
    PyObject *device = cap_device_obj(dev);
    PyObject *kw = device ? Py_BuildValue("{s:O,s:N}", "dtype", cap_dtype_obj(PTC_U8), "device",
                                          device)
                          : NULL;
    PyObject *args = kw ? Py_BuildValue("((L))", (long long)bytes) : NULL;
    PyObject *t = args ? PyObject_Call(cap_T.empty, args, kw) : NULL;
    Py_XDECREF(args);
    Py_XDECREF(kw);
    return t;
}

static char *data_of(PyObject *tensor)
{
    PyObject *ptr = PyObject_CallMethodObjArgs(tensor, cap_T.s_data_ptr, NULL);
    char *data = ptr ? PyLong_AsVoidPtr(ptr) : NULL;
    Py_XDECREF(ptr);
    return data;
}

int cap_placing_alloc(void *ctx, int i, ptc_tensor *outs, int noutputs, ptc_error *err)
{
    cap_placing *pl = ctx;
    int j = i - pl->first;
    if (j < 0 || j >= pl->n || pl->first + pl->n > noutputs)
        return 0;
    if (!pl->planned)
        plan(pl, outs);
    int b = pl->block[j];
    if (b < 0 || outs[i].ndim < 0)
        return 0;
    PyGILState_STATE g = PyGILState_Ensure();
    if (!pl->blocks[b])
        pl->blocks[b] = new_block(pl->bytes[b], outs[i].device);
    char *data = pl->blocks[b] ? data_of(pl->blocks[b]) : NULL;
    PyErr_Clear();
    PyGILState_Release(g);
    if (!data)
        return ptc_errorf(err, PTC_ERR_RUNTIME, "runtime", "torch could not allocate a block of "
                          "saved values (%lld bytes)", (long long)pl->bytes[b]);
    ptc_tensor *o = &outs[i];
    ptc_device device = o->device; /* the borrow below says CPU */
    *o = ptc_tensor_borrow(data + pl->offset[j], o->dtype, o->ndim, o->sizes, NULL);
    o->device = device;
    pl->as[j] = *o;
    pl->placed[j] = true;
    return 1;
}

void cap_placing_hook(const cap_run_io *io, ptc_host *host)
{
    host->alloc_output = io && io->placing ? cap_placing_alloc : NULL;
    host->output_ctx = io ? io->placing : NULL;
}

bool cap_placing_took(const cap_run_io *io, int i)
{
    const cap_placing *pl = io ? io->placing : NULL;
    int j = pl ? i - pl->first : -1;
    return pl && j >= 0 && j < pl->n && pl->placed[j];
}

int cap_ready_input(const cap_run_io *io, int i, ptc_tensor *t, PyObject **held)
{
    cap_ready *r = io && io->ready ? &io->ready[i] : NULL;
    if (!r || !r->owner)
        return 0;
    *t = r->t;
    *held = r->owner; /* taken over */
    r->owner = NULL;
    return 1;
}

cap_placing *cap_placing_new(int first, int n, const int *order)
{
    cap_placing *pl = calloc(1, sizeof *pl);
    if (pl && (!(pl->block = calloc((size_t)n + 1, sizeof *pl->block)) ||
               !(pl->offset = calloc((size_t)n + 1, sizeof *pl->offset)) ||
               !(pl->placed = calloc((size_t)n + 1, sizeof *pl->placed)) ||
               !(pl->as = calloc((size_t)n + 1, sizeof *pl->as)))) {
        cap_placing_free(pl);
        return NULL;
    }
    if (pl) {
        pl->first = first;
        pl->n = n;
        pl->order = order;
    }
    return pl;
}

void cap_placing_free(cap_placing *pl)
{
    if (!pl)
        return;
    for (int b = 0; b < SAVED_BLOCKS; b++)
        Py_XDECREF(pl->blocks[b]);
    free(pl->block);
    free(pl->offset);
    free(pl->placed);
    free(pl->as);
    free(pl);
}

/* ---- SavedLayout: where the saved values of one forward run sit ----------- */

typedef struct saved_entry {
    int block;      /* -1: a tensor of its own among the saved tensors */
    int64_t offset; /* bytes into the block */
    ptc_tensor as;  /* dtype, sizes, strides, device (data: offset from NULL) */
} saved_entry;

struct cap_saved_layout {
    PyObject_HEAD int nsaved, nblocks, nloose; /* nloose: saved values not in a block */
    saved_entry *entries;                      /* [nsaved] */
};

static PyObject *layout_type;

static void layout_dealloc(PyObject *self)
{
    cap_saved_layout *l = (cap_saved_layout *)self;
    free(l->entries);
    PyTypeObject *type = Py_TYPE(self);
    freefunc free_fn = (freefunc)PyType_GetSlot(type, Py_tp_free);
    free_fn(self);
    Py_DECREF(type);
}

/* entries: per saved value, None (a tensor of its own) or (block, byte
 * offset, dtype, sizes). */
static PyObject *layout_entries(PyObject *self, void *unused)
{
    (void)unused;
    const cap_saved_layout *l = (const cap_saved_layout *)self;
    PyObject *r = PyTuple_New(l->nsaved);
    for (int k = 0; r && k < l->nsaved; k++) {
        const saved_entry *e = &l->entries[k];
        PyObject *sizes = PyTuple_New(e->as.ndim);
        for (int d = 0; sizes && d < e->as.ndim; d++)
            PyTuple_SetItem(sizes, d, PyLong_FromLongLong(e->as.sizes[d]));
        PyObject *v = e->block < 0 ? Py_NewRef(Py_None)
                      : sizes     ? Py_BuildValue("(iLOO)", e->block, (long long)e->offset,
                                                  cap_dtype_obj(e->as.dtype), sizes)
                                  : NULL;
        Py_XDECREF(sizes);
        if (!v)
            Py_CLEAR(r);
        else
            PyTuple_SetItem(r, k, v);
    }
    return r;
}

static PyObject *layout_nblocks(PyObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromLong(((cap_saved_layout *)self)->nblocks);
}

static PyGetSetDef layout_getset[] = {
    {"entries", layout_entries, NULL,
     "per saved value: None (a tensor of its own) or (block, byte offset, dtype, sizes)", NULL},
    {"nblocks", layout_nblocks, NULL, "the blocks, after the saved values of their own", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot layout_slots[] = {
    {Py_tp_dealloc, layout_dealloc},
    {Py_tp_getset, layout_getset},
    {Py_tp_doc, "Where a compiled forward's saved values sit in its blocks of bytes."},
    {0, NULL}};

static PyType_Spec layout_spec = {"ptc._C.SavedLayout", sizeof(cap_saved_layout), 0,
                                  Py_TPFLAGS_DEFAULT, layout_slots};

cap_saved_layout *cap_saved_layout_new(const cap_placing *pl, int nsaved, const int *saved_input,
                                       PyObject **blocks, int *nblocks)
{
    if (!layout_type && !(layout_type = PyType_FromSpec(&layout_spec)))
        return NULL;
    cap_saved_layout *l = PyObject_New(cap_saved_layout, (PyTypeObject *)layout_type);
    if (!l)
        return NULL;
    Py_INCREF(layout_type); /* instances of heap types hold their type */
    l->nsaved = nsaved;
    l->nblocks = l->nloose = 0;
    if (!(l->entries = calloc((size_t)nsaved + 1, sizeof *l->entries))) {
        Py_DECREF(l);
        return (cap_saved_layout *)PyErr_NoMemory();
    }
    int index[SAVED_BLOCKS]; /* a block's among those allocated */
    for (int b = 0; b < SAVED_BLOCKS; b++)
        if ((index[b] = pl->blocks[b] ? l->nblocks : -1) >= 0)
            blocks[l->nblocks++] = Py_NewRef(pl->blocks[b]);
    for (int k = 0, j = 0; k < nsaved; k++) {
        saved_entry *e = &l->entries[k];
        e->block = saved_input[k] < 0 && pl->placed[j] ? index[pl->block[j]] : -1;
        if (e->block >= 0) {
            e->offset = pl->offset[j];
            e->as = pl->as[j];
            e->as.data = NULL;
        }
        l->nloose += e->block < 0;
        j += saved_input[k] < 0;
    }
    *nblocks = l->nblocks;
    return l;
}

int cap_saved_layout_given(const cap_saved_layout *l)
{
    return l->nloose + l->nblocks;
}

bool cap_saved_layout_check(PyObject *o)
{
    return layout_type && Py_TYPE(o) == (PyTypeObject *)layout_type;
}

/* given: the saved tensors of their own then the blocks (references, as
 * given: owned says whether they are the caller's to let go); into ins
 * [nsaved] the tensors of their own (NULL for a value in a block, which
 * ready[k] gives instead, holding a reference to its block). */
int cap_saved_layout_expand(const cap_saved_layout *l, PyObject **given, bool owned,
                            PyObject **ins, cap_ready *ready)
{
    char *data[SAVED_BLOCKS];
    for (int b = 0; b < l->nblocks; b++)
        if (!(data[b] = data_of(given[l->nloose + b])) && PyErr_Occurred())
            return -1;
    for (int k = 0, loose = 0; k < l->nsaved; k++) {
        const saved_entry *e = &l->entries[k];
        ins[k] = e->block < 0 ? given[loose++] : NULL;
        if (e->block < 0)
            continue;
        ready[k].t = e->as;
        ready[k].t.data = data[e->block] + e->offset;
        ready[k].owner = Py_NewRef(given[l->nloose + e->block]);
    }
    for (int b = 0; owned && b < l->nblocks; b++)
        Py_CLEAR(given[l->nloose + b]);
    return 0;
}

#endif /* PTC_HAVE_RUNTIME */
