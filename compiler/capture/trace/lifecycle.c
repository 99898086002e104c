/* A trace's life: creation and teardown, the symbolic tensors and strings it
 * keeps, and its graph's inputs (a source each, or a constant tensor) with
 * the names reports give them.
 */
#include "capture/trace/trace.h"

#include <stdlib.h>
#include <string.h>

/* ---- lifecycle ------------------------------------------------------------------- */

PyTypeObject *cap_tensor_type;

cap_trace *cap_trace_new(PyObject *module_names, cap_interp *I)
{
    cap_trace *T = calloc(1, sizeof *T);
    if (!T)
        return (cap_trace *)PyErr_NoMemory();
    T->module_names = Py_XNewRef(module_names);
    T->I = I;
    T->g = ptc_graph_new(NULL, "forward");
    T->arena = T->g->arena;
    cap_t_shape_env_init(T);
    T->src_index = PyDict_New();
    T->guard_index = PyDict_New();
    T->obj_src = PyDict_New();
    T->keep = PyList_New(0);
    T->input_const = PyList_New(0);
    T->tensors = PyList_New(0);
    T->strings = PyDict_New();
    T->no_inline = PySet_New(NULL);
    T->skipped = PyList_New(0);
    T->sync_step = T->sync_exit = -1;
    T->shadow = PyDict_New();
    T->mut = PyDict_New();
    T->effects = PyList_New(0);
    T->written = PyList_New(0);
    T->exc_stack = PyList_New(0);
    T->made_funcs = PyDict_New();
    T->made_classes = PyDict_New();
    T->like_inputs = PyDict_New();
    T->kept_layouts = PyDict_New();
    T->iter_shadows = PyDict_New();
    T->made_ids = PyDict_New();
    T->input_storage = PyDict_New();
    T->symints = PyList_New(0);
    T->specialised = PyList_New(0);
    T->dynamic = -1;
    if (!T->symints || !T->specialised || !T->made_funcs || !T->made_classes || !T->like_inputs ||
        !T->kept_layouts || !T->iter_shadows ||
        !T->made_ids || !T->input_storage || !T->exc_stack || !T->shadow || !T->mut ||
        !T->effects || !T->written || !T->src_index || !T->guard_index || !T->obj_src || !T->keep ||
        !T->input_const || !T->tensors || !T->strings || !T->no_inline || !T->skipped) {
        cap_trace_free(T);
        return NULL;
    }
    PyObject *g = PyObject_CallNoArgs(cap_T.is_grad_enabled);
    T->grad_enabled = T->grad_at_start = g == Py_True;
    Py_XDECREF(g);
    if (!g || cap_amp_read(&T->amp) < 0) {
        cap_trace_free(T);
        return NULL;
    }
    T->amp_at_start = T->amp;
    return T;
}

void cap_trace_free(cap_trace *T)
{
    if (!T)
        return;
    Py_XDECREF(T->module_names);
    /* Symbolic tensors outlive nothing: detach them from this trace. */
    for (Py_ssize_t i = 0; T->tensors && i < PyList_Size(T->tensors); i++) {
        PyObject *w = PyList_GetItem(T->tensors, i);
        PyObject *t = PyWeakref_GetObject(w);
        if (t && t != Py_None)
            ((cap_tensor *)t)->T = NULL;
    }
    for (Py_ssize_t i = 0; T->symints && i < PyList_Size(T->symints); i++)
        ((cap_symint *)PyList_GetItem(T->symints, i))->T = NULL;
    for (int i = 0; i < T->nsrc; i++) {
        Py_XDECREF(T->src[i].key);
        Py_XDECREF(T->src_val[i]);
    }
    for (int i = 0; i < T->nguards; i++) {
        Py_XDECREF(T->guards[i].obj);
        cap_code_unref(T->guards[i].code);
        if (T->guards[i].tm) {
            Py_XDECREF(T->guards[i].tm->type);
            Py_XDECREF(T->guards[i].tm->dtype);
            free(T->guards[i].tm);
        }
    }
    free(T->src);
    free(T->src_val);
    free(T->guards);
    free(T->input_src);
    free(T->node_grad);
    Py_XDECREF(T->src_index);
    Py_XDECREF(T->guard_index);
    Py_XDECREF(T->obj_src);
    Py_XDECREF(T->keep);
    Py_XDECREF(T->input_const);
    Py_XDECREF(T->tensors);
    Py_XDECREF(T->strings);
    Py_XDECREF(T->no_inline);
    Py_XDECREF(T->skipped);
    Py_XDECREF(T->shadow);
    Py_XDECREF(T->mut);
    Py_XDECREF(T->effects);
    Py_XDECREF(T->written);
    Py_XDECREF(T->cuts);
    Py_XDECREF(T->exc_stack);
    Py_XDECREF(T->made_funcs);
    Py_XDECREF(T->made_classes);
    Py_XDECREF(T->like_inputs);
    Py_XDECREF(T->kept_layouts);
    Py_XDECREF(T->iter_shadows);
    Py_XDECREF(T->made_ids);
    Py_XDECREF(T->input_storage);
    Py_XDECREF(T->resumed_ids);
    Py_XDECREF(T->symints);
    Py_XDECREF(T->specialised);
    Py_XDECREF(T->changed_sizes);
    Py_XDECREF(T->new_tensors);
    if (T->g)
        ptc_graph_free(T->g);
    free(T);
}

