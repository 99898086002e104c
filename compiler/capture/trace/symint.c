/* Symbolic sizes while tracing.
 *
 * A graph input's dimension gets a symbol (s0, s1, ...) when the dynamic=
 * option, a mark on the tensor or an earlier size-only recompile asks for
 * it; sizes 0 and 1 stay static (broadcasting and squeezes depend on them).
 * Symbols are shared by value ("duck sizing", as torch does): a dimension of
 * the same size as an existing symbol reuses it, under a guard that the two
 * stay equal, so shapes that must match still match structurally.
 *
 * The user's code sees symbolic sizes as cap_symint objects: Python ints
 * whose arithmetic builds ptc_dim expressions (x.size(1) // 2, n * d) that
 * flow into view/reshape/expand sizes. Each carries its value in this trace
 * (the hint), which answers comparisons; the answer is kept as a guard on
 * the relation (s0 >= 4), so only the relations the trace relied on are
 * checked on later calls. A use that needs the number itself (__index__, a
 * hash, range(), a float) specialises the symbol with a guard and notes the
 * source line for ptexplain.
 */
#include "capture/trace/trace.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

PyTypeObject *cap_symint_type;

const char *cap_sym_name(int i)
{
    static char names[CAP_MAX_SYMS][8];
    if (!names[i][0])
        snprintf(names[i], sizeof names[i], "s%d", i);
    return names[i];
}

/* ---- which dims are symbolic --------------------------------------------------------- */

/* Dims listed in attribute `name` of t (a set of ints, as torch._dynamo's
 * mark_dynamic / maybe_mark_dynamic / mark_static leave them). */
static int marked_dims(PyObject *t, const char *name, int ndim)
{
    PyObject *s = PyObject_GetAttrString(t, name);
    if (!s) {
        PyErr_Clear();
        return 0;
    }
    int mask = 0;
    PyObject *it = PyObject_GetIter(s), *x;
    while (it && (x = PyIter_Next(it))) {
        long d = PyLong_AsLong(x);
        if (d < 0)
            d += ndim;
        if (d >= 0 && d < ndim)
            mask |= 1 << d;
        Py_DECREF(x);
    }
    Py_XDECREF(it);
    Py_DECREF(s);
    PyErr_Clear();
    return mask;
}

/* The min/max of dim d from t._dynamo_dynamic_range ((dim, min, max) items,
 * None for no bound). */
static void dim_range(PyObject *t, int d, int64_t *lo, int64_t *hi)
{
    PyObject *s = PyObject_GetAttrString(t, "_dynamo_dynamic_range");
    PyObject *it = s ? PyObject_GetIter(s) : NULL, *x;
    while (it && (x = PyIter_Next(it))) {
        PyObject *dim = PySequence_GetItem(x, 0), *mn = PySequence_GetItem(x, 1),
                 *mx = PySequence_GetItem(x, 2);
        if (dim && mn && mx && PyLong_AsLong(dim) == d) {
            if (mn != Py_None)
                *lo = PyLong_AsLongLong(mn);
            if (mx != Py_None)
                *hi = PyLong_AsLongLong(mx);
        }
        Py_XDECREF(dim);
        Py_XDECREF(mn);
        Py_XDECREF(mx);
        Py_DECREF(x);
    }
    Py_XDECREF(it);
    Py_XDECREF(s);
    PyErr_Clear();
}

/* ---- sizes that follow a changed size ----------------------------------------------------
 *
 * dynamic=None recompiles once a size changes; a tensor that first appears in
 * that recompile (a KV cache the last call filled: generate()'s second step)
 * has no earlier size to compare, so it would be static and cost one more
 * compile as soon as it grows. A dim of such a new tensor whose size is one
 * that a changed dim had before (the prompt's length, now the cache's) is made
 * symbolic too: the trace notes both while it runs and, when it ends, the
 * caller traces again with those dims symbolic (cap_t_follow_changed_sizes). */

/* A dim of `name` that had size `was` in the previous entry and changed. */
static void note_changed_size(cap_trace *T, const char *name, int d, int64_t was)
{
    if (!T->changed_sizes && !(T->changed_sizes = PyDict_New()))
        goto done;
    PyObject *key = PyLong_FromLongLong(was);
    PyObject *where = PyUnicode_FromFormat("%s.size(%d)", name, d);
    if (key && where && !PyDict_GetItem(T->changed_sizes, key))
        PyDict_SetItem(T->changed_sizes, key, where);
    Py_XDECREF(key);
    Py_XDECREF(where);
done:
    PyErr_Clear();
}

/* A tensor input the previous entry did not have. */
static void note_new_tensor(cap_trace *T, const char *name, const cap_tmeta *m)
{
    if (!T->new_tensors && !(T->new_tensors = PyList_New(0)))
        goto done;
    PyObject *sizes = PyTuple_New(m->ndim);
    for (int d = 0; sizes && d < m->ndim; d++)
        PyTuple_SetItem(sizes, d, PyLong_FromLongLong(m->sizes[d]));
    PyObject *item = sizes ? Py_BuildValue("(sO)", name, sizes) : NULL;
    if (item)
        PyList_Append(T->new_tensors, item);
    Py_XDECREF(item);
    Py_XDECREF(sizes);
done:
    PyErr_Clear();
}

