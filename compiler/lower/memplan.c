/* The memory plan: temporaries in one arena, reused by live range.
 *
 * A temporary lives from the step that writes it to the last step that reads
 * it (both inclusive: a kernel reads its inputs while it writes its outputs,
 * so the two must not share bytes; the steps of a horizontal combination,
 * which run at once, count as one: ptc_mplan_merge_combos). Placement is
 * greedy, largest buffer first, each at the lowest 64-byte aligned offset
 * that does not overlap a placed buffer whose live range intersects its own;
 * the checker then proves the result pairwise. Sizes that are symbolic are
 * planned the same way at run time, once the sizes are known. The last step
 * that reads each graph input is kept too: a run handed an input for good (a
 * training backward's saved tensors) lets it go there, as eager's autograd
 * frees a saved tensor once its node's backward has run.
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
        int64_t sizes[PTC_MAX_DIMS];
        for (int d = 0; d < buf->ndim; d++) {
            if (!ptc_dim_is_static(buf->shape[d]))
                mp->is_static = false;
            sizes[d] = ptc_dim_is_static(buf->shape[d]) ? buf->shape[d].value : 1;
        }
        mp->nbytes[b] = (int64_t)ptc_dtype_size(buf->dtype) * ptc_lbuf_elems(buf, sizes);
    }
    input_lifetimes(p, last_read, mp);
    output_births(p, step_of, mp);
    free(last_read);
    free(step_of);
    if (mp->is_static)
        mp->arena_bytes =
            ptc_mplan_place(n, mp->nbytes, mp->first, mp->last, mp->in_arena, mp->offset);
}

/* Combinations (combo.c) run their steps at once, so the plan counts each
 * as one step: a buffer live at any of its steps lives through all of them,
 * and two buffers its members touch never share bytes (ptc_mplan_check
 * proves it). The step maps are monotone, so the inputs' and outputs'
 * orders stand. */
void ptc_mplan_merge_combos(ptc_schedule *s)
{
    ptc_mplan *mp = &s->plan;
    int *lo = malloc(sizeof *lo * ((size_t)s->nsteps + 1));
    int *hi = malloc(sizeof *hi * ((size_t)s->nsteps + 1));
    PTC_ASSERT(lo && hi);
    for (int t = 0; t < s->nsteps; t++)
        lo[t] = hi[t] = t;
    for (int i = 0; i < s->ncombos; i++)
        for (int t = s->combos[i].first; t < s->combos[i].first + s->combos[i].n; t++)
            lo[t] = s->combos[i].first, hi[t] = s->combos[i].first + s->combos[i].n - 1;
    for (int b = 0; b < mp->nbufs; b++)
        if (mp->in_arena[b] && mp->first[b] >= 0)
            mp->first[b] = lo[mp->first[b]], mp->last[b] = hi[mp->last[b]];
    for (int i = 0; i < mp->ninputs; i++)
        if (mp->input_last[i] >= 0)
            mp->input_last[i] = hi[mp->input_last[i]];
    for (int i = 0; i < mp->noutputs; i++)
        if (mp->output_first[i] >= 0)
            mp->output_first[i] = lo[mp->output_first[i]];
    free(lo);
    free(hi);
    if (mp->is_static)
        mp->arena_bytes =
            ptc_mplan_place(mp->nbufs, mp->nbytes, mp->first, mp->last, mp->in_arena, mp->offset);
}

/* ---- segments ------------------------------------------------------------------------ *
 *
 * One arena held from a run's first step to its last costs its whole size at
 * every step, also where the memory outside it (a backward's saved tensors,
 * let go one by one; a forward's outputs, made one by one) is at its highest.
 * Segments split the arena by phase: cuts at steps, each buffer in the
 * segment of the phase in which it is first written; a segment is allocated
 * at its first buffer's first step and freed after its buffers' last step.
 * The cuts are chosen greedily on a lower bound of each segment's size (its
 * buffers' live bytes at its fullest step), one at a time while the peak
 * (outside bytes plus the segments live, per step) falls; the result is then
 * placed for real and kept only where its real peak beats one arena's. */

