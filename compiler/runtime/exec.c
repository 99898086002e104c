/* Running a compiled CPU program.
 *
 * A run binds the symbols of the input sizes, makes every input match the
 * layout its type promised (a copy only when the caller's strides differ),
 * allocates the outputs (through the host when there is one, so they belong
 * to the user) and the arena of temporaries (planned at compile time, or for
 * the run's sizes when they are symbolic: ptc_exec_arena_layout), then runs
 * the steps in order. Kernels get the run's sizes as parameters; the kernels
 * of a horizontal combination (lower/combo.c) share one parallel region.
 * A kernel's parallel range is split into one contiguous chunk per OpenMP
 * thread; small kernels run on the calling thread, because waking a team
 * costs more than they do. Externs go to the host's kernels when it has them
 * and to ptc's C ones otherwise.
 */
#include "runtime/rt.h"

#include "lower/lower.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* The arena's alignment: a cache line on x86-64, which is also the
 * alignment of the widest vector type (AVX-512's 64 bytes). */
enum { ARENA_ALIGN = 64 };

/* Readable zeros for buffers without elements (masked loads may touch
 * element 0 of any buffer they read). */
static _Alignas(ARENA_ALIGN) const uint8_t empty_buffer[ARENA_ALIGN];

/* Below this many element-iterations a kernel runs on the calling thread:
 * waking a team costs tens of microseconds on an idle machine and a
 * scheduling quantum on a busy one. */
enum { SERIAL_WORK = 1 << 18, CHUNKS_PER_THREAD = 8 };

typedef struct run {
    ptc_program *p;
    const ptc_host *host;
    ptc_bindings b;
    void **bufptr;        /* per loop buffer */
    const ptc_tensor *inputs; /* the call's */
    ptc_tensor *conformed; /* inputs copied to their typed layout */
    ptc_tensor *outs;     /* per graph output */
    int outputs_made;     /* ptc_mplan.output_order: the outputs allocated so far */
    void *mem;            /* the arena (one segment) */
    bool mem_owned;
    ptc_exec_layout segmented; /* its segments where it has several (nsegs > 1) */
    ptc_tensor *segs;          /* per segment, from the host, while held */
    int segs_made;             /* the segments allocated so far */
    uint64_t rng_offset;
    ptc_check_status status; /* what the kernels' checks report (lower.h) */
    ptc_exec_kept kept;      /* extern results whose memory serves as buffers */
    ptc_error *err;
} run;

static int64_t eval(run *r, ptc_dim d)
{
    return ptc_exec_dim(&r->b, d);
}

/* ---- inputs ---------------------------------------------------------------------- */

static int bind_inputs(run *r, const ptc_tensor *in)
{
    ptc_program *p = r->p;
    if (ptc_exec_check_inputs(p, in, &r->b, r->err))
        return -1;
    for (int i = 0; i < p->ninputs; i++) {
        const ptc_tensor *t = &in[i];
        if (t->device.kind != PTC_DEV_CPU)
            return ptc_errorf(r->err, PTC_ERR_RUNTIME, "runtime",
                              "input '%s' is not on the cpu", p->in_names[i]);
        int64_t want[PTC_MAX_DIMS];
        ptc_exec_typed_strides(&r->b, &p->in_types[i], want);
        if (ptc_tensor_conform(&in[i], want, &r->conformed[i], p->in_names[i], r->err))
            return -1;
    }
    return 0;
}

/* ---- outputs and the arena --------------------------------------------------------- */

static int own_alloc(void *ctx, ptc_tensor *t, ptc_dtype dt, int ndim, const int64_t *sizes,
                     ptc_error *err)
{
    (void)ctx;
    return ptc_tensor_alloc(t, dt, ndim, sizes, err);
}

/* The outputs step t (or one before it) writes, not allocated yet. */
static int alloc_outputs(run *r, int t)
{
    ptc_exec_alloc a = {.b = &r->b,
                        .host = r->host,
                        .device = PTC_CPU,
                        .own = own_alloc,
                        .empty = (void *)empty_buffer,
                        .inputs = r->inputs,
                        .conformed = r->conformed,
                        .extern_results_are_outputs = r->kept.outs != NULL};
    return ptc_exec_alloc_outputs(r->p, &a, t, &r->outputs_made, r->outs, r->bufptr, r->err);
}

/* The program's cached arena, grown to size bytes, unless another run holds
 * it (NULL then); held until give_back_arena. */
static void *take_cached_arena(ptc_program *p, size_t size)
{
    void *mem = NULL;
    pthread_mutex_lock(&p->lock);
    if (!p->mem_busy) {
        if (p->mem_size < size) {
            free(p->mem);
            p->mem = size ? aligned_alloc(ARENA_ALIGN, size) : NULL;
            p->mem_size = p->mem ? size : 0;
        }
        p->mem_busy = true;
        mem = p->mem;
    }
    pthread_mutex_unlock(&p->lock);
    return mem;
}

static void give_back_arena(ptc_program *p, const void *mem)
{
    pthread_mutex_lock(&p->lock);
    if (mem == p->mem)
        p->mem_busy = false;
    pthread_mutex_unlock(&p->lock);
}

static int plan_arena(run *r)
{
    ptc_program *p = r->p;
    ptc_exec_layout l;
    /* under max-autotune a float matmul may run through ptc's GEMM instead,
       writing its buffer (both are timed at its first run): every buffer
       keeps its room */
    const ptc_host *keeps = p->tune ? NULL : r->host;
    bool segmented = !p->tune && ptc_exec_segments_on(r->host, PTC_CPU);
    if (ptc_exec_arena_layout(p, &r->b, keeps, PTC_CPU, r->kept.outs != NULL, segmented, &l,
                              r->err))
        return -1;
    if (l.nsegs > 1) { /* allocated step by step: alloc_segments */
        ptc_exec_point_arena(p, &l, 0, empty_buffer, r->bufptr);
        r->segmented = l;
        r->segs = calloc((size_t)l.nsegs, sizeof *r->segs);
        PTC_ASSERT(r->segs);
        return 0;
    }
    int64_t size = l.size;
    int rc = 0;
    r->mem = take_cached_arena(p, (size_t)size);
    if (!r->mem && size) {
        r->mem = aligned_alloc(ARENA_ALIGN, (size_t)size);
        r->mem_owned = true;
    }
    if (size && !r->mem)
        rc = ptc_errorf(r->err, PTC_ERR_RUNTIME, "runtime", "out of memory (arena of %lld bytes)",
                        (long long)size);
    if (rc == 0)
        ptc_exec_point_arena(p, &l, (uintptr_t)r->mem, empty_buffer, r->bufptr);
    ptc_exec_layout_free(&l);
    return rc;
}

/* The arena's segments step t (or one before it) writes, not allocated yet. */
static int alloc_segments(run *r, int t)
{
    if (!r->segs)
        return 0;
    return ptc_exec_segments_alloc(r->p, &r->segmented, r->host, PTC_CPU, t, &r->segs_made, r->segs,
                                   r->bufptr, r->err);
}

/* ---- steps ----------------------------------------------------------------------------- */

/* PTC_INJECT=runtime:<op>:wrong: the buffers a step wrote are made wrong. */
static void perturb_buffer(run *r, int bufid)
{
    const ptc_lbuf *b = r->p->prog->bufs[bufid];
    if (r->p->sched->is_local[bufid] || !r->bufptr[bufid])
        return;
    int64_t sizes[PTC_MAX_DIMS];
    for (int d = 0; d < b->ndim; d++)
        sizes[d] = eval(r, b->shape[d]);
    ptc_tensor t = ptc_tensor_borrow(r->bufptr[bufid], b->dtype, b->ndim, sizes, NULL);
    if (ptc_tensor_numel(&t) > 0)
        ptc_inject_perturb(&t);
}

static void perturb_outputs(run *r, const ptc_lnode *n)
{
    for (int o = 0; o < 2; o++)
        if (n->out[o] >= 0)
            perturb_buffer(r, n->out[o]);
}

static int run_kernel_code(run *r, const ptc_kernel *k, const ptc_cpu_kernel *ck);

/* A kernel, with PTC_INJECT's runtime stage around it. */
static int run_kernel(run *r, const ptc_kernel *k, const ptc_cpu_kernel *ck)
{
    ptc_inject_kind ik = ptc_kernel_inject(r->p->sched, k, "runtime", r->err);
    if (ik == PTC_INJECT_ERROR || run_kernel_code(r, k, ck))
        return -1;
    for (int g = 0; ik == PTC_INJECT_WRONG && g < k->ngroups; g++)
        for (int m = 0; m < k->groups[g].nmembers; m++)
            perturb_outputs(r, r->p->prog->nodes[k->groups[g].members[m].node]);
    return 0;
}

/* The split of P outer iterations (work element-iterations in all) that
 * tuning did not choose. */
static ptc_tune_choice default_split(int64_t P, int64_t work, int nt)
{
    if (nt <= 1 || P <= 1 || work < SERIAL_WORK)
        return (ptc_tune_choice){1, 1};
    if (nt > P)
        nt = (int)P;
    /* A few chunks per thread, handed out in order: on a shared machine a thread that
     * loses its core for a while leaves its remaining chunks to the others instead of
     * holding the whole kernel up. Chunks stay large enough to amortise the hand-out. */
    int64_t nchunk = (int64_t)nt * CHUNKS_PER_THREAD, most = work / (SERIAL_WORK / 4);
    if (nchunk > most)
        nchunk = most > nt ? most : nt;
    if (nchunk > P)
        nchunk = P;
    return (ptc_tune_choice){nt, (int)nchunk};
}

typedef struct split_call {
    const ptc_cpu_kernel *ck;
    int64_t P;
    void **bufs;
    int64_t *params;
} split_call;

/* Chunk i of a table of kernel calls: call m (prefix[m] <= i < prefix[m + 1])
 * and its share of that call's outer range. */
static void run_chunk(const split_call *calls, const int64_t *prefix, int n, int64_t i)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) { /* the last call whose chunks start at or before i */
        int mid = (lo + hi + 1) / 2;
        if (prefix[mid] <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    const split_call *c = &calls[lo];
    int64_t nchunk = prefix[lo + 1] - prefix[lo], j = i - prefix[lo];
    int64_t from = c->P * j / nchunk, to = c->P * (j + 1) / nchunk;
    if (from < to)
        c->ck->fn(from, to, c->bufs, c->params);
}

/* The prefix[n] chunks of n calls, handed out in order to nt threads (the
 * calling thread alone when nt <= 1). */
static void run_chunks(const split_call *calls, const int64_t *prefix, int n, int nt)
{
    int64_t nchunk = prefix[n], next = 0;
    if (nt <= 1 || nchunk < 2) {
        for (int64_t i = 0; i < nchunk; i++)
            run_chunk(calls, prefix, n, i);
        return;
    }
#pragma omp parallel num_threads(nt) shared(next)
    for (;;) {
        int64_t i;
#pragma omp atomic capture
        i = next++;
        if (i >= nchunk)
            break;
        run_chunk(calls, prefix, n, i);
    }
}

/* Runs a kernel's P outer iterations on split.a threads in split.b chunks. */
static void run_split(const split_call *c, const ptc_tune_choice *split)
{
    int64_t P = c->P;
    if (split->a <= 1) {
        c->ck->fn(0, P, c->bufs, c->params);
        return;
    }
    int nt = split->a > P ? (int)P : split->a;
    int64_t nchunk = split->b < nt ? nt : split->b;
    int64_t prefix[2] = {0, nchunk > P ? P : nchunk};
    run_chunks(c, prefix, 1, nt);
}

static double time_split(void *ctx, const ptc_tune_choice *split)
{
    double t0 = ptc_now_ms();
    run_split(ctx, split);
    return ptc_now_ms() - t0;
}

/* max-autotune's candidates for a kernel: the default split, the calling
 * thread, the team with 1, 4 or 16 chunks per thread, half the team. */
static int split_candidates(ptc_tune_choice dflt, int nt, int64_t P, ptc_tune_choice *c)
{
    int half = nt / 2, n = 0;
    ptc_tune_choice all[] = {dflt, {1, 1}, {nt, nt}, {nt, 4 * nt}, {nt, 16 * nt}, {half, 4 * half}};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        bool usable = all[i].a >= 1 && all[i].a <= P && all[i].b <= P;
        for (int j = 0; j < n && usable; j++)
            usable = c[j].a != all[i].a || c[j].b != all[i].b;
        if (usable)
            c[n++] = all[i];
    }
    return n;
}