bool cap_t_follow_changed_sizes(cap_trace *T, char *why, size_t size)
{
    bool again = false;
    size_t n = strlen(why);
    for (Py_ssize_t i = 0;
         T->changed_sizes && T->new_tensors && T->auto_dyn && i < PyList_Size(T->new_tensors);
         i++) {
        PyObject *item = PyList_GetItem(T->new_tensors, i), *sizes = PyTuple_GetItem(item, 1);
        const char *name = PyUnicode_AsUTF8(PyTuple_GetItem(item, 0));
        PyObject *known = name ? PyDict_GetItemString(T->auto_dyn, name) : NULL;
        long dims = known ? PyLong_AsLong(known) : 0, add = 0;
        PyObject *was = NULL;
        int matches = 0;
        for (Py_ssize_t d = 0; name && d < PyTuple_Size(sizes); d++) {
            PyObject *w = PyDict_GetItem(T->changed_sizes, PyTuple_GetItem(sizes, d));
            if (w && !(dims >> d & 1)) {
                add |= 1L << d;
                was = w;
                matches++;
            }
        }
        if (matches != 1) /* none, or which dim follows is ambiguous ([1,6,6,16]) */
            continue;
        if (n < size)
            n +=
                (size_t)snprintf(why + n, size - n, "%s%s dim %d becomes dynamic (sized as %s was)",
                                 n ? "; " : "new tensor ", name, __builtin_ctzl((unsigned long)add),
                                 PyUnicode_AsUTF8(was));
        PyObject *mask = add ? PyLong_FromLong(dims | add) : NULL;
        if (mask && PyDict_SetItemString(T->auto_dyn, name, mask) == 0)
            again = true;
        Py_XDECREF(mask);
    }
    PyErr_Clear();
    return again;
}

/* dynamic=None: the dims of the tensor at src whose size changed since an
 * earlier entry (remembered, so later recompiles keep them symbolic). */
static int auto_dims(cap_trace *T, int src, const cap_tmeta *m)
{
    if (!T->auto_dyn)
        return 0;
    char name[400];
    cap_source_str(T->src, T->nsrc, src, name, sizeof name);
    PyObject *known = PyDict_GetItemString(T->auto_dyn, name);
    int dims = known ? (int)PyLong_AsLong(known) : 0;
    PyObject *prev = T->prev_sizes ? PyDict_GetItemString(T->prev_sizes, name) : NULL;
    int changed = 0;
    for (int d = 0; prev && PyTuple_Size(prev) == m->ndim && d < m->ndim; d++) {
        int64_t was = PyLong_AsLongLong(PyTuple_GetItem(prev, d));
        changed |= (was >= 0 && was != m->sizes[d]) << d;
        if (was >= 2 && was != m->sizes[d])
            note_changed_size(T, name, d, was);
    }
    if (T->prev_sizes && !prev)
        note_new_tensor(T, name, m);
    if (changed & ~dims) {
        PyObject *mask = PyLong_FromLong(dims | changed);
        if (!mask || PyDict_SetItemString(T->auto_dyn, name, mask) < 0)
            PyErr_Clear();
        Py_XDECREF(mask);
    }
    return dims | changed;
}

int cap_t_dynamic_dims(cap_trace *T, PyObject *obj, int src, const cap_tmeta *m)
{
    int kind = T->src[src].kind;
    if (T->static_only || cap_source_module_tensor(kind) || kind == CAP_S_CONST)
        return 0; /* parameters and buffers keep their sizes, as in torch */
    int all = (1 << m->ndim) - 1;
    int marked = marked_dims(obj, "_dynamo_dynamic_indices", m->ndim) |
                 marked_dims(obj, "_dynamo_weak_dynamic_indices", m->ndim);
    int fixed = marked_dims(obj, "_dynamo_static_indices", m->ndim);
    if (T->dynamic == 0) {
        if (marked) {
            char msg[600], name[400];
            cap_source_str(T->src, T->nsrc, src, name, sizeof name);
            snprintf(msg, sizeof msg,
                     "ptc: mark_dynamic on %s is ignored: the function was compiled with "
                     "dynamic=False, which specialises every size",
                     name);
            if (PyErr_WarnEx(PyExc_UserWarning, msg, 1) < 0)
                return -1;
        }
        return 0;
    }
    int want = marked | (T->dynamic == 1 ? all : auto_dims(T, src, m));
    want &= ~(fixed & ~marked); /* mark_dynamic wins over mark_static, as in torch */
    for (int i = 0; i < m->ndim; i++)
        if (m->sizes[i] < 2)
            want &= ~(1 << i); /* 0 and 1 are specialised */
    /* A strided input keeps static sizes: its strides are part of the graph. */
    return cap_tmeta_dense(m) ? want : 0;
}

/* ---- symbols and guards ---------------------------------------------------------------- */

static const char *rel_names[] = {
    [Py_LT] = "<", [Py_LE] = "<=", [Py_EQ] = "==", [Py_NE] = "!=", [Py_GT] = ">", [Py_GE] = ">="};

/* "s0 = L['x'].size(0)" for each symbol of d, appended to buf. */
static void symbol_sources(cap_trace *T, ptc_dim d, char *buf, size_t size)
{
    const char *names[CAP_MAX_SYMS];
    int n = ptc_dim_symbols(d, names, 0, CAP_MAX_SYMS);
    size_t k = strlen(buf);
    for (int j = 0; j < n && k < size; j++)
        for (int i = 0; i < T->syms.n; i++)
            if (strcmp(cap_sym_name(i), names[j]) == 0) {
                char src[300];
                cap_source_str(T->src, T->nsrc, T->syms.src[i], src, sizeof src);
                k += (size_t)snprintf(buf + k, size - k, "%s%s from %s.size(%d)", j ? ", " : " (",
                                      names[j], src, T->syms.dim[i]);
                if (T->syms.div[i] > 1 && k < size)
                    k += (size_t)snprintf(buf + k, size - k, " // %lld", (long long)T->syms.div[i]);
                if (T->syms.plus[i].sym && k < size) {
                    ptc_buf less = {0}; /* off - plus, as "size - (s4-2)" */
                    ptc_dim_print(&less, ptc_dim_sub(T->arena, ptc_dim_c(T->syms.off[i]),
                                                     T->syms.plus[i]));
                    k += (size_t)snprintf(buf + k, size - k, " - (%s)", less.data ? less.data : "");
                    ptc_buf_free(&less);
                } else if (T->syms.off[i] > 0 && k < size)
                    k += (size_t)snprintf(buf + k, size - k, " - %lld", (long long)T->syms.off[i]);
            }
    if (n > 0 && k < size)
        snprintf(buf + k, size - k, ")");
}

