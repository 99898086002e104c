/* The `kernels` stage: printing and cache keys (its checker is kcheck.c).
 *
 * kernels.txt lists the steps in order. Each kernel starts with
 * "kernel <n> <name>:" and lists its outer loop, its groups and their
 * members; member lines end with the stage-1 provenance. Externs are
 * "extern <n> <op>:" blocks. A "combo <i>: ..." line before a step opens a
 * horizontal combination (combo.c) and lists its kernels. The memory plan
 * closes the file.
 *
 * The cache key of a kernel is the same text with buffers named by argument
 * position and without provenance: two kernels with equal keys compile to the
 * same code whatever graph they came from.
 */
#include "lower/lower_int.h"

#include <stdlib.h>
#include <string.h>

static void print_prov(ptc_buf *b, int n, const char *const *prov)
{
    if (n <= 0)
        return;
    ptc_buf_puts(b, "  <-");
    for (int i = 0; i < n; i++)
        ptc_buf_printf(b, "%s %%%s", i ? "," : "", prov[i]);
}

static void print_ranges(ptc_buf *b, const ptc_dim *d, int n, const char *prefix)
{
    ptc_buf_putc(b, '[');
    for (int i = 0; i < n; i++) {
        ptc_buf_printf(b, "%s%s%d < ", i ? ", " : "", prefix, i);
        ptc_dim_print(b, d[i]);
    }
    ptc_buf_putc(b, ']');
}

/* Kernel variable names for group g: o<i>, i<i>, r<i>. */
static int var_names(ptc_arena *a, const ptc_kernel *k, const ptc_kgroup *g, const char **names)
{
    int n = 0;
    for (int i = 0; i < k->nouter; i++)
        names[n++] = ptc_arena_printf(a, "o%d", i);
    for (int i = 0; i < g->ninner; i++)
        names[n++] = ptc_arena_printf(a, "i%d", i);
    for (int i = 0; i < g->nred; i++)
        names[n++] = ptc_arena_printf(a, "r%d", i);
    return n;
}

static void print_kernel_body(ptc_buf *b, const ptc_schedule *s, const ptc_kernel *k,
                              const char *const *bufnames, bool with_prov)
{
    const ptc_lprog *p = s->prog;
    ptc_arena *tmp = ptc_arena_new();
    ptc_buf_puts(b, "  outer ");
    print_ranges(b, k->outer, k->nouter, "o");
    ptc_buf_printf(b, " parallel %d\n", k->npar);
    if (k->nparams) {
        ptc_buf_puts(b, "  params");
        for (int i = 0; i < k->nparams; i++) {
            ptc_buf_putc(b, ' ');
            ptc_dim_print(b, k->params[i]);
        }
        ptc_buf_putc(b, '\n');
    }
    for (int i = 0; i < k->nlocal; i++) {
        const ptc_lbuf *lb = p->bufs[k->locals[i]];
        ptc_buf_printf(b, "  local %s: %s[", bufnames[lb->id], ptc_dtype_name(lb->dtype));
        for (int d = 0; d < lb->ndim; d++) {
            if (d)
                ptc_buf_putc(b, ',');
            if (d < k->local_from[i])
                ptc_buf_putc(b, '_');
            else
                ptc_dim_print(b, lb->shape[d]);
        }
        ptc_buf_puts(b, "]\n");
    }
    for (int g = 0; g < k->ngroups; g++) {
        const ptc_kgroup *G = &k->groups[g];
        const char *names[3 * PTC_MAX_DIMS];
        int nn = var_names(tmp, k, G, names);
        ptc_buf_printf(b, "  group %d %s ", g, G->reduction ? "reduction" : "pointwise");
        print_ranges(b, G->inner, G->ninner, "i");
        if (G->reduction) {
            ptc_buf_puts(b, " over ");
            print_ranges(b, G->red, G->nred, "r");
        }
        ptc_buf_putc(b, '\n');
        for (int m = 0; m < G->nmembers; m++) {
            const ptc_kmember *mem = &G->members[m];
            const ptc_lnode *n = p->nodes[mem->node];
            if (with_prov)
                ptc_buf_printf(b, "    member n%d", n->id);
            else
                ptc_buf_puts(b, "    member");
            if (n->kind == PTC_LN_REDUCTION) {
                ptc_buf_printf(b, " %s%s", ptc_reduce_name(n->reduce),
                               n->nan_last ? " nan_last" : "");
                if (n->reduce == PTC_RED_WELFORD)
                    ptc_buf_printf(b, " correction=%.17g", n->correction);
            }
            ptc_buf_printf(b, " of t%d ->", mem->value);
            for (int o = 0; o < 2; o++) {
                if (!mem->store[o])
                    continue;
                ptc_buf_printf(b, " %s[", bufnames[n->out[o]]);
                ptc_ix_print(b, mem->store[o], names, nn);
                ptc_buf_printf(b, "]:%s", ptc_dtype_name(p->bufs[n->out[o]]->dtype));
            }
            if (with_prov)
                print_prov(b, n->nprov, n->prov);
            ptc_buf_putc(b, '\n');
            /* the key's seeds are relative, as the code's are (ptc_rng_shift) */
            ptc_lbody_print(b, &mem->body, names, nn, bufnames, "      ",
                            with_prov ? 0 : k->seed_base);
        }
    }
    ptc_arena_free(tmp);
}