/* Runs the kernel in its tuned split, tuning it first when it has none. */
static void run_tuned(run *r, int ki, const split_call *call, int64_t work, int nt,
                      ptc_tune_choice dflt)
{
    ptc_tune_choice cands[8], used;
    ptc_tune_target t = {
        .what = "cpu split", .cands = cands, .time = time_split, .ctx = (void *)call};
    t.n = split_candidates(dflt, nt, call->P, cands);
    snprintf(t.sizes, sizeof t.sizes, "outer 2^%d work 2^%d threads %d", ptc_autotune_log2(call->P),
             ptc_autotune_log2(work), nt);
    if (!ptc_autotune_pick(r->p, ki, &t, &used))
        run_split(call, &used);
}

/* ---- max-autotune's code forms ----------------------------------------------------- */

enum { MAX_FORMS = 6 };

typedef struct form_call {
    const ptc_program *p;
    int ki;
    split_call call; /* the kernel's run, its code swapped per form */
    ptc_tune_choice split;
    ptc_tune_choice forms[MAX_FORMS];
    int nforms;
    ptc_cpu_kernel built[MAX_FORMS]; /* [0]: the program's; the others compiled together
                                      * when the first of them is timed */
} form_call;

static ptc_cpu_code form_code(const ptc_tune_choice *c)
{
    return (ptc_cpu_code){.lanes = c->a, .unroll = c->b};
}