/* d's value with every symbol 0: its constant term, for sums (2*s0 - 4). */
static int64_t constant_of(cap_trace *T, ptc_dim d)
{
    ptc_bindings zero = {0};
    for (int i = 0; i < T->syms.n; i++)
        ptc_bindings_set(&zero, cap_sym_name(i), 0);
    int64_t c = 0;
    if (ptc_dim_eval(d, &zero, &c, NULL) < 0)
        c = 0;
    return c;
}

/* "2*s0 >= 4 (s0 from L['x'].size(0))" for "d rel 0": the constant moved right. */
static void relation_text(cap_trace *T, ptc_dim d, int rel, char *buf, size_t size)
{
    int64_t c = constant_of(T, d);
    ptc_buf b = {0};
    ptc_dim_print(&b, ptc_dim_sub(T->arena, d, ptc_dim_c(c)));
    snprintf(buf, size, "%s %s %lld", b.data ? b.data : "", rel_names[rel], (long long)-c);
    ptc_buf_free(&b);
    symbol_sources(T, d, buf, size);
}

/* Does "d rel 0" hold for every size the symbols' ranges allow (s0 >= 1 and
 * s0 != 1 for a size of 2 or more; s0 <= 9 under mark_dynamic(max=8))? */
static bool implied_by_ranges(cap_trace *T, ptc_dim d, int rel)
{
    ptc_bindings lo = {0}, hi = {0};
    for (int i = 0; i < T->syms.n; i++) {
        ptc_bindings_set(&lo, cap_sym_name(i), T->syms.lo[i]);
        ptc_bindings_set(&hi, cap_sym_name(i), T->syms.hi[i]);
    }
    int64_t min, max;
    ptc_dim_range(d, &lo, &hi, &min, &max);
    switch (rel) {
    case Py_GE:
        return min >= 0;
    case Py_LE:
        return max <= 0;
    case Py_EQ:
        return min == 0 && max == 0;
    case Py_NE:
        return min > 0 || max < 0;
    default:
        return false;
    }
}

/* Symbol i ranges over [lo, hi] (hi < 0: unbounded) from here on. */
static void set_range(cap_trace *T, int i, int64_t lo, int64_t hi)
{
    T->syms.lo[i] = lo;
    T->syms.hi[i] = hi < 0 ? INT64_MAX : hi;
}

int cap_t_sym_guard(cap_trace *T, ptc_dim d, int rel)
{
    if (!d.sym)
        return 0;
    if (rel == Py_GT ||
        rel == Py_LT) { /* on integers: one form per relation (s0 >= 2, not s0 > 1) */
        d = ptc_dim_add(T->arena, d, ptc_dim_c(rel == Py_GT ? -1 : 1));
        rel = rel == Py_GT ? Py_GE : Py_LE;
    }
    if (implied_by_ranges(T, d, rel))
        return 0; /* the range guards of its symbols check it already */
    char text[600];
    relation_text(T, d, rel, text, sizeof text);
    PyObject *obj = PyUnicode_FromString(text);
    if (!obj)
        return -1;
    int before = T->nguards;
    const char *names[CAP_MAX_SYMS];
    int n = ptc_dim_symbols(d, names, 0, CAP_MAX_SYMS), first = 0;
    for (int i = 0; i < T->syms.n && n > 0; i++)
        if (strcmp(cap_sym_name(i), names[0]) == 0)
            first = i;
    int rc = cap_guard_add(T, CAP_G_SYM, T->syms.src[first], obj, rel);
    Py_DECREF(obj);
    if (rc == 0 && T->nguards > before)
        T->guards[T->nguards - 1].expr = d;
    return rc;
}

/* Guards that dim `dim` of the tensor at src stays equal to symbol i. */
static int same_size_guard(cap_trace *T, int src, int dim, int i)
{
    char text[600], a[300];
    cap_source_str(T->src, T->nsrc, src, a, sizeof a);
    snprintf(text, sizeof text, "%s.size(%d) == %s", a, dim, cap_sym_name(i));
    symbol_sources(T, ptc_dim_symbol(T->arena, cap_sym_name(i)), text, sizeof text);
    PyObject *obj = PyUnicode_FromString(text);
    int rc = obj ? cap_guard_add(T, CAP_G_SYMSIZE, src, obj, (int64_t)i << 8 | dim) : -1;
    Py_XDECREF(obj);
    return rc;
}

int64_t cap_t_dim_hint(cap_trace *T, ptc_dim d)
{
    int64_t v = d.value;
    ptc_error err;
    if (d.sym && ptc_dim_eval(d, &T->hints, &v, &err) < 0)
        v = 0; /* every symbol of the trace is bound: not reached */
    return v;
}

