/* The output folder: a repro folder (the same contract as ptc_repro_write,
 * so ptminify and ptview take it as input) plus what a person needs to file
 * the bug: the reference outputs, a C-only command line, a standalone torch
 * script and a summary of the reduction.
 *
 * The reference outputs are recorded in a child like every other run of the
 * interpreter, and written only when the interpreter completes the graph.
 */
#include "minify.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *repro_kind(mf_kind k)
{
    switch (k) {
    case MF_ERROR:
        return "error";
    case MF_ACCURACY:
    case MF_PASS: /* --emit-only: re-running checks the outputs */
        return "accuracy";
    case MF_HANG:
        return "hang";
    default:
        return "crash";
    }
}

const char *mf_backend_name(ptc_backend b)
{
    return b == PTC_BACKEND_CPU ? "cpu" : b == PTC_BACKEND_CUDA ? "cuda" : "reference";
}

static const char *backend_label(const mf *m)
{
    return m->exec == mf_exec_harness ? "harness" : mf_backend_name(m->xo.backend);
}

/* Tolerances to record: the check's, else the default of the first float
 * output's dtype. */
static void tolerances(const mf *m, const ptc_graph *g, double *rtol, double *atol)
{
    ptc_dtype dt = PTC_F32;
    for (int i = 0; i < g->noutputs; i++)
        if (ptc_dtype_is_float(g->outputs[i]->type.dtype)) {
            dt = g->outputs[i]->type.dtype;
            break;
        }
    ptc_tolerance_default(dt, rtol, atol);
    if (m->xo.rtol >= 0)
        *rtol = m->xo.rtol;
    if (m->xo.atol >= 0)
        *atol = m->xo.atol;
}

static int write_reference(const mf *m, const mf_case *c, const char *dir, ptc_error *err)
{
    const ptc_graph *g = c->g;
    ptc_tensor *rec = calloc((size_t)g->nvalues + 1, sizeof *rec);
    ptc_tensor *outs = calloc((size_t)g->noutputs + 1, sizeof *outs);
    const char **names = calloc((size_t)g->noutputs + 1, sizeof *names);
    int n = mf_record(m->pool, g, c->inputs, rec, err), rc = 0;
    bool whole = n >= 0;
    for (int i = 0; i < g->noutputs && whole; i++) {
        const ptc_value *v = g->outputs[i];
        outs[i] = v->def ? rec[v->id] : c->inputs[v->input_index];
        names[i] = v->name;
        whole = outs[i].data != NULL;
    }
    if (whole) {
        char path[1300];
        snprintf(path, sizeof path, "%s/reference.bin", dir);
        rc = ptc_tensorfile_write(path, outs, names, g->noutputs, err);
    }
    for (int v = 0; v < g->nvalues; v++)
        ptc_tensor_release(&rec[v]);
    free(rec);
    free(outs);
    free(names);
    return rc;
}

/* Appends s single-quoted for sh. */
static void sh_quote(ptc_buf *b, const char *s)
{
    ptc_buf_putc(b, '\'');
    for (; *s; s++)
        if (*s == '\'')
            ptc_buf_puts(b, "'\\''");
        else
            ptc_buf_putc(b, *s);
    ptc_buf_putc(b, '\'');
}

static int write_sh(const mf *m, const char *dir, const char *sig, ptc_error *err)
{
    ptc_buf b = {0};
    ptc_buf_printf(&b, "#!/bin/sh\n# ptminify repro: %s\n", sig);
    ptc_buf_puts(&b, "# C tools only. Exit status 1 when the failure shows (a crash kills the "
                     "process).\ncd \"$(dirname \"$0\")\" || exit 2\n");
    const char *inject = ptc_inject_spec();
    if (*inject) {
        ptc_buf_puts(&b, "export PTC_INJECT=");
        sh_quote(&b, inject);
        ptc_buf_puts(&b, "   # the planted bug\n");
    }
    if (m->exec == mf_exec_harness) {
        ptc_buf_puts(&b, "exec \"${PTMINIFY:-ptminify}\" --reproduce --backend harness .\n");
    } else {
        ptc_buf_printf(&b,
                       "# or: ptminify --reproduce .\nexec \"${PTC_RUN:-ptc-run}\" --backend "
                       "%s --inputs inputs.bin",
                       mf_backend_name(m->xo.backend));
        if (m->sig.kind == MF_ACCURACY)
            ptc_buf_puts(&b, " --check"); /* the same dtype tolerances as ptminify's default */
        ptc_buf_puts(&b, " graph.ptir\n");
        if (m->sig.kind == MF_ACCURACY && (m->xo.rtol >= 0 || m->xo.atol >= 0))
            ptc_buf_printf(&b,
                           "# ptminify checked with rtol %g, atol %g; ptc-run --check uses the "
                           "dtype defaults\n",
                           m->xo.rtol, m->xo.atol);
    }
    char path[1300];
    snprintf(path, sizeof path, "%s/repro.sh", dir);
    int rc = ptc_write_file(path, b.data, b.len, err);
    ptc_buf_free(&b);
    if (rc == 0 && chmod(path, 0755) != 0)
        rc = ptc_errorf(err, PTC_ERR_IO, "minify", "chmod %s: %s", path, strerror(errno));
    return rc;
}