static bool has_reduction(const ptc_kernel *k)
{
    for (int g = 0; g < k->ngroups; g++)
        if (k->groups[g].nred > 0)
            return true;
    return false;
}

/* The default form, half and twice the host's vector width, and for a
 * kernel with reductions one and two accumulator sets. */
static int form_candidates(const ptc_kernel *k, ptc_tune_choice *c)
{
    int lanes = ptc_cpu_lanes(), n = 0;
    c[n++] = (ptc_tune_choice){0, PTC_UNROLL_AUTO};
    if (lanes >= 2)
        c[n++] = (ptc_tune_choice){lanes / 2, PTC_UNROLL_AUTO};
    c[n++] = (ptc_tune_choice){lanes * 2, PTC_UNROLL_AUTO};
    if (has_reduction(k)) {
        c[n++] = (ptc_tune_choice){0, PTC_UNROLL_OFF};
        c[n++] = (ptc_tune_choice){0, PTC_UNROLL_ON};
    }
    return n;
}

/* Compiles every form but the program's own, in parallel. */
static int build_forms(form_call *f)
{
    ptc_cpu_code codes[MAX_FORMS];
    for (int i = 1; i < f->nforms; i++)
        codes[i - 1] = form_code(&f->forms[i]);
    ptc_error err;
    if (ptc_cpu_compile_forms(f->p->sched, f->ki, codes, f->nforms - 1, &f->built[1], &err) == 0)
        return 0;
    ptc_log(PTC_LOG_PERF, PTC_LOG_INFO, "autotune: the code forms of kernel %d: %s", f->ki,
            err.msg);
    return -1;
}

