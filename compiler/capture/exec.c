/* Running a compiled function: the cache, guards, segments, breaks and the
 * fallbacks.
 *
 * A call binds its arguments into a frame (the starting state) and looks up
 * the entries at the function's first position. The first entry whose guards
 * pass runs its graph and then either builds the return value or rebuilds the
 * resume state, whose break instruction runs for real in ptc's interpreter up
 * to the next safe point; the next segment is looked up there, and so on.
 * A miss traces from the state in hand (compile.c) and caches the new
 * entry; the failed guard of the most recent entry is the recompile's
 * reason. A position that needs more than the recompile limit runs eagerly
 * from then on, with one warning.
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
    cap_frame *chain[CAP_MAX_STATE_FRAMES];
    int n = 0;
    for (cap_frame *f = top; f && n < CAP_MAX_STATE_FRAMES; f = f->parent)
        chain[n++] = f;
    uintptr_t buf[2 * CAP_MAX_STATE_FRAMES];
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
           !PyErr_ExceptionMatches(cap_InternalError) && !cap_is_partial_run() &&
           !PyErr_ExceptionMatches(cap_GraphBreakError);
}

/* After e's graph, recipes and effects (rv: the recipes' values): the resume
 * state replaces the old one in S, then its break instruction (and whatever
 * follows up to a safe point) runs for real. CAP_DONE with *result, CAP_STOP
 * at the next safe point, or CAP_ERR. */
static int resume_after_break(cap_compiled *c, cap_entry *e, cap_interp *S, PyObject **rv,
                              PyObject **result)
{
    cap_interp_clear(S);
    if (cap_entry_resume_frames(e, rv, S) < 0)
        return CAP_ERR;
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
        *result = S->result;
        S->result = NULL;
    }
    return rc == CAP_DONE || rc == CAP_STOP ? rc : CAP_ERR;
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
    r.rc = resume_after_break(c, e, S, rv, &r.result);
done:
    for (int i = 0; i < nout; i++)
        Py_XDECREF(outs[i]);
    for (int i = 0; i < e->nrecipes; i++)
        Py_XDECREF(rv[i]);
    free(outs);
    free(rv);
    return r;
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

/* Source values of one guard walk: a buffer grown to the entry's needs,
 * on the stack up to VALBUF_INLINE values (a chosen size: most entries'
 * sources fit). */
enum { VALBUF_INLINE = 64 };
typedef struct valbuf {
    PyObject **vals;
    bool *owned;
    int cap;
    PyObject *inl_vals[VALBUF_INLINE];
    bool inl_owned[VALBUF_INLINE];
} valbuf;

static int valbuf_fit(valbuf *b, int n)
{
    if (!b->vals) {
        b->vals = b->inl_vals;
        b->owned = b->inl_owned;
        b->cap = VALBUF_INLINE;
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
    return cap_name_index(name, cap_stance_names);
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

/* Finds the first of p's entries whose guards pass for the state's frames:
 * 1 with *found (a new reference, b holding its source values); 0 on a miss
 * (*last the oldest entry that failed; p->last_fail says why the most recent
 * did); -1 with an error, or with *eager when the position runs for real
 * from now on. */
static int find_entry(cap_compiled *c, cap_pos *p, cap_frame **frames, int nf, valbuf *b,
                      cap_entry **found, cap_entry **last, bool *eager)
{
    int failed = -1;
    for (cap_entry *e = p->head; e; e = e->next) {
        int ok = check(e, frames, nf, b, &failed);
        if (ok < 0)
            return -1;
        if (ok && e->broken) { /* its recipes failed: this position runs for real */
            cap_entry_release_vals(e, b->vals, b->owned);
            p->eager = true;
            *eager = true;
            return -1;
        }
        if (ok) {
            *found = cap_entry_ref(e);
            return 1;
        }
        if (e == p->head) { /* most recent: its failure is the recompile reason */
            cap_guard_describe(e, failed, b->vals, p->last_fail, sizeof p->last_fail);
            note_size_change(c, e, failed, b->vals, p->last_fail, sizeof p->last_fail);
            if (cap_meas.on) {
                Py_XSETREF(p->last_info, cap_guard_info(e, failed, b->vals));
                PyErr_Clear();
            }
        }
        cap_entry_release_vals(e, b->vals, b->owned);
        *last = e;
    }
    return 0;
}

/* After a miss at p: whether the state runs for real instead of compiling
 * (*eager) or raises (the stance says so, or p is at the recompile limit). */
static bool miss_not_compiled(cap_compiled *c, cap_pos *p, cap_interp *S, int stance_now,
                              bool *eager)
{
    int stance = stance_on_miss(stance_now, p, S->base->code->qualname_s);
    if (stance != 0) {
        *eager = stance > 0;
        return true;
    }
    if (p->count >= cap_cfg.recompile_limit) {
        p->eager = true;
        warn_limit(c, p, S->base->code->qualname_s);
        *eager = true;
        return true;
    }
    return false;
}

/* Compiles the state in S after a miss at p (last: the miss's, or NULL at a
 * position without entries) and adds the entry in front of p's: a new
 * reference whose guards passed, b holding its source values; else as
 * lookup_at. */
static cap_entry *compile_entry(cap_compiled *c, cap_pos *p, cap_interp *S, cap_frame **frames,
                                int nf, valbuf *b, cap_entry *last, bool *eager)
{
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
    cap_entry *e = cap_compile_at(c, S, reason, p->count, &untraceable, prev);
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
    int failed = -1, ok = check(e, frames, nf, b, &failed);
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
    cap_frame *frames[CAP_MAX_STATE_FRAMES];
    int nf = cap_state_frames(S, frames, CAP_MAX_STATE_FRAMES);
    cap_entry *e = NULL, *last = NULL;
    if (find_entry(c, p, frames, nf, b, &e, &last, eager) != 0 ||
        miss_not_compiled(c, p, S, stance_now, eager))
        return e;
    return compile_entry(c, p, S, frames, nf, b, last, eager);
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
    cap_warn_error(&c->rep, where, cap_failed_graph());
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
        if (!first && cap_torch_function_mode_active()) {
            /* a mode the function entered (with Mode(): ...) sees each
               torch call from here on, as in eager, and none of ptc's */
            cap_warn_mode(&c->rep, fn);
            valbuf_free(&b);
            return run_eagerly(S, first, fn, args, kwargs, k != NULL);
        }
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
            bool redo = !cap_is_partial_run() && (first || r.intact) &&
                        recoverable(c, S->base->code->qualname_s);
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
