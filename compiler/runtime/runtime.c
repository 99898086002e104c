/* The pipeline driver and compiled programs.
 *
 * ptc_compile runs one flat list of stages with a checker after each:
 *   verify -> decompose + simplify -> ptc_ops_verify (prims)
 *   -> lower -> loop verifier -> schedule -> kernel and memory-plan checker
 *   -> codegen (LLVM verifier inside)
 * Every stage is timed into the metrics, printed to its log component when
 * that is on, and written to the trace directory when there is one
 * (captured.ptir, prims.ptir, loops.txt, kernels.txt, kernel_<n>.ll). A
 * failing stage leaves its name in err->stage. The reference backend keeps a
 * copy of the input graph and runs the interpreter on it.
 */
#include "runtime/rt.h"

#include "lower/lower.h"
#ifdef PTC_HAVE_CUDA
#include "runtime/cuda_rt.h"
#endif
#include "passes/passes.h"

#include <stdlib.h>
#include <string.h>

typedef struct pipe {
    const ptc_compile_opts *o;
    ptc_metrics m;
    ptc_error *err;
    bool want_text;
    ptc_program *p;
} pipe_t;

static void stage_done(pipe_t *s, const char *stage, double t0)
{
    double ms = ptc_now_ms() - t0;
    ptc_metrics_add(&s->m, stage, ms, true);
    ptc_log(PTC_LOG_PERF, PTC_LOG_INFO, "%s: %.2f ms", stage, ms);
}

/* Keeps a stage's text, logs it and writes it to the trace. */
static int emit_text(pipe_t *s, int slot, ptc_logc log, const char *stage, const char *file,
                     char *text)
{
    int rc = 0;
    if (ptc_log_on(log, PTC_LOG_INFO))
        ptc_log_block(log, PTC_LOG_INFO, stage, text);
    if (s->o && s->o->trace && file)
        rc = ptc_trace_write(s->o->trace, stage, file, text, strlen(text), s->err);
    if (slot >= 0 && s->o && s->o->keep_text)
        s->p->text[slot] = text;
    else
        free(text);
    return rc;
}

static bool want_log(ptc_logc c) { return ptc_log_on(c, PTC_LOG_INFO); }

static void copy_types(ptc_program *p, const ptc_graph *g)
{
    ptc_arena *a = p->arena;
    p->ninputs = g->ninputs;
    p->noutputs = g->noutputs;
    p->in_types = PTC_NEWN(a, ptc_ttype, g->ninputs + 1);
    p->in_names = PTC_NEWN(a, const char *, g->ninputs + 1);
    p->out_types = PTC_NEWN(a, ptc_ttype, g->noutputs + 1);
    for (int i = 0; i < g->ninputs; i++) {
        ptc_ttype t = g->inputs[i]->type;
        for (int d = 0; d < t.ndim; d++) {
            t.shape[d] = ptc_dim_copy(a, t.shape[d]);
            t.strides[d] = ptc_dim_copy(a, t.strides[d]);
        }
        p->in_types[i] = t;
        p->in_names[i] = ptc_arena_strdup(a, g->inputs[i]->name);
    }
    for (int i = 0; i < g->noutputs; i++) {
        ptc_ttype t = g->outputs[i]->type;
        for (int d = 0; d < t.ndim; d++) {
            t.shape[d] = ptc_dim_copy(a, t.shape[d]);
            t.strides[d] = ptc_dim_copy(a, t.strides[d]);
        }
        p->out_types[i] = t;
    }
}

static ptc_program *program_new(ptc_backend b)
{
    ptc_program *p = calloc(1, sizeof *p);
    p->refs = 1;
    p->backend = b;
    p->arena = ptc_arena_new();
    pthread_mutex_init(&p->lock, NULL);
    return p;
}

static char *graph_text(const ptc_graph *g)
{
    ptc_buf b = {0};
    ptc_print_graph(&b, g);
    return b.data;
}

