/* Compiling on a miss: a trace from the state in hand, made into an entry.
 *
 * The runner (exec.c) found no entry whose guards pass for the state in S,
 * which is real: tracing has no side effects, so it still is after a trace.
 * A copy of its frames, with a source for every value, is traced by a second
 * interpreter, and the trace becomes an entry whose backend is prepared here.
 * A trace is run again without inlining the call that holds a value ptc
 * cannot rebuild, with the tensors sized as a changed size was made symbolic,
 * or stopping before a break that came out of a nested run; where symbolic
 * sizes fail, the position is traced again with fewer (dynamic=True) or none.
 * fullgraph=True makes the first break the user's error.
 */
#include "capture/exec.h"

#include <stdlib.h>
#include <string.h>

/* co_flags bits of a code object with *args and **kwargs (CPython's
 * CO_VARARGS and CO_VARKEYWORDS, not in the limited API). */
enum { CO_VARARGS_FLAG = 0x04, CO_VARKEYWORDS_FLAG = 0x08 };

int cap_state_frames(cap_interp *S, cap_frame **frames, int max)
{
    int n = 0;
    for (cap_frame *f = S->frame; f && n < max; f = f->parent)
        n++;
    int i = n;
    for (cap_frame *f = S->frame; f && i > 0; f = f->parent)
        frames[--i] = f;
    return n;
}

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

/* The trace's copy of a *args tuple v read from source s: its length
 * guarded, each item wrapped with its own source. NULL on error. */
static PyObject *fresh_args_tuple(cap_trace *T, PyObject *v, int s)
{
    if (cap_guard_add(T, CAP_G_LEN, s, NULL, PyTuple_Size(v)) < 0)
        return NULL;
    PyObject *copy = PyTuple_New(PyTuple_Size(v));
    for (Py_ssize_t j = 0; copy && j < PyTuple_Size(v); j++) {
        int is = cap_source_add(T, CAP_S_INDEX, s, 0, (int)j, NULL);
        PyObject *w = is >= 0 ? cap_t_wrap(T, PyTuple_GetItem(v, j), is) : NULL;
        if (!w)
            Py_CLEAR(copy);
        else
            PyTuple_SetItem(copy, j, w);
    }
    return copy;
}

/* The same for a **kwargs dict: its keys guarded. */
static PyObject *fresh_kwargs_dict(cap_trace *T, PyObject *v, int s)
{
    PyObject *keys = PyDict_Keys(v), *kt = keys ? PyList_AsTuple(keys) : NULL;
    Py_XDECREF(keys);
    if (!kt || cap_guard_add(T, CAP_G_KEYS, s, kt, 0) < 0) {
        Py_XDECREF(kt);
        return NULL;
    }
    PyObject *copy = PyDict_New();
    for (Py_ssize_t j = 0; copy && j < PyTuple_Size(kt); j++) {
        PyObject *key = PyTuple_GetItem(kt, j);
        int is = cap_source_add(T, CAP_S_ITEM, s, 0, 0, key);
        PyObject *w = is >= 0 ? cap_t_wrap(T, PyDict_GetItem(v, key), is) : NULL;
        if (!w || PyDict_SetItem(copy, key, w) < 0)
            Py_CLEAR(copy);
        Py_XDECREF(w);
    }
    Py_DECREF(kt);
    return copy;
}

/* At a call's start the *args tuple and **kwargs dict are new objects made
 * by binding: their items keep sources, the containers themselves are the
 * trace's (mutable, rebuilt at run time). */