ptc_dim cap_t_input_dim(cap_trace *T, int src, int dim, int64_t size, PyObject *obj)
{
    for (int i = 0; i < T->syms.n; i++)
        if (T->hints.values[i] == size) {
            ptc_dim s =
                T->syms.replaced[i] ? T->syms.by[i] : ptc_dim_symbol(T->arena, cap_sym_name(i));
            if ((T->syms.src[i] != src || T->syms.dim[i] != dim) &&
                same_size_guard(T, src, dim, i) < 0)
                return ptc_dim_c(-1);
            return s;
        }
    int64_t lo = 2, hi = -1;
    dim_range(obj, dim, &lo, &hi);
    if (T->syms.n == CAP_MAX_SYMS || size < lo || (hi >= 0 && size > hi))
        return ptc_dim_c(size); /* out of symbols, or outside the marked range */
    int i = T->syms.n++;
    T->syms.src[i] = src;
    T->syms.dim[i] = dim;
    set_range(T, i, INT64_MIN, -1); /* until its range is guarded */
    ptc_bindings_set(&T->hints, cap_sym_name(i), size);
    ptc_dim s = ptc_dim_symbol(T->arena, cap_sym_name(i));
    lo = lo < 2 ? 2 : lo;
    if (cap_t_sym_guard(T, ptc_dim_sub(T->arena, s, ptc_dim_c(lo)), Py_GE) < 0 ||
        (hi >= 0 && cap_t_sym_guard(T, ptc_dim_sub(T->arena, s, ptc_dim_c(hi)), Py_LE) < 0))
        return ptc_dim_c(-1);
    set_range(T, i, lo, hi);
    return s;
}

int cap_t_need_static(cap_trace *T, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(T->static_why, sizeof T->static_why, fmt, ap);
    va_end(ap);
    return cap_t_break(T, CAP_B_TRACE_ERROR, "%s", T->static_why);
}

/* ---- relations for the meta functions (the shape env) -------------------------------------
 *
 * A meta function that needs two sizes equal (s1 against 2*s0 in a
 * broadcast, s0*s1 against a weight's 16 in a matmul) asks the env when they
 * differ structurally. The answer comes from this call's sizes and is kept
 * as a guard; to make it hold structurally for the rest of the trace and for
 * every later stage (which have no env), one symbol is replaced by what it
 * equals, everywhere in the graph: the highest-numbered symbol the relation
 * is linear in (s1 := 2*s0), else each symbol of it by its value, as a
 * specialisation ptexplain lists with the op that needed it. */

static int note_specialised(cap_trace *T, ptc_dim d, int64_t value, const char *why);

static cap_trace *env_trace(ptc_shape_env *env)
{
    return (cap_trace *)(void *)((char *)env - offsetof(cap_trace, shape_env));
}

static ptc_dim env_rewrite(ptc_shape_env *env, ptc_arena *a, ptc_dim d)
{
    cap_trace *T = env_trace(env);
    for (int i = 0; d.sym && i < T->syms.n; i++)
        if (T->syms.replaced[i])
            d = ptc_dim_subst(a, d, cap_sym_name(i), T->syms.by[i]);
    return d;
}

static void rewrite_type(ptc_shape_env *env, ptc_arena *a, ptc_ttype *t)
{
    for (int d = 0; d < t->ndim; d++) {
        t->shape[d] = env_rewrite(env, a, t->shape[d]);
        if (t->layout == PTC_LAYOUT_STRIDED)
            t->strides[d] = env_rewrite(env, a, t->strides[d]);
    }
}

/* Symbol i := by in the graph so far, in the symints the user's code holds
 * and in the earlier replacements. */
static void replace_symbol(cap_trace *T, int i, ptc_dim by)
{
    ptc_shape_env *env = &T->shape_env;
    for (int j = 0; j < T->syms.n; j++)
        if (T->syms.replaced[j])
            T->syms.by[j] = ptc_dim_subst(T->arena, T->syms.by[j], cap_sym_name(i), by);
    T->syms.replaced[i] = true;
    T->syms.by[i] = by;
    ptc_graph *g = T->g;
    for (int v = 0; v < g->nvalues; v++)
        if (g->values[v])
            rewrite_type(env, T->arena, &g->values[v]->type);
    for (int n = 0; n < g->nnodes; n++)
        for (int k = 0; k < g->nodes[n]->nargs; k++) {
            ptc_arg *arg = &g->nodes[n]->args[k];
            if (arg->kind == PTC_ARG_INT)
                arg->i = env_rewrite(env, T->arena, arg->i);
            for (int j = 0; arg->kind == PTC_ARG_INTS && j < arg->is.n; j++)
                arg->is.d[j] = env_rewrite(env, T->arena, arg->is.d[j]);
        }
    for (Py_ssize_t k = 0; T->symints && k < PyList_Size(T->symints); k++) {
        cap_symint *s = (cap_symint *)PyList_GetItem(T->symints, k);
        s->d = env_rewrite(env, T->arena, s->d);
    }
    env->rewrites++;
}

/* Each symbol of d replaced by its value, guarded, and noted with why. */
static int pin_symbols(cap_trace *T, ptc_dim d, const char *why)
{
    const char *names[CAP_MAX_SYMS];
    int n = ptc_dim_symbols(d, names, 0, CAP_MAX_SYMS);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < T->syms.n; i++)
            if (strcmp(cap_sym_name(i), names[j]) == 0) {
                ptc_dim s = ptc_dim_symbol(T->arena, names[j]);
                int64_t v = T->hints.values[i];
                if (cap_t_sym_guard(T, ptc_dim_sub(T->arena, s, ptc_dim_c(v)), Py_EQ) < 0 ||
                    note_specialised(T, s, v, why) < 0)
                    return -1;
                replace_symbol(T, i, ptc_dim_c(v));
            }
    return 1;
}

