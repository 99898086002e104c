/* Tests for compiler/ops meta inference: every meta function of ops.def with
 * valid arguments, invalid ones (the MetaError names the op and the shapes)
 * and symbolic sizes; plus ptc_build, ptc_ops_verify, ptc_result_type,
 * ptc_broadcast_shapes and ptc_wrap_dim.
 *
 * Cases are written as .ptir: `infer("x=f32[2,3]; y=f32[3]", "add(%x, %y)")`
 * parses a graph with those inputs (on the cpu unless a device is given) and
 * one node, runs the op's meta function on the node's args, and returns the
 * inferred types as text ("f32[2,3]", "f32[2] cuda grad", "f32[2], i64[2]")
 * or "error: " and the message.
 */
#include "ops/ops.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers --------------------------------------------------------------- */

static char result[4096];

/* "x=f32[2,3]; y=f32[3] cuda" -> "%x: f32[2,3] cpu, %y: f32[3] cuda". */
static void expand_inputs(const char *in, ptc_buf *b)
{
    char *copy = strdup(in), *save = NULL;
    bool first = true;
    for (char *tok = strtok_r(copy, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
        while (*tok == ' ')
            tok++;
        char *eq = strchr(tok, '=');
        ck_assert_msg(eq, "bad input spec '%s'", tok);
        *eq = 0;
        bool has_dev = strstr(eq + 1, "cuda") || strstr(eq + 1, " cpu");
        char *rest = strchr(eq + 1, ' ');
        ptc_buf_printf(b, "%s%%%s: ", first ? "" : ", ", tok);
        if (!has_dev && rest) {
            *rest = 0;
            ptc_buf_printf(b, "%s cpu %s", eq + 1, rest + 1);
        } else {
            ptc_buf_printf(b, "%s%s", eq + 1, has_dev ? "" : " cpu");
        }
        first = false;
    }
    free(copy);
}

static void print_types(ptc_buf *b, const ptc_ttype *t, int n)
{
    for (int i = 0; i < n; i++) {
        if (i)
            ptc_buf_puts(b, ", ");
        ptc_ttype_print(b, &t[i], false);
        if (t[i].device.kind != PTC_DEV_CPU) {
            char dev[32];
            ptc_device_str(t[i].device, dev, sizeof dev);
            ptc_buf_printf(b, " %s", dev);
        }
        if (t[i].requires_grad)
            ptc_buf_puts(b, " grad");
    }
}

static const char *infer(const char *inputs, const char *call)
{
    char opname[64];
    size_t n = strcspn(call, "(");
    ck_assert(n < sizeof opname);
    memcpy(opname, call, n);
    opname[n] = 0;
    int op = ptc_op_lookup(opname);
    ck_assert_msg(op >= 0, "unknown op %s", opname);
    int nret = ptc_op_schema((ptc_op)op)->nreturns;
    if (nret < 1)
        nret = 1;
    ptc_buf text = {0};
    ptc_buf_puts(&text, "# ptc ir v1\ngraph g(");
    if (*inputs)
        expand_inputs(inputs, &text);
    ptc_buf_puts(&text, ") {\n  ");
    for (int i = 0; i < nret; i++)
        ptc_buf_printf(&text, "%s%%r%d", i ? ", " : "", i);
    ptc_buf_printf(&text, " = %s : ", call);
    for (int i = 0; i < nret; i++)
        ptc_buf_puts(&text, i ? ", f32[]" : "f32[]");
    ptc_buf_puts(&text, "\n  return (%r0)\n}\n");
    ptc_error err;
    ptc_module *mod = ptc_parse_module(text.data, text.len, "case.ptir", &err);
    ck_assert_msg(mod, "parse failed: %s\n%s", err.msg, text.data);
    ptc_buf_free(&text);
    const ptc_node *node = mod->graphs[0]->nodes[0];
    ptc_arg *args = ptc_arena_dup(mod->arena, node->args, sizeof *args * (size_t)node->nargs);
    ptc_args_normalize(mod->arena, node->op, args);
    ptc_ttype *types;
    int nout;
    ptc_buf b = {0};
    if (ptc_meta_infer(mod->arena, node->op, args, node->nargs, &types, &nout, &err)) {
        ck_assert_int_eq(err.cls, PTC_ERR_META);
        ck_assert_msg(strncmp(err.msg, opname, strlen(opname)) == 0 ||
                          strncmp(err.msg, ptc_op_name(node->op), strlen(ptc_op_name(node->op))) ==
                              0,
                      "message does not name the op: %s", err.msg);
        ptc_buf_printf(&b, "error: %s", err.msg);
    } else {
        print_types(&b, types, nout);
    }
    snprintf(result, sizeof result, "%s", b.data);
    ptc_buf_free(&b);
    ptc_module_free(mod);
    return result;
}

#define OK(inputs, call, want) ck_assert_str_eq(infer(inputs, call), want)
/* The call fails with a MetaError whose message contains `sub`. */
#define BAD(inputs, call, sub)                                                                     \
    do {                                                                                           \
        const char *r_ = infer(inputs, call);                                                      \
        ck_assert_msg(strncmp(r_, "error: ", 7) == 0 && strstr(r_, sub),                           \
                      "%s: expected an error containing '%s', got '%s'", call, sub, r_);           \
    } while (0)

/* ---- promotion and broadcasting helpers ----------------------------------------- */

START_TEST(result_type_rules)
{
    ptc_arena *a = ptc_arena_new();
    ptc_graph *g = ptc_graph_new(a, "g");
    int64_t s2[] = {2}, s0[] = {0};
    (void)s0;
    ptc_ttype f16 = ptc_ttype_make(PTC_F16, 1, s2, PTC_CPU),
              f64z = ptc_ttype_make(PTC_F64, 0, s2, PTC_CPU);
    ptc_ttype u8 = ptc_ttype_make(PTC_U8, 1, s2, PTC_CPU),
              i8 = ptc_ttype_make(PTC_I8, 1, s2, PTC_CPU);
    ptc_ttype i64z = ptc_ttype_make(PTC_I64, 0, s2, PTC_CPU),
              b = ptc_ttype_make(PTC_BOOL, 1, s2, PTC_CPU);
    ptc_ttype bf16 = ptc_ttype_make(PTC_BF16, 1, s2, PTC_CPU);
    ptc_arg vf16 = ptc_arg_value(ptc_graph_add_input(g, "a", &f16));
    ptc_arg vf64z = ptc_arg_value(ptc_graph_add_input(g, "b", &f64z));
    ptc_arg vu8 = ptc_arg_value(ptc_graph_add_input(g, "c", &u8));
    ptc_arg vi8 = ptc_arg_value(ptc_graph_add_input(g, "d", &i8));
    ptc_arg vi64z = ptc_arg_value(ptc_graph_add_input(g, "e", &i64z));
    ptc_arg vb = ptc_arg_value(ptc_graph_add_input(g, "f", &b));
    ptc_arg vbf = ptc_arg_value(ptc_graph_add_input(g, "h", &bf16));
    ptc_arg one = ptc_arg_int(1), half = ptc_arg_float(0.5), yes = ptc_arg_bool(true),
            none = ptc_arg_none();
    const ptc_arg *c1[] = {&vf16, &vf64z};
    ck_assert_int_eq(ptc_result_type(c1, 2), PTC_F16); /* 0-dim same category loses */
    const ptc_arg *c2[] = {&vu8, &vi8};
    ck_assert_int_eq(ptc_result_type(c2, 2), PTC_I16);
    const ptc_arg *c3[] = {&vu8, &vi64z};
    ck_assert_int_eq(ptc_result_type(c3, 2), PTC_U8);
    const ptc_arg *c4[] = {&vb, &vi64z};
    ck_assert_int_eq(ptc_result_type(c4, 2), PTC_I64); /* higher category wins */
    const ptc_arg *c5[] = {&vu8, &half};
    ck_assert_int_eq(ptc_result_type(c5, 2), PTC_F32);
    const ptc_arg *c6[] = {&vb, &one};
    ck_assert_int_eq(ptc_result_type(c6, 2), PTC_I64);
    const ptc_arg *c7[] = {&vb, &yes, &none};
    ck_assert_int_eq(ptc_result_type(c7, 3), PTC_BOOL);
    const ptc_arg *c8[] = {&vf16, &vbf};
    ck_assert_int_eq(ptc_result_type(c8, 2), PTC_F32);
    const ptc_arg *c9[] = {&vi64z, &half};
    ck_assert_int_eq(ptc_result_type(c9, 2), PTC_F32);
    const ptc_arg *c10[] = {&vf64z, &vi8};
    ck_assert_int_eq(ptc_result_type(c10, 2), PTC_F64);
    const ptc_arg *c11[] = {&one, &half};
    ck_assert_int_eq(ptc_result_type(c11, 2), PTC_F32);
    ptc_arena_free(a);
}
END_TEST

START_TEST(broadcast_and_wrap)
{
    ptc_arena *a = ptc_arena_new();
    ptc_dim s0 = ptc_dim_symbol(a, "s0"), s1 = ptc_dim_symbol(a, "s1");
    ptc_dim x[] = {ptc_dim_c(2), ptc_dim_c(1), s0}, y[] = {ptc_dim_c(4), ptc_dim_c(1)}, out[8];
    int n;
    ptc_error err;
    ck_assert_int_eq(ptc_broadcast_shapes(a, x, 3, y, 2, out, &n, &err), 0);
    ck_assert_int_eq(n, 3);
    ck_assert(ptc_dim_eq(out[0], ptc_dim_c(2)) && ptc_dim_eq(out[1], ptc_dim_c(4)) &&
              ptc_dim_eq(out[2], s0));
    ptc_dim z[] = {s1};
    ck_assert_int_eq(ptc_broadcast_shapes(a, x, 3, z, 1, out, &n, &err), -1);
    ck_assert_int_eq(err.cls, PTC_ERR_META);
    ck_assert_ptr_nonnull(strstr(err.msg, "dim 2: s0 vs s1"));
    ptc_dim w[] = {ptc_dim_c(3)};
    ck_assert_int_eq(ptc_broadcast_shapes(a, y, 2, w, 1, out, &n, &err), 0);
    ck_assert(n == 2 && ptc_dim_eq(out[0], ptc_dim_c(4)) && ptc_dim_eq(out[1], ptc_dim_c(3)));
    ck_assert_int_eq(ptc_broadcast_shapes(a, x, 3, w, 1, out, &n, &err), -1);
    ck_assert_str_eq(err.msg, "shapes [2,1,s0] and [3] cannot broadcast (dim 2: s0 vs 3)");
    ck_assert_int_eq(ptc_broadcast_shapes(a, w, 1, w, 0, out, &n, &err), 0);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ptc_wrap_dim(-1, 3), 2);
    ck_assert_int_eq(ptc_wrap_dim(-3, 3), 0);
    ck_assert_int_eq(ptc_wrap_dim(3, 3), -1);
    ck_assert_int_eq(ptc_wrap_dim(-4, 3), -1);
    ck_assert_int_eq(ptc_wrap_dim(0, 0), -1);
    ptc_arena_free(a);
}
END_TEST

START_TEST(op_flags)
{
    ck_assert_uint_eq(ptc_op_flags(PTC_OP_ADD), PTC_F_POINTWISE);
    ck_assert_uint_eq(ptc_op_flags(PTC_OP_DROPOUT), PTC_F_POINTWISE | PTC_F_RANDOM);
    ck_assert_uint_eq(ptc_op_flags(PTC_OP_RAND), PTC_F_CREATION | PTC_F_RANDOM);
    ck_assert_uint_eq(ptc_op_flags(PTC_OP_MATMUL), 0);
    ck_assert_uint_eq(ptc_op_flags(PTC_OP_MM), PTC_F_EXTERN);
    ck_assert_uint_eq(ptc_op_flags(PTC_OP_VIEW), PTC_F_VIEW);
    ck_assert_uint_eq(ptc_op_flags(PTC_OP_PRIMS_SUM), PTC_F_REDUCTION);
}
END_TEST

/* ---- pointwise -------------------------------------------------------------- */

