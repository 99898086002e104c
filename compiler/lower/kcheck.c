/* The `kernels` stage's checker, run by the scheduler after fusion.
 *
 * ptc_schedule_verify replays the steps in order: every load of a kernel must
 * read an input or a buffer some earlier step (or an earlier member of the
 * same kernel) wrote, every index must use only its group's variables, every
 * node must be in exactly one step, a static memory plan must keep live
 * buffers apart, and the kernels of a horizontal combination must be
 * independent (combo.c). A failure is an internal error naming the kernel.
 */
#include "lower/lower_int.h"

#include <stdlib.h>

static int kfail(ptc_error *err, const ptc_kernel *k, const char *what, int detail)
{
    return ptc_errorf(err, PTC_ERR_INTERNAL, "kernels", "kernel %d %s: %s (%d)", k->id, k->name,
                      what, detail);
}

static bool ix_in_range(const ptc_ix *x, int nvars, int nentries)
{
    for (int i = 0; i < x->nterms; i++) {
        const ptc_ixatom *at = x->terms[i].atom;
        if (at->kind == PTC_IXA_VAR && at->id >= nvars)
            return false;
        if (at->kind == PTC_IXA_VAL && at->id >= nentries)
            return false;
        if ((at->kind == PTC_IXA_DIV || at->kind == PTC_IXA_MOD) &&
            !ix_in_range(at->x, nvars, nentries))
            return false;
    }
    return true;
}

static int verify_kernel(const ptc_schedule *s, const ptc_kernel *k, int step, const int *written,
                         bool *done, ptc_error *err)
{
    const ptc_lprog *p = s->prog;
    if (k->npar < 0 || k->npar > k->nouter)
        return kfail(err, k, "parallel dims out of range", k->npar);
    for (int g = 0; g < k->ngroups; g++) {
        const ptc_kgroup *G = &k->groups[g];
        int nvars = k->nouter + G->ninner + G->nred;
        if (G->nmembers == 0)
            return kfail(err, k, "empty group", g);
        for (int m = 0; m < G->nmembers; m++) {
            const ptc_kmember *mem = &G->members[m];
            const ptc_lnode *n = p->nodes[mem->node];
            if (!n || done[mem->node])
                return kfail(err, k, "member node missing or scheduled twice", mem->node);
            if (n->kind == PTC_LN_REDUCTION ? !G->reduction : G->reduction && G->ninner)
                return kfail(err, k, "member kind differs from its group", mem->node);
            for (int i = 0; i < mem->body.n; i++) {
                const ptc_lexpr *e = &mem->body.e[i];
                const ptc_ix *x = e->op == PTC_L_LOAD ? e->idx[0] : e->ix;
                if (x && !ix_in_range(x, nvars, i))
                    return kfail(err, k, "index uses a variable outside its group", mem->node);
                if (e->op != PTC_L_LOAD)
                    continue;
                if (e->nidx != 1)
                    return kfail(err, k, "load without a flat offset", mem->node);
                const ptc_lbuf *src = p->bufs[e->buf];
                bool ok = src->kind == PTC_LB_INPUT ||
                          (written[e->buf] >= 0 && written[e->buf] < step) ||
                          (written[e->buf] == step && done[src->def]);
                if (!ok)
                    return kfail(err, k, "reads a buffer before it is written", e->buf);
            }
            for (int o = 0; o < 2; o++)
                if (mem->store[o] && !ix_in_range(mem->store[o], nvars, 0))
                    return kfail(err, k, "store index out of its group", mem->node);
            done[mem->node] = true;
        }
    }
    return 0;
}

int ptc_schedule_verify(const ptc_schedule *s, ptc_error *err)
{
    const ptc_lprog *p = s->prog;
    int *written = malloc(sizeof(int) * ((size_t)p->nbufs + 1));
    bool *done = calloc((size_t)p->nnodes + 1, 1);
    int rc = 0;
    for (int b = 0; b < p->nbufs; b++)
        written[b] = -1;
    /* a buffer is written at the step of its writer */
    for (int t = 0; t < s->nsteps; t++) {
        if (s->steps[t].kind == PTC_STEP_EXTERN) {
            const ptc_lnode *n = p->nodes[s->steps[t].index];
            for (int o = 0; o < 2; o++)
                if (n->out[o] >= 0)
                    written[n->out[o]] = t;
            continue;
        }
        const ptc_kernel *k = s->kernels[s->steps[t].index];
        for (int g = 0; g < k->ngroups; g++)
            for (int m = 0; m < k->groups[g].nmembers; m++) {
                const ptc_lnode *n = p->nodes[k->groups[g].members[m].node];
                for (int o = 0; n && o < 2; o++)
                    if (n->out[o] >= 0)
                        written[n->out[o]] = t;
            }
    }
    for (int t = 0; t < s->nsteps && rc == 0; t++) {
        if (s->steps[t].kind == PTC_STEP_KERNEL) {
            rc = verify_kernel(s, s->kernels[s->steps[t].index], t, written, done, err);
            continue;
        }
        const ptc_lnode *n = p->nodes[s->steps[t].index];
        for (int i = 0; i < n->nxin && rc == 0; i++) {
            int bi = n->xin[i].buf;
            if (bi >= 0 && p->bufs[bi]->kind != PTC_LB_INPUT &&
                (written[bi] < 0 || written[bi] >= t))
                rc = ptc_errorf(err, PTC_ERR_INTERNAL, "kernels",
                                "extern n%d reads %s before it is written", n->id,
                                p->bufs[bi]->name);
        }
        done[n->id] = true;
    }
    for (int i = 0; i < p->nnodes && rc == 0; i++)
        if (p->nodes[i] && !done[i])
            rc = ptc_errorf(err, PTC_ERR_INTERNAL, "kernels", "node n%d is in no step", i);
    if (rc == 0 && s->plan.is_static)
        rc = ptc_mplan_check(s->plan.nbufs, s->plan.nbytes, s->plan.first, s->plan.last,
                             s->plan.in_arena, s->plan.offset, s->plan.arena_bytes, err);
    if (rc == 0)
        rc = ptc_combo_verify(s, err);
    free(written);
    free(done);
    return rc;
}
