/* ptc-run: parse, verify, compile and run a .ptir graph.
 *
 *   ptc-run [--emit=ptir|prims|loops|kernels|llvm|ptx] [--backend reference|cpu|cuda]
 *           [--cuda-arch sm_NN] [--check] [--stats] [--trace DIR] [--no-cache]
 *           [--seed N | --inputs FILE] [--sym NAME=VALUE[,VALUE...]]... [--repeat N]
 *           [--save-outputs FILE] [--graph NAME | --all] GRAPH.ptir
 *   ptc-run --package DIR --inputs FILE [--backend cpu|cuda] [--stats] [--repeat N]
 *           [--save-outputs FILE]
 *
 * Inputs come from a tensor file (matched to graph inputs by name, else by
 * position) or are generated deterministically from --seed; symbolic sizes of
 * generated inputs are 4 unless --sym NAME=VALUE says otherwise. A --sym with
 * a list of values (s0=1,5,33) runs the graph once per value with one compile:
 * the program compiled for symbolic sizes serves them all (lists of several
 * --sym are taken in step; a single value holds for every run). Each output is
 * printed with its dtype, shape and summary statistics. --check runs the
 * backend (cpu unless --backend says otherwise) and the reference interpreter
 * on the same inputs and compares every output with dtype-aware tolerances;
 * --stats prints the kernel counts, per-stage compile times and the run's
 * time (with --repeat N, the mean of N more runs); --emit prints
 * one stage of the compile instead of running; --all runs every graph of the
 * file (each with its own generated inputs) instead of the first. The cuda
 * backend copies the inputs to the GPU and the outputs back; --emit=ptx (or
 * --cuda-arch) compiles for a named architecture without needing a GPU.
 * --package runs a model exported by ptc.export (a package folder) through the
 * C API of export/export.h, with no Python: the package is verified, its
 * kernels loaded, and the inputs (by name: the exported paths, args[0]...,
 * else by position) checked against its specification before the run.
 * Exit status: 0 ok, 1 runtime, compile or check failure, 2 bad input
 * (a refused package or input).
 */
#include "export/export.h"
#include "logs/logs.h"
#include "ops/ops.h"
#include "pipeline/pipeline.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static const char TOOL[] = "ptc-run";

enum { MAX_SIZES = 64 }; /* values of one --sym list */

typedef struct options {
    const char *path;
    const char *emit;
    const char *backend;
    const char *trace;
    bool check, stats, no_cache, all;
    const char *inputs;
    const char *save_outputs;
    const char *graph;
    const char *package; /* --package DIR */
    int cuda_sm;
    uint64_t seed;
    /* --sym: each symbol's values, one per run (a single value: every run) */
    int nsyms;
    struct symvals {
        const char *name;
        int n;
        int64_t v[MAX_SIZES];
    } syms[32];
    int nsizes; /* runs per compiled graph */
    int repeat; /* --repeat: timed runs per size after the first */
} options;

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: ptc-run [--emit=ptir|prims|loops|kernels|llvm|ptx] [--backend reference|cpu|cuda]\n"
        "               [--cuda-arch sm_NN] [--check] [--stats] [--trace DIR] [--no-cache]\n"
        "               [--seed N | --inputs FILE] [--sym NAME=VALUE[,VALUE...]]... [--repeat N]\n"
        "               [--save-outputs FILE] [--graph NAME | --all] GRAPH.ptir\n"
        "       ptc-run --package DIR --inputs FILE [--backend cpu|cuda] [--stats] [--repeat N]\n"
        "               [--save-outputs FILE]\n");
}

/* --sym NAME=V[,V...]: the values of one symbol, one per run. The name stays
 * in argv, which outlives the options. */
static int parse_sym(options *o, const char *v)
{
    char *eq = strchr(v, '=');
    if (!eq || eq == v || !eq[1])
        return ptc_cli_fail(TOOL, "--sym expects NAME=VALUE[,VALUE...] with VALUE >= 0, got '%s'",
                            v);
    *eq = 0;
    struct symvals *sv = NULL;
    for (int k = 0; k < o->nsyms; k++)
        if (strcmp(o->syms[k].name, v) == 0)
            sv = &o->syms[k];
    if (!sv && o->nsyms == (int)(sizeof o->syms / sizeof *o->syms))
        return ptc_cli_fail(TOOL, "too many --sym bindings");
    if (!sv)
        sv = &o->syms[o->nsyms++];
    sv->name = v;
    sv->n = 0;
    for (char *p = eq + 1;;) {
        char *end;
        long long val = strtoll(p, &end, 10);
        if (end == p || val < 0 || (*end && *end != ','))
            return ptc_cli_fail(TOOL,
                                "--sym expects NAME=VALUE[,VALUE...] with VALUE >= 0, got '%s=%s'",
                                v, eq + 1);
        if (sv->n == MAX_SIZES)
            return ptc_cli_fail(TOOL, "--sym %s: more than %d values", v, MAX_SIZES);
        sv->v[sv->n++] = val;
        if (!*end)
            break;
        p = end + 1;
    }
    return 0;
}

/* Runs per compile: the longest --sym list; the others hold one value or as
 * many. */