START_TEST(unary)
{
    OK("x=f16[2,3]", "abs(%x)", "f16[2,3]");
    OK("x=i64[s0]", "neg(%x)", "i64[s0]");
    OK("x=bool[2]", "sign(%x)", "bool[2]");
    BAD("x=bool[2]", "abs(%x)", "abs: not supported for bool tensors (bool[2])");
    BAD("x=bool[2]", "relu(%x)", "relu: not supported for bool");
    BAD("x=u8[2]", "hardtanh(%x)", "hardtanh: cannot do hardtanh on an unsigned type with negative limits");
    OK("x=u8[2]", "hardtanh(%x, min_val=-0.5, max_val=2.0)", "u8[2]");
    OK("x=bool[2]; y=bool[2]", "clamp(%x, %y)", "bool[2]");
    BAD("x=bool[2]", "clamp(%x, min=false)", "clamp: not supported for bool results with a number bound");
    OK("x=i8[2]", "hardtanh(%x, min_val=0, max_val=6)", "i8[2]");
    OK("x=i32[2]", "round(%x)", "i32[2]");
    BAD("x=i32[2]", "round(%x, decimals=2)", "round: decimals needs a floating point tensor");
    OK("x=f32[2]", "round(%x, decimals=2)", "f32[2]");
    OK("x=i64[2,0]", "exp(%x)", "f32[2,0]");
    OK("x=bool[]", "sqrt(%x)", "f32[]");
    OK("x=bf16[3]", "sigmoid(%x)", "bf16[3]");
    OK("x=f64[3] grad", "tanh(%x)", "f64[3] grad");
    OK("x=f32[s0,4]", "gelu(%x, approximate=\"tanh\")", "f32[s0,4]");
    BAD("x=i64[3]", "gelu(%x)", "gelu: expected a floating point tensor, got i64[3]");
    BAD("x=u8[3]", "silu(%x)", "silu: expected a floating point");
    OK("x=f16[3]", "leaky_relu(%x, 0.2)", "f16[3]");
    OK("x=i64[3]", "logical_not(%x)", "bool[3]");
    OK("x=f32[3] grad", "isnan(%x)", "bool[3]");
    OK("x=u8[3]", "bitwise_not(%x)", "u8[3]");
    OK("x=bool[3]", "bitwise_not(%x)", "bool[3]");
    BAD("x=f32[3]", "bitwise_not(%x)", "bitwise_not: expected an integer or bool tensor");
}
END_TEST

START_TEST(binary)
{
    OK("x=f32[2,3]; y=f32[3]", "add(%x, %y)", "f32[2,3]");
    BAD("x=f32[2,3]; y=f32[4]", "add(%x, %y)",
        "add: shapes f32[2,3] and f32[4] cannot broadcast (dim 1: 3 vs 4)");
    OK("x=f32[2,1,4]; y=f32[3,1]", "mul(%x, %y)", "f32[2,3,4]");
    OK("x=f32[0,1]; y=f32[1,5]", "sub(%x, %y)", "f32[0,5]");
    OK("x=f16[2]; y=bf16[2]", "add(%x, %y)", "f32[2]");
    OK("x=u8[2]; y=i8[2]", "add(%x, %y)", "i16[2]");
    OK("x=f16[2]; y=f64[]", "add(%x, %y)", "f16[2]");
    OK("x=i32[2]; y=f64[]", "add(%x, %y)", "f64[2]");
    OK("x=u8[2]; y=i64[]", "mul(%x, %y)", "u8[2]");
    OK("x=f16[2]", "add(%x, 2.5)", "f16[2]");
    OK("x=i64[2]", "add(%x, 2.5)", "f32[2]");
    OK("x=u8[2]", "add(%x, 300)", "u8[2]");
    OK("x=bool[2]", "add(%x, 2)", "i64[2]");
    OK("x=bool[2]", "add(%x, true)", "bool[2]");
    OK("x=bool[2]; y=bool[2]", "add(%x, %y, alpha=2)", "bool[2]");
    OK("x=i32[]", "mul(%x, 2.0)", "f32[]");
    BAD("x=i64[2]", "add(%x, %x, alpha=0.5)", "add: alpha must not be a float for i64 inputs");
    BAD("x=f32[2]", "add(%x, %x, alpha=true)", "add: a bool alpha needs a bool result");
    BAD("x=bool[2]", "sub(%x, %x)", "sub: subtraction with a bool");
    BAD("x=i64[2]", "sub(%x, true)", "sub: subtraction with a bool");
    BAD("x=bool[2]; y=i64[2]", "rsub(%y, %x)", "rsub: subtraction with a bool");
    OK("x=i64[2]", "rsub(%x, 2.5)", "f32[2]");
    BAD("x=bool[2]", "remainder(%x, %x)", "remainder: not supported for bool");
    OK("x=i64[2]", "remainder(%x, 1.5)", "f32[2]");
    OK("x=bool[2]", "maximum(%x, %x)", "bool[2]");
    OK("x=i64[2]; y=f32[]", "minimum(%x, %y)", "f32[2]");
    OK("x=i64[2]; y=i32[2]", "atan2(%x, %y)", "f32[2]");
    OK("x=f64[2]; y=f32[2]", "atan2(%x, %y)", "f64[2]");
    /* symbolic sizes */
    OK("x=f32[s0,1]; y=f32[1,s1]", "add(%x, %y)", "f32[s0,s1]");
    OK("x=f32[s0,3]; y=f32[s0,1]", "add(%x, %y)", "f32[s0,3]");
    BAD("x=f32[s0]; y=f32[s1]", "add(%x, %y)", "dim 0: s0 vs s1");
    BAD("x=f32[s0]; y=f32[3]", "add(%x, %y)", "dim 0: s0 vs 3");
    /* devices */
    OK("x=f32[2] cuda; y=f32[] cpu", "add(%x, %y)", "f32[2] cuda");
    OK("x=f32[] cpu; y=f32[2] cuda:1", "add(%x, %y)", "f32[2] cuda:1");
    BAD("x=f32[2] cuda; y=f32[2] cpu", "add(%x, %y)", "add: expected all tensors on one device");
    BAD("x=f32[2] cuda:0; y=f32[2] cuda:1", "add(%x, %y)", "cuda:0 and cuda:1");
    BAD("x=f32[2] cpu; y=f32[] cuda", "add(%x, %y)", "expected all tensors on one device");
    OK("x=f32[] cpu; y=f32[] cuda", "add(%x, %y)", "f32[] cuda");
    OK("c=bool[] cpu; x=f32[2] cuda", "where(%c, %x, %x)", "f32[2] cuda");
    OK("x=f32[3] cuda; m=bool[3] cuda; v=f32[] cpu", "masked_fill(%x, %m, %v)", "f32[3] cuda");
    BAD("x=f32[3] cuda; m=bool[3] cpu", "masked_fill(%x, %m, 1)",
        "masked_fill: expected all tensors");
    BAD("x=f32[2] cuda; lo=f32[] cpu", "clamp(%x, %lo)",
        "clamp: expected all tensors on one device");
    BAD("x=f32[3,4] cuda; i=i64[] cpu", "index_select(%x, 0, %i)",
        "index_select: expected all tensors");
    BAD("x=f32[3,4] cuda; i=i64[2] cpu", "gather(%x, 1, %i)", "gather: expected all tensors");
    OK("x=f32[3,4] cuda; i=i64[2] cpu", "index(%x, [%i])", "f32[2,4] cuda");
    BAD("x=f32[3,4] cpu; i=i64[2] cuda", "index(%x, [%i])", "index: expected all tensors");
    BAD("s=f32[] cpu; a=f32[2,3] cuda; b=f32[3,4] cuda", "addmm(%s, %a, %b)",
        "addmm: expected all tensors");
    BAD("a=f32[] cuda; b=f32[] cpu", "stack([%a, %b])", "stack: expected all tensors");
    /* requires_grad */
    OK("x=f32[2] grad; y=i64[2]", "add(%x, %y)", "f32[2] grad");
    OK("x=i64[2]; y=f32[] grad", "mul(%x, %y)", "f32[2] grad");
    OK("x=f32[2] grad; y=f32[2]", "eq(%x, %y)", "bool[2]");
}
END_TEST

START_TEST(div_pow_compare_bitwise)
{
    OK("x=i64[2]; y=i64[2]", "div(%x, %y)", "f32[2]");
    OK("x=bool[2]", "div(%x, %x)", "f32[2]");
    OK("x=f16[2]", "div(%x, 2)", "f16[2]");
    OK("x=i64[2]; y=i64[2]", "div(%x, %y, rounding_mode=\"floor\")", "i64[2]");
    OK("x=u8[2]; y=i8[2]", "div(%x, %y, rounding_mode=\"trunc\")", "i16[2]");
    BAD("x=bool[2]", "div(%x, %x, rounding_mode=\"floor\")", "div: rounding_mode=\"floor\" is not");
    BAD("x=f32[2]", "div(%x, %x, rounding_mode=\"round\")", "div: rounding_mode must be");
    OK("x=i64[2]", "pow(%x, 2)", "i64[2]");
    BAD("x=i64[2]", "pow(%x, -2)", "pow: integers to negative integer powers");
    OK("x=f32[2]", "pow(%x, -2)", "f32[2]");
    OK("x=i64[2]", "pow(%x, 2.5)", "f32[2]");
    OK("x=i64[2]", "pow(2, %x)", "i64[2]");
    OK("x=i64[2]", "pow(2.5, %x)", "f32[2]");
    OK("x=bool[2]", "pow(%x, 2)", "i64[2]");
    BAD("x=bool[2]", "pow(%x, %x)", "pow: not supported for bool");
    OK("x=bool[2]", "pow(%x, true)", "bool[2]");
    BAD("x=bool[2]", "pow(true, %x)", "pow: not supported for bool");
    OK("x=u8[2]", "pow(%x, 255)", "u8[2]");
    BAD("x=u8[2]", "pow(%x, 256)", "pow: exponent 256 does not fit the result dtype u8");
    BAD("x=i8[2]", "pow(%x, 200)", "does not fit");
    BAD("", "pow(2, 3)", "pow: needs a tensor");
    OK("x=f32[2,1]; y=f32[3]", "pow(%x, %y)", "f32[2,3]");
    OK("x=i64[2]", "eq(%x, 2.5)", "bool[2]");
    OK("x=f32[s0,1]; y=i64[4]", "lt(%x, %y)", "bool[s0,4]");
    BAD("x=f32[2]; y=f32[3]", "ge(%x, %y)", "ge: shapes f32[2] and f32[3] cannot broadcast");
    OK("x=i64[2]; y=f32[2]", "logical_and(%x, %y)", "bool[2]");
    OK("x=bool[2]", "bitwise_and(%x, %x)", "bool[2]");
    OK("x=bool[2]", "bitwise_or(%x, 1)", "i64[2]");
    OK("x=u8[2]; y=i8[2]", "bitwise_xor(%x, %y)", "i16[2]");
    BAD("x=f32[2]", "bitwise_and(%x, %x)", "bitwise_and: expected integer or bool operands");
    BAD("x=i64[2]", "bitwise_and(%x, 1.5)", "bitwise_and: expected integer or bool");
}
END_TEST

START_TEST(where_clamp_masked_fill)
{
    OK("c=bool[2,1]; x=f32[3]; y=f32[1]", "where(%c, %x, %y)", "f32[2,3]");
    OK("c=bool[2]", "where(%c, 1, 0)", "i64[2]");
    OK("c=bool[2]", "where(%c, 1.0, 0)", "f32[2]");
    OK("c=bool[2]", "where(%c, true, false)", "bool[2]");
    OK("c=bool[2]; x=u8[2]; y=i8[2]", "where(%c, %x, %y)", "i16[2]");
    OK("c=bool[2]; x=u8[2]", "where(%c, %x, 5)", "u8[2]");
    OK("c=bool[2]; x=u8[2]", "where(%c, %x, 5.5)", "f32[2]");
    OK("c=bool[]; x=f64[]; y=i32[]", "where(%c, %x, %y)", "f64[]");
    OK("c=u8[2]; x=f32[2]", "where(%c, %x, %x)", "f32[2]");
    BAD("c=f32[2]; x=f32[2]", "where(%c, %x, %x)", "where: expected a bool condition, got f32[2]");
    BAD("c=bool[3]; x=f32[2]", "where(%c, %x, %x)", "where: shapes bool[3] and f32[2]");
    OK("x=i64[2]", "clamp(%x, 0.5)", "f32[2]");
    OK("x=i64[2]", "clamp(%x, 0, 2)", "i64[2]");
    OK("x=i64[2]", "clamp(%x, max=2)", "i64[2]");
    OK("x=bool[2]", "clamp(%x, 0, 1)", "i64[2]");
    BAD("x=bool[2]", "clamp(%x, false, true)", "clamp: not supported for bool");
    BAD("x=i64[2]", "clamp(%x)", "clamp: at least one of min and max");
    OK("x=f16[2]; lo=f32[1]", "clamp(%x, %lo)", "f32[2]");
    OK("x=i64[2]; lo=f32[3,1]", "clamp(%x, min=%lo)", "f32[3,2]");
    OK("x=f32[3]; m=bool[2,3]", "masked_fill(%x, %m, 1)", "f32[2,3]");
    OK("x=i64[3]; m=bool[3]", "masked_fill(%x, %m, 0.5)", "i64[3]");
    OK("x=f32[1,3]; m=bool[2,1]", "masked_fill(%x, %m, 1)", "f32[2,3]");
    OK("x=f32[3]; m=bool[3]; v=i64[]", "masked_fill(%x, %m, %v)", "f32[3]");
    BAD("x=f32[3]; m=bool[3]; v=f32[1]", "masked_fill(%x, %m, %v)",
        "masked_fill: the value must be a number or a 0-dim tensor, got f32[1]");
    BAD("x=f32[3]; m=u8[3]", "masked_fill(%x, %m, 1)",
        "masked_fill: expected a bool mask, got u8[3]");
    BAD("x=f32[3]; m=bool[2]", "masked_fill(%x, %m, 1)", "cannot broadcast");
}
END_TEST

