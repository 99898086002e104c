/* Reporting: the events ptc.explain reads, PTC_LOGS output (graph_breaks,
 * guards, recompiles, captured), the trace directory (captured.ptir,
 * guards.txt, breaks.json per compile), and the warnings and repro dumps of
 * fallbacks.
 */
#include "capture/report.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int cap_reports_init(cap_reports *r)
{
    static int serials;
    r->serial = ++serials;
    r->events = PyList_New(0);
    r->warned = PySet_New(NULL);
    return r->events && r->warned ? 0 : -1;
}

void cap_reports_clear(cap_reports *r)
{
    PyList_SetSlice(r->events, 0, PyList_Size(r->events), NULL);
    PySet_Clear(r->warned);
}

void cap_reports_free(cap_reports *r)
{
    Py_XDECREF(r->events);
    Py_XDECREF(r->warned);
    if (r->trace)
        ptc_trace_close(r->trace);
}

static void add_event(cap_reports *r, PyObject *ev)
{
    if (ev && PyList_Append(r->events, ev) < 0)
        PyErr_Clear();
    cap_measure_event(r->serial, ev);
    cap_observe_event(ev);
    Py_XDECREF(ev);
}

/* Adds the entries of `more` (a dict or NULL) to the event ev. */
static PyObject *with(PyObject *ev, PyObject *more)
{
    if (ev && more && PyDict_Update(ev, more) < 0)
        PyErr_Clear();
    return ev;
}

static bool logs_ready;

static void logs_init(void)
{
    if (!logs_ready) {
        ptc_log_init();
        logs_ready = true;
    }
}

/* ---- breaks as data -------------------------------------------------------------------- */

PyObject *cap_break_dict(const cap_break *b)
{
    const cap_break_info *info = cap_break_lookup(b->code);
    char code[16];
    snprintf(code, sizeof code, "PTC-B%03d", b->code);
    return Py_BuildValue("{s:s,s:s,s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:s,s:s,s:s}", "code", code, "name",
                         info->name, "reason", info->reason, "explanation", info->explanation,
                         "hint", info->hint, "file", b->file, "line", b->line, "col", b->col,
                         "endcol", b->endcol, "text", b->text, "detail", b->detail, "stack",
                         b->stack);
}

static void json_str(ptc_jw *w, const char *key, const char *value)
{
    ptc_jw_key(w, key);
    ptc_jw_str(w, value);
}

static void json_break(ptc_jw *w, const cap_break *b)
{
    const cap_break_info *info = cap_break_lookup(b->code);
    char code[16];
    snprintf(code, sizeof code, "PTC-B%03d", b->code);
    ptc_jw_obj_begin(w);
    json_str(w, "code", code);
    json_str(w, "reason", info->reason);
    json_str(w, "detail", b->detail);
    json_str(w, "file", b->file);
    ptc_jw_key(w, "line");
    ptc_jw_int(w, b->line);
    ptc_jw_key(w, "col");
    ptc_jw_int(w, b->col);
    json_str(w, "text", b->text);
    json_str(w, "stack", b->stack);
    json_str(w, "explanation", info->explanation);
    json_str(w, "hint", info->hint);
    ptc_jw_obj_end(w);
}

/* ---- trace directory --------------------------------------------------------------------- */

