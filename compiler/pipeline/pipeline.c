/* The pipeline driver: a graph in, a compiled program out.
 *
 * ptc_compile runs one flat list of stages with a checker after each:
 *   verify -> decompose + simplify -> ptc_ops_verify (prims)
 *   -> lower -> loop verifier -> schedule -> kernel and memory-plan checker
 *   -> codegen (LLVM verifier inside)
 * Every stage is timed into the metrics, printed to its log component when
 * that is on, and written to the trace directory when there is one
 * (captured.ptir, prims.ptir, loops.txt, kernels.txt, kernel_<n>.ll). A
 * failing stage leaves its name in err->stage. The reference backend keeps a
 * copy of the input graph and runs the interpreter on it. ptc_compile_all
 * runs the stages before codegen for several graphs, then codegen for all
 * of them in one batch (one compile worker for their kernels).
 *
 * The driver sits above every stage and fills the program that runtime/
 * executes, so it is the one module outside runtime/ that sees a program's
 * fields (runtime/rt.h).
 */
#include "pipeline/pipeline.h"

#include "lower/lower.h"
#include "passes/passes.h"
#include "runtime/rt.h"
#ifdef PTC_HAVE_CUDA
#include "runtime/cuda_rt.h"
#endif

#include <stdlib.h>
#include <string.h>

typedef struct pipe {
    const ptc_compile_opts *o;
    ptc_metrics m;
    ptc_error *err;
    bool want_text;
    ptc_program *p;
    double spent_ms; /* on this graph: its stages, and its batch's codegen when first */
    /* code generation's */
    ptc_codegen_opts co;
    char **texts; /* [nkernels]: each kernel's code, when asked for */
} pipe_t;

static void stage_took(pipe_t *s, const char *stage, double ms)
{
    ptc_metrics_add(&s->m, stage, ms, true);
    ptc_log(PTC_LOG_PERF, PTC_LOG_INFO, "%s: %.2f ms", stage, ms);
}