START_TEST(dropout_to)
{
    OK("x=f32[2,3] grad", "dropout(%x, 0.5, true)", "f32[2,3] grad");
    OK("x=i64[2]", "dropout(%x, 0.5, false)", "i64[2]");
    BAD("x=i64[2]", "dropout(%x, 0.5, true)", "dropout: expected a floating point input");
    BAD("x=f32[2]", "dropout(%x, 1.5, false)", "dropout: probability has to be between 0 and 1");
    OK("x=f32[2,3] grad", "to(%x, dtype=f16)", "f16[2,3] grad");
    OK("x=f32[2,3] grad", "to(%x, dtype=i64)", "i64[2,3]");
    OK("x=f32[s0]", "to(%x, device=cuda)", "f32[s0] cuda");
    OK("x=f32[2] cuda:1", "to(%x, dtype=bf16)", "bf16[2] cuda:1");
    OK("x=f32[2] cuda", "to(%x, device=cpu)", "f32[2]");
}
END_TEST

/* ---- reductions and normalisation ----------------------------------------------- */

START_TEST(reductions)
{
    OK("x=f32[2,3]", "sum(%x)", "f32[]");
    OK("x=f32[2,3]", "sum(%x, [])", "f32[]");
    OK("x=bool[2,3]", "sum(%x, [1])", "i64[2]");
    OK("x=u8[2,3]", "sum(%x, [-1], true)", "i64[2,1]");
    OK("x=f16[2,3]", "sum(%x, [0, 1], dtype=f32)", "f32[]");
    OK("x=f32[2,3]", "sum(%x, dtype=bool)", "bool[]");
    OK("x=f32[2,0]", "sum(%x, [1])", "f32[2]");
    OK("x=f32[]", "sum(%x, [0])", "f32[]");
    OK("x=f32[]", "sum(%x, [-1], true)", "f32[]");
    BAD("x=f32[]", "sum(%x, [1])", "sum: dim 1 is out of range for f32[] (expected in [-1, 0])");
    BAD("x=f32[2,3]", "sum(%x, [0, -2])", "sum: dim 0 appears more than once");
    BAD("x=f32[2,3]", "sum(%x, [2])",
        "sum: dim 2 is out of range for f32[2,3] (expected in [-2, 1])");
    OK("x=f32[s0,s1]", "sum(%x, [1], true)", "f32[s0,1]");
    OK("x=f32[2,3]", "mean(%x, [])", "f32[]");
    OK("x=i64[2,3]", "mean(%x, [0], dtype=f16)", "f16[3]");
    BAD("x=i64[2,3]", "mean(%x)",
        "mean: expected a floating point tensor or a floating dtype=, got i64[2,3]");
    BAD("x=f32[2,3]", "mean(%x, dtype=i64)", "mean: dtype must be floating point, got i64");
    OK("x=bool[2,3]", "prod(%x)", "i64[]");
    OK("x=i32[2,3]", "prod(%x, 0)", "i64[3]");
    OK("x=f32[2,3]", "prod(%x, 1, true, dtype=i32)", "i32[2,1]");
    OK("x=f32[2,3]", "amax(%x)", "f32[]");
    OK("x=bool[2,3]", "amin(%x, [1])", "bool[2]");
    OK("x=f32[2,0]", "amax(%x, [0])", "f32[0]");
    BAD("x=f32[2,0]", "amax(%x, [1])", "amax: cannot reduce dim 1 of f32[2,0], which has size 0");
    BAD("x=f32[2,0]", "amin(%x)", "amin: cannot reduce f32[2,0], which has no elements");
    OK("x=i64[2,3]", "logsumexp(%x, [1])", "f32[2]");
    OK("x=f16[2,3]", "logsumexp(%x, [0, 1], true)", "f16[1,1]");
    BAD("x=f32[2,3]", "logsumexp(%x, [])", "logsumexp: dim must not be empty");
    OK("x=u8[2,3]", "any(%x)", "u8[]");
    OK("x=u8[2,3]", "all(%x, [1])", "u8[2]");
    OK("x=i64[2,3]", "any(%x, [0, 1])", "bool[]");
    OK("x=f32[2,3]", "any(%x, [])", "bool[2,3]"); /* any/all: [] reduces nothing */
    OK("x=f32[2,3]", "all(%x)", "bool[]");
    OK("x=f32[2,3] grad", "all(%x, [0], true)", "bool[1,3]");
    OK("x=f32[2,3] grad", "sum(%x)", "f32[] grad");
    OK("x=f32[2,3] grad", "sum(%x, dtype=i64)", "i64[]");
}
END_TEST

START_TEST(var_arg_cumsum)
{
    OK("x=f32[2,3]", "var(%x)", "f32[]");
    OK("x=f32[2,3]", "var(%x, [])", "f32[]");
    OK("x=f16[2,3]", "std(%x, [1], keepdim=true)", "f16[2,1]");
    OK("x=f32[2,3]", "var(%x, [0], correction=0)", "f32[3]");
    BAD("x=i64[2,3]", "var(%x)", "var: expected a floating point tensor, got i64[2,3]");
    OK("x=f32[2,3]", "argmax(%x)", "i64[]");
    OK("x=f32[2,3]", "argmax(%x, keepdim=true)", "i64[1,1]");
    OK("x=i32[2,3]", "argmin(%x, -1)", "i64[2]");
    OK("x=f32[2,0]", "argmax(%x, 0)", "i64[0]");
    OK("x=f32[]", "argmax(%x, 0)", "i64[]");
    BAD("x=f32[2,0]", "argmax(%x)", "argmax: cannot reduce f32[2,0], which has no elements");
    BAD("x=f32[2,0]", "argmax(%x, 1)", "argmax: cannot reduce dim 1 of f32[2,0]");
    BAD("x=f32[2,3]", "argmin(%x, 2)", "argmin: dim 2 is out of range");
    OK("x=f32[s0,3] grad", "argmax(%x, 0, true)", "i64[1,3]");
    OK("x=bool[2,3]", "cumsum(%x, 0)", "i64[2,3]");
    OK("x=f32[2,3]", "cumsum(%x, 0, dtype=i32)", "i32[2,3]");
    OK("x=f16[s0] grad", "cumsum(%x, -1)", "f16[s0] grad");
    BAD("x=f16[2]", "cumsum(%x, 1)", "cumsum: dim 1 is out of range");
}
END_TEST

START_TEST(softmax_norms)
{
    OK("x=f32[2,3]", "softmax(%x, -1)", "f32[2,3]");
    OK("x=i64[2,3]", "softmax(%x, 0, f32)", "f32[2,3]");
    OK("x=f16[2,3]", "log_softmax(%x, 1, f32)", "f32[2,3]");
    BAD("x=i64[2,3]", "softmax(%x, 0)", "softmax: computes in floating point");
    BAD("x=f32[2,3]", "softmax(%x, 0, i64)", "softmax: computes in floating point");
    BAD("x=f32[2,3]", "softmax(%x, 2)", "softmax: dim 2 is out of range");
    OK("x=f32[]", "softmax(%x, 0)", "f32[]");
    OK("x=f32[s0,4]; w=f32[4]; b=f32[4]", "layer_norm(%x, [4], %w, %b)", "f32[s0,4]");
    OK("x=f16[2,3]; w=f32[3]", "layer_norm(%x, [3], %w)", "f16[2,3]");
    OK("x=f32[2,3,4]", "layer_norm(%x, [3, 4])", "f32[2,3,4]");
    BAD("x=f32[2,3]", "layer_norm(%x, [2])",
        "layer_norm: normalized_shape [2] does not match the trailing dims of f32[2,3]");
    BAD("x=f32[2,3]; w=f32[4]", "layer_norm(%x, [3], %w)",
        "layer_norm: weight f32[4] should have the shape");
    BAD("x=f32[2,3]; w=f64[3]", "layer_norm(%x, [3], %w)",
        "layer_norm: weight f64[3] does not match input f32[2,3] in dtype");
    BAD("x=i64[2,3]", "layer_norm(%x, [3])", "layer_norm: expected a floating point input");
    OK("x=f32[2,3,4]; rm=f32[3]; rv=f32[3]",
       "batch_norm(%x, none, none, %rm, %rv, false, 0.1, 1e-05)", "f32[2,3,4]");
    OK("x=f32[2,3] grad; w=f32[3] grad; b=f32[3] grad; rm=f32[3]; rv=f32[3]",
       "batch_norm(%x, %w, %b, %rm, %rv, true, 0.1, 1e-05)", "f32[2,3] grad, f32[3], f32[3]");
    OK("x=f32[2,3]", "batch_norm(%x, none, none, none, none, true, 0.1, 1e-05)", "f32[2,3]");
    OK("x=f16[2,3]; rm=f32[3]; rv=f32[3]", "batch_norm(%x, none, none, %rm, %rv, true, 0.1, 1e-05)",
       "f16[2,3], f32[3], f32[3]");
    BAD("x=f32[1,3]", "batch_norm(%x, none, none, none, none, true, 0.1, 1e-05)",
        "batch_norm: expected more than 1 value per channel when training, got input f32[1,3]");
    BAD("x=f32[2,3]", "batch_norm(%x, none, none, none, none, false, 0.1, 1e-05)",
        "batch_norm: running_mean and running_var must be given in evaluation mode");
    BAD("x=f32[2,3]; rm=f32[4]; rv=f32[4]",
        "batch_norm(%x, none, none, %rm, %rv, false, 0.1, 1e-05)",
        "batch_norm: running_mean should have 3 elements, got f32[4]");
    BAD("x=f32[3]; rm=f32[3]; rv=f32[3]", "batch_norm(%x, none, none, %rm, %rv, false, 0.1, 1e-05)",
        "batch_norm: expected an input with at least 2 dims");
    OK("x=f32[s0,3,s1]", "batch_norm(%x, none, none, none, none, true, 0.1, 1e-05)",
       "f32[s0,3,s1]");
    OK("x=f32[2,6,4]; w=f32[6]", "group_norm(%x, 3, %w)", "f32[2,6,4]");
    OK("x=f32[2,6]", "group_norm(%x, 6)", "f32[2,6]");
    BAD("x=f32[2,6,4]", "group_norm(%x, 4)",
        "group_norm: the channels of f32[2,6,4] are not divisible by num_groups=4");
    BAD("x=f32[6]", "group_norm(%x, 3)", "group_norm: expected an input with at least 2 dims");
    BAD("x=f32[2,6]; w=f32[3]", "group_norm(%x, 3, %w)",
        "group_norm: weight should have 6 elements");
    BAD("x=f32[2,s0]", "group_norm(%x, 2)", "not divisible");
}
END_TEST

/* ---- matrix products ------------------------------------------------------------ */

