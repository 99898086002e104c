/* ptminify: delta-debug a failing graph down to a minimal repro.
 *
 *   ptminify [OPTIONS] REPRO_DIR | GRAPH.ptir [--inputs FILE]
 *
 * The driver: load the graph and its inputs (a repro folder written by
 * ptc_repro_write, or a .ptir with a tensor file or seeded random inputs),
 * run the original twice in children and pin its failure signature (twice,
 * because a failure that does not repeat cannot be minimised honestly),
 * record every intermediate value with the interpreter, reduce, then write
 * the output folder and load it back from disk to prove that it reproduces.
 *
 * Exit status: 0 done (also when nothing smaller fails: then the output is
 * the original, and ptminify says so), 1 the result did not reproduce or an
 * internal failure, 2 bad input or a graph that does not fail as asked. With
 * --reproduce: 1 when the failure shows, 2 when it does not.
 */
#include "minify.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char TOOL[] = "ptminify";

typedef struct args {
    const char *path; /* REPRO_DIR or GRAPH.ptir */
    const char *inputs;
    const char *check;
    const char *backend;
    const char *stage;
    const char *out;
    double timeout_s;
    long mem_mb;
    int jobs;
    int max_tests;
    uint64_t seed;
    ptc_bindings syms;
    bool verbose, quiet, reproduce, emit_only;
} args;

/* What a repro folder said (repro.json). */
typedef struct repro {
    bool is_dir;
    char graph[1024], inputs[1024];
    const char *kind, *stage, *backend, *inject, *message;
    double rtol, atol;
    ptc_arena *arena;
} repro;

static void usage(FILE *f)
{
    fprintf(
        f, "usage: ptminify [OPTIONS] REPRO_DIR | GRAPH.ptir [--inputs FILE]\n"
           "  --check crash|hang|error[:REGEX]|accuracy[:RTOL[:ATOL]]\n"
           "                    the failure to keep (default: repro.json's, else any)\n"
           "  --backend NAME    reference, cpu, cuda or harness (default: repro.json's, else cpu)\n"
           "  --stage NAME      pin the failing stage (prims, lower, codegen, runtime, ...)\n"
           "  --timeout S       time limit of each test (default 30)\n"
           "  --mem MB          address-space limit of each test (default 8192, 0 = none)\n"
           "  --jobs N          tests run in parallel (default 1)\n"
           "  --max-tests N     stop reducing after N tests (default: no limit)\n"
           "  -o DIR            output folder (default: REPRO_DIR.min or GRAPH.min)\n"
           "  --seed N          seed of generated inputs when there is no inputs file\n"
           "  --sym NAME=VALUE  size of a symbolic dim of generated inputs (default 4)\n"
           "  --reproduce       only check that the input fails: print its signature, exit 1\n"
           "  --emit-only       write the output folder for the input as it is (no tests)\n"
           "  -v, --verbose     one line per test;  -q, --quiet  no progress\n");
}

static int parse_number(const char *flag, const char *v, double lo, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(v, &end);
    if (!*v || *end || errno || !(*out >= lo))
        return ptc_cli_fail(TOOL, "%s expects a number >= %g, got '%s'", flag, lo, v);
    return 0;
}