PyObject *cap_tensor_new(cap_trace *T, ptc_value *v)
{
    cap_tensor *t = PyObject_New(cap_tensor, cap_tensor_type);
    if (!t)
        return NULL;
    t->T = T;
    t->v = v;
    t->input_v = NULL;
    t->src = -1;
    t->fake_type = Py_NewRef(cap_T.Tensor);
    t->base = NULL;
    t->view_key = NULL;
    t->view_perm = NULL;
    t->view_flip = NULL;
    t->view_reshape = false;
    t->numpy = CAP_NP_TENSOR;
    t->nviews = 0;
    t->views = NULL;
    t->weakrefs = NULL;
    cap_t_track_tensor(T, (PyObject *)t);
    return (PyObject *)t;
}

void cap_t_track_tensor(cap_trace *T, PyObject *t)
{
    PyObject *w = PyWeakref_NewRef(t, NULL);
    if (w) {
        PyList_Append(T->tensors, w);
        Py_DECREF(w);
    }
    PyErr_Clear();
}

const char *cap_t_intern_str(cap_trace *T, const char *s)
{
    return ptc_arena_strdup(T->arena, s);
}

/* ---- inputs ---------------------------------------------------------------------- */

void cap_input_name(cap_trace *T, int src, char *buf, size_t size)
{
    char raw[400];
    if (src >= 0)
        cap_source_str(T->src, T->nsrc, src, raw, sizeof raw);
    else
        snprintf(raw, sizeof raw, "const");
    /* L['x'] -> x, L['self'].conv1.weight -> self.conv1.weight */
    char clean[400];
    size_t n = 0;
    for (const char *p = raw; *p && n + 1 < sizeof clean; p++) {
        if (p[0] == 'L' && p[1] == '[' && p[2] == '\'') {
            p += 2;
            continue;
        }
        if (*p == '\'' || *p == ']')
            continue;
        clean[n++] = (isalnum((unsigned char)*p) || *p == '_' || *p == '.') ? *p : '_';
    }
    clean[n] = 0;
    if (!n || isdigit((unsigned char)clean[0]) || clean[0] == '.')
        snprintf(clean, sizeof clean, "in%d", T->g->ninputs);
    snprintf(buf, size, "%s", clean);
    for (int k = 1; ptc_graph_find_value(T->g, buf); k++)
        snprintf(buf, size, "%s_%d", clean, k);
}

int cap_t_add_input(cap_trace *T, int src, PyObject *const_tensor)
{
    int i = T->g->ninputs - 1;
    T->input_src = realloc(T->input_src, sizeof *T->input_src * (size_t)(i + 1));
    T->input_src[i] = src;
    return PyList_Append(T->input_const, const_tensor ? const_tensor : Py_None);
}

PyObject *cap_tensor_const(cap_trace *T, PyObject *real)
{
    cap_tmeta m;
    if (cap_tmeta_read(real, &m) < 0)
        return NULL;
    if ((int)m.dt < 0) {
        Py_DECREF(m.type);
        Py_DECREF(m.dtype);
        return cap_signal_break(CAP_B_UNSUPPORTED_TORCH, "a constant tensor of an unsupported dtype");
    }
    ptc_ttype ty;
    cap_tmeta_type(&m, &ty);
    ty.requires_grad = false;
    Py_DECREF(m.type);
    Py_DECREF(m.dtype);
    char name[32];
    snprintf(name, sizeof name, "const%d", T->g->ninputs);
    ptc_value *v = ptc_graph_add_input(T->g, name, &ty);
    if (!v || cap_t_add_input(T, -1, real) < 0)
        return NULL;
    cap_tensor *t = (cap_tensor *)cap_tensor_new(T, v);
    if (t)
        t->input_v = v; /* it belongs to the trace, not the user: no in-place */
    return (PyObject *)t;
}

PyObject *cap_t_const_index(cap_trace *T, PyObject *key)
{
    cap_tensor *t = cap_is_tensor(key) ? (cap_tensor *)key : NULL;
    if (!t || t->src >= 0 || !t->input_v || t->v != t->input_v || t->input_v->input_index < 0)
        return NULL; /* not a constant of the trace, or written since */
    PyObject *real = PyList_GetItem(T->input_const, t->input_v->input_index);
    ptc_dtype dt = t->v->type.dtype;
    if (!real || real == Py_None || !ptc_dtype_is_int(dt)) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *i = PyNumber_Index(real); /* eager's __index__: one element, or its error */
    PyErr_Clear();
    return i;
}