START_TEST(matmuls)
{
    OK("a=f32[2,3]; b=f32[3,4]", "mm(%a, %b)", "f32[2,4]");
    BAD("a=f32[2,3]; b=f32[4,4]", "mm(%a, %b)",
        "mm: shapes f32[2,3] and f32[4,4] cannot be multiplied (3 vs 4)");
    BAD("a=f32[2,3]; b=f64[3,4]", "mm(%a, %b)",
        "mm: expected one dtype, got f32[2,3] and f64[3,4]");
    BAD("a=f32[3]; b=f32[3,4]", "mm(%a, %b)", "mm: expected 2-D matrices");
    BAD("a=bool[2,3]; b=bool[3,4]", "mm(%a, %b)", "mm: not supported for bool");
    OK("a=i64[2,3]; b=i64[3,4]", "mm(%a, %b)", "i64[2,4]");
    OK("a=f32[s0,3] grad; b=f32[3,s1]", "mm(%a, %b)", "f32[s0,s1] grad");
    OK("a=f32[5,2,3]; b=f32[5,3,4]", "bmm(%a, %b)", "f32[5,2,4]");
    BAD("a=f32[2,2,3]; b=f32[1,3,4]", "bmm(%a, %b)",
        "bmm: batch sizes of f32[2,2,3] and f32[1,3,4] differ");
    OK("a=f32[3]; b=f32[3]", "matmul(%a, %b)", "f32[]");
    BAD("a=f32[3]; b=f32[4]", "matmul(%a, %b)",
        "matmul: shapes f32[3] and f32[4] cannot be multiplied");
    OK("a=f32[3]; b=f32[3,4]", "matmul(%a, %b)", "f32[4]");
    OK("a=f32[2,3]; b=f32[3]", "matmul(%a, %b)", "f32[2]");
    OK("a=f32[3]; b=f32[2,3,4]", "matmul(%a, %b)", "f32[2,4]");
    OK("a=f32[2,3,4]; b=f32[4]", "matmul(%a, %b)", "f32[2,3]");
    OK("a=f32[5,1,2,3]; b=f32[4,3,6]", "matmul(%a, %b)", "f32[5,4,2,6]");
    OK("a=f32[2,3]; b=f32[7,3,6]", "matmul(%a, %b)", "f32[7,2,6]");
    OK("a=f32[s0,s1,8]; b=f32[8,16]", "matmul(%a, %b)", "f32[s0,s1,16]");
    BAD("a=f32[]; b=f32[3]", "matmul(%a, %b)", "matmul: both arguments need at least 1 dim");
    BAD("a=f32[2,2,3]; b=f32[3,3,4]", "matmul(%a, %b)",
        "matmul: batch dims of f32[2,2,3] and f32[3,3,4] cannot broadcast");
    BAD("a=f32[3]; b=f64[3]", "matmul(%a, %b)", "matmul: expected one dtype");
    OK("s=f32[4]; a=f32[2,3]; b=f32[3,4]", "addmm(%s, %a, %b)", "f32[2,4]");
    OK("s=f32[2,1]; a=f32[2,3]; b=f32[3,4]", "addmm(%s, %a, %b, beta=0.5)", "f32[2,4]");
    BAD("s=f32[3,2,4]; a=f32[2,3]; b=f32[3,4]", "addmm(%s, %a, %b)",
        "addmm: self f32[3,2,4] cannot be broadcast to [2,4]");
    BAD("s=f16[4]; a=f32[2,3]; b=f32[3,4]", "addmm(%s, %a, %b)", "addmm: expected one dtype");
    OK("x=f32[3]; w=f32[4,3]", "linear(%x, %w)", "f32[4]");
    OK("x=f32[2,5,3]; w=f32[4,3]; b=f32[4]", "linear(%x, %w, %b)", "f32[2,5,4]");
    OK("x=f32[2,3]; w=f32[3]", "linear(%x, %w)", "f32[2]");
    BAD("x=f32[2,3]; w=f32[3]; b=f32[2]", "linear(%x, %w, %b)",
        "linear: a 2-D input with bias needs a 2-D weight");
    OK("x=f32[2,3]; w=f32[4,3]; b=f32[2,4]", "linear(%x, %w, %b)", "f32[2,4]");
    BAD("x=f32[2,3]; w=f32[4,3]; b=f32[3,2,4]", "linear(%x, %w, %b)",
        "linear: bias f32[3,2,4] cannot be broadcast to [2,4]");
    OK("x=f32[2,5,3]; w=f32[4,3]; b=f32[2,1,4]", "linear(%x, %w, %b)", "f32[2,5,4]");
    BAD("x=f32[]; w=f32[4,3]", "linear(%x, %w)", "linear: input needs at least 1 dim");
    BAD("x=f32[3]; w=f32[2,4,3]", "linear(%x, %w)", "linear: weight must be 1-D or 2-D");
    BAD("x=f32[2,5]; w=f32[4,3]", "linear(%x, %w)",
        "linear: input f32[2,5] and weight f32[4,3] cannot be multiplied (5 vs 3)");
    OK("x=f32[s0,768] grad; w=f32[3072,768] grad; b=f32[3072] grad", "linear(%x, %w, %b)",
       "f32[s0,3072] grad");
    OK("s=f32[4]; a=f32[2,2,3]; b=f32[2,3,4]", "baddbmm(%s, %a, %b)", "f32[2,2,4]");
    BAD("s=f32[3,2,4]; a=f32[2,2,3]; b=f32[2,3,4]", "baddbmm(%s, %a, %b)",
        "baddbmm: self f32[3,2,4] cannot be broadcast");
}
END_TEST

START_TEST(attention)
{
    OK("q=f32[2,3,4]; k=f32[2,5,4]; v=f32[2,5,6]", "scaled_dot_product_attention(%q, %k, %v)",
       "f32[2,3,6]");
    OK("q=f32[3,4]; k=f32[5,4]; v=f32[5,6]", "scaled_dot_product_attention(%q, %k, %v)",
       "f32[3,6]");
    OK("q=f32[2,1,3,4]; k=f32[1,2,5,4]; v=f32[2,2,5,6]", "scaled_dot_product_attention(%q, %k, %v)",
       "f32[2,2,3,6]");
    OK("q=f16[2,3,4]; k=f16[2,5,4]; v=f16[2,5,6]; m=bool[3,5]",
       "scaled_dot_product_attention(%q, %k, %v, %m)", "f16[2,3,6]");
    OK("q=f32[s0,8,s1,64]; k=f32[s0,8,s1,64]; v=f32[s0,8,s1,64]",
       "scaled_dot_product_attention(%q, %k, %v, is_causal=true)", "f32[s0,8,s1,64]");
    BAD("q=f32[4]; k=f32[4]; v=f32[6]", "scaled_dot_product_attention(%q, %k, %v)",
        "need at least 2 dims");
    BAD("q=f32[2,3,4]; k=f32[2,5,4]; v=f64[2,5,6]", "scaled_dot_product_attention(%q, %k, %v)",
        "must have one dtype");
    BAD("q=f32[2,3,4]; k=f32[2,5,4]; v=f32[2,5,6]; m=bool[3,5]",
        "scaled_dot_product_attention(%q, %k, %v, %m, is_causal=true)",
        "attn_mask must not be given when is_causal=true");
    BAD("q=f32[2,3,4]; k=f32[2,5,4]; v=f32[2,5,6]; m=i64[3,5]",
        "scaled_dot_product_attention(%q, %k, %v, %m)",
        "attn_mask must be bool or of the query's dtype");
    BAD("q=f32[2,3,4]; k=f32[2,5,4]; v=f32[2,6,6]", "scaled_dot_product_attention(%q, %k, %v)",
        "cannot be multiplied (5 vs 6)");
    BAD("q=f32[2,3,4]; k=f32[2,5,3]; v=f32[2,5,6]", "scaled_dot_product_attention(%q, %k, %v)",
        "cannot be multiplied (4 vs 3)");
    BAD("q=i64[2,3,4]; k=i64[2,5,4]; v=i64[2,5,6]", "scaled_dot_product_attention(%q, %k, %v)",
        "expected a floating point query");
    BAD("q=f32[2,3,4]; k=f32[2,5,4]; v=f32[2,5,6]; m=f32[4,5]",
        "scaled_dot_product_attention(%q, %k, %v, %m)",
        "attn_mask f32[4,5] cannot be broadcast to [2,3,5]");
    BAD("q=f32[2,3,4]; k=f32[2,5,4]; v=f32[2,5,6]",
        "scaled_dot_product_attention(%q, %k, %v, dropout_p=1.5)", "dropout probability");
}
END_TEST

/* ---- convolution and pooling ------------------------------------------------------- */

START_TEST(convolutions)
{
    OK("x=f32[3,8,8]; w=f32[4,3,3,3]", "conv2d(%x, %w)", "f32[4,6,6]");
    OK("x=f32[1,3,8,8]; w=f32[4,3,3,3]", "conv2d(%x, %w, stride=[2, 1], padding=1)",
       "f32[1,4,4,8]");
    OK("x=f32[1,4,8,8]; w=f32[4,2,3,3]; b=f32[4]", "conv2d(%x, %w, %b, groups=2)", "f32[1,4,6,6]");
    BAD("x=f32[1,3,8,8]; w=f32[4,2,3,3]", "conv2d(%x, %w)",
        "conv2d: weight f32[4,2,3,3] with groups=1 expects input f32[1,3,8,8] to have 2 channels");
    BAD("x=f32[1,4,8,8]; w=f32[3,2,3,3]", "conv2d(%x, %w, groups=2)", "not divisible by groups=2");
    BAD("x=f32[1,3,2,2]; w=f32[4,3,3,3]", "conv2d(%x, %w)",
        "conv2d: kernel of f32[4,3,3,3] is larger than the padded input");
    BAD("x=f32[1,3,8,8]; w=f32[4,3,3,3]", "conv2d(%x, %w, padding=-1)",
        "conv2d: padding must not be negative");
    BAD("x=f32[1,3,8,8]; w=f32[4,3,3,3]", "conv2d(%x, %w, stride=0)",
        "conv2d: stride must be positive");
    BAD("x=f32[1,3,8,8]; w=f32[4,3,3,3]; b=f32[5]", "conv2d(%x, %w, %b)",
        "conv2d: bias should be 1-D with 4 elements, got f32[5]");
    BAD("x=f32[1,3,8,8]; w=f64[4,3,3,3]", "conv2d(%x, %w)", "conv2d: expected one dtype");
    BAD("x=f32[1,3,8,8]; w=f32[4,3,3]", "conv2d(%x, %w)", "conv2d: expected a 4-D weight");
    OK("x=i64[1,3,8,8]; w=i64[4,3,3,3]", "conv2d(%x, %w)", "i64[1,4,6,6]");
    OK("x=f32[1,3,8]; w=f32[4,3,3]", "conv1d(%x, %w, dilation=2)", "f32[1,4,4]");
    OK("x=f32[1,3,4,5,6]; w=f32[2,3,1,2,3]", "conv3d(%x, %w)", "f32[1,2,4,4,4]");
    OK("x=f32[1,3,4,5,6]; w=f32[2,3,1,2,3]", "conv3d(%x, %w, stride=[1, 2, 3], padding=[0, 1, 1])",
       "f32[1,2,4,3,2]");
    OK("x=f32[1,4,5,5]; w=f32[4,2,3,3]",
       "conv_transpose2d(%x, %w, stride=2, padding=1, output_padding=1)", "f32[1,2,10,10]");
    OK("x=f32[1,4,5,5]; w=f32[4,2,3,3]", "conv_transpose2d(%x, %w, groups=2)", "f32[1,4,7,7]");
    OK("x=f32[1,4,5,5]; w=f32[4,2,3,3]", "conv_transpose2d(%x, %w, padding=3)", "f32[1,2,1,1]");
    BAD("x=f32[1,4,5,5]; w=f32[4,2,3,3]", "conv_transpose2d(%x, %w, padding=4)",
        "conv_transpose2d: output size -1");
    BAD("x=f32[1,4,5,5]; w=f32[4,2,3,3]", "conv_transpose2d(%x, %w, stride=2, output_padding=2)",
        "output_padding must be smaller than either stride or dilation");
    BAD("x=f32[1,4,5,5]; w=f32[2,2,3,3]", "conv_transpose2d(%x, %w, groups=2)",
        "to have 2 channels");
    OK("x=f32[1,3,8,8]; w=f32[4,3,3,3]", "convolution(%x, %w, none, [1], [0], [1], false, [0], 1)",
       "f32[1,4,6,6]");
    OK("x=f32[1,4,5,5]; w=f32[4,2,3,3]",
       "convolution(%x, %w, none, [2, 2], [1, 1], [1, 1], true, [1, 1], 1)", "f32[1,2,10,10]");
    BAD("x=f32[3,8,8]; w=f32[4,3,3,3]",
        "convolution(%x, %w, none, [1, 1], [0, 0], [1, 1], false, [0, 0], 1)",
        "convolution: expected a 4-D input");
    BAD("x=f32[1,3,8,8]; w=f32[4,3,3,3]",
        "convolution(%x, %w, none, [1, 1, 1], [0, 0], [1, 1], false, [0, 0], 1)",
        "convolution: expected stride to be one int or 2 ints");
    OK("x=f32[s0,3,s1,s1] grad; w=f32[8,3,3,3] grad", "conv2d(%x, %w, padding=1)",
       "f32[s0,8,s1,s1] grad");
    OK("x=f32[s0,3,s1,s1]; w=f32[8,3,3,3]", "conv2d(%x, %w, stride=2, padding=1)",
       "f32[s0,8,(s1+1)//2,(s1+1)//2]");
    BAD("x=f32[s0,3,s1,s1]; w=f32[8,3,3,3]", "conv2d(%x, %w, stride=2)",
        "conv2d: cannot decide whether the kernel of f32[8,3,3,3] fits the input f32[s0,3,s1,s1]");
    BAD("x=f32[1,s0,8,8]; w=f32[4,3,3,3]", "conv2d(%x, %w)", "to have 3 channels");
}
END_TEST