/* Times one form; the first timing of another form than the program's
 * compiles them all (the budget counts that). */
static double time_form(void *ctx, const ptc_tune_choice *form)
{
    form_call *f = ctx;
    int i = (int)(form - f->forms);
    double t0 = ptc_now_ms();
    if (!f->built[i].fn && build_forms(f) < 0)
        return -1;
    split_call call = f->call;
    call.ck = &f->built[i];
    run_split(&call, &f->split);
    return ptc_now_ms() - t0;
}

/* Keeps the winning form's code for the program (compiled now when the
 * choice came from the disk cache) and releases the other forms. The
 * program's own code won when the winner cannot be compiled. */
static void keep_form(ptc_autotune *tune, form_call *f, ptc_tune_choice won,
                      const ptc_cpu_kernel **code)
{
    int wi = -1;
    for (int i = 1; i < f->nforms; i++)
        if (f->forms[i].a == won.a && f->forms[i].b == won.b)
            wi = i;
    if (wi > 0 && !f->built[wi].fn) {
        ptc_error err;
        ptc_cpu_code c = form_code(&won);
        if (ptc_cpu_compile_forms(f->p->sched, f->ki, &c, 1, &f->built[wi], &err) < 0)
            wi = -1;
    }
    for (int i = 1; i < f->nforms; i++)
        if (f->built[i].fn && i != wi)
            ptc_cpu_kernel_release(&f->built[i]);
    if (wi > 0) {
        ptc_cpu_kernel *kept = &tune->code[f->ki];
        kept->entry = f->built[wi].entry;
        kept->cached = f->built[wi].cached;
        __atomic_store_n(&kept->fn, f->built[wi].fn, __ATOMIC_RELEASE);
        *code = kept;
    }
}

/* The program's code for kernel ki, or the form max-autotune chose for it
 * (tuning it first when it has none). */
static void tuned_form(run *r, int ki, const split_call *call, int64_t work, ptc_tune_choice split,
                       const ptc_cpu_kernel **code)
{
    ptc_autotune *tune = r->p->tune;
    const ptc_cpu_kernel *chosen = &tune->code[ki];
    ptc_tune_choice settled;
    if (__atomic_load_n(&chosen->fn, __ATOMIC_ACQUIRE)) {
        *code = chosen;
        return;
    }
    if (ptc_autotune_tuned_stage(r->p, ki, PTC_TUNE_CODE, &settled))
        return; /* the program's own code won */
    form_call f = {.p = r->p, .ki = ki, .call = *call, .split = split};
    f.built[0] = *call->ck;
    ptc_tune_target t = {
        .what = "cpu code", .stage = PTC_TUNE_CODE, .cands = f.forms, .time = time_form, .ctx = &f};
    t.n = f.nforms = form_candidates(r->p->sched->kernels[ki], f.forms);
    snprintf(t.sizes, sizeof t.sizes, "outer 2^%d work 2^%d threads %d", ptc_autotune_log2(call->P),
             ptc_autotune_log2(work), split.a);
    ptc_tune_choice won;
    ptc_autotune_pick(r->p, ki, &t, &won);
    keep_form(tune, &f, won, code);
}

/* Fills call (its bufs and params arrays given: k->nargs and k->nparams + 2
 * entries) for kernel k's run; returns its work in element-iterations. */
