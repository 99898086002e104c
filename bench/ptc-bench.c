/* ptc-bench: times one .ptir graph on the CPU backend and the reference
 * interpreter, next to a memcpy of the same bytes, and measures cold and
 * warm compile times. Not a test: bench/bench.py drives it and compares with
 * eager PyTorch and torch.compile on the same data.
 *
 *   ptc-bench [--inputs FILE] [--seconds S] [--ref-iters N | --no-ref] GRAPH.ptir
 *
 * Prints one JSON object: run times (median ms), bytes moved (inputs plus
 * outputs), achieved GB/s, the same-run memcpy GB/s (as many OpenMP threads
 * as the kernels use, each copying its share), cold compile ms (cache off,
 * nothing loaded), warm compile ms (every kernel from the disk cache) and
 * the kernel counts.
 */
#include "pipeline/pipeline.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef int (*run_fn)(void *ctx);

/* Outputs as a framework allocates them (torch.empty): uninitialised memory,
 * freed with the tensor. */
static void free_storage(ptc_storage *s)
{
    free(s->data);
    free(s);
}

static int host_alloc(void *ctx, ptc_tensor *t, ptc_dtype dt, int ndim, const int64_t *sizes,
                      ptc_device dev, ptc_error *err)
{
    (void)ctx;
    (void)dev;
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = ndim;
    t->device = PTC_CPU;
    int64_t n = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        t->sizes[d] = sizes[d];
        t->strides[d] = n;
        n *= sizes[d];
    }
    size_t bytes = ((size_t)n * ptc_dtype_size(dt) + 63) / 64 * 64;
    ptc_storage *s = calloc(1, sizeof *s);
    s->refs = 1;
    s->data = aligned_alloc(64, bytes ? bytes : 64);
    s->nbytes = bytes;
    s->release = free_storage;
    if (!s->data)
        return ptc_errorf(err, PTC_ERR_RUNTIME, "bench", "out of memory");
    t->storage = s;
    t->data = s->data;
    return 0;
}

static const ptc_host bench_host = {.alloc = host_alloc};

/* Median ms of fn over at least `iters` calls and `seconds`. */
static double time_it(run_fn fn, void *ctx, int min_iters, double seconds)
{
    for (int i = 0; i < 2; i++)
        if (fn(ctx))
            return -1;
    double *t = malloc(sizeof(double) * 10000);
    int n = 0;
    double start = ptc_now_ms();
    while (n < 10000 && (n < min_iters || ptc_now_ms() - start < seconds * 1000)) {
        double t0 = ptc_now_ms();
        if (fn(ctx)) {
            free(t);
            return -1;
        }
        t[n++] = ptc_now_ms() - t0;
    }
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    double med = t[n / 2];
    free(t);
    return med;
}

typedef struct bench {
    ptc_program *p;
    const ptc_graph *g;
    ptc_tensor *in;
    char *src, *dst;
    size_t bytes;
} bench;

static int run_program(void *ctx)
{
    bench *b = ctx;
    ptc_tensor out[16];
    ptc_error err;
    if (ptc_program_run(b->p, b->in, b->g->ninputs, out, &bench_host, 0, &err)) {
        fprintf(stderr, "ptc-bench: %s\n", err.msg);
        return -1;
    }
    for (int i = 0; i < b->g->noutputs; i++)
        ptc_tensor_release(&out[i]);
    return 0;
}

static int run_memcpy(void *ctx)
{
    bench *b = ctx;
#pragma omp parallel
    {
        int t = omp_get_thread_num(), n = omp_get_num_threads();
        size_t lo = b->bytes * (size_t)t / (size_t)n, hi = b->bytes * (size_t)(t + 1) / (size_t)n;
        memcpy(b->dst + lo, b->src + lo, hi - lo);
    }
    return 0;
}

static size_t tensor_bytes(const ptc_tensor *t)
{
    return (size_t)ptc_tensor_numel(t) * ptc_dtype_size(t->dtype);
}

