/* The meta corpus generated from PyTorch (tests/data/meta, written by
 * tests/python/gen_meta_cases.py): every graph of tests/data/meta/<op>.ptir
 * holds one node whose printed output types are what eager torch produced,
 * and must pass ptc_ops_verify; every file of tests/data/meta/errors/ is a
 * case where torch raised, whose header says "# expect: MetaError <op>", and
 * must fail ptc_ops_verify with a MetaError from that op's meta function.
 *
 * The valid graphs also run in the reference interpreter, whose kernels
 * must accept the types meta inferred (random floats; integer inputs are 0
 * for indexing ops, so every index is valid, and 1 elsewhere, as are bools).
 *
 * Symbolic sizes: each valid graph is inferred again with one input size v
 * (>= 2) replaced by a symbol s0 everywhere it occurs among the inputs. The
 * meta function may answer that it cannot decide, but when it infers types,
 * they must evaluate at s0 = v to the types torch produced.
 *
 * All files are checked and every disagreement is listed before the test
 * fails. PTC_META_DEBUG=1 lists the undecided symbolic cases. PTC_META_CORPUS overrides the
 * directory (to check a fresh corpus).
 */
#define _GNU_SOURCE
#include "ops/ops.h"

#include <check.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

typedef struct tally {
    int files, graphs, failures, ran;
    int symbolic_decided, symbolic_undecided;
    ptc_buf report;
} tally;

static const char *corpus_dir(char *buf, size_t size)
{
    const char *env = getenv("PTC_META_CORPUS");
    if (env && *env)
        return env;
    const char *src = getenv("PTC_SOURCE_DIR");
    snprintf(buf, size, "%s/tests/data/meta", src && *src ? src : ".");
    return buf;
}

__attribute__((format(printf, 3, 4))) static void failure(tally *t, const char *path,
                                                          const char *fmt, ...)
{
    t->failures++;
    if (t->failures > 400)
        return;
    va_list ap;
    va_start(ap, fmt);
    ptc_buf_printf(&t->report, "%s: ", path);
    ptc_buf_vprintf(&t->report, fmt, ap);
    ptc_buf_putc(&t->report, '\n');
    va_end(ap);
}

/* Sorted *.ptir names of a directory (malloc'd; *n entries). */
static char **list_ptir(const char *dir, int *n)
{
    struct dirent **ents;
    int k = scandir(dir, &ents, NULL, alphasort);
    ck_assert_msg(k >= 0, "cannot read %s", dir);
    char **names = calloc((size_t)k + 1, sizeof *names);
    *n = 0;
    for (int i = 0; i < k; i++) {
        size_t len = strlen(ents[i]->d_name);
        if (len > 5 && strcmp(ents[i]->d_name + len - 5, ".ptir") == 0)
            names[(*n)++] = strdup(ents[i]->d_name);
        free(ents[i]);
    }
    free(ents);
    return names;
}

static void run_graph(tally *t, const char *path, const ptc_graph *g);
static void symbolic_checks(tally *t, const char *path, ptc_graph *g);

static bool meta_static_is(ptc_dim d, int64_t v)
{
    return !d.sym && d.value == v;
}

static void check_valid(tally *t, const char *path)
{
    ptc_error err;
    ptc_module *m = ptc_parse_file(path, &err);
    t->files++;
    if (!m) {
        failure(t, path, "does not parse: %s (line %d)", err.msg, err.line);
        return;
    }
    for (int i = 0; i < m->ngraphs; i++) {
        t->graphs++;
        if (ptc_ops_verify(m->graphs[i], 0, &err)) {
            const ptc_node *n =
                err.has_node ? ptc_graph_find_node(m->graphs[i], err.node_id) : NULL;
            failure(t, path, "graph %s (line %d): %s: %s", m->graphs[i]->name, n ? n->text_line : 0,
                    ptc_errclass_name(err.cls), err.msg);
        } else {
            run_graph(t, path, m->graphs[i]);
            if (m->graphs[i]->ninputs <= 16)
                symbolic_checks(t, path, m->graphs[i]);
        }
    }
    ptc_module_free(m);
}

static bool indexing_op(ptc_op op)
{
    return op == PTC_OP_INDEX || op == PTC_OP_INDEX_SELECT || op == PTC_OP_GATHER ||
           op == PTC_OP_EMBEDDING || op == PTC_OP_PRIMS_GATHER || op == PTC_OP_PRIMS_INDEX_SELECT ||
           op == PTC_OP_PRIMS_SCATTER_ADD;
}

