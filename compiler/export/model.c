/* The exported model: a verified package's graph compiled from its kernels,
 * with its weights in place, run from C.
 *
 * The graph's inputs are the user's inputs and the lifted parameters and
 * buffers (spec.json says which is which, in graph order). Loading fills the
 * weight slots once; each run fills the user slots, after the exported
 * checks: device, then dtype, rank and sizes against the graph's input types
 * (shared symbols must agree), then each symbolic size against the range
 * torch.export-style dynamic_shapes gave it. Outputs are the graph's outputs,
 * an input the model returns unchanged, or an int the forward computed from
 * symbolic sizes (x.shape[0] * 2): its expression, evaluated over the sizes
 * the run's inputs bound, handed out as a 0-dim i64 CPU tensor.
 */
#include "export/pkg.h"

#include "codegen/codegen.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct sym_range {
    const char *symbol, *dim; /* "s0", the user's name ("batch") */
    int64_t min, max;         /* max < 0: unbounded */
} sym_range;

typedef struct model_output {
    const char *path;
    int graph_output; /* >= 0: this graph output */
    int input;        /* >= 0: this graph input, passed through */
    ptc_dim size;     /* else this expression over the input symbols */
} model_output;

struct ptc_model {
    ptc_arena *arena; /* spec and manifest strings */
    ptc_module *mod;
    const ptc_graph *g;
    ptc_program *prog;
    ptc_tensorfile weights;
    ptc_tensor *slots; /* g->ninputs: weights filled at load, user inputs per run */
    int nuser;
    int *user_at; /* graph input of user input i */
    const char **user_path;
    int nranges;
    sym_range *ranges;
    int nout;
    model_output *outs;
    ptc_device dev;
    pthread_mutex_t lock;
    double load_ms;
    int compiled;
    size_t warm_bytes; /* touched at load (ptc_program_warm) */
};

static int spec_error(ptc_error *err, const char *dir, const char *what)
{
    char where[PTC_PKG_PATH];
    snprintf(where, sizeof where, "%s/spec.json", dir);
    ptc_errorf(err, PTC_ERR_RUNTIME, "package", "%s", what);
    ptc_error_at(err, where, 0, 0);
    return -1;
}

static int64_t json_int(const ptc_json *o, const char *key, int64_t dflt)
{
    const ptc_json *v = ptc_json_get(o, key);
    return v && v->kind == PTC_JNUM ? (int64_t)v->num : dflt;
}

/* spec.json's inputs (in graph order) and symbol ranges. */
static int read_inputs(ptc_model *m, const char *dir, const ptc_json *spec, ptc_error *err)
{
    const ptc_json *ins = ptc_json_get(spec, "inputs");
    if (!ins || ins->kind != PTC_JARR || ins->n != m->g->ninputs)
        return spec_error(err, dir, "its inputs do not match graph.ptir's");
    m->user_at = ptc_arena_alloc(m->arena, sizeof *m->user_at * (size_t)(ins->n + 1));
    m->user_path = ptc_arena_alloc(m->arena, sizeof *m->user_path * (size_t)(ins->n + 1));
    for (int i = 0; i < ins->n; i++) {
        const ptc_json *in = ins->items[i];
        if (strcmp(ptc_json_str(in, "name", ""), m->g->inputs[i]->name) != 0)
            return spec_error(err, dir, "its inputs do not match graph.ptir's");
        if (strcmp(ptc_json_str(in, "kind", ""), "user") == 0) {
            m->user_path[m->nuser] = ptc_json_str(in, "path", m->g->inputs[i]->name);
            m->user_at[m->nuser++] = i;
        }
    }
    const ptc_json *syms = ptc_json_get(spec, "symbols");
    int n = syms && syms->kind == PTC_JARR ? syms->n : 0;
    m->ranges = ptc_arena_alloc(m->arena, sizeof *m->ranges * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        const ptc_json *s = syms->items[i];
        m->ranges[m->nranges++] =
            (sym_range){ptc_json_str(s, "symbol", ""), ptc_json_str(s, "dim", ""),
                        json_int(s, "min", 0), json_int(s, "max", -1)};
    }
    return 0;
}

