/* Running a compiled CPU program.
 *
 * A run binds the symbols of the input sizes, makes every input match the
 * layout its type promised (a copy only when the caller's strides differ),
 * allocates the outputs (through the host when there is one, so they belong
 * to the user) and the arena of temporaries (planned at compile time, or for
 * the run's sizes when they are symbolic: ptc_exec_arena_layout), then runs
 * the steps in order. Kernels get the run's sizes as parameters.
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

/* Readable zeros for buffers without elements (masked loads may touch
 * element 0 of any buffer they read). */
static _Alignas(64) const uint8_t empty_buffer[64];

/* Below this many element-iterations a kernel runs on the calling thread:
 * waking a team costs tens of microseconds on an idle machine and a
 * scheduling quantum on a busy one. */
enum { SERIAL_WORK = 1 << 18, CHUNKS_PER_THREAD = 8 };

typedef struct run {
    ptc_program *p;
    const ptc_host *host;
    ptc_bindings b;
    void **bufptr;        /* per loop buffer */
    ptc_tensor *conformed; /* inputs copied to their typed layout */
    ptc_tensor *outs;     /* per graph output */
    void *mem;            /* the arena */
    bool mem_owned;
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
    for (int i = 0; i < p->ninputs; i++)
        if (ptc_tensor_check_type(&in[i], &p->in_types[i], &r->b, p->in_names[i], r->err))
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

static int alloc_outputs(run *r)
{
    ptc_exec_alloc a = {.b = &r->b,
                        .host = r->host,
                        .device = PTC_CPU,
                        .own = own_alloc,
                        .empty = (void *)empty_buffer};
    return ptc_exec_alloc_outputs(r->p, &a, r->outs, r->bufptr, r->err);
}

static int plan_arena(run *r)
{
    ptc_program *p = r->p;
    const ptc_mplan *mp = &p->sched->plan;
    int n = mp->nbufs;
    int64_t *offset = malloc(sizeof(int64_t) * (size_t)(n + 1));
    int64_t *nbytes = malloc(sizeof(int64_t) * (size_t)(n + 1));
    PTC_ASSERT(offset && nbytes);
    int64_t size = 0;
    int rc = ptc_exec_arena_layout(p, &r->b, offset, nbytes, &size, r->err);
    /* the program's cached arena, unless another run holds it */
    pthread_mutex_lock(&p->lock);
    if (rc == 0 && !p->mem_busy) {
        if (p->mem_size < (size_t)size) {
            free(p->mem);
            p->mem = size ? aligned_alloc(64, (size_t)size) : NULL;
            p->mem_size = p->mem ? (size_t)size : 0;
        }
        p->mem_busy = true;
        r->mem = p->mem;
    }
    pthread_mutex_unlock(&p->lock);
    if (rc == 0 && !r->mem && size) {
        r->mem = aligned_alloc(64, (size_t)size);
        r->mem_owned = true;
    }
    if (rc == 0 && size && !r->mem)
        rc = ptc_errorf(r->err, PTC_ERR_RUNTIME, "runtime", "out of memory (arena of %lld bytes)",
                        (long long)size);
    for (int b = 0; rc == 0 && b < n; b++)
        if (mp->in_arena[b])
            r->bufptr[b] = nbytes[b] ? (char *)r->mem + offset[b] : (void *)empty_buffer;
    free(offset);
    free(nbytes);
    return rc;
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

static int run_kernel_code(run *r, const ptc_kernel *k, const ptc_cpu_kernel *ck)
{
    int64_t params[2 + 64];
    int64_t *pp = k->nparams < 64 ? params : malloc(sizeof(int64_t) * (size_t)(k->nparams + 2));
    pp[0] = (int64_t)r->rng_offset;
    for (int i = 0; i < k->nparams; i++)
        pp[1 + i] = eval(r, k->params[i]);
    pp[1 + k->nparams] = (int64_t)(intptr_t)&r->status;
    void *bufs_stack[32];
    void **bufs = k->nargs <= 32 ? bufs_stack : malloc(sizeof(void *) * (size_t)k->nargs);
    for (int i = 0; i < k->nargs; i++)
        bufs[i] = r->bufptr[k->args[i]];
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
    work *= inner;
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (P > 0 && (nt <= 1 || P == 1 || work < SERIAL_WORK)) {
        ck->fn(0, P, bufs, pp);
    } else if (P > 0) {
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
        int64_t next = 0;
#pragma omp parallel num_threads(nt) shared(next)
        for (;;) {
            int64_t c;
#pragma omp atomic capture
            c = next++;
            if (c >= nchunk)
                break;
            int64_t lo = P * c / nchunk, hi = P * (c + 1) / nchunk;
            if (lo < hi)
                ck->fn(lo, hi, bufs, pp);
        }
    }
    if (pp != params)
        free(pp);
    if (bufs != bufs_stack)
        free(bufs);
    return r->status.code ? ptc_check_fail(&r->status, r->err) : 0;
}

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
    ptc_exec_extern_args(r->p, &r->b, r->bufptr, n, PTC_CPU, in, inp, outs);
    int kept = ptc_exec_extern_kept(r->p, &r->b, r->bufptr, r->host, n, inp, PTC_CPU, &r->kept,
                                    r->err);
    if (kept <= 0)
        return kept;
    if (n->xkind == PTC_XK_HOST && r->host && r->host->run_extern)
        return r->host->run_extern(r->host->ctx, n->xnode, inp, n->nxin, outs, r->err);
    return ptc_cextern_run(n->xnode, inp, n->nxin, outs, r->rng_offset, r->err);
}

static void finish(run *r, bool ok, ptc_tensor *outputs)
{
    ptc_program *p = r->p;
    for (int i = 0; i < p->ninputs; i++)
        if (r->conformed[i].storage)
            ptc_tensor_release(&r->conformed[i]);
    if (r->mem_owned) {
        free(r->mem);
    } else if (r->mem || p->mem_busy) {
        pthread_mutex_lock(&p->lock);
        if (r->mem == p->mem)
            p->mem_busy = false;
        pthread_mutex_unlock(&p->lock);
    }
    for (int i = 0; i < p->noutputs; i++) {
        if (ok)
            outputs[i] = r->outs[i];
        else if (r->outs[i].data || r->outs[i].storage)
            ptc_tensor_release(&r->outs[i]);
    }
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
    r.conformed = calloc((size_t)p->ninputs + 1, sizeof *r.conformed);
    r.outs = calloc((size_t)p->noutputs + 1, sizeof *r.outs);
    int rc = bind_inputs(&r, inputs);
    for (int b = 0; rc == 0 && b < lp->nbufs; b++) {
        const ptc_lbuf *lb = lp->bufs[b];
        if (lb->kind != PTC_LB_INPUT)
            continue;
        const ptc_tensor *t = r.conformed[lb->input].storage ? &r.conformed[lb->input] : &inputs[lb->input];
        r.bufptr[b] = ptc_tensor_numel(t) && t->data ? t->data : (void *)empty_buffer;
    }
    if (rc == 0)
        rc = alloc_outputs(&r);
    if (rc == 0)
        rc = plan_arena(&r);
    const ptc_schedule *s = p->sched;
    for (int t = 0; rc == 0 && t < s->nsteps; t++) {
        if (s->steps[t].kind == PTC_STEP_KERNEL)
            rc = run_kernel(&r, s->kernels[s->steps[t].index], &p->kernels[s->steps[t].index]);
        else
            rc = run_extern(&r, lp->nodes[s->steps[t].index]);
    }
    finish(&r, rc == 0, outputs);
    return rc;
}