static void stage_done(pipe_t *s, const char *stage, double t0)
{
    stage_took(s, stage, ptc_now_ms() - t0);
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

/* Runs pass on prims where on, counting what it changed under metric. */
static int counted_pass(pipe_t *s, ptc_graph *prims, bool on,
                        int (*pass)(ptc_graph *, ptc_error *), const char *metric)
{
    if (!on)
        return 0;
    int n = pass(prims, s->err);
    if (n < 0)
        return -1;
    ptc_metrics_add(&s->m, metric, n, false);
    return 0;
}

/* Folds eval BatchNorms (and other per-channel affine epilogues) into
 * their convolutions' weights, unless the caller keeps them or
 * PTC_FOLD_CONV=0. On the H200 the fold used to make CUDA models slower
 * (resnet50 b32 fp32 3.01 -> 4.20 ms), since every folded convolution had
 * a bias that torch adds in a kernel of its own (53 adds, 1.06 ms of
 * 3.85); with the biases added by the next kernel it is faster
 * (resnet50 fp32 3.67 -> 3.31 ms, mobilenet_v3_large fp32 4.54 -> 4.28,
 * bf16 about even: bench/conv_weights.py, two runs). On the CPU
 * mobilenet_v3_small gained 5%, resnet18 nothing.
 * Then, on CUDA, each convolution's bias is added by the kernel after it
 * (torch's would add it in one of its own); PTC_CONV_BIAS_EPILOGUE=0
 * leaves it to torch. */
static int conv_epilogues(pipe_t *s, ptc_graph *prims)
{
    static int fold_warned, bias_warned;
    bool cuda = s->o && s->o->backend == PTC_BACKEND_CUDA;
    bool fold = !(s->o && s->o->keep_conv_epilogues) &&
                ptc_env_switch("PTC_FOLD_CONV", true, &fold_warned,
                               "eval BatchNorms are folded into convolution weights, as by default");
    bool bias = cuda && ptc_env_switch("PTC_CONV_BIAS_EPILOGUE", true, &bias_warned,
                                       "convolution biases are added by ptc's kernels on CUDA, "
                                       "as by default");
    return counted_pass(s, prims, fold, ptc_pass_fold_conv_affine, "conv_epilogues_folded") ||
           counted_pass(s, prims, bias, ptc_pass_conv_bias_epilogue, "conv_biases_added_after");
}

/* decompose -> fold conv epilogues -> simplify -> verify */
static int stage_prims(pipe_t *s, const ptc_graph *g)
{
    double t0 = ptc_now_ms();
    ptc_graph *prims = ptc_decompose(g, s->err);
    if (!prims)
        return -1;
    s->p->graph = prims;
    if (conv_epilogues(s, prims) || ptc_simplify(prims, s->err) ||
        ptc_ops_verify(prims, PTC_STAGE_PRIM, s->err)) {
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

/* The outputs the caller would copy into inputs, written into them where
 * the schedule allows (ptc_compile_opts.output_inputs). */
static int write_outputs_in_place(pipe_t *s)
{
    const int *want = s->o ? s->o->output_inputs : NULL;
    int n = 0;
    for (int i = 0; want && i < s->p->noutputs; i++)
        n += want[i] >= 0 && ptc_schedule_write_in_place(s->p->sched, i, want[i]);
    ptc_metrics_add(&s->m, "outputs_in_place", n, false);
    return n ? ptc_schedule_verify(s->p->sched, s->err) : 0;
}

/* Groups independent kernels into horizontal combinations: on the CPU one
 * parallel region each, on CUDA one launch each (for the target the
 * program is compiled for: the plan's blocks depend on its multiprocessors),
 * unless PTC_CUDA_COMBOS=0 (a launch per kernel, to compare). Members may
 * touch arena temporaries unless PTC_COMBO_TEMPORARIES=0 (then those stay
 * alone, as before: fewer combinations, less code to compile cold). */
#ifdef PTC_HAVE_CUDA
static int cuda_block(void *target, const ptc_schedule *s, const ptc_kernel *k)
{
    return ptc_cuda_combo_block(s, k, target);
}
#endif

static bool combine_over_temporaries(void)
{
    const char *env = getenv("PTC_COMBO_TEMPORARIES");
    return !(env && strcmp(env, "0") == 0);
}

static int combine_kernels(pipe_t *s)
{
    ptc_program *p = s->p;
    bool arena = combine_over_temporaries();
    if (p->backend == PTC_BACKEND_CPU)
        return ptc_schedule_combine(p->sched, NULL, arena) ? ptc_schedule_verify(p->sched, s->err)
                                                           : 0;
#ifdef PTC_HAVE_CUDA
    const char *env = getenv("PTC_CUDA_COMBOS");
    if (p->backend != PTC_BACKEND_CUDA || (env && strcmp(env, "0") == 0))
        return 0;
    ptc_cuda_target target;
    ptc_cuda_device *dev;
    if (ptc_cuda_target_of(p, s->o, &target, &dev, s->err))
        return -1;
    ptc_combo_launch launch = {cuda_block, &target};
    return ptc_schedule_combine(p->sched, &launch, arena) ? ptc_schedule_verify(p->sched, s->err)
                                                          : 0;
#else
    return 0;
#endif
}

static int stage_kernels(pipe_t *s)
{
    double t0 = ptc_now_ms();
    ptc_program *p = s->p;
    ptc_sched_opts so = {.contiguous_layouts = s->o && s->o->contiguous_layouts,
                         .weights_kept = s->o && s->o->weights_kept};
    /* a GPU wants thousands of outer iterations per kernel, not a few per
       core, and runs each with a team of up to a block's threads */
    if (p->backend == PTC_BACKEND_CUDA) {
        so.nthreads = 1024;
        so.team_threads = 1024;
        so.pad_matmuls = true; /* cuBLAS's aligned kernels (lower/pad.c) */
    }
    p->sched = ptc_schedule_build(p->arena, p->prog, &so, s->err);
    if (!p->sched || write_outputs_in_place(s) < 0)
        return -1;
    if (combine_kernels(s))
        return -1;
    stage_done(s, "kernels", t0);
    int nx = 0;
    for (int i = 0; i < p->sched->nsteps; i++)
        nx += p->sched->steps[i].kind == PTC_STEP_EXTERN;
    p->info.nkernels = p->sched->nkernels;
    p->info.nexterns = nx;
    p->info.arena_bytes = p->sched->plan.is_static ? (size_t)p->sched->plan.arena_bytes : 0;
    p->info.arena_segments = 1;
    /* not "kernels": a count of that name would add to the stage's time */
    ptc_metrics_add(&s->m, "kernel_count", p->sched->nkernels, false);
    ptc_metrics_add(&s->m, "kernel_combos", p->sched->ncombos, false);
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

/* Each kernel's code as kernel_<k>.ll (.ptx on CUDA), in one batch: the
 * trace's index is rewritten once, not once per kernel. */
static int trace_kernel_texts(ptc_trace_compile *tc, bool cuda, const char *const *texts, int nk,
                              ptc_error *err)
{
    char(*names)[32] = calloc((size_t)nk + 1, sizeof *names);
    const char **files = calloc((size_t)nk + 1, sizeof *files);
    int rc = -1;
    if (!names || !files) {
        ptc_errorf(err, PTC_ERR_INTERNAL, "trace", "out of memory");
        goto done;
    }
    for (int k = 0; k < nk; k++) {
        snprintf(names[k], sizeof names[k], "kernel_%d.%s", k, cuda ? "ptx" : "ll");
        files[k] = names[k];
    }
    rc = ptc_trace_write_texts(tc, cuda ? "ptx" : "llvm", files, texts, nk, err);
done:
    free(names);
    free(files);
    return rc;
}

/* A compile's code generation, begun: where each kernel's code and text go. */
static void codegen_begin(pipe_t *s)
{
    ptc_program *p = s->p;
    int nk = p->sched->nkernels;
    bool want_code_text = s->want_text || want_log(PTC_LOG_OUTPUT_CODE);
    s->texts = want_code_text ? calloc((size_t)nk + 1, sizeof *s->texts) : NULL;
    p->kernels = calloc((size_t)nk + 1, sizeof *p->kernels);
    s->co = (ptc_codegen_opts){.no_cache = s->o && s->o->no_cache,
                               .kernel_dir = s->o ? s->o->kernel_dir : NULL,
                               .want_text = want_code_text,
                               .metrics = &s->m};
}

/* Ends the code generation that returned rc (first: the first pipe of its
 * batch, whose codegen stage took ms): counts, trace files, the code's log. */
static int codegen_end(pipe_t *s, int rc, bool first, double ms)
{
    ptc_program *p = s->p;
    int nk = p->sched->nkernels;
    bool cuda = p->backend == PTC_BACKEND_CUDA;
    if (rc == 0) {
        if (first)
            stage_took(s, "codegen", ms);
        for (int k = 0; k < nk; k++)
            p->info.ncached += p->kernels[k].cached;
        p->info.ncompiled = nk - p->info.ncached;
        ptc_metrics_add(&s->m, "kernels_compiled", p->info.ncompiled, false);
        ptc_metrics_add(&s->m, "kernels_cached", p->info.ncached, false);
        ptc_log(PTC_LOG_CACHE, PTC_LOG_INFO, "kernels: %d compiled, %d cached (%s)",
                p->info.ncompiled, p->info.ncached,
                s->o && s->o->kernel_dir ? s->o->kernel_dir : ptc_cache_dir());
    }
    char **texts = s->texts;
    s->texts = NULL;
    if (rc == 0 && texts && s->o && s->o->trace)
        rc = trace_kernel_texts(s->o->trace, cuda, (const char *const *)texts, nk, s->err);
    ptc_buf all = {0};
    for (int k = 0; texts && k < nk; k++) {
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

/* The code of the kernels of pipes ss[0..n), all of one backend, made
 * together (codegen.h: one compile worker for the batch). */
static int codegen_batch(pipe_t *const *ss, int n, ptc_error *err)
{
    const ptc_schedule *scheds[n];
    ptc_program *progs[n];
    const ptc_codegen_opts *cos[n];
    ptc_cpu_kernel *outs[n];
    char **texts[n];
    for (int i = 0; i < n; i++) {
        progs[i] = ss[i]->p;
        scheds[i] = ss[i]->p->sched;
        cos[i] = &ss[i]->co;
        outs[i] = ss[i]->p->kernels;
        texts[i] = ss[i]->texts;
    }
#ifdef PTC_HAVE_CUDA
    if (ss[0]->p->backend == PTC_BACKEND_CUDA) {
        const ptc_compile_opts *os[n];
        ptc_metrics *ms[n];
        for (int i = 0; i < n; i++)
            os[i] = ss[i]->o, ms[i] = &ss[i]->m;
        return ptc_cuda_prepare_all(progs, n, os, ms, texts, err);
    }
#endif
    return ptc_cpu_compile_all(scheds, cos, n, outs, texts, err);
}

/* Code generation for the pipes ss[0..n) (every one through its kernels
 * stage): those of one backend in one batch. The batch's time is its first
 * program's codegen stage. -1 with err: the first failure in pipe order. */
static int stage_codegen(pipe_t *const *ss, int n, ptc_error *err)
{
    double t0 = ptc_now_ms();
    for (int i = 0; i < n; i++)
        codegen_begin(ss[i]);
    bool one_backend = true;
    for (int i = 1; i < n; i++)
        one_backend = one_backend && ss[i]->p->backend == ss[0]->p->backend;
    int rc = 0;
    if (one_backend) {
        rc = codegen_batch(ss, n, err);
    } else {
        for (int i = 0; i < n && rc == 0; i++)
            rc = codegen_batch(&ss[i], 1, err);
    }
    double ms = ptc_now_ms() - t0;
    ss[0]->spent_ms += ms;
    for (int i = 0; i < n; i++) {
        int r = codegen_end(ss[i], rc, i == 0, ms);
        rc = rc ? rc : r;
    }
    return rc;
}

/* After a stage that returned rc: a stage whose arenas ran out of memory
 * (ir.h) fails the compile here, before its result is used, and one that
 * stopped because of it says so, whatever it said. */
static int memory_left(pipe_t *s, const ptc_graph *g, const char *stage, int rc)
{
    ptc_program *p = s->p;
    if (!ptc_arena_failed(g->arena) && !ptc_arena_failed(p->arena) &&
        !(p->graph && ptc_arena_failed(p->graph->arena)))
        return rc;
    return ptc_errorf(s->err, PTC_ERR_COMPILE, stage,
                      "out of memory: compiling this graph of %d nodes needs more memory than "
                      "the process may use",
                      g->nnodes);
}

static void merge_metrics(pipe_t *s)
{
    ptc_metrics_add(&s->m, "total", s->spent_ms, true);
    ptc_metrics *dst[2] = {s->o ? s->o->metrics : NULL,
                           s->o && s->o->trace ? ptc_trace_metrics(s->o->trace) : NULL};
    for (int d = 0; d < 2; d++)
        if (dst[d])
            ptc_metrics_add_all(dst[d], &s->m, NULL);
}

/* compile_front's checks and stages. */
static int front_stages(pipe_t *s, const ptc_graph *g, const ptc_compile_opts *opts, ptc_error *err)
{
    ptc_backend backend = opts ? opts->backend : PTC_BACKEND_CPU;
#ifndef PTC_HAVE_CUDA
    if (backend == PTC_BACKEND_CUDA)
        return ptc_errorf(
            err, PTC_ERR_UNSUPPORTED, "codegen",
            "the CUDA backend is not part of this build (configured with PTC_CUDA=OFF)");
#endif
    if (backend != PTC_BACKEND_CPU && backend != PTC_BACKEND_REFERENCE &&
        backend != PTC_BACKEND_CUDA)
        return ptc_errorf(err, PTC_ERR_UNSUPPORTED, "codegen", "unknown backend %d", (int)backend);
    if (ptc_ops_verify(g, 0, err))
        return -1;
    s->want_text = opts && (opts->keep_text || opts->trace);
    ptc_program *p = program_new(backend);
    s->p = p;
    copy_types(p, g);
    ptc_metrics_add(&s->m, "captured_nodes", g->nnodes, false);
    int rc = 0;
    if (opts && opts->trace && !opts->trace_keeps_captured)
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
        rc = memory_left(s, g, "capture", 0) || memory_left(s, g, "prims", stage_prims(s, g)) ||
             memory_left(s, g, "loops", stage_loops(s)) ||
             memory_left(s, g, "kernels", stage_kernels(s));
    }
    return rc;
}

/* A compile begun: the checks, then every stage before code generation.
 * s->p is the program once the checks pass; -1 with err when a stage
 * failed (compile_finish releases it). */
static int compile_front(pipe_t *s, const ptc_graph *g, const ptc_compile_opts *opts,
                         ptc_error *err)
{
    ptc_log_init();
    *s = (pipe_t){.o = opts, .err = err};
    double t0 = ptc_now_ms();
    int rc = front_stages(s, g, opts, err);
    s->spent_ms += ptc_now_ms() - t0;
    return rc;
}

/* Whether s's program has kernels to make code for. */
static bool needs_code(const pipe_t *s)
{
    return s->p && s->p->backend != PTC_BACKEND_REFERENCE;
}

/* Ends a compile whose stages returned rc: the program, or NULL (released). */
static ptc_program *compile_finish(pipe_t *s, int rc)
{
    double t0 = ptc_now_ms();
    ptc_program *p = s->p;
    const ptc_compile_opts *opts = s->o;
    if (!p)
        return NULL;
    if (rc == 0 && p->prog)
        ptc_exec_list_input_bufs(p);
    if (rc == 0 && opts && opts->extern_output_layouts && p->backend == PTC_BACKEND_CPU)
        ptc_exec_mark_any_layouts(p);
    if (rc == 0 && opts && opts->autotune && p->backend != PTC_BACKEND_REFERENCE &&
        ptc_autotune_prepare(p, opts->autotune_budget_ms) < 0)
        rc = ptc_errorf(s->err, PTC_ERR_INTERNAL, "runtime", "out of memory");
    s->spent_ms += ptc_now_ms() - t0;
    merge_metrics(s);
    if (rc) {
        ptc_program_release(p);
        return NULL;
    }
    return p;
}

ptc_program *ptc_compile(const ptc_graph *g, const ptc_compile_opts *opts, ptc_error *err)
{
    pipe_t s, *code = &s;
    int rc = compile_front(&s, g, opts, err);
    if (rc == 0 && needs_code(&s))
        rc = stage_codegen(&code, 1, err);
    return compile_finish(&s, rc);
}

int ptc_compile_all(const ptc_graph *const *gs, const ptc_compile_opts *const *opts, int n,
                    ptc_program **out, ptc_error *err)
{
    pipe_t *ss = calloc((size_t)n + 1, sizeof *ss);
    pipe_t **code = calloc((size_t)n + 1, sizeof *code);
    if (!ss || !code) {
        free(ss);
        free(code);
        return ptc_errorf(err, PTC_ERR_INTERNAL, "pipeline", "out of memory");
    }
    int rc = 0, begun = 0, ncode = 0;
    for (; begun < n && rc == 0; begun++) {
        rc = compile_front(&ss[begun], gs[begun], opts[begun], err);
        if (rc == 0 && needs_code(&ss[begun]))
            code[ncode++] = &ss[begun];
    }
    if (rc == 0 && ncode > 0)
        rc = stage_codegen(code, ncode, err);
    for (int i = 0; i < n; i++) {
        out[i] = i < begun ? compile_finish(&ss[i], rc) : NULL;
        rc = rc || (i < begun && !out[i]) ? -1 : 0;
    }
    for (int i = 0; rc && i < n; i++) { /* all or nothing */
        if (out[i])
            ptc_program_release(out[i]);
        out[i] = NULL;
    }
    free(ss);
    free(code);
    return rc;
}
