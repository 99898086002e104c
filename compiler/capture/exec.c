/* Running a compiled function: the cache, guards, segments, breaks and the
 * fallbacks.
 *
 * A call binds its arguments into a frame (the starting state) and looks up
 * the entries at the function's first position. The first entry whose guards
 * pass runs its graph and then either builds the return value or rebuilds the
 * resume state, whose break instruction runs for real in ptc's interpreter up
 * to the next safe point; the next segment is looked up there, and so on.
 * A miss traces from the state in hand (tracing has no side effects, so the
 * state is still the real one) and caches the new entry; the failed guard of
 * the most recent entry is the recompile's reason. A position that needs more
 * than the recompile limit runs eagerly from then on, with one warning.
 *
 * Internal errors never reach the user as a wrong answer: the first segment
 * falls back to calling the function eagerly, later segments continue in real
 * mode from the state in hand; both warn once and dump a repro. PTC_STRICT=1
 * and fullgraph=True raise instead.
 */
#include "capture/exec.h"

#include <stdlib.h>
#include <string.h>

/* ---- positions ----------------------------------------------------------------------- */

static PyObject *position_key(cap_frame *base, cap_frame *top)
{
    cap_frame *chain[256];
    int n = 0;
    for (cap_frame *f = top; f && n < 256; f = f->parent)
        chain[n++] = f;
    uintptr_t buf[512];
    for (int i = 0; i < n; i++) {
        buf[2 * i] = (uintptr_t)chain[n - 1 - i]->code->code;
        buf[2 * i + 1] = (uintptr_t)chain[n - 1 - i]->pc;
    }
    (void)base;
    return PyBytes_FromStringAndSize((const char *)buf, (Py_ssize_t)(sizeof(uintptr_t) * 2 * n));
}

/* A position's capsule is freed when a reset drops it from the dict and the
 * last lookup holding it lets go; its entries live on in the calls running
 * them (cap_entry_ref). */
static void pos_free(PyObject *cap)
{
    cap_pos *p = PyCapsule_GetPointer(cap, "ptc.pos");
    if (p)
        Py_CLEAR(p->last_info);
    while (p && p->head) {
        cap_entry *e = p->head;
        p->head = e->next;
        cap_entry_unref(e);
    }
    free(p);
}

/* The capsule of the position (a new reference: a lookup holds it while
 * guards and tracing run Python code, during which a reset may drop it). */
static PyObject *position(cap_compiled *c, PyObject *key)
{
    PyObject *cap = PyDict_GetItem(c->positions, key);
    if (cap)
        return Py_NewRef(cap);
    cap_pos *p = calloc(1, sizeof *p);
    cap = p ? PyCapsule_New(p, "ptc.pos", pos_free) : NULL;
    if (!cap) {
        free(p);
        return NULL;
    }
    if (PyDict_SetItem(c->positions, key, cap) < 0)
        Py_CLEAR(cap);
    return cap;
}

static int state_frames(cap_interp *S, cap_frame **frames, int max)
{
    int n = 0;
    for (cap_frame *f = S->frame; f && n < max; f = f->parent)
        n++;
    int i = n;
    for (cap_frame *f = S->frame; f && i > 0; f = f->parent)
        frames[--i] = f;
    return n;
}

/* ---- one segment ----------------------------------------------------------------------- */

typedef struct segment_result {
    int rc;          /* CAP_DONE (result), CAP_STOP (new state in S), CAP_ERR */
    PyObject *result;
    bool intact; /* CAP_ERR before anything of the segment took effect: S can run for real */
    bool graph_raised; /* the graph raised the user's error (an index out of range, say) */
} segment_result;

static void set_grad(bool on)
{
    if (cap_set_grad_enabled(on) < 0)
        PyErr_Clear();
}

/* Rebuilding the values after the graph failed (an object whose __new__
 * wants arguments, say). Nothing of the segment took effect yet (effects
 * come after the recipes): the grad and autocast modes go back, the error
 * becomes an internal one naming the cause, and the entry is marked so
 * that its position runs eagerly from now on. */
static void recipes_failed(cap_entry *e)
{
    PyObject *type, *val, *tb;
    PyErr_Fetch(&type, &val, &tb);
    if (e->grad_end != e->grad_start)
        set_grad(e->grad_start);
    if (e->amp_end != e->amp_start) {
        cap_amp a = cap_amp_unpack(e->amp_start);
        if (cap_amp_write(&a) < 0)
            PyErr_Clear();
    }
    bool internal = type && PyErr_GivenExceptionMatches(type, cap_InternalError);
    PyObject *msg = val ? PyObject_Str(val) : NULL;
    const char *m = msg ? PyUnicode_AsUTF8(msg) : NULL;
    PyErr_Clear();
    if (internal && val) {
        PyErr_Restore(type, val, tb);
        type = val = tb = NULL;
    } else {
        PyErr_Format(cap_InternalError,
                     "ptc: cannot rebuild the values live after the graph: %s: %s",
                     type ? cap_tpname((PyTypeObject *)type) : "error", m ? m : "");
    }
    Py_XDECREF(msg);
    Py_XDECREF(type);
    Py_XDECREF(val);
    Py_XDECREF(tb);
    e->broken = true;
}

/* The interpreter's call_once: a call ptc would not inline, made through
 * the compiled function's caches (the end of this file). */
static PyObject *call_through_caches(void *c, PyObject *fn, PyObject *const *args, int nargs,
                                     PyObject *kwnames);

/* Runs e's graph; a backend that failed and fell back to torch ops is
 * reported here, above the backends, with the run's own error kept. */
static int run_graph(cap_entry *e, PyObject **vals, PyObject **outs)
{
    char *fell_back = NULL;
    int rc = cap_entry_run_graph(e, vals, outs, &fell_back);
    if (fell_back && e->owner) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        cap_warn_fallback(&e->owner->rep, e, "run", fell_back);
        PyErr_Restore(t, v, tb);
    }
    free(fell_back);
    return rc;
}

/* A graph's own error, as eager would raise it at one of its ops: not
 * ptc's failure (an internal error or a break). */
static bool graph_raised_users_error(void)
{
    return PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_Exception) &&
           !PyErr_ExceptionMatches(cap_InternalError) &&
           !PyErr_ExceptionMatches(cap_GraphBreakError);
}

/* Runs entry e on the state in S (its guards passed with vals). On a break,
 * S gets the resume state and steps to the next safe point. k: the call's
 * clock while measuring (measure.c), else NULL. */