static int count_sizes(options *o)
{
    o->nsizes = 1;
    for (int k = 0; k < o->nsyms; k++)
        if (o->syms[k].n > 1) {
            if (o->nsizes > 1 && o->syms[k].n != o->nsizes)
                return ptc_cli_fail(TOOL,
                                    "--sym lists of different lengths (%d values, %d for %s): "
                                    "lists are taken in step",
                                    o->nsizes, o->syms[k].n, o->syms[k].name);
            o->nsizes = o->syms[k].n;
        }
    return 0;
}

/* The bindings of run r (symbols without --sym are bound later, to 4). */
static ptc_bindings sizes_of(const options *o, int r)
{
    ptc_bindings b = {0};
    for (int k = 0; k < o->nsyms; k++)
        ptc_bindings_set(&b, o->syms[k].name, o->syms[k].v[o->syms[k].n > 1 ? r : 0]);
    return b;
}

/* --package takes a folder instead of a graph file, and its inputs from a file. */
static int check_package_args(options *o)
{
    if (o->path)
        return ptc_cli_fail(TOOL, "--package runs a package folder: no graph file ('%s') with it",
                            o->path);
    if (!o->inputs)
        return ptc_cli_fail(TOOL, "--package needs --inputs FILE (the model's inputs)");
    if (o->emit || o->check || o->all || o->graph || o->nsyms || o->trace || o->cuda_sm)
        return ptc_cli_fail(TOOL, "--package takes only --inputs, --save-outputs, --backend "
                                  "cpu|cuda, --stats and --repeat");
    if (o->backend && strcmp(o->backend, "cpu") != 0 && strcmp(o->backend, "cuda") != 0)
        return ptc_cli_fail(TOOL, "--package runs on the cpu or cuda backend, not '%s'",
                            o->backend);
    o->path = o->package;
    return 0;
}

static int parse_args(int argc, char **argv, options *o)
{
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--emit", NULL))) {
            o->emit = v;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--backend", NULL))) {
            o->backend = v;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--cuda-arch", NULL))) {
            char *end;
            long sm = strncmp(v, "sm_", 3) == 0 ? strtol(v + 3, &end, 10) : 0;
            if (sm < 70 || sm > 90 || *end)
                return ptc_cli_fail(TOOL, "--cuda-arch expects sm_70 .. sm_90, got '%s'", v);
            o->cuda_sm = (int)sm;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--trace", NULL))) {
            o->trace = v;
        } else if (strcmp(argv[i], "--check") == 0) {
            o->check = true;
        } else if (strcmp(argv[i], "--stats") == 0) {
            o->stats = true;
        } else if (strcmp(argv[i], "--no-cache") == 0) {
            o->no_cache = true;
        } else if (strcmp(argv[i], "--all") == 0) {
            o->all = true;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--inputs", NULL))) {
            o->inputs = v;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--save-outputs", NULL))) {
            o->save_outputs = v;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--graph", NULL))) {
            o->graph = v;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--package", NULL))) {
            o->package = v;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--seed", NULL))) {
            char *end;
            o->seed = strtoull(v, &end, 10);
            if (*end || !*v || *v == '-') /* strtoull accepts "-3" and wraps it */
                return ptc_cli_fail(TOOL, "--seed expects a non-negative integer, got '%s'", v);
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--repeat", NULL))) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > 1000000)
                return ptc_cli_fail(TOOL, "--repeat expects a count from 1 to 1000000, got '%s'",
                                    v);
            o->repeat = (int)n;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--sym", NULL))) {
            if (parse_sym(o, v))
                return 2;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return ptc_cli_fail(TOOL, "unknown option '%s' (try --help)", argv[i]);
        } else if (o->path) {
            return ptc_cli_fail(TOOL, "more than one graph file given ('%s' and '%s')", o->path,
                                argv[i]);
        } else {
            o->path = argv[i];
        }
    }
    if (o->package)
        return check_package_args(o);
    if (!o->path)
        return ptc_cli_fail(TOOL, "no graph file given (usage: ptc-run [OPTIONS] GRAPH.ptir)");
    static const char *emits[] = {"ptir", "prims", "loops", "kernels", "llvm", "ptx"};
    bool emit_ok = !o->emit;
    for (size_t k = 0; k < sizeof emits / sizeof *emits && !emit_ok; k++)
        emit_ok = strcmp(o->emit, emits[k]) == 0;
    if (!emit_ok)
        return ptc_cli_fail(
            TOOL, "--emit expects one of ptir, prims, loops, kernels, llvm, ptx, got '%s'",
            o->emit);
    if (o->backend && strcmp(o->backend, "reference") != 0 && strcmp(o->backend, "cpu") != 0 &&
        strcmp(o->backend, "cuda") != 0)
        return ptc_cli_fail(TOOL, "unknown backend '%s' (available: reference, cpu, cuda)",
                            o->backend);
    if (!o->backend && o->emit && strcmp(o->emit, "ptx") == 0)
        o->backend = "cuda";
    if (!o->backend)
        o->backend = o->check || (o->emit && strcmp(o->emit, "ptir") != 0) ? "cpu" : "reference";
    bool cuda = strcmp(o->backend, "cuda") == 0;
    if (o->emit && strcmp(o->emit, "ptx") == 0 && !cuda)
        return ptc_cli_fail(TOOL, "--emit=ptx needs the cuda backend");
    if (o->emit && strcmp(o->emit, "llvm") == 0 && cuda)
        return ptc_cli_fail(
            TOOL, "--emit=llvm shows the cpu backend's code; the cuda backend's is --emit=ptx");
    if (o->cuda_sm && !cuda)
        return ptc_cli_fail(TOOL, "--cuda-arch needs the cuda backend");
    /* emitting code needs no GPU: without one, target sm_90 */
    if (cuda && o->emit && !o->cuda_sm && ptc_cuda_available(NULL) != 0)
        o->cuda_sm = 90;
    if (o->inputs && o->seed)
        return ptc_cli_fail(TOOL, "--seed and --inputs are exclusive");
    if (count_sizes(o))
        return 2;
    if (o->nsizes > 1 && (o->inputs || o->save_outputs || o->emit))
        return ptc_cli_fail(TOOL, "a --sym list runs several sizes: it excludes --inputs, "
                                  "--save-outputs and --emit");
    if (o->all && (o->graph || o->inputs || o->save_outputs || o->emit))
        return ptc_cli_fail(TOOL,
                            "--all runs every graph with generated inputs: it excludes --graph, "
                            "--inputs, --save-outputs and --emit");
    return 0;
}

