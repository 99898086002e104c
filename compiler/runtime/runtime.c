/* Compiled programs: their reference counts, text, and running them on the
 * reference interpreter, the CPU executor (exec.c) or CUDA (cuda_exec.c);
 * and what both executors share (arena layout, outputs, views, externs).
 * Programs are built by the pipeline driver, compiler/pipeline.
 */
#include "runtime/rt.h"

#ifdef PTC_HAVE_CUDA
#include "runtime/cuda_rt.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ptc_program_retain(ptc_program *p)
{
    if (p)
        __atomic_add_fetch(&p->refs, 1, __ATOMIC_ACQ_REL);
}

void ptc_program_release(ptc_program *p)
{
    if (!p || __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    for (int k = 0; p->kernels && p->sched && k < p->sched->nkernels; k++)
        ptc_cpu_kernel_release(&p->kernels[k]);
#ifdef PTC_HAVE_CUDA
    ptc_cuda_prog_free(p->cuda);
#endif
    free(p->kernels);
    ptc_autotune_free(p);
    for (int i = 0; i < PTC_TEXT_COUNT; i++)
        free(p->text[i]);
    if (p->graph)
        ptc_graph_free(p->graph);
    if (p->source)
        ptc_graph_free(p->source);
    ptc_arena_free(p->arena);
    free(p->mem);
    free(p->layout_offset);
    free(p->layout_nbytes);
    free(p->layout_seg_of);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

void ptc_program_get_info(const ptc_program *p, ptc_program_info *info)
{
    *info = p->info;
    info->arena_bytes = __atomic_load_n(&p->info.arena_bytes, __ATOMIC_RELAXED);
    info->arena_segments = __atomic_load_n(&p->info.arena_segments, __ATOMIC_RELAXED);
}

int ptc_program_output_input(const ptc_program *p, int i)
{
    if (!p->prog || i < 0 || i >= p->noutputs)
        return -1;
    const ptc_lbuf *lb = p->prog->bufs[p->prog->outputs[i]];
    return lb->kind == PTC_LB_INPUT ? lb->input : -1;
}

int ptc_program_output_first(const ptc_program *p, int i)
{
    if (!p->prog || i < 0 || i >= p->noutputs)
        return i;
    const ptc_lbuf *lb = p->prog->bufs[p->prog->outputs[i]];
    if (lb->kind == PTC_LB_OUTPUT)
        return lb->output;
    for (int j = 0; j < i; j++) /* an input written in place: rare, and few */
        if (p->prog->outputs[j] == p->prog->outputs[i])
            return j;
    return i;
}

int ptc_program_input_last(const ptc_program *p, int i)
{
    if (!p->sched || i < 0 || i >= p->sched->plan.ninputs)
        return -1;
    return p->sched->plan.input_last[i];
}

const char *ptc_program_text(const ptc_program *p, const char *stage)
{
    static const char *names[PTC_TEXT_COUNT] = {"prims", "loops", "kernels", "llvm", "ptx"};
    for (int i = 0; i < PTC_TEXT_COUNT; i++)
        if (strcmp(stage, names[i]) == 0)
            return p->text[i];
    return NULL;
}

/* PTC_INJECT's runtime stage on the reference backend: asked after each
 * node (the interpreter itself, the oracle, is never injected). */
typedef struct ref_inject {
    ptc_error err;
    bool failed;
} ref_inject;

static int inject_node(void *ctx, const ptc_node *n, const ptc_tensor *outs)
{
    ref_inject *ri = ctx;
    switch (ptc_inject_hit("runtime", n->op, &ri->err)) {
    case PTC_INJECT_ERROR:
        ri->failed = true;
        return 1;
    case PTC_INJECT_WRONG:
        for (int i = 0; i < n->nout; i++) {
            ptc_tensor t = outs[i]; /* the run's data; only the struct is const */
            ptc_inject_perturb(&t);
        }
        return 0;
    default:
        return 0;
    }
}

/* The reference backend, with outputs moved into host allocations. */
static int run_reference(ptc_program *p, const ptc_tensor *inputs, int ninputs,
                         ptc_tensor *outputs, const ptc_host *host, uint64_t rng_offset,
                         ptc_error *err)
{
    ref_inject ri = {0};
    ptc_run_opts ro = {.rng_offset = rng_offset};
    if (*ptc_inject_spec()) {
        ro.on_node = inject_node;
        ro.ctx = &ri;
    }
    if (ptc_interp_run(p->graph, inputs, ninputs, outputs, &ro, err)) {
        if (ri.failed && err)
            *err = ri.err;
        return -1;
    }
    if (!host || !host->alloc)
        return 0;
    for (int i = 0; i < p->noutputs; i++) {
        ptc_tensor t;
        if (host->alloc(host->ctx, &t, outputs[i].dtype, outputs[i].ndim, outputs[i].sizes, PTC_CPU, err) ||
            ptc_tensor_copy(&t, &outputs[i], err)) {
            for (int j = 0; j < p->noutputs; j++)
                ptc_tensor_release(&outputs[j]);
            return -1;
        }
        ptc_tensor_release(&outputs[i]);
        outputs[i] = t;
    }
    return 0;
}

static int exec_on_backend(ptc_program *p, const ptc_tensor *inputs, int ninputs,
                           ptc_tensor *outputs, const ptc_host *host, uint64_t rng_offset,
                           ptc_error *err)
{
#ifdef PTC_HAVE_CUDA
    if (p->backend == PTC_BACKEND_CUDA)
        return ptc_exec_cuda(p, inputs, ninputs, outputs, host, rng_offset, err);
#endif
    return ptc_exec_cpu(p, inputs, ninputs, outputs, host, rng_offset, err);
}

/* ts[0, n) on the host: a copy of ts[i] where copy[i] (every one where copy
 * is NULL), else ts[i] itself, not owned. NULL with err on failure. */
static ptc_tensor *on_host(const ptc_tensor *ts, int n, const bool *copy, ptc_error *err)
{
    ptc_tensor *h = calloc((size_t)n + 1, sizeof *h);
    int rc = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        if (copy && !copy[i])
            h[i] = ts[i];
        else
            rc = ptc_tensor_to_device(&ts[i], PTC_CPU, &h[i], err);
    }
    if (rc == 0)
        return h;
    for (int i = 0; i < n; i++)
        if ((!copy || copy[i]) && h[i].storage)
            ptc_tensor_release(&h[i]);
    free(h);
    return NULL;
}

static void release_on_host(ptc_tensor *h, int n, const bool *copy)
{
    for (int i = 0; h && i < n; i++)
        if (!copy || copy[i])
            ptc_tensor_release(&h[i]);
    free(h);
}

/* The inputs the run writes in place (outputs merged into them,
 * lower/inplace.c). */
static bool *written_inputs(const ptc_program *p)
{
    bool *written = calloc((size_t)p->ninputs + 1, sizeof *written);
    for (int i = 0; i < p->noutputs; i++) {
        int in = ptc_program_output_input(p, i);
        if (in >= 0)
            written[in] = true;
    }
    return written;
}

/* Puts the written inputs back as they were before the run; where that
 * fails, err says the inputs hold the run's writes. */
static void put_back_written(const ptc_tensor *inputs, const ptc_tensor *before,
                             const bool *written, int ninputs, ptc_error *err)
{
    ptc_error ignored;
    for (int i = 0; i < ninputs; i++)
        if (written[i] && ptc_tensor_put_back(&inputs[i], &before[i], &ignored)) {
            err->inputs_written = true;
            return;
        }
}

/* PTC_ACCURACY=1: the first run of a new compile is checked against the
 * interpreter, which runs on the inputs as they were before the run (host
 * copies of those the run writes in place; on CUDA of all of them) and is
 * compared with the outputs (on CUDA, host copies). A divergence writes a
 * repro folder and fails the run after putting the written inputs back, so
 * that the fallback to eager starts from the values it was given. A run
 * whose RNG offset lies in a device cell (ptc_host.rng_cell) is not the one
 * checked, a later run is: the interpreter needs the offset's value. */
static int run_checked(ptc_program *p, const ptc_tensor *inputs, int ninputs,
                       ptc_tensor *outputs, const ptc_host *host, uint64_t rng_offset,
                       ptc_error *err)
{
    bool cuda = p->backend == PTC_BACKEND_CUDA, *written = written_inputs(p);
    ptc_tensor *before = on_host(inputs, ninputs, cuda ? NULL : written, err), *after = NULL;
    if (!before || exec_on_backend(p, inputs, ninputs, outputs, host, rng_offset, err)) {
        release_on_host(before, ninputs, cuda ? NULL : written);
        free(written);
        return -1;
    }
    int rc = cuda && !(after = on_host(outputs, p->noutputs, NULL, err)) ? -1 : 0;
    if (rc == 0 && ptc_accuracy_check(p->source, before, ninputs, after ? after : outputs,
                                      rng_offset, cuda ? "cuda" : "cpu", err)) {
        put_back_written(inputs, before, written, ninputs, err);
        rc = -1;
    }
    release_on_host(after, p->noutputs, NULL);
    release_on_host(before, ninputs, cuda ? NULL : written);
    free(written);
    for (int i = 0; rc && i < p->noutputs; i++)
        ptc_tensor_release(&outputs[i]);
    return rc;
}

int ptc_program_run(ptc_program *p, const ptc_tensor *inputs, int ninputs, ptc_tensor *outputs,
                    const ptc_host *host, uint64_t rng_offset, ptc_error *err)
{
    if (ninputs != p->ninputs)
        return ptc_errorf(err, PTC_ERR_RUNTIME, "runtime", "expected %d inputs, got %d", p->ninputs,
                          ninputs);
    if (p->backend == PTC_BACKEND_REFERENCE)
        return run_reference(p, inputs, ninputs, outputs, host, rng_offset, err);
    bool offset_known = !host || !host->rng_cell;
    if (p->source && offset_known &&
        __atomic_exchange_n(&p->accuracy_checked, 1, __ATOMIC_ACQ_REL) == 0)
        return run_checked(p, inputs, ninputs, outputs, host, rng_offset, err);
    return exec_on_backend(p, inputs, ninputs, outputs, host, rng_offset, err);
}

/* ---- shared by the executors ---------------------------------------------------------- */

int64_t ptc_exec_dim(const ptc_bindings *b, ptc_dim d)
{
    int64_t v = 0;
    if (ptc_dim_is_static(d))
        return d.value;
    ptc_dim_eval(d, b, &v, NULL);
    return v;
}

static bool symbolic_arg(const ptc_arg *a)
{
    bool sym = a->kind == PTC_ARG_INT && a->i.sym;
    for (int k = 0; a->kind == PTC_ARG_INTS && k < a->is.n; k++)
        sym |= a->is.d[k].sym != NULL;
    return sym;
}

const ptc_node *ptc_exec_bind_node(const ptc_node *n, const ptc_bindings *b, ptc_exec_bound *out)
{
    bool sym = false;
    for (int i = 0; i < n->nargs; i++)
        sym |= symbolic_arg(&n->args[i]);
    if (!sym)
        return n;
    PTC_ASSERT(n->nargs <= (int)(sizeof out->args / sizeof *out->args));
    out->node = *n;
    out->node.args = out->args;
    int used = 0;
    for (int i = 0; i < n->nargs; i++) {
        ptc_arg *a = &out->args[i];
        *a = n->args[i];
        if (a->kind == PTC_ARG_INT) {
            a->i = ptc_dim_c(ptc_exec_dim(b, a->i));
        } else if (a->kind == PTC_ARG_INTS && symbolic_arg(a)) {
            PTC_ASSERT(used + a->is.n <= (int)(sizeof out->dims / sizeof *out->dims));
            for (int k = 0; k < a->is.n; k++)
                out->dims[used + k] = ptc_dim_c(ptc_exec_dim(b, a->is.d[k]));
            a->is.d = &out->dims[used];
            used += a->is.n;
        }
    }
    return &out->node;
}

static bool same_sizes(const ptc_bindings *x, const ptc_bindings *y)
{
    if (x->n != y->n)
        return false;
    for (int i = 0; i < x->n; i++)
        if (x->values[i] != y->values[i] || strcmp(x->names[i], y->names[i]) != 0)
            return false;
    return true;
}

static int64_t buf_bytes(const ptc_program *p, const ptc_bindings *b, int buf)
{
    const ptc_lbuf *lb = p->prog->bufs[buf];
    int64_t sizes[PTC_MAX_DIMS];
    for (int d = 0; d < lb->ndim; d++)
        sizes[d] = ptc_exec_dim(b, lb->shape[d]);
    return (int64_t)ptc_dtype_size(lb->dtype) * ptc_lbuf_elems(lb, sizes);
}

/* The bytes live outside the arena at each step that change along the run:
 * the outputs from the step that writes each, and the inputs up to their
 * last read where the host lets them go (inputs_let_go). */
static int64_t *outside_bytes(const ptc_program *p, const ptc_bindings *b, bool inputs_let_go)
{
    const ptc_mplan *mp = &p->sched->plan;
    int nsteps = p->sched->nsteps;
    int64_t *outside = calloc((size_t)nsteps + 1, sizeof *outside);
    PTC_ASSERT(outside);
    for (int i = 0; i < mp->noutputs; i++)
        for (int t = mp->output_first[i] < 0 ? nsteps : mp->output_first[i]; t < nsteps; t++)
            outside[t] += buf_bytes(p, b, p->prog->outputs[i]);
    for (int buf = 0; inputs_let_go && buf < p->prog->nbufs; buf++) {
        const ptc_lbuf *lb = p->prog->bufs[buf];
        if (lb->kind != PTC_LB_INPUT || lb->input < 0 || lb->input >= mp->ninputs)
            continue;
        int last = mp->input_last[lb->input];
        for (int t = 0; t <= (last < 0 ? 0 : last) && t < nsteps; t++)
            outside[t] += buf_bytes(p, b, buf);
    }
    return outside;
}

/* Places the plan's arena buffers (in_arena) for the sizes in b, in
 * segments where segmented. */
static int place_layout(const ptc_program *p, const ptc_bindings *b, const bool *in_arena,
                        bool segmented, bool inputs_let_go, ptc_exec_layout *l, ptc_error *err)
{
    const ptc_mplan *mp = &p->sched->plan;
    for (int i = 0; i < mp->nbufs; i++)
        l->nbytes[i] = in_arena[i] ? buf_bytes(p, b, i) : 0;
    if (segmented) {
        int64_t *outside = outside_bytes(p, b, inputs_let_go);
        l->nsegs = ptc_mplan_segment(mp->nbufs, l->nbytes, mp->first, mp->last, in_arena,
                                     p->sched->nsteps, outside, l->seg_of, l->offset, l->seg_bytes);
        free(outside);
    } else {
        l->nsegs = 1;
        for (int i = 0; i < mp->nbufs; i++)
            l->seg_of[i] = 0;
        l->seg_bytes[0] =
            ptc_mplan_place(mp->nbufs, l->nbytes, mp->first, mp->last, in_arena, l->offset);
    }
    bool *mine = malloc((size_t)mp->nbufs + 1);
    PTC_ASSERT(mine);
    int rc = 0;
    for (int s = 0; s < l->nsegs && rc == 0; s++) {
        for (int i = 0; i < mp->nbufs; i++)
            mine[i] = in_arena[i] && l->seg_of[i] == s;
        rc = ptc_mplan_check(mp->nbufs, l->nbytes, mp->first, mp->last, mine, l->offset,
                             l->seg_bytes[s], err);
    }
    free(mine);
    return rc;
}

/* The plan's arena buffers less those an extern's kept result provides in
 * a run with host on dev (malloc'd); NULL when there are none. */
static bool *arena_without_provided(const ptc_program *p, const ptc_host *host, ptc_device dev,
                                    bool outs_given)
{
    const ptc_schedule *s = p->sched;
    bool *in_arena = NULL;
    for (int t = 0; t < s->nsteps; t++) {
        const ptc_lnode *n = p->prog->nodes[s->steps[t].index];
        if (s->steps[t].kind != PTC_STEP_EXTERN || !ptc_exec_extern_keeps(p, host, n, dev,
                                                                         outs_given))
            continue;
        if (!in_arena) {
            in_arena = malloc(sizeof *in_arena * ((size_t)s->plan.nbufs + 1));
            PTC_ASSERT(in_arena);
            memcpy(in_arena, s->plan.in_arena, sizeof *in_arena * (size_t)s->plan.nbufs);
        }
        for (int o = 0; o < 2; o++)
            if (n->out[o] >= 0)
                in_arena[n->out[o]] = false;
    }
    return in_arena;
}

/* The segments' sizes and spans from seg_of and the offsets. */
static void segment_table(const ptc_program *p, ptc_exec_layout *l)
{
    const ptc_mplan *mp = &p->sched->plan;
    l->size = 0;
    for (int s = 0; s < l->nsegs; s++)
        l->seg_bytes[s] = 0;
    for (int i = 0; i < mp->nbufs; i++)
        if (mp->in_arena[i] && l->nbytes[i] > 0) {
            int64_t end = l->offset[i] + l->nbytes[i];
            int s = l->seg_of[i];
            l->seg_bytes[s] = end > l->seg_bytes[s] ? end : l->seg_bytes[s];
        }
    for (int s = 0; s < l->nsegs; s++) {
        l->seg_bytes[s] = (l->seg_bytes[s] + 63) / 64 * 64;
        l->size += l->seg_bytes[s];
    }
    if (l->nsegs == 1) { /* one arena: held for the whole run */
        l->seg_first[0] = -1;
        l->seg_last[0] = p->sched->nsteps;
        return;
    }
    bool *placed = malloc((size_t)mp->nbufs + 1); /* less the buffers given no room */
    PTC_ASSERT(placed);
    for (int i = 0; i < mp->nbufs; i++)
        placed[i] = mp->in_arena[i] && l->nbytes[i] > 0;
    ptc_mplan_segment_spans(mp->nbufs, mp->first, mp->last, placed, l->nsegs, l->seg_of,
                            l->seg_first, l->seg_last);
    free(placed);
}

static int arena_layout(ptc_program *p, const ptc_bindings *b, const bool *provided_out,
                        bool segmented, bool inputs_let_go, ptc_exec_layout *l, ptc_error *err)
{
    const ptc_mplan *mp = &p->sched->plan;
    size_t n = (size_t)mp->nbufs * sizeof(int64_t), nseg = (size_t)mp->nbufs * sizeof(int);
    if (mp->is_static && !provided_out && !segmented) {
        memcpy(l->offset, mp->offset, n);
        memcpy(l->nbytes, mp->nbytes, n);
        memset(l->seg_of, 0, nseg);
        l->nsegs = 1;
        l->size = mp->arena_bytes;
        l->seg_bytes[0] = mp->arena_bytes;
        l->seg_first[0] = -1;
        l->seg_last[0] = p->sched->nsteps;
        return 0;
    }
    bool hit = false, provided = provided_out != NULL;
    pthread_mutex_lock(&p->lock);
    if (p->layout_offset && p->layout_provided == provided && p->layout_segmented == segmented &&
        same_sizes(&p->layout_sizes, b)) {
        memcpy(l->offset, p->layout_offset, n);
        memcpy(l->nbytes, p->layout_nbytes, n);
        memcpy(l->seg_of, p->layout_seg_of, nseg);
        l->nsegs = p->layout_nsegs;
        hit = true;
    }
    pthread_mutex_unlock(&p->lock);
    if (hit) {
        segment_table(p, l);
        return 0;
    }
    if (place_layout(p, b, provided ? provided_out : mp->in_arena, segmented, inputs_let_go, l,
                     err))
        return -1;
    segment_table(p, l);
    pthread_mutex_lock(&p->lock);
    if (!p->layout_offset) {
        p->layout_offset = malloc(n + sizeof(int64_t));
        p->layout_nbytes = malloc(n + sizeof(int64_t));
        p->layout_seg_of = malloc(nseg + sizeof(int));
    }
    if (p->layout_offset && p->layout_nbytes && p->layout_seg_of) {
        memcpy(p->layout_offset, l->offset, n);
        memcpy(p->layout_nbytes, l->nbytes, n);
        memcpy(p->layout_seg_of, l->seg_of, nseg);
        p->layout_nsegs = l->nsegs;
        p->layout_sizes = *b;
        p->layout_provided = provided;
        p->layout_segmented = segmented;
    }
    /* for tools */
    __atomic_store_n(&p->info.arena_bytes, (size_t)l->size, __ATOMIC_RELAXED);
    __atomic_store_n(&p->info.arena_segments, l->nsegs, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

int ptc_exec_arena_layout(ptc_program *p, const ptc_bindings *b, const ptc_host *host,
                          ptc_device dev, bool outs_given, bool segmented, ptc_exec_layout *l,
                          ptc_error *err)
{
    size_t n = (size_t)p->sched->plan.nbufs + 1;
    *l = (ptc_exec_layout){.offset = malloc(sizeof(int64_t) * n),
                           .nbytes = malloc(sizeof(int64_t) * n),
                           .seg_of = malloc(sizeof(int) * n)};
    PTC_ASSERT(l->offset && l->nbytes && l->seg_of);
    bool *in_arena = arena_without_provided(p, host, dev, outs_given);
    bool inputs_let_go = host && host->input_done && !p->source;
    int rc = arena_layout(p, b, in_arena, segmented, inputs_let_go, l, err);
    free(in_arena);
    if (rc == 0)
        return 0;
    ptc_exec_layout_free(l);
    return -1;
}

void ptc_exec_layout_free(ptc_exec_layout *l)
{
    free(l->offset);
    free(l->nbytes);
    free(l->seg_of);
    l->offset = l->nbytes = NULL;
    l->seg_of = NULL;
}

/* PTC_ARENA_SEGMENTS=0 turns segments off, 1 on on every device; unset,
 * they are on CUDA only; anything else warns once and acts as unset. */
bool ptc_exec_segments_on(const ptc_host *host, ptc_device dev)
{
    static int warned;
    bool on = ptc_env_switch("PTC_ARENA_SEGMENTS", dev.kind == PTC_DEV_CUDA, &warned,
                             "arenas are planned in segments on CUDA only, as by default");
    return host && host->alloc && on;
}

int ptc_exec_segments_alloc(const ptc_program *p, const ptc_exec_layout *l, const ptc_host *host,
                            ptc_device dev, int t, int *next, ptc_tensor *segs, void **bufptr,
                            ptc_error *err)
{
    const ptc_mplan *mp = &p->sched->plan;
    for (; *next < l->nsegs && l->seg_first[*next] <= t; ++*next) {
        int s = *next;
        int64_t bytes = l->seg_bytes[s];
        if (bytes > 0 && host->alloc(host->ctx, &segs[s], PTC_U8, 1, &bytes, dev, err))
            return -1;
        uintptr_t base = (uintptr_t)segs[s].data;
        for (int b = 0; b < mp->nbufs; b++) /* those of no bytes: ptc_exec_point_arena's */
            if (mp->in_arena[b] && l->seg_of[b] == s && l->nbytes[b] > 0)
                bufptr[b] = (void *)(base + (uintptr_t)l->offset[b]);
    }
    return 0;
}

void ptc_exec_segments_release_after(const ptc_exec_layout *l, int t, ptc_tensor *segs)
{
    for (int s = 0; s < l->nsegs; s++)
        if (l->seg_last[s] == t && (segs[s].storage || segs[s].data))
            ptc_tensor_release(&segs[s]);
}

void ptc_exec_point_arena(const ptc_program *p, const ptc_exec_layout *l, uintptr_t base,
                          const void *empty, void **bufptr)
{
    const ptc_mplan *mp = &p->sched->plan;
    for (int b = 0; b < mp->nbufs; b++)
        if (mp->in_arena[b])
            bufptr[b] = l->nbytes[b] ? (void *)(base + (uintptr_t)l->offset[b]) : (void *)empty;
}

void ptc_exec_point_inputs(const ptc_program *p, const ptc_tensor *inputs,
                           const ptc_tensor *conformed, const void *empty, void **bufptr)
{
    for (int i = 0; i < p->ninput_bufs; i++) {
        int b = p->input_bufs[i];
        const ptc_lbuf *lb = p->prog->bufs[b];
        const ptc_tensor *t = conformed && conformed[lb->input].storage ? &conformed[lb->input]
                                                                         : &inputs[lb->input];
        bufptr[b] = ptc_tensor_numel(t) && t->data ? t->data : (void *)empty;
    }
}

void ptc_exec_hand_over(const ptc_program *p, bool ok, ptc_tensor *outs, ptc_tensor *outputs)
{
    for (int i = 0; i < p->noutputs; i++) {
        if (ok)
            outputs[i] = outs[i];
        else if (outs[i].data || outs[i].storage)
            ptc_tensor_release(&outs[i]);
    }
}

/* Allocates output i (or shares the tensor of the first output that is the
 * same buffer, lb->output: output_order keeps outputs first written at one
 * step in index order, so that one is made before i) and points its buffer
 * at it. A scan of the outputs before i made each run quadratic in them: a
 * thin resnet50's training forward returns about 300. */
static int alloc_output(const ptc_program *p, const ptc_exec_alloc *a, int i, ptc_tensor *outs,
                        void **bufptr, ptc_error *err)
{
    int b = p->prog->outputs[i];
    const ptc_lbuf *lb = p->prog->bufs[b];
    if (lb->kind == PTC_LB_INPUT) { /* written into the input (ptc_schedule_write_in_place) */
        const ptc_tensor *c = a->conformed ? &a->conformed[lb->input] : NULL;
        outs[i] = c && c->storage ? *c : a->inputs[lb->input];
        ptc_tensor_retain(&outs[i]);
        return 0;
    }
    int first = lb->kind == PTC_LB_OUTPUT ? lb->output : -1;
    if (first >= 0 && first != i && (outs[first].data || outs[first].storage)) {
        outs[i] = outs[first];
        ptc_tensor_retain(&outs[i]);
        return 0;
    }
    const ptc_ttype *t = &p->out_types[i];
    int64_t sizes[PTC_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++)
        sizes[d] = ptc_exec_dim(a->b, t->shape[d]);
    ptc_tensor *o = &outs[i];
    int rc = a->host && a->host->alloc_output
                 ? a->host->alloc_output(a->host->output_ctx, i, outs, p->noutputs, err)
                 : 0;
    if (rc == 0)
        rc = a->host && a->host->alloc
                 ? a->host->alloc(a->host->ctx, o, t->dtype, t->ndim, sizes, a->device, err)
                 : a->own(a->ctx, o, t->dtype, t->ndim, sizes, err);
    if (rc < 0)
        return -1;
    if (ptc_tensor_numel(o) > 0 && !ptc_tensor_is_contiguous(o))
        return ptc_errorf(err, PTC_ERR_RUNTIME, "runtime",
                          "the host allocated output %d non-contiguous", i);
    bufptr[b] = ptc_tensor_numel(o) ? o->data : a->empty;
    return 0;
}

/* Output i is an extern's result handed over (result_as_output): a tensor
 * allocated for it would be released unwritten. (Under max-autotune ptc's
 * GEMM may write a matmul's output instead.) */
static bool made_by_extern(const ptc_program *p, const ptc_exec_alloc *a, int i)
{
    const ptc_lbuf *lb = p->prog->bufs[p->prog->outputs[i]];
    const ptc_lnode *n = lb->def >= 0 ? p->prog->nodes[lb->def] : NULL;
    return a->extern_results_are_outputs && !p->tune && n && n->kind == PTC_LN_EXTERN &&
           ptc_exec_extern_keeps(p, a->host, n, a->device, true);
}

/* Every output's dtype, sizes and device in outs before any is made, for
 * the host's alloc_output; ndim -1 for those the run does not allocate. */
static void describe_outputs(const ptc_program *p, const ptc_exec_alloc *a, ptc_tensor *outs)
{
    for (int i = 0; i < p->noutputs; i++) {
        const ptc_lbuf *lb = p->prog->bufs[p->prog->outputs[i]];
        int first = lb->kind == PTC_LB_OUTPUT ? lb->output : -1;
        const ptc_ttype *t = &p->out_types[i];
        ptc_tensor *o = &outs[i];
        *o = (ptc_tensor){.dtype = t->dtype, .ndim = t->ndim, .device = a->device};
        if (lb->kind == PTC_LB_INPUT || (first >= 0 && first != i) || made_by_extern(p, a, i))
            o->ndim = -1;
        for (int d = 0; d < o->ndim; d++)
            o->sizes[d] = ptc_exec_dim(a->b, t->shape[d]);
    }
}

int ptc_exec_alloc_outputs(const ptc_program *p, const ptc_exec_alloc *a, int t, int *next,
                           ptc_tensor *outs, void **bufptr, ptc_error *err)
{
    const ptc_mplan *mp = &p->sched->plan;
    if (t < 0 && *next == 0 && a->host && a->host->alloc_output)
        describe_outputs(p, a, outs);
    for (; *next < mp->noutputs && mp->output_first[mp->output_order[*next]] <= t; ++*next) {
        int i = mp->output_order[*next];
        if (!made_by_extern(p, a, i) && alloc_output(p, a, i, outs, bufptr, err))
            return -1;
    }
    return 0;
}

int ptc_exec_check_inputs(const ptc_program *p, const ptc_tensor *in, ptc_bindings *b,
                          ptc_error *err)
{
    int before;
    do {
        before = b->n;
        for (int i = 0; i < p->ninputs; i++)
            if (ptc_tensor_check_type(&in[i], &p->in_types[i], b, p->in_names[i], err))
                return -1;
    } while (b->n > before);
    return 0;
}

void ptc_exec_typed_strides(const ptc_bindings *b, const ptc_ttype *t, int64_t *strides)
{
    if (t->layout == PTC_LAYOUT_STRIDED) {
        for (int d = 0; d < t->ndim; d++)
            strides[d] = ptc_exec_dim(b, t->strides[d]);
        return;
    }
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        strides[d] = s;
        s *= ptc_exec_dim(b, t->shape[d]);
    }
}

ptc_tensor ptc_exec_view(const ptc_program *p, const ptc_bindings *b, void *const *bufptr,
                         const ptc_lview *v, ptc_device dev)
{
    const ptc_lbuf *lb = p->prog->bufs[v->buf];
    ptc_tensor t = {0};
    t.dtype = lb->dtype;
    t.ndim = v->ndim;
    t.device = dev;
    for (int d = 0; d < v->ndim; d++) {
        t.sizes[d] = ptc_exec_dim(b, v->sizes[d]);
        t.strides[d] = ptc_exec_dim(b, v->strides[d]);
    }
    t.data =
        (char *)bufptr[v->buf] + ptc_exec_dim(b, v->offset) * (int64_t)ptc_dtype_size(lb->dtype);
    return t;
}

int ptc_exec_extern_args(const ptc_program *p, const ptc_bindings *b, void *const *bufptr,
                         const ptc_lnode *n, ptc_device dev, ptc_tensor in[16],
                         const ptc_tensor *inp[16], ptc_tensor outs[2])
{
    for (int i = 0; i < n->nxin && i < 16; i++) {
        inp[i] = NULL;
        if (n->xin[i].buf < 0)
            continue;
        in[i] = ptc_exec_view(p, b, bufptr, &n->xin[i], dev);
        inp[i] = &in[i];
    }
    int nout = 0;
    for (int o = 0; o < 2; o++) {
        if (n->out[o] < 0)
            continue;
        const ptc_lbuf *lb = p->prog->bufs[n->out[o]];
        ptc_tensor *t = &outs[nout++];
        *t = (ptc_tensor){0};
        ptc_exec_buf_logical(b, lb, t);
        t->device = dev;
        t->data = bufptr[lb->id];
    }
    return nout;
}

void ptc_exec_buf_logical(const ptc_bindings *b, const ptc_lbuf *lb, ptc_tensor *t)
{
    int64_t stored[PTC_MAX_DIMS];
    for (int d = 0; d < lb->ndim; d++)
        stored[d] = ptc_exec_dim(b, lb->shape[d]);
    t->dtype = lb->dtype;
    t->ndim = lb->ndim;
    ptc_lbuf_logical(lb, stored, t->sizes, t->strides);
}

/* t has want's sizes and, where a size is not 1, its strides. */
static bool same_layout(const ptc_tensor *t, const ptc_tensor *want)
{
    if (t->ndim != want->ndim)
        return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->sizes[d] != want->sizes[d] ||
            (t->sizes[d] != 1 && t->strides[d] != want->strides[d]))
            return false;
    return true;
}

/* t has want's sizes and some dense layout. */
static bool same_sizes_dense(const ptc_tensor *t, const ptc_tensor *want)
{
    if (t->ndim != want->ndim)
        return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->sizes[d] != want->sizes[d])
            return false;
    return ptc_tensor_is_dense(t);
}