/* "linear needs s1*s2-16 == 0, which no one symbol solves" */
static void relation_why(const char *what, ptc_dim d, const char *rel, const char *tail, char *why,
                         size_t size)
{
    ptc_buf b = {0};
    ptc_dim_print(&b, d);
    snprintf(why, size, "%s needs %s %s, %s", what, b.data ? b.data : "", rel, tail);
    ptc_buf_free(&b);
}

/* diff == 0 holds (guarded): one symbol replaced, or all of them pinned. */
static int make_zero(cap_trace *T, ptc_dim diff, const char *what)
{
    for (int i = T->syms.n - 1; i >= 0; i--) {
        ptc_dim by;
        if (!T->syms.replaced[i] && ptc_dim_solve(T->arena, diff, cap_sym_name(i), &by)) {
            replace_symbol(T, i, by);
            return 1;
        }
    }
    char why[200];
    relation_why(what, diff, "== 0", "which no one symbol solves", why, sizeof why);
    return pin_symbols(T, diff, why);
}

static int env_same(ptc_shape_env *env, ptc_dim x, ptc_dim y, const char *what)
{
    cap_trace *T = env_trace(env);
    ptc_dim diff = env_rewrite(env, T->arena, ptc_dim_sub(T->arena, x, y));
    if (!diff.sym) {
        if (diff.value != 0)
            return 0;
        env->rewrites++; /* equal once rewritten: the caller infers again */
        return 1;
    }
    if (cap_t_dim_hint(T, diff) != 0)
        return 0;
    int rc = cap_t_sym_guard(T, diff, Py_EQ) < 0 ? -1 : make_zero(T, diff, what);
    if (rc < 0)
        PyErr_Clear(); /* out of memory for a guard: the relation stays undecided */
    return rc == 1;
}

/* Symbol i := m*t + e for a new symbol t read from i's dimension, at least
 * 2 under a guard and at most hi (< 0: unbounded): e is a constant shift
 * (m = 1), an expression over other symbols (m = 1), or 0 (a split, m > 1). */
static int derive_symbol(cap_trace *T, int i, int64_t m, ptc_dim e, int64_t hi)
{
    int t = T->syms.n++;
    int64_t shift = constant_of(T, e);
    T->syms.src[t] = T->syms.src[i];
    T->syms.dim[t] = T->syms.dim[i];
    T->syms.div[t] = (T->syms.div[i] > 1 ? T->syms.div[i] : 1) * m;
    T->syms.off[t] = T->syms.off[i] / m + shift;
    T->syms.plus[t] = ptc_dim_sub(T->arena, T->syms.plus[i], ptc_dim_sub(T->arena, e, ptc_dim_c(shift)));
    set_range(T, t, INT64_MIN, -1);
    ptc_bindings_set(&T->hints, cap_sym_name(t), (T->hints.values[i] - cap_t_dim_hint(T, e)) / m);
    ptc_dim st = ptc_dim_symbol(T->arena, cap_sym_name(t));
    replace_symbol(T, i, ptc_dim_add(T->arena, ptc_dim_mul(T->arena, ptc_dim_c(m), st), e));
    if (cap_t_sym_guard(T, ptc_dim_sub(T->arena, st, ptc_dim_c(2)), Py_GE) < 0)
        return -1;
    set_range(T, t, 2, hi);
    return t;
}

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a < 0 ? -a : a;
}

/* k divides x (guarded): a symbol s that x is linear in, c*s + rest with k
 * dividing rest, is split as s := m*t for a new symbol t read as s's
 * dimension // m (m = k / gcd(c, k)), so x // k is exact structurally. */
static int split_symbol(cap_trace *T, ptc_dim x, int64_t k)
{
    for (int i = T->syms.n - 1; i >= 0 && T->syms.n < CAP_MAX_SYMS; i--) {
        const char *name = cap_sym_name(i);
        ptc_dim rest = ptc_dim_subst(T->arena, x, name, ptc_dim_c(0)), q;
        ptc_dim c = ptc_dim_sub(T->arena, ptc_dim_subst(T->arena, x, name, ptc_dim_c(1)), rest);
        if (T->syms.replaced[i] || c.sym || c.value == 0 ||
            !ptc_dim_eq(x, ptc_dim_add(T->arena, rest,
                                       ptc_dim_mul(T->arena, c, ptc_dim_symbol(T->arena, name)))) ||
            !ptc_dim_div_exact(T->arena, rest, ptc_dim_c(k), &q))
            continue;
        int64_t m = k / gcd64(c.value, k);
        if (T->hints.values[i] / m < 2 || T->syms.off[i] % m != 0 || T->syms.plus[i].sym)
            continue; /* t would be 1 here (pinned instead, as sizes of 1 are), or not exact */
        int64_t hi = T->syms.hi[i] == INT64_MAX ? -1 : T->syms.hi[i] / m;
        return derive_symbol(T, i, m, ptc_dim_c(0), hi) < 0 ? -1 : 1;
    }
    return 0;
}

static int env_divides(ptc_shape_env *env, ptc_dim x, int64_t k, const char *what)
{
    cap_trace *T = env_trace(env);
    x = env_rewrite(env, T->arena, x);
    ptc_dim r = ptc_dim_mod(T->arena, x, ptc_dim_c(k));
    if (cap_t_dim_hint(T, r) != 0)
        return 0;
    if (!r.sym) {
        env->rewrites++; /* divisible once rewritten: the caller infers again */
        return 1;
    }
    char why[200];
    relation_why(what, r, "== 0", "which no one symbol can be split for", why, sizeof why);
    int rc = cap_t_sym_guard(T, r, Py_EQ) < 0 ? -1 : split_symbol(T, x, k);
    if (rc == 0)
        rc = pin_symbols(T, x, why);
    if (rc < 0)
        PyErr_Clear();
    return rc == 1;
}