static segment_result run_entry(cap_compiled *c, cap_entry *e, cap_interp *S, PyObject **vals,
                                cap_clock *k)
{
    segment_result r = {CAP_ERR, NULL};
    PyObject **outs = NULL, **rv = NULL;
    int nout = e->graph ? e->graph->noutputs : 0;
    outs = calloc((size_t)nout + 1, sizeof *outs);
    rv = calloc((size_t)e->nrecipes + 1, sizeof *rv);
    e->hits++;
    if (k)
        cap_clock_graph_begin(k, e, vals);
    if (e->graph && run_graph(e, vals, outs) < 0) {
        r.graph_raised = graph_raised_users_error();
        goto done;
    }
    if (k)
        cap_clock_graph_end(k, e, outs, nout);
    if (e->grad_end != e->grad_start)
        set_grad(e->grad_end);
    if (e->amp_end != e->amp_start) {
        cap_amp a = cap_amp_unpack(e->amp_end);
        if (cap_amp_write(&a) < 0)
            goto done;
    }
    if (cap_entry_run_recipes(e, vals, outs, rv) < 0) {
        recipes_failed(e);
        r.intact = true;
        goto done;
    }
    if (cap_entry_run_effects(e, rv) < 0)
        goto done;
    if (e->end == CAP_END_RETURN) {
        r.rc = CAP_DONE;
        r.result = Py_XNewRef(rv[e->ret]);
        goto done;
    }
    /* The resume state replaces the old one, then its break instruction
       (and whatever follows up to a safe point) runs for real. */
    cap_interp_clear(S);
    if (cap_entry_resume_frames(e, rv, S) < 0)
        goto done;
    S->stepping = true;
    S->steps = 0;
    S->min_steps = 1;
    if (e->brk.code == CAP_B_UNSUPPORTED_OBJECT) {
        S->call_once = call_through_caches;
        S->call_once_ctx = c;
    }
    int rc = cap_run(S);
    S->call_once = NULL;
    if (rc == CAP_DONE) {
        r.rc = CAP_DONE;
        r.result = S->result;
        S->result = NULL;
    } else if (rc == CAP_STOP) {
        r.rc = CAP_STOP;
    }
done:
    for (int i = 0; i < nout; i++)
        Py_XDECREF(outs[i]);
    for (int i = 0; i < e->nrecipes; i++)
        Py_XDECREF(rv[i]);
    free(outs);
    free(rv);
    return r;
}

/* ---- compiling on a miss ---------------------------------------------------------------- */

static cap_frame *clone_frame(cap_trace *T, cap_frame *f, int depth)
{
    cap_frame *g = cap_frame_new(f->code, f->func, f->globals, f->builtins);
    if (!g)
        return NULL;
    for (int i = 0; i < f->code->nlp; i++) {
        g->lp[i] = Py_XNewRef(f->lp[i]);
        /* At pc 0 an argument that becomes a cell is still the plain value
           (MAKE_CELL has not run). */
        if (f->lp[i] && (!(f->code->lpkind[i] & (CAP_LP_CELL | CAP_LP_FREE)) || f->pc == 0))
            g->slot_src[i] = cap_source_add(T, CAP_S_LOCAL, -1, depth, i, PyTuple_GetItem(f->code->lpnames, i));
        else if (f->lp[i] && f->pc > 0) {
            /* A cell of the state: outside, its contents reached through it. */
            int s = cap_source_add(T, CAP_S_LOCAL, -1, depth, i, PyTuple_GetItem(f->code->lpnames, i));
            if (cap_t_outside(T, f->lp[i]) == false && s >= 0)
                cap_t_map(T, f->lp[i], s);
        }
    }
    for (int i = 0; i < f->sp; i++)
        g->stack[i] = Py_XNewRef(f->stack[i]);
    g->sp = f->sp;
    g->pc = f->pc;
    g->kwnames = f->kwnames;
    g->ret = f->ret;
    g->ret_a = Py_XNewRef(f->ret_a);
    g->ret_b = Py_XNewRef(f->ret_b);
    g->ret_arg = f->ret_arg;
    /* The trace's own copy: a resumed frame's path belongs to the entry that
       built it, which a reset may free before the new entry. */
    g->module_path = f->module_path ? ptc_arena_strdup(T->arena, f->module_path) : NULL;
    return g;
}

/* At a call's start the *args tuple and **kwargs dict are new objects made
 * by binding: their items keep sources, the containers themselves are the
 * trace's (mutable, rebuilt at run time). */
static int fresh_varargs(cap_trace *T, cap_frame *g)
{
    cap_code *c = g->code;
    int i = c->argcount + c->kwonly;
    for (int k = 0; k < 2; k++) {
        bool has = k == 0 ? (c->flags & 0x04) : (c->flags & 0x08);
        if (!has)
            continue;
        int slot = i++;
        PyObject *v = g->lp[slot];
        int s = g->slot_src[slot];
        if (!v || s < 0)
            continue;
        PyObject *copy = NULL;
        if (PyTuple_CheckExact(v)) {
            if (cap_guard_add(T, CAP_G_LEN, s, NULL, PyTuple_Size(v)) < 0)
                return -1;
            copy = PyTuple_New(PyTuple_Size(v));
            for (Py_ssize_t j = 0; copy && j < PyTuple_Size(v); j++) {
                int is = cap_source_add(T, CAP_S_INDEX, s, 0, (int)j, NULL);
                PyObject *w = is >= 0 ? cap_t_wrap(T, PyTuple_GetItem(v, j), is) : NULL;
                if (!w)
                    Py_CLEAR(copy);
                else
                    PyTuple_SetItem(copy, j, w);
            }
        } else if (PyDict_CheckExact(v)) {
            PyObject *keys = PyDict_Keys(v), *kt = keys ? PyList_AsTuple(keys) : NULL;
            Py_XDECREF(keys);
            if (!kt || cap_guard_add(T, CAP_G_KEYS, s, kt, 0) < 0) {
                Py_XDECREF(kt);
                return -1;
            }
            copy = PyDict_New();
            for (Py_ssize_t j = 0; copy && j < PyTuple_Size(kt); j++) {
                PyObject *key = PyTuple_GetItem(kt, j);
                int is = cap_source_add(T, CAP_S_ITEM, s, 0, 0, key);
                PyObject *w = is >= 0 ? cap_t_wrap(T, PyDict_GetItem(v, key), is) : NULL;
                if (!w || PyDict_SetItem(copy, key, w) < 0)
                    Py_CLEAR(copy);
                Py_XDECREF(w);
            }
            Py_DECREF(kt);
        } else {
            continue;
        }
        if (!copy)
            return -1;
        Py_SETREF(g->lp[slot], copy);
        g->slot_src[slot] = -1;
    }
    return 0;
}

