/* Horizontal combinations: independent kernels run as one.
 *
 * An optimizer's update over parameters of many sizes schedules as a run of
 * small kernels with no data flowing between them (the scheduler joins only
 * members that share an outer loop nest). Run one by one, each pays its own
 * parallel region, and a small one runs on one thread while the others wait.
 * A combination is a run of consecutive kernel steps in which no member reads
 * or writes a buffer another member writes; the CPU runtime runs it as one
 * OpenMP parallel region that hands out the chunks of every member's outer
 * range (runtime/exec.c), as torch's multi_tensor_apply and Inductor's combo
 * kernels cover many tensors with one launch.
 *
 * Members may touch arena temporaries: the memory plan reuses memory by
 * step, so once the combinations are chosen it counts each one's steps as
 * one (ptc_mplan_merge_combos): every temporary live at any member's step
 * lives through the whole combination, and two buffers its members touch
 * never share bytes (a training backward's kernels work on temporaries
 * only; without this they ran one launch each). Kernels with checks stay
 * alone (their status record is read after each step). A combination holds
 * at most PTC_COMBO_MAX_KERNELS kernels. PTC_COMBO_TEMPORARIES=0 keeps a
 * kernel that touches an arena temporary alone, as before (to compare: a
 * combination's module holds its members' code, so more combinations mean
 * more code to compile cold).
 *
 * On CUDA a combination is one launch whose grid covers every member (the
 * codegen's combo entry finds a block's member in a table of block offsets,
 * as multi_tensor_apply does). Its members are kernels over static sizes,
 * so that the entry takes no size parameters, whose launches the backend
 * says can share a grid (ptc_combo_launch: the threads per block each needs,
 * any for a thread per element; a team kernel's barriers need the whole
 * block); and the buffers of all of them, each once, with the rng offset and cell and
 * one block offset per member, fit a launch's parameter space: a kernel
 * that would pass it, or needs another block size, ends the combination.
 */
#include "lower/lower_int.h"

#include <stdlib.h>
#include <string.h>

/* Does kernel k store to buffer buf? */
static bool kernel_writes(const ptc_schedule *s, const ptc_kernel *k, int buf)
{
    for (int g = 0; g < k->ngroups; g++)
        for (int m = 0; m < k->groups[g].nmembers; m++) {
            const ptc_lnode *n = s->prog->nodes[k->groups[g].members[m].node];
            if (n->out[0] == buf || n->out[1] == buf)
                return true;
        }
    return false;
}

/* Are kernel k's sizes static, as a CUDA combination's members' are? */
static bool launch_member(const ptc_kernel *k)
{
    if (k->nparams > 0)
        return false;
    for (int d = 0; d < k->nouter; d++)
        if (!ptc_dim_is_static(k->outer[d]))
            return false;
    return true;
}

static const ptc_kernel *step_kernel(const ptc_schedule *s, int t)
{
    return s->steps[t].kind == PTC_STEP_KERNEL ? s->kernels[s->steps[t].index] : NULL;
}

/* Can kernel k run beside other kernels at all? */
static bool combinable(const ptc_schedule *s, const ptc_kernel *k)
{
    if (ptc_kernel_has_checks(k) || (s->combos_launch && !launch_member(k)))
        return false;
    for (int i = 0; !s->combos_arena && i < k->nargs; i++)
        if (s->plan.in_arena[k->args[i]])
            return false;
    return true;
}

/* Does every arena buffer of combination c live through all its steps (the
 * plan merged them: ptc_mplan_merge_combos)? */
static bool planned_as_one_step(const ptc_schedule *s, const ptc_combo *c)
{
    const ptc_mplan *mp = &s->plan;
    for (int t = c->first; t < c->first + c->n; t++) {
        const ptc_kernel *k = step_kernel(s, t);
        for (int i = 0; i < k->nargs; i++) {
            int b = k->args[i];
            if (mp->in_arena[b] && (mp->first[b] > c->first || mp->last[b] < c->first + c->n - 1))
                return false;
        }
    }
    return true;
}

/* No buffer that one of kernels a, b writes is touched by the other. Every
 * buffer a kernel loads or stores is among its arguments (or its locals,
 * which no other kernel sees). */
static bool independent(const ptc_schedule *s, const ptc_kernel *a, const ptc_kernel *b)
{
    for (int i = 0; i < a->nargs; i++)
        for (int j = 0; j < b->nargs; j++)
            if (a->args[i] == b->args[j] &&
                (kernel_writes(s, a, a->args[i]) || kernel_writes(s, b, b->args[j])))
                return false;
    return true;
}

int ptc_combo_args(const ptc_schedule *s, const ptc_combo *c, int *args)
{
    int n = 0;
    for (int t = c->first; t < c->first + c->n; t++) {
        const ptc_kernel *k = step_kernel(s, t);
        for (int i = 0; i < k->nargs; i++) {
            bool seen = false;
            for (int j = 0; j < n && !seen; j++)
                seen = args[j] == k->args[i];
            if (!seen)
                args[n++] = k->args[i];
        }
    }
    return n;
}

/* The parameter slots of combination c's CUDA launch: its buffers, the rng
 * offset and a block offset per member (codegen/cuda's combo entry). */