static void trace_files(cap_reports *r, cap_entry *e, const char *reason, PyObject *ev)
{
    if (!r->trace_checked) {
        ptc_error err;
        r->trace_checked = true;
        char rank_dir[4200];
        const char *dir = cap_rank_trace_dir(rank_dir, sizeof rank_dir);
        r->trace = dir ? ptc_trace_open(dir, &err) : NULL;
        if (!r->trace && dir && err.cls != PTC_ERR_NONE) {
            char buf[1200];
            ptc_error_format(&err, buf, sizeof buf);
            if (PyErr_WarnFormat(PyExc_UserWarning, 1, "ptc: trace directory: %s", buf) < 0)
                PyErr_Clear();
        }
    }
    if (!r->trace)
        return;
    ptc_error err;
    ptc_trace_compile *tc = ptc_trace_begin(r->trace, e->frame_name, e->recompile, e->frame_name,
                                            e->brk.file[0] ? e->brk.file : "", e->brk.line, reason, &err);
    if (!tc)
        return;
    if (e->graph)
        ptc_trace_graph(tc, "captured", e->graph, &err);
    ptc_buf b = {0};
    for (Py_ssize_t i = 0; e->guard_strs && i < PyList_Size(e->guard_strs); i++)
        ptc_buf_printf(&b, "%s\n", PyUnicode_AsUTF8(PyList_GetItem(e->guard_strs, i)));
    ptc_trace_write(tc, NULL, "guards.txt", b.data ? b.data : "", b.len, &err);
    ptc_buf_free(&b);
    ptc_jw w;
    ptc_buf jb = {0};
    ptc_jw_init(&w, &jb, true);
    ptc_jw_obj_begin(&w);
    ptc_jw_key(&w, "breaks");
    ptc_jw_arr_begin(&w);
    if (e->end == CAP_END_BREAK)
        json_break(&w, &e->brk);
    ptc_jw_arr_end(&w);
    ptc_jw_obj_end(&w);
    ptc_trace_write(tc, NULL, "breaks.json", jb.data, jb.len, &err);
    ptc_buf_free(&jb);
    e->tc = tc; /* the backend writes its stages here; cap_report_compiled ends it */
    PyObject *dir = ev ? PyUnicode_FromString(ptc_trace_compile_dir(tc)) : NULL;
    if (dir && PyDict_SetItemString(ev, "trace", dir) < 0)
        PyErr_Clear();
    Py_XDECREF(dir);
}

void cap_report_compiled(cap_entry *e)
{
    if (!e->tc)
        return;
    ptc_error err;
    ptc_metrics *m = ptc_trace_metrics(e->tc);
    ptc_metrics_add(m, "capture", e->compile_ms, true);
    ptc_metrics_add(m, "captured_nodes", e->graph ? e->graph->nnodes : 0, false);
    ptc_metrics_add(m, "guards", e->nguards, false);
    ptc_trace_end(e->tc, &err);
    e->tc = NULL;
}

/* ---- events -------------------------------------------------------------------------------- */

/* The event of a new entry e from trace T (NULL when the dict could not be
 * made). */
static PyObject *compile_event(cap_entry *e, cap_trace *T, const char *reason)
{
    PyObject *brk = e->end == CAP_END_BREAK ? cap_break_dict(&e->brk) : Py_NewRef(Py_None);
    PyObject *graph = cap_graph_object(e); /* a copy: events outlive entries */
    PyObject *ev = Py_BuildValue("{s:s,s:i,s:s,s:s,s:i,s:i,s:i,s:N,s:O,s:O,s:d,s:N,s:s}", "kind",
                                 "compile", "id", e->id, "frame", e->frame_name, "reason", reason,
                                 "recompile", e->recompile, "nodes", e->graph ? e->graph->nnodes : 0,
                                 "guard_count", e->nguards, "break", brk ? brk : Py_NewRef(Py_None),
                                 "guards", e->guard_strs ? e->guard_strs : Py_None, "skipped",
                                 e->skipped ? e->skipped : Py_None, "compile_ms", e->compile_ms,
                                 "graph", graph ? graph : Py_NewRef(Py_None), "end",
                                 e->end == CAP_END_RETURN ? "return" : "break");
    if (ev && e->stats && PyDict_SetItemString(ev, "stats", e->stats) < 0)
        PyErr_Clear();
    /* Symbols a use pinned to a value, and the lines that did it. */
    PyObject *spec = T && T->specialised
                         ? PyList_GetSlice(T->specialised, 0, PyList_Size(T->specialised))
                         : NULL;
    if (ev && spec && PyDict_SetItemString(ev, "specialized", spec) < 0)
        PyErr_Clear();
    Py_XDECREF(spec);
    if (ev && T && T->cuts && PyDict_SetItemString(ev, "cuts", T->cuts) < 0)
        PyErr_Clear();
    return ev;
}