static int64_t bind_call(run *r, const ptc_kernel *k, const ptc_cpu_kernel *ck, split_call *call)
{
    int64_t *pp = call->params;
    pp[0] = (int64_t)ptc_rng_shift(r->rng_offset, k->seed_base);
    for (int i = 0; i < k->nparams; i++)
        pp[1 + i] = eval(r, k->params[i]);
    pp[1 + k->nparams] = (int64_t)(intptr_t)&r->status;
    for (int i = 0; i < k->nargs; i++)
        call->bufs[i] = r->bufptr[k->args[i]];
    int64_t P = 1, work = 1;
    for (int d = 0; d < k->nouter; d++) {
        int64_t e = eval(r, k->outer[d]);
        if (d < k->npar)
            P *= e;
        work *= e;
    }
    int64_t inner = 1;
    for (int g = 0; g < k->ngroups; g++) {
        int64_t w = 1;
        for (int d = 0; d < k->groups[g].ninner; d++)
            w *= eval(r, k->groups[g].inner[d]);
        for (int d = 0; d < k->groups[g].nred; d++)
            w *= eval(r, k->groups[g].red[d]);
        inner = w > inner ? w : inner;
    }
    call->ck = ck;
    call->P = P;
    return work * inner;
}

static int run_kernel_code(run *r, const ptc_kernel *k, const ptc_cpu_kernel *ck)
{
    int64_t params[2 + 64];
    void *bufs_stack[32];
    split_call call = {
        .params = k->nparams < 64 ? params : malloc(sizeof(int64_t) * (size_t)(k->nparams + 2)),
        .bufs = k->nargs <= 32 ? bufs_stack : malloc(sizeof(void *) * (size_t)k->nargs)};
    int64_t work = bind_call(r, k, ck, &call), P = call.P;
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    ptc_tune_choice split = default_split(P, work, nt);
    int ki = (int)(ck - r->p->kernels);
    /* Timing the forms ran the kernel, the last form's code last: it runs
     * again in the winner's (split tuning included), so this call's results
     * are every later call's, bit for bit (the forms sum in other orders). */
    if (P > 0 && r->p->tune)
        tuned_form(r, ki, &call, work, split, &call.ck);
    if (P > 0 && r->p->tune && nt > 1 && P > 1)
        run_tuned(r, ki, &call, work, nt, split);
    else if (P > 0)
        run_split(&call, &split);
    if (call.params != params)
        free(call.params);
    if (call.bufs != bufs_stack)
        free(call.bufs);
    return r->status.code ? ptc_check_fail(&r->status, r->err) : 0;
}

/* ---- horizontal combinations (lower/combo.c) ----------------------------------------- */

/* The kernels of combination c, in one parallel region whose threads take
 * chunks of every member in turn (each chunk a share of one member's outer
 * range, about SERIAL_WORK / 4 element-iterations); on the calling thread,
 * member by member, when all of them together are small. Each element is
 * computed by the same code as in the member's own run: results are equal
 * bit for bit. */
static int run_combo(run *r, const ptc_combo *c)
{
    const ptc_schedule *s = r->p->sched;
    split_call *calls = calloc((size_t)c->n, sizeof *calls);
    int64_t *prefix = calloc((size_t)c->n + 1, sizeof *prefix), total = 0;
    int rc = 0;
    bool wrong[PTC_COMBO_MAX_KERNELS] = {false};
    for (int i = 0; i < c->n && rc == 0; i++) {
        const ptc_step *st = &s->steps[c->first + i];
        const ptc_kernel *k = s->kernels[st->index];
        ptc_inject_kind ik = ptc_kernel_inject(s, k, "runtime", r->err);
        rc = ik == PTC_INJECT_ERROR ? -1 : 0;
        wrong[i] = ik == PTC_INJECT_WRONG;
        calls[i].params = malloc(sizeof(int64_t) * (size_t)(k->nparams + 2));
        calls[i].bufs = malloc(sizeof(void *) * (size_t)(k->nargs + 1));
        int64_t work = bind_call(r, k, &r->p->kernels[st->index], &calls[i]);
        int64_t chunks = calls[i].P > 0 ? work / (SERIAL_WORK / 4) : 0;
        chunks = chunks < 1 ? (calls[i].P > 0) : chunks > calls[i].P ? calls[i].P : chunks;
        prefix[i + 1] = prefix[i] + chunks;
        total += work;
    }
    int nt = omp_in_parallel() || total < SERIAL_WORK ? 1 : omp_get_max_threads();
    if (rc == 0)
        run_chunks(calls, prefix, c->n, nt);
    for (int i = 0; i < c->n; i++) {
        const ptc_kernel *k = s->kernels[s->steps[c->first + i].index];
        for (int g = 0; rc == 0 && wrong[i] && g < k->ngroups; g++)
            for (int m = 0; m < k->groups[g].nmembers; m++)
                perturb_outputs(r, r->p->prog->nodes[k->groups[g].members[m].node]);
        free(calls[i].params);
        free(calls[i].bufs);
    }
    free(calls);
    free(prefix);
    return rc;
}

