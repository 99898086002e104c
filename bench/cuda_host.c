/* ptc-cuda-host: ptc's own host time per call of CUDA programs, without a
 * GPU. Not a test: it measures the CUDA runtime's launch path (launch
 * parameters, grids, arena and output placement, extern dispatch) over
 * programs run one after another as a step, e.g. a training step's forward
 * and backward from a trace folder (PTC_TRACE_DIR's forward.ptir and
 * backward.ptir):
 *
 *   PTC_CUDA_LIBRARY=build/tests/libptc_fake_cuda.so \
 *     ptc-cuda-host [--repeat N] [--written-stats] GRAPH.ptir...
 *
 * The programs are compiled for sm_90 and run against the libcuda given
 * (the unit tests' fake: launches record and run nothing), with a host
 * that stands for torch at no cost: every allocation (outputs, the arena's
 * segments, extern results) is a bump of one reserved, never touched
 * address range, reset before each step, and externs return such memory
 * without running. So the time printed is ptc's alone; the counts of host
 * allocations and extern calls are what torch pays for on top (each one a
 * torch call on the real host). --written-stats compiles the first graph as
 * a training forward that writes BatchNorm's running statistics in place:
 * its outputs 1.. are the new values of its inputs named *running_mean,
 * *running_var and *num_batches_tracked, in input order (what
 * backend_train's forwards of torchvision's models return).
 *
 * Prints per program its steps, the host calls of one run, its arena's
 * bytes and, where the libcuda given is the fake (which counts them), its
 * kernel launches a run (a horizontal combination is one); then the mean
 * and the minimum ms of a step (all programs once) over N steps after one
 * warm-up step.
 */
#include "pipeline/pipeline.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

enum { MAX_PROGRAMS = 8, RESERVED_GB = 256 };

/* The bump allocator standing for torch's caching allocator. */
static struct {
    char *base;
    size_t used, size;
    long allocs, externs;
} pool;

static void *pool_take(size_t bytes)
{
    size_t at = (pool.used + 255) & ~(size_t)255;
    if (at + bytes > pool.size)
        return NULL;
    pool.used = at + bytes;
    return pool.base + at;
}

static void release_nothing(ptc_storage *s)
{
    free(s);
}

/* A tensor of the pool's memory with the given strides (contiguous where
 * strides is NULL). */
static int pool_tensor(ptc_tensor *t, ptc_dtype dt, int ndim, const int64_t *sizes,
                       const int64_t *strides, ptc_device dev, ptc_error *err)
{
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = ndim;
    t->device = dev;
    int64_t n = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        t->sizes[d] = sizes[d];
        t->strides[d] = strides ? strides[d] : n;
        n *= sizes[d];
    }
    size_t bytes = (size_t)n * ptc_dtype_size(dt);
    ptc_storage *s = calloc(1, sizeof *s);
    void *data = pool_take(bytes ? bytes : 1);
    if (!s || !data) {
        free(s);
        return ptc_errorf(err, PTC_ERR_RUNTIME, "bench", "the reserved range is full");
    }
    s->refs = 1;
    s->data = data;
    s->nbytes = bytes;
    s->release = release_nothing;
    t->storage = s;
    t->data = data;
    return 0;
}

static int host_alloc(void *ctx, ptc_tensor *t, ptc_dtype dt, int ndim, const int64_t *sizes,
                      ptc_device dev, ptc_error *err)
{
    (void)ctx;
    pool.allocs++;
    return pool_tensor(t, dt, ndim, sizes, NULL, dev, err);
}

/* An extern's results, as torch hands them back: new tensors laid out as
 * outs ask (their strides; contiguous where they take any dense layout:
 * strides all 0), not computed. */
static int host_extern_new(void *ctx, const ptc_node *node, const ptc_tensor *const *inputs,
                           int ninputs, ptc_tensor *outs, ptc_error *err)
{
    (void)ctx;
    (void)inputs;
    (void)ninputs;
    pool.externs++;
    for (int i = 0; i < node->nout && i < 2; i++) {
        ptc_tensor *o = &outs[i];
        bool any = true;
        for (int d = 0; d < o->ndim; d++)
            any &= o->strides[d] == 0;
        int64_t st[PTC_MAX_DIMS];
        memcpy(st, o->strides, sizeof st);
        pool.allocs++;
        ptc_device dev = {PTC_DEV_CUDA, 0}; /* torch returns its results on the device */
        if (pool_tensor(o, o->dtype, o->ndim, o->sizes, any ? NULL : st, dev, err))
            return -1;
    }
    return 0;
}

static int host_extern(void *ctx, const ptc_node *node, const ptc_tensor *const *inputs,
                       int ninputs, ptc_tensor *outs, ptc_error *err)
{
    (void)ctx, (void)node, (void)inputs, (void)ninputs, (void)outs, (void)err;
    pool.externs++;
    return 0;
}

static bool has_out(void *ctx, const ptc_node *node)
{
    (void)ctx;
    return node->op == PTC_OP_MM || node->op == PTC_OP_BMM || node->op == PTC_OP_ADDMM;
}

static const ptc_host host = {.alloc = host_alloc,
                              .run_extern = host_extern,
                              .run_extern_new = host_extern_new,
                              .writes_in_place = has_out};

typedef struct prog {
    const ptc_graph *g;
    ptc_program *p;
    ptc_tensor *in, *out;
} prog;

static bool is_stat(const char *name)
{
    size_t n = strlen(name);
    const char *ends[] = {"running_mean", "running_var", "num_batches_tracked"};
    for (int i = 0; i < 3; i++) {
        size_t k = strlen(ends[i]);
        if (n >= k && strcmp(name + n - k, ends[i]) == 0)
            return true;
    }
    return false;
}