/* PTC_LOGS=captured,guards,graph_breaks on a new entry. */
static void log_compile(const cap_entry *e, const char *reason)
{
    if (e->graph && ptc_log_on(PTC_LOG_CAPTURED, PTC_LOG_INFO)) {
        ptc_buf b = {0};
        ptc_print_graph(&b, e->graph);
        char title[256];
        snprintf(title, sizeof title, "graph %d of %s (%s)", e->id, e->frame_name, reason);
        ptc_log_block(PTC_LOG_CAPTURED, PTC_LOG_INFO, title, b.data);
        ptc_buf_free(&b);
    }
    if (ptc_log_on(PTC_LOG_GUARDS, PTC_LOG_INFO)) {
        ptc_log(PTC_LOG_GUARDS, PTC_LOG_INFO, "%d guards for %s (compile %d):", e->nguards,
                e->frame_name, e->id);
        for (Py_ssize_t i = 0; e->guard_strs && i < PyList_Size(e->guard_strs); i++)
            ptc_log(PTC_LOG_GUARDS, PTC_LOG_INFO, "  %s", PyUnicode_AsUTF8(PyList_GetItem(e->guard_strs, i)));
    }
    if (e->end == CAP_END_BREAK && ptc_log_on(PTC_LOG_GRAPH_BREAKS, PTC_LOG_INFO)) {
        const cap_break_info *info = cap_break_lookup(e->brk.code);
        ptc_log(PTC_LOG_GRAPH_BREAKS, PTC_LOG_INFO, "PTC-B%03d %s: %s at %s:%d:%d", e->brk.code,
                info->reason, e->brk.detail, e->brk.file, e->brk.line, e->brk.col);
        ptc_log(PTC_LOG_GRAPH_BREAKS, PTC_LOG_INFO, "    %s", e->brk.text);
        if (ptc_log_on(PTC_LOG_GRAPH_BREAKS, PTC_LOG_DEBUG))
            ptc_log(PTC_LOG_GRAPH_BREAKS, PTC_LOG_DEBUG, "    stack: %s", e->brk.stack);
    }
}

void cap_report_compile(cap_reports *r, cap_entry *e, cap_trace *T, const char *reason)
{
    logs_init();
    e->id = r->next_id++;
    PyObject *ev = compile_event(e, T, reason);
    trace_files(r, e, reason, ev);
    add_event(r, ev);
    log_compile(e, reason);
    PyErr_Clear();
}

void cap_report_recompile(cap_reports *r, const char *name, const char *guard, PyObject *info)
{
    logs_init();
    add_event(r, with(Py_BuildValue("{s:s,s:s,s:s}", "kind", "recompile", "frame", name, "guard", guard), info));
    if (ptc_log_on(PTC_LOG_RECOMPILES, PTC_LOG_INFO))
        ptc_log(PTC_LOG_RECOMPILES, PTC_LOG_INFO, "recompiling %s: guard failed: %s", name, guard);
    PyErr_Clear();
}

void cap_report_limit(cap_reports *r, const char *name, const char *guard, PyObject *info)
{
    logs_init();
    add_event(r, with(Py_BuildValue("{s:s,s:s,s:s,s:i}", "kind", "recompile_limit", "frame", name,
                                    "guard", guard, "limit", cap_cfg.recompile_limit),
                      info));
    if (ptc_log_on(PTC_LOG_RECOMPILES, PTC_LOG_INFO))
        ptc_log(PTC_LOG_RECOMPILES, PTC_LOG_INFO, "%s hit the recompile limit (%d); running eagerly",
                name, cap_cfg.recompile_limit);
    PyErr_Clear();
}

void cap_report_static_fallback(cap_reports *r, const char *name, const char *why, bool all)
{
    logs_init();
    const char *then =
        all ? "static sizes" : "symbolic sizes only where sizes changed or are marked";
    add_event(r, Py_BuildValue("{s:s,s:s,s:s,s:s}", "kind", "static_fallback", "frame", name, "why",
                               why, "then", then));
    if (ptc_log_on(PTC_LOG_RECOMPILES, PTC_LOG_INFO))
        ptc_log(PTC_LOG_RECOMPILES, PTC_LOG_INFO,
                "%s: symbolic sizes failed (%s); compiling with %s", name, why, then);
    PyErr_Clear();
}