static int fresh_varargs(cap_trace *T, cap_frame *g)
{
    cap_code *c = g->code;
    int i = c->argcount + c->kwonly;
    for (int k = 0; k < 2; k++) {
        bool has = k == 0 ? (c->flags & CO_VARARGS_FLAG) : (c->flags & CO_VARKEYWORDS_FLAG);
        if (!has)
            continue;
        int slot = i++;
        PyObject *v = g->lp[slot];
        int s = g->slot_src[slot];
        if (!v || s < 0)
            continue;
        PyObject *copy;
        if (PyTuple_CheckExact(v))
            copy = fresh_args_tuple(T, v, s);
        else if (PyDict_CheckExact(v))
            copy = fresh_kwargs_dict(T, v, s);
        else
            continue;
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
    cap_frame *frames[CAP_MAX_STATE_FRAMES];
    int n = cap_state_frames(S, frames, CAP_MAX_STATE_FRAMES);
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
    PyObject *key = cap_t_call_site(f);
    int rc = key ? PySet_Add(set, key) : -1;
    Py_XDECREF(key);
    return rc;
}

/* The caret line under a break's source text: none past CARET_MAX_COL
 * (cap_break.text keeps a line's first 511 characters: the caret would point
 * past what is shown), and at most CARET_MAX_WIDTH carets (a chosen bound: a
 * wide span, a long call, is marked on its start). */
enum { CARET_MAX_COL = 500, CARET_MAX_WIDTH = 90 };

/* Raises GraphBreakError for fullgraph=True: the break, the line, a caret. */
static void raise_fullgraph(const cap_break *b)
{
    const cap_break_info *info = cap_break_lookup(b->code);
    char caret[CARET_MAX_COL + CARET_MAX_WIDTH + 1] = "";
    int col = b->col > 0 ? b->col - 1 : 0;
    int width = b->endcol > b->col ? b->endcol - b->col : 1;
    if (width > CARET_MAX_WIDTH)
        width = CARET_MAX_WIDTH;
    if (col < CARET_MAX_COL) {
        memset(caret, ' ', (size_t)col);
        memset(caret + col, '^', (size_t)width);
        caret[col + width] = 0;
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

static ptc_graph *failed_graph;

const ptc_graph *cap_failed_graph(void)
{
    return failed_graph;
}

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
                     PyObject *no_inline, const char *unfinished_at, int dynamic)
{
    It->T = T;
    T->redo = redo;
    Py_SETREF(T->no_inline, Py_NewRef(no_inline));
    T->unfinished_at = unfinished_at;
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

/* Traces of one compile: each retry above (one call fewer inlined, sizes
 * followed, a nested run's break redone) is one more; a chosen bound that
 * ends a compile whose retries would not settle. */
enum { MAX_TRACE_ATTEMPTS = 16 };

/* One compile's state from one trace to the next. */
typedef struct compile_job {
    const char *reason;     /* why it compiles (the event's reason) */
    int recompile;          /* entries compiled at the position before */
    double t0;              /* when it started */
    PyObject *no_inline;    /* calls not to inline, as (code, pc): they hold an unbuildable value */
    long redo_at;           /* the step to break before (see cap_trace.sync_step), or 0 */
    cap_break redo;         /* the break that redo_at stops at */
    char followed[600];     /* the sizes that were followed, for the reason */
    cap_break unbuildable;  /* reported if every retry fails */
    char unfinished_at[512]; /* the break a trace stopped at with a generator left
                                unfinished (cap_trace.unfinished_at), or "" */
} compile_job;

/* Whether a finished trace is traced again for its sizes or a nested run. */
static bool retrace(cap_trace *T, const cap_interp *It, int rc, compile_job *J)
{
    if ((rc == CAP_DONE || rc == CAP_BREAK) && !T->static_only &&
        cap_t_follow_changed_sizes(T, J->followed, sizeof J->followed)) {
        /* New tensors sized as a changed size was: trace them symbolic. */
        J->redo_at = 0;
        return true;
    }
    if (rc == CAP_BREAK && !J->redo_at && T->sync_exit >= 0 && It->steps == T->sync_exit + 1) {
        /* The break came out of a nested run, whose builtin reruns for
           real from its start: trace again, breaking before it, so that
           nothing its callbacks did in the trace happened. */
        J->redo_at = T->sync_step + 1;
        J->redo = T->brk;
        return true;
    }
    return false;
}

/* The entry of trace T (rc), or NULL: with *retry when the call holding a
 * value that cannot be rebuilt is inlined no more, with *eager when the
 * outermost frame holds it, else with an error. */
static cap_entry *build_entry(cap_compiled *c, cap_interp *S, cap_trace *T, cap_interp *It,
                              int rc, compile_job *J, bool *retry, bool *eager)
{
    int unrec = -1;
    cap_entry *e = NULL;
    if ((rc == CAP_DONE || rc == CAP_BREAK) && cap_cfg.inject_failure == 1) {
        keep_failed(T);
        PyErr_SetString(cap_InternalError,
                        "ptc: injected internal error (ptc.config.inject_failure)");
        rc = CAP_ERR;
    }
    if (rc == CAP_DONE || rc == CAP_BREAK)
        e = cap_entry_build(T, It, rc, &unrec);
    if (!e && unrec > 0) {
        /* Not inlining the call that holds the unbuildable value. */
        J->unbuildable = T->brk; /* reported if every retry fails */
        PyErr_Clear();
        cap_frame *f = It->frame;
        for (int d = It->frame->depth; d > unrec - 1 && f; d--)
            f = f->parent;
        if (f && add_no_inline(J->no_inline, f) == 0) {
            J->redo_at = 0; /* another trace: its steps differ */
            *retry = true;
            return NULL;
        }
    }
    if (!e && unrec == 0)
        *eager = outermost_unrebuildable(c, S, T, rc);
    else if (!e)
        keep_failed(T);
    return e;
}

/* One trace of the state in S: true to trace again; else *out is the new
 * entry, or NULL as compile_once says. */
static bool trace_once(cap_compiled *c, cap_interp *S, compile_job *J, int dynamic, char *why,
                       size_t whysize, cap_entry **out, bool *eager)
{
    cap_interp It = {.mode = CAP_TRACE, .max_depth = cap_cfg.inline_depth, .break_at = J->redo_at};
    cap_trace *T = cap_trace_new(c->module_names, &It);
    if (!T)
        return false;
    cap_t_generators_reset();
    bool again = false;
    int rc = run_trace(c, S, &It, T, J->redo, J->no_inline, J->unfinished_at, dynamic);
    if (symbolic_failed(T, rc, why, whysize)) {
        /* the caller retraces with fewer symbols */
    } else if ((rc == CAP_DONE || rc == CAP_BREAK) &&
               cap_t_generators_unfinished(J->no_inline) != 0) {
        /* A generator with clean-up left unfinished: its call runs for real. */
        if (rc == CAP_BREAK)
            snprintf(J->unfinished_at, sizeof J->unfinished_at, "%s", T->brk.detail);
        J->redo_at = 0;
        again = !PyErr_Occurred();
    } else if (rc == CAP_BREAK && c->opts.fullgraph) {
        raise_fullgraph(&T->brk);
    } else if (retrace(T, &It, rc, J)) {
        again = true;
    } else if ((*out = build_entry(c, S, T, &It, rc, J, &again, eager))) {
        char why_followed[1400];
        if (J->followed[0])
            snprintf(why_followed, sizeof why_followed, "%s; %s", J->reason, J->followed);
        entry_made(c, S, *out, T, J->recompile, J->followed[0] ? why_followed : J->reason, J->t0);
    }
    cap_interp_clear(&It);
    cap_trace_free(T);
    return again;
}

/* Traces from the state in S. NULL with an error on failure; *eager set when
 * this position cannot be compiled (run it for real). NULL without an error
 * and with why[0] set: symbolic sizes failed (retry with less dynamic: the
 * dynamic= setting, -1 None, 0 False, 1 True). */
static cap_entry *compile_once(cap_compiled *c, cap_interp *S, const char *reason, int recompile,
                               bool *eager, int dynamic, char *why, size_t whysize)
{
    *eager = false;
    compile_job J = {.reason = reason, .recompile = recompile, .t0 = ptc_now_ms(),
                     .no_inline = PySet_New(NULL)};
    cap_entry *e = NULL;
    if (failed_graph) {
        /* A repro shows this compile's graph, never an older one. */
        ptc_graph_free(failed_graph);
        failed_graph = NULL;
    }
    for (int attempt = 0; J.no_inline && attempt < MAX_TRACE_ATTEMPTS; attempt++)
        if (!trace_once(c, S, &J, dynamic, why, whysize, &e, eager))
            break;
    Py_XDECREF(J.no_inline);
    if (why[0])
        return NULL;
    if (!e && !*eager && !PyErr_Occurred()) {
        /* Every retry without inlining still left unbuildable state. */
        cap_report_untraceable(&c->rep, S->base->code->qualname_s, &J.unbuildable,
                               "state cannot be rebuilt at any break");
        *eager = true;
    }
    return e ? prepare_backend(c, e, why, whysize, J.t0) : NULL;
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
cap_entry *cap_compile_at(cap_compiled *c, cap_interp *S, const char *reason, int recompile,
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