/* Whether the user inputs' types bind symbol name. */
static bool user_symbol(const ptc_model *m, const char *name)
{
    for (int u = 0; u < m->nuser; u++) {
        const ptc_ttype *t = &m->g->inputs[m->user_at[u]]->type;
        for (int d = 0; d < t->ndim; d++) {
            const char *names[PTC_MAX_DIMS];
            int n = ptc_dim_symbols(t->shape[d], names, 0, PTC_MAX_DIMS);
            for (int k = 0; k < n; k++)
                if (strcmp(names[k], name) == 0)
                    return true;
        }
    }
    return false;
}

/* An int output's expression ("2*s0+1"), whose every symbol a user input's
 * sizes bind. */
static int read_size_output(ptc_model *m, const char *dir, const char *text, ptc_dim *out,
                            ptc_error *err)
{
    const char *end;
    ptc_error perr;
    if (ptc_dim_parse(m->arena, text, &end, out, &perr) || *end)
        return spec_error(err, dir, "an int output's expression does not parse");
    const char *names[PTC_MAX_DIMS];
    int n = ptc_dim_symbols(*out, names, 0, PTC_MAX_DIMS);
    for (int k = 0; k < n; k++)
        if (!user_symbol(m, names[k])) {
            char what[200];
            snprintf(what, sizeof what, "an int output reads %s, which no input's size gives",
                     names[k]);
            return spec_error(err, dir, what);
        }
    return 0;
}

static int read_outputs(ptc_model *m, const char *dir, const ptc_json *spec, ptc_error *err)
{
    const ptc_json *outs = ptc_json_get(spec, "outputs");
    if (!outs || outs->kind != PTC_JARR)
        return spec_error(err, dir, "no outputs");
    m->outs = ptc_arena_alloc(m->arena, sizeof *m->outs * (size_t)(outs->n + 1));
    for (int i = 0; i < outs->n; i++) {
        const ptc_json *o = outs->items[i];
        model_output mo = {ptc_json_str(o, "path", "?"), (int)json_int(o, "graph_output", -1),
                           (int)json_int(o, "input", -1), ptc_dim_c(0)};
        const char *size = ptc_json_str(o, "symint", NULL);
        if (size && read_size_output(m, dir, size, &mo.size, err))
            return -1;
        if (mo.graph_output >= m->g->noutputs || mo.input >= m->g->ninputs ||
            (mo.graph_output < 0 && mo.input < 0 && !size))
            return spec_error(err, dir, "an output refers to no graph output or input");
        m->outs[m->nout++] = mo;
    }
    return 0;
}

static bool is_user(const ptc_model *m, int input)
{
    for (int u = 0; u < m->nuser; u++)
        if (m->user_at[u] == input)
            return true;
    return false;
}

/* Puts every parameter and buffer in its slot (on the model's device): on
 * the CPU the tensors of the mapped file the package's check hashed. */
