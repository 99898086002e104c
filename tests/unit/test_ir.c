/* Tests for compiler/ir: the .ptir printer and parser (golden files with
 * their expected print embedded, malformed files with their expected error),
 * every op's schema through print and parse, symbolic sizes, dtype promotion
 * against torch's table, tensor files, graph editing and the verifier.
 */
#define _GNU_SOURCE
#include "ir/ir.h"

#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "address_limit.h"
#include "promote_table.inc"

/* ---- helpers --------------------------------------------------------------- */

static const char *source_dir(void)
{
    const char *d = getenv("PTC_SOURCE_DIR");
    return d && *d ? d : ".";
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted paths of the .ptir files in source_dir()/sub (malloc'd). */
static char **list_ptir(const char *sub, int *n)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", source_dir(), sub);
    DIR *d = opendir(dir);
    ck_assert_msg(d, "cannot open %s (is PTC_SOURCE_DIR set?)", dir);
    char **paths = calloc(1024, sizeof *paths);
    *n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && *n < 1023) {
        size_t len = strlen(e->d_name);
        if (len > 5 && strcmp(e->d_name + len - 5, ".ptir") == 0)
            ck_assert_int_ne(asprintf(&paths[(*n)++], "%s/%s", dir, e->d_name), -1);
    }
    closedir(d);
    qsort(paths, (size_t)*n, sizeof *paths, cmp_str);
    return paths;
}

static void free_list(char **paths, int n)
{
    for (int i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
}

static char *print_module(const ptc_module *m)
{
    ptc_buf b = {0};
    ptc_print_module(&b, m);
    return b.data;
}

static char *print_graph(const ptc_graph *g)
{
    ptc_buf b = {0};
    ptc_print_graph(&b, g);
    return b.data;
}

static char *dim_str(ptc_dim d)
{
    ptc_buf b = {0};
    ptc_dim_print(&b, d);
    return b.data;
}

static ptc_module *parse_ok(const char *text)
{
    ptc_error err;
    ptc_module *m = ptc_parse_module(text, strlen(text), "test", &err);
    ck_assert_msg(m, "%d:%d: %s", err.line, err.col, err.msg);
    return m;
}

/* ---- golden files ---------------------------------------------------------- */

/* The text between "# >>> output" and "# <<<", without the "# " prefixes. */
static char *expected_output(const char *text, const char *path)
{
    const char *start = strstr(text, "# >>> output");
    ck_assert_msg(start, "%s: no '# >>> output' block", path);
    start = strchr(start, '\n') + 1;
    ptc_buf b = {0};
    ptc_buf_puts(&b, "");
    for (const char *p = start; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (n > 0 && p[n - 1] == '\r')
            n--;
        if (n == 5 && memcmp(p, "# <<<", 5) == 0)
            return b.data;
        ck_assert_msg(n >= 1 && p[0] == '#' && (n == 1 || p[1] == ' '),
                      "%s: expected-output lines start with '# '", path);
        if (n > 2)
            ptc_buf_putn(&b, p + 2, n - 2);
        ptc_buf_putc(&b, '\n');
        if (!nl)
            break;
        p = nl + 1;
    }
    ck_abort_msg("%s: no '# <<<' closing the expected output", path);
    return NULL;
}

START_TEST(golden_round_trips)
{
    int n;
    char **paths = list_ptir("tests/golden", &n);
    ck_assert_msg(n >= 30, "only %d golden files", n);
    for (int i = 0; i < n; i++) {
        ptc_error err;
        size_t len;
        char *text = ptc_read_file(paths[i], &len, &err);
        ck_assert_msg(text, "%s", err.msg);
        char *want = expected_output(text, paths[i]);
        ptc_module *m = ptc_parse_module(text, len, paths[i], &err);
        ck_assert_msg(m, "%s:%d:%d: %s", paths[i], err.line, err.col, err.msg);
        for (int g = 0; g < m->ngraphs; g++)
            ck_assert_msg(ptc_ir_verify(m->graphs[g], 0, &err) == 0, "%s: %s", paths[i], err.msg);
        char *got = print_module(m);
        ck_assert_msg(strcmp(got, want) == 0, "%s: printed\n%s\nexpected\n%s", paths[i], got, want);
        /* print(parse(print(g))) == print(g) */
        ptc_module *again = ptc_parse_module(got, strlen(got), "reprint", &err);
        ck_assert_msg(again, "%s: reprint fails at %d:%d: %s", paths[i], err.line, err.col, err.msg);
        char *got2 = print_module(again);
        ck_assert_str_eq(got2, got);
        free(got2);
        ptc_module_free(again);
        free(got);
        ptc_module_free(m);
        free(want);
        free(text);
    }
    free_list(paths, n);
}
END_TEST

/* ---- malformed files ------------------------------------------------------- */

START_TEST(malformed_errors)
{
    int n;
    char **paths = list_ptir("tests/malformed", &n);
    ck_assert_msg(n >= 40, "only %d malformed files", n);
    for (int i = 0; i < n; i++) {
        ptc_error err;
        size_t len;
        char *text = ptc_read_file(paths[i], &len, &err);
        ck_assert_msg(text, "%s", err.msg);
        /* "# error: LINE:COL: message" (found with memmem: files may hold NULs) */
        const char *decl = memmem(text, len, "# error: ", 9);
        ck_assert_msg(decl, "%s: no '# error: LINE:COL: message' line", paths[i]);
        int line = 0, col = 0, used = 0;
        ck_assert_msg(sscanf(decl + 9, "%d:%d: %n", &line, &col, &used) == 2 && used > 0,
                      "%s: malformed '# error:' line", paths[i]);
        const char *msg = decl + 9 + used;
        char want[512];
        size_t mlen = strcspn(msg, "\r\n");
        snprintf(want, sizeof want, "%.*s", (int)mlen, msg);

        ptc_module *m = ptc_parse_module(text, len, paths[i], &err);
        ck_assert_msg(!m, "%s parsed", paths[i]);
        ck_assert_int_eq(err.cls, PTC_ERR_PARSE);
        ck_assert_str_eq(err.file, paths[i]);
        ck_assert_msg(strstr(err.msg, want), "%s: message '%s' lacks '%s'", paths[i], err.msg, want);
        ck_assert_msg(err.line == line && err.col == col, "%s: error at %d:%d, declared %d:%d (%s)",
                      paths[i], err.line, err.col, line, col, err.msg);
        ck_assert_msg(!strchr(err.msg, '\n'), "%s: message is not one line", paths[i]);
        /* The formatted error names file:line:col. */
        char formatted[2048], prefix[1100];
        ptc_error_format(&err, formatted, sizeof formatted);
        snprintf(prefix, sizeof prefix, "%s:%d:%d: parse: ParseError: ", paths[i], line, col);
        ck_assert_msg(strncmp(formatted, prefix, strlen(prefix)) == 0, "%s", formatted);
        free(text);
    }
    free_list(paths, n);
}
END_TEST

START_TEST(examples_parse)
{
    int n;
    char **paths = list_ptir("examples", &n);
    ck_assert_msg(n >= 5, "only %d examples", n);
    for (int i = 0; i < n; i++) {
        ptc_error err;
        ptc_module *m = ptc_parse_file(paths[i], &err);
        ck_assert_msg(m, "%s:%d:%d: %s", paths[i], err.line, err.col, err.msg);
        char *text = print_module(m);
        ptc_module *again = parse_ok(text);
        char *text2 = print_module(again);
        ck_assert_str_eq(text2, text);
        free(text2);
        free(text);
        ptc_module_free(again);
        ptc_module_free(m);
    }
    free_list(paths, n);
}
END_TEST

START_TEST(parse_file_missing)
{
    ptc_error err;
    ck_assert_ptr_null(ptc_parse_file("/nonexistent/graph.ptir", &err));
    ck_assert_int_eq(err.cls, PTC_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err.msg, "/nonexistent/graph.ptir"));
    /* NULL err is allowed. */
    ck_assert_ptr_null(ptc_parse_module("nonsense", 8, NULL, NULL));
}
END_TEST