static int parse_args(int argc, char **argv, args *a)
{
    a->timeout_s = 30;
    a->mem_mb = 8192;
    a->jobs = 1;
    for (int i = 1; i < argc; i++) {
        const char *v;
        bool missing = false;
        double num;
        const char *flag = argv[i];
        if (strcmp(flag, "-h") == 0 || strcmp(flag, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(flag, "-v") == 0 || strcmp(flag, "--verbose") == 0) {
            a->verbose = true;
        } else if (strcmp(flag, "-q") == 0 || strcmp(flag, "--quiet") == 0) {
            a->quiet = true;
        } else if (strcmp(flag, "--reproduce") == 0) {
            a->reproduce = true;
        } else if (strcmp(flag, "--emit-only") == 0) {
            a->emit_only = true;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--inputs", &missing))) {
            a->inputs = v;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--check", &missing))) {
            a->check = v;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--backend", &missing))) {
            a->backend = v;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--stage", &missing))) {
            a->stage = v;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "-o", &missing)) ||
                   (v = ptc_cli_opt(argc, argv, &i, "--output", &missing))) {
            a->out = v;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--timeout", &missing))) {
            if (parse_number("--timeout", v, 0.001, &a->timeout_s))
                return 2;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--mem", &missing))) {
            if (parse_number("--mem", v, 0, &num))
                return 2;
            a->mem_mb = (long)num;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--jobs", &missing)) ||
                   (v = ptc_cli_opt(argc, argv, &i, "-j", &missing))) {
            if (parse_number("--jobs", v, 1, &num) || num > 256)
                return num > 256 ? ptc_cli_fail(TOOL, "--jobs: at most 256") : 2;
            a->jobs = (int)num;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--max-tests", &missing))) {
            if (parse_number("--max-tests", v, 1, &num))
                return 2;
            a->max_tests = (int)num;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--seed", &missing))) {
            if (parse_number("--seed", v, 0, &num))
                return 2;
            a->seed = (uint64_t)num;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--sym", &missing))) {
            const char *eq = strchr(v, '=');
            char *end;
            long long val = eq ? strtoll(eq + 1, &end, 10) : 0;
            if (!eq || eq == v || *end || val < 0 ||
                ptc_bindings_set(&a->syms, strndup(v, (size_t)(eq - v)), val))
                return ptc_cli_fail(TOOL, "--sym expects NAME=VALUE with VALUE >= 0, got '%s'", v);
        } else if (missing) {
            return ptc_cli_fail(TOOL, "%s expects a value", flag);
        } else if (flag[0] == '-' && flag[1]) {
            return ptc_cli_fail(TOOL, "unknown option '%s' (try --help)", flag);
        } else if (a->path) {
            return ptc_cli_fail(TOOL, "more than one input given ('%s' and '%s')", a->path, flag);
        } else {
            a->path = flag;
        }
    }
    if (!a->path)
        return ptc_cli_fail(TOOL,
                            "no input given (usage: ptminify [OPTIONS] REPRO_DIR | GRAPH.ptir)");
    return 0;
}

/* ---- loading ----------------------------------------------------------------------- */

static int load_repro_json(const char *dir, repro *rp, ptc_error *err)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/repro.json", dir);
    size_t len;
    char *text = ptc_read_file(path, &len, err);
    if (!text)
        return -1;
    rp->arena = ptc_arena_new();
    ptc_json *j = ptc_json_parse(rp->arena, text, len, path, err);
    free(text);
    if (!j)
        return -1;
    if (j->kind != PTC_JOBJ) {
        ptc_errorf(err, PTC_ERR_PARSE, "repro", "expected a JSON object");
        ptc_error_at(err, path, 1, 1);
        return -1;
    }
    const char *graph = ptc_json_str(j, "graph", "graph.ptir");
    const ptc_json *inputs = ptc_json_get(j, "inputs");
    snprintf(rp->graph, sizeof rp->graph, "%s/%s", dir, graph);
    if (inputs && inputs->kind == PTC_JSTR)
        snprintf(rp->inputs, sizeof rp->inputs, "%s/%s", dir, inputs->str);
    rp->kind = ptc_json_str(j, "kind", NULL);
    rp->stage = ptc_json_str(j, "stage", NULL);
    rp->backend = ptc_json_str(j, "backend", NULL);
    rp->inject = ptc_json_str(j, "inject", NULL);
    rp->message = ptc_json_str(j, "message", "");
    rp->rtol = ptc_json_num(j, "rtol", -1);
    rp->atol = ptc_json_num(j, "atol", -1);
    if (rp->kind && strcmp(rp->kind, "crash") && strcmp(rp->kind, "error") &&
        strcmp(rp->kind, "accuracy") && strcmp(rp->kind, "hang")) {
        ptc_errorf(err, PTC_ERR_PARSE, "repro",
                   "\"kind\" is '%s', expected crash, error, accuracy or hang", rp->kind);
        ptc_error_at(err, path, 0, 0);
        return -1;
    }
    return 0;
}

/* Inputs from a tensor file: by name when every graph input is named in it,
 * else by position (the rule of ptc-run). */
