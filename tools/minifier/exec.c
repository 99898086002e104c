/* What a child runs for one test: the backend on the candidate, then (for
 * accuracy checks) the reference interpreter, then the comparison.
 *
 * Everything here runs in a forked child that exits right after, so nothing
 * is released: the child's death frees it. The harness backend is the
 * reference backend emulated on the interpreter with the runtime stage of
 * PTC_INJECT applied after each node; it lets ptminify's own tests plant
 * crashes, hangs, errors and wrong results without the compiler pipeline.
 */
#include "minify.h"

#include <stdlib.h>
#include <string.h>

static void set_error(mf_result *r, const ptc_error *err, const char *default_stage)
{
    r->kind = MF_ERROR;
    r->errclass = err->cls;
    snprintf(r->stage, sizeof r->stage, "%s", err->stage[0] ? err->stage : default_stage);
    snprintf(r->message, sizeof r->message, "%s", err->msg);
}

bool mf_compare(const mf_case *c, const ptc_tensor *got, const ptc_tensor *want,
                const mf_exec_opts *o, mf_result *r)
{
    for (int i = 0; i < c->g->noutputs; i++) {
        ptc_mismatch m = {.output = i};
        if (ptc_tensor_close(&got[i], &want[i], o->rtol, o->atol, &m))
            continue;
        char what[900];
        ptc_mismatch_format(&m, what, sizeof what);
        r->kind = MF_ACCURACY;
        snprintf(r->message, sizeof r->message, "%s (%%%s)", what, c->g->outputs[i]->name);
        return false;
    }
    return true;
}

/* The oracle's outputs; false (INVALID) when the interpreter rejects the
 * candidate: then it is no test of the backend. */
static bool reference(const mf_case *c, ptc_tensor *want, mf_result *r)
{
    ptc_error err;
    if (c->want) {
        memcpy(want, c->want, sizeof *want * (size_t)c->g->noutputs);
        return true;
    }
    if (ptc_interp_run(c->g, c->inputs, c->ninputs, want, NULL, &err) == 0)
        return true;
    r->kind = MF_INVALID;
    ptc_error_format(&err, r->message, sizeof r->message);
    return false;
}

typedef struct harness {
    ptc_error err;
    bool injected;
} harness;

static int harness_node(void *ctx, const ptc_node *n, const ptc_tensor *outs)
{
    harness *h = ctx;
    switch (ptc_inject_hit("runtime", n->op, &h->err)) {
    case PTC_INJECT_ERROR:
        h->injected = true;
        return 1;
    case PTC_INJECT_WRONG:
        for (int i = 0; i < n->nout; i++) {
            ptc_tensor t = outs[i]; /* the data is the run's; only the struct is const */
            ptc_inject_perturb(&t);
        }
        return 0;
    default:
        return 0;
    }
}

void mf_exec_harness(const mf_case *c, const mf_exec_opts *o, mf_result *r)
{
    harness h = {0};
    ptc_error err;
    ptc_tensor *got = calloc((size_t)c->g->noutputs + 1, sizeof *got);
    ptc_run_opts ro = {.on_node = harness_node, .ctx = &h};
    snprintf(r->stage, sizeof r->stage, "runtime");
    if (ptc_interp_run(c->g, c->inputs, c->ninputs, got, &ro, &err)) {
        set_error(r, h.injected ? &h.err : &err, "runtime");
        return;
    }
    r->kind = MF_PASS;
    if (!o->compare)
        return;
    ptc_tensor *want = calloc((size_t)c->g->noutputs + 1, sizeof *want);
    if (reference(c, want, r))
        mf_compare(c, got, want, o, r);
}

void mf_exec_pipeline(const mf_case *c, const mf_exec_opts *o, mf_result *r)
{
    ptc_error err;
    ptc_compile_opts co = {.backend = o->backend};
    snprintf(r->stage, sizeof r->stage, "compile");
    ptc_program *p = ptc_compile(c->g, &co, &err);
    if (!p) {
        set_error(r, &err, "compile");
        return;
    }
    ptc_tensor *got = calloc((size_t)c->g->noutputs + 1, sizeof *got);
    snprintf(r->stage, sizeof r->stage, "runtime");
    if (ptc_program_run(p, c->inputs, c->ninputs, got, NULL, 0, &err)) {
        set_error(r, &err, "runtime");
        return;
    }
    r->kind = MF_PASS;
    if (!o->compare)
        return;
    ptc_tensor *want = calloc((size_t)c->g->noutputs + 1, sizeof *want);
    if (reference(c, want, r))
        mf_compare(c, got, want, o, r);
}

void mf_case_free(mf_case *c)
{
    for (int i = 0; i < c->ninputs; i++)
        ptc_tensor_release(&c->inputs[i]);
    free(c->inputs);
    free(c->want);
    if (c->mod)
        ptc_module_free(c->mod);
    free(c->text);
    memset(c, 0, sizeof *c);
}

int mf_case_from_text(mf_case *c, char *text, const char *filename, ptc_error *err)
{
    memset(c, 0, sizeof *c);
    c->text = text;
    c->hash = ptc_hash_bytes(PTC_HASH_INIT, text, strlen(text));
    c->mod = ptc_parse_module(text, strlen(text), filename, err);
    if (!c->mod)
        return -1;
    c->g = c->mod->graphs[0];
    if (ptc_ops_verify(c->g, 0, err))
        return -1;
    return 0;
}