/* ---- every op through print and parse -------------------------------------- */

/* A value for a required parameter, or a non-default one for `variant`. */
static ptc_arg sample_arg(ptc_graph *g, const ptc_param *p, ptc_value *x, bool variant)
{
    ptc_arena *a = g->arena;
    int n = p->list_len > 0 ? p->list_len : 2;
    int64_t ints[8] = {3, 1, 4, 1, 5, 9, 2, 6};
    switch ((ptc_paramkind)p->kind) {
    case PTC_PK_TENSOR:
    case PTC_PK_TENSOR_OPT: return ptc_arg_value(x);
    case PTC_PK_TENSOR_SCALAR:
    case PTC_PK_TENSOR_SCALAR_OPT: return variant ? ptc_arg_float(0.25) : ptc_arg_value(x);
    case PTC_PK_TENSOR_LIST: return ptc_arg_values(a, (ptc_value *[]){x, x}, variant ? 2 : 1);
    case PTC_PK_TENSOR_OPT_LIST: return ptc_arg_values(a, (ptc_value *[]){NULL, x}, 2);
    case PTC_PK_SCALAR:
    case PTC_PK_SCALAR_OPT: return variant ? ptc_arg_float(-1.5) : ptc_arg_int(2);
    case PTC_PK_INT:
    case PTC_PK_INT_OPT: return ptc_arg_int(variant ? -7 : 1);
    case PTC_PK_INT_LIST:
    case PTC_PK_INT_LIST_OPT: return ptc_arg_ints(a, ints, variant ? n : (p->list_len ? n : 1));
    case PTC_PK_FLOAT:
    case PTC_PK_FLOAT_OPT: return ptc_arg_float(variant ? 1e-7 : 0.5);
    case PTC_PK_BOOL: return ptc_arg_bool(variant ? !(p->has_default && p->def.b) : true);
    case PTC_PK_STR:
    case PTC_PK_STR_OPT: return ptc_arg_str(a, variant ? "tanh \"q\"" : "none");
    case PTC_PK_DTYPE:
    case PTC_PK_DTYPE_OPT: return ptc_arg_dtype(variant ? PTC_BF16 : PTC_F32);
    case PTC_PK_DEVICE:
    case PTC_PK_DEVICE_OPT: return ptc_arg_device(variant ? (ptc_device){PTC_DEV_CUDA, 1} : PTC_CPU);
    case PTC_PK_COUNT: break;
    }
    ck_abort_msg("unknown param kind");
    return ptc_arg_none();
}

START_TEST(every_op_round_trips)
{
    ptc_graph *g = ptc_graph_new(NULL, "ops");
    int64_t sizes[2] = {2, 3};
    ptc_ttype t = ptc_ttype_make(PTC_F32, 2, sizes, PTC_CPU);
    ptc_value *x = ptc_graph_add_input(g, "x", &t);
    ptc_ttype outs[3] = {t, t, t};
    for (int op = 0; op < PTC_OP_COUNT; op++) {
        const ptc_schema *s = ptc_op_schema((ptc_op)op);
        ck_assert_str_eq(ptc_op_name((ptc_op)op), s->name);
        ck_assert_int_eq(ptc_op_lookup(s->name), op);
        for (int variant = 0; variant < 2; variant++) {
            ptc_arg args[16];
            ptc_args_defaults((ptc_op)op, args);
            for (int i = 0; i < s->nparams; i++)
                if (variant || !s->params[i].has_default)
                    args[i] = sample_arg(g, &s->params[i], x, variant);
            ptc_error err;
            ck_assert_msg(ptc_args_check((ptc_op)op, args, s->nparams, &err) == 0, "%s: %s", s->name,
                          err.msg);
            ptc_args_normalize(g->arena, (ptc_op)op, args);
            int nout = s->nreturns >= 0 ? s->nreturns : 3;
            ptc_graph_add_node(g, (ptc_op)op, args, s->nparams, nout, outs, NULL);
        }
    }
    ptc_graph_set_outputs(g, &x, 1);
    ptc_error err;
    ck_assert_msg(ptc_ir_verify(g, 0, &err) == 0, "%s", err.msg);
    char *text = print_graph(g);
    ptc_module *m = ptc_parse_module(text, strlen(text), "ops", &err);
    ck_assert_msg(m, "%d:%d: %s\n%s", err.line, err.col, err.msg, text);
    const ptc_graph *h = m->graphs[0];
    ck_assert_int_eq(h->nnodes, g->nnodes);
    for (int i = 0; i < g->nnodes; i++) {
        const ptc_node *a = g->nodes[i], *b = h->nodes[i];
        ck_assert_int_eq(a->op, b->op);
        ck_assert_int_eq(a->nout, b->nout);
        for (int k = 0; k < a->nargs; k++) {
            /* Values are compared by name (they live in different graphs). */
            const ptc_arg *p = &a->args[k], *q = &b->args[k];
            ck_assert_int_eq(p->kind, q->kind);
            if (p->kind == PTC_ARG_VALUE)
                ck_assert_str_eq(p->v->name, q->v->name);
            else if (p->kind == PTC_ARG_VALUES)
                ck_assert_int_eq(p->vs.n, q->vs.n);
            else
                ck_assert_msg(ptc_arg_eq(p, q), "%s arg %d differs after a round trip",
                              ptc_op_name(a->op), k);
        }
    }
    char *again = print_module(m);
    ck_assert_str_eq(again, text);
    free(again);
    free(text);
    ptc_module_free(m);
    ptc_graph_free(g);
}
END_TEST

/* ---- symbolic sizes -------------------------------------------------------- */

/* Replacing a symbol, solving a relation for one, and the input dims that
 * determine their symbol: what capture's shape env and the runtime rely on. */
START_TEST(sym_subst_solve_binds)
{
    ptc_arena *a = ptc_arena_new();
    ptc_dim s0 = ptc_dim_symbol(a, "s0"), s1 = ptc_dim_symbol(a, "s1"), c2 = ptc_dim_c(2), r;
    ptc_dim e = ptc_dim_add(a, ptc_dim_mul(a, s1, s0), ptc_dim_floordiv(a, s1, c2));
    char *t = dim_str(ptc_dim_subst(a, e, "s1", ptc_dim_mul(a, c2, s0)));
    ck_assert_str_eq(t, "2*s0*s0+s0"); /* s0*(2*s0) + (2*s0)//2 */
    free(t);
    ck_assert(ptc_dim_eq(ptc_dim_subst(a, e, "s9", s0), e));
    /* 2*s0 - s1 == 0: s1 = 2*s0; not for s0 (its coefficient 2 does not divide s1). */
    ptc_dim diff = ptc_dim_sub(a, ptc_dim_mul(a, c2, s0), s1);
    ck_assert(ptc_dim_solve(a, diff, "s1", &r));
    ck_assert(ptc_dim_eq(r, ptc_dim_mul(a, c2, s0)));
    ck_assert(!ptc_dim_solve(a, diff, "s0", &r));
    ck_assert(!ptc_dim_solve(a, ptc_dim_sub(a, ptc_dim_mul(a, s0, s1), ptc_dim_c(16)), "s0", &r));
    ck_assert(!ptc_dim_solve(a, ptc_dim_sub(a, ptc_dim_floordiv(a, s0, c2), s1), "s0", &r));
    /* 4*s2+1 binds s2 from a size it fits; s0*s1 binds nothing. */
    const char *name;
    int64_t v;
    ptc_dim lin =
        ptc_dim_add(a, ptc_dim_mul(a, ptc_dim_c(4), ptc_dim_symbol(a, "s2")), ptc_dim_c(1));
    ck_assert(ptc_dim_binds(lin, &name, 13, &v) && strcmp(name, "s2") == 0 && v == 3);
    ck_assert(!ptc_dim_binds(lin, &name, 12, &v));
    ck_assert(!ptc_dim_binds(ptc_dim_mul(a, s0, s1), &name, 12, NULL));
    ck_assert(!ptc_dim_binds(ptc_dim_c(4), &name, 4, NULL));
    /* s5 + s4 - 2 binds s5 once s4 is known, and nothing before */
    ptc_dim slack = ptc_dim_add(
        a, ptc_dim_add(a, ptc_dim_symbol(a, "s5"), ptc_dim_symbol(a, "s4")), ptc_dim_c(-2));
    ptc_bindings known = {0};
    ck_assert(!ptc_dim_binds_given(slack, &known, &name, 9, &v));
    ptc_bindings_set(&known, "s4", 6);
    ck_assert(ptc_dim_binds_given(slack, &known, &name, 9, &v) && strcmp(name, "s5") == 0 &&
              v == 5);
    ck_assert(!ptc_dim_binds_given(ptc_dim_mul(a, s0, ptc_dim_symbol(a, "s4")), &known, &name, 12,
                                   &v)); /* not linear in s0's term */
    ptc_arena_free(a);
}
END_TEST