void ptc_exec_list_input_bufs(ptc_program *p)
{
    const ptc_lprog *lp = p->prog;
    p->input_bufs = PTC_NEWN(p->arena, int, lp->nbufs + 1);
    p->ninput_bufs = 0;
    for (int b = 0; b < lp->nbufs; b++)
        if (lp->bufs[b]->kind == PTC_LB_INPUT)
            p->input_bufs[p->ninput_bufs++] = b;
}

void ptc_exec_mark_any_layouts(ptc_program *p)
{
    const ptc_lprog *lp = p->prog;
    p->any_layout = PTC_NEWN(p->arena, bool, lp->nbufs + 1);
    for (int b = 0; b < lp->nbufs; b++) {
        const ptc_lbuf *lb = lp->bufs[b];
        p->any_layout[b] = lb->kind == PTC_LB_OUTPUT && lb->def >= 0 && lp->nodes[lb->def] &&
                           lp->nodes[lb->def]->kind == PTC_LN_EXTERN &&
                           ptc_lprog_readers(lp, b, NULL, 0) == 0;
    }
}

/* Keeps an extern's result tensor t for the rest of the run as buffer buf
 * (t laid out as the buffer: contiguous, or channels-last for a buffer
 * layout planning permuted; any dense layout for a buffer of any_layout). */
