/* Running a program compiled for a CUDA device.
 *
 * The code a run launches is made and loaded by cuda_compile.c, which
 * shares the program's types with this file (cuda_prog.h).
 *
 * Every input must be a CUDA tensor of one device laid out as its type
 * says. The run makes that device's primary context current, allocates the
 * outputs and one arena (temporaries, then the kernels' scratch) through
 * the host when there is one (PyTorch's caching allocator, so memory is
 * reused in stream order) and launches every kernel on the host's current
 * stream. Externs run through the host on the same stream (when the host can
 * return fresh result tensors, their memory becomes the extern's output
 * buffer for the rest of the run instead of being copied); without a host
 * (ptc-run, tests) they run on ptc's C kernels over host copies, after a
 * synchronisation. Launch failures name the kernel, its launch parameters
 * and the driver's error; PTC_CUDA_SYNC=1 synchronises after every launch
 * so that faults are reported against the kernel that caused them. With
 * symbolic sizes, the arena is planned and every grid computed for the
 * call's sizes, and a kernel compiled in several forms (plan.c) runs the
 * form whose team suits them (ptc_cuda_pick). A kernel planned with
 * 32-bit indices for symbolic sizes runs them while the call's sizes pass
 * ptc_cuda_fits_i32, else its 64-bit variant, generated and loaded when a
 * call first needs it, so a compile makes no code no call uses; kernels
 * that came from an export package's folder (kernel_dir) take their
 * variant from it (sealed with opts->cuda_wide_variants), never generated
 * where the package is run, and a package without it fails the call. A
 * kernel's vectorised entry runs when every pointer it assumes aligned is;
 * PTC_CUDA_VECTOR=0 always takes the scalar entries (for tests).
 *
 * A run may be recorded into a CUDA graph (reduce-overhead mode: the
 * framework captures its current stream, and its allocator serves the
 * graph's private pool). Capture forbids what would synchronise or allocate
 * outside the pool, so a captured run reads no checks' record and never
 * synchronises (PTC_CUDA_SYNC is ignored: there is nothing to wait for until
 * the graph replays), and its modules must be loaded already (the warm-up
 * run before the capture loads them).
 */
#include "runtime/cuda_prog.h"

#include "logs/logs.h"

#include <stdlib.h>
#include <string.h>

/* ---- running ------------------------------------------------------------------------------------
 */

typedef struct crun {
    ptc_program *p;
    const ptc_host *host;
    const ptc_cuda_api *A;
    ptc_cuda_device *dev;
    cloaded *L;
    CUstream stream;
    bool capturing; /* the stream is being recorded into a CUDA graph */
    ptc_bindings b;
    void **bufptr;
    const ptc_tensor *inputs; /* the call's (CUDA inputs are never conformed) */
    ptc_tensor *outs;
    int outputs_made;          /* ptc_mplan.output_order: the outputs allocated so far */
    ptc_tensor arena;          /* host-allocated arena (storage set) */
    ptc_exec_layout segmented; /* the temporaries' segments where several (nsegs > 1) */
    ptc_tensor *segs;          /* per segment, from the host, while held */
    int segs_made;             /* the segments allocated so far */
    ptc_exec_kept kept;        /* extern results whose memory serves as buffers */
    CUdeviceptr scratch;       /* kernels' scratch area */
    int64_t scratch_bytes;
    int64_t counters;   /* its first bytes: split rows' counters (0 or PTC_CUDA_SPLIT_COUNTERS) */
    CUdeviceptr status; /* the checks' status record (lower.h), 0: no kernel checks */
    int *form;          /* per kernel: the form this call's sizes run (ptc_cuda_pick) */
    bool *wide;         /* per kernel: this call's sizes run its 64-bit variant */
    uint64_t rng_offset;
    CUdeviceptr rng_cell; /* the host's (ptc_host.rng_cell), else the device's zeros */
    bool sync_each;
    bool no_vector; /* PTC_CUDA_VECTOR=0: scalar entries only (tests) */
    ptc_error *err;
} crun;

static int64_t eval(crun *r, ptc_dim d)
{
    return ptc_exec_dim(&r->b, d);
}

static int bind_inputs(crun *r, const ptc_tensor *in, int *ordinal)
{
    ptc_program *p = r->p;
    *ordinal = -2;
    if (ptc_exec_check_inputs(p, in, &r->b, r->err))
        return -1;
    for (int i = 0; i < p->ninputs; i++) {
        if (in[i].device.kind != PTC_DEV_CUDA)
            return ptc_errorf(r->err, PTC_ERR_RUNTIME, "runtime",
                              "input '%s' is not a CUDA tensor (the program was compiled for CUDA)",
                              p->in_names[i]);
        int d = in[i].device.index;
        if (*ordinal != -2 && d != *ordinal)
            return ptc_errorf(r->err, PTC_ERR_RUNTIME, "runtime",
                              "input '%s' is on cuda:%d, other inputs on cuda:%d", p->in_names[i],
                              d, *ordinal);
        *ordinal = d;
    }
    /* layouts: the kernels assume the strides of each input's type */
    for (int i = 0; i < p->ninputs; i++) {
        int64_t want[PTC_MAX_DIMS];
        ptc_exec_typed_strides(&r->b, &p->in_types[i], want);
        for (int d = p->in_types[i].ndim - 1; d >= 0; d--)
            if (in[i].sizes[d] > 1 && in[i].strides[d] != want[d] && ptc_tensor_numel(&in[i]) > 0)
                return ptc_errorf(r->err, PTC_ERR_RUNTIME, "runtime",
                                  "input '%s' has stride %lld in dim %d where the program was "
                                  "compiled for %lld (recompile for this layout)",
                                  p->in_names[i], (long long)in[i].strides[d], d,
                                  (long long)want[d]);
    }
    return 0;
}

static void release_dev(ptc_storage *s)
{
    const ptc_cuda_api *A = ptc_cuda_api_get(NULL);
    if (A && s->data)
        A->cuMemFree((CUdeviceptr)(uintptr_t)s->data);
    free(s);
}