/* ---- errors ------------------------------------------------------------------- */

/* Every failure of a compile, run or check is one line on stderr naming the
 * graph file (and, with --all, the graph), whatever else the message says. */
static int fail_line(const options *o, const ptc_graph *g, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_line(const options *o, const ptc_graph *g, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: %s: ", TOOL, o->path);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (o->all)
        fprintf(stderr, " (in graph '%s')", g->name);
    fputc('\n', stderr);
    return status;
}

/* An error located in the graph file already names it; any other (no place,
 * or the user's source line of a captured node) gets the file in front. */
static int report(const options *o, const ptc_graph *g, const ptc_error *err, int status)
{
    char buf[2048];
    ptc_error_format(err, buf, sizeof buf);
    if (strcmp(err->file, o->path) != 0)
        return fail_line(o, g, status, "%s", buf);
    fprintf(stderr, "%s: %s", TOOL, buf);
    if (o->all)
        fprintf(stderr, " (in graph '%s')", g->name);
    fputc('\n', stderr);
    return status;
}

/* A tensor file's tensors must fit the graph's input types (dtype, rank,
 * sizes), and a declared layout whose dims share elements (an expand's stride
 * 0) only values that agree where it shares: checked on load, as bad input. */
static int fit_inputs(const options *o, const ptc_graph *g, const ptc_tensor *in)
{
    ptc_bindings b = {0};
    ptc_error err;
    if (ptc_bind_inputs(g, in, &b, &err))
        goto fail;
    for (int i = 0; i < g->ninputs; i++) {
        const ptc_ttype *t = &g->inputs[i]->type;
        int64_t strides[PTC_MAX_DIMS];
        char what[96];
        ptc_tensor copy;
        if (t->layout != PTC_LAYOUT_STRIDED)
            continue;
        for (int d = 0; d < t->ndim; d++)
            if (ptc_dim_eval(t->strides[d], &b, &strides[d], &err))
                goto fail;
        snprintf(what, sizeof what, "input %%%s", g->inputs[i]->name);
        if (ptc_tensor_conform(&in[i], strides, &copy, what, &err))
            goto fail;
        ptc_tensor_release(&copy); /* the run makes its own */
    }
    return 0;
fail:
    ptc_error_at(&err, o->inputs, 0, 0);
    return ptc_cli_report(TOOL, &err, 2);
}

/* Inputs from the --inputs tensor file for n inputs named names[]: by name
 * when the file names every one, else by position; `taker` ("graph 'g'",
 * "the package") is who takes them. */
static int read_inputs(const options *o, const char *const *names, int n, const char *taker,
                       ptc_tensorfile *tf, ptc_tensor *in)
{
    ptc_error err;
    if (ptc_tensorfile_read(o->inputs, tf, &err)) {
        if (!err.file[0])
            ptc_error_at(&err, o->inputs, 0, 0);
        return ptc_cli_report(TOOL, &err, 2);
    }
    bool by_name = true;
    for (int i = 0; i < n; i++) {
        bool found = false;
        for (int j = 0; j < tf->n; j++)
            found |= strcmp(tf->names[j], names[i]) == 0;
        by_name &= found;
    }
    if (!by_name && tf->n != n)
        return ptc_cli_fail(TOOL, "%s: holds %d tensors, %s takes %d inputs", o->inputs, tf->n,
                            taker, n);
    for (int i = 0; i < n; i++) {
        int j = i;
        if (by_name)
            for (j = 0; strcmp(tf->names[j], names[i]) != 0; j++)
                ;
        in[i] = tf->tensors[j];
    }
    return 0;
}

static int load_inputs(const options *o, const ptc_graph *g, ptc_tensorfile *tf, ptc_tensor *in)
{
    const char **names = calloc((size_t)g->ninputs + 1, sizeof *names);
    char taker[300];
    for (int i = 0; i < g->ninputs; i++)
        names[i] = g->inputs[i]->name;
    snprintf(taker, sizeof taker, "graph '%s'", g->name);
    int rc = read_inputs(o, names, g->ninputs, taker, tf, in);
    free(names);
    return rc ? rc : fit_inputs(o, g, in);
}

/* An input in the layout its type declares, so that one whose strides share
 * elements (an expand's 0) runs as it would in torch. */
static int make_input(const ptc_ttype *t, const ptc_bindings *b, ptc_tensor *in, ptc_error *err)
{
    int64_t sizes[PTC_MAX_DIMS], strides[PTC_MAX_DIMS];
    if (ptc_eval_shape(t, b, sizes, err))
        return -1;
    if (t->layout != PTC_LAYOUT_STRIDED)
        return ptc_tensor_alloc(in, t->dtype, t->ndim, sizes, err);
    for (int d = 0; d < t->ndim; d++)
        if (ptc_dim_eval(t->strides[d], b, &strides[d], err))
            return -1;
    return ptc_tensor_alloc_strided(in, t->dtype, t->ndim, sizes, strides, err);
}

/* Deterministic random inputs of size set r: symbols default to 4. */
static int make_inputs(const options *o, const ptc_graph *g, int r, ptc_tensor *in)
{
    ptc_bindings b = sizes_of(o, r);
    for (int i = 0; i < g->ninputs; i++) {
        const ptc_ttype *t = &g->inputs[i]->type;
        for (int d = 0; d < t->ndim; d++) {
            const char *names[8];
            int n = ptc_dim_symbols(t->shape[d], names, 0, 8);
            for (int k = 0; k < n; k++) {
                int64_t v;
                if (!ptc_bindings_get(&b, names[k], &v))
                    ptc_bindings_set(&b, names[k], 4);
            }
        }
    }
    for (int i = 0; i < g->ninputs; i++) {
        ptc_error err;
        if (make_input(&g->inputs[i]->type, &b, &in[i], &err)) {
            ptc_error_at(&err, o->path, 0, 0);
            return report(o, g, &err, 2);
        }
        ptc_tensor_fill_random(&in[i], o->seed * 1000003u + (uint64_t)i);
    }
    return 0;
}

/* One output's line; name is "%<value>" for a graph, the path for a package. */
static void print_output(int i, const char *name, const ptc_tensor *t)
{
    printf("output %d (%s): %s[", i, name, ptc_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++)
        printf("%s%lld", d ? "," : "", (long long)t->sizes[d]);
    printf("]");
    int64_t n = ptc_tensor_numel(t);
    if (n == 0) {
        printf(" empty\n");
        return;
    }
    double sum = 0, mn = INFINITY, mx = -INFINITY;
    int64_t nonfinite = 0, idx[PTC_MAX_DIMS] = {0};
    for (int64_t k = 0; k < n; k++) {
        double x = ptc_tensor_get_f64(t, idx);
        if (isfinite(x)) {
            sum += x;
            mn = x < mn ? x : mn;
            mx = x > mx ? x : mx;
        } else {
            nonfinite++;
        }
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->sizes[d])
                break;
            idx[d] = 0;
        }
    }
    int64_t finite = n - nonfinite;
    if (finite)
        printf(" sum=%.6g mean=%.6g min=%.6g max=%.6g", sum, sum / (double)finite, mn, mx);
    if (nonfinite)
        printf(" nonfinite=%lld", (long long)nonfinite);
    printf("\n");
}