static int place_weights(ptc_model *m, const char *dir, ptc_storage *file, ptc_error *err)
{
    char path[PTC_PKG_PATH];
    snprintf(path, sizeof path, "%s/weights.bin", dir);
    if (ptc_tensorfile_parse_mapped(file, path, &m->weights, err)) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        ptc_errorf(err, PTC_ERR_RUNTIME, "package", "%s", msg);
        ptc_error_at(err, path, 0, 0);
        return -1;
    }
    ptc_bindings b = {0};
    for (int i = 0; i < m->g->ninputs; i++) {
        if (is_user(m, i))
            continue;
        const char *name = m->g->inputs[i]->name;
        int j = 0;
        while (j < m->weights.n && strcmp(m->weights.names[j], name) != 0)
            j++;
        char what[160];
        snprintf(what, sizeof what, "weights.bin: tensor '%s'", name);
        if (j == m->weights.n) {
            ptc_errorf(err, PTC_ERR_RUNTIME, "package", "no tensor for the graph input '%s'", name);
            ptc_error_at(err, path, 0, 0);
            return -1;
        }
        if (ptc_tensor_check_type(&m->weights.tensors[j], &m->g->inputs[i]->type, &b, what, err))
            return -1;
        if (m->dev.kind == PTC_DEV_CPU) {
            m->slots[i] = m->weights.tensors[j];
            ptc_tensor_retain(&m->slots[i]);
        } else if (ptc_tensor_to_device(&m->weights.tensors[j], m->dev, &m->slots[i], err)) {
            return -1;
        }
    }
    return 0;
}

static int compile_graph(ptc_model *m, const char *dir, const ptc_pkg_manifest *man, ptc_error *err)
{
    char kbuf[PTC_PKG_PATH];
    ptc_compile_opts co = {.backend =
                               m->dev.kind == PTC_DEV_CUDA ? PTC_BACKEND_CUDA : PTC_BACKEND_CPU};
    co.kernel_dir = ptc_pkg_kernels_for(dir, man, m->dev, kbuf, sizeof kbuf);
    m->prog = ptc_compile(m->g, &co, err);
    if (!m->prog)
        return -1;
    ptc_program_info info;
    ptc_program_get_info(m->prog, &info);
    m->compiled = info.ncompiled;
    return 0;
}

/* The first run costs what later ones do (ptc_program_warm), unless
 * PTC_EXPORT_WARM=0: the load's share of the difference, for comparing. */
static void warm(ptc_model *m)
{
    const char *env = getenv("PTC_EXPORT_WARM");
    if (env && strcmp(env, "0") == 0) {
        ptc_log(PTC_LOG_PERF, PTC_LOG_INFO,
                "PTC_EXPORT_WARM=0: the model's first run starts its threads and touches "
                "its memory");
        return;
    }
    m->warm_bytes = ptc_program_warm(m->prog);
}

static int load_graph(ptc_model *m, const char *dir, ptc_error *err)
{
    char path[PTC_PKG_PATH];
    snprintf(path, sizeof path, "%s/graph.ptir", dir);
    m->mod = ptc_parse_file(path, err);
    if (!m->mod)
        return -1;
    if (m->mod->ngraphs != 1)
        return ptc_errorf(err, PTC_ERR_PARSE, "package", "%s: holds %d graphs, a package has one",
                          path, m->mod->ngraphs);
    m->g = m->mod->graphs[0];
    if (ptc_ops_verify(m->g, 0, err)) {
        ptc_error_at(err, path, 0, 0);
        return -1;
    }
    m->slots = calloc((size_t)m->g->ninputs + 1, sizeof *m->slots);
    return 0;
}

static int read_spec(ptc_model *m, const char *dir, ptc_error *err)
{
    char path[PTC_PKG_PATH];
    snprintf(path, sizeof path, "%s/spec.json", dir);
    size_t len;
    char *text = ptc_read_file(path, &len, err);
    if (!text)
        return -1;
    const ptc_json *spec = ptc_json_parse(m->arena, text, len, path, err);
    free(text);
    if (!spec || spec->kind != PTC_JOBJ)
        return spec ? spec_error(err, dir, "not a JSON object") : -1;
    return read_inputs(m, dir, spec, err) || read_outputs(m, dir, spec, err) ? -1 : 0;
}