START_TEST(pools)
{
    OK("x=f32[1,1,5,5]", "max_pool2d(%x, [2, 2], ceil_mode=true)", "f32[1,1,3,3]");
    OK("x=f32[1,1,5,5]", "max_pool2d(%x, [3, 3], [2, 2], [1, 1], ceil_mode=true)", "f32[1,1,3,3]");
    OK("x=f32[1,1,6,6]", "max_pool2d(%x, [3, 3], [2, 2], [1, 1], ceil_mode=true)", "f32[1,1,4,4]");
    OK("x=f32[1,1,5,5]", "max_pool2d(%x, 2)", "f32[1,1,2,2]");
    OK("x=f32[1,1,5,5]", "max_pool2d(%x, 2, stride=[])", "f32[1,1,2,2]");
    OK("x=f32[1,1,6,6]", "max_pool2d(%x, 2, stride=1, ceil_mode=true)", "f32[1,1,5,5]");
    OK("x=f32[1,1,5,5]", "max_pool2d(%x, 3, stride=2, padding=1, dilation=2)", "f32[1,1,2,2]");
    OK("x=i64[1,5,5]", "max_pool2d(%x, 2)", "i64[1,2,2]");
    OK("x=f32[0,3,4,5]", "max_pool2d(%x, 2)", "f32[0,3,2,2]");
    BAD("x=f32[1,3,0,5]", "max_pool2d(%x, 2)",
        "max_pool2d: expected non-empty dims except the batch dim");
    BAD("x=f32[1,1,5,5]", "max_pool2d(%x, 3, padding=2)",
        "max_pool2d: padding should be at most half of the kernel size");
    BAD("x=f32[1,1,1,1]", "max_pool2d(%x, 2)",
        "max_pool2d: output size 0 of input f32[1,1,1,1] is too small");
    BAD("x=f32[5,5]", "max_pool2d(%x, 2)", "max_pool2d: expected a 3-D or 4-D input, got f32[5,5]");
    BAD("x=bool[1,5,5]", "max_pool2d(%x, 2)", "max_pool2d: not supported for bool");
    BAD("x=f32[1,1,5,5]", "max_pool2d(%x, 2, stride=0)", "must be positive");
    OK("x=f32[1,3,4,5] grad", "max_pool2d_with_indices(%x, 2)", "f32[1,3,2,2] grad, i64[1,3,2,2]");
    OK("x=i64[1,5,5]", "avg_pool2d(%x, 2)", "i64[1,2,2]");
    OK("x=f32[1,1,5,5]", "avg_pool2d(%x, 3, 2, 1, true, false)", "f32[1,1,3,3]");
    BAD("x=f32[1,5,5]", "avg_pool2d(%x, 2, divisor_override=0)",
        "avg_pool2d: divisor_override must not be zero");
    OK("x=f32[s0,16,s1,s1]", "max_pool2d(%x, 2)", "f32[s0,16,s1//2,s1//2]");
    OK("x=f32[s0,16,s1,s1]", "max_pool2d(%x, 3, 2, 1, ceil_mode=true)",
       "f32[s0,16,s1//2+1,s1//2+1]");
    BAD("x=f32[1,16,s1,s1]", "max_pool2d(%x, 2, 3, ceil_mode=true)",
        "cannot decide the ceil_mode output size");
    OK("x=f32[1,3,5,5]", "adaptive_avg_pool2d(%x, [2, 3])", "f32[1,3,2,3]");
    OK("x=f32[0,3,5,5]", "adaptive_avg_pool2d(%x, 1)", "f32[0,3,1,1]");
    OK("x=f32[s0,512,s1,s1] grad", "adaptive_avg_pool2d(%x, [1, 1])", "f32[s0,512,1,1] grad");
    BAD("x=f32[3,0,5]", "adaptive_avg_pool2d(%x, [2, 3])",
        "adaptive_avg_pool2d: expected non-empty dims");
    BAD("x=i64[3,5,5]", "adaptive_avg_pool2d(%x, [2, 3])",
        "adaptive_avg_pool2d: expected a floating point input");
}
END_TEST

/* ---- views ---------------------------------------------------------------------- */

START_TEST(views)
{
    OK("x=f32[2,3,4]", "view(%x, [-1, 4])", "f32[6,4]");
    OK("x=f32[2,3,4]", "reshape(%x, [24])", "f32[24]");
    OK("x=f32[0,3]", "reshape(%x, [-1])", "f32[0]");
    BAD("x=f32[2,3,4]", "view(%x, [-1, -1])",
        "view: only one dimension of [-1,-1] can be inferred");
    BAD("x=f32[2,3,4]", "view(%x, [5, -1])", "view: shape [5,-1] is invalid for input f32[2,3,4]");
    BAD("x=f32[2,3,4]", "view(%x, [-2, 12])", "view: invalid size -2 in shape [-2,12]");
    BAD("x=f32[0,3]", "view(%x, [0, -1])",
        "view: cannot reshape f32[0,3] into [0,-1]: the -1 is ambiguous");
    BAD("x=f32[2,3]", "reshape(%x, [7])", "reshape: shape [7] is invalid for input f32[2,3]");
    OK("x=f32[s0,6]", "view(%x, [s0, -1])", "f32[s0,6]");
    OK("x=f32[s0,6]", "view(%x, [-1, 3])", "f32[2*s0,3]");
    OK("x=f32[s0,s1,64]", "view(%x, [s0, s1, 8, 8])", "f32[s0,s1,8,8]");
    OK("x=f32[s0,s1,64]", "view(%x, [s0, -1, 8, 8])", "f32[s0,s1,8,8]");
    OK("x=f32[2,s0]", "reshape(%x, [s0, -1])", "f32[s0,2]");
    BAD("x=f32[s0,3]", "view(%x, [-1, 2])", "view: shape [-1,2] is invalid");
    BAD("x=f32[s0]", "view(%x, [s0+1])", "view: shape [s0+1] is invalid for input f32[s0]");
    OK("x=f32[3,2,4]{4,12,1}", "view(%x, [3, 2, 4])", "f32[3,2,4]");
    BAD("x=f32[2,4,3]{12,1,4}", "view(%x, [6, 4])",
        "view: shape [6,4] is not compatible with the strides");
    OK("x=f32[2,4,3]{12,1,4}", "reshape(%x, [6, 4])", "f32[6,4]");
    BAD("x=f32[3,2,4]{4,12,1}", "view(%x, [3, 8])", "not compatible with the strides");
    OK("x=f32[2,3,2]{12,4,2}", "view(%x, [6, 2])", "f32[6,2]");
    OK("x=f32[2,3,2]{12,4,2}", "view(%x, [2, 6])", "f32[2,6]");
    BAD("x=f32[2,3,2]{12,4,1}", "view(%x, [2, 6])", "not compatible with the strides");
    OK("x=f32[]", "flatten(%x)", "f32[1]");
    OK("x=f32[]", "flatten(%x, -1, 0)", "f32[1]");
    BAD("x=f32[]", "flatten(%x, 1)", "flatten: dim 1 is out of range for f32[]");
    OK("x=f32[2,3,4]", "flatten(%x, 1)", "f32[2,12]");
    OK("x=f32[s0,3,4]", "flatten(%x)", "f32[12*s0]");
    BAD("x=f32[2,3,4]", "flatten(%x, 2, 1)", "flatten: start_dim 2 comes after end_dim 1");
    OK("x=f32[2,3,4] grad", "permute(%x, [2, 0, 1])", "f32[4,2,3] grad");
    OK("x=f32[2,3,4]", "permute(%x, [-1, 0, 1])", "f32[4,2,3]");
    BAD("x=f32[2,3,4]", "permute(%x, [0, 0, 1])", "permute: dims [0,0,1] repeat dim 0");
    BAD("x=f32[2,3,4]", "permute(%x, [0, 1])", "permute: dims [0,1] must name each of the 3 dims");
    OK("x=f32[2,3,s0]", "transpose(%x, 0, -1)", "f32[s0,3,2]");
    OK("x=f32[]", "transpose(%x, 0, -1)", "f32[]");
    OK("x=f32[2,3]", "t(%x)", "f32[3,2]");
    OK("x=f32[3]", "t(%x)", "f32[3]");
    BAD("x=f32[2,3,4]", "t(%x)", "t: expects a tensor with at most 2 dims, got f32[2,3,4]");
    OK("x=f32[2,3,4]", "expand(%x, [2, -1, -1, -1])", "f32[2,2,3,4]");
    OK("x=f32[3,1]", "expand(%x, [3, 0])", "f32[3,0]");
    OK("x=f32[1,s0]; y=f32[s1]", "expand(%x, [s1, -1])", "f32[s1,s0]");
    BAD("x=f32[2,3,4]", "expand(%x, [-1, 2, 3, 4])",
        "expand: size -1 is not allowed in a new leading dim 0");
    BAD("x=f32[2,3,4]", "expand(%x, [2, 4, 4])",
        "expand: size [2,4,4] must match f32[2,3,4] at non-singleton dim 1 (4 vs 3)");
    BAD("x=f32[2,3,4]", "expand(%x, [3, 4])", "expand: size [3,4] must have between 3 and 8 dims");
    BAD("x=f32[s0]; y=f32[s1]", "expand(%x, [s1])", "non-singleton");
    OK("x=f32[1,2,1]", "squeeze(%x)", "f32[2]");
    OK("x=f32[1,2,1]", "squeeze(%x, [0, 1])", "f32[2,1]");
    OK("x=f32[1,s0,1]", "squeeze(%x)", "f32[s0]");
    OK("x=f32[]", "squeeze(%x, [0])", "f32[]");
    BAD("x=f32[1,2]", "squeeze(%x, [0, 0])", "squeeze: dim 0 appears more than once");
    BAD("x=f32[1,2]", "squeeze(%x, [2])", "squeeze: dim 2 is out of range");
    OK("x=f32[2,3]", "unsqueeze(%x, -1)", "f32[2,3,1]");
    OK("x=f32[2,3]", "unsqueeze(%x, 1)", "f32[2,1,3]");
    OK("x=f32[]", "unsqueeze(%x, 0)", "f32[1]");
    BAD("x=f32[]", "unsqueeze(%x, 1)",
        "unsqueeze: dim 1 is out of range for f32[] (expected in [-1, 0])");
}
END_TEST

START_TEST(slicing)
{
    OK("x=f32[2,3,4]", "slice(%x, 1, 5)", "f32[2,0,4]");
    OK("x=f32[2,3,4]", "slice(%x, 1, -10, 2)", "f32[2,2,4]");
    OK("x=f32[2,3,4]", "slice(%x, 1, 2, 1)", "f32[2,0,4]");
    OK("x=f32[2,3,4]", "slice(%x, 1, step=2)", "f32[2,2,4]");
    OK("x=f32[2,3,4]", "slice(%x, -1, 1, 1000000000)", "f32[2,3,3]");
    OK("x=f32[2,3,4]", "slice(%x, 2, -3, -1)", "f32[2,3,2]");
    BAD("x=f32[2,3,4]", "slice(%x, 2, step=0)", "slice: step must be positive");
    BAD("x=f32[]", "slice(%x)", "slice: cannot be applied to a 0-dim tensor");
    OK("x=f32[s0,4]", "slice(%x, 0, 1)", "f32[s0-1,4]");
    OK("x=f32[s0,4]", "slice(%x, 0, none, -1)", "f32[s0-1,4]");
    OK("x=f32[s0,4]", "slice(%x, 0, 0, s0)", "f32[s0,4]");
    OK("x=f32[s0,4]", "slice(%x, 0, 0, 1000000)", "f32[s0,4]");
    OK("x=f32[s0,4]", "slice(%x, 0, 0, 2)", "f32[2,4]");
    OK("x=f32[2*s0,4]; y=f32[s0]", "slice(%x, 0, s0)", "f32[s0,4]");
    BAD("x=f32[s0,4]", "slice(%x, 0, 0, 5)", "slice: cannot decide how end 5 clamps");
    OK("x=f32[2,3,4]", "select(%x, 1, -3)", "f32[2,4]");
    BAD("x=f32[2,3,4]", "select(%x, 1, 3)",
        "select: index 3 is out of range for dim 1 of f32[2,3,4]");
    BAD("x=f32[]", "select(%x, 0, 0)", "select: cannot be applied to a 0-dim tensor");
    OK("x=f32[s0,4]", "select(%x, 0, -1)", "f32[4]");
    BAD("x=f32[s0,4]", "select(%x, 0, 3)", "select: cannot decide whether index 3 is in range");
    OK("x=f32[2,3,4]", "narrow(%x, 2, -4, 2)", "f32[2,3,2]");
    OK("x=f32[2,3,4]", "narrow(%x, 2, 4, 0)", "f32[2,3,0]");
    BAD("x=f32[2,3,4]", "narrow(%x, 2, -5, 2)", "narrow: start -5 is out of range for dim 2");
    BAD("x=f32[2,3,4]", "narrow(%x, 2, 3, 2)",
        "narrow: start 3 + length 2 exceeds dim 2 of f32[2,3,4]");
    OK("x=f32[s0,4]", "narrow(%x, 0, 1, s0-1)", "f32[s0-1,4]");
}
END_TEST