/* An input of type ty (static sizes), laid out with its strides if any. */
static void make_input(const ptc_ttype *ty, bool index_ints, uint64_t seed, ptc_tensor *t)
{
    int64_t sizes[PTC_MAX_DIMS], span = 1;
    for (int d = 0; d < ty->ndim; d++) {
        sizes[d] = ty->shape[d].value;
        if (ty->layout == PTC_LAYOUT_STRIDED)
            span += (sizes[d] - 1) * ty->strides[d].value;
    }
    ptc_error err;
    if (ty->layout == PTC_LAYOUT_STRIDED) {
        ck_assert_int_eq(ptc_tensor_alloc(t, ty->dtype, 1, &span, &err), 0);
        t->ndim = ty->ndim;
        for (int d = 0; d < ty->ndim; d++) {
            t->sizes[d] = sizes[d];
            t->strides[d] = ty->strides[d].value;
        }
    } else {
        ck_assert_int_eq(ptc_tensor_alloc(t, ty->dtype, ty->ndim, sizes, &err), 0);
    }
    ptc_tensor_fill_random(t, seed);
    if (!ptc_dtype_is_float(ty->dtype)) { /* no integer division by zero */
        int64_t idx[PTC_MAX_DIMS] = {0}, n = ptc_tensor_numel(t);
        for (int64_t i = 0; i < n; i++) {
            ptc_tensor_set_i64(t, idx, index_ints && ty->dtype != PTC_BOOL ? 0 : 1);
            for (int d = ty->ndim - 1; d >= 0 && ++idx[d] == sizes[d]; d--)
                idx[d] = 0;
        }
    }
}

static void run_graph(tally *t, const char *path, const ptc_graph *g)
{
    ptc_tensor in[16] = {0}, out[16] = {0};
    ck_assert(g->ninputs <= 16 && g->noutputs <= 16);
    bool index_ints = g->nnodes > 0 && indexing_op(g->nodes[0]->op);
    for (int i = 0; i < g->ninputs; i++)
        make_input(&g->inputs[i]->type, index_ints, (uint64_t)i + 1, &in[i]);
    ptc_error err;
    if (ptc_interp_run(g, in, g->ninputs, out, NULL, &err))
        failure(t, path, "graph %s runs in the interpreter: %s: %s", g->name,
                ptc_errclass_name(err.cls), err.msg);
    else
        t->ran++;
    for (int i = 0; i < g->noutputs; i++)
        ptc_tensor_release(&out[i]);
    for (int i = 0; i < g->ninputs; i++)
        ptc_tensor_release(&in[i]);
}

/* Infers node n again with every input dim equal to v made the symbol s0;
 * the result evaluated at s0 = v must equal n's printed types. */
static void symbolic_check(tally *t, const char *path, ptc_graph *g, int64_t v)
{
    ptc_ttype saved[16];
    const ptc_node *n = g->nodes[0];
    ptc_dim s0 = ptc_dim_symbol(g->arena, "s0");
    for (int i = 0; i < g->ninputs; i++) {
        ptc_ttype *ty = &g->inputs[i]->type;
        saved[i] = *ty;
        for (int d = 0; d < ty->ndim; d++)
            if (meta_static_is(ty->shape[d], v))
                ty->shape[d] = s0;
    }
    ptc_arena *a = ptc_arena_new();
    ptc_arg *args = ptc_arena_dup(a, n->args, sizeof *args * (size_t)n->nargs);
    ptc_args_normalize(a, n->op, args);
    ptc_ttype *types;
    int nout;
    ptc_error err;
    ptc_bindings b = {0};
    ptc_bindings_set(&b, "s0", v);
    if (ptc_meta_infer(a, n->op, args, n->nargs, &types, &nout, &err)) {
        t->symbolic_undecided++;
        if (getenv("PTC_META_DEBUG"))
            fprintf(stderr, "UNDECIDED %s\n", err.msg);
    } else {
        t->symbolic_decided++;
        for (int o = 0; o < nout && o < n->nout; o++) {
            const ptc_ttype *want = &n->outs[o]->type;
            bool same =
                nout == n->nout && types[o].dtype == want->dtype && types[o].ndim == want->ndim;
            for (int d = 0; same && d < want->ndim; d++) {
                int64_t got;
                same = ptc_dim_eval(types[o].shape[d], &b, &got, NULL) == 0 &&
                       got == want->shape[d].value;
            }
            if (!same) {
                ptc_buf tb = {0};
                ptc_ttype_print(&tb, &types[o], false);
                failure(t, path, "graph %s with s0 = %lld: result %d is %s", g->name, (long long)v,
                        o, tb.data);
                ptc_buf_free(&tb);
                break;
            }
        }
    }
    ptc_arena_free(a);
    for (int i = 0; i < g->ninputs; i++)
        g->inputs[i]->type = saved[i];
}