/* A contiguous device tensor of ptc's own (runs without a host). */
static int dev_alloc(crun *r, ptc_tensor *t, ptc_dtype dt, int ndim, const int64_t *sizes)
{
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = ndim;
    t->device = (ptc_device){PTC_DEV_CUDA, (int16_t)r->dev->ordinal};
    int64_t n = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        t->sizes[d] = sizes[d];
        t->strides[d] = n;
        n *= sizes[d];
    }
    size_t bytes = (size_t)n * ptc_dtype_size(dt);
    CUdeviceptr ptr = 0;
    if (bytes) {
        CUresult cr = r->A->cuMemAlloc(&ptr, bytes);
        if (cr != CUDA_SUCCESS)
            return ptc_cuda_fail(r->err, cr, "allocating %zu bytes on cuda:%d", bytes,
                                 r->dev->ordinal);
    }
    ptc_storage *s = calloc(1, sizeof *s);
    s->refs = 1;
    s->data = (void *)(uintptr_t)ptr;
    s->nbytes = bytes;
    s->release = release_dev;
    t->storage = s;
    t->data = s->data;
    return 0;
}

static int own_alloc(void *ctx, ptc_tensor *t, ptc_dtype dt, int ndim, const int64_t *sizes,
                     ptc_error *err)
{
    (void)err; /* dev_alloc reports into the run's, the same one */
    return dev_alloc(ctx, t, dt, ndim, sizes);
}

/* The outputs step t (or one before it) writes, not allocated yet. */
static int alloc_outputs(crun *r, int t)
{
    ptc_exec_alloc a = {.b = &r->b,
                        .host = r->host,
                        .device = {PTC_DEV_CUDA, (int16_t)r->dev->ordinal},
                        .own = own_alloc,
                        .ctx = r,
                        .empty = (void *)(uintptr_t)r->dev->zeros,
                        .inputs = r->inputs,
                        .extern_results_are_outputs = r->kept.outs != NULL};
    return ptc_exec_alloc_outputs(r->p, &a, t, &r->outputs_made, r->outs, r->bufptr, r->err);
}

/* The form each kernel runs for this call's sizes: for a kernel planned in
 * several, the one whose team suits its outer iterations and row length. */
static void pick_forms(crun *r)
{
    const ptc_schedule *s = r->p->sched;
    for (int ki = 0; ki < s->nkernels; ki++) {
        const ptc_cuda_code *code = code_of(r->p->cuda, ki);
        const ptc_kernel *k = s->kernels[ki];
        r->form[ki] = 0;
        ptc_tune_choice tuned;
        if (ptc_autotune_tuned(r->p, ki, &tuned) && tuned.a >= 0 && tuned.a < code->nforms) {
            r->form[ki] = tuned.a;
            continue;
        }
        if (code->nforms <= 1)
            continue;
        double outer = 1, work = 1;
        for (int d = 0; d < k->nouter; d++)
            outer *= (double)eval(r, k->outer[d]);
        for (int g = 0; g < k->ngroups; g++) {
            const ptc_kgroup *G = &k->groups[g];
            double w = 1;
            for (int d = 0; d < G->ninner; d++)
                w *= (double)eval(r, G->inner[d]);
            for (int d = 0; G->reduction && d < G->nred; d++)
                w *= (double)eval(r, G->red[d]);
            work = w > work ? w : work;
        }
        r->form[ki] = ptc_cuda_pick(code, outer, work, r->dev->sms);
    }
}

static double call_size(void *r, ptc_dim d)
{
    return (double)eval(r, d);
}

/* Kernel src's 64-bit variant from the export package its code came from
 * (cp->kernel_dir), sealed beside it; a package without one fails the call
 * rather than generate it where the package is run. */
static int wide_from_package(crun *r, int src)
{
    ptc_cuda_prog *cp = r->p->cuda;
    const ptc_kernel *k = r->p->sched->kernels[src];
    ptc_codegen_opts co = {.kernel_dir = cp->kernel_dir, .wide_index = true, .no_generate = true};
    ptc_error e;
    int rc = ptc_cuda_codegen(r->p->sched, k, &cp->target, &co, &cp->k[src].wide, NULL, &e);
    if (rc == 1)
        return ptc_errorf(r->err, PTC_ERR_RUNTIME, "runtime",
                          "kernel %d %s: this call's sizes reach 2^30 elements and need the "
                          "kernel's 64-bit index variant, which the export package's kernels "
                          "(%s) lack (sealed by a ptc that made none): export the model again",
                          k->id, k->name, cp->kernel_dir);
    if (rc)
        *r->err = e;
    else
        ptc_log(PTC_LOG_PERF, PTC_LOG_INFO,
                "a call's sizes reach 2^30 elements: kernel %d %s runs its 64-bit index variant "
                "from the package",
                k->id, k->name);
    return rc ? -1 : 0;
}

/* The 64-bit variants of kernels srcs[0..n), where a program has none yet:
 * from its export package, or generated (those missing in one compile
 * worker, as a compile's kernels are); then loaded on this run's device
 * where they are not. */
static int wide_ready(crun *r, int *srcs, int n)
{
    ptc_cuda_prog *cp = r->p->cuda;
    const ptc_schedule *s = r->p->sched;
    int *miss = calloc((size_t)n + 1, sizeof *miss), nmiss = 0, rc = 0;
    pthread_mutex_lock(&cp->lock);
    for (int i = 0; i < n && rc == 0; i++) {
        const ckernel *ck = &cp->k[srcs[i]];
        if (ck->wide.ptx)
            continue;
        if (cp->kernel_dir && ck->code.cached)
            rc = wide_from_package(r, srcs[i]);
        else
            miss[nmiss++] = srcs[i];
    }
    if (rc == 0 && nmiss > 0) {
        ptc_log(PTC_LOG_PERF, PTC_LOG_INFO,
                "a call's sizes reach 2^30 elements: generating the 64-bit index variant of %d "
                "kernel(s), the first (kernel %d %s)",
                nmiss, miss[0], s->kernels[miss[0]]->name);
        /* in the process's cache, not an export package's kernel folder: a
         * run writes nothing into a package */
        ptc_codegen_opts co = {.no_cache = cp->no_cache};
        rc = ptc_cuda_generate_wide(cp, s, &co, miss, nmiss, r->err);
        for (int i = 0; rc == 0 && i < nmiss; i++) {
            /* the same plan but for the index width: form f is the same team in both */
            const ckernel *ck = &cp->k[miss[i]];
            PTC_ASSERT(ck->wide.nforms == ck->code.nforms && !ck->wide.i32);
            ptc_cuda_count_wide_variant();
        }
    }
    for (int i = 0; rc == 0 && i < n; i++) {
        const ptc_kernel *k = s->kernels[srcs[i]];
        cwide *w = &r->L->wide[srcs[i]];
        if (w->mod)
            continue;
        if (r->capturing)
            rc = ptc_errorf(r->err, PTC_ERR_RUNTIME, "runtime",
                            "kernel %d %s: a CUDA graph capture needs its 64-bit index variant, "
                            "not loaded yet (run the program once at these sizes outside the "
                            "capture first, as a warm-up)",
                            k->id, k->name);
        else
            rc = ptc_cuda_load_wide(cp, s, srcs[i], r->L, r->err);
    }
    pthread_mutex_unlock(&cp->lock);
    free(miss);
    return rc;
}