/* The least size L of symbol i (from its range's low end to its value in
 * this call) at which d, over i alone, is >= 0 (binary search: d grows with
 * the size in the shape rules that ask, and the probes check it after). */
static int64_t least_fit(cap_trace *T, ptc_dim d, int i)
{
    ptc_bindings b = {0};
    ptc_bindings_set(&b, cap_sym_name(i), 0);
    int64_t lo = T->syms.lo[i], hi = T->hints.values[i], v;
    while (lo < hi) {
        b.values[0] = lo + (hi - lo) / 2;
        if (ptc_dim_eval(d, &b, &v, NULL) == 0 && v >= 0)
            hi = b.values[0];
        else
            lo = b.values[0] + 1;
    }
    return lo;
}

/* d >= 0 over several symbols (guarded): a symbol s that d holds as a bare
 * term, d = s + rest, becomes s := t - 2 - rest for a new symbol t >= 2, so
 * that d = t - 2 >= 0 structurally; t is read as s's dimension + rest + 2
 * (conv1d(x, w) needs s2 - s4 >= 0: s2 := s5 + s4 - 2). The highest such
 * symbol, as make_zero picks; 0 when d has none. */
static int slack_symbol(cap_trace *T, ptc_dim d)
{
    for (int i = T->syms.n - 1; i >= 0 && T->syms.n < CAP_MAX_SYMS; i--) {
        const char *name = cap_sym_name(i);
        ptc_dim rest = ptc_dim_sub(T->arena, d, ptc_dim_symbol(T->arena, name));
        if (T->syms.replaced[i] || !ptc_dim_eq(rest, ptc_dim_subst(T->arena, d, name, ptc_dim_c(0))))
            continue; /* s is not a bare term of d, or also appears inside one */
        ptc_dim e = ptc_dim_sub(T->arena, ptc_dim_c(-2), rest);
        return derive_symbol(T, i, 1, e, -1) < 0 ? -1 : 1;
    }
    return 0;
}

/* d >= 0 holds (guarded): where d is over one symbol s, whose sizes from L
 * up fit, s := t + (L - 2) so that t >= 2 says it structurally (a 7-wide
 * kernel fits s2 >= 7: s2 := s4 + 5); over several, a slack symbol says it
 * (slack_symbol); else its symbols are pinned. */
static int make_nonneg(cap_trace *T, ptc_dim d, const char *what)
{
    const char *names[2];
    int i = -1, nsyms = ptc_dim_symbols(d, names, 0, 2);
    if (nsyms == 1)
        for (int k = 0; k < T->syms.n; k++)
            if (strcmp(cap_sym_name(k), names[0]) == 0)
                i = k;
    int64_t shift = i >= 0 && T->syms.n < CAP_MAX_SYMS ? least_fit(T, d, i) - 2 : 0;
    if (shift > 0) {
        int64_t hi = T->syms.hi[i] == INT64_MAX ? -1 : T->syms.hi[i] - shift;
        return derive_symbol(T, i, 1, ptc_dim_c(shift), hi) < 0 ? -1 : 1;
    }
    int rc = nsyms > 1 ? slack_symbol(T, d) : 0;
    if (rc != 0)
        return rc;
    char why[200];
    relation_why(what, d, ">= 0", "which its symbols' ranges do not show", why, sizeof why);
    return pin_symbols(T, d, why);
}

static int env_nonneg(ptc_shape_env *env, ptc_dim d, const char *what)
{
    cap_trace *T = env_trace(env);
    d = env_rewrite(env, T->arena, d);
    if (implied_by_ranges(T, d, Py_GE))
        return 1; /* after a rewrite, or by ranges the probes do not know */
    bool holds = cap_t_dim_hint(T, d) >= 0;
    int rc = cap_t_sym_guard(T, d, holds ? Py_GE : Py_LT);
    if (rc == 0 && holds)
        rc = make_nonneg(T, d, what);
    if (rc < 0) {
        PyErr_Clear();
        return -1;
    }
    return holds;
}

void cap_t_shape_env_init(cap_trace *T)
{
    T->shape_env = (ptc_shape_env){
        .same = env_same, .divides = env_divides, .nonneg = env_nonneg, .rewrite = env_rewrite};
    T->g->shape_env = &T->shape_env;
}

/* ---- the Python int ------------------------------------------------------------------------- */

PyObject *cap_dim_obj(cap_trace *T, ptc_dim d)
{
    if (!d.sym)
        return PyLong_FromLongLong(d.value);
    cap_symint *s = PyObject_New(cap_symint, cap_symint_type);
    if (!s)
        return NULL;
    s->T = T;
    s->d = d;
    s->hint = cap_t_dim_hint(T, d);
    if (PyList_Append(T->symints, (PyObject *)s) < 0) {
        Py_DECREF(s);
        return NULL;
    }
    return (PyObject *)s;
}

int cap_dim_from_obj(cap_trace *T, PyObject *o, ptc_dim *out)
{
    if (cap_is_symint(o)) {
        if (((cap_symint *)o)->T != T) {
            PyErr_SetString(cap_InternalError,
                            "ptc: a symbolic size was used after its trace ended");
            return -1;
        }
        *out = ((cap_symint *)o)->d;
        return 1;
    }
    if (!PyLong_Check(o))
        return 0;
    int64_t v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = ptc_dim_c(v);
    return 1;
}