static int load_inputs(const char *path, const ptc_graph *g, ptc_tensor *in)
{
    ptc_tensorfile tf;
    ptc_error err;
    if (ptc_tensorfile_read(path, &tf, &err))
        return ptc_cli_report(TOOL, &err, 2);
    bool by_name = true;
    for (int i = 0; i < g->ninputs; i++) {
        bool found = false;
        for (int j = 0; j < tf.n; j++)
            found |= strcmp(tf.names[j], g->inputs[i]->name) == 0;
        by_name &= found;
    }
    if (!by_name && tf.n != g->ninputs) {
        ptc_tensorfile_free(&tf);
        return ptc_cli_fail(TOOL, "%s: holds %d tensors, graph '%s' takes %d inputs", path, tf.n,
                            g->name, g->ninputs);
    }
    ptc_bindings b = {0};
    int rc = 0;
    for (int i = 0; i < g->ninputs && rc == 0; i++) {
        int j = i;
        if (by_name)
            for (j = 0; strcmp(tf.names[j], g->inputs[i]->name) != 0; j++)
                ;
        in[i] = tf.tensors[j];
        ptc_tensor_retain(&in[i]);
        char what[300];
        snprintf(what, sizeof what, "%.120s: tensor '%.60s' for input %%%.60s", path, tf.names[j],
                 g->inputs[i]->name);
        if (ptc_tensor_check_type(&in[i], &g->inputs[i]->type, &b, what, &err))
            rc = ptc_cli_report(TOOL, &err, 2);
    }
    ptc_tensorfile_free(&tf);
    return rc;
}

/* Deterministic random inputs (ptc-run's rule): symbols default to 4. */
static int make_inputs(const args *a, const ptc_graph *g, ptc_tensor *in)
{
    ptc_bindings b = a->syms;
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
        int64_t sizes[PTC_MAX_DIMS];
        ptc_error err;
        if (ptc_eval_shape(&g->inputs[i]->type, &b, sizes, &err) ||
            ptc_tensor_alloc(&in[i], g->inputs[i]->type.dtype, g->inputs[i]->type.ndim, sizes,
                             &err))
            return ptc_cli_report(TOOL, &err, 2);
        ptc_tensor_fill_random(&in[i], a->seed * 1000003u + (uint64_t)i);
    }
    return 0;
}

static ptc_module *load_graph(const char *path, ptc_error *err)
{
    ptc_module *m = ptc_parse_file(path, err);
    if (!m)
        return NULL;
    for (int i = 0; i < m->ngraphs; i++)
        if (ptc_ops_verify(m->graphs[i], 0, err)) {
            ptc_node *bad = err->has_node ? ptc_graph_find_node(m->graphs[i], err->node_id) : NULL;
            ptc_error_at(err, path, bad ? bad->text_line : 0, bad ? bad->text_col : 0);
            ptc_module_free(m);
            return NULL;
        }
    return m;
}

static int parse_backend(const char *name, ptc_backend *b, mf_exec_fn *exec)
{
    *exec = mf_exec_pipeline;
    if (strcmp(name, "reference") == 0)
        *b = PTC_BACKEND_REFERENCE;
    else if (strcmp(name, "cpu") == 0)
        *b = PTC_BACKEND_CPU;
    else if (strcmp(name, "cuda") == 0)
        *b = PTC_BACKEND_CUDA;
    else if (strcmp(name, "harness") == 0)
        *b = PTC_BACKEND_REFERENCE, *exec = mf_exec_harness;
    else
        return ptc_cli_fail(TOOL, "unknown backend '%s' (expected reference, cpu, cuda or harness)",
                            name);
    return 0;
}

/* ---- progress ---------------------------------------------------------------------- */

static int nodes_before;

static void show_progress(mf *m, bool accepted)
{
    double secs = (ptc_now_ms() - m->stats.started_ms) / 1e3;
    int nodes = mf_cand_nodes(m, &m->best);
    if (m->opt.progress_tty) {
        fprintf(stderr, "\r\033[K[ptminify] %-9s nodes %d -> %d | tests %d | %.1fs", m->phase,
                nodes_before, nodes, m->stats.tests, secs);
        fflush(stderr);
    } else if (accepted && !m->opt.quiet) {
        fprintf(stderr, "ptminify: [%.1fs] %s: %d node%s left (of %d), %d tests\n", secs, m->phase,
                nodes, nodes == 1 ? "" : "s", nodes_before, m->stats.tests);
    }
}

static void end_progress(const mf *m)
{
    if (m->opt.progress_tty)
        fprintf(stderr, "\r\033[K");
}

/* The first interrupt stops the reduction (the smallest graph so far is
 * written); a second one ends ptminify. */
static void on_signal(int sig)
{
    if (mf_interrupted) {
        signal(sig, SIG_DFL);
        raise(sig);
    }
    mf_interrupted = 1;
}

static bool was_interrupted;