static int write_py(const mf *m, const mf_case *c, const mf_result *r, const char *dir,
                    ptc_error *err)
{
    ptc_buf b = {0};
    int rc = mf_emit_python(c->g, &m->sig, r, &m->opt, &b, err);
    char path[1300];
    snprintf(path, sizeof path, "%s/repro.py", dir);
    if (rc == 0)
        rc = ptc_write_file(path, b.data, b.len, err);
    ptc_buf_free(&b);
    if (rc == 0 && chmod(path, 0755) != 0)
        rc = ptc_errorf(err, PTC_ERR_IO, "minify", "chmod %s: %s", path, strerror(errno));
    return rc;
}

static int write_summary(const mf *m, const mf_summary *s, const char *dir, const char *sig,
                         const char *what, ptc_error *err)
{
    ptc_buf t = {0}, j = {0};
    ptc_buf_printf(&t,
                   "ptminify summary\n"
                   "  input       %s\n"
                   "  backend     %s\n"
                   "  signature   %s\n"
                   "  failure     %s\n"
                   "  nodes       %d -> %d\n"
                   "  inputs      %d -> %d\n"
                   "  outputs     %d -> %d\n"
                   "  tests       %d run in children (%d answered from the cache, %d not valid)\n"
                   "  reductions  %d kept\n"
                   "  time        %.2f s with %d job%s\n",
                   s->input, backend_label(m), sig, what, s->nodes_before, s->nodes_after,
                   s->inputs_before, s->inputs_after, s->outputs_before, s->outputs_after,
                   m->stats.tests, m->stats.cached, m->stats.invalid, m->stats.accepted, s->seconds,
                   m->opt.limits.jobs, m->opt.limits.jobs == 1 ? "" : "s");
    if (!s->reduced && s->stop_reason[0])
        ptc_buf_puts(&t, "  result      not reduced: stopped early\n");
    else if (!s->reduced && s->nodes_before <= 1)
        ptc_buf_puts(&t, "  result      already minimal\n");
    else if (!s->reduced)
        ptc_buf_puts(&t, "  result      the failure disappears when the graph is shrunk: this is "
                         "the original graph\n");
    if (s->stop_reason[0])
        ptc_buf_printf(&t, "  stopped     %s (the graph may shrink further)\n", s->stop_reason);
    ptc_jw w;
    ptc_jw_init(&w, &j, true);
    ptc_jw_obj_begin(&w);
#define KEY_STR(k, v) (ptc_jw_key(&w, k), ptc_jw_str(&w, v))
#define KEY_INT(k, v) (ptc_jw_key(&w, k), ptc_jw_int(&w, v))
    KEY_STR("input", s->input);
    KEY_STR("backend", backend_label(m));
    KEY_STR("signature", sig);
    KEY_STR("failure", what);
    KEY_STR("kind", mf_kind_name(m->sig.kind));
    KEY_STR("stage", m->sig.stage);
    KEY_INT("nodes_before", s->nodes_before);
    KEY_INT("nodes_after", s->nodes_after);
    KEY_INT("inputs_before", s->inputs_before);
    KEY_INT("inputs_after", s->inputs_after);
    KEY_INT("outputs_before", s->outputs_before);
    KEY_INT("outputs_after", s->outputs_after);
    KEY_INT("tests", m->stats.tests);
    KEY_INT("cached", m->stats.cached);
    KEY_INT("invalid", m->stats.invalid);
    KEY_INT("reductions", m->stats.accepted);
    KEY_INT("jobs", m->opt.limits.jobs);
    ptc_jw_key(&w, "seconds");
    ptc_jw_num(&w, s->seconds);
    ptc_jw_key(&w, "reduced");
    ptc_jw_bool(&w, s->reduced);
    KEY_STR("stopped", s->stop_reason);
    KEY_STR("inject", ptc_inject_spec());
#undef KEY_STR
#undef KEY_INT
    ptc_jw_obj_end(&w);
    ptc_buf_putc(&j, '\n');
    char path[1300];
    snprintf(path, sizeof path, "%s/summary.txt", dir);
    int rc = ptc_write_file(path, t.data, t.len, err);
    snprintf(path, sizeof path, "%s/summary.json", dir);
    if (rc == 0)
        rc = ptc_write_file(path, j.data, j.len, err);
    ptc_buf_free(&t);
    ptc_buf_free(&j);
    return rc;
}

int mf_emit(const mf *m, const mf_case *c, const mf_result *r, const mf_summary *s, const char *dir,
            ptc_error *err)
{
    char sig[1400], what[1400];
    mf_signature_format(&m->sig, sig, sizeof sig);
    mf_result_format(r, what, sizeof what);
    double rtol, atol;
    tolerances(m, c->g, &rtol, &atol);
    char message[1400];
    snprintf(message, sizeof message, "%s", r->message[0] ? r->message : what);
    ptc_repro_info info = {.kind = repro_kind(m->sig.kind),
                           .stage = r->stage,
                           .error_class = ptc_errclass_name((ptc_errclass)r->errclass),
                           .message = message,
                           .backend = backend_label(m),
                           .rtol = rtol,
                           .atol = atol};
    if (ptc_repro_write(dir, c->g, c->inputs, c->ninputs, &info, NULL, 0, err) ||
        write_reference(m, c, dir, err) || write_sh(m, dir, sig, err) ||
        write_py(m, c, r, dir, err) || write_summary(m, s, dir, sig, what, err))
        return -1;
    return 0;
}