START_TEST(indexing)
{
    OK("x=f32[2,3,4]; i=i64[2]", "index(%x, [%i])", "f32[2,3,4]");
    OK("x=f32[2,3,4]; i=i64[2]", "index(%x, [none, %i])", "f32[2,2,4]");
    OK("x=f32[2,3,4]; i=i64[2]", "index(%x, [%i, none, %i])", "f32[2,3]");
    OK("x=f32[2,3,4]; i=i64[2]", "index(%x, [%i, %i])", "f32[2,4]");
    OK("x=f32[2,3,4]; i=i64[2]", "index(%x, [none, %i, %i])", "f32[2,2]");
    OK("x=f32[2,3,4]; i=i64[2,1]; j=i64[2]", "index(%x, [%i, none, %j])", "f32[2,2,3]");
    OK("x=f32[2,3,4]; i=i64[2]", "index(%x, [none, none, %i])", "f32[2,3,2]");
    OK("x=f32[2,3,4]; i=i32[5,1]; j=i64[3]", "index(%x, [none, %i, %j])", "f32[2,5,3]");
    OK("x=f32[s0,3] cuda; i=i64[s1] cpu", "index(%x, [%i])", "f32[s1,3] cuda");
    BAD("x=f32[2,3,4]; m=bool[2,3]", "index(%x, [%m])",
        "index: boolean mask index bool[2,3] selects a data-dependent");
    BAD("x=f32[2,3,4]; m=u8[2]", "index(%x, [%m])", "data-dependent");
    BAD("x=f32[2,3,4]; i=f32[2]", "index(%x, [%i])",
        "index: indices must be i64 or i32 tensors, got f32[2]");
    BAD("x=f32[2,3,4]; i=i64[2]", "index(%x, [%i, %i, %i, %i])",
        "index: too many indices for f32[2,3,4] (got 4)");
    BAD("x=f32[2,3,4]; i=i64[2]; j=i64[3]", "index(%x, [%i, %j])",
        "index: shapes i64[2] and i64[3] cannot broadcast");
    OK("x=f32[2,3,4]; i=i64[2]", "index_select(%x, 1, %i)", "f32[2,2,4]");
    OK("x=f32[2,3,4]; i=i32[]", "index_select(%x, -1, %i)", "f32[2,3,1]");
    OK("x=f32[]; i=i64[1]", "index_select(%x, 0, %i)", "f32[]");
    BAD("x=f32[2,3,4]; i=i64[1,2]", "index_select(%x, 1, %i)",
        "index_select: index must be a vector or a scalar, got i64[1,2]");
    BAD("x=f32[2,3,4]; i=f32[2]", "index_select(%x, 1, %i)",
        "index_select: index must be i64 or i32");
    OK("x=f32[2,3,4] grad; i=i64[2,2,4]", "gather(%x, 1, %i)", "f32[2,2,4] grad");
    OK("x=f32[2,3,4]; i=i32[2,2,4]", "gather(%x, 1, %i)", "f32[2,2,4]");
    BAD("x=f32[2,3,4]; i=i64[2,5,5]", "gather(%x, 1, %i)",
        "gather: index i64[2,5,5] must be no larger than f32[2,3,4] apart from dim 1 (dim 2: 5 vs "
        "4)");
    BAD("x=f32[2,3,4]; i=i64[2,2]", "gather(%x, 1, %i)",
        "gather: index i64[2,2] must have as many dims as f32[2,3,4]");
    OK("w=f32[5,3] grad; i=i64[1,2]", "embedding(%w, %i)", "f32[1,2,3] grad");
    OK("w=f32[5,3]; i=i32[]", "embedding(%w, %i)", "f32[3]");
    OK("w=f32[50257,768]; i=i64[s0,s1]", "embedding(%w, %i)", "f32[s0,s1,768]");
    BAD("w=f32[5,3]; i=f32[2]", "embedding(%w, %i)",
        "embedding: indices must be i64 or i32, got f32[2]");
    BAD("w=f32[5,3,2]; i=i64[2]", "embedding(%w, %i)", "embedding: weight must be 2-D");
}
END_TEST

START_TEST(cat_stack)
{
    OK("a=f32[2,3]; b=f32[0]", "cat([%a, %b])", "f32[2,3]");
    OK("a=f32[0]; b=f64[0]", "cat([%a, %b])", "f64[0]");
    OK("a=f32[2,3]; b=i64[2,3]", "cat([%a, %b], 1)", "f32[2,6]");
    OK("a=f32[2,3]; b=f32[0,3]", "cat([%a, %b])", "f32[2,3]");
    OK("a=f32[2,3]; b=f32[2,0]", "cat([%a, %b], -1)", "f32[2,3]");
    OK("a=f16[s0,3]; b=f16[s1,3]", "cat([%a, %b])", "f16[s0+s1,3]");
    OK("a=f32[2,3] grad; b=f32[2,3]", "cat([%a, %b, %a])", "f32[6,3] grad");
    BAD("a=f32[2,3]; b=f32[3,3]", "cat([%a, %b], 1)",
        "cat: sizes must match except in dim 1, got f32[2,3] and f32[3,3] (tensor 1)");
    BAD("a=f32[2,3]; b=f32[3]", "cat([%a, %b], 1)",
        "cat: tensors must have the same number of dims, got f32[2,3] and f32[3]");
    BAD("a=f32[]", "cat([%a, %a])",
        "cat: a 0-dim tensor (f32[] at position 0) cannot be concatenated");
    BAD("a=f32[2,3]; b=f32[2,0]", "cat([%a, %b])", "cat: sizes must match except in dim 0");
    BAD("a=f32[2,3]", "cat([%a], 2)", "cat: dim 2 is out of range");
    OK("a=f32[2]; b=f16[2]", "stack([%a, %b], 1)", "f32[2,2]");
    OK("a=f32[2,3]", "stack([%a, %a, %a])", "f32[3,2,3]");
    OK("a=f32[]", "stack([%a, %a])", "f32[2]");
    OK("a=f32[s0,4]", "stack([%a, %a], -1)", "f32[s0,4,2]");
    BAD("a=f32[2]; b=f32[3]", "stack([%a, %b])",
        "stack: expects tensors of one size, got f32[2] at entry 0 and f32[3] at entry 1");
    BAD("a=f32[2]", "stack([%a, %a], 2)", "stack: dim 2 is out of range");
}
END_TEST

START_TEST(splits)
{
    OK("x=f32[2,5,4]", "split(%x, 2, 1)", "f32[2,2,4], f32[2,2,4], f32[2,1,4]");
    OK("x=f32[0]", "split(%x, 0)", "f32[0]");
    OK("x=f32[0]", "split(%x, 2)", "f32[0]");
    OK("x=f32[4,s0]", "split(%x, 2)", "f32[2,s0], f32[2,s0]");
    OK("x=f32[s0,2*s0]", "split(%x, s0, 1)", "f32[s0,s0], f32[s0,s0]");
    BAD("x=f32[2,5,4]", "split(%x, 0, 1)", "split: split_size can only be 0 if the dim is empty");
    BAD("x=f32[s0]", "split(%x, 2)",
        "split: the number of pieces of dim 0 of f32[s0] in pieces of 2 depends on the symbolic "
        "size");
    OK("x=f32[2,5,4]", "split_with_sizes(%x, [2, 3], 1)", "f32[2,2,4], f32[2,3,4]");
    OK("x=f32[s0,3]", "split_with_sizes(%x, [1, s0-1])", "f32[1,3], f32[s0-1,3]");
    BAD("x=f32[2,5,4]", "split_with_sizes(%x, [2, 2], 1)",
        "split_with_sizes: split_sizes [2,2] must sum to dim 1 of f32[2,5,4]");
    BAD("x=f32[2,5,4]", "split_with_sizes(%x, [2, -1, 4], 1)",
        "split_with_sizes: split_sizes [2,-1,4] must not be negative");
    OK("x=f32[2,5,4]", "chunk(%x, 4, 1)", "f32[2,2,4], f32[2,2,4], f32[2,1,4]");
    OK("x=f32[6]", "chunk(%x, 4)", "f32[2], f32[2], f32[2]");
    OK("x=f32[0,3]", "chunk(%x, 3)", "f32[0,3], f32[0,3], f32[0,3]");
    OK("x=f32[s0,s1,2*s1]", "chunk(%x, 2, -1)", "f32[s0,s1,s1], f32[s0,s1,s1]");
    BAD("x=f32[2,5,4]", "chunk(%x, 0, 1)", "chunk: chunks must be positive, got 0");
    BAD("x=f32[s0]", "chunk(%x, 3)", "chunk: the number of pieces");
    OK("x=f32[2,3,4] grad", "unbind(%x, 1)", "f32[2,4] grad, f32[2,4] grad, f32[2,4] grad");
    BAD("x=f32[]", "unbind(%x)", "unbind: cannot split a 0-dim tensor");
    BAD("x=f32[0,3]", "unbind(%x)", "unbind: dim 0 of f32[0,3] gives 0 outputs");
    BAD("x=f32[s0,3]", "unbind(%x)",
        "unbind: the number of outputs depends on the symbolic size s0");
}
END_TEST

START_TEST(copies_pad_repeat)
{
    OK("x=f32[2,3]{1,2}", "contiguous(%x)", "f32[2,3]");
    OK("x=i64[s0] grad", "clone(%x)", "i64[s0]");
    OK("x=f32[2,5,4]", "roll(%x, [1])", "f32[2,5,4]");
    OK("x=f32[2,5,4]", "roll(%x, [1, 2], [0, -1])", "f32[2,5,4]");
    BAD("x=f32[2,5,4]", "roll(%x, [1, 2], [0])", "roll: shifts [1,2] and dims [0] must align");
    BAD("x=f32[2,5,4]", "roll(%x, [1, 2])", "roll: shifts [1,2] and dims [] must align");
    BAD("x=f32[2,5,4]", "roll(%x, [1], [3])", "roll: dim 3 is out of range");
    OK("x=f32[3,4]", "triu(%x, 1)", "f32[3,4]");
    OK("x=bool[2,3,4]", "tril(%x, -1)", "bool[2,3,4]");
    BAD("x=f32[3]", "triu(%x)", "triu: expects a tensor with at least 2 dims, got f32[3]");
    BAD("x=f32[]", "tril(%x)", "tril: expects a tensor with at least 2 dims");
    OK("x=f32[2,5,4]", "constant_pad_nd(%x, [1, 2])", "f32[2,5,7]");
    OK("x=f32[2,5,4]", "constant_pad_nd(%x, [1, 2, 0, 1, 3, 3], 1.5)", "f32[8,6,7]");
    OK("x=f32[2,5,4]", "constant_pad_nd(%x, [-3, -1])", "f32[2,5,0]");
    OK("x=f32[s0,s1]", "constant_pad_nd(%x, [0, 1, 1, 1])", "f32[s0+2,s1+1]");
    OK("x=f32[s0,s1]", "constant_pad_nd(%x, [-1, 0])", "f32[s0,s1-1]");
    BAD("x=f32[2,5,4]", "constant_pad_nd(%x, [1, 2, 3])",
        "constant_pad_nd: the length of pad [1,2,3] must be even");
    BAD("x=f32[2,5,4]", "constant_pad_nd(%x, [1, 1, 1, 1, 1, 1, 1, 1])",
        "has more than two entries per dim");
    BAD("x=f32[2,5,4]", "constant_pad_nd(%x, [-3, -2])",
        "constant_pad_nd: padding -3, -2 of dim 2 of f32[2,5,4] gives a negative size");
    BAD("x=f32[s0]", "constant_pad_nd(%x, [-3, 0])", "cannot decide");
    OK("x=f32[2,5,4]", "repeat(%x, [1, 1, 1, 2])", "f32[1,2,5,8]");
    OK("x=f32[s0,4]", "repeat(%x, [2, 1])", "f32[2*s0,4]");
    OK("x=f32[3]", "repeat(%x, [0, 2])", "f32[0,6]");
    BAD("x=f32[2,5,4]", "repeat(%x, [2])", "repeat: repeats [2] must have between 3 and 8 entries");
    BAD("x=f32[2,5,4]", "repeat(%x, [-1, 1, 1])", "repeat: repeats [-1,1,1] must not be negative");
}
END_TEST

/* ---- creation ------------------------------------------------------------------- */

START_TEST(creation)
{
    OK("", "full([2, 3], true)", "bool[2,3]");
    OK("", "full([2, 3], 2)", "i64[2,3]");
    OK("", "full([2, 3], 2.5)", "f32[2,3]");
    OK("", "full([2, 3], 2.5, dtype=i64)", "i64[2,3]");
    OK("", "full([], true, dtype=f16)", "f16[]");
    OK("x=f32[s0]", "full([s0, 2], 0.0, device=cuda)", "f32[s0,2] cuda");
    BAD("", "full([-1, 3], 2.5)", "full: cannot create a tensor with a negative size: [-1,3]");
    OK("", "zeros([2], dtype=bool)", "bool[2]");
    OK("", "ones([2, 0])", "f32[2,0]");
    OK("", "empty([0])", "f32[0]");
    OK("", "rand([2, 3], device=cuda:1)", "f32[2,3] cuda:1");
    OK("", "randn([2], dtype=f16)", "f16[2]");
    BAD("", "rand([2], dtype=i64)", "rand: expected a floating dtype, got i64");
    BAD("", "randn([2, -1])", "randn: cannot create a tensor with a negative size");
    OK("", "arange(0, 10, 3)", "i64[4]");
    OK("", "arange(10, 0, -3)", "i64[4]");
    OK("", "arange(0, 1, 0.1)", "f32[10]");
    OK("", "arange(0, 5.5, dtype=i64)", "i64[5]");
    OK("", "arange(0, 5.5, dtype=i32)", "i32[6]");
    OK("", "arange(0.5, 5, dtype=i64)", "i64[5]");
    OK("", "arange(false, true)", "i64[1]");
    OK("", "arange(0, 10, 2.5, dtype=f16)", "f16[4]");
    OK("", "arange(2, 2)", "i64[0]");
    OK("", "arange(0.0, 3)", "f32[3]");
    BAD("", "arange(0, 10, 0)", "arange: step must be nonzero");
    BAD("", "arange(0, 5, 0.5, dtype=i64)", "arange: step must be nonzero");
    BAD("", "arange(10, 0, 1)", "arange: upper bound and lower bound inconsistent with step sign");
    BAD("", "arange(0, inf)", "arange: unsupported range");
    OK("x=f32[s0]", "arange(0, s0)", "i64[s0]");
    OK("x=f32[s0]", "arange(1, s0, 2)", "i64[s0//2]");
    OK("x=f32[s0]", "arange(s0, 0, -1, dtype=f32)", "f32[s0]");
    BAD("x=f32[s0]", "arange(5, s0)", "arange: cannot decide whether 5 to s0 is consistent");
    BAD("x=f32[s0]", "arange(0, s0, 0.5)", "arange: symbolic bounds need");
}
END_TEST