static int keep_result(const ptc_program *p, const ptc_bindings *b, void **bufptr, int buf,
                       ptc_tensor *t, ptc_device dev, ptc_exec_kept *kept, ptc_error *err)
{
    const ptc_lbuf *lb = p->prog->bufs[buf];
    ptc_tensor want;
    ptc_exec_buf_logical(b, lb, &want);
    bool any = p->any_layout && p->any_layout[buf];
    bool ok =
        t->dtype == lb->dtype && t->device.kind == dev.kind &&
        (ptc_tensor_numel(t) == 0 || (any ? same_sizes_dense(t, &want) : same_layout(t, &want)));
    if (kept->n == kept->cap) {
        kept->cap = kept->cap ? 2 * kept->cap : 16;
        kept->t = realloc(kept->t, sizeof *kept->t * (size_t)kept->cap);
        kept->buf = realloc(kept->buf, sizeof *kept->buf * (size_t)kept->cap);
        PTC_ASSERT(kept->t != NULL && kept->buf != NULL);
    }
    kept->buf[kept->n] = buf;
    kept->t[kept->n++] = *t;
    if (!ok)
        return ptc_errorf(err, PTC_ERR_RUNTIME, "runtime",
                          "extern result for %s is not a %s %s tensor of its type", lb->name,
                          any            ? "dense"
                          : lb->permuted ? "channels-last"
                                         : "contiguous",
                          dev.kind == PTC_DEV_CUDA ? "CUDA" : "CPU");
    if (ptc_tensor_numel(t) > 0)
        bufptr[buf] = t->data;
    return 0;
}