/* ---- max-autotune's matmul implementations ---------------------------------------- */

/* A CPU matmul's operands, for timing its implementations on them. */
typedef struct mm_call {
    run *r;
    const ptc_node *node;
    const ptc_tensor *const *inp;
    int nin;
    ptc_tensor *outs;
} mm_call;

static int run_matmul_in(const mm_call *m, int impl)
{
    if (impl == PTC_MM_PTC)
        return ptc_cextern_run(m->node, m->inp, m->nin, m->outs, 0, m->r->err);
    return m->r->host->run_extern(m->r->host->ctx, m->node, m->inp, m->nin, m->outs, m->r->err);
}

static double time_matmul(void *ctx, const ptc_tune_choice *c)
{
    double t0 = ptc_now_ms();
    return run_matmul_in(ctx, c->a) ? -1 : ptc_now_ms() - t0;
}

/* Does max-autotune choose what runs extern n? A float matmul on the CPU
 * that torch would run: torch's mm or ptc's GEMM. (f16/bf16 would reach
 * ptc's GEMM through float32 copies: not a contender.) */
static bool tunes_matmul(const run *r, const ptc_lnode *n, const ptc_tensor *const *inp)
{
    int op = n->xnode->op;
    if (!r->p->tune || !ptc_exec_extern_by_host(r->host, n, PTC_CPU) ||
        (op != PTC_OP_MM && op != PTC_OP_BMM && op != PTC_OP_ADDMM))
        return false;
    for (int i = 0; i < n->nxin; i++)
        if (!inp[i] || (inp[i]->dtype != PTC_F32 && inp[i]->dtype != PTC_F64))
            return false;
    return true;
}

/* "f32[64,512:512,1] f32[512,256:256,1] threads 2": what the timing depends
 * on (strides too: a transposed operand packs differently). */
static void matmul_operands(const ptc_tensor *const *inp, int nin, char *out, size_t cap)
{
    size_t len = 0;
    for (int i = 0; i < nin && len < cap; i++) {
        const ptc_tensor *t = inp[i];
        len += (size_t)snprintf(out + len, cap - len, "%s[", ptc_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim && len < cap; d++)
            len += (size_t)snprintf(out + len, cap - len, "%s%lld", d ? "," : "",
                                    (long long)t->sizes[d]);
        for (int d = 0; d < t->ndim && len < cap; d++)
            len += (size_t)snprintf(out + len, cap - len, "%s%lld", d ? "," : ":",
                                    (long long)t->strides[d]);
        if (len < cap)
            len += (size_t)snprintf(out + len, cap - len, "] ");
    }
    if (len < cap)
        snprintf(out + len, cap - len, "threads %d", omp_get_max_threads());
}

/* The implementation of matmul n: at its first run each is timed on the
 * run's operands (writing the output buffer, which the winner then writes
 * again), the winner kept for the program and in the disk cache. */
static int matmul_implementation(run *r, const ptc_lnode *n, const ptc_node *node,
                                 const ptc_tensor *const *inp, ptc_tensor *outs)
{
    static const ptc_tune_choice impls[] = {{PTC_MM_TORCH, 0}, {PTC_MM_PTC, 0}};
    ptc_tune_choice used;
    if (ptc_autotune_extern_settled(r->p, n, &used))
        return used.a;
    mm_call m = {r, node, inp, n->nxin, outs};
    ptc_tune_target t = {.what = "cpu matmul",
                         .stage = PTC_TUNE_LAUNCH,
                         .cands = impls,
                         .n = 2,
                         .time = time_matmul,
                         .ctx = &m};
    matmul_operands(inp, n->nxin, t.sizes, sizeof t.sizes);
    ptc_autotune_pick_extern(r->p, n, &t, &used);
    return used.a;
}

/* ---- externs ---------------------------------------------------------------------- */

static int run_extern_code(run *r, const ptc_lnode *n);

static int run_extern(run *r, const ptc_lnode *n)
{
    ptc_inject_kind ik = ptc_lnode_inject(n, "runtime", r->err);
    if (ik == PTC_INJECT_ERROR || run_extern_code(r, n))
        return -1;
    if (ik == PTC_INJECT_WRONG)
        perturb_outputs(r, n);
    return 0;
}