void cap_report_untraceable(cap_reports *r, const char *name, const cap_break *b, const char *why)
{
    PyObject *brk = cap_break_dict(b);
    add_event(r, Py_BuildValue("{s:s,s:s,s:N,s:s}", "kind", "untraceable", "frame", name, "break",
                               brk ? brk : Py_NewRef(Py_None), "why", why));
    if (ptc_log_on(PTC_LOG_GRAPH_BREAKS, PTC_LOG_INFO))
        ptc_log(PTC_LOG_GRAPH_BREAKS, PTC_LOG_INFO, "%s runs eagerly: a break at %s:%d left state ptc cannot rebuild (%s)",
                name, b->file, b->line, why);
    PyErr_Clear();
}

void cap_report_autograd(cap_reports *r, const cap_entry *e)
{
    add_event(r, Py_BuildValue("{s:s,s:s,s:i,s:s}", "kind", "autograd_fallback", "frame", e->frame_name,
                               "id", e->id, "why", e->autograd_why));
    if (ptc_log_on(PTC_LOG_GRAPH_BREAKS, PTC_LOG_INFO))
        ptc_log(PTC_LOG_GRAPH_BREAKS, PTC_LOG_INFO,
                "graph %d of %s needs gradients: it runs through torch ops (autograd): %s", e->id,
                e->frame_name, e->autograd_why);
    PyErr_Clear();
}

void cap_report_pieces(cap_reports *r, const cap_entry *e)
{
    PyObject *list = e->piece_list ? e->piece_list : Py_None;
    add_event(r, Py_BuildValue("{s:s,s:s,s:i,s:i,s:i,s:O}", "kind", "graph_pieces", "frame",
                               e->frame_name, "id", e->id, "pieces", e->npieces, "programs",
                               e->nprograms, "piece_list", list));
    if (ptc_log_on(PTC_LOG_GRAPH_BREAKS, PTC_LOG_INFO))
        ptc_log(PTC_LOG_GRAPH_BREAKS, PTC_LOG_INFO,
                "graph %d of %s is cut into %d pieces (one autograd node each), %d of them "
                "distinct programs",
                e->id, e->frame_name, e->npieces, e->nprograms);
    PyErr_Clear();
}

void cap_report_skipped(cap_reports *r, PyObject *fn, const char *why)
{
    add_event(r, Py_BuildValue("{s:s,s:s,s:s}", "kind", "skipped", "frame", cap_func_name(fn),
                               "why", why));
    PyErr_Clear();
}

/* ---- warnings and repros ---------------------------------------------------------------------- */

static bool warn_once(cap_reports *r, const char *key)
{
    PyObject *k = PyUnicode_FromString(key);
    int seen = k ? PySet_Contains(r->warned, k) : 1;
    if (seen == 0)
        PySet_Add(r->warned, k);
    Py_XDECREF(k);
    PyErr_Clear();
    return seen == 0;
}

void cap_repro_dump(const ptc_graph *g, PyObject **inputs, int ninputs, const char *stage,
                    const char *message, const char *backend, char *path, size_t size)
{
    path[0] = 0;
    if (!g)
        return;
    ptc_tensor *ts = calloc((size_t)ninputs + 1, sizeof *ts);
    PyObject **held = calloc((size_t)ninputs + 1, sizeof *held);
    int n = 0;
    for (int i = 0; inputs && i < ninputs; i++) {
        if (cap_torch_to_ptc(inputs[i], &ts[i], &held[i]) < 0) {
            PyErr_Clear();
            break;
        }
        n++;
    }
#ifdef PTC_HAVE_REPRO
    ptc_repro_info info = {.kind = "error", .stage = stage, .error_class = "InternalError",
                           .message = message, .backend = backend, .rtol = 1e-4, .atol = 1e-5};
    ptc_error err;
    if (cap_cfg.repro_dir[0])
        setenv("PTC_REPRO", cap_cfg.repro_dir, 0);
    bool with_inputs = inputs && n == ninputs && ninputs == g->ninputs;
    if (ptc_repro_write(NULL, g, with_inputs ? ts : NULL, with_inputs ? n : 0, &info, path, size, &err) < 0) {
        char eb[600];
        ptc_error_format(&err, eb, sizeof eb);
        snprintf(path, size, "(none: %s)", eb);
    }
#else
    (void)stage, (void)message, (void)backend;
    snprintf(path, size, "(no repro: this build lacks logs/repro.c)");
#endif
    for (int i = 0; i < ninputs; i++)
        Py_XDECREF(held[i]);
    free(ts);
    free(held);
}