START_TEST(sym_canonical_forms)
{
    ptc_arena *a = ptc_arena_new();
    ptc_dim s0 = ptc_dim_symbol(a, "s0"), s1 = ptc_dim_symbol(a, "s1"), s10 = ptc_dim_symbol(a, "s10");
    ptc_dim s2 = ptc_dim_symbol(a, "s2");
    ptc_dim c2 = ptc_dim_c(2), c3 = ptc_dim_c(3);
#define EXPECT(dim, text)                                                                          \
    do {                                                                                           \
        char *s_ = dim_str(dim);                                                                   \
        ck_assert_str_eq(s_, text);                                                                \
        free(s_);                                                                                  \
    } while (0)
    EXPECT(ptc_dim_c(16), "16");
    EXPECT(ptc_dim_c(-3), "-3");
    EXPECT(s0, "s0");
    EXPECT(ptc_dim_add(a, ptc_dim_mul(a, c2, s0), ptc_dim_c(1)), "2*s0+1");
    EXPECT(ptc_dim_add(a, s1, s0), "s0+s1");
    EXPECT(ptc_dim_add(a, s10, s2), "s2+s10"); /* numbers in names compare by value */
    EXPECT(ptc_dim_mul(a, s1, s0), "s0*s1");
    EXPECT(ptc_dim_add(a, ptc_dim_mul(a, s1, s0), ptc_dim_mul(a, s0, s1)), "2*s0*s1");
    EXPECT(ptc_dim_sub(a, s0, s0), "0");
    EXPECT(ptc_dim_sub(a, ptc_dim_c(1), s0), "-s0+1");
    EXPECT(ptc_dim_add(a, ptc_dim_mul(a, s0, s0), s0), "s0*s0+s0");
    EXPECT(ptc_dim_floordiv(a, ptc_dim_add(a, s0, ptc_dim_c(1)), c2), "(s0+1)//2");
    EXPECT(ptc_dim_floordiv(a, ptc_dim_mul(a, ptc_dim_c(4), s0), c2), "2*s0");
    EXPECT(ptc_dim_floordiv(a, ptc_dim_add(a, ptc_dim_mul(a, ptc_dim_c(4), s0), c3), c2), "2*s0+1");
    EXPECT(ptc_dim_floordiv(a, s0, ptc_dim_c(1)), "s0");
    EXPECT(ptc_dim_floordiv(a, s0, s0), "1");
    EXPECT(ptc_dim_floordiv(a, s0, s1), "s0//s1");
    EXPECT(ptc_dim_floordiv(a, s0, ptc_dim_c(-2)), "-s0+s0//2");
    EXPECT(ptc_dim_mod(a, s0, ptc_dim_c(1)), "0");
    EXPECT(ptc_dim_mod(a, ptc_dim_add(a, ptc_dim_mul(a, ptc_dim_c(6), s0), ptc_dim_c(7)), c3), "1");
    EXPECT(ptc_dim_mod(a, ptc_dim_add(a, s0, ptc_dim_c(7)), c3), "(s0+1)%3");
    EXPECT(ptc_dim_mod(a, s0, s0), "0");
    EXPECT(ptc_dim_mul(a, c3, ptc_dim_floordiv(a, s0, c2)), "3*(s0//2)");
    EXPECT(ptc_dim_mul(a, ptc_dim_c(-1), ptc_dim_floordiv(a, s0, c2)), "-(s0//2)");
    EXPECT(ptc_dim_ceildiv(a, s0, c2), "s0-s0//2"); /* ceil(s0/2) */
    EXPECT(ptc_dim_c(7), "7");
    EXPECT(ptc_dim_floordiv(a, ptc_dim_c(-7), c2), "-4");
    EXPECT(ptc_dim_mod(a, ptc_dim_c(-7), c3), "2");
    EXPECT(ptc_dim_mod(a, ptc_dim_c(7), ptc_dim_c(-3)), "-2");
    EXPECT(ptc_dim_c(INT64_MIN), "-9223372036854775808");
    ck_assert(ptc_dim_eq(ptc_dim_add(a, s0, s1), ptc_dim_add(a, s1, s0)));
    ck_assert(!ptc_dim_eq(s0, s1));
    ck_assert(!ptc_dim_eq(s0, ptc_dim_c(0)));
    ck_assert(ptc_dim_eq(ptc_dim_c(4), ptc_dim_floordiv(a, ptc_dim_c(9), c2)));
    /* Symbols of an expression, deduplicated. */
    const char *names[8];
    int n = ptc_dim_symbols(ptc_dim_add(a, ptc_dim_mul(a, s1, s0), ptc_dim_floordiv(a, s0, s2)),
                            names, 0, 8);
    ck_assert_int_eq(n, 3);
    /* Copies are structurally equal and independent of the source arena. */
    ptc_arena *b = ptc_arena_new();
    ptc_dim e = ptc_dim_add(a, ptc_dim_mul(a, s1, ptc_dim_floordiv(a, s0, c3)), c2);
    ptc_dim copy = ptc_dim_copy(b, e);
    ck_assert(ptc_dim_eq(e, copy));
    char *before = dim_str(e);
    ptc_arena_free(a);
    EXPECT(copy, before);
    free(before);
    ptc_arena_free(b);
#undef EXPECT
}
END_TEST

