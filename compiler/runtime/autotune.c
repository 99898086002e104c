/* max-autotune: each kernel's launch configuration searched by timing.
 *
 * A program compiled with opts->autotune tunes each kernel at its first run,
 * on that run's own buffers and sizes: every candidate configuration runs the
 * kernel (a kernel reads no buffer it writes -- the memory plan keeps a
 * step's inputs and outputs apart, and no kernel accumulates with atomics --
 * so running it again gives the same result) a few times, and the fastest of
 * each candidate's best times wins. The winner is stored in the disk cache
 * under the kernel's cache key, what is tuned, and the run's sizes (to the
 * power of two), so a warm start reads it and times nothing. The program's
 * tuning stops at its budget (opts->autotune_budget_ms,
 * PTC_AUTOTUNE_BUDGET_MS), checked before each timed run, so it is overrun
 * by one run at most: a kernel whose search the budget cut short keeps the
 * best so far and is not cached.
 *
 * What is searched is the executor's (exec.c, cuda_exec.c): on the CPU the
 * parallel split of the outer range (the calling thread, or a team with 1,
 * 4 or 16 chunks per thread, or half the team); on CUDA the kernel's planned
 * forms (block and team sizes, plan.c) and its vectorised entry. A CPU
 * kernel's code form (vector width, reduction unroll: ptc_cpu_code) is
 * tuned first, as its own stage: each candidate form is compiled when it
 * is first timed (its compile counts against the budget; the object goes
 * to the disk cache like any kernel's), and the winner's code runs the
 * kernel from then on; its split is tuned after, on that code. A CPU float
 * matmul extern is tuned the same way, in slots after the kernels': torch's
 * mm against ptc's own GEMM, on the call's operands, keyed by the op and
 * their dtypes, sizes and strides.
 */
#include "runtime/rt.h"

#include "lower/lower.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { REPS = 3 };

static ptc_autotune_counts counts;
static pthread_mutex_t counts_lock = PTHREAD_MUTEX_INITIALIZER;

void ptc_autotune_get_counts(ptc_autotune_counts *out)
{
    pthread_mutex_lock(&counts_lock);
    *out = counts;
    pthread_mutex_unlock(&counts_lock);
}

static void count(int tuned, int cached, int cut, int timed, double ms, double slowest_run)
{
    pthread_mutex_lock(&counts_lock);
    counts.tuned += tuned;
    counts.cache_hits += cached;
    counts.budget_cut += cut;
    counts.candidates_timed += timed;
    counts.ms += ms;
    if (slowest_run > counts.slowest_run_ms)
        counts.slowest_run_ms = slowest_run;
    pthread_mutex_unlock(&counts_lock);
}

double ptc_autotune_default_budget_ms(void)
{
    const char *env = getenv("PTC_AUTOTUNE_BUDGET_MS");
    double v = env && *env ? atof(env) : 0;
    return v > 0 ? v : 2000;
}

int ptc_autotune_log2(int64_t n)
{
    int b = 0;
    while (n > 1) {
        n >>= 1;
        b++;
    }
    return b;
}

static bool cached_choice(const ptc_buf *key, ptc_tune_choice *out)
{
    uint8_t *obj = NULL;
    size_t len = 0;
    if (!ptc_cache_load(key->data, key->len, &obj, &len))
        return false;
    char text[64];
    snprintf(text, sizeof text, "%.*s", (int)(len < 63 ? len : 63), (const char *)obj);
    free(obj);
    return sscanf(text, "choice %d %d", &out->a, &out->b) == 2;
}

/* A kernel's state and choice of one stage. */
static int slot(int ki, int stage)
{
    return ki * PTC_TUNE_STAGES + stage;
}

/* Claims a slot's tuning: true for the one caller that tunes it. */
static bool claim(ptc_program *p, int at)
{
    uint8_t idle = 0;
    return __atomic_compare_exchange_n(&p->tune->state[at], &idle, 1, false, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE);
}