/* Guards what a frame still needs of its function. A frame that has not
 * started reads the function itself (defaults, closure): identity. A resumed
 * frame reads only its code and globals (its cells are locals by then), and
 * the previous segment rebuilds an inlined method's function and bound method
 * on every call, so identity would fail every time: guard the code and the
 * globals of the function, and the object a bound method is bound to. */
static int guard_func(cap_trace *T, PyObject *func, int fs, bool at_start)
{
    if (cap_is_method(func) && !at_start) {
        PyObject *self = PyObject_GetAttr(func, cap_P.s_self), *fn = PyObject_GetAttr(func, cap_P.s_func);
        int ss = self && fn ? cap_source_add(T, CAP_S_ATTR, fs, 0, 0, cap_P.s_self) : -1;
        int ff = ss >= 0 ? cap_source_add(T, CAP_S_ATTR, fs, 0, 0, cap_P.s_func) : -1;
        int rc = ff >= 0 && cap_guard_add(T, CAP_G_ID, ss, self, 0) == 0 ? guard_func(T, fn, ff, false) : -1;
        Py_XDECREF(self);
        Py_XDECREF(fn);
        return rc;
    }
    if (!cap_is_function(func) || at_start)
        return cap_guard_add(T, CAP_G_ID, fs, func, 0);
    PyObject *attrs[2] = {cap_P.s_code, cap_P.s_globals};
    for (int i = 0; i < 2; i++) {
        PyObject *v = PyObject_GetAttr(func, attrs[i]);
        int s = v ? cap_source_add(T, CAP_S_ATTR, fs, 0, 0, attrs[i]) : -1;
        int rc = s >= 0 ? cap_guard_add(T, CAP_G_ID, s, v, 0) : -1;
        Py_XDECREF(v);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* The tracing interpreter's copy of the state in S, with sources. */
static int trace_state(cap_trace *T, cap_interp *S, cap_interp *It)
{
    cap_frame *frames[256];
    int n = state_frames(S, frames, 256);
    for (int d = 0; d < n; d++) {
        cap_frame *g = clone_frame(T, frames[d], d);
        if (!g)
            return -1;
        g->ret = frames[d]->ret;
        cap_push_frame(It, g);
        g->depth = d;
        if (d == 0 && n == 1 && g->pc == 0 && fresh_varargs(T, g) < 0)
            return -1;
        int fs = cap_source_add(T, CAP_S_FUNC, -1, d, 0, NULL);
        if (fs < 0 || guard_func(T, g->func, fs, g->pc == 0) < 0)
            return -1;
        cap_t_map(T, g->func, fs);
        if (g->ret_a) {
            /* The instance an __init__ frame returns is the state's object
               (also its `self`): rebuilt as itself, never copied. */
            int rs = cap_source_add(T, CAP_S_RETA, -1, d, 0, NULL);
            if (rs < 0)
                return -1;
            cap_t_map(T, g->ret_a, rs);
        }
        for (int i = 0; i < g->sp; i++) {
            int s = cap_source_add(T, CAP_S_STACK, -1, d, i, NULL);
            PyObject *w = s >= 0 && g->stack[i] ? cap_t_wrap(T, g->stack[i], s) : NULL;
            if (g->stack[i] && !w)
                return -1;
            if (w)
                Py_SETREF(g->stack[i], w);
        }
    }
    return 0;
}

static int add_no_inline(PyObject *set, cap_frame *f)
{
    PyObject *key = Py_BuildValue("(ni)", (Py_ssize_t)(uintptr_t)f->code->code, f->pc);
    int rc = key ? PySet_Add(set, key) : -1;
    Py_XDECREF(key);
    return rc;
}

/* Raises GraphBreakError for fullgraph=True: the break, the line, a caret. */
static void raise_fullgraph(const cap_break *b)
{
    const cap_break_info *info = cap_break_lookup(b->code);
    char caret[600] = "";
    int col = b->col > 0 ? b->col - 1 : 0;
    int width = b->endcol > b->col ? b->endcol - b->col : 1;
    if (col < 500) {
        memset(caret, ' ', (size_t)col);
        for (int i = 0; i < width && col + i < 590; i++)
            caret[col + i] = '^';
        caret[col + (width < 90 ? width : 90)] = 0;
    }
    PyObject *msg = PyUnicode_FromFormat(
        "PTC-B%03d %s: %s\n  File \"%s\", line %d, column %d\n    %s\n    %s\n  %s\n  hint: %s",
        b->code, info->reason, b->detail, b->file, b->line, b->col, b->text, caret,
        info->explanation, info->hint);
    PyObject *exc = msg ? PyObject_CallOneArg_compat(cap_GraphBreakError, msg) : NULL;
    if (exc) {
        PyObject *code = PyUnicode_FromFormat("PTC-B%03d", b->code);
        PyObject_SetAttrString(exc, "code", code);
        PyObject_SetAttrString(exc, "reason", PyUnicode_FromString(info->reason));
        PyObject_SetAttrString(exc, "filename", PyUnicode_FromString(b->file));
        PyObject_SetAttrString(exc, "lineno", PyLong_FromLong(b->line));
        Py_XDECREF(code);
        PyErr_SetObject(cap_GraphBreakError, exc);
    }
    Py_XDECREF(exc);
    Py_XDECREF(msg);
}

/* fullgraph=True and the function returns a value ptc cannot rebuild: a
 * PTC-B025 break at the function's first line rather than an internal error. */
static void fullgraph_unrebuildable(const cap_code *code, const char *why)
{
    cap_break b = {.code = CAP_B_UNSUPPORTED_OBJECT, .line = code->firstlineno, .col = 1};
    const char *pre = "ptc: cannot rebuild state: ";
    if (strncmp(why, pre, strlen(pre)) == 0)
        why += strlen(pre);
    snprintf(b.detail, sizeof b.detail, "%s returns %s", code->qualname_s, why);
    snprintf(b.file, sizeof b.file, "%s", code->file);
    cap_source_line(code->file, code->firstlineno, b.text, sizeof b.text);
    raise_fullgraph(&b);
}

/* The partial graph of the last trace that failed internally (or NULL): the
 * repro of the warning that reports the failure. */
static ptc_graph *failed_graph;

/* Keeps a copy of a failing trace's graph for the repro dump. */
static void keep_failed(cap_trace *T)
{
    if (failed_graph)
        ptc_graph_free(failed_graph);
    failed_graph = T->g && T->g->nnodes ? ptc_graph_clone(T->g, NULL) : NULL;
}

/* A graph traced wholly with grad mode off computes nothing autograd sees:
 * its values carry no requires_grad (the printed stages and ptview marked
 * every value of a no_grad run `grad`). */
static void drop_grad_marks(cap_entry *e)
{
    ptc_graph *g = e->graph;
    for (int i = 0; g && i < g->nnodes; i++)
        if (e->node_grad && e->node_grad[g->nodes[i]->id])
            return;
    for (int i = 0; g && i < g->nvalues; i++)
        g->values[i]->type.requires_grad = false;
}

static bool symbolic_failed(cap_trace *T, int rc, char *why, size_t size);

/* Sets up the trace T of It over the state in S and runs it: the CAP_* of
 * cap_run, or CAP_ERR. */
static int run_trace(cap_compiled *c, cap_interp *S, cap_interp *It, cap_trace *T, cap_break redo,
                     PyObject *no_inline, int dynamic)
{
    It->T = T;
    T->redo = redo;
    Py_SETREF(T->no_inline, Py_NewRef(no_inline));
    T->dynamic = dynamic;
    T->symint_results = c->opts.symint_results;
    T->auto_dyn = c->auto_dyn;
    T->prev_sizes = c->prev_sizes;
    T->static_only = dynamic == 0 && c->opts.dynamic != 0;
    T->resumed_ids = Py_XNewRef(S->ids);
    return cap_guard_add(T, CAP_G_GRAD, -1, NULL, T->grad_enabled) < 0 ||
                   cap_guard_add(T, CAP_G_AUTOCAST, -1, NULL, cap_amp_pack(&T->amp)) < 0 ||
                   trace_state(T, S, It) < 0
               ? CAP_ERR
               : cap_run(It);
}

/* The outermost frame itself holds a value ptc cannot rebuild at the break
 * (or returns one): this position runs for real (true), or under
 * fullgraph=True that is the break the user hears of (false, error set). */
static bool outermost_unrebuildable(cap_compiled *c, cap_interp *S, cap_trace *T, int rc)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyObject *s = v ? PyObject_Str(v) : NULL;
    const char *why = s ? PyUnicode_AsUTF8(s) : "";
    if (c->opts.fullgraph && rc == CAP_DONE)
        fullgraph_unrebuildable(S->base->code, why ? why : "");
    else
        cap_report_untraceable(&c->rep, S->base->code->qualname_s, &T->brk, why ? why : "");
    Py_XDECREF(s);
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
    if (c->opts.fullgraph && rc == CAP_DONE)
        return false;
    PyErr_Clear();
    return true;
}

/* A trace became entry e: it belongs to c now, and the compile is reported. */
static void entry_made(cap_compiled *c, cap_interp *S, cap_entry *e, cap_trace *T, int recompile,
                       const char *reason, double t0)
{
    e->owner = c;
    e->recompile = recompile;
    e->compile_ms = ptc_now_ms() - t0;
    snprintf(e->frame_name, sizeof e->frame_name, "%s", S->base->code->qualname_s);
    cap_stats_attach(e);
    drop_grad_marks(e);
    cap_report_compile(&c->rep, e, T, reason);
}

/* Prepares e's backend: e, or NULL (e dropped) with an error, or with why
 * set when only the symbolic sizes failed, or after Ctrl-C. A backend that
 * fails falls back to torch ops with a warning, where those can run it. */
static cap_entry *prepare_backend(cap_compiled *c, cap_entry *e, char *why, size_t whysize,
                                  double t0)
{
    ptc_error err;
    double tb = ptc_now_ms();
    int prepared = cap_backend_prepare(e, &c->opts, &err);
    if (e->st) {
        e->st->backend_ms = ptc_now_ms() - tb;
        e->st->backend = e->backend;
    }
    if (prepared < 0) {
        char buf[1200];
        ptc_error_format(&err, buf, sizeof buf);
        if (e->syms.n > 0 && PyErr_CheckSignals() == 0) {
            /* The backend cannot run this graph with symbolic sizes (yet). */
            PyErr_Clear();
            snprintf(why, whysize, "backend: %s", buf);
            cap_report_compiled(e);
            cap_entry_unref(e);
            return NULL;
        }
        /* Ctrl-C ended the compile (a planted hang): the user's
           KeyboardInterrupt, not a fallback */
        if (PyErr_CheckSignals() < 0) {
            cap_report_compiled(e);
            cap_entry_unref(e);
            return NULL;
        }
        if (!e->bstate || !cap_backend_ready(e) || cap_cfg.strict) {
            /* Not even torch ops can run this graph, or strict mode
               wants the failure rather than torch ops. */
            PyErr_Format(cap_InternalError, "ptc: cannot run the captured graph: %s", buf);
            cap_report_compiled(e);
            cap_entry_unref(e);
            return NULL;
        }
        cap_warn_fallback(&c->rep, e, "backend", buf);
    }
    if (e->autograd_fallback)
        cap_report_autograd(&c->rep, e);
    if (e->npieces)
        cap_report_pieces(&c->rep, e);
    e->compile_ms = ptc_now_ms() - t0;
    cap_report_compiled(e);
    return e;
}

/* Traces from the state in S. NULL with an error on failure; *eager set when
 * this position cannot be compiled (run it for real). NULL without an error
 * and with why[0] set: symbolic sizes failed (retry with less dynamic: the
 * dynamic= setting, -1 None, 0 False, 1 True). */
static cap_entry *compile_once(cap_compiled *c, cap_interp *S, const char *reason, int recompile,
                               bool *eager, int dynamic, char *why, size_t whysize)
{
    *eager = false;
    PyObject *no_inline = PySet_New(NULL);
    cap_entry *e = NULL;
    cap_break unbuildable = {0};
    double t0 = ptc_now_ms();
    if (failed_graph) {
        /* A repro shows this compile's graph, never an older one. */
        ptc_graph_free(failed_graph);
        failed_graph = NULL;
    }
    long redo_at = 0; /* see cap_trace.sync_step */
    char followed[600] = "", why_followed[1400];
    cap_break redo = {0};
    for (int attempt = 0; no_inline && attempt < 16; attempt++) {
        cap_interp It = {.mode = CAP_TRACE, .max_depth = cap_cfg.inline_depth, .break_at = redo_at};
        cap_trace *T = cap_trace_new(c->module_names, &It);
        if (!T)
            break;
        int rc = run_trace(c, S, &It, T, redo, no_inline, dynamic);
        if (symbolic_failed(T, rc, why, whysize)) {
            cap_interp_clear(&It);
            cap_trace_free(T);
            break;
        }
        if (rc == CAP_BREAK && c->opts.fullgraph) {
            raise_fullgraph(&T->brk);
            cap_interp_clear(&It);
            cap_trace_free(T);
            break;
        }
        if ((rc == CAP_DONE || rc == CAP_BREAK) && !T->static_only &&
            cap_t_follow_changed_sizes(T, followed, sizeof followed)) {
            /* New tensors sized as a changed size was: trace them symbolic. */
            cap_interp_clear(&It);
            cap_trace_free(T);
            redo_at = 0;
            continue;
        }
        if (rc == CAP_BREAK && !redo_at && T->sync_exit >= 0 && It.steps == T->sync_exit + 1) {
            /* The break came out of a nested run, whose builtin reruns for
               real from its start: trace again, breaking before it, so that
               nothing its callbacks did in the trace happened. */
            redo_at = T->sync_step + 1;
            redo = T->brk;
            cap_interp_clear(&It);
            cap_trace_free(T);
            continue;
        }
        int unrec = -1;
        if ((rc == CAP_DONE || rc == CAP_BREAK) && cap_cfg.inject_failure == 1) {
            keep_failed(T);
            PyErr_SetString(cap_InternalError,
                            "ptc: injected internal error (ptc.config.inject_failure)");
            rc = CAP_ERR;
        }
        if (rc == CAP_DONE || rc == CAP_BREAK)
            e = cap_entry_build(T, &It, rc, &unrec);
        if (!e && unrec > 0) {
            /* Not inlining the call that holds the unbuildable value. */
            unbuildable = T->brk; /* reported if every retry fails */
            PyErr_Clear();
            cap_frame *f = It.frame;
            for (int d = It.frame->depth; d > unrec - 1 && f; d--)
                f = f->parent;
            if (f && add_no_inline(no_inline, f) == 0) {
                cap_interp_clear(&It);
                cap_trace_free(T);
                redo_at = 0; /* another trace: its steps differ */
                continue;
            }
        }
        if (!e && unrec == 0)
            *eager = outermost_unrebuildable(c, S, T, rc);
        else if (!e)
            keep_failed(T);
        if (e) {
            if (followed[0])
                snprintf(why_followed, sizeof why_followed, "%s; %s", reason, followed);
            entry_made(c, S, e, T, recompile, followed[0] ? why_followed : reason, t0);
        }
        cap_interp_clear(&It);
        cap_trace_free(T);
        break;
    }
    Py_XDECREF(no_inline);
    if (why[0])
        return NULL;
    if (!e && !*eager && !PyErr_Occurred()) {
        /* Every retry without inlining still left unbuildable state. */
        cap_report_untraceable(&c->rep, S->base->code->qualname_s, &unbuildable,
                               "state cannot be rebuilt at any break");
        *eager = true;
    }
    return e ? prepare_backend(c, e, why, whysize, t0) : NULL;
}

/* Did a trace with symbolic sizes fail where static sizes may not (something
 * needed a concrete size, or an internal error)? Sets why. */
static bool symbolic_failed(cap_trace *T, int rc, char *why, size_t size)
{
    if (T->static_only || !cap_t_symbolic(T))
        return false;
    if (T->static_why[0]) {
        snprintf(why, size, "%s at %s:%d", T->static_why, T->brk.file, T->brk.line);
        return true;
    }
    if (rc != CAP_ERR || !PyErr_ExceptionMatches(cap_InternalError))
        return false;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyObject *s = v ? PyObject_Str(v) : NULL;
    snprintf(why, size, "%s", s && PyUnicode_AsUTF8(s) ? PyUnicode_AsUTF8(s) : "internal error");
    PyErr_Clear();
    Py_XDECREF(s);
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
    return true;
}

/* Traces with symbolic sizes where the options and marks ask for them, and
 * again with static sizes where those fail (the reason in the log and
 * ptc.explain). */
static cap_entry *compile_at(cap_compiled *c, cap_interp *S, const char *reason, int recompile,
                             bool *eager, PyObject *prev_sizes)
{
    char why[1400] = "";
    c->prev_sizes = prev_sizes;
    int dynamic = c->opts.dynamic == 1 && c->all_dynamic_failed ? -1 : c->opts.dynamic;
    cap_entry *e = compile_once(c, S, reason, recompile, eager, dynamic, why, sizeof why);
    if (!e && why[0] && dynamic == 1) {
        /* dynamic=True: every size symbolic failed; the sizes that changed
           and the marked ones may still be (and are all later compiles try). */
        cap_report_static_fallback(&c->rep, S->base->code->qualname_s, why, false);
        c->all_dynamic_failed = true;
        why[0] = 0;
        e = compile_once(c, S, reason, recompile, eager, -1, why, sizeof why);
    }
    if (e || !why[0])
        return e;
    cap_report_static_fallback(&c->rep, S->base->code->qualname_s, why, true);
    char again[900];
    snprintf(again, sizeof again, "%s (static sizes: %s)", reason, why);
    why[0] = 0;
    return compile_once(c, S, again, recompile, eager, 0, why, sizeof why);
}

/* ---- the drive loop --------------------------------------------------------------------- */

static void warn_limit(cap_compiled *c, cap_pos *p, const char *name)
{
    if (p->warned)
        return;
    p->warned = true;
    char msg[1200];
    snprintf(msg, sizeof msg,
             "ptc: %s hit the recompile limit (%d); it now runs eagerly. The guard that kept "
             "failing: %s",
             name, cap_cfg.recompile_limit, p->last_fail);
    if (PyErr_WarnEx(PyExc_UserWarning, msg, 1) < 0)
        PyErr_Clear();
    cap_report_limit(&c->rep, name, p->last_fail, p->last_info);
}

/* Source values of one guard walk: a buffer grown to the entry's needs. */
typedef struct valbuf {
    PyObject **vals;
    bool *owned;
    int cap;
    PyObject *inl_vals[64];
    bool inl_owned[64];
} valbuf;

static int valbuf_fit(valbuf *b, int n)
{
    if (!b->vals) {
        b->vals = b->inl_vals;
        b->owned = b->inl_owned;
        b->cap = 64;
    }
    if (n <= b->cap)
        return 0;
    PyObject **v = calloc((size_t)n, sizeof *v);
    bool *o = calloc((size_t)n, sizeof *o);
    if (!v || !o) {
        free(v);
        free(o);
        PyErr_NoMemory();
        return -1;
    }
    if (b->vals != b->inl_vals) {
        free(b->vals);
        free(b->owned);
    }
    b->vals = v;
    b->owned = o;
    b->cap = n;
    return 0;
}

static void valbuf_free(valbuf *b)
{
    if (b->vals && b->vals != b->inl_vals) {
        free(b->vals);
        free(b->owned);
    }
    b->vals = NULL;
}

static int check(cap_entry *e, cap_frame **frames, int nf, valbuf *b, int *failed)
{
    if (valbuf_fit(b, e->nsrc + 1) < 0)
        return -1;
    return cap_entry_check(e, frames, nf, b->vals, b->owned, failed);
}

const char *const cap_stance_names[] = {
    "default",           "force_eager",        "eager_on_recompile",
    "fail_on_recompile", "eager_then_compile", NULL};

int cap_stance_of(const char *name)
{
    for (int i = 0; cap_stance_names[i]; i++)
        if (strcmp(name, cap_stance_names[i]) == 0)
            return i;
    return -1;
}

/* The cap_stance of torch's DynamoStance st. What ptc does not act on is
 * one notice each: skip_guard_eval_unsafe, force_backend, a stance ptc does
 * not know (the default then). */
static int decode_torch_stance(PyObject *st)
{
    PyObject *name = PyObject_GetAttrString(st, "stance");
    PyObject *unsafe = PyObject_GetAttrString(st, "skip_guard_eval_unsafe");
    PyObject *backend = PyObject_GetAttrString(st, "backend");
    const char *s = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    int stance = s ? cap_stance_of(s) : -1;
    char text[300];
    if (s && strcmp(s, "aot_eager_then_compile") == 0) {
        cap_not_acted_on(
            "torch.compiler.set_stance('aot_eager_then_compile') runs ptc's first "
            "calls plainly eagerly (ptc has no AOT eager): it is 'eager_then_compile'.");
        stance = CAP_STANCE_EAGER_THEN_COMPILE;
    } else if (s && stance < 0) {
        snprintf(text, sizeof text,
                 "torch.compiler.set_stance('%.100s') is not acted on: ptc's compiled functions "
                 "keep the default stance.",
                 s);
        cap_not_acted_on(text);
    }
    if (unsafe && PyObject_IsTrue(unsafe) > 0)
        cap_not_acted_on("torch.compiler.set_stance(skip_guard_eval_unsafe=True) has no effect on "
                         "ptc: it checks every guard (see ptc.config.trust_module_state).");
    if (backend && backend != Py_None)
        cap_not_acted_on("torch.compiler.set_stance(force_backend=...) has no effect on ptc's "
                         "compiled functions: each keeps the backend it was compiled with.");
    PyErr_Clear();
    Py_XDECREF(name);
    Py_XDECREF(unsafe);
    Py_XDECREF(backend);
    return stance < 0 ? CAP_STANCE_DEFAULT : stance;
}

/* torch.compiler.set_stance's stance (torch._dynamo.eval_frame._stance),
 * once torch._dynamo is loaded; decoded again only when torch has set
 * another (each set_stance makes a new DynamoStance; the last one is held,
 * so its identity is not reused). */
static int torch_stance(void)
{
    static PyObject *module_name, *attr, *eval_frame, *last;
    static int decoded = CAP_STANCE_DEFAULT;
    if (!eval_frame) {
        if (!module_name && !(module_name = PyUnicode_InternFromString("torch._dynamo.eval_frame")))
            goto fail;
        if (!(eval_frame = PyImport_GetModule(module_name)))
            goto fail;
    }
    if (!attr && !(attr = PyUnicode_InternFromString("_stance")))
        goto fail;
    PyObject *st = PyObject_GetAttr(eval_frame, attr);
    if (!st)
        goto fail;
    if (st == last) {
        Py_DECREF(st);
        return decoded;
    }
    Py_XSETREF(last, st);
    return decoded = decode_torch_stance(st);
fail:
    PyErr_Clear();
    return CAP_STANCE_DEFAULT;
}

int cap_stance_now(void)
{
    return cap_cfg.stance != CAP_STANCE_DEFAULT ? cap_cfg.stance : torch_stance();
}

/* What the stance says when no entry of position p fits: 1 run eagerly, 0
 * compile, -1 raise (a Python error is set). A recompile is a miss at a
 * position that has entries. */
static int stance_on_miss(int stance, cap_pos *p, const char *name)
{
    bool recompile = p->head != NULL;
    switch (stance) {
    case CAP_STANCE_EAGER_ON_RECOMPILE:
        return recompile;
    case CAP_STANCE_FAIL_ON_RECOMPILE:
        if (!recompile)
            return 0;
        PyErr_Format(PyExc_RuntimeError,
                     "Detected recompile when ptc's stance is 'fail_on_recompile'. function name: "
                     "'%s', triggered by the guard failure: %s",
                     name, p->last_fail);
        return -1;
    case CAP_STANCE_EAGER_THEN_COMPILE:
        if (recompile || p->ran_eagerly)
            return 0;
        p->ran_eagerly = true;
        return 1;
    default:
        return 0;
    }
}

/* dynamic=None (or True, after a fallback): a tensor guard that failed only
 * because sizes changed makes
 * those dims symbolic from the next trace on (said in the recompile reason). */
static void note_size_change(cap_compiled *c, cap_entry *e, int failed, PyObject **vals,
                             char *reason, size_t size)
{
    const cap_guard *g = &e->guards[failed];
    if (c->opts.dynamic == 0 || g->kind != CAP_G_TENSOR || !vals[g->src])
        return;
    int k = e->src[g->src].kind;
    if (cap_source_module_tensor(k) || k == CAP_S_CONST)
        return;
    int dims = cap_tmeta_size_change(vals[g->src], g->tm);
    if (!dims)
        return;
    char name[400];
    cap_source_str(e->src, e->nsrc, g->src, name, sizeof name);
    PyObject *old = PyDict_GetItemString(c->auto_dyn, name);
    PyObject *mask = PyLong_FromLong((old ? PyLong_AsLong(old) : 0) | dims);
    if (!mask || PyDict_SetItemString(c->auto_dyn, name, mask) < 0)
        PyErr_Clear();
    Py_XDECREF(mask);
    size_t n = strlen(reason);
    n += (size_t)snprintf(reason + n, n < size ? size - n : 0, "; size change: %s dims", name);
    for (int d = 0; d < g->tm->ndim && n < size; d++)
        if (dims >> d & 1)
            n += (size_t)snprintf(reason + n, size - n, " %d", d);
    if (n < size)
        snprintf(reason + n, size - n, " become dynamic");
}

/* The sizes each input tensor of e had ({source text: sizes}): a recompile
 * under dynamic=None makes the dims whose sizes changed since symbolic. */
static PyObject *tensor_sizes(cap_entry *e)
{
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < e->nguards; i++) {
        const cap_guard *g = &e->guards[i];
        if (g->kind != CAP_G_TENSOR)
            continue;
        char name[400];
        cap_source_str(e->src, e->nsrc, g->src, name, sizeof name);
        PyObject *t = PyTuple_New(g->tm->ndim);
        for (int k = 0; t && k < g->tm->ndim; k++)
            PyTuple_SetItem(t, k,
                            PyLong_FromLongLong((g->tm->dyn >> k & 1) ? -1 : g->tm->sizes[k]));
        if (!t || PyDict_SetItemString(d, name, t) < 0)
            Py_CLEAR(d);
        Py_XDECREF(t);
    }
    PyErr_Clear();
    return d;
}