/* decompose -> simplify -> verify */
static int stage_prims(pipe_t *s, const ptc_graph *g)
{
    double t0 = ptc_now_ms();
    ptc_graph *prims = ptc_decompose(g, s->err);
    if (!prims)
        return -1;
    s->p->graph = prims;
    if (ptc_simplify(prims, s->err) || ptc_ops_verify(prims, PTC_STAGE_PRIM, s->err)) {
        if (s->err && !s->err->stage[0])
            snprintf(s->err->stage, sizeof s->err->stage, "prims");
        return -1;
    }
    stage_done(s, "prims", t0);
    ptc_metrics_add(&s->m, "prims_nodes", prims->nnodes, false);
    if (s->o && s->o->trace && ptc_trace_graph(s->o->trace, "prims", prims, s->err))
        return -1;
    if (want_log(PTC_LOG_PRIMS) || (s->o && s->o->keep_text))
        return emit_text(s, PTC_TEXT_PRIMS, PTC_LOG_PRIMS, "prims", NULL, graph_text(prims));
    return 0;
}

static int stage_loops(pipe_t *s)
{
    double t0 = ptc_now_ms();
    ptc_program *p = s->p;
    p->prog = ptc_lower(p->arena, p->graph, s->err);
    if (!p->prog)
        return -1;
    stage_done(s, "loops", t0);
    int n = 0;
    for (int i = 0; i < p->prog->nnodes; i++)
        n += p->prog->nodes[i] != NULL;
    ptc_metrics_add(&s->m, "loop_nodes", n, false);
    if (!s->want_text && !want_log(PTC_LOG_LOOPS))
        return 0;
    ptc_buf b = {0};
    ptc_lprog_print(&b, p->prog);
    return emit_text(s, PTC_TEXT_LOOPS, PTC_LOG_LOOPS, "loops", "loops.txt", b.data);
}

static int stage_kernels(pipe_t *s)
{
    double t0 = ptc_now_ms();
    ptc_program *p = s->p;
    ptc_sched_opts so = {0};
    /* a GPU wants thousands of outer iterations per kernel, not a few per core */
    if (p->backend == PTC_BACKEND_CUDA)
        so.nthreads = 1024;
    p->sched = ptc_schedule_build(p->arena, p->prog, &so, s->err);
    if (!p->sched)
        return -1;
    stage_done(s, "kernels", t0);
    int nx = 0;
    for (int i = 0; i < p->sched->nsteps; i++)
        nx += p->sched->steps[i].kind == PTC_STEP_EXTERN;
    p->info.nkernels = p->sched->nkernels;
    p->info.nexterns = nx;
    p->info.arena_bytes = p->sched->plan.is_static ? (size_t)p->sched->plan.arena_bytes : 0;
    ptc_metrics_add(&s->m, "kernels", p->sched->nkernels, false);
    ptc_metrics_add(&s->m, "externs", nx, false);
    ptc_metrics_add(&s->m, "inlined", p->sched->ninlined, false);
    ptc_metrics_add(&s->m, "fusions_refused",
                    p->sched->nrefused_recompute + p->sched->nrefused_memory, false);
    if (!s->want_text && !want_log(PTC_LOG_KERNELS))
        return 0;
    ptc_buf b = {0};
    ptc_schedule_print(&b, p->sched);
    return emit_text(s, PTC_TEXT_KERNELS, PTC_LOG_KERNELS, "kernels", "kernels.txt", b.data);
}

static int stage_codegen(pipe_t *s)
{
    double t0 = ptc_now_ms();
    ptc_program *p = s->p;
    int nk = p->sched->nkernels;
    bool text = s->want_text || want_log(PTC_LOG_OUTPUT_CODE);
    char **texts = text ? calloc((size_t)nk + 1, sizeof *texts) : NULL;
    p->kernels = calloc((size_t)nk + 1, sizeof *p->kernels);
    ptc_codegen_opts co = {.no_cache = s->o && s->o->no_cache,
                           .kernel_dir = s->o ? s->o->kernel_dir : NULL,
                           .want_text = text,
                           .metrics = &s->m};
    bool cuda = p->backend == PTC_BACKEND_CUDA;
    int rc;
#ifdef PTC_HAVE_CUDA
    if (cuda)
        rc = ptc_cuda_prepare(p, s->o, &s->m, texts, s->err);
    else
#endif
        rc = ptc_cpu_compile(p->sched, &co, p->kernels, texts, s->err);
    if (rc == 0) {
        stage_done(s, "codegen", t0);
        for (int k = 0; k < nk; k++)
            p->info.ncached += p->kernels[k].cached;
        p->info.ncompiled = nk - p->info.ncached;
        ptc_metrics_add(&s->m, "kernels_compiled", p->info.ncompiled, false);
        ptc_metrics_add(&s->m, "kernels_cached", p->info.ncached, false);
        ptc_log(PTC_LOG_CACHE, PTC_LOG_INFO, "kernels: %d compiled, %d cached (%s)",
                p->info.ncompiled, p->info.ncached,
                s->o && s->o->kernel_dir ? s->o->kernel_dir : ptc_cache_dir());
    }
    ptc_buf all = {0};
    for (int k = 0; texts && k < nk; k++) {
        if (rc == 0 && s->o && s->o->trace) {
            char file[32];
            snprintf(file, sizeof file, "kernel_%d.%s", k, cuda ? "ptx" : "ll");
            rc = ptc_trace_write(s->o->trace, k == 0 ? (cuda ? "ptx" : "llvm") : NULL, file, texts[k],
                                 strlen(texts[k]), s->err);
        }
        if (texts[k])
            ptc_buf_puts(&all, texts[k]);
        free(texts[k]);
    }
    free(texts);
    if (rc == 0 && all.data)
        rc = emit_text(s, cuda ? PTC_TEXT_PTX : PTC_TEXT_LLVM, PTC_LOG_OUTPUT_CODE, "output_code",
                       NULL, all.data);
    else
        ptc_buf_free(&all);
    return rc;
}