/* --written-stats: output k >= 1 is the new value of the k-th statistic input. */
static int *stats_written(const ptc_graph *g)
{
    int *into = malloc(sizeof(int) * ((size_t)g->noutputs + 1));
    for (int i = 0; i < g->noutputs; i++)
        into[i] = -1;
    int o = 1;
    for (int i = 0; i < g->ninputs && o < g->noutputs; i++)
        if (is_stat(g->inputs[i]->name))
            into[o++] = i;
    return into;
}

static int setup(prog *pr, const ptc_graph *g, const int *output_inputs, ptc_error *err)
{
    ptc_compile_opts co = {.backend = PTC_BACKEND_CUDA,
                           .cuda_sm = 90,
                           .keep_conv_epilogues = true,
                           .output_inputs = output_inputs};
    pr->g = g;
    pr->p = ptc_compile(g, &co, err);
    if (!pr->p)
        return -1;
    pr->in = calloc((size_t)g->ninputs + 1, sizeof *pr->in);
    pr->out = calloc((size_t)g->noutputs + 1, sizeof *pr->out);
    ptc_bindings b = {0};
    ptc_device dev = {PTC_DEV_CUDA, 0};
    for (int i = 0; i < g->ninputs; i++) {
        const ptc_ttype *t = &g->inputs[i]->type;
        int64_t sizes[PTC_MAX_DIMS], strides[PTC_MAX_DIMS];
        if (ptc_eval_shape(t, &b, sizes, err))
            return -1;
        for (int d = 0; d < t->ndim && t->layout == PTC_LAYOUT_STRIDED; d++)
            if (ptc_dim_eval(t->strides[d], &b, &strides[d], err))
                return -1;
        if (pool_tensor(&pr->in[i], t->dtype, t->ndim, sizes,
                        t->layout == PTC_LAYOUT_STRIDED ? strides : NULL, dev, err))
            return -1;
    }
    return 0;
}

/* The fake libcuda's count of launches (tests/unit/fake_cuda.c), or NULL
 * where PTC_CUDA_LIBRARY is another (a real driver counts none for us). */
static int (*fake_launches(void))(void)
{
    const char *path = getenv("PTC_CUDA_LIBRARY");
    void *lib = path ? dlopen(path, RTLD_LAZY | RTLD_NOLOAD) : NULL;
    return lib ? (int (*)(void))dlsym(lib, "fake_cuda_nlaunched") : NULL;
}

/* One step: every program once. */
static int step(prog *ps, int n, size_t keep, ptc_error *err)
{
    pool.used = keep; /* the inputs stay */
    for (int i = 0; i < n; i++) {
        if (ptc_program_run(ps[i].p, ps[i].in, ps[i].g->ninputs, ps[i].out, &host, 0, err))
            return -1;
        for (int o = 0; o < ps[i].g->noutputs; o++)
            ptc_tensor_release(&ps[i].out[o]);
    }
    return 0;
}

int main(int argc, char **argv)
{
    int repeat = 200, n = 0, first = 1;
    bool written_stats = false;
    for (; first < argc && argv[first][0] == '-'; first++) {
        if (strcmp(argv[first], "--repeat") == 0 && first + 1 < argc)
            repeat = atoi(argv[++first]);
        else if (strcmp(argv[first], "--written-stats") == 0)
            written_stats = true;
        else
            break;
    }
    if (first >= argc || repeat < 1 || argc - first > MAX_PROGRAMS) {
        fprintf(stderr, "usage: ptc-cuda-host [--repeat N] [--written-stats] GRAPH.ptir...\n");
        return 2;
    }
    pool.size = (size_t)RESERVED_GB << 30;
    pool.base = mmap(NULL, pool.size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (pool.base == MAP_FAILED) {
        perror("ptc-cuda-host: mmap");
        return 1;
    }
    prog ps[MAX_PROGRAMS];
    ptc_error err;
    for (int a = first; a < argc; a++, n++) {
        ptc_module *m = ptc_parse_file(argv[a], &err);
        int *into = m && n == 0 && written_stats ? stats_written(m->graphs[0]) : NULL;
        if (!m || setup(&ps[n], m->graphs[0], into, &err)) {
            fprintf(stderr, "ptc-cuda-host: %s: %s\n", argv[a], err.msg);
            return 1;
        }
        free(into);
    }
    size_t keep = pool.used;
    if (step(ps, n, keep, &err)) { /* warm-up: loads the modules */
        fprintf(stderr, "ptc-cuda-host: %s\n", err.msg);
        return 1;
    }
    int (*launches)(void) = fake_launches();
    for (int i = 0; i < n; i++) {
        pool.allocs = pool.externs = 0;
        int before = launches ? launches() : 0;
        if (step(ps + i, 1, keep, &err))
            return 1;
        ptc_program_info info;
        ptc_program_get_info(ps[i].p, &info);
        printf("%s: %d kernels, %d externs, %d arena segments of %zu bytes; a run: %ld host "
               "allocations, %ld extern calls",
               argv[first + i], info.nkernels, info.nexterns, info.arena_segments, info.arena_bytes,
               pool.allocs, pool.externs);
        if (launches)
            printf(", %d kernel launches", launches() - before);
        putchar('\n');
    }
    double total = 0, best = 1e30;
    for (int k = 0; k < repeat; k++) {
        double t0 = ptc_now_ms();
        if (step(ps, n, keep, &err)) {
            fprintf(stderr, "ptc-cuda-host: %s\n", err.msg);
            return 1;
        }
        double ms = ptc_now_ms() - t0;
        total += ms;
        best = ms < best ? ms : best;
    }
    printf("step (every program once): mean %.4f ms, min %.4f ms over %d steps\n", total / repeat,
           best, repeat);
    return 0;
}