static void symbolic_checks(tally *t, const char *path, ptc_graph *g)
{
    int64_t seen[64];
    int nseen = 0;
    for (int i = 0; i < g->ninputs; i++)
        if (g->inputs[i]->type.layout == PTC_LAYOUT_STRIDED)
            return;
    for (int i = 0; i < g->ninputs && i < 16; i++) {
        const ptc_ttype *ty = &g->inputs[i]->type;
        for (int d = 0; d < ty->ndim; d++) {
            int64_t v = ty->shape[d].value;
            bool dup = false;
            for (int k = 0; k < nseen; k++)
                dup = dup || seen[k] == v;
            if (v >= 2 && !dup && nseen < 64) {
                seen[nseen++] = v;
                symbolic_check(t, path, g, v);
            }
        }
    }
}

static void check_error(tally *t, const char *path)
{
    ptc_error err;
    size_t len;
    char *text = ptc_read_file(path, &len, &err);
    ck_assert_msg(text, "%s", err.msg);
    const char *tag = strstr(text, "# expect: MetaError ");
    char op[64] = "";
    if (tag)
        sscanf(tag + strlen("# expect: MetaError "), "%63s", op);
    free(text);
    t->files++;
    t->graphs++;
    if (!*op) {
        failure(t, path, "no '# expect: MetaError <op>' header");
        return;
    }
    ptc_module *m = ptc_parse_file(path, &err);
    if (!m) {
        failure(t, path, "does not parse: %s (line %d)", err.msg, err.line);
        return;
    }
    /* The meta message follows the node ("%r0 = add(...): add: ..."). */
    char want[80];
    snprintf(want, sizeof want, "): %s: ", op);
    if (ptc_ops_verify(m->graphs[0], 0, &err) == 0)
        failure(t, path, "verifies, but torch raised (expected a MetaError from %s)", op);
    else if (err.cls != PTC_ERR_META || !strstr(err.msg, want))
        failure(t, path, "expected a MetaError from %s, got %s: %s", op, ptc_errclass_name(err.cls),
                err.msg);
    ptc_module_free(m);
}

START_TEST(corpus)
{
    char buf[1024], path[2048];
    const char *dir = corpus_dir(buf, sizeof buf);
    tally t = {0};
    int n;
    char **names = list_ptir(dir, &n);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        check_valid(&t, path);
        free(names[i]);
    }
    free(names);
    snprintf(path, sizeof path, "%s/errors", dir);
    int nerr;
    names = list_ptir(path, &nerr);
    for (int i = 0; i < nerr; i++) {
        snprintf(path, sizeof path, "%s/errors/%s", dir, names[i]);
        check_error(&t, path);
        free(names[i]);
    }
    free(names);
    /* The corpus covers every op (one file per op with valid cases). */
    ck_assert_msg(n >= 150 && nerr >= 100,
                  "corpus in %s is incomplete (%d op files, %d error files)", dir, n, nerr);
    if (t.failures)
        fprintf(stderr, "%s", t.report.data);
    ck_assert_msg(t.ran > 1000, "only %d graphs ran", t.ran);
    printf("meta corpus: %d graphs in %d files; %d ran in the interpreter; symbolic: %d "
           "inferred, %d undecided\n",
           t.graphs, t.files, t.ran, t.symbolic_decided, t.symbolic_undecided);
    ck_assert_msg(t.failures == 0, "%d of %d corpus graphs disagree with torch:\n%s", t.failures,
                  t.graphs, t.report.data);
    ptc_buf_free(&t.report);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("meta_corpus");
    TCase *tc = tcase_create("corpus");
    tcase_add_test(tc, corpus);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