/* ---- checking against the reference ------------------------------------------- */

static void print_index(ptc_buf *b, const int64_t *idx, int n)
{
    ptc_buf_putc(b, '[');
    for (int d = 0; d < n; d++)
        ptc_buf_printf(b, "%s%lld", d ? ", " : "", (long long)idx[d]);
    ptc_buf_putc(b, ']');
}

/* 0 when output i equals the reference's within tolerance; else reports the
 * first mismatch and returns 1. */
static int compare(const options *o, const ptc_graph *g, int i, const ptc_tensor *got,
                   const ptc_tensor *want)
{
    const ptc_value *v = g->outputs[i];
    if (got->dtype != want->dtype || got->ndim != want->ndim)
        return fail_line(o, g, 1, "output %d (%%%s): %s gives %s[%d dims], reference %s[%d dims]",
                         i, v->name, o->backend, ptc_dtype_name(got->dtype), got->ndim,
                         ptc_dtype_name(want->dtype), want->ndim);
    for (int d = 0; d < got->ndim; d++)
        if (got->sizes[d] != want->sizes[d])
            return fail_line(
                o, g, 1, "output %d (%%%s): %s gives size %lld in dim %d, reference %lld", i,
                v->name, o->backend, (long long)got->sizes[d], d, (long long)want->sizes[d]);
    int64_t n = ptc_tensor_numel(want), idx[PTC_MAX_DIMS] = {0};
    bool fl = ptc_dtype_is_float(want->dtype);
    double rtol, atol, scale = 1;
    /* |got - want| <= atol * max(1, max|want|) + rtol * |want|: the scale lets
     * large-magnitude reductions differ by their summation order */
    ptc_tolerance_default(want->dtype, &rtol, &atol);
    for (int64_t k = 0; fl && k < n; k++) {
        double w = fabs(ptc_tensor_get_f64(want, idx));
        if (isfinite(w) && w > scale)
            scale = w;
        for (int d = want->ndim - 1; d >= 0; d--) {
            if (++idx[d] < want->sizes[d])
                break;
            idx[d] = 0;
        }
    }
    memset(idx, 0, sizeof idx);
    for (int64_t k = 0; k < n; k++) {
        bool ok;
        double gv = 0, w = 0; /* got, want */
        if (fl) {
            gv = ptc_tensor_get_f64(got, idx);
            w = ptc_tensor_get_f64(want, idx);
            if (isnan(w) || isnan(gv))
                ok = isnan(w) && isnan(gv);
            else if (isinf(w) || isinf(gv))
                ok = gv == w;
            else
                ok = fabs(gv - w) <= atol * scale + rtol * fabs(w);
        } else {
            ok = ptc_tensor_get_i64(got, idx) == ptc_tensor_get_i64(want, idx);
            gv = (double)ptc_tensor_get_i64(got, idx);
            w = (double)ptc_tensor_get_i64(want, idx);
        }
        if (!ok) {
            ptc_buf at = {0}, tol = {0};
            print_index(&at, idx, want->ndim);
            if (fl)
                ptc_buf_printf(&tol, ": rtol %g, atol %g", rtol, atol * scale);
            fail_line(o, g, 1, "output %d (%%%s) mismatch at %s: %s %.9g, reference %.9g (%s%s)", i,
                      v->name, at.data, o->backend, gv, w, ptc_dtype_name(want->dtype),
                      tol.data ? tol.data : "");
            ptc_buf_free(&at);
            ptc_buf_free(&tol);
            return 1;
        }
        for (int d = want->ndim - 1; d >= 0; d--) {
            if (++idx[d] < want->sizes[d])
                break;
            idx[d] = 0;
        }
    }
    return 0;
}