bool ptc_exec_extern_by_host(const ptc_host *host, const ptc_lnode *n, ptc_device dev)
{
    if (!host || !host->run_extern)
        return false;
    return n->xkind == PTC_XK_HOST || dev.kind == PTC_DEV_CUDA;
}

/* Makes the kept result kept->t[kept->n - 1] graph output buf: every output
 * that is buf takes it (a reference each), the tensor allocated for them
 * is released. */
static void result_as_output(const ptc_program *p, int buf, ptc_exec_kept *kept)
{
    ptc_tensor *t = &kept->t[--kept->n];
    for (int i = 0; i < p->noutputs; i++) {
        if (p->prog->outputs[i] != buf)
            continue;
        if (kept->outs[i].data || kept->outs[i].storage)
            ptc_tensor_release(&kept->outs[i]);
        kept->outs[i] = *t;
        ptc_tensor_retain(&kept->outs[i]);
    }
    ptc_tensor_release(t);
}

/* Output buffer lb has its graph output's sizes: it is not a reshape of
 * the output (lower.c), so a result of the buffer's sizes can be the output. */
static bool shaped_as_output(const ptc_program *p, const ptc_lbuf *lb)
{
    const ptc_ttype *t = &p->out_types[lb->output];
    if (t->ndim != lb->ndim)
        return false;
    for (int d = 0; d < t->ndim; d++)
        if (!ptc_dim_eq(t->shape[d], lb->shape[d]))
            return false;
    return true;
}