ptc_model *ptc_model_load(const char *dir, const ptc_model_opts *opts, ptc_error *err)
{
    double t0 = ptc_now_ms();
    ptc_model *m = calloc(1, sizeof *m);
    m->arena = ptc_arena_new();
    m->dev = PTC_CPU;
    pthread_mutex_init(&m->lock, NULL);
    const char *target = opts && opts->target ? opts->target : "cpu";
    ptc_pkg_manifest man = {0};
    int rc = 0;
    if (strcmp(target, "cuda") == 0) {
        m->dev = (ptc_device){PTC_DEV_CUDA, -1};
        rc = ptc_cuda_device_arch(err) < 0 ? -1 : 0;
    } else if (strcmp(target, "cpu") != 0) {
        rc = ptc_errorf(err, PTC_ERR_UNSUPPORTED, "package", "unknown target '%s' (cpu, cuda)",
                        target);
    }
    if (rc == 0)
        rc = ptc_pkg_verify(dir, m->arena, &man, err);
    if (rc == 0)
        rc = load_graph(m, dir, err);
    if (rc == 0)
        rc = read_spec(m, dir, err);
    if (rc == 0)
        rc = place_weights(m, dir, man.weights, err);
    ptc_pkg_unmap(man.weights); /* the tensors in it hold their own references */
    if (rc == 0)
        rc = compile_graph(m, dir, &man, err);
    if (rc == 0)
        warm(m);
    if (rc) {
        ptc_model_free(m);
        return NULL;
    }
    m->load_ms = ptc_now_ms() - t0;
    return m;
}