/* Finds (or compiles) the entry for the state in S among position p's:
 * NULL with *eager when the state must run for real; NULL without eager on
 * an error. On success (a new reference to the entry) b holds the entry's
 * source values. */
static cap_entry *lookup_at(cap_compiled *c, cap_pos *p, cap_interp *S, valbuf *b, bool *eager)
{
    int stance_now = cap_stance_now();
    if (p->eager || stance_now == CAP_STANCE_FORCE_EAGER) {
        *eager = true;
        return NULL;
    }
    cap_frame *frames[256];
    int nf = state_frames(S, frames, 256);
    cap_entry *last = NULL;
    int failed = -1;
    for (cap_entry *e = p->head; e; e = e->next) {
        int ok = check(e, frames, nf, b, &failed);
        if (ok < 0)
            return NULL;
        if (ok && e->broken) { /* its recipes failed: this position runs for real */
            cap_entry_release_vals(e, b->vals, b->owned);
            p->eager = true;
            *eager = true;
            return NULL;
        }
        if (ok)
            return cap_entry_ref(e);
        if (e == p->head) { /* most recent: its failure is the recompile reason */
            cap_guard_describe(e, failed, b->vals, p->last_fail, sizeof p->last_fail);
            note_size_change(c, e, failed, b->vals, p->last_fail, sizeof p->last_fail);
            if (cap_meas.on) {
                Py_XSETREF(p->last_info, cap_guard_info(e, failed, b->vals));
                PyErr_Clear();
            }
        }
        cap_entry_release_vals(e, b->vals, b->owned);
        last = e;
    }
    int stance = stance_on_miss(stance_now, p, S->base->code->qualname_s);
    if (stance != 0) {
        *eager = stance > 0;
        return NULL;
    }
    if (p->count >= cap_cfg.recompile_limit) {
        p->eager = true;
        warn_limit(c, p, S->base->code->qualname_s);
        *eager = true;
        return NULL;
    }
    char reason[760];
    if (last)
        snprintf(reason, sizeof reason, "guard failed: %s", p->last_fail);
    else
        snprintf(reason, sizeof reason, "%s",
                 S->frame == S->base && S->base->pc == 0 ? "first call" : "resume after a graph break");
    if (last)
        cap_report_recompile(&c->rep, S->base->code->qualname_s, p->last_fail, p->last_info);
    bool untraceable;
    double tc = ptc_now_ms();
    PyObject *prev = last ? tensor_sizes(p->head) : NULL;
    cap_entry *e = compile_at(c, S, reason, p->count, &untraceable, prev);
    c->prev_sizes = NULL;
    Py_XDECREF(prev);
    cap_meas.compile_ms += ptc_now_ms() - tc;
    if (!e) {
        if (untraceable) {
            p->eager = true;
            *eager = true;
        }
        return NULL;
    }
    p->count++;
    e->next = p->head;
    p->head = e;
    int ok = check(e, frames, nf, b, &failed);
    if (ok != 1) {
        char buf[700] = "";
        if (ok == 0)
            cap_guard_describe(e, failed, b->vals, buf, sizeof buf);
        cap_entry_release_vals(e, b->vals, b->owned);
        if (ok == 0)
            PyErr_Format(cap_InternalError, "ptc: a fresh entry rejects its own state: %s", buf);
        return NULL;
    }
    return cap_entry_ref(e);
}

