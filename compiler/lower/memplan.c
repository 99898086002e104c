/* The memory plan: temporaries in one arena, reused by live range.
 *
 * A temporary lives from the step that writes it to the last step that reads
 * it (both inclusive: a kernel reads its inputs while it writes its outputs,
 * so the two must not share bytes). Placement is greedy, largest buffer
 * first, each at the lowest 64-byte aligned offset that does not overlap a
 * placed buffer whose live range intersects its own; the checker then proves
 * the result pairwise. Sizes that are symbolic are planned the same way at
 * run time, once the sizes are known. The last step that reads each graph
 * input is kept too: a run handed an input for good (a training backward's
 * saved tensors) lets it go there, as eager's autograd frees a saved tensor
 * once its node's backward has run.
 */
#include "lower/lower_int.h"

#include <stdlib.h>
#include <string.h>

enum { ALIGN = 64 };

static int64_t align_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

typedef struct span {
    int64_t lo, hi;
} span;

static int span_cmp(const void *x, const void *y)
{
    const span *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

int64_t ptc_mplan_place(int nbufs, const int64_t *nbytes, const int *first, const int *last,
                        const bool *in_arena, int64_t *offset)
{
    int *order = malloc(sizeof(int) * ((size_t)nbufs + 1));
    bool *placed = calloc((size_t)nbufs + 1, 1);
    span *busy = malloc(sizeof(span) * ((size_t)nbufs + 1));
    int n = 0;
    for (int b = 0; b < nbufs; b++) {
        offset[b] = -1;
        if (in_arena[b])
            order[n++] = b;
    }
    /* largest first; of equal sizes the longest-lived first, so that one
       live through the run sits below the short-lived ones instead of
       splitting the room they share with smaller buffers later (BERT's
       backward: its tied weight's gradient above the logits' left a
       too-small gap under it, 0.7 of a 5.9 MiB arena); ties by id
       (insertion sort: stable, n is small) */
    for (int i = 1; i < n; i++) {
        int v = order[i], j = i - 1;
        while (j >= 0 && (nbytes[order[j]] < nbytes[v] ||
                          (nbytes[order[j]] == nbytes[v] &&
                           last[order[j]] - first[order[j]] < last[v] - first[v]))) {
            order[j + 1] = order[j];
            j--;
        }
        order[j + 1] = v;
    }
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        int b = order[i];
        int nb = 0;
        for (int o = 0; o < nbufs; o++)
            if (placed[o] && first[o] <= last[b] && first[b] <= last[o] && nbytes[o] > 0)
                busy[nb++] = (span){offset[o], offset[o] + nbytes[o]};
        qsort(busy, (size_t)nb, sizeof *busy, span_cmp);
        int64_t at = 0;
        for (int k = 0; k < nb; k++) {
            if (busy[k].lo >= at + nbytes[b])
                break;
            if (busy[k].hi > at)
                at = align_up(busy[k].hi);
        }
        offset[b] = at;
        placed[b] = true;
        if (at + nbytes[b] > total)
            total = at + nbytes[b];
    }
    free(order);
    free(placed);
    free(busy);
    return align_up(total);
}

int ptc_mplan_check(int nbufs, const int64_t *nbytes, const int *first, const int *last,
                    const bool *in_arena, const int64_t *offset, int64_t arena_bytes,
                    ptc_error *err)
{
    for (int b = 0; b < nbufs; b++) {
        if (!in_arena[b])
            continue;
        if (offset[b] < 0 || offset[b] % ALIGN || offset[b] + nbytes[b] > arena_bytes)
            return ptc_errorf(err, PTC_ERR_INTERNAL, "memplan",
                              "buf%d: offset %lld (+%lld bytes) outside an arena of %lld bytes "
                              "or misaligned",
                              b, (long long)offset[b], (long long)nbytes[b],
                              (long long)arena_bytes);
        if (first[b] > last[b])
            return ptc_errorf(err, PTC_ERR_INTERNAL, "memplan", "buf%d: empty live range", b);
        for (int o = b + 1; o < nbufs; o++) {
            if (!in_arena[o] || nbytes[b] == 0 || nbytes[o] == 0)
                continue;
            bool time = first[o] <= last[b] && first[b] <= last[o];
            bool space = offset[o] < offset[b] + nbytes[b] && offset[b] < offset[o] + nbytes[o];
            if (time && space)
                return ptc_errorf(err, PTC_ERR_INTERNAL, "memplan",
                                  "buf%d [%lld,+%lld) and buf%d [%lld,+%lld) overlap while both "
                                  "live (steps %d..%d and %d..%d)",
                                  b, (long long)offset[b], (long long)nbytes[b], o,
                                  (long long)offset[o], (long long)nbytes[o], first[b], last[b],
                                  first[o], last[o]);
        }
    }
    return 0;
}