bool ptc_exec_extern_keeps(const ptc_program *p, const ptc_host *host, const ptc_lnode *n,
                           ptc_device dev, bool outs_given)
{
    if (!ptc_exec_extern_by_host(host, n, dev) || !host->run_extern_new ||
        (host->writes_in_place && host->writes_in_place(host->ctx, n->xnode)))
        return false;
    for (int o = 0; o < 2; o++) {
        const ptc_lbuf *lb = n->out[o] >= 0 ? p->prog->bufs[n->out[o]] : NULL;
        if (lb && lb->kind != PTC_LB_TEMP &&
            !(lb->kind == PTC_LB_OUTPUT && outs_given && shaped_as_output(p, lb)))
            return false;
        /* torch allocates its results contiguous: a padded buffer is
           written through out= (host->run_extern) */
        if (lb && lb->padded)
            return false;
    }
    return true;
}

int ptc_exec_extern_kept(const ptc_program *p, const ptc_bindings *b, void **bufptr,
                         const ptc_host *host, const ptc_lnode *n, const ptc_node *node,
                         const ptc_tensor *const *inp, ptc_device dev, ptc_exec_kept *kept,
                         ptc_error *err)
{
    if (!ptc_exec_extern_keeps(p, host, n, dev, kept->outs != NULL))
        return 1;
    /* res[k] arrives with the layout its buffer wants (sizes and strides;
       strides all 0: any dense layout) */
    ptc_tensor res[2] = {{0}};
    for (int o = 0, k = 0; o < 2; o++)
        if (n->out[o] >= 0) {
            ptc_exec_buf_logical(b, p->prog->bufs[n->out[o]], &res[k]);
            if (kept->outs && p->any_layout && p->any_layout[n->out[o]])
                memset(res[k].strides, 0, sizeof res[k].strides);
            k++;
        }
    if (host->run_extern_new(host->ctx, node, inp, n->nxin, res, err))
        return -1;
    int rc = 0;
    for (int o = 0, k = 0; o < 2; o++)
        if (n->out[o] >= 0) {
            if (rc == 0)
                rc = keep_result(p, b, bufptr, n->out[o], &res[k], dev, kept, err);
            else if (res[k].storage || res[k].data)
                ptc_tensor_release(&res[k]);
            if (rc == 0 && p->prog->bufs[n->out[o]]->kind == PTC_LB_OUTPUT)
                result_as_output(p, n->out[o], kept);
            k++;
        }
    return rc;
}