START_TEST(sym_parse_and_eval)
{
    ptc_arena *a = ptc_arena_new();
    ptc_bindings bind = {0};
    ck_assert_int_eq(ptc_bindings_set(&bind, "s0", 10), 0);
    ck_assert_int_eq(ptc_bindings_set(&bind, "s1", 3), 0);
    ck_assert_int_eq(ptc_bindings_set(&bind, "s0", 11), 0); /* rebinding replaces */
    ck_assert_int_eq(bind.n, 2);
    static const struct {
        const char *text, *canon;
        int64_t value;
    } cases[] = {
        {"2*s0+1", "2*s0+1", 23},          {"s0 * (s1 + 1)", "s0*s1+s0", 44},
        {"(s0+1)//2", "(s0+1)//2", 6},     {"-s0//2", "-s0+s0//2", -6},
        {"-(s0//2)", "-(s0//2)", -5},      {"s0%s1", "s0%s1", 2},
        {"-s0%s1", "(-s0)%s1", 1},         {"s0//-3", "-s0+(2*s0)//3", -4},
        {"7 - 2 - 1", "4", 4},             {"2*3+4*5", "26", 26},
        {"s1*s0 - s0*s1 + s1", "s1", 3},   {"((s0))", "s0", 11},
        {"s0//s1*s1 + s0%s1", "s1*(s0//s1)+s0%s1", 11},
        {"9223372036854775807", "9223372036854775807", INT64_MAX},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ptc_dim d;
        const char *end;
        ptc_error err;
        ck_assert_msg(ptc_dim_parse(a, cases[i].text, &end, &d, &err) == 0, "%s: %s", cases[i].text,
                      err.msg);
        ck_assert_msg(*end == 0, "%s: stopped at '%s'", cases[i].text, end);
        char *s = dim_str(d);
        ck_assert_msg(strcmp(s, cases[i].canon) == 0, "%s printed as %s", cases[i].text, s);
        free(s);
        int64_t v;
        ck_assert_int_eq(ptc_dim_eval(d, &bind, &v, &err), 0);
        ck_assert_msg(v == cases[i].value, "%s = %lld", cases[i].text, (long long)v);
    }
    ptc_dim d;
    ptc_error err;
    const char *end;
    ck_assert_int_eq(ptc_dim_parse(a, "s0+s9", &end, &d, &err), 0);
    int64_t v;
    ck_assert_int_eq(ptc_dim_eval(d, &bind, &v, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "symbol 's9' is not bound"));
    ck_assert_int_eq(ptc_dim_parse(a, "s0//(s1-3)", &end, &d, &err), 0);
    ck_assert_int_eq(ptc_dim_eval(d, &bind, &v, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "division by zero"));
    ck_assert_int_eq(ptc_dim_parse(a, "s0*4611686018427387904", &end, &d, &err), 0);
    ck_assert_int_eq(ptc_dim_eval(d, &bind, &v, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "overflows"));
    /* Parse errors leave *end at the problem. */
    const char *bad = "2*(s0+";
    ck_assert_int_eq(ptc_dim_parse(a, bad, &end, &d, &err), -1);
    ck_assert_int_eq((int)(end - bad), 6);
    ck_assert_int_eq(ptc_dim_parse(a, "s0//0", &end, &d, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "division by zero"));
    ck_assert_int_eq(ptc_dim_parse(a, "99999999999999999999", &end, &d, &err), -1);
    /* Parsing stops at what is not part of the expression. */
    ck_assert_int_eq(ptc_dim_parse(a, "s0+1, 3", &end, &d, &err), 0);
    ck_assert_str_eq(end, ", 3");
    /* Nesting is bounded, not a stack overflow. */
    char deep[400];
    memset(deep, '(', sizeof deep - 1);
    deep[sizeof deep - 1] = 0;
    ck_assert_int_eq(ptc_dim_parse(a, deep, &end, &d, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "nested too deeply"));
    ptc_bindings full = {0};
    char names[40][8];
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], sizeof names[i], "s%d", i);
        int rc = ptc_bindings_set(&full, names[i], i);
        ck_assert_int_eq(rc, i < 32 ? 0 : -1);
    }
    ptc_arena_free(a);
}
END_TEST

/* Random expressions built through the API next to their value computed
 * directly with Python's floor semantics. */
typedef struct rng {
    uint64_t s;
} rng;

static uint64_t next(rng *r)
{
    r->s = r->s * 6364136223846793005ULL + 1442695040888963407ULL;
    return r->s >> 33;
}

static int64_t py_floordiv(int64_t x, int64_t y)
{
    int64_t q = x / y;
    return (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q;
}

static int64_t py_mod(int64_t x, int64_t y) { return x - py_floordiv(x, y) * y; }

static ptc_dim random_expr(ptc_arena *a, rng *r, int depth, const int64_t *vals, int64_t *value)
{
    static const char *const syms[] = {"s0", "s1", "s2"};
    if (depth == 0 || next(r) % 4 == 0) {
        if (next(r) % 2) {
            int k = (int)(next(r) % 3);
            *value = vals[k];
            return ptc_dim_symbol(a, syms[k]);
        }
        *value = (int64_t)(next(r) % 9) - 4;
        return ptc_dim_c(*value);
    }
    int64_t x, y;
    ptc_dim dx = random_expr(a, r, depth - 1, vals, &x);
    switch (next(r) % 6) {
    case 0: {
        ptc_dim dy = random_expr(a, r, depth - 1, vals, &y);
        *value = x + y;
        return ptc_dim_add(a, dx, dy);
    }
    case 1: {
        ptc_dim dy = random_expr(a, r, depth - 1, vals, &y);
        *value = x - y;
        return ptc_dim_sub(a, dx, dy);
    }
    case 2: {
        ptc_dim dy = random_expr(a, r, depth - 1, vals, &y);
        *value = x * y;
        return ptc_dim_mul(a, dx, dy);
    }
    default: {
        /* Divisors are non-zero under every binding: constants or s+k, s >= 1. */
        ptc_dim dy;
        if (next(r) % 2) {
            y = (int64_t)(next(r) % 5) + 1;
            if (next(r) % 3 == 0)
                y = -y;
            dy = ptc_dim_c(y);
        } else {
            int k = (int)(next(r) % 3);
            int64_t off = (int64_t)(next(r) % 3);
            y = vals[k] + off;
            dy = ptc_dim_add(a, ptc_dim_symbol(a, syms[k]), ptc_dim_c(off));
        }
        bool div = next(r) % 2;
        *value = div ? py_floordiv(x, y) : py_mod(x, y);
        return div ? ptc_dim_floordiv(a, dx, dy) : ptc_dim_mod(a, dx, dy);
    }
    }
}

START_TEST(sym_random_property)
{
    rng r = {20261121};
    int symbolic = 0;
    for (int iter = 0; iter < 3000; iter++) {
        ptc_arena *a = ptc_arena_new();
        int64_t vals[3] = {(int64_t)(next(&r) % 20) + 1, (int64_t)(next(&r) % 20) + 1,
                           (int64_t)(next(&r) % 20) + 1};
        ptc_bindings b = {0};
        ptc_bindings_set(&b, "s0", vals[0]);
        ptc_bindings_set(&b, "s1", vals[1]);
        ptc_bindings_set(&b, "s2", vals[2]);
        int64_t want;
        ptc_dim d = random_expr(a, &r, 4, vals, &want);
        symbolic += d.sym != NULL;
        ptc_error err;
        int64_t got;
        ck_assert_int_eq(ptc_dim_eval(d, &b, &got, &err), 0);
        char *text = dim_str(d);
        ck_assert_msg(got == want, "%s = %lld under s0=%lld s1=%lld s2=%lld, expected %lld", text,
                      (long long)got, (long long)vals[0], (long long)vals[1], (long long)vals[2],
                      (long long)want);
        /* print -> parse gives the same canonical dim, hence the same text. */
        ptc_dim back;
        const char *end;
        ck_assert_msg(ptc_dim_parse(a, text, &end, &back, &err) == 0 && *end == 0, "%s: %s", text,
                      err.msg);
        ck_assert_msg(ptc_dim_eq(back, d), "%s reparsed differently", text);
        char *text2 = dim_str(back);
        ck_assert_str_eq(text2, text);
        ck_assert_int_eq(ptc_dim_eval(back, &b, &got, &err), 0);
        ck_assert(got == want);
        free(text2);
        free(text);
        ptc_arena_free(a);
    }
    ck_assert_int_gt(symbolic, 1000);
}
END_TEST

/* ---- dtypes ---------------------------------------------------------------- */

START_TEST(dtype_promotion_table)
{
    for (int x = 0; x < PTC_DTYPE_COUNT; x++)
        for (int y = 0; y < PTC_DTYPE_COUNT; y++) {
            ptc_dtype got = ptc_dtype_promote((ptc_dtype)x, (ptc_dtype)y);
            ck_assert_msg(strcmp(ptc_dtype_name(got), promote_table[x][y]) == 0,
                          "promote(%s, %s) = %s, torch says %s", ptc_dtype_name((ptc_dtype)x),
                          ptc_dtype_name((ptc_dtype)y), ptc_dtype_name(got), promote_table[x][y]);
        }
}
END_TEST

START_TEST(dtype_names)
{
    static const size_t sizes[] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};
    for (int t = 0; t < PTC_DTYPE_COUNT; t++) {
        ck_assert_int_eq(ptc_dtype_from_name(ptc_dtype_name((ptc_dtype)t)), t);
        ck_assert_uint_eq(ptc_dtype_size((ptc_dtype)t), sizes[t]);
        ck_assert_int_eq(ptc_dtype_is_float((ptc_dtype)t), t >= PTC_F16);
        ck_assert_int_eq(ptc_dtype_is_int((ptc_dtype)t), t >= PTC_U8 && t <= PTC_I64);
        ck_assert_int_eq(ptc_dtype_is_bool((ptc_dtype)t), t == PTC_BOOL);
    }
    ck_assert_int_eq(ptc_dtype_from_name("float32"), PTC_F32);
    ck_assert_int_eq(ptc_dtype_from_name("half"), PTC_F16);
    ck_assert_int_eq(ptc_dtype_from_name("long"), PTC_I64);
    ck_assert_int_eq(ptc_dtype_from_name("bfloat16"), PTC_BF16);
    ck_assert_int_eq(ptc_dtype_from_name("f31"), -1);
    ck_assert_str_eq(ptc_dtype_name(PTC_DTYPE_NONE), "none");
    char buf[16];
    ptc_device d;
    ck_assert_int_eq(ptc_device_parse("cuda:3", &d), 0);
    ptc_device_str(d, buf, sizeof buf);
    ck_assert_str_eq(buf, "cuda:3");
    ck_assert_int_eq(ptc_device_parse("cuda", &d), 0);
    ck_assert_int_eq(d.index, -1);
    ck_assert_int_eq(ptc_device_parse("cuda:", &d), -1);
    ck_assert_int_eq(ptc_device_parse("cuda:1x", &d), -1);
    ck_assert_int_eq(ptc_device_parse("tpu", &d), -1);
    ck_assert(!ptc_device_eq((ptc_device){PTC_DEV_CUDA, 0}, (ptc_device){PTC_DEV_CUDA, 1}));
    ck_assert(ptc_device_eq(PTC_CPU, (ptc_device){PTC_DEV_CPU, 3}));
}
END_TEST