static int launch_slots(const ptc_schedule *s, const ptc_combo *c)
{
    int most = 0;
    for (int t = c->first; t < c->first + c->n; t++)
        most += step_kernel(s, t)->nargs;
    int *args = malloc(sizeof *args * (size_t)(most + 1));
    int slots = ptc_combo_args(s, c, args) + 2 + c->n; /* + rng offset and cell */
    free(args);
    return slots;
}

/* The smallest seed of the draws of the kernels of steps first..first+n-1
 * (0: none draws). */
static int64_t seed_base(const ptc_schedule *s, int first, int n)
{
    int64_t base = 0;
    bool any = false;
    for (int t = first; t < first + n; t++) {
        const ptc_kernel *k = step_kernel(s, t);
        if (k->draws && (!any || k->seed_base < base))
            base = k->seed_base, any = true;
    }
    return base;
}

/* A combining pass: per kernel, the block its launch needs (CUDA), or 0. */
typedef struct combiner {
    const ptc_schedule *s;
    int *block; /* ptc_combo_launch.block's, or NULL (the CPU) */
} combiner;

static int block_of(const combiner *cb, int t)
{
    return cb->block ? cb->block[cb->s->steps[t].index] : 0;
}

static bool starts(const combiner *cb, int t)
{
    const ptc_kernel *k = step_kernel(cb->s, t);
    return k && combinable(cb->s, k) && block_of(cb, t) >= 0;
}

/* May step t join the combination of steps first..t-1? */
static bool joins(const combiner *cb, int first, int t)
{
    const ptc_schedule *s = cb->s;
    const ptc_kernel *k = step_kernel(s, t);
    if (!starts(cb, t) || t - first >= PTC_COMBO_MAX_KERNELS)
        return false;
    for (int u = first; u < t; u++)
        if (!independent(s, step_kernel(s, u), k) ||
            (block_of(cb, u) && block_of(cb, t) && block_of(cb, u) != block_of(cb, t)))
            return false;
    ptc_combo grown = {first, t - first + 1};
    return !s->combos_launch || launch_slots(s, &grown) <= PTC_LAUNCH_PARAM_SLOTS;
}

int ptc_schedule_combine(ptc_schedule *s, const ptc_combo_launch *launch, bool arena)
{
    ptc_arena *a = s->prog->arena;
    s->ncombos = 0;
    s->combos_launch = launch != NULL;
    s->combos_arena = arena;
    s->combos = PTC_NEWN(a, ptc_combo, s->nsteps / 2 + 1);
    combiner cb = {s, NULL};
    if (launch) {
        cb.block = PTC_NEWN(a, int, s->nkernels + 1);
        for (int k = 0; k < s->nkernels; k++)
            cb.block[k] = launch_member(s->kernels[k])
                              ? launch->block(launch->ctx, s, s->kernels[k])
                              : -1;
    }
    for (int t = 0; t < s->nsteps;) {
        int end = t + 1;
        if (starts(&cb, t))
            while (end < s->nsteps && joins(&cb, t, end))
                end++;
        if (end - t >= 2)
            s->combos[s->ncombos++] = (ptc_combo){t, end - t, seed_base(s, t, end - t)};
        t = end;
    }
    if (s->ncombos)
        ptc_mplan_merge_combos(s);
    return s->ncombos;
}

const ptc_combo *ptc_schedule_combo_at(const ptc_schedule *s, int step)
{
    for (int i = 0; i < s->ncombos; i++)
        if (s->combos[i].first == step)
            return &s->combos[i];
    return NULL;
}

int ptc_combo_verify(const ptc_schedule *s, ptc_error *err)
{
    int end = 0;
    for (int i = 0; i < s->ncombos; i++) {
        const ptc_combo *c = &s->combos[i];
        bool ok = c->first >= end && c->n >= 2 && c->n <= PTC_COMBO_MAX_KERNELS &&
                  c->first + c->n <= s->nsteps;
        for (int t = c->first; ok && t < c->first + c->n; t++) {
            ok = step_kernel(s, t) && combinable(s, step_kernel(s, t));
            for (int u = c->first; ok && u < t; u++)
                ok = independent(s, step_kernel(s, u), step_kernel(s, t));
        }
        ok = ok && planned_as_one_step(s, c);
        if (ok && s->combos_launch && launch_slots(s, c) > PTC_LAUNCH_PARAM_SLOTS)
            return ptc_errorf(err, PTC_ERR_INTERNAL, "kernels",
                              "combination %d (steps %d..%d) takes %d launch parameters, more "
                              "than %d",
                              i, c->first, c->first + c->n - 1, launch_slots(s, c),
                              PTC_LAUNCH_PARAM_SLOTS);
        if (!ok)
            return ptc_errorf(err, PTC_ERR_INTERNAL, "kernels",
                              "combination %d (steps %d..%d): members are not independent "
                              "kernels whose arena buffers live through it%s",
                              i, c->first, c->first + c->n - 1,
                              s->combos_launch ? " (flat, over static sizes)" : "");
        end = c->first + c->n;
    }
    return 0;
}

void ptc_combo_print(ptc_buf *b, const ptc_schedule *s, const ptc_combo *c)
{
    int i = (int)(c - s->combos);
    ptc_buf_printf(b, "combo %d: %d kernels, %s:", i, c->n,
                   s->combos_launch ? "one launch" : "one parallel region");
    for (int t = c->first; t < c->first + c->n; t++)
        ptc_buf_printf(b, " %d", s->steps[t].index);
    ptc_buf_putc(b, '\n');
}