void cap_warn_mode(cap_reports *r, PyObject *fn)
{
    const char *name = cap_func_name(fn);
    add_event(r, Py_BuildValue("{s:s,s:s,s:s}", "kind", "fallback", "frame", name, "error",
                               "a TorchFunctionMode is active: the call runs eagerly"));
    if (warn_once(r, "torch function mode") &&
        PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                         "ptc: a TorchFunctionMode is active, so %s runs eagerly (compiled code "
                         "would hide its torch calls from the mode and show ptc's own)",
                         name) < 0)
        PyErr_Clear();
    PyErr_Clear();
}

void cap_warn_error(cap_reports *r, const char *where, const ptc_graph *graph)
{
    PyObject *type, *val, *tb;
    PyErr_Fetch(&type, &val, &tb);
    PyObject *s = val ? PyObject_Str(val) : NULL;
    const char *msg = s ? PyUnicode_AsUTF8(s) : "internal error";
    char key[700];
    snprintf(key, sizeof key, "error:%s:%s", where, msg ? msg : "");
    add_event(r, Py_BuildValue("{s:s,s:s,s:s}", "kind", "fallback", "frame", where, "error",
                               msg ? msg : ""));
    if (warn_once(r, key)) {
        char path[1024] = "";
        cap_repro_dump(graph, NULL, 0, "capture", msg ? msg : "", "eager", path, sizeof path);
        if (!path[0])
            snprintf(path, sizeof path, "(none: no graph was captured)");
        if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                             "ptc: internal error while compiling %s; running it eagerly: %s (repro written to %s)",
                             where, msg ? msg : "", path) < 0)
            PyErr_Clear();
    }
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(val);
    Py_XDECREF(tb);
    PyErr_Clear();
}

/* The repro folder a failing layer already wrote and named at the end of its
 * message ("...; repro: DIR", a PTC_ACCURACY divergence): copied to path. */
static bool repro_named(const char *msg, char *path, size_t size)
{
    const char *tag = "; repro: ", *p = NULL;
    for (const char *q = msg; (q = strstr(q, tag)); q++)
        p = q + strlen(tag);
    if (!p)
        return false;
    char json[1200];
    snprintf(json, sizeof json, "%s/repro.json", p);
    struct stat st;
    if (stat(json, &st) < 0 || !S_ISREG(st.st_mode))
        return false;
    snprintf(path, size, "%s", p);
    return true;
}

/* The backend ptminify replays a compiled graph's failure with. */
static const char *graph_target(const ptc_graph *g)
{
    for (int i = 0; g && i < g->ninputs; i++)
        if (g->inputs[i]->type.device.kind == PTC_DEV_CUDA)
            return "cuda";
    return "cpu";
}

/* One warning per failure: a graph whose failure has a repro folder that an
 * earlier warning named (the same divergence in identical blocks) adds none. */
void cap_warn_fallback(cap_reports *r, cap_entry *e, const char *stage, const char *msg)
{
    char key[1200];
    snprintf(key, sizeof key, "fallback:%d:%s", e->id, stage);
    add_event(r, Py_BuildValue("{s:s,s:i,s:s,s:s}", "kind", "backend_fallback", "id", e->id,
                               "stage", stage, "error", msg));
    if (warn_once(r, key)) {
        char path[1024] = "";
        if (!repro_named(msg, path, sizeof path))
            cap_repro_dump(e->graph, NULL, 0, stage, msg, graph_target(e->graph), path, sizeof path);
        snprintf(key, sizeof key, "repro:%s", path);
        if (!path[0])
            snprintf(path, sizeof path, "(none)");
        if ((!strcmp(path, "(none)") || warn_once(r, key)) &&
            PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                             "ptc: backend failed on graph %d (%s: %s); running it through torch ops; repro: %s",
                             e->id, stage, msg, path) < 0)
            PyErr_Clear();
    }
    PyErr_Clear();
}
