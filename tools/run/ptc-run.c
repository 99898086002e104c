/* ptc-run: parse, verify and run a .ptir graph.
 *
 *   ptc-run [--emit=ptir] [--backend reference] [--seed N | --inputs FILE]
 *           [--save-outputs FILE] [--graph NAME] GRAPH.ptir
 *
 * Inputs come from a tensor file (matched to graph inputs by name, else by
 * position) or are generated deterministically from --seed; symbolic sizes of
 * generated inputs are 4 unless --sym NAME=VALUE says otherwise. Each output is
 * printed with its dtype, shape and summary statistics.
 * Exit status: 0 ok, 1 runtime or check failure, 2 bad input (one-line error).
 */
#include "logs/logs.h"
#include "ops/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct options {
    const char *path;
    const char *emit;
    const char *backend;
    const char *inputs;
    const char *save_outputs;
    const char *graph;
    uint64_t seed;
    ptc_bindings syms;
} options;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ptc-run [--emit=ptir] [--backend reference] [--seed N | --inputs FILE]\n"
            "               [--sym NAME=VALUE]... [--save-outputs FILE] [--graph NAME] GRAPH.ptir\n");
}

/* Prints one line for a bad command line or input and returns 2. */
__attribute__((format(printf, 1, 2))) static int bad_input(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ptc-run: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

static int report(const ptc_error *err, int status)
{
    char buf[2048];
    ptc_error_format(err, buf, sizeof buf);
    fprintf(stderr, "ptc-run: %s\n", buf);
    return status;
}

static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] == 0 && *i + 1 < argc)
        return argv[++*i];
    return NULL;
}

static int parse_args(int argc, char **argv, options *o)
{
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if ((v = opt_value(argc, argv, &i, "--emit"))) {
            o->emit = v;
        } else if ((v = opt_value(argc, argv, &i, "--backend"))) {
            o->backend = v;
        } else if ((v = opt_value(argc, argv, &i, "--inputs"))) {
            o->inputs = v;
        } else if ((v = opt_value(argc, argv, &i, "--save-outputs"))) {
            o->save_outputs = v;
        } else if ((v = opt_value(argc, argv, &i, "--graph"))) {
            o->graph = v;
        } else if ((v = opt_value(argc, argv, &i, "--seed"))) {
            char *end;
            o->seed = strtoull(v, &end, 10);
            if (*end || !*v || *v == '-') /* strtoull accepts "-3" and wraps it */
                return bad_input("--seed expects a non-negative integer, got '%s'", v);
        } else if ((v = opt_value(argc, argv, &i, "--sym"))) {
            const char *eq = strchr(v, '=');
            char *end;
            long long val = eq ? strtoll(eq + 1, &end, 10) : 0;
            if (!eq || eq == v || *end || val < 0)
                return bad_input("--sym expects NAME=VALUE with VALUE >= 0, got '%s'", v);
            if (ptc_bindings_set(&o->syms, strndup(v, (size_t)(eq - v)), val))
                return bad_input("too many --sym bindings");
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return bad_input("unknown option '%s' (try --help)", argv[i]);
        } else if (o->path) {
            return bad_input("more than one graph file given ('%s' and '%s')", o->path, argv[i]);
        } else {
            o->path = argv[i];
        }
    }
    if (!o->path)
        return bad_input("no graph file given (usage: ptc-run [OPTIONS] GRAPH.ptir)");
    if (o->emit && strcmp(o->emit, "ptir") != 0)
        return bad_input("--emit expects 'ptir', got '%s'", o->emit);
    if (o->backend && strcmp(o->backend, "reference") != 0)
        return bad_input("unknown backend '%s' (available: reference)", o->backend);
    if (o->inputs && o->seed)
        return bad_input("--seed and --inputs are exclusive");
    return 0;
}

/* Inputs from a tensor file: by name when every graph input is named in the
 * file, else by position. */