static cap_trace *live(cap_symint *s)
{
    if (!s->T)
        PyErr_SetString(cap_InternalError, "ptc: a symbolic size was used after its trace ended");
    return s->T;
}

/* Notes for ptexplain that d was pinned to value, why, and at which line. */
static int note_specialised(cap_trace *T, ptc_dim d, int64_t value, const char *why)
{
    ptc_buf b = {0};
    ptc_dim_print(&b, d);
    char file[512] = "", text[512] = "";
    int line = 0, col = -1, endline = 0, endcol = -1;
    if (T->I && T->I->frame) {
        snprintf(file, sizeof file, "%s", T->I->frame->code->file);
        cap_code_pos(T->I->frame->code, T->I->frame->pc, &line, &col, &endline, &endcol);
        cap_source_line(file, line, text, sizeof text);
    }
    PyObject *note =
        Py_BuildValue("{s:s,s:L,s:s,s:s,s:i,s:s}", "expr", b.data ? b.data : "", "value",
                      (long long)value, "why", why, "file", file, "line", line, "text", text);
    ptc_buf_free(&b);
    if (!note || PyList_Append(T->specialised, note) < 0) {
        Py_XDECREF(note);
        return -1;
    }
    Py_DECREF(note);
    return 0;
}

int cap_symint_specialise(cap_symint *s, const char *why, int64_t *out)
{
    cap_trace *T = live(s);
    if (!T || cap_t_sym_guard(T, ptc_dim_sub(T->arena, s->d, ptc_dim_c(s->hint)), Py_EQ) < 0)
        return -1;
    *out = s->hint;
    return note_specialised(T, s->d, s->hint, why);
}

static PyObject *value_of(PyObject *o, const char *why)
{
    int64_t v;
    return cap_symint_specialise((cap_symint *)o, why, &v) < 0 ? NULL : PyLong_FromLongLong(v);
}

/* An operand as a dim of s's trace: 1, 0 (not an int: NotImplemented), -1. */
static int operand(cap_trace *T, PyObject *o, ptc_dim *out)
{
    if (PyBool_Check(o)) {
        *out = ptc_dim_c(o == Py_True);
        return 1;
    }
    return cap_dim_from_obj(T, o, out);
}

/* The two operands of a binary slot (one of them a symint) as dims of its
 * trace: 1, 0 when one is not an int (NotImplemented), -1 on error. */
static int operands(PyObject *a, PyObject *b, cap_trace **T, ptc_dim *x, ptc_dim *y)
{
    *T = live((cap_symint *)(cap_is_symint(a) ? a : b));
    if (!*T)
        return -1;
    int ra = operand(*T, a, x), rb = ra > 0 ? operand(*T, b, y) : 0;
    return ra < 0 || rb < 0 ? -1 : ra && rb;
}

/* a op b on the operands' values, each symint specialised (true division,
 * powers, floats: the result is not a size). */
static PyObject *concrete(PyObject *a, PyObject *b, PyObject *(*op)(PyObject *, PyObject *))
{
    PyObject *x =
        cap_is_symint(a) ? value_of(a, "an arithmetic operation that is not a size") : Py_NewRef(a);
    PyObject *y = x && cap_is_symint(b) ? value_of(b, "an arithmetic operation that is not a size")
                                        : Py_XNewRef(x ? b : NULL);
    PyObject *r = x && y ? op(x, y) : NULL;
    Py_XDECREF(x);
    Py_XDECREF(y);
    return r;
}

typedef ptc_dim (*dim_op)(ptc_arena *, ptc_dim, ptc_dim);