/* Which kernels run their 64-bit variant in this call: those planned with
 * 32-bit indices for symbolic sizes whose sizes now fail the rule. */
static int pick_widths(crun *r)
{
    const ptc_schedule *s = r->p->sched;
    ptc_cuda_prog *cp = r->p->cuda;
    int *srcs = calloc((size_t)s->nkernels + 1, sizeof *srcs), n = 0;
    for (int ki = 0; ki < s->nkernels; ki++) {
        int src = source_of(cp, ki);
        if (!cp->k[src].code.i32_symbolic ||
            ptc_cuda_fits_i32(r->p->prog, s->kernels[ki], call_size, r))
            continue;
        r->wide[ki] = true;
        bool listed = false;
        for (int i = 0; i < n && !listed; i++)
            listed = srcs[i] == src;
        if (!listed)
            srcs[n++] = src;
    }
    int rc = n > 0 ? wide_ready(r, srcs, n) : 0;
    free(srcs);
    return rc;
}

/* The code kernel ki runs in this call: its own or its 64-bit variant. */
static const ptc_cuda_code *call_code(const crun *r, int ki)
{
    const ptc_cuda_prog *cp = r->p->cuda;
    int src = source_of(cp, ki);
    return r->wide[ki] ? &cp->k[src].wide : &cp->k[src].code;
}

/* A wave is the blocks every SM holds at once: MAX_THREADS_PER_SM is the
 * resident threads of one SM on sm_80 and sm_90 (the CUDA occupancy tables),
 * the targets ptc compiles for. A kernel's blocks stride over the rest of
 * its work, so a launch needs at most GRID_WAVES waves (a chosen bound), or
 * one where a team reduction keeps scratch per block. */
enum { MAX_THREADS_PER_SM = 2048, GRID_WAVES = 4 };

/* Blocks of `block` threads for kernel k's outer iterations in this call,
 * run as m says (its team; in the vectorised entry, vec: a thread covers vec
 * iterations of a flat kernel; a team row_ahead rows where it loads its next
 * row ahead), at most cap. */
static int64_t grid_blocks(crun *r, const ptc_kernel *k, int block, const ptc_cuda_member *m,
                           bool vec, int64_t cap)
{
    int64_t O = 1;
    for (int d = 0; d < k->nouter; d++)
        O *= eval(r, k->outer[d]);
    if (vec && !m->vec_rows)
        O /= m->vec;
    if (m->split) /* split rows: S blocks an outer iteration */
        O *= m->split;
    int64_t per_block = block / m->team;
    if (m->row_ahead && (vec || m->vec == 1)) /* row mode runs in this entry */
        per_block *= m->row_ahead;
    int64_t blocks = (O + per_block - 1) / per_block;
    return blocks < cap ? blocks : cap;
}

/* Blocks of kernel k's launch in form f for the current sizes (0: nothing to do). */
static int64_t launch_blocks(crun *r, const ptc_kernel *k, const ptc_cuda_code *code, int f,
                             bool vec)
{
    const ptc_cuda_form *fm = &code->forms[f];
    const ptc_cuda_launch *l = &code->launch;
    ptc_cuda_member m = {fm->team, l->vec, l->vec_rows, l->row_ahead, fm->split};
    int64_t wave = (int64_t)r->dev->sms * (MAX_THREADS_PER_SM / fm->block);
    return grid_blocks(r, k, fm->block, &m, vec, fm->scratch_team > 0 ? wave : wave * GRID_WAVES);
}

/* The scratch the kernels' forms take, the split rows' counters (*counters
 * bytes) first. */
static int64_t scratch_need(crun *r, int64_t *counters)
{
    const ptc_schedule *s = r->p->sched;
    int64_t need = 0;
    *counters = 0;
    for (int k = 0; k < s->nkernels; k++) {
        const ptc_cuda_code *code = code_of(r->p->cuda, k);
        const ptc_cuda_form *fm = &code->forms[r->form[k]];
        if (fm->split) {
            *counters = PTC_CUDA_SPLIT_COUNTERS;
            need = fm->split_bytes > need ? fm->split_bytes : need;
        }
        if (fm->scratch_team <= 0)
            continue;
        int64_t blocks = launch_blocks(r, s->kernels[k], code, r->form[k], false);
        int64_t n = blocks * (fm->block / fm->team) * fm->scratch_team;
        need = n > need ? n : need;
    }
    return *counters + need;
}

/* The sections of the device arena (temporaries, the scratch of team
 * reductions, the checks' status record) start on 256-byte boundaries, the
 * alignment cuMemAlloc gives. */
enum { SECTION_ALIGN = 256 };

static int64_t section_aligned(int64_t bytes)
{
    return (bytes + SECTION_ALIGN - 1) & ~(int64_t)(SECTION_ALIGN - 1);
}

/* The device arena's address for total bytes: from the host's allocator
 * when it has one (r->arena holds it for the run), else the program's own
 * arena on this device, grown to fit. */