static ptc_program *compile(const ptc_graph *g, bool no_cache, double *ms, ptc_program_info *info)
{
    ptc_compile_opts o = {.backend = PTC_BACKEND_CPU, .no_cache = no_cache};
    ptc_error err;
    double t0 = ptc_now_ms();
    ptc_program *p = ptc_compile(g, &o, &err);
    *ms = ptc_now_ms() - t0;
    if (!p) {
        fprintf(stderr, "ptc-bench: %s: %s\n", err.stage, err.msg);
        return NULL;
    }
    ptc_program_get_info(p, info);
    return p;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *inputs = NULL;
    double seconds = 1.0;
    int ref_iters = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--inputs") && i + 1 < argc)
            inputs = argv[++i];
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--ref-iters") && i + 1 < argc)
            ref_iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-ref"))
            ref_iters = 0;
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else {
            fprintf(stderr, "usage: ptc-bench [--inputs FILE] [--seconds S] [--ref-iters N | --no-ref] "
                            "GRAPH.ptir\n");
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "ptc-bench: no graph file given\n");
        return 2;
    }
    ptc_error err;
    ptc_module *m = ptc_parse_file(path, &err);
    if (!m) {
        fprintf(stderr, "ptc-bench: %s: %s\n", path, err.msg);
        return 2;
    }
    ptc_graph *g = m->graphs[0];
    bench b = {.g = g};
    b.in = calloc((size_t)g->ninputs + 1, sizeof *b.in);
    ptc_tensorfile tf = {0};
    if (inputs) {
        if (ptc_tensorfile_read(inputs, &tf, &err) || tf.n != g->ninputs) {
            fprintf(stderr, "ptc-bench: %s: %s\n", inputs, tf.n != g->ninputs ? "wrong count" : err.msg);
            return 2;
        }
        memcpy(b.in, tf.tensors, sizeof *b.in * (size_t)g->ninputs);
    } else {
        ptc_bindings bind = {0};
        for (int i = 0; i < g->ninputs; i++) {
            int64_t sizes[PTC_MAX_DIMS];
            if (ptc_eval_shape(&g->inputs[i]->type, &bind, sizes, &err) ||
                ptc_tensor_alloc(&b.in[i], g->inputs[i]->type.dtype, g->inputs[i]->type.ndim, sizes, &err)) {
                fprintf(stderr, "ptc-bench: %s\n", err.msg);
                return 2;
            }
            ptc_tensor_fill_random(&b.in[i], (uint64_t)i + 1);
        }
    }
    /* cold: no cache, nothing loaded; then warm: from the disk cache */
    double cold_ms, warm_ms, dummy;
    ptc_program_info cold_info, warm_info;
    ptc_program *p = compile(g, true, &cold_ms, &cold_info);
    if (!p)
        return 1;
    ptc_program_release(p);
    p = compile(g, false, &dummy, &warm_info); /* fills the cache */
    if (!p)
        return 1;
    ptc_program_release(p);
    p = compile(g, false, &warm_ms, &warm_info);
    if (!p)
        return 1;
    b.p = p;
    /* bytes moved: inputs read, outputs written */
    ptc_tensor out[16];
    if (ptc_program_run(p, b.in, g->ninputs, out, NULL, 0, &err)) {
        fprintf(stderr, "ptc-bench: %s\n", err.msg);
        return 1;
    }
    size_t bytes = 0;
    for (int i = 0; i < g->ninputs; i++)
        bytes += tensor_bytes(&b.in[i]);
    for (int i = 0; i < g->noutputs; i++) {
        bytes += tensor_bytes(&out[i]);
        ptc_tensor_release(&out[i]);
    }
    double ptc_ms = time_it(run_program, &b, 5, seconds);
    /* the reference interpreter, a few runs */
    ptc_compile_opts ro = {.backend = PTC_BACKEND_REFERENCE};
    bench rb = b;
    rb.p = ptc_compile(g, &ro, &err);
    double ref_ms = rb.p && ref_iters > 0 ? time_it(run_program, &rb, ref_iters, 0) : -1;
    /* memcpy of the same bytes: read and write half each */
    b.bytes = bytes / 2 > 64 ? bytes / 2 : 64;
    b.src = aligned_alloc(64, (b.bytes + 63) / 64 * 64);
    b.dst = aligned_alloc(64, (b.bytes + 63) / 64 * 64);
    memset(b.src, 1, b.bytes);
    memset(b.dst, 2, b.bytes);
    double memcpy_ms = time_it(run_memcpy, &b, 5, seconds / 2);
    printf("{\"graph\": \"%s\", \"threads\": %d, \"kernels\": %d, \"externs\": %d, "
           "\"ptc_ms\": %.4f, \"ref_ms\": %.4f, \"bytes\": %zu, \"ptc_gbps\": %.3f, "
           "\"memcpy_ms\": %.4f, \"memcpy_gbps\": %.3f, \"cold_compile_ms\": %.2f, "
           "\"cold_compiled\": %d, \"warm_compile_ms\": %.2f, \"warm_compiled\": %d, "
           "\"warm_cached\": %d}\n",
           g->name, omp_get_max_threads(), warm_info.nkernels, warm_info.nexterns, ptc_ms, ref_ms,
           bytes, bytes / (ptc_ms * 1e6), memcpy_ms, 2.0 * (double)b.bytes / (memcpy_ms * 1e6), cold_ms,
           cold_info.ncompiled, warm_ms, warm_info.ncompiled, warm_info.ncached);
    free(b.src);
    free(b.dst);
    if (rb.p)
        ptc_program_release(rb.p);
    ptc_program_release(p);
    if (inputs)
        ptc_tensorfile_free(&tf);
    else
        for (int i = 0; i < g->ninputs; i++)
            ptc_tensor_release(&b.in[i]);
    free(b.in);
    ptc_module_free(m);
    return 0;
}