static int load_inputs(const options *o, const ptc_graph *g, ptc_tensorfile *tf, ptc_tensor *in)
{
    ptc_error err;
    if (ptc_tensorfile_read(o->inputs, tf, &err))
        return report(&err, 2);
    bool by_name = true;
    for (int i = 0; i < g->ninputs; i++) {
        bool found = false;
        for (int j = 0; j < tf->n; j++)
            found |= strcmp(tf->names[j], g->inputs[i]->name) == 0;
        by_name &= found;
    }
    if (!by_name && tf->n != g->ninputs)
        return bad_input("%s: holds %d tensors, graph '%s' takes %d inputs", o->inputs, tf->n,
                         g->name, g->ninputs);
    for (int i = 0; i < g->ninputs; i++) {
        int j = i;
        if (by_name)
            for (j = 0; strcmp(tf->names[j], g->inputs[i]->name) != 0; j++)
                ;
        in[i] = tf->tensors[j];
    }
    return 0;
}

/* Deterministic random inputs: symbols default to 4. */
static int make_inputs(const options *o, const ptc_graph *g, ptc_tensor *in)
{
    ptc_bindings b = o->syms;
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
            ptc_tensor_alloc(&in[i], g->inputs[i]->type.dtype, g->inputs[i]->type.ndim, sizes, &err))
            return report(&err, 2);
        ptc_tensor_fill_random(&in[i], o->seed * 1000003u + (uint64_t)i);
    }
    return 0;
}

static void print_output(int i, const ptc_value *v, const ptc_tensor *t)
{
    printf("output %d (%%%s): %s[", i, v->name, ptc_dtype_name(t->dtype));
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

int main(int argc, char **argv)
{
    options o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    ptc_log_init();
    ptc_error err;
    ptc_module *m = ptc_parse_file(o.path, &err);
    if (!m)
        return report(&err, 2);
    ptc_graph *g = m->graphs[0];
    if (o.graph) {
        g = NULL;
        for (int i = 0; i < m->ngraphs; i++)
            if (strcmp(m->graphs[i]->name, o.graph) == 0)
                g = m->graphs[i];
        if (!g) {
            ptc_module_free(m);
            return bad_input("%s: no graph named '%s'", o.path, o.graph);
        }
    }
    for (int i = 0; i < m->ngraphs; i++)
        if (ptc_ops_verify(m->graphs[i], 0, &err)) {
            if (err.has_node) {
                ptc_node *bad = ptc_graph_find_node(m->graphs[i], err.node_id);
                ptc_error_at(&err, o.path, bad ? bad->text_line : 0, 0);
            } else {
                ptc_error_at(&err, o.path, 0, 0);
            }
            ptc_module_free(m);
            return report(&err, 2);
        }
    if (o.emit) {
        ptc_buf b = {0};
        ptc_print_module(&b, m);
        fputs(b.data, stdout);
        ptc_buf_free(&b);
        ptc_module_free(m);
        return 0;
    }
    ptc_tensorfile tf = {0};
    ptc_tensor *in = calloc((size_t)g->ninputs + 1, sizeof *in);
    ptc_tensor *out = calloc((size_t)g->noutputs + 1, sizeof *out);
    rc = o.inputs ? load_inputs(&o, g, &tf, in) : make_inputs(&o, g, in);
    if (rc == 0) {
        if (ptc_interp_run(g, in, g->ninputs, out, NULL, &err)) {
            rc = report(&err, 1);
        } else {
            for (int i = 0; i < g->noutputs; i++)
                print_output(i, g->outputs[i], &out[i]);
            if (o.save_outputs) {
                const char **names = calloc((size_t)g->noutputs + 1, sizeof *names);
                for (int i = 0; i < g->noutputs; i++)
                    names[i] = g->outputs[i]->name;
                if (ptc_tensorfile_write(o.save_outputs, out, names, g->noutputs, &err))
                    rc = report(&err, 1);
                free(names);
            }
            for (int i = 0; i < g->noutputs; i++)
                ptc_tensor_release(&out[i]);
        }
    }
    if (o.inputs)
        ptc_tensorfile_free(&tf);
    else
        for (int i = 0; i < g->ninputs; i++)
            ptc_tensor_release(&in[i]);
    free(in);
    free(out);
    ptc_module_free(m);
    return rc;
}