/* Marks the steps at which each node runs. */
static void node_steps(const ptc_schedule *s, int *step_of)
{
    for (int i = 0; i < s->prog->nnodes; i++)
        step_of[i] = -1;
    for (int t = 0; t < s->nsteps; t++) {
        if (s->steps[t].kind == PTC_STEP_EXTERN) {
            step_of[s->steps[t].index] = t;
            continue;
        }
        const ptc_kernel *k = s->kernels[s->steps[t].index];
        for (int g = 0; g < k->ngroups; g++)
            for (int m = 0; m < k->groups[g].nmembers; m++)
                step_of[k->groups[g].members[m].node] = t;
    }
}

/* The last step reading each graph input (any of its buffers; last: each
 * buffer's last read, -1 where none), and the inputs in that order (an
 * insertion sort: a graph has few inputs). */
static void input_lifetimes(const ptc_lprog *p, const int *last, ptc_mplan *mp)
{
    for (int i = 0; i < mp->ninputs; i++)
        mp->input_last[i] = -1;
    for (int b = 0; b < p->nbufs; b++) {
        const ptc_lbuf *buf = p->bufs[b];
        if (buf->kind != PTC_LB_INPUT || buf->input < 0 || buf->input >= mp->ninputs)
            continue;
        if (last[b] > mp->input_last[buf->input])
            mp->input_last[buf->input] = last[b];
    }
    for (int i = 0; i < mp->ninputs; i++) {
        int j = i;
        for (; j > 0 && mp->input_last[mp->input_order[j - 1]] > mp->input_last[i]; j--)
            mp->input_order[j] = mp->input_order[j - 1];
        mp->input_order[j] = i;
    }
}

/* The first step writing each graph output, and the outputs in that order:
 * a run allocates an output there, not at its start (a backward's first
 * gradient is written at its end: eager's are made one node at a time). */
static void output_births(const ptc_lprog *p, const int *step_of, ptc_mplan *mp)
{
    for (int i = 0; i < mp->noutputs; i++) {
        int def = p->bufs[p->outputs[i]]->def;
        mp->output_first[i] = def >= 0 ? step_of[def] : -1;
        int j = i;
        for (; j > 0 && mp->output_first[mp->output_order[j - 1]] > mp->output_first[i]; j--)
            mp->output_order[j] = mp->output_order[j - 1];
        mp->output_order[j] = i;
    }
}

void ptc_mplan_build(ptc_arena *a, ptc_schedule *s)
{
    const ptc_lprog *p = s->prog;
    ptc_mplan *mp = &s->plan;
    int n = p->nbufs;
    mp->nbufs = n;
    mp->in_arena = PTC_NEWN(a, bool, n + 1);
    mp->first = PTC_NEWN(a, int, n + 1);
    mp->last = PTC_NEWN(a, int, n + 1);
    mp->offset = PTC_NEWN(a, int64_t, n + 1);
    mp->ninputs = p->ninputs;
    mp->input_last = PTC_NEWN(a, int, p->ninputs + 1);
    mp->input_order = PTC_NEWN(a, int, p->ninputs + 1);
    mp->noutputs = p->noutputs;
    mp->output_first = PTC_NEWN(a, int, p->noutputs + 1);
    mp->output_order = PTC_NEWN(a, int, p->noutputs + 1);
    mp->nbytes = PTC_NEWN(a, int64_t, n + 1);
    int *step_of = malloc(sizeof(int) * ((size_t)p->nnodes + 1));
    int *last_read = malloc(sizeof(int) * ((size_t)n + 1));
    node_steps(s, step_of);
    for (int b = 0; b < n; b++)
        last_read[b] = -1;
    ptc_lprog_last_reads(p, step_of, last_read);
    mp->is_static = true;
    for (int b = 0; b < n; b++) {
        const ptc_lbuf *buf = p->bufs[b];
        mp->in_arena[b] = !buf->removed && buf->kind == PTC_LB_TEMP && !s->is_local[b];
        if (!mp->in_arena[b])
            continue;
        mp->first[b] = step_of[buf->def];
        mp->last[b] = mp->first[b] > last_read[b] ? mp->first[b] : last_read[b];
        int64_t bytes = (int64_t)ptc_dtype_size(buf->dtype);
        for (int d = 0; d < buf->ndim; d++) {
            if (!ptc_dim_is_static(buf->shape[d]))
                mp->is_static = false;
            else
                bytes *= buf->shape[d].value;
        }
        mp->nbytes[b] = bytes;
    }
    input_lifetimes(p, last_read, mp);
    output_births(p, step_of, mp);
    free(last_read);
    free(step_of);
    if (mp->is_static)
        mp->arena_bytes =
            ptc_mplan_place(n, mp->nbytes, mp->first, mp->last, mp->in_arena, mp->offset);
}