static int arena_base(crun *r, int64_t total, CUdeviceptr *base)
{
    ptc_program *p = r->p;
    int rc = 0;
    *base = 0;
    if (total > 0 && r->host && r->host->alloc) {
        ptc_device dev = {PTC_DEV_CUDA, (int16_t)r->dev->ordinal};
        rc = r->host->alloc(r->host->ctx, &r->arena, PTC_U8, 1, &total, dev, r->err);
        *base = rc ? 0 : (CUdeviceptr)(uintptr_t)r->arena.data;
    } else if (total > 0) {
        ptc_cuda_prog *cp = p->cuda;
        pthread_mutex_lock(&cp->lock);
        if (cp->mem_size < (size_t)total || cp->mem_dev != r->dev->ordinal) {
            if (cp->mem)
                r->A->cuMemFree(cp->mem);
            cp->mem = 0;
            cp->mem_size = 0;
            CUresult cr = r->A->cuMemAlloc(&cp->mem, (size_t)total);
            if (cr != CUDA_SUCCESS)
                rc = ptc_cuda_fail(r->err, cr, "allocating the arena (%lld bytes) on cuda:%d",
                                   (long long)total, r->dev->ordinal);
            else {
                cp->mem_size = (size_t)total;
                cp->mem_dev = r->dev->ordinal;
            }
        }
        *base = cp->mem;
        pthread_mutex_unlock(&cp->lock);
    }
    return rc;
}

static int plan_arena(crun *r)
{
    ptc_program *p = r->p;
    ptc_exec_layout l;
    ptc_device dev = {PTC_DEV_CUDA, (int16_t)r->dev->ordinal};
    /* a CUDA graph's recording keeps one arena: its replays reuse the addresses */
    bool segmented = !r->capturing && ptc_exec_segments_on(r->host, dev);
    if (ptc_exec_arena_layout(p, &r->b, r->host, dev, r->kept.outs != NULL, segmented, &l, r->err))
        return -1;
    /* several segments come one by one (alloc_segments); the block below
       holds the scratch and the status record then */
    int64_t temps = l.nsegs > 1 ? 0 : section_aligned(l.size);
    r->scratch_bytes = scratch_need(r, &r->counters);
    bool checks = p->cuda->any_checks;
    int64_t scratch_end = section_aligned(temps + r->scratch_bytes);
    int64_t total =
        checks ? scratch_end + (int64_t)sizeof(ptc_check_status) : temps + r->scratch_bytes;
    CUdeviceptr base = 0;
    int rc = arena_base(r, total, &base);
    if (rc == 0)
        ptc_exec_point_arena(p, &l, l.nsegs > 1 ? 0 : (uintptr_t)base,
                             (void *)(uintptr_t)r->dev->zeros, r->bufptr);
    if (rc == 0 && l.nsegs > 1) {
        r->segmented = l;
        r->segs = calloc((size_t)l.nsegs, sizeof *r->segs);
        PTC_ASSERT(r->segs);
        l = (ptc_exec_layout){0};
    }
    r->scratch = r->scratch_bytes ? base + (CUdeviceptr)temps : 0;
    r->status = checks && rc == 0 ? base + (CUdeviceptr)scratch_end : 0;
    if (r->status) {
        CUresult cr = r->A->cuMemsetD8Async(r->status, 0, sizeof(ptc_check_status), r->stream);
        if (cr != CUDA_SUCCESS)
            rc = ptc_cuda_fail(r->err, cr, "clearing the checks' status record");
    }
    if (rc == 0 && r->counters) { /* each row's last block leaves its counter 0 again */
        CUresult cr = r->A->cuMemsetD8Async(r->scratch, 0, (size_t)r->counters, r->stream);
        if (cr != CUDA_SUCCESS)
            rc = ptc_cuda_fail(r->err, cr, "clearing the split rows' counters");
    }
    ptc_exec_layout_free(&l);
    return rc;
}

static bool aligned_for(crun *r, const ptc_kernel *k, const ptc_cuda_code *code)
{
    for (int a = 0; a < k->nargs; a++) {
        int al = code->launch.valign[a];
        if (al > 1 && ((uintptr_t)r->bufptr[k->args[a]] % (uintptr_t)al) != 0)
            return false;
    }
    return true;
}

static int check_sync(crun *r, const ptc_kernel *k, const char *what)
{
    CUresult cr = r->A->cuStreamSynchronize(r->stream);
    if (cr != CUDA_SUCCESS)
        return ptc_cuda_fail(r->err, cr, "kernel %d %s: %s", k ? k->id : -1, k ? k->name : "?",
                             what);
    return 0;
}

/* Whether a call reads its checks' record (PTC_CUDA_CHECKS=1). Reading it
 * costs the call one stream synchronisation, which on an H100 took BERT bf16
 * from 2.9 to 4.3 ms a call (its embeddings check their indices), so on CUDA
 * it is opt-in until the read is asynchronous. Unread, a failed check still
 * keeps the kernel's loads in bounds (it reads element 0 instead). Read at
 * each call, as the variable may be set after the process's first one. */
static bool read_checks_on(void)
{
    static int warned;
    return ptc_env_switch("PTC_CUDA_CHECKS", false, &warned,
                          "the checks' record is not read, as by default");
}

/* The checks' status record, read once at the end of the launch sequence:
 * it costs the call one stream synchronisation, paid only by programs whose
 * kernels check (indexing, integer division), as eager's .item() would. */
static int read_checks(crun *r)
{
    ptc_check_status st;
    CUresult cr = r->A->cuMemcpyDtoHAsync(&st, r->status, sizeof st, r->stream);
    if (cr == CUDA_SUCCESS)
        cr = r->A->cuStreamSynchronize(r->stream);
    if (cr != CUDA_SUCCESS)
        return ptc_cuda_fail(r->err, cr, "reading the checks' status record");
    return st.code ? ptc_check_fail(&st, r->err) : 0;
}

/* Whether kernel ki may run its vectorised entry in form f. */
static bool vector_ok(crun *r, int ki, int f)
{
    ptc_cuda_prog *cp = r->p->cuda;
    int src = source_of(cp, ki);
    const ptc_cuda_code *code = call_code(r, ki);
    CUfunction vfn = r->wide[ki] ? r->L->wide[src].vfn : r->L->vfn[src];
    return f == 0 && code->launch.vec > 1 && !r->no_vector && vfn &&
           aligned_for(r, r->p->sched->kernels[ki], code);
}