enum { MAX_SEGMENTS = PTC_MPLAN_MAX_SEGMENTS };

/* The lower-bound peak of the segments that cuts[0..ncuts) make; held and
 * diff are scratch of nsteps + 1. */
static int64_t estimated_peak(int nbufs, const int64_t *nbytes, const int *first, const int *last,
                              const bool *in_arena, int nsteps, const int64_t *outside,
                              const int *cuts, int ncuts, int64_t *held, int64_t *diff)
{
    for (int t = 0; t <= nsteps; t++)
        held[t] = 0;
    for (int s = 0; s <= ncuts; s++) {
        int lo = s ? cuts[s - 1] : 0, hi = s < ncuts ? cuts[s] : nsteps;
        int seg_first = nsteps, seg_last = -1;
        for (int t = 0; t <= nsteps; t++)
            diff[t] = 0;
        for (int b = 0; b < nbufs; b++) {
            if (!in_arena[b] || first[b] < lo || first[b] >= hi)
                continue;
            seg_first = first[b] < seg_first ? first[b] : seg_first;
            seg_last = last[b] > seg_last ? last[b] : seg_last;
            diff[first[b]] += nbytes[b];
            diff[last[b] + 1 < nsteps ? last[b] + 1 : nsteps] -= nbytes[b];
        }
        int64_t size = 0, live = 0;
        for (int t = 0; t < nsteps; t++) {
            live += diff[t];
            size = live > size ? live : size;
        }
        for (int t = seg_first; t <= seg_last && t < nsteps; t++)
            held[t] += size;
    }
    int64_t peak = 0;
    for (int t = 0; t < nsteps; t++)
        peak = outside[t] + held[t] > peak ? outside[t] + held[t] : peak;
    return peak;
}

/* The segment of each arena buffer for cuts[0..ncuts). */
static void assign_segments(int nbufs, const int *first, const bool *in_arena, const int *cuts,
                            int ncuts, int *seg_of)
{
    for (int b = 0; b < nbufs; b++) {
        seg_of[b] = 0;
        if (!in_arena[b])
            continue;
        while (seg_of[b] < ncuts && first[b] >= cuts[seg_of[b]])
            seg_of[b]++;
    }
}

void ptc_mplan_place_segments(int nbufs, const int64_t *nbytes, const int *first, const int *last,
                              const bool *in_arena, int nsegs, const int *seg_of, int64_t *offset,
                              int64_t *seg_bytes)
{
    bool *mine = malloc((size_t)nbufs + 1);
    PTC_ASSERT(mine);
    for (int s = 0; s < nsegs; s++) {
        for (int b = 0; b < nbufs; b++)
            mine[b] = in_arena[b] && seg_of[b] == s;
        int64_t *at = malloc(sizeof *at * ((size_t)nbufs + 1));
        PTC_ASSERT(at);
        seg_bytes[s] = ptc_mplan_place(nbufs, nbytes, first, last, mine, at);
        for (int b = 0; b < nbufs; b++)
            if (mine[b])
                offset[b] = at[b];
        free(at);
    }
    free(mine);
}

void ptc_mplan_segment_spans(int nbufs, const int *first, const int *last, const bool *in_arena,
                             int nsegs, const int *seg_of, int *seg_first, int *seg_last)
{
    for (int s = 0; s < nsegs; s++)
        seg_first[s] = INT32_MAX, seg_last[s] = -1;
    for (int b = 0; b < nbufs; b++) {
        if (!in_arena[b])
            continue;
        int s = seg_of[b];
        seg_first[s] = first[b] < seg_first[s] ? first[b] : seg_first[s];
        seg_last[s] = last[b] > seg_last[s] ? last[b] : seg_last[s];
    }
}

/* The highest of outside[t] plus the segments held at step t. */
static int64_t segments_peak(int nsteps, const int64_t *outside, int nsegs, const int *seg_first,
                             const int *seg_last, const int64_t *seg_bytes)
{
    int64_t peak = 0;
    for (int t = 0; t < nsteps; t++) {
        int64_t at = outside[t];
        for (int s = 0; s < nsegs; s++)
            if (seg_first[s] <= t && t <= seg_last[s])
                at += seg_bytes[s];
        peak = at > peak ? at : peak;
    }
    return peak;
}