static cap_entry *lookup(cap_compiled *c, cap_interp *S, valbuf *b, bool *eager)
{
    *eager = false;
    PyObject *key = position_key(S->base, S->frame);
    PyObject *cap = key ? position(c, key) : NULL;
    Py_XDECREF(key);
    if (!cap)
        return NULL;
    cap_entry *e = lookup_at(c, PyCapsule_GetPointer(cap, "ptc.pos"), S, b, eager);
    Py_DECREF(cap);
    return e;
}

/* Internal errors: warn once and dump a repro (unless strict mode). */
static bool recoverable(cap_compiled *c, const char *where)
{
    if (!PyErr_Occurred())
        PyErr_SetString(cap_InternalError, "ptc: internal error");
    if (PyErr_ExceptionMatches(cap_GraphBreakError) || cap_cfg.strict || c->opts.fullgraph ||
        !PyErr_ExceptionMatches(cap_InternalError))
        return false;
    cap_warn_error(&c->rep, where, failed_graph);
    return true;
}

/* Runs the rest of the call for real after a lookup gave up on the state in
 * S (first: nothing of the call ran yet, so it restarts from its arguments). */
static PyObject *run_eagerly(cap_interp *S, bool first, PyObject *fn, PyObject *args,
                             PyObject *kwargs, bool measure)
{
    double t0 = measure ? ptc_now_ms() : 0;
    PyObject *r = NULL;
    if (first) {
        r = PyObject_Call(fn, args, kwargs);
    } else {
        S->stepping = false; /* the rest of this call runs for real */
        if (cap_run(S) == CAP_DONE) {
            r = S->result;
            S->result = NULL;
        }
    }
    if (measure)
        cap_measure_eager(S->base->code->qualname_s, ptc_now_ms() - t0);
    return r;
}