static void settle(ptc_program *p, int at, const ptc_tune_choice *c)
{
    p->tune->choice[at] = *c;
    __atomic_store_n(&p->tune->state[at], 2, __ATOMIC_RELEASE);
}

bool ptc_autotune_tuned_stage(const ptc_program *p, int ki, int stage, ptc_tune_choice *out)
{
    int at = slot(ki, stage);
    if (!p->tune || __atomic_load_n(&p->tune->state[at], __ATOMIC_ACQUIRE) != 2)
        return false;
    *out = p->tune->choice[at];
    return true;
}

bool ptc_autotune_tuned(const ptc_program *p, int ki, ptc_tune_choice *out)
{
    return ptc_autotune_tuned_stage(p, ki, PTC_TUNE_LAUNCH, out);
}

/* Times the candidates within the budget; the fastest goes to *out. */
static void search(ptc_program *p, const char *label, const ptc_tune_target *t,
                   ptc_tune_choice *out, bool *cut)
{
    double t0 = ptc_now_ms(), best = -1, first = -1, slowest = 0;
    int timed = 0;
    *cut = false;
    for (int c = 0; c < t->n && !*cut; c++) {
        double fastest = -1;
        for (int rep = 0; rep < REPS; rep++) {
            /* before every run but the call's own (the first) */
            if ((c > 0 || rep > 0) && ptc_now_ms() - t0 + p->tune->spent_ms >= p->tune->budget_ms) {
                *cut = true;
                break;
            }
            double ms = t->time(t->ctx, &t->cands[c]);
            if (ms < 0) {
                *cut = true;
                fastest = -1;
                break;
            }
            fastest = fastest < 0 || ms < fastest ? ms : fastest;
            slowest = ms > slowest ? ms : slowest;
        }
        if (fastest < 0)
            break;
        timed++;
        first = c == 0 ? fastest : first;
        if (best < 0 || fastest < best) {
            best = fastest;
            *out = t->cands[c];
        }
    }
    double spent = ptc_now_ms() - t0;
    p->tune->spent_ms += spent; /* racy between concurrent runs: a budget, not a meter */
    ptc_log(PTC_LOG_PERF, PTC_LOG_INFO,
            "autotune %s (%s): %d of %d candidates in %.1f ms, best (%d, %d) at %.4f "
            "ms, the default (%d, %d) at %.4f ms%s",
            label, t->what, timed, t->n, spent, out->a, out->b, best, t->cands[0].a, t->cands[0].b,
            first, *cut ? ", cut short by the budget" : "");
    count(1, 0, *cut, timed, spent, slowest);
}

/* Slot `at`'s choice once a run has settled it: every later call takes
 * this path, before any key or label is formatted. */
static bool settled(const ptc_program *p, int at, ptc_tune_choice *out)
{
    if (__atomic_load_n(&p->tune->state[at], __ATOMIC_ACQUIRE) != 2)
        return false;
    *out = p->tune->choice[at];
    return true;
}

/* Tuning happens at a slot's first run, on its sizes: a first run with one
 * candidate settles the slot at it, or every later call would format the
 * key and look again. */
static bool only_choice(ptc_program *p, int at, const ptc_tune_target *t, ptc_tune_choice *out)
{
    if (t->n >= 2)
        return false;
    *out = t->cands[0];
    if (claim(p, at)) {
        settle(p, at, out);
        pthread_mutex_lock(&counts_lock);
        counts.only_choice++;
        pthread_mutex_unlock(&counts_lock);
    }
    return true;
}

static int extern_slot(const ptc_program *p, const ptc_lnode *n)
{
    return p->sched->nkernels * PTC_TUNE_STAGES + n->id;
}

/* The configuration of slot `at` (its key: what identifies the code and
 * sizes timed): as ptc_autotune_pick says. */