static int run_extern_code(run *r, const ptc_lnode *n)
{
    ptc_tensor in[16], outs[2] = {{0}};
    const ptc_tensor *inp[16];
    ptc_exec_bound bound;
    const ptc_node *node = ptc_exec_bind_node(n->xnode, &r->b, &bound);
    ptc_exec_extern_args(r->p, &r->b, r->bufptr, n, PTC_CPU, in, inp, outs);
    if (tunes_matmul(r, n, inp) && matmul_implementation(r, n, node, inp, outs) == PTC_MM_PTC)
        return ptc_cextern_run(node, inp, n->nxin, outs, r->rng_offset, r->err);
    int kept = ptc_exec_extern_kept(r->p, &r->b, r->bufptr, r->host, n, node, inp, PTC_CPU,
                                    &r->kept, r->err);
    if (kept <= 0)
        return kept;
    if (ptc_exec_extern_by_host(r->host, n, PTC_CPU))
        return r->host->run_extern(r->host->ctx, node, inp, n->nxin, outs, r->err);
    return ptc_cextern_run(node, inp, n->nxin, outs, r->rng_offset, r->err);
}

/* PTC_LOGS=+perf: one line per step with its run time, what it is and the
 * graph nodes it came from, for finding the hot kernels of a program. */
/* The time of step st, or of the combination of n kernels it ends. */
static void log_step_time(run *r, const ptc_step *st, int n, double ms)
{
    if (n > 1) {
        ptc_log(PTC_LOG_PERF, PTC_LOG_DEBUG, "run %.3f ms combo of %d kernels ending with %s", ms,
                n, r->p->sched->kernels[st->index]->name);
        return;
    }
    if (st->kind == PTC_STEP_EXTERN) {
        const ptc_lnode *n = r->p->prog->nodes[st->index];
        ptc_log(PTC_LOG_PERF, PTC_LOG_DEBUG, "run %.3f ms extern %s", ms,
                ptc_op_name(n->xnode->op));
        return;
    }
    const ptc_kernel *k = r->p->sched->kernels[st->index];
    char outer[128];
    size_t len = 0;
    outer[0] = 0;
    for (int d = 0; d < k->nouter && len < sizeof outer; d++)
        len += (size_t)snprintf(outer + len, sizeof outer - len, "%s%lld", d ? "x" : "",
                                (long long)eval(r, k->outer[d]));
    ptc_log(PTC_LOG_PERF, PTC_LOG_DEBUG, "run %.3f ms kernel %s [%s] from %s", ms, k->name,
            outer, k->nprov ? k->prov[0] : "?");
}

static void finish(run *r, bool ok, ptc_tensor *outputs)
{
    ptc_program *p = r->p;
    for (int i = 0; i < p->ninputs; i++)
        if (r->conformed[i].storage)
            ptc_tensor_release(&r->conformed[i]);
    if (r->mem_owned)
        free(r->mem);
    else if (r->mem || p->mem_busy)
        give_back_arena(p, r->mem);
    for (int i = 0; r->segs && i < r->segmented.nsegs; i++)
        if (r->segs[i].storage || r->segs[i].data)
            ptc_tensor_release(&r->segs[i]);
    free(r->segs);
    if (r->segs)
        ptc_exec_layout_free(&r->segmented);
    ptc_exec_hand_over(p, ok, r->outs, outputs);
    ptc_exec_kept_release(&r->kept);
    free(r->bufptr);
    free(r->conformed);
    free(r->outs);
}

int ptc_exec_cpu(ptc_program *p, const ptc_tensor *inputs, int ninputs, ptc_tensor *outputs,
                 const ptc_host *host, uint64_t rng_offset, ptc_error *err)
{
    (void)ninputs;
    run r = {.p = p, .host = host, .rng_offset = rng_offset, .err = err};
    const ptc_lprog *lp = p->prog;
    r.bufptr = calloc((size_t)lp->nbufs + 1, sizeof *r.bufptr);
    r.inputs = inputs;
    r.conformed = calloc((size_t)p->ninputs + 1, sizeof *r.conformed);
    r.outs = calloc((size_t)p->noutputs + 1, sizeof *r.outs);
    r.kept.outs = r.outs; /* extern results become graph outputs without a copy */
    int rc = bind_inputs(&r, inputs);
    if (rc == 0)
        ptc_exec_point_inputs(p, inputs, r.conformed, empty_buffer, r.bufptr);
    if (rc == 0)
        rc = alloc_outputs(&r, -1);
    if (rc == 0)
        rc = plan_arena(&r);
    const ptc_schedule *s = p->sched;
    bool timed = ptc_log_on(PTC_LOG_PERF, PTC_LOG_DEBUG);
    int inputs_done = 0; /* ptc_mplan.input_order: the inputs let go so far */
    int t = 0;
    for (; rc == 0 && t < s->nsteps; t++) {
        double t0 = timed ? ptc_now_ms() : 0;
        /* max-autotune times each kernel on its own */
        const ptc_combo *combo = p->tune ? NULL : ptc_schedule_combo_at(s, t);
        int last = combo ? t + combo->n - 1 : t;
        rc = alloc_outputs(&r, last);
        if (rc == 0)
            rc = alloc_segments(&r, last);
        if (rc)
            break;
        if (combo)
            rc = run_combo(&r, combo);
        else if (s->steps[t].kind == PTC_STEP_KERNEL)
            rc = run_kernel(&r, s->kernels[s->steps[t].index], &p->kernels[s->steps[t].index]);
        else
            rc = run_extern(&r, lp->nodes[s->steps[t].index]);
        for (; t <= last; t++) {
            ptc_exec_kept_release_after(p, &r.kept, t);
            if (r.segs)
                ptc_exec_segments_release_after(&r.segmented, t, r.segs);
            if (rc == 0)
                ptc_exec_inputs_done_after(p, host, t, &inputs_done);
        }
        t = last;
        if (timed)
            log_step_time(&r, &s->steps[t], combo ? combo->n : 1, ptc_now_ms() - t0);
    }
    if (rc == 0) /* every output is had, whatever the plan says */
        rc = alloc_outputs(&r, s->nsteps);
    if (rc)
        ptc_exec_failed_after(p, t, err);
    finish(&r, rc == 0, outputs);
    return rc;
}