/* The entries a call ran stay alive until it returns, whatever a reset
 * does meanwhile: the frames a resume state rebuilt in S borrow from the
 * entry that built them, and the clock keeps its stats. The two most recent
 * suffice: once a segment resumed, S and the clock refer to it alone; one
 * that failed may leave them with the one before. */
typedef struct held {
    cap_entry *e[2];
} held;

static void hold(held *h, cap_entry *e) /* takes the reference */
{
    if (h->e[0] == e) {
        cap_entry_unref(e);
        return;
    }
    cap_entry_unref(h->e[1]);
    h->e[1] = h->e[0];
    h->e[0] = e;
}

/* Runs the state in S to the end; S's outermost frame is the compiled
 * function's. Until the first segment finished, nothing of this call ran
 * for real, so an internal error may still restart it eagerly. k: the
 * call's clock while measuring, else NULL. */
static PyObject *drive(cap_compiled *c, cap_interp *S, PyObject *fn, PyObject *args,
                       PyObject *kwargs, cap_clock *k, held *h)
{
    bool first = true;
    valbuf b = {0};
    for (;;) {
        bool eager;
        cap_entry *e = lookup(c, S, &b, &eager);
        if (!e) {
            if (!eager && !recoverable(c, S->base->code->qualname_s)) {
                valbuf_free(&b);
                return NULL;
            }
            valbuf_free(&b);
            return run_eagerly(S, first, fn, args, kwargs, k != NULL);
        }
        hold(h, e);
        segment_result r = run_entry(c, e, S, b.vals, k);
        cap_entry_release_vals(e, b.vals, b.owned);
        if (r.rc == CAP_DONE) {
            valbuf_free(&b);
            return r.result;
        }
        if (r.graph_raised) {
            /* The graph is functional: nothing of its segment took effect
               (writes to outside objects are replayed after it), while
               eager made the writes before the raising op. Running the
               segment for real from its start does both in eager's order
               and raises eager's error from the user's own frame. */
            PyErr_Clear();
            valbuf_free(&b);
            return run_eagerly(S, first, fn, args, kwargs, k != NULL);
        }
        if (r.rc != CAP_STOP) {
            /* Until the first segment finished nothing of the call ran for
               real; a segment that failed before taking effect leaves S as
               it was: either way the call can go on eagerly. */
            bool redo = (first || r.intact) && recoverable(c, S->base->code->qualname_s);
            valbuf_free(&b);
            return redo ? run_eagerly(S, first, fn, args, kwargs, k != NULL) : NULL;
        }
        first = false;
    }
}