/* ---- compiling ---------------------------------------------------------------------- */

/* The compile's statistics after the first run; later runs of other sizes
 * reuse the program, so they compiled nothing. */
static void print_stats(const options *o, const ptc_program *p, const ptc_metrics *m, int r,
                        double run_ms)
{
    ptc_program_info info;
    ptc_program_get_info(p, &info);
    if (r == 0)
        printf("kernels: %d compiled, %d cached\n", info.ncompiled, info.ncached);
    else
        printf("kernels: 0 compiled, %d reused (one program for every size)\n", info.nkernels);
    printf("externs: %d, arena bytes: %zu\n", info.nexterns, info.arena_bytes);
    if (r == 0) {
        printf("compile ms:");
        for (int i = 0; i < m->n; i++)
            if (m->items[i].is_time)
                printf(" %s %.2f", m->items[i].name, m->items[i].value);
        printf("\n");
    }
    if (o->repeat)
        printf("run ms: %.4f (mean of %d runs after the first)\n", run_ms, o->repeat);
    else
        printf("run ms: %.3f\n", run_ms);
}

typedef struct session {
    ptc_trace *trace;
    ptc_trace_compile *tc;
    ptc_metrics metrics;
} session;

static ptc_program *compile(const options *o, const ptc_graph *g, session *ss, ptc_error *err)
{
    ptc_compile_opts co = {0};
    co.backend = strcmp(o->backend, "cpu") == 0    ? PTC_BACKEND_CPU
                 : strcmp(o->backend, "cuda") == 0 ? PTC_BACKEND_CUDA
                                                   : PTC_BACKEND_REFERENCE;
    co.cuda_sm = o->cuda_sm;
    co.no_cache = o->no_cache;
    co.keep_text = o->emit != NULL;
    co.metrics = &ss->metrics;
    if (o->trace) {
        ss->trace = ptc_trace_open(o->trace, err);
        if (!ss->trace)
            return NULL;
        ss->tc = ptc_trace_begin(ss->trace, g->name, 0, g->name, o->path, 0, "ptc-run", err);
        if (!ss->tc)
            return NULL;
        co.trace = ss->tc;
    }
    ptc_program *p = ptc_compile(g, &co, err);
    if (ss->tc) {
        ptc_error e2;
        if (ptc_trace_end(ss->tc, p ? err : &e2) && p) {
            ptc_program_release(p);
            p = NULL;
        }
        ss->tc = NULL;
    }
    return p;
}

static int verify_all(const options *o, ptc_module *m)
{
    ptc_error err;
    for (int i = 0; i < m->ngraphs; i++)
        if (ptc_ops_verify(m->graphs[i], 0, &err)) {
            if (err.has_node) {
                ptc_node *bad = ptc_graph_find_node(m->graphs[i], err.node_id);
                ptc_error_at(&err, o->path, bad ? bad->text_line : 0, bad ? bad->text_col : 0);
            } else {
                ptc_error_at(&err, o->path, 0, 0);
            }
            return ptc_cli_report(TOOL, &err, 2);
        }
    return 0;
}

static int save(const options *o, const ptc_graph *g, const ptc_tensor *out)
{
    ptc_error err;
    const char **names = calloc((size_t)g->noutputs + 1, sizeof *names);
    for (int i = 0; i < g->noutputs; i++)
        names[i] = g->outputs[i]->name;
    int rc = ptc_tensorfile_write(o->save_outputs, out, names, g->noutputs, &err)
                 ? report(o, g, &err, 1)
                 : 0;
    free(names);
    return rc;
}

/* A run on device tensors: a program's or a package's. */
typedef int (*device_run)(void *ctx, const ptc_tensor *in, ptc_tensor *out, ptc_error *err);

/* Runs `run` on GPU copies of in[nin]; its nout outputs are copied back to
 * the host into out (released again if a copy fails). */