/* ---- the run ----------------------------------------------------------------------- */

/* Runs c once in a child (never cached). */
static void run_once(mf *m, const mf_case *c, mf_result *r)
{
    if (mf_pool_start(m->pool, c, m->exec, &m->xo) < 0 || mf_pool_wait(m->pool, r) < 0) {
        memset(r, 0, sizeof *r);
        r->kind = MF_INVALID;
        snprintf(r->message, sizeof r->message, "interrupted");
    }
    m->stats.tests++;
}

static void default_output(const char *path, bool is_dir, char *out, size_t size)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    if (!is_dir && n > 5 && strncmp(path + n - 5, ".ptir", 5) == 0)
        n -= 5;
    snprintf(out, size, "%.*s.min", (int)n, path);
}

/* Pins the signature from two runs of the original. 0, or an exit status. */
static int pin(mf *m, const mf_check *check, const mf_case *orig, const char *name, mf_result *r0)
{
    char what[1400], what2[1400];
    run_once(m, orig, r0);
    mf_result_format(r0, what, sizeof what);
    if (r0->kind == MF_PASS)
        return ptc_cli_fail(TOOL, "%s does not fail (backend %s: it compiles, runs%s)", name,
                            mf_backend_name(m->xo.backend),
                            m->xo.compare ? " and matches the reference interpreter" : "");
    if (r0->kind == MF_INVALID)
        return ptc_cli_fail(TOOL, "%s: the reference interpreter rejects it: %s", name,
                            r0->message);
    if (!mf_check_accepts(check, r0))
        return ptc_cli_fail(TOOL, "%s does not fail as checked: it shows %s", name, what);
    if (m->opt.stage && strcmp(m->opt.stage, r0->stage) != 0)
        return ptc_cli_fail(TOOL, "%s does not fail in stage %s: it shows %s", name, m->opt.stage,
                            what);
    ptc_error err;
    if (mf_signature_pin(&m->sig, r0, check, &err))
        return ptc_cli_report(TOOL, &err, 2);
    mf_result r1;
    run_once(m, orig, &r1);
    if (!mf_signature_match(&m->sig, &r1)) {
        mf_result_format(&r1, what2, sizeof what2);
        return ptc_cli_fail(TOOL, "%s does not fail the same way twice: first %s, then %s", name,
                            what, what2);
    }
    return 0;
}

typedef struct run {
    args a;
    repro rp;
    ptc_module *mod;
    ptc_tensor *inputs;
    mf m;
    mf_check check;
    char out_dir[1200];
} run;

/* The graph and its inputs, from a repro folder or a .ptir. */
static int load_input(run *R)
{
    args *a = &R->a;
    struct stat st;
    if (stat(a->path, &st) != 0)
        return ptc_cli_fail(TOOL, "%s: %s", a->path, strerror(errno));
    ptc_error err;
    R->rp.is_dir = S_ISDIR(st.st_mode);
    const char *graph_path = a->path, *inputs_path = a->inputs;
    if (R->rp.is_dir) {
        if (load_repro_json(a->path, &R->rp, &err))
            return ptc_cli_report(TOOL, &err, 2);
        graph_path = R->rp.graph;
        if (!inputs_path && R->rp.inputs[0])
            inputs_path = R->rp.inputs;
    }
    if (!(R->mod = load_graph(graph_path, &err)))
        return ptc_cli_report(TOOL, &err, 2);
    const ptc_graph *g = R->mod->graphs[0];
    if (R->mod->ngraphs > 1 && !a->quiet)
        fprintf(stderr, "ptminify: %s holds %d graphs; minimising the first, '%s'\n", graph_path,
                R->mod->ngraphs, g->name);
    R->inputs = calloc((size_t)g->ninputs + 1, sizeof *R->inputs);
    return inputs_path ? load_inputs(inputs_path, g, R->inputs) : make_inputs(a, g, R->inputs);
}

/* A planted bug travels with its repro; an explicit PTC_INJECT wins. The
 * pipeline must neither dump nor check on its own: ptminify does. */