/* *fn: the scalar entry of kernel k (ci < 0) or combination ci that its
 * module deferred (PTC_CUDA_DEFER_SCALAR), loaded now that a launch needs
 * it (an argument not aligned for the vectorised one), or NULL where none
 * was deferred. -1 with r->err when it cannot load. */
static int deferred_scalar(crun *r, int k, int ci, CUfunction *fn)
{
    ptc_cuda_prog *cp = r->p->cuda;
    const ptc_cuda_code *code = ci < 0 ? &cp->k[k].code : &cp->combos[ci];
    *fn = NULL;
    if (code->launch.vec <= 1 || (ci < 0 && cp->k[k].combined_only))
        return 0;
    if (r->capturing)
        return ptc_errorf(r->err, PTC_ERR_RUNTIME, "runtime",
                          "%s %d: a CUDA graph capture needs its scalar entry (an argument is "
                          "not aligned for the vectorised one), not loaded yet (run the program "
                          "once on such arguments outside the capture first, as a warm-up, or "
                          "set PTC_CUDA_DEFER_SCALAR=0)",
                          ci < 0 ? "kernel" : "combination", ci < 0 ? k : ci);
    pthread_mutex_lock(&cp->lock);
    int rc = ptc_cuda_load_scalar(cp, r->p->sched, r->L, k, ci, r->err);
    pthread_mutex_unlock(&cp->lock);
    *fn = rc ? NULL : ci < 0 ? r->L->fn[k] : r->L->cfn[ci];
    return rc;
}

/* Launches kernel ki in form f (vectorised when vec). */
static int launch(crun *r, int ki, int f, bool vec)
{
    const ptc_kernel *k = r->p->sched->kernels[ki];
    ptc_cuda_prog *cp = r->p->cuda;
    int src = source_of(cp, ki);
    const ptc_cuda_code *code = call_code(r, ki);
    const ptc_cuda_form *fm = &code->forms[f];
    const cwide *w = &r->L->wide[src];
    CUfunction fn = r->wide[ki] ? (vec ? w->vfn : w->fn[f])
                    : f > 0     ? r->L->ffn[src * PTC_CUDA_MAX_FORMS + f]
                    : vec       ? r->L->vfn[src]
                                : r->L->fn[src];
    if (!fn && !r->wide[ki] && f == 0 && !vec && deferred_scalar(r, src, -1, &fn))
        return -1;
    if (!fn) /* ptc_cuda_prepare made none: it runs in its combination */
        return ptc_errorf(r->err, PTC_ERR_INTERNAL, "runtime",
                          "kernel %d %s has no code of its own (it runs only in a combination)",
                          k->id, k->name);
    int64_t blocks = launch_blocks(r, k, code, f, vec);
    if (blocks <= 0)
        return 0;
    CUdeviceptr ptrs[MAX_PARAMS];
    int64_t ints[MAX_PARAMS];
    void *params[MAX_PARAMS];
    bool checks = cp->k[ki].checks;
    if (launch_params(k, checks) > MAX_PARAMS) /* ptc_cuda_prepare refused it */
        return too_many_params(k, checks, r->err);
    int np = 0;
    for (int a = 0; a < k->nargs; a++) {
        ptrs[a] = (CUdeviceptr)(uintptr_t)r->bufptr[k->args[a]];
        params[np++] = &ptrs[a];
    }
    /* a split-rows form counts on the counters, the others start after them */
    ptrs[k->nargs] = r->scratch + (fm->split ? 0 : (CUdeviceptr)r->counters);
    params[np++] = &ptrs[k->nargs];
    ints[0] = (int64_t)ptc_rng_shift(r->rng_offset, k->seed_base);
    params[np++] = &ints[0];
    ptrs[k->nargs + 1] = r->rng_cell;
    params[np++] = &ptrs[k->nargs + 1];
    for (int i = 0; i < k->nparams; i++) {
        ints[1 + i] = eval(r, k->params[i]);
        params[np++] = &ints[1 + i];
    }
    if (checks) {
        ints[1 + k->nparams] = (int64_t)r->status;
        params[np++] = &ints[1 + k->nparams];
    }
    CUresult cr = r->A->cuLaunchKernel(fn, (unsigned)blocks, 1, 1, (unsigned)fm->block, 1, 1,
                                       (unsigned)fm->smem, r->stream, params, NULL);
    if (cr != CUDA_SUCCESS)
        return ptc_cuda_fail(r->err, cr,
                             "kernel %d %s (%s): launch of grid %lld x block %d, %d bytes "
                             "of shared memory",
                             k->id, k->name, vec ? code->ventry : fm->entry, (long long)blocks,
                             fm->block, fm->smem);
    ptc_cuda_count_launch(code->i32);
    ptc_log(PTC_LOG_RUNTIME, PTC_LOG_DEBUG, "kernel %d %s: grid %lld block %d team %d%s%s%s%s",
            k->id, k->name, (long long)blocks, fm->block, fm->team,
            fm->col     ? " column mode"
            : fm->split ? " split rows"
                        : "",
            vec ? " vectorised" : "", code->nforms > 1 ? " (form for these sizes)" : "",
            r->wide[ki] ? " (64-bit indices for these sizes)" : "");
    if (r->sync_each && !r->capturing)
        return check_sync(r, k, "failed while running");
    return 0;
}

/* ---- horizontal combinations: one launch (lower/combo.c) --------------------------------------
 */

/* Launches combination ci (the steps of c) as one grid: member i gets the
 * blocks its own launch would have (at the combination's block size, which
 * a member with teams has itself) and runs on blocks end[i-1] .. end[i]-1
 * (codegen: ptc_cuda_codegen_combo). */