void ptc_exec_kept_release(ptc_exec_kept *kept)
{
    for (int i = 0; i < kept->n; i++)
        if (kept->buf[i] >= 0)
            ptc_tensor_release(&kept->t[i]);
    free(kept->t);
    free(kept->buf);
    *kept = (ptc_exec_kept){0};
}

void ptc_exec_inputs_done_after(const ptc_program *p, const ptc_host *host, int t, int *next)
{
    if (!host || !host->input_done || p->source)
        return;
    const ptc_mplan *mp = &p->sched->plan;
    for (; *next < mp->ninputs && mp->input_last[mp->input_order[*next]] <= t; ++*next)
        host->input_done(host->ctx, mp->input_order[*next]);
}

/* Does step t store into a graph input (an output merged into it)? */
static bool step_writes_input(const ptc_program *p, int t)
{
    const ptc_schedule *s = p->sched;
    if (s->steps[t].kind != PTC_STEP_KERNEL)
        return false;
    const ptc_kernel *k = s->kernels[s->steps[t].index];
    for (int g = 0; g < k->ngroups; g++)
        for (int m = 0; m < k->groups[g].nmembers; m++) {
            const ptc_lnode *n = p->prog->nodes[k->groups[g].members[m].node];
            for (int o = 0; o < 2; o++)
                if (n->out[o] >= 0 && p->prog->bufs[n->out[o]]->kind == PTC_LB_INPUT)
                    return true;
        }
    return false;
}

void ptc_exec_failed_after(const ptc_program *p, int t, ptc_error *err)
{
    if (!err)
        return;
    for (int u = 0; u < t && u < p->sched->nsteps; u++)
        if (step_writes_input(p, u)) {
            err->inputs_written = true;
            return;
        }
}

void ptc_exec_kept_release_after(const ptc_program *p, ptc_exec_kept *kept, int t)
{
    const ptc_mplan *mp = &p->sched->plan;
    for (int i = 0; i < kept->n; i++) {
        int b = kept->buf[i];
        if (b >= 0 && p->prog->bufs[b]->kind == PTC_LB_TEMP && mp->in_arena[b] &&
            mp->last[b] <= t) {
            ptc_tensor_release(&kept->t[i]);
            kept->buf[i] = -1;
        }
    }
}