static int configure_environment(run *R)
{
    ptc_error err;
    const char *env = getenv("PTC_INJECT");
    const char *spec = env && *env ? env : R->rp.inject;
    if (spec && ptc_inject_configure(spec, &err))
        return ptc_cli_report(TOOL, &err, 2);
    if (env && *env && R->rp.inject && strcmp(env, R->rp.inject) != 0 && !R->a.quiet)
        fprintf(stderr, "ptminify: note: PTC_INJECT=%s overrides the repro's %s\n", env,
                R->rp.inject);
    unsetenv("PTC_ACCURACY");
    unsetenv("PTC_REPRO");
    unsetenv("PTC_TRACE_DIR");
    /* Every test already runs in a child of its own: LLVM runs there too, so
     * that a crash in code generation shows as the crash it is (with its
     * stage), not as a compile worker's error message. */
    setenv("PTC_COMPILE_WORKER", "0", 1);
    /* N tests at a time share the cores (the children read it when their
     * OpenMP starts; ptminify itself never runs a kernel). */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (!getenv("OMP_NUM_THREADS") && R->a.jobs > 1 && cores > 0) {
        char n[24];
        snprintf(n, sizeof n, "%ld", cores / R->a.jobs > 0 ? cores / R->a.jobs : 1);
        setenv("OMP_NUM_THREADS", n, 1);
    }
    return 0;
}

/* --check, else the kind repro.json names, else any failure. */
static int choose_check(run *R)
{
    ptc_error err;
    char spec[80];
    if (R->a.check) {
        snprintf(spec, sizeof spec, "%s", R->a.check);
    } else if (R->rp.kind && strcmp(R->rp.kind, "accuracy") == 0 && R->rp.rtol >= 0 &&
               R->rp.atol >= 0) {
        snprintf(spec, sizeof spec, "accuracy:%.17g:%.17g", R->rp.rtol, R->rp.atol);
    } else if (R->rp.kind) {
        snprintf(spec, sizeof spec, "%s", R->rp.kind);
    } else {
        R->check.any = true;
        R->check.rtol = R->check.atol = -1;
        return 0;
    }
    return mf_check_parse(R->a.check ? R->a.check : spec, &R->check, &err)
               ? ptc_cli_report(TOOL, &err, 2)
               : 0;
}

static int setup(run *R)
{
    int rc;
    if ((rc = load_input(R)) || (rc = configure_environment(R)) || (rc = choose_check(R)))
        return rc;
    args *a = &R->a;
    const char *backend = a->backend ? a->backend : R->rp.backend ? R->rp.backend : "cpu";
    mf *m = &R->m;
    if ((rc = parse_backend(backend, &m->xo.backend, &m->exec)))
        return rc;
    m->xo.compare = R->check.any || R->check.kind == MF_ACCURACY;
    m->xo.rtol = R->check.rtol;
    m->xo.atol = R->check.atol;
    if (a->out)
        snprintf(R->out_dir, sizeof R->out_dir, "%s", a->out);
    else
        default_output(a->path, R->rp.is_dir, R->out_dir, sizeof R->out_dir);
    char real_in[4096], real_out[4096];
    if (R->rp.is_dir && realpath(a->path, real_in) && realpath(R->out_dir, real_out) &&
        strcmp(real_in, real_out) == 0)
        return ptc_cli_fail(TOOL, "-o %s is the input folder; the original stays untouched",
                            R->out_dir);
    return 0;
}

static void init_minifier(run *R)
{
    mf *m = &R->m;
    const ptc_graph *g = R->mod->graphs[0];
    m->g = g;
    m->inputs = R->inputs;
    m->nnodes = g->nnodes;
    m->nvalues = g->nvalues;
    m->recorded = calloc((size_t)g->nvalues + 1, sizeof *m->recorded);
    m->opt.check = R->check;
    m->opt.stage = R->a.stage;
    m->opt.backend = m->xo.backend;
    m->opt.limits = (mf_limits){R->a.timeout_s, R->a.mem_mb, R->a.jobs};
    m->opt.max_tests = R->a.max_tests;
    m->opt.verbose = R->a.verbose;
    m->opt.quiet = R->a.quiet;
    m->opt.progress_tty = !R->a.quiet && !R->a.verbose && isatty(2);
    m->on_progress = show_progress;
    m->phase = "start";
    mf_cand_init(m, &m->best);
    nodes_before = g->nnodes;
}