/* drive, with the entries it ran held and the call's clock while measuring. */
static PyObject *drive_held(cap_compiled *c, cap_interp *S, PyObject *fn, PyObject *args,
                            PyObject *kwargs)
{
    held h = {{NULL, NULL}};
    bool measure = cap_meas.on;
    cap_clock k = {0};
    PyObject *r = drive(c, S, fn, args, kwargs, measure ? &k : NULL, &h);
    if (measure)
        cap_clock_done(&k);
    cap_entry_unref(h.e[0]);
    cap_entry_unref(h.e[1]);
    return r;
}

/* ---- a call from its start ------------------------------------------------------------ */

PyObject *cap_run_call(cap_compiled *c, PyObject *fn, PyObject *const *args, int nargs,
                       PyObject *kwnames, PyObject *eager, PyObject *eargs, PyObject *ekwargs)
{
    if (cap_torch_function_mode_active()) {
        cap_warn_mode(&c->rep, fn);
        return PyObject_Call(eager, eargs, ekwargs);
    }
    const char *why = NULL;
    cap_frame *f = cap_frame_for_call(fn, args, nargs, kwnames, &why);
    if (!f) {
        if (!why)
            return NULL;
        /* Generators and coroutines run untouched; binding errors raise as in eager. */
        if (strcmp(why, "argument binding") != 0)
            cap_report_skipped(&c->rep, fn, why);
        return PyObject_Call(eager, eargs, ekwargs);
    }
    cap_interp S = {.mode = CAP_REAL, .max_depth = cap_cfg.inline_depth};
    cap_push_frame(&S, f);
    PyObject *r = drive_held(c, &S, eager, eargs, ekwargs);
    cap_interp_clear(&S);
    return r;
}