static int run_through_gpu(const ptc_tensor *in, int nin, int nout, device_run run, void *ctx,
                           ptc_tensor *out, ptc_error *err)
{
    ptc_device gpu = {PTC_DEV_CUDA, -1};
    ptc_tensor *din = calloc((size_t)nin + 1, sizeof *din);
    ptc_tensor *dout = calloc((size_t)nout + 1, sizeof *dout);
    int rc = 0, made = 0;
    for (; rc == 0 && made < nin; made++)
        if ((rc = ptc_tensor_to_device(&in[made], gpu, &din[made], err)))
            break;
    if (rc == 0)
        rc = run(ctx, din, dout, err);
    for (int i = 0; rc == 0 && i < nout; i++) {
        rc = ptc_tensor_to_device(&dout[i], PTC_CPU, &out[i], err);
        for (int j = 0; rc && j < i; j++)
            ptc_tensor_release(&out[j]);
    }
    for (int i = 0; i < nout; i++)
        if (dout[i].storage || dout[i].data)
            ptc_tensor_release(&dout[i]);
    for (int i = 0; i < made; i++)
        ptc_tensor_release(&din[i]);
    free(din);
    free(dout);
    return rc;
}

typedef struct program_call {
    ptc_program *p;
    int ninputs;
} program_call;

static int call_program(void *ctx, const ptc_tensor *in, ptc_tensor *out, ptc_error *err)
{
    program_call *c = ctx;
    return ptc_program_run(c->p, in, c->ninputs, out, NULL, 0, err);
}

/* Runs p; on the cuda backend through device copies of the inputs, with the
 * outputs copied back to the host. */
static int run_program(const options *o, ptc_program *p, const ptc_graph *g, const ptc_tensor *in,
                       ptc_tensor *out, ptc_error *err)
{
    program_call c = {p, g->ninputs};
    if (strcmp(o->backend, "cuda") != 0)
        return call_program(&c, in, out, err);
    return run_through_gpu(in, g->ninputs, g->noutputs, call_program, &c, out, err);
}

/* With PTC_REPRO set, a failing compile, run or check leaves a repro folder
 * (ptminify's input) and says where. */
static void dump_repro(const options *o, const ptc_graph *g, const ptc_tensor *in, const char *kind,
                       const ptc_error *err, const char *message)
{
    /* PTC_ACCURACY's own check wrote one already */
    if (!getenv("PTC_REPRO") || (err && strcmp(err->stage, "accuracy") == 0))
        return;
    ptc_repro_info info = {.kind = kind,
                           .stage = err ? err->stage : "accuracy",
                           .error_class = ptc_errclass_name(err ? err->cls : PTC_ERR_NONE),
                           .message = err ? err->msg : message,
                           .backend = o->backend};
    ptc_tolerance_default(PTC_F32, &info.rtol, &info.atol);
    char dir[1024];
    ptc_error werr;
    if (ptc_repro_write(NULL, g, in, g->ninputs, &info, dir, sizeof dir, &werr) == 0)
        fprintf(stderr, "%s: %s: repro written to %s\n", TOOL, o->path, dir);
    else
        fprintf(stderr, "%s: %s: no repro written: %s\n", TOOL, o->path, werr.msg);
}

/* --repeat N: the mean time of N more runs, the first (warm-up) left out. */
static int time_runs(const options *o, ptc_program *p, const ptc_graph *g, const ptc_tensor *in,
                     double *mean_ms)
{
    ptc_tensor *out = calloc((size_t)g->noutputs + 1, sizeof *out);
    ptc_error err;
    int rc = 0;
    double t0 = ptc_now_ms();
    for (int k = 0; k < o->repeat && rc == 0; k++) {
        if (run_program(o, p, g, in, out, &err)) {
            rc = report(o, g, &err, 1);
            break;
        }
        for (int i = 0; i < g->noutputs; i++)
            ptc_tensor_release(&out[i]);
    }
    *mean_ms = (ptc_now_ms() - t0) / o->repeat;
    free(out);
    return rc;
}

/* Runs p on inputs `in` and (with --check) compares against the interpreter. */
static int run_once(const options *o, ptc_program *p, const ptc_graph *g, ptc_tensor *in,
                    session *ss, int r)
{
    ptc_error err;
    int rc = 0;
    ptc_tensor *out = calloc((size_t)g->noutputs + 1, sizeof *out);
    ptc_tensor *ref = calloc((size_t)g->noutputs + 1, sizeof *ref);
    bool have_ref = false;
    double run_ms = 0;
    if (o->check) {
        /* the reference first: a graph it rejects at run time (an index out
         * of range, an integer division by zero) has nothing to compare */
        if (ptc_interp_run(g, in, g->ninputs, ref, NULL, &err)) {
            char buf[2048];
            ptc_error_format(&err, buf, sizeof buf);
            printf("check: skipped, the reference fails: %s\n", buf);
            goto done;
        }
        have_ref = true;
    }
    double t0 = ptc_now_ms();
    if (run_program(o, p, g, in, out, &err)) {
        dump_repro(o, g, in, "error", &err, NULL);
        rc = report(o, g, &err, 1);
        goto done;
    }
    run_ms = ptc_now_ms() - t0;
    if (o->repeat && (rc = time_runs(o, p, g, in, &run_ms)))
        goto release;
    for (int i = 0; i < g->noutputs; i++) {
        char name[300];
        snprintf(name, sizeof name, "%%%s", g->outputs[i]->name);
        print_output(i, name, &out[i]);
    }
    if (o->save_outputs && (rc = save(o, g, out)))
        goto release;
    if (o->check) {
        for (int i = 0; i < g->noutputs && rc == 0; i++)
            rc = compare(o, g, i, &out[i], &ref[i]);
        if (rc)
            dump_repro(o, g, in, "accuracy", NULL, "outputs differ from the reference interpreter");
        if (rc == 0)
            printf("check: %d outputs match the reference\n", g->noutputs);
    }
release:
    for (int i = 0; i < g->noutputs; i++)
        ptc_tensor_release(&out[i]);
done:
    for (int i = 0; have_ref && i < g->noutputs; i++)
        ptc_tensor_release(&ref[i]);
    if (o->stats)
        print_stats(o, p, &ss->metrics, r, run_ms);
    free(out);
    free(ref);
    return rc;
}