/* Loads the written folder back from disk and tests it. */
static int verify_output(mf *m, const char *dir, mf_result *r, ptc_error *err)
{
    char gpath[1300], ipath[1300];
    snprintf(gpath, sizeof gpath, "%s/graph.ptir", dir);
    snprintf(ipath, sizeof ipath, "%s/inputs.bin", dir);
    size_t len;
    char *text = ptc_read_file(gpath, &len, err);
    mf_case c;
    if (!text || mf_case_from_text(&c, text, gpath, err))
        return -1;
    ptc_tensorfile tf;
    if (ptc_tensorfile_read(ipath, &tf, err)) {
        mf_case_free(&c);
        return -1;
    }
    c.inputs = tf.tensors;
    c.ninputs = tf.n;
    tf.tensors = NULL;
    tf.n = 0;
    for (int i = 0; i < c.ninputs; i++)
        free(tf.names[i]);
    ptc_tensorfile_free(&tf);
    run_once(m, &c, r);
    mf_case_free(&c);
    return 0;
}

static void print_outcome(const run *R, const mf_summary *s, bool reproduces)
{
    const mf *m = &R->m;
    char sig[1400];
    mf_signature_format(&m->sig, sig, sizeof sig);
    if (!s->reduced && s->stop_reason[0])
        printf("ptminify: stopped (%s) before any reduction: %d nodes, %d tests\n", s->stop_reason,
               m->nnodes, m->stats.tests);
    else if (!s->reduced && m->nnodes <= 1)
        printf("ptminify: already minimal: %d node%s, %d tests\n", m->nnodes,
               m->nnodes == 1 ? "" : "s", m->stats.tests);
    else if (!s->reduced)
        printf("ptminify: no smaller graph fails with the same signature: the failure "
               "disappears when the graph is shrunk. The original (%d nodes) is left as it is; "
               "%s holds a copy with repro scripts.\n",
               m->nnodes, R->out_dir);
    else
        printf("ptminify: %d -> %d nodes, %d tests, %.1fs%s%s\n", m->nnodes, s->nodes_after,
               m->stats.tests, s->seconds, s->stop_reason[0] ? "; stopped: " : "", s->stop_reason);
    printf("ptminify: signature: %s\n", sig);
    printf("ptminify: %s: %s reproduces it (repro.sh, repro.py)\n", R->out_dir,
           reproduces ? "graph.ptir" : "graph.ptir NO LONGER");
}

/* Runs the result once more, writes the folder, loads it back and runs it
 * again: only then does ptminify say that it reproduces. */
static int finish(run *R, const mf_result *r0)
{
    mf *m = &R->m;
    ptc_error err;
    mf_case final;
    if (mf_cand_build(m, &m->best, &final, &err))
        return ptc_cli_report(TOOL, &err, 1);
    mf_result rf = *r0;
    if (m->stats.accepted)
        run_once(m, &final, &rf);
    mf_summary s = {.input = R->a.path,
                    .nodes_before = m->nnodes,
                    .nodes_after = mf_cand_nodes(m, &m->best),
                    .inputs_before = m->g->ninputs,
                    .inputs_after = final.g->ninputs,
                    .outputs_before = m->g->noutputs,
                    .outputs_after = final.g->noutputs,
                    .reduced = m->stats.accepted > 0,
                    .stop_reason = was_interrupted ? "interrupted"
                                   : m->stopped    ? "--max-tests reached"
                                                   : "",
                    .backend = mf_backend_name(m->xo.backend),
                    .seconds = (ptc_now_ms() - m->stats.started_ms) / 1e3};
    char what[1400], sig[1400];
    int rc = 0;
    if (!mf_signature_match(&m->sig, &rf)) {
        mf_result_format(&rf, what, sizeof what);
        fprintf(stderr,
                "ptminify: the reduced graph does not fail the same way when run again (it "
                "shows %s): a failure that comes and goes?\n",
                what);
        rc = 1;
    } else if (mf_emit(m, &final, &rf, &s, R->out_dir, &err)) {
        rc = ptc_cli_report(TOOL, &err, 1);
    }
    mf_case_free(&final);
    if (rc)
        return rc;
    mf_result rv;
    if (verify_output(m, R->out_dir, &rv, &err))
        return ptc_cli_report(TOOL, &err, 1);
    bool reproduces = mf_signature_match(&m->sig, &rv);
    if (!reproduces) {
        mf_result_format(&rv, what, sizeof what);
        mf_signature_format(&m->sig, sig, sizeof sig);
        fprintf(stderr,
                "ptminify: %s/graph.ptir does not reproduce when loaded from disk: it shows %s, "
                "not %s\n",
                R->out_dir, what, sig);
    }
    print_outcome(R, &s, reproduces);
    return reproduces ? 0 : 1;
}