/* ---- prims ---------------------------------------------------------------------- */

/* Bool operands of every pointwise prim: accepted (sign, bitwise_not; add and
 * mul as or and and; min, max, bitwise ops, comparisons, predicates, where),
 * refused where torch's kernels refuse bool though the prim has an integer
 * formula (abs, neg, rounding, sub, floor_divide, remainder, pow; div, which
 * torch computes in floats), and by the float-only prims as needing floats
 * (the decomposition converts first where torch promotes). */
START_TEST(prims_bool_operands)
{
#define UNARY_REFUSED "not supported for bool tensors (bool[2])"
#define BINARY_REFUSED "not supported for bool operands (bool[2])"
#define NEEDS_FLOATS "expected a floating point"
    static const struct {
        const char *op;
        int operands;
        const char *want; /* the result type, or a part of the error */
    } cases[] = {
        {"abs", 1, UNARY_REFUSED},
        {"neg", 1, UNARY_REFUSED},
        {"floor", 1, UNARY_REFUSED},
        {"ceil", 1, UNARY_REFUSED},
        {"round", 1, UNARY_REFUSED},
        {"trunc", 1, UNARY_REFUSED},
        {"exp", 1, NEEDS_FLOATS},
        {"log", 1, NEEDS_FLOATS},
        {"log1p", 1, NEEDS_FLOATS},
        {"expm1", 1, NEEDS_FLOATS},
        {"sqrt", 1, NEEDS_FLOATS},
        {"rsqrt", 1, NEEDS_FLOATS},
        {"sin", 1, NEEDS_FLOATS},
        {"cos", 1, NEEDS_FLOATS},
        {"tanh", 1, NEEDS_FLOATS},
        {"erf", 1, NEEDS_FLOATS},
        {"reciprocal", 1, NEEDS_FLOATS},
        {"sign", 1, "bool[2]"},
        {"bitwise_not", 1, "bool[2]"},
        {"logical_not", 1, "bool[2]"},
        {"isnan", 1, "bool[2]"},
        {"sub", 2, BINARY_REFUSED},
        {"div", 2, BINARY_REFUSED},
        {"floor_divide", 2, BINARY_REFUSED},
        {"remainder", 2, BINARY_REFUSED},
        {"fmod", 2, BINARY_REFUSED},
        {"pow", 2, BINARY_REFUSED},
        {"atan2", 2, NEEDS_FLOATS},
        {"copysign", 2, NEEDS_FLOATS},
        {"add", 2, "bool[2]"},
        {"mul", 2, "bool[2]"},
        {"maximum", 2, "bool[2]"},
        {"minimum", 2, "bool[2]"},
        {"bitwise_and", 2, "bool[2]"},
        {"bitwise_or", 2, "bool[2]"},
        {"bitwise_xor", 2, "bool[2]"},
        {"eq", 2, "bool[2]"},
        {"ne", 2, "bool[2]"},
        {"lt", 2, "bool[2]"},
        {"le", 2, "bool[2]"},
        {"gt", 2, "bool[2]"},
        {"ge", 2, "bool[2]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char call[64];
        if (cases[i].operands == 1)
            snprintf(call, sizeof call, "prims.%s(%%x)", cases[i].op);
        else
            snprintf(call, sizeof call, "prims.%s(%%x, %%x)", cases[i].op);
        if (strcmp(cases[i].want, "bool[2]") == 0)
            OK("x=bool[2]", call, "bool[2]");
        else
            BAD("x=bool[2]", call, cases[i].want);
    }
    OK("x=bool[2]", "prims.where(%x, %x, %x)", "bool[2]");
#undef UNARY_REFUSED
#undef BINARY_REFUSED
#undef NEEDS_FLOATS
}
END_TEST

START_TEST(prims_pointwise)
{
    OK("x=f32[2,3] grad", "prims.exp(%x)", "f32[2,3] grad");
    BAD("x=i64[2,3]", "prims.exp(%x)", "prims.exp: expected a floating point tensor, got i64[2,3]");
    OK("x=i64[2]", "prims.abs(%x)", "i64[2]");
    BAD("x=bool[2]", "prims.neg(%x)", "prims.neg: not supported for bool");
    OK("x=bool[2]", "prims.bitwise_not(%x)", "bool[2]");
    BAD("x=f32[2]", "prims.bitwise_not(%x)",
        "prims.bitwise_not: expected an integer or bool tensor");
    OK("x=f16[2]", "prims.isnan(%x)", "bool[2]");
    OK("x=i64[2]", "prims.logical_not(%x)", "bool[2]");
    OK("x=f32[s0,3]; y=f32[s0,3]", "prims.add(%x, %y)", "f32[s0,3]");
    BAD("x=f32[2,3]; y=f32[3]", "prims.add(%x, %y)",
        "prims.add: operands must have one shape, got f32[2,3] and f32[3]");
    BAD("x=f32[3]; y=f16[3]", "prims.mul(%x, %y)",
        "prims.mul: operands must have one dtype, got f32[3] and f16[3]");
    OK("x=i64[3]", "prims.div(%x, %x)", "i64[3]");
    BAD("x=bool[3]", "prims.sub(%x, %x)", "prims.sub: not supported for bool");
    BAD("x=f32[3]", "prims.bitwise_and(%x, %x)", "prims.bitwise_and: expected integer or bool");
    BAD("x=i32[3]", "prims.atan2(%x, %x)", "prims.atan2: expected a floating point operand");
    OK("x=i32[3]", "prims.lt(%x, %x)", "bool[3]");
    BAD("x=i32[3]; y=i64[3]", "prims.eq(%x, %y)", "prims.eq: operands must have one dtype");
    OK("p=bool[3]; x=f32[3]", "prims.where(%p, %x, %x)", "f32[3]");
    BAD("p=bool[1]; x=f32[3]", "prims.where(%p, %x, %x)",
        "prims.where: predicate bool[1] and operands f32[3] must have one shape");
    BAD("p=u8[3]; x=f32[3]", "prims.where(%p, %x, %x)", "prims.where: expected a bool predicate");
    OK("x=f32[2] grad", "prims.convert_element_type(%x, f16)", "f16[2] grad");
    OK("x=f32[2] grad", "prims.convert_element_type(%x, i32)", "i32[2]");
    OK("x=f32[2]", "prims.device_put(%x, cuda:0)", "f32[2] cuda:0");
}
END_TEST

START_TEST(prims_shape)
{
    OK("x=f32[3]", "prims.broadcast_in_dim(%x, [2, 3], [1])", "f32[2,3]");
    OK("x=f32[1,3]", "prims.broadcast_in_dim(%x, [4, 2, 3], [0, 2])", "f32[4,2,3]");
    OK("x=f32[]; y=f32[s0]", "prims.broadcast_in_dim(%x, [s0], [])", "f32[s0]");
    BAD("x=f32[1,3]", "prims.broadcast_in_dim(%x, [4, 2, 3], [2, 0])",
        "prims.broadcast_in_dim: broadcast_dimensions [2,0] must be strictly increasing");
    BAD("x=f32[2,3]", "prims.broadcast_in_dim(%x, [4, 2, 3], [0, 2])",
        "prims.broadcast_in_dim: dim 0 of f32[2,3] cannot broadcast to size 4");
    BAD("x=f32[3]", "prims.broadcast_in_dim(%x, [2, 3], [])", "must map each of the 1 dims");
    OK("x=f32[2,3]", "prims.reshape(%x, [3, 2])", "f32[3,2]");
    OK("x=f32[s0,3]", "prims.reshape(%x, [3, s0])", "f32[3,s0]");
    BAD("x=f32[2,3]", "prims.reshape(%x, [-1])", "prims.reshape: shape [-1] has a negative size");
    BAD("x=f32[2,3]", "prims.reshape(%x, [4])",
        "prims.reshape: shape [4] has 4 elements, f32[2,3] has 6");
    OK("x=f32[2,3,4]", "prims.permute(%x, [2, 0, 1])", "f32[4,2,3]");
    BAD("x=f32[2,3,4]", "prims.permute(%x, [-1, 0, 1])", "prims.permute: dim -1 is out of range");
    OK("x=f32[10,4]", "prims.slice(%x, [1, 0], [9, 4], [2, 1])", "f32[4,4]");
    OK("x=f32[10,4]", "prims.slice(%x, [1, 0], [9, 4], [])", "f32[8,4]");
    OK("x=f32[s0,4]", "prims.slice(%x, [1, 0], [s0, 4], [])", "f32[s0-1,4]");
    BAD("x=f32[10,4]", "prims.slice(%x, [1, 0], [11, 4], [])",
        "prims.slice: dim 0: start 1 and limit 11 must satisfy");
    BAD("x=f32[10,4]", "prims.slice(%x, [5, 0], [4, 4], [])", "must satisfy");
    BAD("x=f32[10,4]", "prims.slice(%x, [0, 0], [4, 4], [0, 1])",
        "prims.slice: strides must be positive");
    OK("x=f32[2,3]", "prims.pad(%x, 0, [1, 1, 0, -1, 0, 0])", "f32[4,2]");
    OK("x=f32[2,3]", "prims.pad(%x, 0, [0, 0, 2, 1, 1, 1])", "f32[4,7]");
    OK("x=f32[0,3]", "prims.pad(%x, 0, [1, 0, 5, 0, 0, 0])", "f32[1,3]");
    OK("x=f32[s0]", "prims.pad(%x, 0, [0, 0, 1])", "f32[2*s0-1]");
    BAD("x=f32[2,3]", "prims.pad(%x, 0, [1, 1, 0])",
        "prims.pad: padding_config [1,1,0] needs 3 entries (lo, hi, interior) per dim of f32[2,3]");
    BAD("x=f32[2,3]", "prims.pad(%x, 0, [0, 0, 0, -2, -2, 0])",
        "prims.pad: padding -2, -2 of dim 1 of f32[2,3] gives a negative size");
    BAD("x=f32[2,3]", "prims.pad(%x, 0, [0, 0, -1, 0, 0, 0])",
        "prims.pad: interior padding -1 of dim 0 must not be negative");
    OK("a=f32[2,3]; b=f32[2,5]", "prims.cat([%a, %b], 1)", "f32[2,8]");
    BAD("a=f32[2,3]; b=f16[2,5]", "prims.cat([%a, %b], 1)",
        "prims.cat: tensors must have one dtype");
    BAD("a=f32[2,3]; b=f32[2,5]", "prims.cat([%a, %b], -1)", "prims.cat: dim -1 is out of range");
    BAD("a=f32[0]; b=f32[2,5]", "prims.cat([%a, %b], 0)",
        "prims.cat: tensors must have one dtype and equal sizes");
    OK("", "prims.iota(5, start=0, step=1, dtype=i64, device=cpu)", "i64[5]");
    OK("x=f32[s0]", "prims.iota(s0, start=0, step=2, dtype=f32, device=cuda)", "f32[s0] cuda");
    BAD("", "prims.iota(-1, start=0, step=1, dtype=i64, device=cpu)",
        "prims.iota: length must not be negative");
    OK("", "prims.full([2, 3], 1, dtype=f16, device=cpu)", "f16[2,3]");
    OK("", "prims.rand([2], dtype=f32, device=cpu, seed=3)", "f32[2]");
    BAD("", "prims.randn([2], dtype=i32, device=cpu, seed=3)",
        "prims.randn: expected a floating dtype");
}
END_TEST

START_TEST(prims_reduce_index)
{
    OK("x=f32[2,3,4]", "prims.sum(%x, [0, 2])", "f32[3]");
    OK("x=f32[2,3,4]", "prims.sum(%x, [])", "f32[2,3,4]");
    OK("x=i64[2,3]", "prims.prod(%x, [1])", "i64[2]");
    BAD("x=bool[2,3]", "prims.sum(%x, [1])", "prims.sum: not supported for bool");
    BAD("x=f32[2,3]", "prims.sum(%x, [-1])", "prims.sum: dim -1 is out of range");
    BAD("x=f32[2,3]", "prims.sum(%x, [1, 1])", "prims.sum: dim 1 appears more than once");
    OK("x=bool[2,3]", "prims.amax(%x, [0])", "bool[3]");
    BAD("x=f32[2,0]", "prims.amin(%x, [1])", "prims.amin: cannot reduce dim 1 of f32[2,0]");
    OK("x=f32[2,3]", "prims.argmax(%x, 1)", "i64[2]");
    BAD("x=f32[2,3]", "prims.argmin(%x, 2)", "prims.argmin: dim 2 is out of range");
    OK("x=f32[s0,3] grad", "prims.var_mean(%x, [0], 1.0)", "f32[3] grad, f32[3] grad");
    BAD("x=i32[2,3]", "prims.var_mean(%x, [0], 1.0)",
        "prims.var_mean: expected a floating point tensor");
    OK("x=i32[2,3]", "prims.cumsum(%x, 1)", "i32[2,3]");
    BAD("x=bool[2,3]", "prims.cumsum(%x, 1)", "prims.cumsum: not supported for bool");
    OK("x=f32[2,3]; i=i64[2,2]", "prims.gather(%x, 1, %i)", "f32[2,2]");
    BAD("x=f32[2,3]; i=i32[2,2]", "prims.gather(%x, 1, %i)",
        "prims.gather: index must be i64, got i32[2,2]");
    OK("x=f32[2,3]; i=i64[4]", "prims.index_select(%x, 0, %i)", "f32[4,3]");
    OK("x=f32[5,3]; i=i64[2,3]; s=f32[2,3]", "prims.scatter_add(%x, 0, %i, %s)", "f32[5,3]");
    BAD("x=f32[5,3]; i=i64[2,3]; s=f16[2,3]", "prims.scatter_add(%x, 0, %i, %s)",
        "prims.scatter_add: src f16[2,3] must have the dtype of f32[5,3]");
    BAD("x=f32[5,3]; i=i64[2,4]; s=f32[2,4]", "prims.scatter_add(%x, 0, %i, %s)",
        "must be no larger than f32[5,3] apart from dim 0");
    BAD("x=f32[5,3]; i=i64[3,3]; s=f32[2,3]", "prims.scatter_add(%x, 0, %i, %s)",
        "must be no larger than f32[2,3] apart from dim -1");
}
END_TEST

/* ---- building and verifying ------------------------------------------------------- */

START_TEST(build_graph)
{
    ptc_graph *g = ptc_graph_new(NULL, "g");
    int64_t s23[] = {2, 3}, s3[] = {3}, s4[] = {4};
    ptc_ttype tx = ptc_ttype_make(PTC_F32, 2, s23, PTC_CPU),
              ty = ptc_ttype_make(PTC_I64, 1, s3, PTC_CPU);
    ptc_ttype tz = ptc_ttype_make(PTC_F32, 1, s4, PTC_CPU);
    tx.requires_grad = true;
    ptc_value *x = ptc_graph_add_input(g, "x", &tx), *y = ptc_graph_add_input(g, "y", &ty);
    ptc_value *z = ptc_graph_add_input(g, "z", &tz);
    ptc_error err;
    ptc_arg args[3] = {ptc_arg_value(x), ptc_arg_value(y)};
    ptc_value *sum = ptc_build1(g, PTC_OP_ADD, args, 2, &err); /* alpha defaults */
    ck_assert_ptr_nonnull(sum);
    ck_assert_int_eq(sum->type.dtype, PTC_F32);
    ck_assert(sum->type.requires_grad);
    ck_assert_int_eq(sum->type.ndim, 2);
    int before = g->nnodes, values = g->nvalues;
    args[1] = ptc_arg_value(z);
    ck_assert_ptr_null(ptc_build(g, PTC_OP_ADD, args, 2, &err));
    ck_assert_int_eq(err.cls, PTC_ERR_META);
    ck_assert_str_eq(err.msg, "add: shapes f32[2,3] and f32[4] cannot broadcast (dim 1: 3 vs 4)");
    ck_assert_int_eq(g->nnodes, before);
    ck_assert_int_eq(g->nvalues, values);
    /* too few args for a required param */
    ck_assert_ptr_null(ptc_build(g, PTC_OP_ADD, args, 1, &err));
    ck_assert_ptr_nonnull(strstr(err.msg, "missing argument 'other'"));
    /* int[N] given as one int is normalised; split gives variable outputs */
    ptc_arg sp[3] = {ptc_arg_value(x), ptc_arg_int(1), ptc_arg_int(1)};
    ptc_node *n = ptc_build(g, PTC_OP_SPLIT, sp, 3, &err);
    ck_assert_ptr_nonnull(n);
    ck_assert_int_eq(n->nout, 3);
    ptc_graph_set_outputs(g, n->outs, n->nout);
    ck_assert_int_eq(ptc_ops_verify(g, PTC_STAGE_TORCH, &err), 0);
    ptc_graph_free(g);
}
END_TEST

static ptc_module *parse(const char *text)
{
    ptc_error err;
    ptc_buf b = {0};
    ptc_buf_printf(&b, "# ptc ir v1\n%s", text);
    ptc_module *m = ptc_parse_module(b.data, b.len, "t.ptir", &err);
    ptc_buf_free(&b);
    ck_assert_msg(m, "%s", err.msg);
    return m;
}

/* ptc_meta_infer checks arg kinds and normalises int[N] given as one int. */
START_TEST(infer_raw_args)
{
    ptc_graph *g = ptc_graph_new(NULL, "g");
    int64_t sx[] = {1, 3, 8, 8}, sw[] = {4, 3, 3, 3};
    ptc_ttype tx = ptc_ttype_make(PTC_F32, 4, sx, PTC_CPU),
              tw = ptc_ttype_make(PTC_F32, 4, sw, PTC_CPU);
    ptc_arg args[7];
    ptc_args_defaults(PTC_OP_CONV2D, args);
    args[0] = ptc_arg_value(ptc_graph_add_input(g, "x", &tx));
    args[1] = ptc_arg_value(ptc_graph_add_input(g, "w", &tw));
    args[3] = ptc_arg_int(2); /* stride=2 as a bare int */
    args[4] = ptc_arg_int(1);
    ptc_ttype *types;
    int nout;
    ptc_error err;
    ck_assert_int_eq(ptc_meta_infer(g->arena, PTC_OP_CONV2D, args, 7, &types, &nout, &err), 0);
    ck_assert_int_eq(nout, 1);
    ck_assert(ptc_dim_eq(types[0].shape[2], ptc_dim_c(4)) &&
              ptc_dim_eq(types[0].shape[3], ptc_dim_c(4)));
    args[6] = ptc_arg_float(1.5); /* groups must be an int */
    ck_assert_int_eq(ptc_meta_infer(g->arena, PTC_OP_CONV2D, args, 7, &types, &nout, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "conv2d: argument 'groups' expects int, got a float"));
    ck_assert_int_eq(ptc_meta_infer(g->arena, PTC_OP_CONV2D, args, 6, &types, &nout, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "conv2d: expected 7 arguments, got 6"));
    ptc_graph_free(g);
}
END_TEST

START_TEST(verify_types)
{
    ptc_error err;
    ptc_module *m = parse("graph g(%x: f32[2,3] cpu, %y: f32[3] cpu grad) {\n"
                          "  %0 = add(%x, %y) : f32[2,3] grad\n"
                          "  %1 = sum(%0, [1]) : f32[2]\n" /* no_grad: printed false is fine */
                          "  return (%1)\n}\n");
    ck_assert_int_eq(ptc_ops_verify(m->graphs[0], 0, &err), 0);
    ptc_module_free(m);
    m = parse("graph g(%x: f32[2,3] cpu, %y: f32[3] cpu) {\n"
              "  %0 = add(%x, %y) : f32[2,3]\n"
              "  %3 = add(%0, %x) : f32[2,4]\n"
              "  return (%3)\n}\n");
    ck_assert_int_eq(ptc_ops_verify(m->graphs[0], 0, &err), -1);
    ck_assert_int_eq(err.cls, PTC_ERR_VERIFY);
    ck_assert(err.has_node);
    ck_assert_int_eq(err.node_id, m->graphs[0]->nodes[1]->id);
    ck_assert_str_eq(err.msg, "%3 = add(%0, %x): printed type f32[2,4], but add infers f32[2,3]");
    ptc_module_free(m);
    m = parse("graph g(%x: f32[2,3] cpu) {\n"
              "  %0 = neg(%x) : f32[2,3] grad\n"
              "  return (%0)\n}\n");
    ck_assert_int_eq(ptc_ops_verify(m->graphs[0], 0, &err), -1);
    ck_assert_ptr_nonnull(
        strstr(err.msg, "printed type f32[2,3] cpu grad, but neg infers f32[2,3] cpu (no grad)"));
    ptc_module_free(m);
    m = parse("graph g(%x: f32[2,3] cpu) {\n"
              "  %0 = neg(%x) : f32[2,3] cuda\n"
              "  return (%0)\n}\n");
    ck_assert_int_eq(ptc_ops_verify(m->graphs[0], 0, &err), -1);
    ck_assert_ptr_nonnull(
        strstr(err.msg, "printed type f32[2,3] cuda, but neg infers f32[2,3] cpu"));
    ptc_module_free(m);
    m = parse("graph g(%x: f32[2,3] cpu) {\n"
              "  %0 = neg(%x) : f32[2,3]{1,2}\n"
              "  return (%0)\n}\n");
    ck_assert_int_eq(ptc_ops_verify(m->graphs[0], 0, &err), -1);
    ck_assert_ptr_nonnull(strstr(err.msg, "(node outputs are contiguous)"));
    ptc_module_free(m);
    m = parse("graph g(%x: f32[4] cpu) {\n"
              "  %0, %1 = split(%x, 2) : f32[2], f32[2]\n"
              "  %2, %3, %4 = split(%x, 2) : f32[2], f32[2], f32[0]\n"
              "  return (%0)\n}\n");
    ck_assert_int_eq(ptc_ops_verify(m->graphs[0], 0, &err), -1);
    ck_assert_str_eq(err.msg,
                     "%2, %3, %4 = split(%x, split_size=2): printed 3 results, but split infers 2");
    ptc_module_free(m);
    m = parse("graph g(%x: f32[2,3] cpu, %y: f32[4] cpu) {\n"
              "  %r = add(%x, %y) : f32[2,3]\n"
              "  return (%r)\n}\n");
    ck_assert_int_eq(ptc_ops_verify(m->graphs[0], 0, &err), -1);
    ck_assert_int_eq(err.cls, PTC_ERR_META);
    ck_assert(err.has_node);
    ck_assert_str_eq(
        err.msg,
        "%r = add(%x, %y): add: shapes f32[2,3] and f32[4] cannot broadcast (dim 1: 3 vs 4)");
    ptc_module_free(m);
    /* structural errors come first */
    m = parse("graph g(%x: f32[2,3] cpu) {\n"
              "  %0 = prims.neg(%x) : f32[2,3]\n"
              "  return (%0)\n}\n");
    ck_assert_int_eq(ptc_ops_verify(m->graphs[0], PTC_STAGE_TORCH, &err), -1);
    ck_assert_int_eq(err.cls, PTC_ERR_VERIFY);
    ck_assert_ptr_nonnull(strstr(err.msg, "does not belong"));
    ptc_module_free(m);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("meta");
    TCase *t = tcase_create("meta");
    tcase_add_test(t, result_type_rules);
    tcase_add_test(t, broadcast_and_wrap);
    tcase_add_test(t, op_flags);
    tcase_add_test(t, unary);
    tcase_add_test(t, binary);
    tcase_add_test(t, div_pow_compare_bitwise);
    tcase_add_test(t, where_clamp_masked_fill);
    tcase_add_test(t, dropout_to);
    tcase_add_test(t, reductions);
    tcase_add_test(t, var_arg_cumsum);
    tcase_add_test(t, softmax_norms);
    tcase_add_test(t, matmuls);
    tcase_add_test(t, attention);
    tcase_add_test(t, convolutions);
    tcase_add_test(t, pools);
    tcase_add_test(t, views);
    tcase_add_test(t, slicing);
    tcase_add_test(t, indexing);
    tcase_add_test(t, cat_stack);
    tcase_add_test(t, splits);
    tcase_add_test(t, copies_pad_repeat);
    tcase_add_test(t, creation);
    tcase_add_test(t, prims_pointwise);
    tcase_add_test(t, prims_bool_operands);
    tcase_add_test(t, prims_shape);
    tcase_add_test(t, prims_reduce_index);
    tcase_add_test(t, build_graph);
    tcase_add_test(t, infer_raw_args);
    tcase_add_test(t, verify_types);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *r = srunner_create(suite());
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