static int launch_combo(crun *r, int ci, const ptc_combo *c)
{
    const ptc_schedule *s = r->p->sched;
    const ptc_cuda_code *code = &r->p->cuda->combos[ci];
    const int *args = r->p->cuda->combo_args[ci];
    int nargs = r->p->cuda->combo_nargs[ci];
    PTC_ASSERT(nargs + 2 + c->n <= MAX_PARAMS);
    bool vec = code->launch.vec > 1 && !r->no_vector && r->L->cvfn[ci];
    for (int a = 0; vec && a < nargs; a++) {
        int al = code->launch.valign[a];
        vec = al <= 1 || (uintptr_t)r->bufptr[args[a]] % (uintptr_t)al == 0;
    }
    CUdeviceptr ptrs[MAX_PARAMS], cell = r->rng_cell;
    uint32_t ends[PTC_COMBO_MAX_KERNELS];
    int64_t rng = (int64_t)ptc_rng_shift(r->rng_offset, c->seed_base);
    void *params[MAX_PARAMS];
    int np = 0, block = code->launch.block;
    for (int a = 0; a < nargs; a++) {
        ptrs[a] = (CUdeviceptr)(uintptr_t)r->bufptr[args[a]];
        params[np++] = &ptrs[a];
    }
    params[np++] = &rng;
    params[np++] = &cell;
    int64_t total = 0, cap = (int64_t)r->dev->sms * (MAX_THREADS_PER_SM / block) * GRID_WAVES;
    for (int i = 0; i < c->n; i++) {
        const ptc_kernel *k = s->kernels[s->steps[c->first + i].index];
        total += grid_blocks(r, k, block, &code->members[i], vec, cap);
        ends[i] = (uint32_t)total;
        params[np++] = &ends[i];
    }
    if (total == 0)
        return 0;
    CUfunction fn = vec ? r->L->cvfn[ci] : r->L->cfn[ci];
    if (!fn && deferred_scalar(r, -1, ci, &fn))
        return -1;
    CUresult cr = r->A->cuLaunchKernel(fn, (unsigned)total, 1, 1, (unsigned)block, 1, 1,
                                       (unsigned)code->launch.smem, r->stream, params, NULL);
    if (cr != CUDA_SUCCESS)
        return ptc_cuda_fail(r->err, cr,
                             "combination %d of %d kernels (%s): launch of grid %lld x block %d",
                             ci, c->n, vec ? code->ventry : code->entry, (long long)total, block);
    ptc_cuda_count_launch(code->i32);
    ptc_log(PTC_LOG_RUNTIME, PTC_LOG_DEBUG, "combination %d of %d kernels: grid %lld block %d%s",
            ci, c->n, (long long)total, block, vec ? " vectorised" : "");
    if (r->sync_each && !r->capturing)
        return check_sync(r, s->kernels[s->steps[c->first].index], "failed while running");
    return 0;
}

/* ---- max-autotune: a kernel's form and vectorised entry, timed on the device ---------------- */

typedef struct tune_call {
    crun *r;
    int ki;
    CUevent start, end;
    int rc; /* a failed launch: the run's error */
} tune_call;

static double time_launch(void *ctx, const ptc_tune_choice *c)
{
    tune_call *t = ctx;
    const ptc_cuda_api *A = t->r->A;
    float ms = 0;
    if (t->rc) /* an earlier candidate failed: the run fails with its error */
        return -1;
    CUresult cr = A->cuEventRecord(t->start, t->r->stream);
    if (cr == CUDA_SUCCESS && (t->rc = launch(t->r, t->ki, c->a, c->b)) != 0)
        return -1;
    if (cr == CUDA_SUCCESS)
        cr = A->cuEventRecord(t->end, t->r->stream);
    if (cr == CUDA_SUCCESS)
        cr = A->cuEventSynchronize(t->end);
    if (cr == CUDA_SUCCESS)
        cr = A->cuEventElapsedTime(&ms, t->start, t->end);
    if (cr != CUDA_SUCCESS) {
        t->rc = ptc_cuda_fail(t->r->err, cr, "timing kernel %d", t->ki);
        return -1;
    }
    return ms;
}

/* The forms kernel ki may run in this call: those whose scratch fits the
 * arena planned for the forms picked (pick_forms). */
static int launch_candidates(crun *r, int ki, bool vec, ptc_tune_choice *c, int max)
{
    const ptc_cuda_code *code = code_of(r->p->cuda, ki);
    const ptc_kernel *k = r->p->sched->kernels[ki];
    int n = 0;
    c[n++] = (ptc_tune_choice){r->form[ki], vec};
    if (vector_ok(r, ki, 0) && !(r->form[ki] == 0 && vec))
        c[n++] = (ptc_tune_choice){0, 1};
    for (int f = 0; f < code->nforms && n < max; f++) {
        const ptc_cuda_form *fm = &code->forms[f];
        int64_t need = fm->scratch_team > 0 ? launch_blocks(r, k, code, f, false) *
                                                  (fm->block / fm->team) * fm->scratch_team
                                            : 0;
        if ((f != r->form[ki] || vec) && need + r->counters <= r->scratch_bytes)
            c[n++] = (ptc_tune_choice){f, 0};
    }
    return n;
}

/* Runs kernel ki in its tuned launch, tuning it first when it has none. */
static int run_tuned(crun *r, int ki, bool vec)
{
    ptc_tune_choice cands[2 + PTC_CUDA_MAX_FORMS], used;
    tune_call call = {.r = r, .ki = ki};
    ptc_tune_target t = {.what = "cuda launch", .cands = cands, .time = time_launch, .ctx = &call};
    t.n = launch_candidates(r, ki, vec, cands, 2 + PTC_CUDA_MAX_FORMS);
    /* a deferred scalar entry is loaded before the timing, not inside it */
    int src = source_of(r->p->cuda, ki);
    CUfunction scalar = r->L->fn[src];
    for (int i = 0; i < t.n && !scalar && !r->wide[ki]; i++)
        if (cands[i].a == 0 && !cands[i].b && deferred_scalar(r, src, -1, &scalar))
            return -1;
    const ptc_kernel *k = r->p->sched->kernels[ki];
    int64_t outer = 1;
    for (int d = 0; d < k->nouter; d++)
        outer *= eval(r, k->outer[d]);
    snprintf(t.sizes, sizeof t.sizes, "outer 2^%d sm_%d sms %d", ptc_autotune_log2(outer),
             r->dev->sm, r->dev->sms);
    if (r->A->cuEventCreate(&call.start, 0) != CUDA_SUCCESS ||
        r->A->cuEventCreate(&call.end, 0) != CUDA_SUCCESS)
        t.n = 1; /* no timing: the default launch */
    bool ran = ptc_autotune_pick(r->p, ki, &t, &used);
    if (call.start)
        r->A->cuEventDestroy(call.start);
    if (call.end)
        r->A->cuEventDestroy(call.end);
    if (ran)
        return call.rc;
    return launch(r, ki, used.a, used.b && vector_ok(r, ki, used.a));
}