void ptc_model_free(ptc_model *m)
{
    if (!m)
        return;
    if (m->prog)
        ptc_program_release(m->prog);
    for (int i = 0; m->slots && m->g && i < m->g->ninputs; i++)
        if (!is_user(m, i) && (m->slots[i].storage || m->slots[i].data))
            ptc_tensor_release(&m->slots[i]);
    free(m->slots);
    ptc_tensorfile_free(&m->weights);
    if (m->mod)
        ptc_module_free(m->mod);
    ptc_arena_free(m->arena);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

int ptc_model_ninputs(const ptc_model *m)
{
    return m->nuser;
}
int ptc_model_noutputs(const ptc_model *m)
{
    return m->nout;
}
const char *ptc_model_input_name(const ptc_model *m, int i)
{
    return m->user_path[i];
}
const char *ptc_model_output_name(const ptc_model *m, int i)
{
    return m->outs[i].path;
}
double ptc_model_load_ms(const ptc_model *m)
{
    return m->load_ms;
}
int ptc_model_compiled_kernels(const ptc_model *m)
{
    return m->compiled;
}
size_t ptc_model_warm_bytes(const ptc_model *m)
{
    return m->warm_bytes;
}

void ptc_model_input_type(const ptc_model *m, int i, ptc_buf *b)
{
    ptc_ttype_print(b, &m->g->inputs[m->user_at[i]]->type, true);
}

/* ---- running ---------------------------------------------------------------------- */

/* The exported checks on the user's inputs, which bind the symbols in *b;
 * err names the input and the check. */
static int check_inputs(const ptc_model *m, const ptc_tensor *inputs, ptc_bindings *b,
                        ptc_error *err)
{
    char what[300];
    for (int u = 0; u < m->nuser; u++) {
        char want[32], got[32];
        ptc_device_str(m->dev, want, sizeof want);
        ptc_device_str(inputs[u].device, got, sizeof got);
        if (inputs[u].device.kind != m->dev.kind)
            return ptc_errorf(err, PTC_ERR_RUNTIME, "inputs",
                              "input %d (%s): expected a %s tensor, got %s", u, m->user_path[u],
                              want, got);
    }
    for (int pass = 0; pass < 2; pass++) /* a size may depend on a symbol bound later */
        for (int u = 0; u < m->nuser; u++) {
            snprintf(what, sizeof what, "input %d (%s)", u, m->user_path[u]);
            if (ptc_tensor_check_type(&inputs[u], &m->g->inputs[m->user_at[u]]->type, b, what, err))
                return -1;
        }
    for (int r = 0; r < m->nranges; r++) {
        const sym_range *s = &m->ranges[r];
        int64_t v;
        if (!ptc_bindings_get(b, s->symbol, &v))
            continue;
        if (v < s->min || (s->max >= 0 && v > s->max)) {
            char hi[32] = "inf";
            if (s->max >= 0)
                snprintf(hi, sizeof hi, "%lld", (long long)s->max);
            return ptc_errorf(err, PTC_ERR_RUNTIME, "inputs",
                              "size %lld of dynamic dim '%s' (%s) is outside its exported range "
                              "[%lld, %s]",
                              (long long)v, s->dim, s->symbol, (long long)s->min, hi);
        }
    }
    return 0;
}

/* An int output: its expression over the run's sizes, as a 0-dim i64 tensor. */
static int size_output(const model_output *mo, const ptc_bindings *b, ptc_tensor *out,
                       ptc_error *err)
{
    int64_t v;
    if (ptc_dim_eval(mo->size, b, &v, err) || ptc_tensor_alloc(out, PTC_I64, 0, NULL, err))
        return -1;
    *(int64_t *)out->data = v;
    return 0;
}

static int take_outputs(ptc_model *m, ptc_tensor *graph_outs, const ptc_bindings *b,
                        ptc_tensor *outputs, ptc_error *err)
{
    int rc = 0, o;
    for (o = 0; o < m->nout; o++) {
        const model_output *mo = &m->outs[o];
        if (mo->graph_output < 0 && mo->input < 0) {
            if ((rc = size_output(mo, b, &outputs[o], err)))
                break;
            continue;
        }
        outputs[o] = mo->graph_output >= 0 ? graph_outs[mo->graph_output] : m->slots[mo->input];
        ptc_tensor_retain(&outputs[o]);
    }
    for (int k = 0; rc && k < o; k++) /* the outputs handed out before the failure */
        ptc_tensor_release(&outputs[k]);
    for (int i = 0; i < m->g->noutputs; i++)
        ptc_tensor_release(&graph_outs[i]);
    return rc;
}

/* The export traced contiguous inputs (ptc.export makes them so), and the
 * compiled graph relies on it: a CPU input in another layout runs as a
 * contiguous copy (*copy, zeroed when none is needed). */
static int contiguous_input(const ptc_tensor *in, ptc_tensor *copy, ptc_error *err)
{
    memset(copy, 0, sizeof *copy);
    if (in->device.kind != PTC_DEV_CPU || ptc_tensor_is_contiguous(in))
        return 0;
    return ptc_tensor_alloc(copy, in->dtype, in->ndim, in->sizes, err) ||
                   ptc_tensor_copy(copy, in, err)
               ? -1
               : 0;
}

int ptc_model_run(ptc_model *m, const ptc_tensor *inputs, ptc_tensor *outputs, ptc_error *err)
{
    ptc_bindings b = {0};
    if (check_inputs(m, inputs, &b, err))
        return -1;
    ptc_tensor *copies = calloc((size_t)m->nuser + 1, sizeof *copies);
    ptc_tensor *graph_outs = calloc((size_t)m->g->noutputs + 1, sizeof *graph_outs);
    int rc = 0;
    pthread_mutex_lock(&m->lock);
    for (int u = 0; u < m->nuser && rc == 0; u++) {
        rc = contiguous_input(&inputs[u], &copies[u], err);
        m->slots[m->user_at[u]] = copies[u].data ? copies[u] : inputs[u];
    }
    if (rc == 0)
        rc = ptc_program_run(m->prog, m->slots, m->g->ninputs, graph_outs, NULL, 0, err);
    if (rc == 0)
        rc = take_outputs(m, graph_outs, &b, outputs, err);
    for (int u = 0; u < m->nuser; u++) {
        m->slots[m->user_at[u]] = (ptc_tensor){0};
        if (copies[u].storage)
            ptc_tensor_release(&copies[u]);
    }
    pthread_mutex_unlock(&m->lock);
    free(copies);
    free(graph_outs);
    return rc;
}