void ptc_kernel_print(ptc_buf *b, const ptc_schedule *s, const ptc_kernel *k)
{
    const ptc_lprog *p = s->prog;
    const char **names = malloc(sizeof(char *) * ((size_t)p->nbufs + 1));
    for (int i = 0; i < p->nbufs; i++)
        names[i] = p->bufs[i]->name;
    ptc_buf_printf(b, "kernel %d %s:\n", k->id, k->name);
    ptc_buf_puts(b, "  args");
    for (int i = 0; i < k->nargs; i++)
        ptc_buf_printf(b, " %s", names[k->args[i]]);
    ptc_buf_putc(b, '\n');
    print_kernel_body(b, s, k, names, true);
    free(names);
}

char *ptc_kernel_code_text(const ptc_kernel *k, const char *code)
{
    ptc_buf b = {0};
    ptc_buf_printf(&b, "; ptc kernel %d %s", k->id, k->name);
    if (k->nprov > 0) {
        ptc_buf_puts(&b, "  <-");
        for (int i = 0; i < k->nprov; i++)
            ptc_buf_printf(&b, "%s %%%s", i ? "," : "", k->prov[i]);
    }
    ptc_buf_printf(&b, "\n%s", code);
    return b.data;
}

void ptc_kernel_print_key(ptc_buf *b, const ptc_schedule *s, const ptc_kernel *k)
{
    const ptc_lprog *p = s->prog;
    ptc_arena *tmp = ptc_arena_new();
    const char **names = PTC_NEWN(tmp, const char *, p->nbufs + 1);
    for (int i = 0; i < p->nbufs; i++)
        names[i] = "?";
    ptc_buf_puts(b, "args");
    for (int i = 0; i < k->nargs; i++) {
        names[k->args[i]] = ptc_arena_printf(tmp, "a%d", i);
        ptc_buf_printf(b, " %s", ptc_dtype_name(p->bufs[k->args[i]]->dtype));
    }
    ptc_buf_putc(b, '\n');
    for (int i = 0; i < k->nlocal; i++)
        names[k->locals[i]] = ptc_arena_printf(tmp, "l%d", i);
    print_kernel_body(b, s, k, names, false);
    ptc_arena_free(tmp);
}