static int run_kernel(crun *r, int ki)
{
    int f = r->form[ki];
    ptc_tune_choice tuned;
    if (ptc_autotune_tuned(r->p, ki, &tuned))
        return launch(r, ki, f, tuned.b && vector_ok(r, ki, f));
    bool vec = vector_ok(r, ki, f);
    /* a capture cannot time (it runs nothing); PTC_CUDA_SYNC times nothing worth keeping */
    if (r->p->tune && !r->capturing && !r->sync_each)
        return run_tuned(r, ki, vec);
    return launch(r, ki, f, vec);
}

/* ---- externs -----------------------------------------------------------------------------------
 */

static ptc_tensor view_tensor(crun *r, const ptc_lview *v)
{
    ptc_device dev = {PTC_DEV_CUDA, (int16_t)r->dev->ordinal};
    return ptc_exec_view(r->p, &r->b, r->bufptr, v, dev);
}

static int64_t buf_bytes(crun *r, const ptc_lbuf *b)
{
    int64_t sizes[PTC_MAX_DIMS];
    for (int d = 0; d < b->ndim; d++)
        sizes[d] = eval(r, b->shape[d]);
    return (int64_t)ptc_dtype_size(b->dtype) * ptc_lbuf_elems(b, sizes);
}

/* A host copy of a whole device buffer; views keep their offsets into it. */
static int stage_down(crun *r, int buf, void **host)
{
    int64_t n = buf_bytes(r, r->p->prog->bufs[buf]);
    *host = malloc(n > 0 ? (size_t)n : 1);
    if (n <= 0)
        return 0;
    CUresult cr = r->A->cuMemcpyDtoH(*host, (CUdeviceptr)(uintptr_t)r->bufptr[buf], (size_t)n);
    return cr == CUDA_SUCCESS ? 0
                              : ptc_cuda_fail(r->err, cr, "copying an extern's input to the host");
}

/* An extern without a host framework: ptc's C kernel over host copies. */
static int run_extern_staged(crun *r, const ptc_lnode *n)
{
    if (check_sync(r, NULL, "before a host extern"))
        return -1;
    ptc_tensor in[16];
    const ptc_tensor *inp[16];
    void *hosts[16] = {0};
    ptc_tensor outs[2] = {{0}};
    int nout = 0, rc = 0;
    for (int i = 0; i < n->nxin && i < 16 && rc == 0; i++) {
        if (n->xin[i].buf < 0) {
            inp[i] = NULL;
            continue;
        }
        in[i] = view_tensor(r, &n->xin[i]);
        rc = stage_down(r, n->xin[i].buf, &hosts[i]);
        in[i].data = (char *)hosts[i] + ((char *)in[i].data - (char *)r->bufptr[n->xin[i].buf]);
        in[i].device = PTC_CPU;
        inp[i] = &in[i];
    }
    for (int o = 0; o < 2 && rc == 0; o++) {
        if (n->out[o] < 0)
            continue;
        /* the buffer's memory (stored order, padded rows), seen in the
           logical order */
        const ptc_lbuf *b = r->p->prog->bufs[n->out[o]];
        int64_t elems = buf_bytes(r, b) / (int64_t)ptc_dtype_size(b->dtype);
        ptc_tensor *t = &outs[nout++];
        rc = ptc_tensor_alloc(t, b->dtype, 1, &elems, r->err);
        if (rc == 0)
            ptc_exec_buf_logical(&r->b, b, t);
    }
    ptc_exec_bound bound;
    if (rc == 0)
        rc = ptc_cextern_run(ptc_exec_bind_node(n->xnode, &r->b, &bound), inp, n->nxin, outs,
                             r->rng_offset, r->err);
    nout = 0;
    for (int o = 0; o < 2; o++) {
        if (n->out[o] < 0)
            continue;
        ptc_tensor *t = &outs[nout++];
        int64_t bytes = buf_bytes(r, r->p->prog->bufs[n->out[o]]);
        if (rc == 0 && bytes > 0) {
            CUresult cr = r->A->cuMemcpyHtoD((CUdeviceptr)(uintptr_t)r->bufptr[n->out[o]], t->data,
                                             (size_t)bytes);
            if (cr != CUDA_SUCCESS)
                rc = ptc_cuda_fail(r->err, cr, "copying an extern's output to the device");
        }
        if (t->storage)
            ptc_tensor_release(t);
    }
    for (int i = 0; i < 16; i++)
        free(hosts[i]);
    return rc;
}

static int run_extern(crun *r, const ptc_lnode *n)
{
    ptc_device dev = {PTC_DEV_CUDA, (int16_t)r->dev->ordinal};
    if (!ptc_exec_extern_by_host(r->host, n, dev))
        return run_extern_staged(r, n);
    ptc_tensor in[16], outs[2] = {{0}};
    const ptc_tensor *inp[16];
    ptc_exec_extern_args(r->p, &r->b, r->bufptr, n, dev, in, inp, outs);
    ptc_exec_bound bound;
    const ptc_node *node = ptc_exec_bind_node(n->xnode, &r->b, &bound);
    int rc =
        ptc_exec_extern_kept(r->p, &r->b, r->bufptr, r->host, n, node, inp, dev, &r->kept, r->err);
    if (rc <= 0)
        return rc;
    return r->host->run_extern(r->host->ctx, node, inp, n->nxin, outs, r->err);
}

/* ---- the run ------------------------------------------------------------------------------------
 */

/* Whether the run's stream is being captured into a CUDA graph; sets
 * r->capturing. The legacy default stream (NULL) is never captured. */
static bool stream_capturing(crun *r)
{
    int status = CU_STREAM_CAPTURE_STATUS_NONE;
    r->capturing = r->stream && r->A->cuStreamIsCapturing(r->stream, &status) == CUDA_SUCCESS &&
                   status != CU_STREAM_CAPTURE_STATUS_NONE;
    return r->capturing;
}

/* The loaded functions of a captured run: loading a module is no stream
 * work a graph can hold, so capture needs them loaded by an earlier run. */