static PyObject *arith(PyObject *a, PyObject *b, dim_op op, bool divides,
                       PyObject *(*fallback)(PyObject *, PyObject *))
{
    cap_trace *T;
    ptc_dim x, y;
    int r = operands(a, b, &T, &x, &y);
    if (r < 0)
        return NULL;
    if (r == 0) {
        if (PyFloat_Check(a) || PyFloat_Check(b))
            return concrete(a, b, fallback);
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (divides && !y.sym && y.value <= 0) {
        if (y.value == 0) {
            PyErr_SetString(PyExc_ZeroDivisionError, "integer division or modulo by zero");
            return NULL;
        }
        return concrete(a, b, fallback); /* floor semantics of negative divisors */
    }
    if (divides && y.sym && cap_t_sym_guard(T, ptc_dim_sub(T->arena, y, ptc_dim_c(1)), Py_GE) < 0)
        return NULL; /* the division's meaning holds for positive divisors */
    return cap_dim_obj(T, op(T->arena, x, y));
}

/* The slots get their operands in the expression's order, whichever of the
 * two is the symint. */
static PyObject *nb_add(PyObject *a, PyObject *b)
{
    return arith(a, b, ptc_dim_add, false, PyNumber_Add);
}
static PyObject *nb_sub(PyObject *a, PyObject *b)
{
    return arith(a, b, ptc_dim_sub, false, PyNumber_Subtract);
}
static PyObject *nb_mul(PyObject *a, PyObject *b)
{
    return arith(a, b, ptc_dim_mul, false, PyNumber_Multiply);
}
static PyObject *nb_floordiv(PyObject *a, PyObject *b)
{
    return arith(a, b, ptc_dim_floordiv, true, PyNumber_FloorDivide);
}
static PyObject *nb_mod(PyObject *a, PyObject *b)
{
    return arith(a, b, ptc_dim_mod, true, PyNumber_Remainder);
}
static PyObject *nb_truediv(PyObject *a, PyObject *b)
{
    return concrete(a, b, PyNumber_TrueDivide);
}
static PyObject *pow2(PyObject *a, PyObject *b)
{
    return PyNumber_Power(a, b, Py_None);
}
static PyObject *nb_pow(PyObject *a, PyObject *b, PyObject *m)
{
    (void)m;
    return concrete(a, b, pow2);
}

static PyObject *nb_neg(PyObject *a)
{
    cap_trace *T = live((cap_symint *)a);
    return T ? cap_dim_obj(T, ptc_dim_mul(T->arena, ((cap_symint *)a)->d, ptc_dim_c(-1))) : NULL;
}

static PyObject *nb_pos(PyObject *a)
{
    return Py_NewRef(a);
}
static PyObject *nb_index(PyObject *a)
{
    return value_of(a, "a use that needs its value");
}
static PyObject *nb_float(PyObject *a)
{
    PyObject *v = value_of(a, "a conversion to float");
    PyObject *f = v ? PyNumber_Float(v) : NULL;
    Py_XDECREF(v);
    return f;
}
static PyObject *nb_abs(PyObject *a)
{
    cap_symint *s = (cap_symint *)a;
    if (ptc_dim_nonneg(s->d))
        return Py_NewRef(a);
    PyObject *v = value_of(a, "abs()");
    PyObject *r = v ? PyNumber_Absolute(v) : NULL;
    Py_XDECREF(v);
    return r;
}

/* a op b answered from the hints, the answer kept as a guard. */
static PyObject *richcompare(PyObject *a, PyObject *b, int op)
{
    cap_trace *T;
    ptc_dim x, y;
    int r = operands(a, b, &T, &x, &y);
    if (r < 0)
        return NULL;
    if (r == 0) {
        if (!PyFloat_Check(a) && !PyFloat_Check(b))
            Py_RETURN_NOTIMPLEMENTED;
        PyObject *v = value_of(cap_is_symint(a) ? a : b, "a comparison with a float");
        if (!v)
            return NULL;
        PyObject *r =
            cap_is_symint(a) ? PyObject_RichCompare(v, b, op) : PyObject_RichCompare(a, v, op);
        Py_DECREF(v);
        return r;
    }
    ptc_dim diff = ptc_dim_sub(T->arena, x, y);
    int64_t h = cap_t_dim_hint(T, diff);
    bool holds = op == Py_LT   ? h < 0
                 : op == Py_LE ? h <= 0
                 : op == Py_EQ ? h == 0
                 : op == Py_NE ? h != 0
                 : op == Py_GT ? h > 0
                               : h >= 0;
    static const int negate[] = {[Py_LT] = Py_GE, [Py_LE] = Py_GT, [Py_EQ] = Py_NE,
                                 [Py_NE] = Py_EQ, [Py_GT] = Py_LE, [Py_GE] = Py_LT};
    if (cap_t_sym_guard(T, diff, holds ? op : negate[op]) < 0)
        return NULL;
    return Py_NewRef(holds ? Py_True : Py_False);
}

static int nb_bool(PyObject *a)
{
    cap_symint *s = (cap_symint *)a;
    cap_trace *T = live(s);
    if (!T || cap_t_sym_guard(T, s->d, s->hint != 0 ? Py_NE : Py_EQ) < 0)
        return -1;
    return s->hint != 0;
}

static Py_hash_t symint_hash(PyObject *a)
{
    PyObject *v = value_of(a, "a hash (a dict key or a set item)");
    Py_hash_t h = v ? PyObject_Hash(v) : -1;
    Py_XDECREF(v);
    return h;
}

static PyObject *symint_str(PyObject *a)
{
    PyObject *v = value_of(a, "a conversion to text");
    PyObject *r = v ? PyObject_Str(v) : NULL;
    Py_XDECREF(v);
    return r;
}

static PyObject *symint_repr(PyObject *a)
{
    if (((cap_symint *)a)->T)
        return symint_str(a);
    return PyUnicode_FromString("<symbolic size of a finished trace>");
}

static void symint_dealloc(PyObject *a)
{
    PyTypeObject *tp = Py_TYPE(a);
    PyObject_Free(a);
    Py_DECREF(tp);
}

static PyType_Slot symint_slots[] = {
    {Py_tp_dealloc, symint_dealloc},
    {Py_tp_repr, symint_repr},
    {Py_tp_str, symint_str},
    {Py_tp_hash, symint_hash},
    {Py_tp_richcompare, richcompare},
    {Py_nb_add, nb_add},
    {Py_nb_subtract, nb_sub},
    {Py_nb_multiply, nb_mul},
    {Py_nb_floor_divide, nb_floordiv},
    {Py_nb_remainder, nb_mod},
    {Py_nb_true_divide, nb_truediv},
    {Py_nb_power, nb_pow},
    {Py_nb_negative, nb_neg},
    {Py_nb_positive, nb_pos},
    {Py_nb_absolute, nb_abs},
    {Py_nb_bool, nb_bool},
    {Py_nb_index, nb_index},
    {Py_nb_int, nb_index},
    {Py_nb_float, nb_float},
    {Py_tp_doc, "ptc: a size computed from symbolic dimensions while tracing"},
    {0, NULL},
};

static PyType_Spec symint_spec = {"ptc._C.SymInt", sizeof(cap_symint), 0, Py_TPFLAGS_DEFAULT,
                                  symint_slots};

int cap_symint_types_init(PyObject *module)
{
    cap_symint_type = (PyTypeObject *)PyType_FromSpec(&symint_spec);
    if (!cap_symint_type ||
        PyModule_AddObjectRef(module, "SymInt", (PyObject *)cap_symint_type) < 0)
        return -1;
    return 0;
}