/* ---- arenas ------------------------------------------------------------------ */

/* Under an address-space limit, an arena that cannot get a block marks itself
 * failed for good and carries on from the process's reserve, handing out
 * zeroed, writable memory, instead of aborting the process (a 100,000-node
 * graph aborted ptc.compile's caller); an arena made afterwards has not
 * failed. ASan's shadow memory cannot live under such a limit. */
START_TEST(arena_out_of_memory_is_sticky)
{
#ifndef __SANITIZE_ADDRESS__
    ptc_arena *a = ptc_arena_new(); /* the process's reserve is taken here */
    struct rlimit old;
    limit_address_space(32 << 20, &old);
    size_t total = 0;
    while (!ptc_arena_failed(a) && total < ((size_t)1 << 30)) {
        ptc_arena_alloc(a, 40000);
        total += 40000;
    }
    ck_assert_msg(ptc_arena_failed(a), "%zu bytes allocated under a 32 MiB limit", total);
    for (int i = 0; i < 256; i++) { /* 10 MB more, from the reserve */
        unsigned char *p = ptc_arena_alloc(a, 40000);
        ck_assert(p[0] == 0 && p[39999] == 0);
        p[0] = p[39999] = 1;
    }
    ck_assert(ptc_arena_failed(a));
    ptc_arena_free(a);
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &old), 0);
    ptc_arena *b = ptc_arena_new();
    ptc_arena_alloc(b, 100000);
    ck_assert(!ptc_arena_failed(b));
    ptc_arena_free(b);
#endif
}
END_TEST

/* A growable string out of memory is as an arena: the first growth malloc
 * cannot give takes the reserve and marks it failed (sticky); once that is
 * spent, writes are dropped, the text a NUL-terminated prefix of what was
 * written. On main the string aborted the process ("ptc: out of memory",
 * ptc-run --emit=ptx under a 260 MB limit, CI of 2026-11-28). */
START_TEST(buf_out_of_memory_is_sticky)
{
#ifndef __SANITIZE_ADDRESS__
    ptc_arena_free(ptc_arena_new()); /* the process's reserve is taken here */
    struct rlimit old;
    limit_address_space(32 << 20, &old);
    char chunk[4096];
    memset(chunk, 'x', sizeof chunk - 1);
    chunk[sizeof chunk - 1] = 0;
    ptc_buf b = {0};
    size_t total = 0;
    while (!ptc_buf_failed(&b) && total < ((size_t)1 << 30)) {
        ptc_buf_puts(&b, chunk);
        total += sizeof chunk - 1;
    }
    ck_assert_msg(ptc_buf_failed(&b), "%zu bytes written under a 32 MiB limit", total);
    for (int i = 0; i < 40000; i++) /* 160 MB more: past the reserve, dropped */
        ptc_buf_printf(&b, "%s", chunk);
    ck_assert(ptc_buf_failed(&b));
    ck_assert_uint_ge(b.len, total);
    ck_assert_uint_eq(strlen(b.data), b.len);
    ptc_buf_free(&b);
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &old), 0);
#endif
}
END_TEST

/* ---- tensor files ---------------------------------------------------------- */

static char *tmp_path(const char *name)
{
    char *p;
    ck_assert_int_ne(asprintf(&p, "/tmp/ptc_test_ir_%ld_%s", (long)getpid(), name), -1);
    return p;
}