static void print_sizes(const options *o, int r)
{
    printf("sizes:");
    for (int k = 0; k < o->nsyms; k++)
        printf(" %s=%lld", o->syms[k].name, (long long)o->syms[k].v[o->syms[k].n > 1 ? r : 0]);
    printf("\n");
}

/* Compiles g once and runs it for every size set (inputs from a file: once). */
static int run_graph(const options *o, const ptc_graph *g, session *ss)
{
    ptc_tensorfile tf = {0};
    ptc_tensor *in = calloc((size_t)g->ninputs + 1, sizeof *in);
    int rc = o->inputs ? load_inputs(o, g, &tf, in) : make_inputs(o, g, 0, in);
    ptc_program *p = NULL;
    if (rc == 0) {
        ptc_error err;
        p = compile(o, g, ss, &err);
        if (!p) {
            dump_repro(o, g, in, "error", &err, NULL);
            rc = report(o, g, &err, 1);
        }
    }
    if (rc == 0 && o->emit) {
        const char *t = ptc_program_text(p, o->emit);
        if (t)
            fputs(t, stdout);
    }
    for (int r = 0; rc == 0 && !o->emit && r < o->nsizes; r++) {
        if (r > 0) {
            for (int i = 0; i < g->ninputs; i++)
                ptc_tensor_release(&in[i]);
            memset(in, 0, sizeof *in * (size_t)g->ninputs);
            if ((rc = make_inputs(o, g, r, in)))
                break;
        }
        if (o->nsizes > 1)
            print_sizes(o, r);
        rc = run_once(o, p, g, in, ss, r);
    }
    if (p)
        ptc_program_release(p);
    if (o->inputs)
        ptc_tensorfile_free(&tf);
    else
        for (int i = 0; i < g->ninputs; i++)
            if (in[i].storage || in[i].data)
                ptc_tensor_release(&in[i]);
    free(in);
    return rc;
}

/* ---- packages (ptc.export) ------------------------------------------------------------- */

/* The package's inputs, named by their exported paths (x, input_ids). */
static int package_inputs(const options *o, const ptc_model *m, ptc_tensorfile *tf, ptc_tensor *in)
{
    int n = ptc_model_ninputs(m);
    const char **names = calloc((size_t)n + 1, sizeof *names);
    for (int i = 0; i < n; i++)
        names[i] = ptc_model_input_name(m, i);
    int rc = read_inputs(o, names, n, "the package", tf, in);
    free(names);
    return rc;
}

static int call_model(void *ctx, const ptc_tensor *in, ptc_tensor *out, ptc_error *err)
{
    return ptc_model_run(ctx, in, out, err);
}

/* Runs the model once: on cuda through device copies of the inputs, with the
 * outputs copied back to the host. */
static int package_call(const options *o, ptc_model *m, const ptc_tensor *in, ptc_tensor *out,
                        ptc_error *err)
{
    if (!o->backend || strcmp(o->backend, "cuda") != 0)
        return ptc_model_run(m, in, out, err);
    return run_through_gpu(in, ptc_model_ninputs(m), ptc_model_noutputs(m), call_model, m, out,
                           err);
}

static int package_outputs(const options *o, const ptc_model *m, ptc_tensor *out)
{
    int n = ptc_model_noutputs(m), rc = 0;
    const char **names = calloc((size_t)n + 1, sizeof *names);
    for (int i = 0; i < n; i++) {
        names[i] = ptc_model_output_name(m, i);
        print_output(i, names[i], &out[i]);
    }
    ptc_error err;
    if (o->save_outputs && ptc_tensorfile_write(o->save_outputs, out, names, n, &err))
        rc = ptc_cli_report(TOOL, &err, 1);
    free(names);
    return rc;
}

/* What the process did between two points: wall and CPU milliseconds,
 * minor page faults (first touches of memory: machine-independent, unlike
 * the times) and threads started. */
typedef struct proc_usage {
    double wall_ms, cpu_ms;
    long minor_faults;
    int threads;
} proc_usage;

static int thread_count(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    if (f)
        fclose(f);
    return n;
}