/* Between stages: a stage whose arenas ran out of memory (ir.h) fails the
 * compile here, before its result is used. */
static int memory_left(pipe_t *s, const ptc_graph *g, const char *stage)
{
    ptc_program *p = s->p;
    if (!ptc_arena_failed(g->arena) && !ptc_arena_failed(p->arena) &&
        !(p->graph && ptc_arena_failed(p->graph->arena)))
        return 0;
    return ptc_errorf(s->err, PTC_ERR_COMPILE, stage,
                      "out of memory: compiling this graph of %d nodes needs more memory than "
                      "the process may use",
                      g->nnodes);
}

static void merge_metrics(pipe_t *s, double t0)
{
    ptc_metrics_add(&s->m, "total", ptc_now_ms() - t0, true);
    ptc_metrics *dst[2] = {s->o ? s->o->metrics : NULL,
                           s->o && s->o->trace ? ptc_trace_metrics(s->o->trace) : NULL};
    for (int d = 0; d < 2; d++)
        for (int i = 0; dst[d] && i < s->m.n; i++)
            ptc_metrics_add(dst[d], s->m.items[i].name, s->m.items[i].value, s->m.items[i].is_time);
}

ptc_program *ptc_compile(const ptc_graph *g, const ptc_compile_opts *opts, ptc_error *err)
{
    ptc_log_init();
    double t0 = ptc_now_ms();
    ptc_backend backend = opts ? opts->backend : PTC_BACKEND_CPU;
#ifndef PTC_HAVE_CUDA
    if (backend == PTC_BACKEND_CUDA) {
        ptc_errorf(err, PTC_ERR_UNSUPPORTED, "codegen",
                   "the CUDA backend is not part of this build (configured with PTC_CUDA=OFF)");
        return NULL;
    }
#endif
    if (backend != PTC_BACKEND_CPU && backend != PTC_BACKEND_REFERENCE &&
        backend != PTC_BACKEND_CUDA) {
        ptc_errorf(err, PTC_ERR_UNSUPPORTED, "codegen", "unknown backend %d", (int)backend);
        return NULL;
    }
    if (ptc_ops_verify(g, 0, err))
        return NULL;
    pipe_t s = {.o = opts, .err = err};
    s.want_text = opts && (opts->keep_text || opts->trace);
    ptc_program *p = program_new(backend);
    s.p = p;
    copy_types(p, g);
    ptc_metrics_add(&s.m, "captured_nodes", g->nnodes, false);
    int rc = 0;
    if (opts && opts->trace)
        rc = ptc_trace_graph(opts->trace, "captured", g, err);
    if (want_log(PTC_LOG_CAPTURED)) {
        char *t = graph_text(g);
        ptc_log_block(PTC_LOG_CAPTURED, PTC_LOG_INFO, "captured", t);
        free(t);
    }
    if (rc == 0 && backend == PTC_BACKEND_REFERENCE) {
        p->graph = ptc_graph_clone(g, NULL);
    } else if (rc == 0) {
        if (ptc_accuracy_enabled())
            p->source = ptc_graph_clone(g, NULL);
        rc = memory_left(&s, g, "capture") || stage_prims(&s, g) || memory_left(&s, g, "prims") ||
             stage_loops(&s) || memory_left(&s, g, "loops") || stage_kernels(&s) ||
             memory_left(&s, g, "kernels") || stage_codegen(&s);
    }
    merge_metrics(&s, t0);
    if (rc) {
        ptc_program_release(p);
        return NULL;
    }
    return p;
}

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
    pthread_mutex_destroy(&p->lock);
    free(p);
}

