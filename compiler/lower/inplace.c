/* Graph outputs written into an input's own memory.
 *
 * A graph that updates an input in place (an optimizer's parameters and
 * state, a buffer's add_) returns the new value, and the caller copies it
 * into the input after the run: a second pass over memory. Where the kernel
 * that writes the output is the last reader of the input, and reads each
 * element of the input only where (and before) it writes that element of the
 * output, the output can be the input's memory itself: the output buffer is
 * merged into the input buffer (its writer stores into the input, its readers
 * load the input) and the run hands the input tensor back as the output.
 *
 * The check, for output buffer O written by member M of kernel K (step s):
 * no step after s reads input I; in K, every load of I is in M's group, in M
 * or a member before it, at exactly the flat offset M stores O at (each
 * element is read before it is written, by the thread that writes it: one
 * outer iteration owns it); I and O have one dtype, shape and strides.
 */
#include "lower/lower_int.h"

#include <stdlib.h>

/* The step, kernel group and member that compute node `node`; false when an
 * extern or nothing computes it. */
static bool find_member(const ptc_schedule *s, int node, int *step, int *group, int *member)
{
    for (int t = 0; t < s->nsteps; t++) {
        if (s->steps[t].kind != PTC_STEP_KERNEL)
            continue;
        const ptc_kernel *k = s->kernels[s->steps[t].index];
        for (int g = 0; g < k->ngroups; g++)
            for (int m = 0; m < k->groups[g].nmembers; m++)
                if (k->groups[g].members[m].node == node) {
                    *step = t, *group = g, *member = m;
                    return true;
                }
    }
    return false;
}

static bool member_loads(const ptc_kmember *m, int buf)
{
    for (int i = 0; i < m->body.n; i++)
        if (m->body.e[i].op == PTC_L_LOAD && m->body.e[i].buf == buf)
            return true;
    return false;
}

/* Does step t read buffer buf (a load of a kernel, an extern's operand)? */
static bool step_reads(const ptc_schedule *s, int t, int buf)
{
    if (s->steps[t].kind == PTC_STEP_EXTERN)
        return ptc_lnode_reads(s->prog->nodes[s->steps[t].index], buf);
    const ptc_kernel *k = s->kernels[s->steps[t].index];
    for (int g = 0; g < k->ngroups; g++)
        for (int m = 0; m < k->groups[g].nmembers; m++)
            if (member_loads(&k->groups[g].members[m], buf))
                return true;
    return false;
}

static bool same_layout(const ptc_lbuf *a, const ptc_lbuf *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->permuted || b->permuted)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (!ptc_dim_eq(a->shape[d], b->shape[d]) || !ptc_dim_eq(a->strides[d], b->strides[d]))
            return false;
    return true;
}

/* The loads of `in` in kernel k are all in group g at or before member m, at
 * offset `at`. */
static bool loads_before_store(const ptc_kernel *k, int g, int m, int in, const ptc_ix *at)
{
    for (int gi = 0; gi < k->ngroups; gi++)
        for (int mi = 0; mi < k->groups[gi].nmembers; mi++) {
            const ptc_kmember *mem = &k->groups[gi].members[mi];
            for (int i = 0; i < mem->body.n; i++) {
                const ptc_lexpr *e = &mem->body.e[i];
                if (e->op != PTC_L_LOAD || e->buf != in)
                    continue;
                if (gi != g || mi > m || e->nidx != 1 || !ptc_ix_eq(e->idx[0], at))
                    return false;
            }
        }
    return true;
}

/* Every reference to buffer `from` becomes one to `to`: stores of its
 * writer, loads, extern operands, kernel arguments, graph outputs. */
static void merge_buffer(ptc_schedule *s, int from, int to)
{
    ptc_lprog *p = (ptc_lprog *)s->prog;
    for (int n = 0; n < p->nnodes; n++) {
        ptc_lnode *node = p->nodes[n];
        for (int o = 0; node && o < 2; o++)
            if (node->out[o] == from)
                node->out[o] = to;
        for (int i = 0; node && i < node->nxin; i++)
            if (node->xin[i].buf == from)
                node->xin[i].buf = to;
    }
    for (int ki = 0; ki < s->nkernels; ki++) {
        ptc_kernel *k = s->kernels[ki];
        for (int g = 0; g < k->ngroups; g++)
            for (int m = 0; m < k->groups[g].nmembers; m++) {
                ptc_lbody *b = &k->groups[g].members[m].body;
                for (int i = 0; i < b->n; i++)
                    if (b->e[i].op == PTC_L_LOAD && b->e[i].buf == from)
                        b->e[i].buf = to;
            }
        int n = 0;
        bool has_to = false;
        for (int i = 0; i < k->nargs; i++) {
            int a = k->args[i] == from ? to : k->args[i];
            if (a == to && has_to)
                continue; /* the kernel read the input already */
            has_to |= a == to;
            k->args[n++] = a;
        }
        k->nargs = n;
    }
    for (int i = 0; i < p->noutputs; i++)
        if (p->outputs[i] == from)
            p->outputs[i] = to;
    p->bufs[from]->removed = true;
}

bool ptc_schedule_write_in_place(ptc_schedule *s, int output, int input)
{
    const ptc_lprog *p = s->prog;
    int out = p->outputs[output], in = -1;
    for (int b = 0; b < p->nbufs; b++)
        if (p->bufs[b]->kind == PTC_LB_INPUT && p->bufs[b]->input == input)
            in = b;
    const ptc_lbuf *ob = p->bufs[out];
    if (in < 0 || ob->kind != PTC_LB_OUTPUT || ob->removed || ob->def < 0 ||
        !same_layout(ob, p->bufs[in]) || s->is_local[out])
        return false;
    for (int i = 0; i < p->noutputs; i++)
        if (i != output && p->outputs[i] == out)
            return false; /* the value is another output too */
    const ptc_lnode *writer = p->nodes[ob->def];
    int step, g, m;
    if (!writer || writer->kind != PTC_LN_POINTWISE || !find_member(s, ob->def, &step, &g, &m))
        return false;
    for (int t = step + 1; t < s->nsteps; t++)
        if (step_reads(s, t, in))
            return false;
    const ptc_kernel *k = s->kernels[s->steps[step].index];
    const ptc_kmember *mem = &k->groups[g].members[m];
    const ptc_ix *at = mem->store[writer->out[0] == out ? 0 : 1];
    if (k->groups[g].reduction || !at || !loads_before_store(k, g, m, in, at))
        return false;
    merge_buffer(s, out, in);
    return true;
}