/* The greedy cuts (see above): their count; cuts[] ascending. */
static int choose_cuts(int nbufs, const int64_t *nbytes, const int *first, const int *last,
                       const bool *in_arena, int nsteps, const int64_t *outside, int *cuts)
{
    int64_t *held = malloc(sizeof *held * ((size_t)nsteps + 1));
    int64_t *diff = malloc(sizeof *diff * ((size_t)nsteps + 1));
    bool *starts = calloc((size_t)nsteps + 1, 1);
    int trial[MAX_SEGMENTS];
    PTC_ASSERT(held && diff && starts);
    for (int b = 0; b < nbufs; b++)
        if (in_arena[b] && first[b] >= 0 && first[b] < nsteps)
            starts[first[b]] = true;
    int ncuts = 0;
    int64_t best =
        estimated_peak(nbufs, nbytes, first, last, in_arena, nsteps, outside, cuts, 0, held, diff);
    while (ncuts + 1 < MAX_SEGMENTS) {
        int best_cut = -1;
        for (int c = 1; c < nsteps; c++) {
            if (!starts[c])
                continue;
            int at = 0, k = 0;
            for (; at < ncuts && cuts[at] < c; at++)
                trial[k++] = cuts[at];
            if (at < ncuts && cuts[at] == c)
                continue;
            trial[k++] = c;
            for (; at < ncuts; at++)
                trial[k++] = cuts[at];
            int64_t peak = estimated_peak(nbufs, nbytes, first, last, in_arena, nsteps, outside,
                                          trial, k, held, diff);
            if (peak < best)
                best = peak, best_cut = c;
        }
        if (best_cut < 0)
            break;
        int at = ncuts++;
        for (; at > 0 && cuts[at - 1] > best_cut; at--)
            cuts[at] = cuts[at - 1];
        cuts[at] = best_cut;
    }
    free(held);
    free(diff);
    free(starts);
    return ncuts;
}

int ptc_mplan_segment(int nbufs, const int64_t *nbytes, const int *first, const int *last,
                      const bool *in_arena, int nsteps, const int64_t *outside, int *seg_of,
                      int64_t *offset, int64_t *seg_bytes)
{
    int cuts[MAX_SEGMENTS] = {0};
    int ncuts =
        nsteps > 1 ? choose_cuts(nbufs, nbytes, first, last, in_arena, nsteps, outside, cuts) : 0;
    int seg_first[MAX_SEGMENTS], seg_last[MAX_SEGMENTS];
    int64_t one = ptc_mplan_place(nbufs, nbytes, first, last, in_arena, offset);
    int64_t one_peak = segments_peak(nsteps, outside, 1, (int[]){0}, (int[]){nsteps}, &one);
    if (ncuts > 0) {
        int64_t *at = malloc(sizeof *at * ((size_t)nbufs + 1));
        int *of = malloc(sizeof *of * ((size_t)nbufs + 1));
        PTC_ASSERT(at && of);
        assign_segments(nbufs, first, in_arena, cuts, ncuts, of);
        ptc_mplan_place_segments(nbufs, nbytes, first, last, in_arena, ncuts + 1, of, at,
                                 seg_bytes);
        ptc_mplan_segment_spans(nbufs, first, last, in_arena, ncuts + 1, of, seg_first, seg_last);
        bool better =
            segments_peak(nsteps, outside, ncuts + 1, seg_first, seg_last, seg_bytes) < one_peak;
        if (better) {
            memcpy(offset, at, sizeof *at * (size_t)nbufs);
            memcpy(seg_of, of, sizeof *of * (size_t)nbufs);
        }
        free(at);
        free(of);
        if (better)
            return ncuts + 1;
    }
    for (int b = 0; b < nbufs; b++)
        seg_of[b] = 0;
    seg_bytes[0] = one;
    return 1;
}