/* A bound method's call is made as its function's with self in front, in
 * an array on the stack that holds this many arguments and self; a longer
 * call runs the method object itself (as the interpreter would). */
enum { MAX_BOUND_ARGS = 63 };

static PyObject *call_through_caches(void *ctx, PyObject *fn, PyObject *const *args, int nargs,
                                     PyObject *kwnames)
{
    cap_compiled *c = ctx;
    PyObject *func = fn, *buf[MAX_BOUND_ARGS + 1];
    PyObject *real_args = NULL, *real_kw = NULL, *r = NULL;
    int nkw = kwnames ? (int)PyTuple_Size(kwnames) : 0;
    if (cap_is_method(fn) && nargs < MAX_BOUND_ARGS) {
        func = PyObject_GetAttr(fn, cap_P.s_func);
        buf[0] = PyObject_GetAttr(fn, cap_P.s_self);
        memcpy(buf + 1, args, sizeof *args * (size_t)nargs);
        Py_XDECREF(buf[0]); /* the bound method keeps self alive */
        args = buf;
        nargs++;
    } else {
        Py_INCREF(func);
    }
    real_args = cap_tuple_from_array(args, nargs - nkw);
    if (nkw) {
        real_kw = PyDict_New();
        for (int i = 0; real_kw && i < nkw; i++)
            PyDict_SetItem(real_kw, PyTuple_GetItem(kwnames, i), args[nargs - nkw + i]);
    }
    if (func && real_args && (!nkw || real_kw))
        r = cap_run_call(c, func, args, nargs, kwnames, func, real_args, real_kw);
    Py_XDECREF(func);
    Py_XDECREF(real_args);
    Py_XDECREF(real_kw);
    return r;
}