static void print_extern(ptc_buf *b, const ptc_schedule *s, const ptc_lnode *n, int index)
{
    const ptc_lprog *p = s->prog;
    ptc_buf_printf(b, "extern %d %s:\n", index, ptc_op_name(n->xnode->op));
    ptc_buf_printf(b, "  n%d %s%s(", n->id, ptc_op_name(n->xnode->op),
                   n->xkind == PTC_XK_HOST ? "" : " [ptc]");
    for (int i = 0; i < n->nxin; i++) {
        const ptc_lview *v = &n->xin[i];
        if (i)
            ptc_buf_puts(b, ", ");
        if (v->buf < 0) {
            ptc_buf_puts(b, "None");
            continue;
        }
        ptc_buf_printf(b, "%s[", p->bufs[v->buf]->name);
        for (int d = 0; d < v->ndim; d++) {
            if (d)
                ptc_buf_putc(b, ',');
            ptc_dim_print(b, v->sizes[d]);
        }
        ptc_buf_puts(b, "]{");
        for (int d = 0; d < v->ndim; d++) {
            if (d)
                ptc_buf_putc(b, ',');
            ptc_dim_print(b, v->strides[d]);
        }
        ptc_buf_putc(b, '}');
    }
    ptc_buf_puts(b, ") ->");
    for (int o = 0; o < 2; o++)
        if (n->out[o] >= 0)
            ptc_buf_printf(b, " %s", p->bufs[n->out[o]]->name);
    print_prov(b, n->nprov, n->prov);
    ptc_buf_putc(b, '\n');
}

static void print_plan(ptc_buf *b, const ptc_schedule *s)
{
    const ptc_lprog *p = s->prog;
    const ptc_mplan *mp = &s->plan;
    int n = 0;
    for (int i = 0; i < mp->nbufs; i++)
        n += mp->in_arena[i];
    if (mp->is_static)
        ptc_buf_printf(b, "memory: arena %lld bytes, %d buffers\n", (long long)mp->arena_bytes, n);
    else
        ptc_buf_printf(b, "memory: arena planned at run time (symbolic sizes), %d buffers\n", n);
    for (int i = 0; i < mp->nbufs; i++) {
        if (!mp->in_arena[i])
            continue;
        const ptc_lbuf *buf = p->bufs[i];
        ptc_buf_printf(b, "  %s: %s[", buf->name, ptc_dtype_name(buf->dtype));
        for (int d = 0; d < buf->ndim; d++) {
            if (d)
                ptc_buf_putc(b, ',');
            ptc_dim_print(b, buf->shape[d]);
        }
        ptc_buf_puts(b, buf->permuted ? "] channels-last" : "]");
        if (buf->padded)
            ptc_buf_printf(b, " rows of %lld", (long long)buf->strides[buf->ndim - 2].value);
        if (mp->is_static)
            ptc_buf_printf(b, " %lld bytes at %lld", (long long)mp->nbytes[i],
                           (long long)mp->offset[i]);
        ptc_buf_printf(b, ", live steps %d..%d", mp->first[i], mp->last[i]);
        print_prov(b, buf->nprov, buf->prov);
        ptc_buf_putc(b, '\n');
    }
}

void ptc_schedule_print(ptc_buf *b, const ptc_schedule *s)
{
    ptc_buf_puts(b, "# ptc kernels v1\n");
    ptc_buf_printf(b, "# %d kernels, %d steps; %d producers inlined, %d refused (recompute), %d "
                      "refused (memory)\n",
                   s->nkernels, s->nsteps, s->ninlined, s->nrefused_recompute, s->nrefused_memory);
    int ncl = 0;
    for (int i = 0; i < s->prog->nbufs; i++)
        ncl += s->prog->bufs[i]->permuted && !s->prog->bufs[i]->removed;
    if (ncl)
        ptc_buf_printf(b, "# layout: %d buffers stored channels-last (NHWC)\n", ncl);
    int npad = 0;
    for (int i = 0; i < s->prog->nbufs; i++)
        npad += s->prog->bufs[i]->padded && !s->prog->bufs[i]->removed;
    if (npad)
        ptc_buf_printf(
            b, "# layout: %d buffers stored with padded rows (aligned matmul operands)\n", npad);
    if (s->ncombos)
        ptc_buf_printf(b, "# %d horizontal combinations (combo lines: kernels run as one)\n",
                       s->ncombos);
    int nx = 0;
    for (int t = 0; t < s->nsteps; t++) {
        const ptc_combo *c = ptc_schedule_combo_at(s, t);
        if (c)
            ptc_combo_print(b, s, c);
        if (s->steps[t].kind == PTC_STEP_KERNEL)
            ptc_kernel_print(b, s, s->kernels[s->steps[t].index]);
        else
            print_extern(b, s, s->prog->nodes[s->steps[t].index], nx++);
    }
    print_plan(b, s);
}