/* --emit-only: the output folder of the graph as it is, e.g. to see it as
 * torch code (repro.py) or to get the reference outputs. */
static int emit_only(run *R)
{
    mf *m = &R->m;
    ptc_error err;
    mf_case c;
    if (mf_cand_build(m, &m->best, &c, &err))
        return ptc_cli_report(TOOL, &err, 1);
    mf_result r = {.kind = MF_PASS};
    m->sig.kind = MF_PASS;
    mf_summary s = {.input = R->a.path,
                    .nodes_before = m->nnodes,
                    .nodes_after = m->nnodes,
                    .inputs_before = m->g->ninputs,
                    .inputs_after = c.g->ninputs,
                    .outputs_before = m->g->noutputs,
                    .outputs_after = c.g->noutputs,
                    .stop_reason = "--emit-only",
                    .backend = mf_backend_name(m->xo.backend)};
    int rc = mf_emit(m, &c, &r, &s, R->out_dir, &err) ? ptc_cli_report(TOOL, &err, 1) : 0;
    mf_case_free(&c);
    if (rc == 0)
        printf("ptminify: %s: the graph as it is, with repro.py and reference.bin\n", R->out_dir);
    return rc;
}

/* Everything a run holds (setup may have stopped anywhere). */
static void release(run *R)
{
    mf *m = &R->m;
    if (m->pool)
        mf_pool_free(m->pool);
    for (int v = 0; m->recorded && v < m->nvalues; v++)
        ptc_tensor_release(&m->recorded[v]);
    free(m->recorded);
    mf_cand_free(&m->best);
    mf_signature_free(&m->sig);
    free(m->cache_keys);
    free(m->cache_fail);
    for (int i = 0; R->inputs && R->mod && i < R->mod->graphs[0]->ninputs; i++)
        ptc_tensor_release(&R->inputs[i]);
    free(R->inputs);
    if (R->mod)
        ptc_module_free(R->mod);
    if (R->rp.arena)
        ptc_arena_free(R->rp.arena);
    for (int i = 0; i < R->a.syms.n; i++)
        free((char *)R->a.syms.names[i]);
}

/* --reproduce: the failure and its signature. */
static int reproduce(const run *R, const mf_result *r0)
{
    char sig[1400], what[1400];
    mf_signature_format(&R->m.sig, sig, sizeof sig);
    mf_result_format(r0, what, sizeof what);
    printf("ptminify: %s fails: %s\nptminify: signature: %s\n", R->a.path, what, sig);
    return 1; /* like a failing test: the failure shows */
}

static int minimise(run *R)
{
    mf *m = &R->m;
    ptc_error err;
    if (!(m->pool = mf_pool_new(&m->opt.limits, &err)))
        return ptc_cli_report(TOOL, &err, 1);
    if (R->a.emit_only)
        return emit_only(R);
    /* Recording first: the oracle's outputs then come with every candidate. */
    int nrec = R->a.reproduce ? 0 : mf_record(m->pool, m->g, m->inputs, m->recorded, &err);
    mf_case orig;
    if (mf_cand_build(m, &m->best, &orig, &err))
        return ptc_cli_report(TOOL, &err, 1);
    mf_result r0;
    int rc = pin(m, &R->check, &orig, R->a.path, &r0);
    mf_case_free(&orig);
    if (rc || R->a.reproduce)
        return rc ? rc : reproduce(R, &r0);
    if (nrec < 0 || (nrec < m->nvalues - m->g->ninputs && !R->a.quiet))
        fprintf(stderr,
                "ptminify: note: %d of %d intermediate values recorded%s%s; nodes after the gap "
                "can only go by truncation\n",
                nrec < 0 ? 0 : nrec, m->nvalues - m->g->ninputs, nrec < 0 ? ": " : "",
                nrec < 0 ? err.msg : "");
    mf_reduce(m);
    end_progress(m);
    was_interrupted = mf_interrupted;
    mf_interrupted = 0; /* the final checks still run */
    return finish(R, &r0);
}

int main(int argc, char **argv)
{
    run R = {0};
    int rc = parse_args(argc, argv, &R.a);
    if (rc == 0) {
        ptc_log_init();
        rc = setup(&R);
    }
    if (rc == 0) {
        init_minifier(&R);
        R.m.stats.started_ms = ptc_now_ms();
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        rc = minimise(&R);
    }
    release(&R);
    return rc;
}