static bool pick(ptc_program *p, int at, const ptc_buf *key, const char *label,
                 const ptc_tune_target *t, ptc_tune_choice *out)
{
    *out = t->cands[0];
    if (!claim(p, at)) /* another run is tuning it */
        return false;
    bool ran = false, cut = false;
    if (cached_choice(key, out)) {
        count(0, 1, 0, 0, 0, 0);
    } else {
        search(p, label, t, out, &cut);
        ran = true;
        if (!cut) {
            char text[64];
            int len = snprintf(text, sizeof text, "choice %d %d\n", out->a, out->b);
            ptc_cache_store(key->data, key->len, (const uint8_t *)text, (size_t)len);
        }
    }
    settle(p, at, out);
    return ran;
}

bool ptc_autotune_pick(ptc_program *p, int ki, const ptc_tune_target *t, ptc_tune_choice *out)
{
    if (!p->tune) {
        *out = t->cands[0];
        return false;
    }
    int at = slot(ki, t->stage);
    if (settled(p, at, out) || only_choice(p, at, t, out))
        return false;
    const ptc_kernel *k = p->sched->kernels[ki];
    ptc_buf key = {0};
    ptc_buf_printf(&key, "autotune v1 %s\n", t->what);
    ptc_kernel_print_key(&key, p->sched, k);
    ptc_buf_printf(&key, "\n%s\n", t->sizes);
    char label[160];
    snprintf(label, sizeof label, "kernel %d %s", k->id, k->name);
    bool ran = pick(p, at, &key, label, t, out);
    ptc_buf_free(&key);
    return ran;
}

/* An extern's slots follow the kernels': one per loop node. Its key is the
 * op with its inputs' dtypes, sizes and strides (t->sizes): the code behind
 * an extern (torch's, ptc's GEMM) is not ptc's to print. */
bool ptc_autotune_pick_extern(ptc_program *p, const ptc_lnode *n, const ptc_tune_target *t,
                              ptc_tune_choice *out)
{
    if (!p->tune) {
        *out = t->cands[0];
        return false;
    }
    int at = extern_slot(p, n);
    if (settled(p, at, out) || only_choice(p, at, t, out))
        return false;
    ptc_buf key = {0};
    ptc_buf_printf(&key, "autotune v1 %s\n%s\n%s\n", t->what, ptc_op_name(n->xnode->op), t->sizes);
    char label[256];
    snprintf(label, sizeof label, "extern %s %.200s", ptc_op_name(n->xnode->op), t->sizes);
    bool ran = pick(p, at, &key, label, t, out);
    ptc_buf_free(&key);
    return ran;
}

bool ptc_autotune_extern_settled(const ptc_program *p, const ptc_lnode *n, ptc_tune_choice *out)
{
    return p->tune && settled(p, extern_slot(p, n), out);
}

int ptc_autotune_prepare(ptc_program *p, double budget_ms)
{
    int nk = p->sched->nkernels;
    p->tune = calloc(1, sizeof *p->tune);
    if (!p->tune)
        return -1;
    p->tune->budget_ms = budget_ms > 0 ? budget_ms : ptc_autotune_default_budget_ms();
    size_t slots = (size_t)nk * PTC_TUNE_STAGES + (size_t)p->prog->nnodes + 1;
    p->tune->state = calloc(slots, sizeof *p->tune->state);
    p->tune->choice = calloc(slots, sizeof *p->tune->choice);
    p->tune->code = calloc((size_t)nk + 1, sizeof *p->tune->code);
    return p->tune->state && p->tune->choice && p->tune->code ? 0 : -1;
}

void ptc_autotune_free(ptc_program *p)
{
    if (!p->tune)
        return;
    for (int k = 0; p->tune->code && k < p->sched->nkernels; k++)
        if (p->tune->code[k].fn)
            ptc_cpu_kernel_release(&p->tune->code[k]);
    free(p->tune->code);
    free(p->tune->state);
    free(p->tune->choice);
    free(p->tune);
    p->tune = NULL;
}