START_TEST(tensorfile_round_trip)
{
    ptc_tensor ts[PTC_DTYPE_COUNT + 2];
    const char *names[PTC_DTYPE_COUNT + 2];
    char namebuf[PTC_DTYPE_COUNT][16];
    ptc_error err;
    for (int t = 0; t < PTC_DTYPE_COUNT; t++) {
        int64_t sizes[3] = {2, 3, t + 1};
        ck_assert_int_eq(ptc_tensor_alloc(&ts[t], (ptc_dtype)t, 3, sizes, &err), 0);
        ptc_tensor_fill_random(&ts[t], (uint64_t)t);
        snprintf(namebuf[t], sizeof namebuf[t], "t_%s", ptc_dtype_name((ptc_dtype)t));
        names[t] = namebuf[t];
    }
    int64_t none[1] = {0};
    ck_assert_int_eq(ptc_tensor_alloc(&ts[PTC_DTYPE_COUNT], PTC_F32, 0, none, &err), 0); /* 0-dim */
    ptc_tensor_set_f64(&ts[PTC_DTYPE_COUNT], none, -0.5);
    int64_t empty[2] = {0, 5};
    ck_assert_int_eq(ptc_tensor_alloc(&ts[PTC_DTYPE_COUNT + 1], PTC_I64, 2, empty, &err), 0);
    names[PTC_DTYPE_COUNT] = "";
    names[PTC_DTYPE_COUNT + 1] = "empty";
    char *path = tmp_path("round.bin");
    ck_assert_int_eq(ptc_tensorfile_write(path, ts, names, PTC_DTYPE_COUNT + 2, &err), 0);
    ptc_tensorfile f;
    ck_assert_msg(ptc_tensorfile_read(path, &f, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(f.n, PTC_DTYPE_COUNT + 2);
    for (int i = 0; i < f.n; i++) {
        ck_assert_str_eq(f.names[i], names[i]);
        ck_assert_int_eq(f.tensors[i].dtype, ts[i].dtype);
        ck_assert_int_eq(f.tensors[i].ndim, ts[i].ndim);
        for (int d = 0; d < ts[i].ndim; d++)
            ck_assert_int_eq(f.tensors[i].sizes[d], ts[i].sizes[d]);
        ck_assert(ptc_tensor_is_contiguous(&f.tensors[i]));
        size_t nbytes = (size_t)ptc_tensor_numel(&ts[i]) * ptc_dtype_size(ts[i].dtype);
        ck_assert_int_eq(memcmp(f.tensors[i].data, ts[i].data, nbytes), 0);
    }
    ck_assert(ptc_tensor_get_f64(&f.tensors[PTC_DTYPE_COUNT], none) == -0.5);
    ptc_tensorfile_free(&f);
    for (int i = 0; i < PTC_DTYPE_COUNT + 2; i++)
        ptc_tensor_release(&ts[i]);
    unlink(path);
    free(path);
}
END_TEST

START_TEST(tensorfile_strides_restored)
{
    ptc_error err;
    int64_t sizes[3] = {2, 3, 4};
    ptc_tensor base;
    ck_assert_int_eq(ptc_tensor_alloc(&base, PTC_F32, 3, sizes, &err), 0);
    ptc_tensor_fill_random(&base, 7);
    /* A permuted view (dims 2,0,1: "channels last"-like): dense, not contiguous. */
    int64_t psizes[3] = {4, 2, 3}, pstrides[3] = {1, 12, 4};
    ptc_tensor perm = ptc_tensor_borrow(base.data, PTC_F32, 3, psizes, pstrides);
    /* A strided slice (every other column): not dense, stored contiguously. */
    int64_t ssizes[2] = {6, 2}, sstrides[2] = {4, 2};
    ptc_tensor sliced = ptc_tensor_borrow(base.data, PTC_F32, 2, ssizes, sstrides);
    ptc_tensor ts[2] = {perm, sliced};
    const char *names[2] = {"perm", "sliced"};
    char *path = tmp_path("strides.bin");
    ck_assert_int_eq(ptc_tensorfile_write(path, ts, names, 2, &err), 0);
    ptc_tensorfile f;
    ck_assert_msg(ptc_tensorfile_read(path, &f, &err) == 0, "%s", err.msg);
    for (int d = 0; d < 3; d++)
        ck_assert_int_eq(f.tensors[0].strides[d], pstrides[d]);
    ck_assert(!ptc_tensor_is_contiguous(&f.tensors[0]));
    ck_assert(ptc_tensor_is_contiguous(&f.tensors[1]));
    for (int k = 0; k < 2; k++) {
        int64_t idx[3] = {0, 0, 0};
        const ptc_tensor *orig = &ts[k], *got = &f.tensors[k];
        int64_t n = ptc_tensor_numel(orig);
        for (int64_t e = 0; e < n; e++) {
            int64_t rem = e;
            for (int d = orig->ndim - 1; d >= 0; d--) {
                idx[d] = rem % orig->sizes[d];
                rem /= orig->sizes[d];
            }
            ck_assert(ptc_tensor_get_f64(got, idx) == ptc_tensor_get_f64(orig, idx));
        }
    }
    ptc_tensorfile_free(&f);
    ptc_tensor_release(&base);
    unlink(path);
    free(path);
}
END_TEST

/* Rewrites the trailing CRC so that a deliberate edit is not caught by it. */
static void fix_crc(unsigned char *data, size_t len)
{
    uint32_t crc = ptc_crc32(0, data, len - 4);
    memcpy(data + len - 4, &crc, 4);
}

/* torch's is_non_overlapping_and_dense: a dense layout in any dim order,
 * size-1 dims' strides unused; gaps and overlaps are not. */
START_TEST(tensor_dense_layouts)
{
    struct {
        int ndim;
        int64_t sizes[4], strides[4];
        bool dense;
    } cases[] = {
        {4, {8, 4, 3, 3}, {36, 9, 3, 1}, true},  /* contiguous */
        {4, {8, 4, 3, 3}, {36, 1, 12, 4}, true}, /* channels-last */
        {4, {8, 4, 1, 1}, {4, 1, 4, 4}, true},   /* channels-last 1x1: size-1 strides */
        {2, {32, 10}, {1, 32}, true},            /* transposed */
        {2, {4, 10}, {0, 1}, false},             /* expanded: overlaps */
        {2, {4, 5}, {10, 2}, false},             /* a strided slice: gaps */
        {2, {3, 3}, {1, 1}, false},              /* overlapping */
        {2, {0, 5}, {7, 3}, true},               /* empty */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ptc_tensor t = {.ndim = cases[i].ndim};
        memcpy(t.sizes, cases[i].sizes, sizeof cases[i].sizes);
        memcpy(t.strides, cases[i].strides, sizeof cases[i].strides);
        ck_assert_msg(ptc_tensor_is_dense(&t) == cases[i].dense, "case %zu", i);
    }
}
END_TEST

START_TEST(tensorfile_damage_detected)
{
    ptc_error err;
    int64_t sizes[2] = {3, 5};
    ptc_tensor t;
    ck_assert_int_eq(ptc_tensor_alloc(&t, PTC_F64, 2, sizes, &err), 0);
    ptc_tensor_fill_random(&t, 3);
    const char *name = "x";
    char *path = tmp_path("good.bin"), *bad = tmp_path("bad.bin");
    ck_assert_int_eq(ptc_tensorfile_write(path, &t, &name, 1, &err), 0);
    size_t len;
    unsigned char *good = (unsigned char *)ptc_read_file(path, &len, &err);
    ck_assert_ptr_nonnull(good);
    ck_assert_uint_eq(len, 4 + 4 + 4 + 4 + 1 + 4 + 16 + 16 + 8 + 15 * 8 + 4);
    /* Every truncation is an error. */
    ptc_tensorfile f;
    for (size_t cut = 0; cut < len; cut++) {
        ck_assert_int_eq(ptc_write_file(bad, good, cut, &err), 0);
        ck_assert_msg(ptc_tensorfile_read(bad, &f, &err) == -1, "truncated at %zu loaded", cut);
        ck_assert_int_eq(err.cls, PTC_ERR_PARSE);
        ck_assert_str_eq(err.file, bad);
    }
    /* Every single flipped byte is an error. */
    unsigned char *copy = malloc(len);
    for (size_t i = 0; i < len; i++) {
        memcpy(copy, good, len);
        copy[i] ^= 0x5a;
        ck_assert_int_eq(ptc_write_file(bad, copy, len, &err), 0);
        ck_assert_msg(ptc_tensorfile_read(bad, &f, &err) == -1, "flip at %zu loaded", i);
    }
    memcpy(copy, good, len);
    copy[0] = 'X';
    ck_assert_int_eq(ptc_write_file(bad, copy, len, &err), 0);
    ck_assert_int_eq(ptc_tensorfile_read(bad, &f, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "bad magic"));
    memcpy(copy, good, len);
    copy[20] ^= 1;
    ck_assert_int_eq(ptc_write_file(bad, copy, len, &err), 0);
    ck_assert_int_eq(ptc_tensorfile_read(bad, &f, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "checksum"));
    /* Edits with a valid checksum: version, dtype, rank, byte count. */
    static const struct {
        size_t at;
        unsigned char value;
        const char *msg;
    } edits[] = {{4, 3, "version"}, {17, 10, "bad dtype"}, {18, 9, "rank"}, {53, 0, "data bytes"}};
    for (size_t k = 0; k < sizeof edits / sizeof *edits; k++) {
        memcpy(copy, good, len);
        copy[edits[k].at] = edits[k].value;
        fix_crc(copy, len);
        ck_assert_int_eq(ptc_write_file(bad, copy, len, &err), 0);
        ck_assert_int_eq(ptc_tensorfile_read(bad, &f, &err), -1);
        ck_assert_msg(strstr(err.msg, edits[k].msg), "edit %zu: %s", k, err.msg);
    }
    /* Trailing bytes after the last tensor. */
    unsigned char *longer = malloc(len + 3);
    memcpy(longer, good, len - 4);
    memset(longer + len - 4, 0, 3);
    fix_crc(longer, len + 3);
    ck_assert_int_eq(ptc_write_file(bad, longer, len + 3, &err), 0);
    ck_assert_int_eq(ptc_tensorfile_read(bad, &f, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "trailing bytes"));
    ck_assert_int_eq(ptc_tensorfile_read("/nonexistent/x.bin", &f, &err), -1);
    ck_assert_int_eq(err.cls, PTC_ERR_IO);
    free(longer);
    free(copy);
    free(good);
    ptc_tensor_release(&t);
    unlink(path);
    unlink(bad);
    free(path);
    free(bad);
}
END_TEST

/* ---- graph editing --------------------------------------------------------- */

static const char edit_text[] = "# ptc ir v1\n"
                                "graph g(%x: f32[s0,4] cpu, %w: f32[4,4] cpu) {\n"
                                "  %0 = mm(%x, %w) : f32[s0,4]  @ \"m.py\":3:5 \"x @ w\" [lin]\n"
                                "  %1 = relu(%0) : f32[s0,4]\n"
                                "  %2 = neg(%0) : f32[s0,4]  <- %0\n"
                                "  %3, %4 = chunk(%1, 2, dim=1) : f32[s0,2], f32[s0,2]\n"
                                "  return (%3, %x)\n"
                                "}\n";

START_TEST(graph_clone_is_deep)
{
    ptc_module *m = parse_ok(edit_text);
    ptc_graph *g = m->graphs[0];
    ptc_value **map = calloc((size_t)g->nvalues, sizeof *map);
    ptc_graph *c = ptc_graph_clone(g, map);
    char *a = print_graph(g), *b = print_graph(c);
    ck_assert_str_eq(a, b);
    for (int i = 0; i < g->nvalues; i++) {
        ck_assert_ptr_nonnull(map[i]);
        ck_assert_ptr_ne(map[i], g->values[i]);
        ck_assert_str_eq(map[i]->name, g->values[i]->name);
    }
    for (int i = 0; i < g->nnodes; i++)
        ck_assert_int_eq(c->nodes[i]->id, g->nodes[i]->id);
    ck_assert_int_eq(c->next_node_id, g->next_node_id);
    ptc_error err;
    ck_assert_int_eq(ptc_ir_verify(c, 0, &err), 0);
    /* Freeing the original leaves the clone whole. */
    ptc_module_free(m);
    char *b2 = print_graph(c);
    ck_assert_str_eq(b2, a);
    /* New nodes in the clone are auto-named past existing numeric names. */
    ptc_value *in = ptc_graph_find_value(c, "0");
    ptc_arg arg = ptc_arg_value(in);
    ptc_node *n = ptc_graph_add_node(c, PTC_OP_RELU, &arg, 1, 1, &in->type, NULL);
    ck_assert_str_eq(n->outs[0]->name, "5");
    ck_assert_int_eq(n->id, 4);
    free(b2);
    free(a);
    free(b);
    free(map);
    ptc_graph_free(c);
}
END_TEST

START_TEST(graph_remove_nodes)
{
    ptc_module *m = parse_ok(edit_text);
    ptc_graph *g = m->graphs[0];
    int *counts = calloc((size_t)g->nvalues, sizeof *counts);
    ptc_graph_use_counts(g, counts);
    ck_assert_int_eq(counts[ptc_graph_find_value(g, "0")->id], 2);
    ck_assert_int_eq(counts[ptc_graph_find_value(g, "x")->id], 2); /* mm and return */
    ck_assert_int_eq(counts[ptc_graph_find_value(g, "2")->id], 0);
    ck_assert_int_eq(counts[ptc_graph_find_value(g, "4")->id], 0);
    /* Drop the dead neg. */
    bool keep[8] = {true, true, true, true, true, true, true, true};
    keep[ptc_graph_find_value(g, "2")->def->id] = false;
    ptc_graph_remove_nodes(g, keep);
    ck_assert_int_eq(g->nnodes, 3);
    ck_assert_ptr_null(ptc_graph_find_value(g, "2"));
    ck_assert_ptr_nonnull(ptc_graph_find_value(g, "1"));
    ck_assert_ptr_null(ptc_graph_find_node(g, 2));
    ck_assert_ptr_nonnull(ptc_graph_find_node(g, 3));
    ptc_error err;
    ck_assert_int_eq(ptc_ir_verify(g, 0, &err), 0);
    char *text = print_graph(g);
    ck_assert_str_eq(text, "# ptc ir v1\n"
                           "graph g(%x: f32[s0,4] cpu, %w: f32[4,4] cpu) {\n"
                           "  %0 = mm(%x, %w) : f32[s0,4]  @ \"m.py\":3:5 \"x @ w\" [lin]\n"
                           "  %1 = relu(%0) : f32[s0,4]\n"
                           "  %3, %4 = chunk(%1, chunks=2, dim=1) : f32[s0,2], f32[s0,2]\n"
                           "  return (%3, %x)\n"
                           "}\n");
    free(text);
    /* Removing a node whose result is still returned breaks the graph: the
     * verifier says so. */
    bool keep2[8] = {true, true, true, true, true, true, true, true};
    keep2[ptc_graph_find_value(g, "3")->def->id] = false;
    ptc_graph_remove_nodes(g, keep2);
    ck_assert_int_eq(ptc_ir_verify(g, 0, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "returned value 0 is not defined"));
    free(counts);
    ptc_module_free(m);
}
END_TEST

START_TEST(graph_built_by_api)
{
    ptc_graph *g = ptc_graph_new(NULL, "built");
    ptc_arena *a = g->arena;
    ptc_ttype t = {.dtype = PTC_F16, .ndim = 2, .device = {PTC_DEV_CUDA, 0}};
    t.shape[0] = ptc_dim_symbol(a, "s0");
    t.shape[1] = ptc_dim_c(8);
    t.requires_grad = true;
    ptc_value *x = ptc_graph_add_input(g, "x", &t);
    ptc_arg args[3] = {ptc_arg_value(x), ptc_arg_float(0.5), ptc_arg_int(2)}; /* self, other, alpha */
    ptc_ttype out = t;
    out.requires_grad = false;
    ptc_node *n = ptc_graph_add_node(g, PTC_OP_ADD, args, 3, 1, &out, (const char *[]){"y"});
    n->loc = (ptc_srcloc){"a.py", 4, 2, "x + 0.5"};
    n->module_path = "blk";
    ptc_graph_set_outputs(g, n->outs, 1);
    ck_assert(ptc_ttype_eq(&x->type, &t));
    ck_assert(!ptc_ttype_eq(&n->outs[0]->type, &t));
    ck_assert(!ptc_ttype_is_static(&t));
    ck_assert_int_eq(ptc_node_arg(n, "alpha")->kind, PTC_ARG_INT);
    ck_assert(ptc_node_arg(n, "other")->f == 0.5);
    ptc_error err;
    ck_assert_int_eq(ptc_ir_verify(g, 0, &err), 0);
    char *text = print_graph(g);
    ck_assert_str_eq(text, "# ptc ir v1\n"
                           "graph built(%x: f16[s0,8] cuda:0 grad) {\n"
                           "  %y = add(%x, 0.5, alpha=2) : f16[s0,8]  @ \"a.py\":4:2 \"x + 0.5\" [blk]\n"
                           "  return (%y)\n"
                           "}\n");
    ptc_module *m = parse_ok(text);
    char *again = print_module(m);
    ck_assert_str_eq(again, text);
    ptc_dim strides[2];
    ptc_ttype_contiguous_strides(a, &t, strides);
    char *s0 = dim_str(strides[0]), *n0 = dim_str(ptc_ttype_numel(a, &t));
    ck_assert_str_eq(s0, "8");
    ck_assert_str_eq(n0, "8*s0");
    free(s0);
    free(n0);
    free(again);
    free(text);
    ptc_module_free(m);
    ptc_graph_free(g);
}
END_TEST

/* ---- the verifier on hand-built broken graphs ------------------------------ */

typedef struct broken {
    ptc_graph *g;
    ptc_value *x;
    ptc_node *n0, *n1;
} broken;

/* %x -> %0 = relu(%x) -> %1 = neg(%0), returning %1. */
static broken make_graph(void)
{
    broken b;
    b.g = ptc_graph_new(NULL, "g");
    int64_t sizes[1] = {4};
    ptc_ttype t = ptc_ttype_make(PTC_F32, 1, sizes, PTC_CPU);
    b.x = ptc_graph_add_input(b.g, "x", &t);
    ptc_arg a = ptc_arg_value(b.x);
    b.n0 = ptc_graph_add_node(b.g, PTC_OP_RELU, &a, 1, 1, &t, NULL);
    a = ptc_arg_value(b.n0->outs[0]);
    b.n1 = ptc_graph_add_node(b.g, PTC_OP_NEG, &a, 1, 1, &t, NULL);
    ptc_graph_set_outputs(b.g, b.n1->outs, 1);
    ptc_error err;
    ck_assert_int_eq(ptc_ir_verify(b.g, 0, &err), 0);
    return b;
}

static void expect_broken(broken *b, const char *msg, int node)
{
    ptc_error err;
    ck_assert_int_eq(ptc_ir_verify(b->g, 0, &err), -1);
    ck_assert_int_eq(err.cls, PTC_ERR_VERIFY);
    ck_assert_msg(strstr(err.msg, msg), "'%s' lacks '%s'", err.msg, msg);
    ck_assert_int_eq(err.has_node, node >= 0);
    if (node >= 0)
        ck_assert_int_eq(err.node_id, node);
    ptc_graph_free(b->g);
}

START_TEST(verify_broken_graphs)
{
    broken b = make_graph();
    b.g->nodes[0] = b.n1; /* use before definition */
    b.g->nodes[1] = b.n0;
    expect_broken(&b, "argument 'self' uses a value not defined before it", b.n1->id);

    b = make_graph();
    broken other = make_graph();
    b.n1->args[0] = ptc_arg_value(other.x); /* a value of another graph */
    expect_broken(&b, "uses a value not defined before it", b.n1->id);
    ptc_graph_free(other.g);

    b = make_graph();
    b.n1->args[0] = ptc_arg_float(1.0); /* wrong kind */
    expect_broken(&b, "neg: argument 'self' expects Tensor, got a float", b.n1->id);

    b = make_graph();
    b.n1->nargs = 0; /* wrong count */
    expect_broken(&b, "neg: expected 1 arguments, got 0", b.n1->id);

    b = make_graph();
    b.n0->outs[0]->name = "bad name";
    expect_broken(&b, "bad value name 'bad name'", b.n0->id);

    b = make_graph();
    b.n0->outs[0]->name = "x"; /* the input's name */
    expect_broken(&b, "value name %x is used twice", -1);

    b = make_graph();
    b.n0->outs[0]->type.shape[0] = ptc_dim_symbol(b.g->arena, "s9");
    expect_broken(&b, "result %0: symbol 's9' is not a dim of any graph input", b.n0->id);

    b = make_graph();
    b.n0->outs[0]->type.shape[0] = ptc_dim_c(-2);
    expect_broken(&b, "negative size -2 in dim 0", b.n0->id);

    b = make_graph();
    b.n0->outs[0]->type.ndim = PTC_MAX_DIMS + 1;
    expect_broken(&b, "rank 9 out of range", b.n0->id);

    b = make_graph();
    b.n1->outs[0]->def = b.n0; /* output not linked back */
    expect_broken(&b, "output 0 is not linked to its node", b.n1->id);

    b = make_graph();
    b.n1->nout = 0;
    expect_broken(&b, "a node must produce at least one value", b.n1->id);

    b = make_graph();
    b.n1->id = b.n0->id; /* duplicate node ids */
    expect_broken(&b, "not unique", b.n0->id);

    b = make_graph();
    b.g->outputs[0] = NULL;
    expect_broken(&b, "returned value 0 is not defined", -1);

    b = make_graph();
    b.g->name = "two words";
    expect_broken(&b, "bad graph name", -1);

    b = make_graph();
    b.x->type.dtype = (ptc_dtype)42;
    expect_broken(&b, "input %x: bad dtype", -1);

    b = make_graph();
    b.n0->op = PTC_OP_COUNT;
    expect_broken(&b, "unknown op", b.n0->id);

    /* Stage checks: a torch op in a prims graph and the reverse. */
    b = make_graph();
    ptc_error err;
    ck_assert_int_eq(ptc_ir_verify(b.g, PTC_STAGE_TORCH, &err), 0);
    ck_assert_int_eq(ptc_ir_verify(b.g, PTC_STAGE_PRIM, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "op relu does not belong in the prims stage"));
    b.n0->op = PTC_OP_PRIMS_ABS;
    b.n1->op = PTC_OP_PRIMS_NEG;
    ck_assert_int_eq(ptc_ir_verify(b.g, PTC_STAGE_PRIM, &err), 0);
    ck_assert_int_eq(ptc_ir_verify(b.g, PTC_STAGE_TORCH, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "does not belong in the captured stage"));
    ptc_graph_free(b.g);

    /* Ops valid in both stages pass either check. */
    ptc_module *m = parse_ok("# ptc ir v1\ngraph g(%a: f32[2,2] cpu) {\n"
                             "  %0 = mm(%a, %a) : f32[2,2]\n  return (%0)\n}\n");
    ck_assert_int_eq(ptc_ir_verify(m->graphs[0], PTC_STAGE_TORCH, &err), 0);
    ck_assert_int_eq(ptc_ir_verify(m->graphs[0], PTC_STAGE_PRIM, &err), 0);
    ptc_module_free(m);
}
END_TEST

START_TEST(error_format)
{
    ptc_error err;
    ptc_errorf(&err, PTC_ERR_META, "meta", "add: shapes %s and %s\ndo not broadcast", "[2]", "[3]");
    char buf[256];
    ptc_error_format(&err, buf, sizeof buf);
    ck_assert_str_eq(buf, "meta: MetaError: add: shapes [2] and [3] do not broadcast");
    ptc_error_at(&err, "m.ptir", 3, 0);
    ptc_error_format(&err, buf, sizeof buf);
    ck_assert_str_eq(buf, "m.ptir:3: meta: MetaError: add: shapes [2] and [3] do not broadcast");
    ptc_error_at(&err, NULL, 3, 7);
    ptc_error_format(&err, buf, sizeof buf);
    ck_assert_str_eq(buf, "m.ptir:3:7: meta: MetaError: add: shapes [2] and [3] do not broadcast");
    char tiny[12];
    ptc_error_format(&err, tiny, sizeof tiny); /* truncates, never overflows */
    ck_assert_str_eq(tiny, "m.ptir:3:7:");
    for (int c = 0; c < PTC_ERR_COUNT; c++)
        ck_assert_ptr_nonnull(ptc_errclass_name((ptc_errclass)c));
    ck_assert_str_eq(ptc_errclass_name(PTC_ERR_PARSE), "ParseError");
    ck_assert_int_eq(ptc_errorf(NULL, PTC_ERR_IO, "io", "x"), -1);
    ptc_error_clear(&err);
    ck_assert_int_eq(err.cls, PTC_ERR_NONE);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ir");
    TCase *tc = tcase_create("text");
    tcase_add_test(tc, golden_round_trips);
    tcase_add_test(tc, malformed_errors);
    tcase_add_test(tc, examples_parse);
    tcase_add_test(tc, parse_file_missing);
    tcase_add_test(tc, every_op_round_trips);
    suite_add_tcase(s, tc);
    tc = tcase_create("sym");
    tcase_add_test(tc, sym_canonical_forms);
    tcase_add_test(tc, sym_subst_solve_binds);
    tcase_add_test(tc, sym_parse_and_eval);
    tcase_add_test(tc, sym_random_property);
    suite_add_tcase(s, tc);
    tc = tcase_create("dtype");
    tcase_add_test(tc, dtype_promotion_table);
    tcase_add_test(tc, dtype_names);
    suite_add_tcase(s, tc);
    tc = tcase_create("tensorfile");
    tcase_add_test(tc, tensorfile_round_trip);
    tcase_add_test(tc, tensorfile_strides_restored);
    tcase_add_test(tc, tensor_dense_layouts);
    tcase_add_test(tc, tensorfile_damage_detected);
    suite_add_tcase(s, tc);
    tc = tcase_create("graph");
    tcase_add_test(tc, graph_clone_is_deep);
    tcase_add_test(tc, graph_remove_nodes);
    tcase_add_test(tc, graph_built_by_api);
    tcase_add_test(tc, verify_broken_graphs);
    tcase_add_test(tc, error_format);
    suite_add_tcase(s, tc);
    tc = tcase_create("arena");
    tcase_add_test(tc, arena_out_of_memory_is_sticky);
    tcase_add_test(tc, buf_out_of_memory_is_sticky);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