void ptc_program_get_info(const ptc_program *p, ptc_program_info *info)
{
    *info = p->info;
    info->arena_bytes = __atomic_load_n(&p->info.arena_bytes, __ATOMIC_RELAXED);
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

#ifdef PTC_HAVE_CUDA
/* PTC_ACCURACY on the CUDA backend: the interpreter runs on host copies of
 * the inputs and is compared with host copies of the outputs. */
static int cuda_accuracy(ptc_program *p, const ptc_tensor *inputs, int ninputs,
                         const ptc_tensor *outputs, uint64_t rng_offset, ptc_error *err)
{
    ptc_tensor *hin = calloc((size_t)ninputs + 1, sizeof *hin);
    ptc_tensor *hout = calloc((size_t)p->noutputs + 1, sizeof *hout);
    int rc = 0, nin = 0, nout = 0;
    for (; rc == 0 && nin < ninputs; nin++)
        rc = ptc_tensor_to_device(&inputs[nin], PTC_CPU, &hin[nin], err);
    for (; rc == 0 && nout < p->noutputs; nout++)
        rc = ptc_tensor_to_device(&outputs[nout], PTC_CPU, &hout[nout], err);
    if (rc == 0)
        rc = ptc_accuracy_check(p->source, hin, ninputs, hout, rng_offset, "cuda", err);
    for (int i = 0; i < ninputs; i++)
        if (hin[i].storage)
            ptc_tensor_release(&hin[i]);
    for (int i = 0; i < p->noutputs; i++)
        if (hout[i].storage)
            ptc_tensor_release(&hout[i]);
    free(hin);
    free(hout);
    return rc;
}
#endif

int ptc_program_run(ptc_program *p, const ptc_tensor *inputs, int ninputs, ptc_tensor *outputs,
                    const ptc_host *host, uint64_t rng_offset, ptc_error *err)
{
    if (ninputs != p->ninputs)
        return ptc_errorf(err, PTC_ERR_RUNTIME, "runtime", "expected %d inputs, got %d", p->ninputs,
                          ninputs);
    if (p->backend == PTC_BACKEND_REFERENCE)
        return run_reference(p, inputs, ninputs, outputs, host, rng_offset, err);
#ifdef PTC_HAVE_CUDA
    if (p->backend == PTC_BACKEND_CUDA) {
        if (ptc_exec_cuda(p, inputs, ninputs, outputs, host, rng_offset, err))
            return -1;
        if (p->source && __atomic_exchange_n(&p->accuracy_checked, 1, __ATOMIC_ACQ_REL) == 0 &&
            cuda_accuracy(p, inputs, ninputs, outputs, rng_offset, err)) {
            for (int i = 0; i < p->noutputs; i++)
                ptc_tensor_release(&outputs[i]);
            return -1;
        }
        return 0;
    }
#endif
    if (ptc_exec_cpu(p, inputs, ninputs, outputs, host, rng_offset, err))
        return -1;
    /* PTC_ACCURACY=1: the first run of a new compile is checked against the
     * interpreter; a divergence writes a repro folder and fails the run. */
    if (p->source && __atomic_exchange_n(&p->accuracy_checked, 1, __ATOMIC_ACQ_REL) == 0 &&
        ptc_accuracy_check(p->source, inputs, ninputs, outputs, rng_offset, "cpu", err)) {
        for (int i = 0; i < p->noutputs; i++)
            ptc_tensor_release(&outputs[i]);
        return -1;
    }
    return 0;
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

static bool same_sizes(const ptc_bindings *x, const ptc_bindings *y)
{
    if (x->n != y->n)
        return false;
    for (int i = 0; i < x->n; i++)
        if (x->values[i] != y->values[i] || strcmp(x->names[i], y->names[i]) != 0)
            return false;
    return true;
}

/* Places a symbolic plan's buffers for the sizes in b. */
static int place_layout(const ptc_program *p, const ptc_bindings *b, int64_t *offset,
                        int64_t *nbytes, int64_t *size, ptc_error *err)
{
    const ptc_mplan *mp = &p->sched->plan;
    for (int i = 0; i < mp->nbufs; i++) {
        nbytes[i] = 0;
        if (!mp->in_arena[i])
            continue;
        const ptc_lbuf *lb = p->prog->bufs[i];
        nbytes[i] = (int64_t)ptc_dtype_size(lb->dtype);
        for (int d = 0; d < lb->ndim; d++)
            nbytes[i] *= ptc_exec_dim(b, lb->shape[d]);
    }
    *size = ptc_mplan_place(mp->nbufs, nbytes, mp->first, mp->last, mp->in_arena, offset);
    return ptc_mplan_check(mp->nbufs, nbytes, mp->first, mp->last, mp->in_arena, offset, *size,
                           err);
}

int ptc_exec_arena_layout(ptc_program *p, const ptc_bindings *b, int64_t *offset, int64_t *nbytes,
                          int64_t *size, ptc_error *err)
{
    const ptc_mplan *mp = &p->sched->plan;
    size_t n = (size_t)mp->nbufs * sizeof(int64_t);
    if (mp->is_static) {
        memcpy(offset, mp->offset, n);
        memcpy(nbytes, mp->nbytes, n);
        *size = mp->arena_bytes;
        return 0;
    }
    bool hit = false;
    pthread_mutex_lock(&p->lock);
    if (p->layout_offset && same_sizes(&p->layout_sizes, b)) {
        memcpy(offset, p->layout_offset, n);
        memcpy(nbytes, p->layout_nbytes, n);
        *size = p->layout_size;
        hit = true;
    }
    pthread_mutex_unlock(&p->lock);
    if (hit)
        return 0;
    if (place_layout(p, b, offset, nbytes, size, err))
        return -1;
    pthread_mutex_lock(&p->lock);
    if (!p->layout_offset) {
        p->layout_offset = malloc(n + sizeof(int64_t));
        p->layout_nbytes = malloc(n + sizeof(int64_t));
    }
    if (p->layout_offset && p->layout_nbytes) {
        memcpy(p->layout_offset, offset, n);
        memcpy(p->layout_nbytes, nbytes, n);
        p->layout_size = *size;
        p->layout_sizes = *b;
    }
    __atomic_store_n(&p->info.arena_bytes, (size_t)*size, __ATOMIC_RELAXED); /* for tools */
    pthread_mutex_unlock(&p->lock);
    return 0;
}

int ptc_exec_alloc_outputs(const ptc_program *p, const ptc_exec_alloc *a, ptc_tensor *outs,
                           void **bufptr, ptc_error *err)
{
    for (int i = 0; i < p->noutputs; i++) {
        int b = p->prog->outputs[i], first = -1;
        for (int j = 0; j < i; j++)
            if (p->prog->outputs[j] == b)
                first = j;
        if (first >= 0) {
            outs[i] = outs[first];
            ptc_tensor_retain(&outs[i]);
            continue;
        }
        const ptc_ttype *t = &p->out_types[i];
        int64_t sizes[PTC_MAX_DIMS];
        for (int d = 0; d < t->ndim; d++)
            sizes[d] = ptc_exec_dim(a->b, t->shape[d]);
        ptc_tensor *o = &outs[i];
        int rc = a->host && a->host->alloc
                     ? a->host->alloc(a->host->ctx, o, t->dtype, t->ndim, sizes, a->device, err)
                     : a->own(a->ctx, o, t->dtype, t->ndim, sizes, err);
        if (rc)
            return -1;
        if (ptc_tensor_numel(o) > 0 && !ptc_tensor_is_contiguous(o))
            return ptc_errorf(err, PTC_ERR_RUNTIME, "runtime",
                              "the host allocated output %d non-contiguous", i);
        bufptr[b] = ptc_tensor_numel(o) ? o->data : a->empty;
    }
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
        t->dtype = lb->dtype;
        t->ndim = lb->ndim;
        t->device = dev;
        int64_t s = 1;
        for (int d = lb->ndim - 1; d >= 0; d--) {
            t->sizes[d] = ptc_exec_dim(b, lb->shape[d]);
            t->strides[d] = s;
            s *= t->sizes[d];
        }
        t->data = bufptr[lb->id];
    }
    return nout;
}