static proc_usage usage_now(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (proc_usage){ptc_now_ms(),
                        (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                            (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3,
                        ru.ru_minflt, thread_count()};
}

static proc_usage usage_since(proc_usage from)
{
    proc_usage now = usage_now();
    return (proc_usage){now.wall_ms - from.wall_ms, now.cpu_ms - from.cpu_ms,
                        now.minor_faults - from.minor_faults, now.threads - from.threads};
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The later runs' wall times: their least, median and largest (a first run
 * is judged against their spread, not only their mean). */
static void print_run_spread(double *ms, int n)
{
    qsort(ms, (size_t)n, sizeof *ms, by_value);
    double median = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
    printf("run ms spread: min %.3f median %.3f max %.3f (%d runs after the first)\n", ms[0],
           median, ms[n - 1], n);
}

static void print_package_stats(const ptc_model *m, const options *o, proc_usage load,
                                proc_usage first, proc_usage later, double *later_ms)
{
    int n = o->repeat ? o->repeat : 1;
    printf("load ms: %.2f (cpu %.2f; kernels compiled at load: %d; minor faults %ld; "
           "threads started %d; memory readied %.1f MiB)\n",
           ptc_model_load_ms(m), load.cpu_ms, ptc_model_compiled_kernels(m), load.minor_faults,
           load.threads, (double)ptc_model_warm_bytes(m) / (1 << 20));
    printf("first run ms: %.3f (cpu %.2f; minor faults %ld; threads started %d)\n", first.wall_ms,
           first.cpu_ms, first.minor_faults, first.threads);
    if (o->repeat)
        printf("run ms: %.4f (mean of %d runs after the first; cpu %.2f; minor faults %.1f; "
               "threads started %d)\n",
               later.wall_ms / n, o->repeat, later.cpu_ms / n, (double)later.minor_faults / n,
               later.threads);
    if (o->repeat)
        print_run_spread(later_ms, o->repeat);
}

/* ptc-run --package DIR: load (verify, weights, kernels), check and run. A
 * refused package or input exits 2, a failing run 1. */
static int run_package(const options *o)
{
    ptc_error err;
    ptc_model_opts mo = {.target = o->backend && strcmp(o->backend, "cuda") == 0 ? "cuda" : "cpu"};
    proc_usage load = usage_now(), first = {0}, later = {0};
    ptc_model *m = ptc_model_load(o->package, &mo, &err);
    load = usage_since(load); /* its CPU time too: wall time on a busy machine says little */
    if (!m)
        return ptc_cli_report(TOOL, &err, strcmp(err.stage, "package") == 0 ? 2 : 1);
    ptc_tensorfile tf = {0};
    int nin = ptc_model_ninputs(m), nout = ptc_model_noutputs(m);
    ptc_tensor *in = calloc((size_t)nin + 1, sizeof *in);
    ptc_tensor *out = calloc((size_t)nout + 1, sizeof *out);
    double *later_ms = calloc((size_t)o->repeat + 1, sizeof *later_ms);
    int rc = package_inputs(o, m, &tf, in);
    first = usage_now();
    if (rc == 0 && package_call(o, m, in, out, &err))
        rc = ptc_cli_report(TOOL, &err, strcmp(err.stage, "inputs") == 0 ? 2 : 1);
    first = usage_since(first);
    if (rc == 0)
        rc = package_outputs(o, m, out);
    for (int i = 0; i < nout && (out[i].storage || out[i].data); i++)
        ptc_tensor_release(&out[i]);
    later = usage_now();
    for (int k = 0; rc == 0 && k < o->repeat; k++) {
        double t0 = ptc_now_ms();
        if (package_call(o, m, in, out, &err))
            rc = ptc_cli_report(TOOL, &err, 1);
        later_ms[k] = ptc_now_ms() - t0;
        for (int i = 0; rc == 0 && i < nout; i++)
            ptc_tensor_release(&out[i]);
    }
    later = usage_since(later);
    if (rc == 0 && o->stats)
        print_package_stats(m, o, load, first, later, later_ms);
    free(later_ms);
    ptc_tensorfile_free(&tf);
    free(in);
    free(out);
    ptc_model_free(m);
    return rc;
}

int main(int argc, char **argv)
{
    options o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    ptc_log_init();
    if (!ptc_memory_reserve_full()) { /* exit 1, as a compile that runs out of memory */
        ptc_cli_fail(TOOL, "out of memory at start: the 64 MiB ptc keeps to fail a compile "
                           "cleanly could not be had (is the memory limit too low?)");
        return 1;
    }
    if (o.package)
        return run_package(&o);
    ptc_error err;
    ptc_module *m = ptc_parse_file(o.path, &err);
    if (!m)
        return ptc_cli_report(TOOL, &err, 2);
    ptc_graph *g = m->graphs[0];
    if (o.graph) {
        g = NULL;
        for (int i = 0; i < m->ngraphs; i++)
            if (strcmp(m->graphs[i]->name, o.graph) == 0)
                g = m->graphs[i];
        if (!g) {
            ptc_module_free(m);
            return ptc_cli_fail(TOOL, "%s: no graph named '%s'", o.path, o.graph);
        }
    }
    if ((rc = verify_all(&o, m))) {
        ptc_module_free(m);
        return rc;
    }
    if (o.emit && strcmp(o.emit, "ptir") == 0) {
        ptc_buf b = {0};
        ptc_print_module(&b, m);
        fputs(b.data, stdout);
        ptc_buf_free(&b);
        ptc_module_free(m);
        return 0;
    }
    session ss = {0};
    for (int gi = 0; gi < m->ngraphs && rc == 0; gi++) {
        if (o.all)
            g = m->graphs[gi];
        else if (gi > 0)
            break;
        if (o.all)
            printf("graph %s:\n", g->name);
        rc = run_graph(&o, g, &ss);
    }
    if (ss.trace)
        ptc_trace_close(ss.trace);
    ptc_module_free(m);
    return rc;
}