/* ---- readying a program for its first run ------------------------------------------ */

/* What the externs of a program with a static plan ask of the scratch when
 * they run on ptc's C kernels (no host). */
static void externs_scratch(const ptc_program *p, ptc_scratch_need *need)
{
    static char anywhere[ARENA_ALIGN]; /* the views' data, never read */
    void **bufptr = malloc(sizeof *bufptr * ((size_t)p->prog->nbufs + 1));
    PTC_ASSERT(bufptr);
    for (int b = 0; b < p->prog->nbufs; b++)
        bufptr[b] = anywhere;
    const ptc_bindings none = {0};
    for (int t = 0; t < p->sched->nsteps; t++) {
        if (p->sched->steps[t].kind != PTC_STEP_EXTERN)
            continue;
        const ptc_lnode *n = p->prog->nodes[p->sched->steps[t].index];
        ptc_tensor in[16], outs[2];
        const ptc_tensor *inp[16];
        ptc_exec_bound bound;
        const ptc_node *node = ptc_exec_bind_node(n->xnode, &none, &bound);
        ptc_exec_extern_args(p, &none, bufptr, n, PTC_CPU, in, inp, outs);
        ptc_cextern_scratch(node, inp, outs, need);
    }
    free(bufptr);
}

/* A share of memory the team touches: [mem, mem + bytes) split over it. */
typedef struct shared_pages {
    char *mem;
    size_t bytes;
} shared_pages;

size_t ptc_program_warm(ptc_program *p)
{
    if (p->backend != PTC_BACKEND_CPU)
        return 0;
    double t0 = ptc_now_ms();
    ptc_scratch_need need = {{0}};
    shared_pages shared[1 + PTC_SCRATCH_SLOTS];
    int nshared = 0;
    ptc_exec_layout l;
    ptc_error err;
    void *arena = NULL;
    if (p->sched->plan.is_static &&
        ptc_exec_arena_layout(p, &(ptc_bindings){0}, NULL, PTC_CPU, true, false, &l, &err) == 0) {
        externs_scratch(p, &need);
        arena = take_cached_arena(p, (size_t)l.size);
        if (arena)
            shared[nshared++] = (shared_pages){arena, (size_t)l.size};
        ptc_exec_layout_free(&l);
    }
    /* this thread's scratch (it is thread 0 of the team) is touched by all */
    for (int i = 0; i < PTC_SCRATCH_SLOTS; i++) {
        size_t bytes = need.caller[i] > need.team[i] ? need.caller[i] : need.team[i];
        if (bytes)
            shared[nshared++] = (shared_pages){ptc_scratch((ptc_scratch_slot)i, bytes), bytes};
    }
    size_t touched = 0, team_bytes = 0;
    for (int k = 0; k < nshared; k++)
        touched += shared[k].bytes;
    for (int i = 0; i < PTC_SCRATCH_SLOTS; i++)
        team_bytes += need.team[i];
    int nt = omp_get_max_threads();
    /* the team starts here; each other thread readies its own scratch */
#pragma omp parallel num_threads(nt)
    {
        size_t id = (size_t)omp_get_thread_num(), n = (size_t)omp_get_num_threads();
        if (id > 0)
            ptc_scratch_reserve(need.team);
        for (int k = 0; k < nshared; k++) {
            size_t lo = shared[k].bytes * id / n, hi = shared[k].bytes * (id + 1) / n;
            ptc_touch_pages(shared[k].mem + lo, hi - lo);
        }
    }
    if (arena)
        give_back_arena(p, arena);
    touched += team_bytes * (size_t)(nt - 1);
    ptc_log(PTC_LOG_PERF, PTC_LOG_INFO,
            "readied the first run in %.2f ms: %d threads, %.1f MiB touched", ptc_now_ms() - t0, nt,
            (double)touched / (1 << 20));
    return touched;
}