static cloaded *loaded_for_capture(ptc_program *p, crun *r)
{
    ptc_cuda_prog *cp = p->cuda;
    pthread_mutex_lock(&cp->lock);
    cloaded *L = cp->loaded[r->dev->ordinal];
    pthread_mutex_unlock(&cp->lock);
    if (!L)
        ptc_errorf(r->err, PTC_ERR_RUNTIME, "runtime",
                   "a CUDA graph capture ran the program before it was loaded on cuda:%d (run it "
                   "once outside the capture first, as a warm-up)",
                   r->dev->ordinal);
    else if (!r->host || !r->host->alloc) {
        ptc_errorf(r->err, PTC_ERR_UNSUPPORTED, "runtime",
                   "a CUDA graph capture needs the framework's allocator (ptc's own arena is "
                   "allocated with cuMemAlloc, which capture forbids)");
        L = NULL;
    }
    return L;
}

/* The CUDA combination that starts at step t, or -1. */
static int combo_index(const ptc_cuda_prog *cp, const ptc_schedule *s, int t)
{
    const ptc_combo *c = cp->ncombos ? ptc_schedule_combo_at(s, t) : NULL;
    return c ? (int)(c - s->combos) : -1;
}

/* The arena's segments step t (or one before it) writes, not allocated yet. */
static int alloc_segments(crun *r, int t)
{
    if (!r->segs)
        return 0;
    ptc_device dev = {PTC_DEV_CUDA, (int16_t)r->dev->ordinal};
    return ptc_exec_segments_alloc(r->p, &r->segmented, r->host, dev, t, &r->segs_made, r->segs,
                                   r->bufptr, r->err);
}

static void finish(crun *r, bool ok, ptc_tensor *outputs)
{
    ptc_program *p = r->p;
    if (r->arena.storage || r->arena.data)
        ptc_tensor_release(&r->arena);
    for (int i = 0; r->segs && i < r->segmented.nsegs; i++)
        if (r->segs[i].storage || r->segs[i].data)
            ptc_tensor_release(&r->segs[i]);
    if (r->segs)
        ptc_exec_layout_free(&r->segmented);
    free(r->segs);
    ptc_exec_kept_release(&r->kept);
    ptc_exec_hand_over(p, ok, r->outs, outputs);
    free(r->bufptr);
    free(r->outs);
    free(r->form);
    free(r->wide);
}

int ptc_exec_cuda(ptc_program *p, const ptc_tensor *inputs, int ninputs, ptc_tensor *outputs,
                  const ptc_host *host, uint64_t rng_offset, ptc_error *err)
{
    (void)ninputs;
    const char *why = NULL;
    crun r = {.p = p, .host = host, .inputs = inputs, .rng_offset = rng_offset, .err = err};
    r.A = ptc_cuda_api_get(&why);
    if (!r.A)
        return ptc_errorf(err, PTC_ERR_UNSUPPORTED, "runtime",
                          "the CUDA backend is unavailable: %s", why);
    const char *sync = getenv("PTC_CUDA_SYNC");
    r.sync_each = sync && *sync && strcmp(sync, "0") != 0;
    const char *vec = getenv("PTC_CUDA_VECTOR");
    r.no_vector = vec && strcmp(vec, "0") == 0;
    int ordinal;
    if (bind_inputs(&r, inputs, &ordinal))
        return -1;
    r.dev = ptc_cuda_device_get(ordinal == -2 ? -1 : ordinal, err);
    if (!r.dev)
        return -1;
    r.rng_cell = host && host->rng_cell ? (CUdeviceptr)(uintptr_t)host->rng_cell : r.dev->zeros;
    bool pushed = false;
    if (ptc_cuda_enter(r.dev, &pushed, err))
        return -1;
    ptc_device dev = {PTC_DEV_CUDA, (int16_t)r.dev->ordinal};
    r.stream = host && host->cuda_stream ? (CUstream)host->cuda_stream(host->ctx, dev) : NULL;
    r.L = stream_capturing(&r) ? loaded_for_capture(p, &r) : ptc_cuda_loaded_on(p, r.dev, err);
    if (!r.L) {
        ptc_cuda_leave(pushed);
        return -1;
    }
    const ptc_lprog *lp = p->prog;
    const ptc_schedule *s = p->sched;
    r.bufptr = calloc((size_t)lp->nbufs + 1, sizeof *r.bufptr);
    r.outs = calloc((size_t)p->noutputs + 1, sizeof *r.outs);
    r.kept.outs = r.outs; /* extern results become graph outputs without a copy */
    r.form = calloc((size_t)s->nkernels + 1, sizeof *r.form);
    r.wide = calloc((size_t)s->nkernels + 1, sizeof *r.wide);
    pick_forms(&r);
    ptc_exec_point_inputs(p, inputs, NULL, (void *)(uintptr_t)r.dev->zeros, r.bufptr);
    int rc = pick_widths(&r);
    if (rc == 0)
        rc = alloc_outputs(&r, -1);
    if (rc == 0)
        rc = plan_arena(&r);
    int inputs_done = 0; /* ptc_mplan.input_order: the inputs let go so far */
    int t = 0;
    for (; rc == 0 && t < s->nsteps; t++) {
        /* max-autotune times each kernel on its own */
        int ci = p->tune ? -1 : combo_index(p->cuda, s, t);
        int last = ci >= 0 ? t + s->combos[ci].n - 1 : t;
        rc = alloc_outputs(&r, last);
        if (rc == 0)
            rc = alloc_segments(&r, last);
        if (rc)
            break;
        if (ci >= 0)
            rc = launch_combo(&r, ci, &s->combos[ci]);
        else if (s->steps[t].kind == PTC_STEP_KERNEL)
            rc = run_kernel(&r, s->steps[t].index);
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
    }
    if (rc == 0) /* every output is had, whatever the plan says */
        rc = alloc_outputs(&r, s->nsteps);
    if (rc == 0 && !host)
        rc = check_sync(&r, NULL, "the run failed on the device");
    if (rc == 0 && r.status && read_checks_on() && !r.capturing)
        rc = read_checks(&r);
    if (rc)
        ptc_exec_failed_after(p, t, err);
    finish(&r, rc == 0, outputs);
    ptc_cuda_leave(pushed);
    return rc;
}
