/* Channels-last copies of convolution weights, kept from run to run.
 *
 * A convolution whose input layout planning made channels-last gets its
 * weight, a graph input (a module parameter), in the user's layout:
 * contiguous. torch's convolution would copy the weight into the input's
 * layout on every call (oneDNN's and cuDNN's `weight.contiguous(format)`),
 * so the program converts it with a kernel of its own before the
 * convolution (layout.c), 17 copies a call for resnet18. With this cache
 * (opt-in) an inference program instead keeps one channels-last copy per
 * such input and hands the convolution that, and converts nothing itself.
 *
 * A copy is the input's value while the input is the same torch tensor (the
 * cache holds a reference, so its address cannot be reused), at the same
 * address (`.data =` swaps it) and at the same version (`t._version`, which
 * every in-place write through the tensor or a view of it advances: an
 * optimizer step, load_state_dict, `mul_` under no_grad); any change makes
 * a new copy on the next call. An input the program itself writes in place
 * is never kept: the program's own writes leave its version as it was.
 * Writes that bypass the version counter (through `.data`, or memory shared
 * through DLPack or numpy) are not seen, as autograd does not see them;
 * inference tensors (torch.inference_mode) have none and are never kept.
 * The copies go with the program.
 */
#include "capture/backend/backend.h"

#include <stdlib.h>
#include <string.h>

#ifdef PTC_HAVE_RUNTIME

typedef struct kept_weight {
    PyObject *src;   /* the graph input converted (a reference), or NULL */
    PyObject *copy;  /* its channels-last copy */
    int64_t version; /* src._version when copied */
    ptc_tensor as;   /* the extern's operand copied: address, dtype, sizes, strides, device */
    bool written;    /* the program writes the input in place: never kept */
} kept_weight;

struct cap_weight_cache {
    int ninputs;
    kept_weight kept[];
};

cap_weight_cache *cap_weight_cache_new(const ptc_graph *g, const int *output_inputs)
{
    /* opt-in: a write that bypasses the version counter (p.data.mul_())
       would leave a kept copy stale, where eager and torch.compile see it */
    const char *on = getenv("PTC_WEIGHT_CACHE");
    bool conv = false; /* a 2-d convolution, as captured */
    for (int i = 0; i < g->nnodes && !conv; i++) {
        ptc_op op = g->nodes[i]->op;
        conv = op == PTC_OP_CONV2D || op == PTC_OP_CONV_TRANSPOSE2D || op == PTC_OP_CONVOLUTION;
    }
    if (!conv || !on || !on[0] || strcmp(on, "0") == 0)
        return NULL;
    cap_weight_cache *c = calloc(1, sizeof *c + sizeof(kept_weight) * (size_t)g->ninputs);
    if (!c)
        return NULL;
    c->ninputs = g->ninputs;
    for (int o = 0; output_inputs && o < g->noutputs; o++)
        if (output_inputs[o] >= 0 && output_inputs[o] < g->ninputs)
            c->kept[output_inputs[o]].written = true;
    return c;
}

void cap_weight_cache_free(cap_weight_cache *c)
{
    if (!c)
        return;
    PyGILState_STATE g = PyGILState_Ensure();
    for (int i = 0; i < c->ninputs; i++) {
        Py_CLEAR(c->kept[i].src);
        Py_CLEAR(c->kept[i].copy);
    }
    PyGILState_Release(g);
    free(c);
}

/* Whether 4-d t is laid out channels-last (strides of size-1 dims aside, as
 * torch's is_contiguous(memory_format=torch.channels_last) reads them). */
static bool is_channels_last(const ptc_tensor *t)
{
    static const int order[4] = {1, 3, 2, 0}; /* innermost first */
    int64_t step = 1;
    for (int k = 0; k < 4; k++) {
        int d = order[k];
        if (t->sizes[d] != 1 && t->strides[d] != step)
            return false;
        step *= t->sizes[d];
    }
    return true;
}

bool cap_weight_wants_channels_last(const ptc_tensor *input, const ptc_tensor *weight)
{
    if (!input || !weight || input->ndim != 4 || weight->ndim != 4)
        return false;
    bool input_cl = input->strides[1] == 1 && input->sizes[1] > 1 && is_channels_last(input);
    return input_cl && ptc_tensor_is_contiguous(weight) && !is_channels_last(weight);
}

static bool same_operand(const ptc_tensor *a, const ptc_tensor *b)
{
    if (a->data != b->data || a->dtype != b->dtype || a->ndim != b->ndim ||
        !ptc_device_eq(a->device, b->device))
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->sizes[d] != b->sizes[d] || a->strides[d] != b->strides[d])
            return false;
    return true;
}

/* src._version; -1 with an exception. */
static int64_t version_of(PyObject *src)
{
    static PyObject *name;
    if (!name && !(name = PyUnicode_InternFromString("_version")))
        return -1;
    PyObject *v = PyObject_GetAttr(src, name);
    int64_t r = v ? PyLong_AsLongLong(v) : -1;
    Py_XDECREF(v);
    return r;
}

/* A copy of given[input], kept (the tensor, t's layout, its version). */
static PyObject *keep_copy(kept_weight *k, int input, PyObject *src, int64_t version,
                           const ptc_tensor *t, PyObject *view)
{
    PyObject *copy = cap_contiguous_as(view, true);
    if (!copy)
        return NULL;
    Py_XSETREF(k->src, Py_NewRef(src));
    Py_XSETREF(k->copy, Py_NewRef(copy));
    k->version = version;
    k->as = *t;
    k->as.storage = NULL;
    ptc_log(PTC_LOG_RUNTIME, PTC_LOG_DEBUG,
            "weight cache: input %d copied channels-last for its convolution (version %lld)", input,
            (long long)version);
    return copy;
}

PyObject *cap_weight_cache_get(cap_weight_cache *c, PyObject *const *given, const ptc_tensor *ins,
                               int ninputs, const ptc_tensor *t, PyObject *view)
{
    int input = -1;
    for (int i = 0; i < ninputs && i < c->ninputs && input < 0; i++)
        if (given[i] && ins[i].data == t->data)
            input = i;
    if (input < 0 || c->kept[input].written)
        return Py_NewRef(view);
    kept_weight *k = &c->kept[input];
    int64_t version = version_of(given[input]);
    if (version < 0 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_RuntimeError))
            return NULL;
        /* an inference tensor (made under torch.inference_mode) has no
           version counter: no copy of it can be trusted */
        PyErr_Clear();
        return Py_NewRef(view);
    }
    if (k->src == given[input] && k->version == version && same_operand(&k->as, t))
        return Py_NewRef(k->copy);
    return keep_copy(k, input, given[input], version, t, view);
}

#endif /* PTC_HAVE_RUNTIME */
