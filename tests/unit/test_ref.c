/* Reference kernels and the interpreter on hand-written graphs with
 * hand-checked values: every dtype class, strided and zero-size inputs,
 * torch's integer and nan semantics, and the interpreter's errors. Graphs are
 * written as .ptir text with explicit types (parsing checks structure only,
 * so these tests pin the kernels independently of meta inference).
 */
#include "ops/ops.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------ */

static ptc_tensor mk(ptc_dtype dt, int ndim, const int64_t *sizes, const double *vals)
{
    ptc_tensor t;
    ptc_error err;
    ck_assert_int_eq(ptc_tensor_alloc(&t, dt, ndim, sizes, &err), 0);
    int64_t n = ptc_tensor_numel(&t), idx[PTC_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        ptc_tensor_set_f64(&t, idx, vals[i]);
        for (int d = ndim - 1; d >= 0; d--) {
            if (++idx[d] < sizes[d])
                break;
            idx[d] = 0;
        }
    }
    return t;
}

#define SIZES(...) ((const int64_t[]){__VA_ARGS__})
#define VALS(...) ((const double[]){__VA_ARGS__})
#define T(dt, n, sizes, vals) mk(dt, n, sizes, vals)

/* Transposes a 2-d tensor's view in place (no copy): a non-contiguous input. */
static ptc_tensor transposed(ptc_tensor t)
{
    int64_t s = t.sizes[0];
    t.sizes[0] = t.sizes[1], t.sizes[1] = s;
    s = t.strides[0];
    t.strides[0] = t.strides[1], t.strides[1] = s;
    return t;
}

/* Parses a graph written without the version line. */
static ptc_module *parse(const char *src, ptc_error *err)
{
    ptc_buf b = {0};
    ptc_buf_printf(&b, "# ptc ir v1\n%s", src);
    ptc_module *m = ptc_parse_module(b.data, b.len, "test.ptir", err);
    ptc_buf_free(&b);
    return m;
}

typedef struct result {
    int rc;
    int n;
    ptc_tensor out[16];
    ptc_error err;
} result;

static result run_opts(const char *src, ptc_tensor *in, int nin, const ptc_run_opts *opts)
{
    result r;
    memset(&r, 0, sizeof r);
    ptc_error perr;
    ptc_module *m = parse(src, &perr);
    if (!m) {
        char buf[2048];
        ptc_error_format(&perr, buf, sizeof buf);
        ck_abort_msg("parse failed: %s", buf);
    }
    ptc_graph *g = m->graphs[0];
    r.n = g->noutputs;
    r.rc = ptc_interp_run(g, in, nin, r.out, opts, &r.err);
    ptc_module_free(m);
    for (int i = 0; i < nin; i++)
        ptc_tensor_release(&in[i]);
    return r;
}

static result run(const char *src, ptc_tensor *in, int nin)
{
    return run_opts(src, in, nin, NULL);
}

static void release(result *r)
{
    for (int i = 0; i < r->n; i++)
        ptc_tensor_release(&r->out[i]);
}

static void ok(const result *r)
{
    if (r->rc) {
        char buf[2048];
        ptc_error_format(&r->err, buf, sizeof buf);
        ck_abort_msg("run failed: %s", buf);
    }
}

/* Checks every element (row-major) against want, within tol (nan == nan). */
static void expect(const ptc_tensor *t, ptc_dtype dt, int ndim, const int64_t *sizes,
                   const double *want, double tol)
{
    ck_assert_int_eq(t->dtype, dt);
    ck_assert_int_eq(t->ndim, ndim);
    for (int d = 0; d < ndim; d++)
        ck_assert_int_eq(t->sizes[d], sizes[d]);
    ck_assert(ptc_tensor_is_contiguous(t));
    int64_t n = ptc_tensor_numel(t), idx[PTC_MAX_DIMS] = {0};
    for (int64_t i = 0; i < n; i++) {
        double got = ptc_tensor_get_f64(t, idx);
        if (isnan(want[i]))
            ck_assert_msg(isnan(got), "element %lld: got %.17g, want nan", (long long)i, got);
        else
            ck_assert_msg(got == want[i] || fabs(got - want[i]) <= tol,
                          "element %lld: got %.17g, want %.17g", (long long)i, got, want[i]);
        for (int d = ndim - 1; d >= 0; d--) {
            if (++idx[d] < sizes[d])
                break;
            idx[d] = 0;
        }
    }
}

#define EXPECT(t, dt, n, sizes, want) expect(t, dt, n, sizes, want, 0)
#define EXPECT_NEAR(t, dt, n, sizes, want, tol) expect(t, dt, n, sizes, want, tol)

static void expect_error(const result *r, const char *needle)
{
    ck_assert_int_eq(r->rc, -1);
    ck_assert_msg(strstr(r->err.msg, needle), "error '%s' lacks '%s'", r->err.msg, needle);
}

/* ---- pointwise ------------------------------------------------------------------ */

START_TEST(test_add_broadcast_strided_alpha)
{
    /* x is the transpose of a contiguous 3x2 tensor: x = [[1,3,5],[2,4,6]] */
    ptc_tensor in[2] = {
        transposed(T(PTC_F32, 2, SIZES(3, 2), VALS(1, 2, 3, 4, 5, 6))),
        T(PTC_F32, 1, SIZES(3), VALS(10, 20, 30)),
    };
    result r = run("graph g(%x: f32[2,3]{1,2} cpu, %y: f32[3] cpu) {\n"
                   "  %0 = add(%x, %y, alpha=2) : f32[2,3]\n"
                   "  return (%0)\n}\n",
                   in, 2);
    ok(&r);
    EXPECT(&r.out[0], PTC_F32, 2, SIZES(2, 3), VALS(21, 43, 65, 22, 44, 66));
    release(&r);
}
END_TEST

START_TEST(test_int_division_semantics)
{
    ptc_tensor in[2] = {
        T(PTC_I64, 1, SIZES(4), VALS(7, -7, 7, -7)),
        T(PTC_I64, 1, SIZES(4), VALS(2, 2, -2, -2)),
    };
    result r = run("graph g(%a: i64[4] cpu, %b: i64[4] cpu) {\n"
                   "  %t = div(%a, %b, rounding_mode=\"trunc\") : i64[4]\n"
                   "  %f = div(%a, %b, rounding_mode=\"floor\") : i64[4]\n"
                   "  %r = remainder(%a, %b) : i64[4]\n"
                   "  %d = div(%a, %b) : f32[4]\n"
                   "  %p = prims.div(%a, %b) : i64[4]\n"
                   "  return (%t, %f, %r, %d, %p)\n}\n",
                   in, 2);
    ok(&r);
    EXPECT(&r.out[0], PTC_I64, 1, SIZES(4), VALS(3, -3, -3, 3));
    EXPECT(&r.out[1], PTC_I64, 1, SIZES(4), VALS(3, -4, -4, 3));
    EXPECT(&r.out[2], PTC_I64, 1, SIZES(4), VALS(1, 1, -1, -1));
    EXPECT(&r.out[3], PTC_F32, 1, SIZES(4), VALS(3.5, -3.5, -3.5, 3.5));
    EXPECT(&r.out[4], PTC_I64, 1, SIZES(4), VALS(3, -3, -3, 3)); /* prims.div truncates ints */
    release(&r);
}
END_TEST

START_TEST(test_int_division_by_zero_names_node)
{
    ptc_tensor in[2] = {
        T(PTC_I32, 1, SIZES(2), VALS(1, 2)),
        T(PTC_I32, 1, SIZES(2), VALS(1, 0)),
    };
    result r =
        run("graph g(%a: i32[2] cpu, %b: i32[2] cpu) {\n"
            "  %ok = neg(%a) : i32[2]\n"
            "  %q = div(%a, %b, rounding_mode=\"floor\") : i32[2]  @ \"m.py\":7:3 \"a // b\"\n"
            "  return (%q, %ok)\n}\n",
            in, 2);
    expect_error(&r, "ZeroDivisionError");
    ck_assert_msg(strstr(r.err.msg, "%q = div(%a, %b"), "%s", r.err.msg);
    ck_assert(r.err.has_node);
    ck_assert_int_eq(r.err.node_id, 1);
    ck_assert_int_eq(r.err.cls, PTC_ERR_RUNTIME);
    ck_assert_str_eq(r.err.file, "m.py");
    ck_assert_int_eq(r.err.line, 7);
}
END_TEST

START_TEST(test_float_floor_div_and_remainder)
{
    ptc_tensor in[2] = {
        T(PTC_F64, 1, SIZES(5), VALS(7.5, -7.5, 1, -0.0, 5)),
        T(PTC_F64, 1, SIZES(5), VALS(2, 2, 0, 3, -3)),
    };
    result r = run("graph g(%a: f64[5] cpu, %b: f64[5] cpu) {\n"
                   "  %f = div(%a, %b, rounding_mode=\"floor\") : f64[5]\n"
                   "  %r = remainder(%a, %b) : f64[5]\n"
                   "  %t = div(%a, %b, rounding_mode=\"trunc\") : f64[5]\n"
                   "  return (%f, %r, %t)\n}\n",
                   in, 2);
    ok(&r);
    EXPECT(&r.out[0], PTC_F64, 1, SIZES(5), VALS(3, -4, INFINITY, -0.0, -2));
    EXPECT(&r.out[1], PTC_F64, 1, SIZES(5), VALS(1.5, 0.5, NAN, -0.0, -1));
    EXPECT(&r.out[2], PTC_F64, 1, SIZES(5), VALS(3, -3, INFINITY, -0.0, -1));
    release(&r);
}
END_TEST

START_TEST(test_integer_pow_and_wrapping)
{
    ptc_tensor in[2] = {
        T(PTC_I64, 1, SIZES(5), VALS(2, -1, 1, 0, 3)),
        T(PTC_I64, 1, SIZES(5), VALS(-1, -3, -2, 5, 4)),
    };
    result r = run("graph g(%a: i64[5] cpu, %b: i64[5] cpu) {\n"
                   "  %p = pow(%a, %b) : i64[5]\n"
                   "  %s = pow(2, %b) : i64[5]\n"
                   "  return (%p, %s)\n}\n",
                   in, 2);
    ok(&r);
    EXPECT(&r.out[0], PTC_I64, 1, SIZES(5), VALS(0, -1, 1, 0, 81));
    EXPECT(&r.out[1], PTC_I64, 1, SIZES(5), VALS(0, 0, 0, 32, 16));
    release(&r);

    /* u8 arithmetic wraps at 8 bits; i8 -(-128) stays -128. */
    ptc_tensor in2[2] = {
        T(PTC_U8, 1, SIZES(2), VALS(3, 250)),
        T(PTC_I8, 1, SIZES(2), VALS(-128, 5)),
    };
    r = run("graph g(%a: u8[2] cpu, %b: i8[2] cpu) {\n"
            "  %0 = sub(%a, 5) : u8[2]\n"
            "  %1 = mul(%a, 2) : u8[2]\n"
            "  %2 = neg(%b) : i8[2]\n"
            "  %3 = abs(%b) : i8[2]\n"
            "  return (%0, %1, %2, %3)\n}\n",
            in2, 2);
    ok(&r);
    EXPECT(&r.out[0], PTC_U8, 1, SIZES(2), VALS(254, 245));
    EXPECT(&r.out[1], PTC_U8, 1, SIZES(2), VALS(6, 244));
    EXPECT(&r.out[2], PTC_I8, 1, SIZES(2), VALS(-128, -5));
    EXPECT(&r.out[3], PTC_I8, 1, SIZES(2), VALS(-128, 5));
    release(&r);

    ptc_tensor in3[1] = {T(PTC_I64, 1, SIZES(1), VALS(2))};
    r = run("graph g(%a: i64[1] cpu) {\n"
            "  %0 = pow(%a, -1) : i64[1]\n"
            "  return (%0)\n}\n",
            in3, 1);
    expect_error(&r, "Integers to negative integer powers are not allowed.");
}
END_TEST

START_TEST(test_nan_semantics)
{
    ptc_tensor in[2] = {
        T(PTC_F32, 1, SIZES(4), VALS(NAN, 1, 5, -3)),
        T(PTC_F32, 1, SIZES(4), VALS(1, NAN, 2, 0)),
    };
    result r = run("graph g(%a: f32[4] cpu, %b: f32[4] cpu) {\n"
                   "  %mx = maximum(%a, %b) : f32[4]\n"
                   "  %mn = minimum(%a, %b) : f32[4]\n"
                   "  %c1 = clamp(%a, nan, 2) : f32[4]\n"
                   "  %c2 = clamp(%a, %b) : f32[4]\n"
                   "  %lt = lt(%a, %b) : bool[4]\n"
                   "  %ne = ne(%a, %b) : bool[4]\n"
                   "  %sg = sign(%a) : f32[4]\n"
                   "  %rl = relu(%a) : f32[4]\n"
                   "  %ht = hardtanh(%a) : f32[4]\n"
                   "  %in = isnan(%a) : bool[4]\n"
                   "  %ln = logical_not(%a) : bool[4]\n"
                   "  %c3 = clamp(%a, nan) : f32[4]\n"
                   "  return (%mx, %mn, %c1, %c2, %lt, %ne, %sg, %rl, %ht, %in, %ln, %c3)\n}\n",
                   in, 2);
    ok(&r);
    int64_t *s = (int64_t[]){4};
    EXPECT(&r.out[0], PTC_F32, 1, s, VALS(NAN, NAN, 5, 0));
    EXPECT(&r.out[1], PTC_F32, 1, s, VALS(NAN, NAN, 2, -3));
    /* clamp.Scalar: a nan bound fills nan when both are given, else is ignored */
    EXPECT(&r.out[2], PTC_F32, 1, s, VALS(NAN, NAN, NAN, NAN));
    EXPECT(&r.out[11], PTC_F32, 1, s, VALS(NAN, 1, 5, -3));
    EXPECT(&r.out[3], PTC_F32, 1, s, VALS(NAN, NAN, 5, 0)); /* a tensor nan bound propagates */
    EXPECT(&r.out[4], PTC_BOOL, 1, s, VALS(0, 0, 0, 1));
    EXPECT(&r.out[5], PTC_BOOL, 1, s, VALS(1, 1, 1, 1));
    EXPECT(&r.out[6], PTC_F32, 1, s, VALS(0, 1, 1, -1));
    EXPECT(&r.out[7], PTC_F32, 1, s, VALS(NAN, 1, 5, 0));
    EXPECT(&r.out[8], PTC_F32, 1, s, VALS(NAN, 1, 1, -1));
    EXPECT(&r.out[9], PTC_BOOL, 1, s, VALS(1, 0, 0, 0));
    EXPECT(&r.out[10], PTC_BOOL, 1, s, VALS(0, 0, 0, 0));
    release(&r);
}
END_TEST

START_TEST(test_round_half_even_and_decimals)
{
    ptc_tensor in[1] = {T(PTC_F64, 1, SIZES(6), VALS(0.5, 1.5, 2.5, -0.5, 1234.5678, -2.675))};
    result r = run("graph g(%a: f64[6] cpu) {\n"
                   "  %0 = round(%a) : f64[6]\n"
                   "  %1 = round(%a, decimals=2) : f64[6]\n"
                   "  %2 = round(%a, decimals=-2) : f64[6]\n"
                   "  return (%0, %1, %2)\n}\n",
                   in, 1);
    ok(&r);
    EXPECT(&r.out[0], PTC_F64, 1, SIZES(6), VALS(0, 2, 2, -0.0, 1235, -3));
    /* nearbyint(x * 100) / 100; -2.675 * 100 rounds to -267.5 in double, a tie */
    EXPECT(&r.out[1], PTC_F64, 1, SIZES(6), VALS(0.5, 1.5, 2.5, -0.5, 1234.57, -2.68));
    EXPECT(&r.out[2], PTC_F64, 1, SIZES(6), VALS(0, 0, 0, -0.0, 1200, -0.0));
    release(&r);
}
END_TEST

START_TEST(test_half_precision_rounds_once)
{
    /* 1 + 2^-11 is a tie between 1 and 1 + 2^-10 in f16: rounds to even (1);
     * 1 + 3*2^-11 rounds up to 1 + 2^-9. In bf16, 1 + 2^-8 ties to 1. */
    ptc_tensor in[2] = {
        T(PTC_F16, 1, SIZES(2), VALS(1, 1)),
        T(PTC_BF16, 1, SIZES(2), VALS(1, 256)),
    };
    result r = run("graph g(%h: f16[2] cpu, %b: bf16[2] cpu) {\n"
                   "  %0 = add(%h, 0.00048828125) : f16[2]\n"
                   "  %1 = add(%h, 0.00146484375) : f16[2]\n"
                   "  %2 = add(%b, 0.00390625) : bf16[2]\n"
                   "  %3 = mul(%h, %b) : f32[2]\n"
                   "  %4 = exp(%h) : f16[2]\n"
                   "  return (%0, %1, %2, %3, %4)\n}\n",
                   in, 2);
    ok(&r);
    EXPECT(&r.out[0], PTC_F16, 1, SIZES(2), VALS(1, 1));
    EXPECT(&r.out[1], PTC_F16, 1, SIZES(2), VALS(1.001953125, 1.001953125));
    EXPECT(&r.out[2], PTC_BF16, 1, SIZES(2), VALS(1, 256));
    EXPECT(&r.out[3], PTC_F32, 1, SIZES(2), VALS(1, 256));
    EXPECT(&r.out[4], PTC_F16, 1, SIZES(2), VALS(2.71875, 2.71875)); /* e rounded to f16 */
    release(&r);
}
END_TEST

START_TEST(test_bitwise_logical_bool)
{
    ptc_tensor in[3] = {
        T(PTC_U8, 1, SIZES(3), VALS(12, 255, 0)),
        T(PTC_U8, 1, SIZES(3), VALS(10, 1, 7)),
        T(PTC_BOOL, 1, SIZES(3), VALS(1, 0, 1)),
    };
    result r = run("graph g(%a: u8[3] cpu, %b: u8[3] cpu, %c: bool[3] cpu) {\n"
                   "  %and = bitwise_and(%a, %b) : u8[3]\n"
                   "  %or = bitwise_or(%a, 16) : u8[3]\n"
                   "  %xor = bitwise_xor(%a, %b) : u8[3]\n"
                   "  %not = bitwise_not(%a) : u8[3]\n"
                   "  %bnot = bitwise_not(%c) : bool[3]\n"
                   "  %land = logical_and(%a, %c) : bool[3]\n"
                   "  %lxor = logical_xor(%b, %c) : bool[3]\n"
                   "  %badd = add(%c, %c) : bool[3]\n"
                   "  return (%and, %or, %xor, %not, %bnot, %land, %lxor, %badd)\n}\n",
                   in, 3);
    ok(&r);
    int64_t *s = (int64_t[]){3};
    EXPECT(&r.out[0], PTC_U8, 1, s, VALS(8, 1, 0));
    EXPECT(&r.out[1], PTC_U8, 1, s, VALS(28, 255, 16));
    EXPECT(&r.out[2], PTC_U8, 1, s, VALS(6, 254, 7));
    EXPECT(&r.out[3], PTC_U8, 1, s, VALS(243, 0, 255));
    EXPECT(&r.out[4], PTC_BOOL, 1, s, VALS(0, 1, 0));
    EXPECT(&r.out[5], PTC_BOOL, 1, s, VALS(1, 0, 0));
    EXPECT(&r.out[6], PTC_BOOL, 1, s, VALS(0, 1, 0));
    EXPECT(&r.out[7], PTC_BOOL, 1, s, VALS(1, 0, 1));
    release(&r);
}
END_TEST

START_TEST(test_compare_promotes_operands)
{
    /* lt(i64, 2.5) compares in f32; eq(f16, 0.1) rounds 0.1 to f16 first. */
    ptc_tensor in[2] = {
        T(PTC_I64, 1, SIZES(3), VALS(2, 3, -1)),
        T(PTC_F16, 1, SIZES(2), VALS(0.1, 0.2)),
    };
    result r = run("graph g(%a: i64[3] cpu, %h: f16[2] cpu) {\n"
                   "  %0 = lt(%a, 2.5) : bool[3]\n"
                   "  %1 = eq(%h, 0.1) : bool[2]\n"
                   "  %2 = ge(%a, 2) : bool[3]\n"
                   "  return (%0, %1, %2)\n}\n",
                   in, 2);
    ok(&r);
    EXPECT(&r.out[0], PTC_BOOL, 1, SIZES(3), VALS(1, 0, 1));
    EXPECT(&r.out[1], PTC_BOOL, 1, SIZES(2), VALS(1, 0));
    EXPECT(&r.out[2], PTC_BOOL, 1, SIZES(3), VALS(1, 1, 0));
    release(&r);
}
END_TEST

START_TEST(test_where_masked_fill_to)
{
    ptc_tensor in[2] = {
        T(PTC_BOOL, 2, SIZES(2, 1), VALS(1, 0)),
        T(PTC_F32, 1, SIZES(3), VALS(1.75, -2.5, NAN)),
    };
    result r = run("graph g(%c: bool[2,1] cpu, %x: f32[3] cpu) {\n"
                   "  %w = where(%c, %x, 7) : f32[2,3]\n"
                   "  %m = masked_fill(%x, %c, -1) : f32[2,3]\n"
                   "  %i = to(%x, dtype=i32) : i32[3]\n"
                   "  %b = to(%x, dtype=bool) : bool[3]\n"
                   "  %u = prims.convert_element_type(%x, u8) : u8[3]\n"
                   "  return (%w, %m, %i, %b, %u)\n}\n",
                   in, 2);
    ok(&r);
    EXPECT(&r.out[0], PTC_F32, 2, SIZES(2, 3), VALS(1.75, -2.5, NAN, 7, 7, 7));
    EXPECT(&r.out[1], PTC_F32, 2, SIZES(2, 3), VALS(-1, -1, -1, 1.75, -2.5, NAN));
    /* float -> int truncates; nan -> int is INT_MIN's low bits as on x86 */
    ck_assert_int_eq(ptc_tensor_get_i64(&r.out[2], (int64_t[]){0}), 1);
    ck_assert_int_eq(ptc_tensor_get_i64(&r.out[2], (int64_t[]){1}), -2);
    EXPECT(&r.out[3], PTC_BOOL, 1, SIZES(3), VALS(1, 1, 1));
    ck_assert_int_eq(ptc_tensor_get_i64(&r.out[4], (int64_t[]){0}), 1);
    ck_assert_int_eq(ptc_tensor_get_i64(&r.out[4], (int64_t[]){1}), 254); /* -2 wraps */
    release(&r);
}
END_TEST

START_TEST(test_unary_activations)
{
    ptc_tensor in[1] = {T(PTC_F64, 1, SIZES(4), VALS(-2, -0.5, 0, 3))};
    result r = run("graph g(%x: f64[4] cpu) {\n"
                   "  %0 = leaky_relu(%x, 0.1) : f64[4]\n"
                   "  %1 = hardswish(%x) : f64[4]\n"
                   "  %2 = hardsigmoid(%x) : f64[4]\n"
                   "  %3 = elu(%x, 2.0) : f64[4]\n"
                   "  %4 = softplus(%x, 1, 2) : f64[4]\n"
                   "  %5 = gelu(%x) : f64[4]\n"
                   "  %6 = gelu(%x, approximate=\"tanh\") : f64[4]\n"
                   "  %7 = sigmoid(%x) : f64[4]\n"
                   "  %8 = rsqrt(%x) : f64[4]\n"
                   "  return (%0, %1, %2, %3, %4, %5, %6, %7, %8)\n}\n",
                   in, 1);
    ok(&r);
    int64_t *s = (int64_t[]){4};
    EXPECT_NEAR(&r.out[0], PTC_F64, 1, s, VALS(-0.2, -0.05, 0, 3), 1e-15);
    EXPECT_NEAR(&r.out[1], PTC_F64, 1, s, VALS(-2.0 / 6, -0.5 * 2.5 / 6, 0, 3), 1e-15);
    EXPECT_NEAR(&r.out[2], PTC_F64, 1, s, VALS(1.0 / 6, 2.5 / 6, 0.5, 1), 1e-15);
    EXPECT_NEAR(&r.out[3], PTC_F64, 1, s, VALS(2 * expm1(-2.0), 2 * expm1(-0.5), 0, 3), 1e-15);
    EXPECT_NEAR(&r.out[4], PTC_F64, 1, s, VALS(log1p(exp(-2.0)), log1p(exp(-0.5)), log(2.0), 3),
                1e-15);
    EXPECT_NEAR(&r.out[5], PTC_F64, 1, s,
                VALS(-2 * 0.5 * erfc(2 / sqrt(2.0)), -0.5 * 0.5 * erfc(0.5 / sqrt(2.0)), 0,
                     3 * 0.5 * (1 + erf(3 / sqrt(2.0)))),
                1e-12);
    EXPECT_NEAR(&r.out[6], PTC_F64, 1, s,
                VALS(-0.045402305912224938, -0.15428599017485606, 0, 2.9963626079182268), 1e-15);
    EXPECT_NEAR(&r.out[7], PTC_F64, 1, s,
                VALS(1 / (1 + exp(2.0)), 1 / (1 + exp(0.5)), 0.5, 1 / (1 + exp(-3.0))), 1e-15);
    EXPECT_NEAR(&r.out[8], PTC_F64, 1, s, VALS(NAN, NAN, INFINITY, 1 / sqrt(3.0)), 1e-15);
    release(&r);
}
END_TEST

/* ---- reductions ------------------------------------------------------------------ */

START_TEST(test_sum_mean_keepdim_strided)
{
    /* x = transpose of [[1,2],[3,4],[5,6]] = [[1,3,5],[2,4,6]] */
    ptc_tensor in[1] = {transposed(T(PTC_F32, 2, SIZES(3, 2), VALS(1, 2, 3, 4, 5, 6)))};
    result r = run("graph g(%x: f32[2,3]{1,2} cpu) {\n"
                   "  %0 = sum(%x, [1], true) : f32[2,1]\n"
                   "  %1 = mean(%x, [0]) : f32[3]\n"
                   "  %2 = sum(%x) : f32[]\n"
                   "  %3 = prod(%x, 1) : f32[2]\n"
                   "  %4 = amax(%x, [-1]) : f32[2]\n"
                   "  %5 = logsumexp(%x, [0, 1]) : f32[]\n"
                   "  %6 = prims.sum(%x, [0]) : f32[3]\n"
                   "  return (%0, %1, %2, %3, %4, %5, %6)\n}\n",
                   in, 1);
    ok(&r);
    EXPECT(&r.out[0], PTC_F32, 2, SIZES(2, 1), VALS(9, 12));
    EXPECT(&r.out[1], PTC_F32, 1, SIZES(3), VALS(1.5, 3.5, 5.5));
    EXPECT(&r.out[2], PTC_F32, 0, SIZES(0), VALS(21));
    EXPECT(&r.out[3], PTC_F32, 1, SIZES(2), VALS(15, 48));
    EXPECT(&r.out[4], PTC_F32, 1, SIZES(2), VALS(5, 6));
    double lse = log(exp(1.0) + exp(2.0) + exp(3.0) + exp(4.0) + exp(5.0) + exp(6.0));
    EXPECT_NEAR(&r.out[5], PTC_F32, 0, SIZES(0), VALS(lse), 1e-6);
    EXPECT(&r.out[6], PTC_F32, 1, SIZES(3), VALS(3, 7, 11));
    release(&r);
}
END_TEST

START_TEST(test_integer_and_bool_reductions)
{
    ptc_tensor in[2] = {
        T(PTC_I8, 2, SIZES(2, 2), VALS(100, 100, -7, 3)),
        T(PTC_U8, 2, SIZES(2, 3), VALS(0, 0, 0, 0, 5, 0)),
    };
    result r = run("graph g(%a: i8[2,2] cpu, %u: u8[2,3] cpu) {\n"
                   "  %s = sum(%a, [1]) : i64[2]\n"
                   "  %p = prod(%a, 1) : i64[2]\n"
                   "  %mn = amin(%a) : i8[]\n"
                   "  %any = any(%u, [1]) : u8[2]\n"
                   "  %all = all(%u) : u8[]\n"
                   "  %ps = prims.sum(%a, [1]) : i8[2]\n"
                   "  %pn = prims.sum(%a, []) : i8[2,2]\n"
                   "  %an = any(%u, []) : u8[2,3]\n"
                   "  return (%s, %p, %mn, %any, %all, %ps, %pn, %an)\n}\n",
                   in, 2);
    ok(&r);
    EXPECT(&r.out[0], PTC_I64, 1, SIZES(2), VALS(200, -4));
    EXPECT(&r.out[1], PTC_I64, 1, SIZES(2), VALS(10000, -21));
    EXPECT(&r.out[2], PTC_I8, 0, SIZES(0), VALS(-7));
    EXPECT(&r.out[3], PTC_U8, 1, SIZES(2), VALS(0, 1));
    EXPECT(&r.out[4], PTC_U8, 0, SIZES(0), VALS(0));
    EXPECT(&r.out[5], PTC_I8, 1, SIZES(2), VALS(-56, -4)); /* 200 wraps in i8 */
    /* prims reduce the dims listed: [] none; torch's any.dims with [] neither */
    EXPECT(&r.out[6], PTC_I8, 2, SIZES(2, 2), VALS(100, 100, -7, 3));
    EXPECT(&r.out[7], PTC_U8, 2, SIZES(2, 3), VALS(0, 0, 0, 0, 1, 0));
    release(&r);
}
END_TEST

START_TEST(test_zero_size_reductions)
{
    ptc_tensor in[1] = {T(PTC_F32, 2, SIZES(0, 3), VALS(0))};
    result r = run("graph g(%x: f32[0,3] cpu) {\n"
                   "  %s = sum(%x, [0]) : f32[3]\n"
                   "  %m = mean(%x, [0]) : f32[3]\n"
                   "  %p = prod(%x, 0) : f32[3]\n"
                   "  %l = logsumexp(%x, [0]) : f32[3]\n"
                   "  %a = any(%x, [0]) : bool[3]\n"
                   "  %e = exp(%x) : f32[0,3]\n"
                   "  %t = amax(%x, [1]) : f32[0]\n"
                   "  return (%s, %m, %p, %l, %a, %e, %t)\n}\n",
                   in, 1);
    ok(&r);
    EXPECT(&r.out[0], PTC_F32, 1, SIZES(3), VALS(0, 0, 0));
    EXPECT(&r.out[1], PTC_F32, 1, SIZES(3), VALS(NAN, NAN, NAN));
    EXPECT(&r.out[2], PTC_F32, 1, SIZES(3), VALS(1, 1, 1));
    EXPECT(&r.out[3], PTC_F32, 1, SIZES(3), VALS(-INFINITY, -INFINITY, -INFINITY));
    EXPECT(&r.out[4], PTC_BOOL, 1, SIZES(3), VALS(0, 0, 0));
    EXPECT(&r.out[5], PTC_F32, 2, SIZES(0, 3), VALS(0));
    EXPECT(&r.out[6], PTC_F32, 1, SIZES(0), VALS(0));
    release(&r);

    ptc_tensor in2[1] = {T(PTC_F32, 2, SIZES(0, 3), VALS(0))};
    r = run("graph g(%x: f32[0,3] cpu) {\n"
            "  %t = amax(%x, [0]) : f32[3]\n"
            "  return (%t)\n}\n",
            in2, 1);
    expect_error(&r, "amax(): Expected reduction dim 0 to have non-zero size.");
}
END_TEST

START_TEST(test_var_std_argmax)
{
    ptc_tensor in[2] = {
        T(PTC_F64, 2, SIZES(2, 3), VALS(1, 2, 6, 4, 4, 4)),
        T(PTC_F32, 1, SIZES(5), VALS(1, NAN, 3, NAN, 3)),
    };
    result r = run("graph g(%x: f64[2,3] cpu, %y: f32[5] cpu) {\n"
                   "  %v = var(%x, [1]) : f64[2]\n"
                   "  %s = std(%x, [1], correction=0) : f64[2]\n"
                   "  %vm, %mm = prims.var_mean(%x, [1], 1.0) : f64[2], f64[2]\n"
                   "  %v1 = var(%y, [0], correction=5) : f32[]\n"
                   "  %am = argmax(%x, 1, true) : i64[2,1]\n"
                   "  %an = argmin(%x) : i64[]\n"
                   "  %ay = argmax(%y) : i64[]\n"
                   "  return (%v, %s, %vm, %mm, %v1, %am, %an, %ay)\n}\n",
                   in, 2);
    ok(&r);
    EXPECT_NEAR(&r.out[0], PTC_F64, 1, SIZES(2), VALS(7, 0), 1e-14);
    EXPECT_NEAR(&r.out[1], PTC_F64, 1, SIZES(2), VALS(sqrt(14.0 / 3), 0), 1e-14);
    EXPECT_NEAR(&r.out[2], PTC_F64, 1, SIZES(2), VALS(7, 0), 1e-14);
    EXPECT(&r.out[3], PTC_F64, 1, SIZES(2), VALS(3, 4));
    EXPECT(&r.out[4], PTC_F32, 0, SIZES(0), VALS(NAN));
    EXPECT(&r.out[5], PTC_I64, 2, SIZES(2, 1), VALS(2, 0)); /* ties: first */
    EXPECT(&r.out[6], PTC_I64, 0, SIZES(0), VALS(0));
    EXPECT(&r.out[7], PTC_I64, 0, SIZES(0), VALS(1)); /* the first nan */
    release(&r);
}
END_TEST

START_TEST(test_cumsum_softmax)
{
    ptc_tensor in[2] = {
        T(PTC_I32, 2, SIZES(2, 3), VALS(1, 2, 3, 4, 5, 6)),
        T(PTC_F32, 2, SIZES(2, 2), VALS(0, 0, -INFINITY, -INFINITY)),
    };
    result r = run("graph g(%a: i32[2,3] cpu, %x: f32[2,2] cpu) {\n"
                   "  %c = cumsum(%a, 1) : i64[2,3]\n"
                   "  %c0 = cumsum(%a, 0, dtype=f32) : f32[2,3]\n"
                   "  %s = softmax(%x, 1) : f32[2,2]\n"
                   "  %l = log_softmax(%x, -1) : f32[2,2]\n"
                   "  %sa = softmax(%a, 1, f64) : f64[2,3]\n"
                   "  return (%c, %c0, %s, %l, %sa)\n}\n",
                   in, 2);
    ok(&r);
    EXPECT(&r.out[0], PTC_I64, 2, SIZES(2, 3), VALS(1, 3, 6, 4, 9, 15));
    EXPECT(&r.out[1], PTC_F32, 2, SIZES(2, 3), VALS(1, 2, 3, 5, 7, 9));
    EXPECT(&r.out[2], PTC_F32, 2, SIZES(2, 2), VALS(0.5, 0.5, NAN, NAN));
    EXPECT_NEAR(&r.out[3], PTC_F32, 2, SIZES(2, 2), VALS(-log(2.0), -log(2.0), NAN, NAN), 1e-7);
    double z = exp(1.0) + exp(2.0) + exp(3.0);
    EXPECT_NEAR(
        &r.out[4], PTC_F64, 2, SIZES(2, 3),
        VALS(exp(1.0) / z, exp(2.0) / z, exp(3.0) / z, exp(1.0) / z, exp(2.0) / z, exp(3.0) / z),
        1e-15);
    release(&r);
}
END_TEST

START_TEST(test_norms)
{
    ptc_tensor in[5] = {
        T(PTC_F64, 3, SIZES(2, 2, 2), VALS(1, 3, 5, 7, 0, 2, 2, 6)),
        T(PTC_F64, 1, SIZES(2), VALS(2, 1)),
        T(PTC_F64, 1, SIZES(2), VALS(0, 10)),
        T(PTC_F64, 1, SIZES(2), VALS(1, 1)),
        T(PTC_F64, 1, SIZES(2), VALS(1, 2)),
    };
    result r = run("graph g(%x: f64[2,2,2] cpu, %w: f64[2] cpu, %b: f64[2] cpu,"
                   " %rm: f64[2] cpu, %rv: f64[2] cpu) {\n"
                   "  %ln = layer_norm(%x, [2], %w, %b, eps=0.0) : f64[2,2,2]\n"
                   "  %gn = group_norm(%x, 1, %w, %b, eps=0.0) : f64[2,2,2]\n"
                   "  %bn, %nm, %nv = batch_norm(%x, %w, %b, %rm, %rv, true, 0.5, 0.0)"
                   " : f64[2,2,2], f64[2], f64[2]\n"
                   "  %be = batch_norm(%x, none, none, %rm, %rv, false, 0.1, 0.0) : f64[2,2,2]\n"
                   "  return (%ln, %gn, %bn, %nm, %nv, %be)\n}\n",
                   in, 5);
    ok(&r);
    /* every row of two distinct values normalises to (-1, 1); w = (2, 1), b = (0, 10) */
    EXPECT_NEAR(&r.out[0], PTC_F64, 3, SIZES(2, 2, 2), VALS(-2, 11, -2, 11, -2, 11, -2, 11), 1e-12);
    /* one group per batch: {1,3,5,7} mean 4 var 5; {0,2,2,6} mean 2.5 var 4.75;
     * channel 0 scaled by 2, channel 1 shifted by 10 */
    double s5 = sqrt(5.0), s4 = sqrt(4.75);
    EXPECT_NEAR(&r.out[1], PTC_F64, 3, SIZES(2, 2, 2),
                VALS(-3 / s5 * 2, -1 / s5 * 2, 1 / s5 + 10, 3 / s5 + 10, -2.5 / s4 * 2,
                     -0.5 / s4 * 2, -0.5 / s4 + 10, 3.5 / s4 + 10),
                1e-12);
    /* channel 0: {1,3,0,2} mean 1.5, biased var 1.25, unbiased 5/3;
     * channel 1: {5,7,2,6} mean 5, biased var 3.5, unbiased 14/3 */
    double a = sqrt(1.25), c = sqrt(3.5);
    EXPECT_NEAR(&r.out[2], PTC_F64, 3, SIZES(2, 2, 2),
                VALS(2 * -0.5 / a, 2 * 1.5 / a, 0 / c + 10, 2 / c + 10, 2 * -1.5 / a, 2 * 0.5 / a,
                     -3 / c + 10, 1 / c + 10),
                1e-12);
    EXPECT_NEAR(&r.out[3], PTC_F64, 1, SIZES(2), VALS(0.5 * 1 + 0.5 * 1.5, 0.5 * 1 + 0.5 * 5),
                1e-15);
    EXPECT_NEAR(&r.out[4], PTC_F64, 1, SIZES(2),
                VALS(0.5 * 1 + 0.5 * 5.0 / 3, 0.5 * 2 + 0.5 * 14.0 / 3), 1e-15);
    /* eval: (x - running_mean) / sqrt(running_var) */
    double r2 = sqrt(2.0);
    EXPECT_NEAR(&r.out[5], PTC_F64, 3, SIZES(2, 2, 2),
                VALS(0, 2, 4 / r2, 6 / r2, -1, 1, 1 / r2, 5 / r2), 1e-12);
    release(&r);

    ptc_tensor in2[1] = {T(PTC_F32, 2, SIZES(1, 2), VALS(1, 2))};
    r = run("graph g(%x: f32[1,2] cpu) {\n"
            "  %0 = batch_norm(%x, none, none, none, none, true, 0.1, 1e-05) : f32[1,2]\n"
            "  return (%0)\n}\n",
            in2, 1);
    expect_error(&r, "Expected more than 1 value per channel when training");
}
END_TEST

/* ---- linear algebra ------------------------------------------------------------------ */

START_TEST(test_matmul_family)
{
    ptc_tensor in[4] = {
        T(PTC_F32, 2, SIZES(2, 3), VALS(1, 2, 3, 4, 5, 6)),
        T(PTC_F32, 2, SIZES(3, 2), VALS(1, 0, 0, 1, 1, 1)),
        T(PTC_F32, 1, SIZES(3), VALS(1, 1, 2)),
        T(PTC_F32, 2, SIZES(2, 2), VALS(NAN, NAN, NAN, NAN)),
    };
    result r = run("graph g(%a: f32[2,3] cpu, %b: f32[3,2] cpu, %v: f32[3] cpu,"
                   " %n: f32[2,2] cpu) {\n"
                   "  %mm = mm(%a, %b) : f32[2,2]\n"
                   "  %dot = matmul(%v, %v) : f32[]\n"
                   "  %mv = matmul(%a, %v) : f32[2]\n"
                   "  %vm = matmul(%v, %b) : f32[2]\n"
                   "  %am = addmm(%n, %a, %b, beta=0, alpha=2) : f32[2,2]\n"
                   "  %lin = linear(%a, %a, %mv) : f32[2,2]\n"
                   "  %bt = unsqueeze(%a, 0) : f32[1,2,3]\n"
                   "  %bm = matmul(%bt, %b) : f32[1,2,2]\n"
                   "  return (%mm, %dot, %mv, %vm, %am, %lin, %bm)\n}\n",
                   in, 4);
    ok(&r);
    EXPECT(&r.out[0], PTC_F32, 2, SIZES(2, 2), VALS(4, 5, 10, 11));
    EXPECT(&r.out[1], PTC_F32, 0, SIZES(0), VALS(6));
    EXPECT(&r.out[2], PTC_F32, 1, SIZES(2), VALS(9, 21));
    EXPECT(&r.out[3], PTC_F32, 1, SIZES(2), VALS(3, 3));
    EXPECT(&r.out[4], PTC_F32, 2, SIZES(2, 2), VALS(8, 10, 20, 22)); /* beta=0 drops nan */
    EXPECT(&r.out[5], PTC_F32, 2, SIZES(2, 2), VALS(23, 53, 41, 98));
    EXPECT(&r.out[6], PTC_F32, 3, SIZES(1, 2, 2), VALS(4, 5, 10, 11));
    release(&r);
}
END_TEST

START_TEST(test_sdpa)
{
    /* scores are all 0: plain averages; causal row 0 sees only s = 0; a
     * fully masked row gives 0. */
    ptc_tensor in[3] = {
        T(PTC_F32, 3, SIZES(1, 2, 1), VALS(0, 0)),
        T(PTC_F32, 3, SIZES(1, 2, 1), VALS(1, 3)),
        T(PTC_BOOL, 2, SIZES(2, 2), VALS(1, 1, 0, 0)),
    };
    result r = run("graph g(%q: f32[1,2,1] cpu, %v: f32[1,2,1] cpu, %m: bool[2,2] cpu) {\n"
                   "  %0 = scaled_dot_product_attention(%q, %q, %v) : f32[1,2,1]\n"
                   "  %1 = scaled_dot_product_attention(%q, %q, %v, is_causal=true) : f32[1,2,1]\n"
                   "  %2 = scaled_dot_product_attention(%q, %q, %v, %m) : f32[1,2,1]\n"
                   "  return (%0, %1, %2)\n}\n",
                   in, 3);
    ok(&r);
    EXPECT(&r.out[0], PTC_F32, 3, SIZES(1, 2, 1), VALS(2, 2));
    EXPECT(&r.out[1], PTC_F32, 3, SIZES(1, 2, 1), VALS(1, 2));
    EXPECT(&r.out[2], PTC_F32, 3, SIZES(1, 2, 1), VALS(2, 0));
    release(&r);

    /* float mask is added; scale multiplies q.k */
    ptc_tensor in2[4] = {
        T(PTC_F64, 2, SIZES(1, 1), VALS(1)),
        T(PTC_F64, 2, SIZES(2, 1), VALS(1, 2)),
        T(PTC_F64, 2, SIZES(2, 1), VALS(0, 1)),
        T(PTC_F64, 2, SIZES(1, 2), VALS(0.5, 0)),
    };
    r = run("graph g(%q: f64[1,1] cpu, %k: f64[2,1] cpu, %v: f64[2,1] cpu, %m: f64[1,2] cpu) {\n"
            "  %0 = scaled_dot_product_attention(%q, %k, %v, %m, scale=2.0) : f64[1,1]\n"
            "  return (%0)\n}\n",
            in2, 4);
    ok(&r);
    /* scores 2*1+0.5 = 2.5 and 2*2 = 4: weight of v=1 is e^4/(e^2.5+e^4) */
    EXPECT_NEAR(&r.out[0], PTC_F64, 2, SIZES(1, 1), VALS(exp(4.0) / (exp(2.5) + exp(4.0))), 1e-15);
    release(&r);
}
END_TEST

/* ---- convolution and pooling ------------------------------------------------------------ */

START_TEST(test_conv)
{
    ptc_tensor in[4] = {
        T(PTC_F32, 3, SIZES(1, 1, 4), VALS(1, 2, 3, 4)),
        T(PTC_F32, 3, SIZES(1, 1, 2), VALS(1, 10)),
        T(PTC_F32, 1, SIZES(1), VALS(100)),
        T(PTC_F32, 3, SIZES(1, 1, 2), VALS(1, 2)),
    };
    result r = run("graph g(%x: f32[1,1,4] cpu, %w: f32[1,1,2] cpu, %b: f32[1] cpu,"
                   " %y: f32[1,1,2] cpu) {\n"
                   "  %c = conv1d(%x, %w, %b) : f32[1,1,3]\n"
                   "  %s = conv1d(%x, %w, none, 2, 1) : f32[1,1,3]\n"
                   "  %d = conv1d(%x, %w, dilation=2) : f32[1,1,2]\n"
                   "  %t = convolution(%y, %w, none, [2], [0], [1], true, [1], 1) : f32[1,1,5]\n"
                   "  %tp = convolution(%y, %w, none, [1], [1], [1], true, [0], 1) : f32[1,1,1]\n"
                   "  return (%c, %s, %d, %t, %tp)\n}\n",
                   in, 4);
    ok(&r);
    EXPECT(&r.out[0], PTC_F32, 3, SIZES(1, 1, 3), VALS(121, 132, 143));
    /* padded [0,1,2,3,4,0], stride 2: windows (0,1) (2,3) (4,0) */
    EXPECT(&r.out[1], PTC_F32, 3, SIZES(1, 1, 3), VALS(10, 32, 4));
    EXPECT(&r.out[2], PTC_F32, 3, SIZES(1, 1, 2), VALS(31, 42));
    /* transposed, stride 2: y0*w at 0..1, y1*w at 2..3, output_padding adds 4 */
    EXPECT(&r.out[3], PTC_F32, 3, SIZES(1, 1, 5), VALS(1, 10, 2, 20, 0));
    /* full transposed result [1, 12, 20] cropped by padding 1 */
    EXPECT(&r.out[4], PTC_F32, 3, SIZES(1, 1, 1), VALS(12));
    release(&r);

    /* 2-d, groups=2 on an unbatched input: each channel with its own kernel */
    ptc_tensor in2[2] = {
        T(PTC_F64, 3, SIZES(2, 2, 2), VALS(1, 2, 3, 4, 5, 6, 7, 8)),
        T(PTC_F64, 4, SIZES(2, 1, 2, 2), VALS(1, 0, 0, 1, 0, 1, 1, 0)),
    };
    r = run("graph g(%x: f64[2,2,2] cpu, %w: f64[2,1,2,2] cpu) {\n"
            "  %0 = conv2d(%x, %w, groups=2) : f64[2,1,1]\n"
            "  %1 = conv2d(%x, %w, none, 1, 1, 1, 2) : f64[2,3,3]\n"
            "  return (%0, %1)\n}\n",
            in2, 2);
    ok(&r);
    EXPECT(&r.out[0], PTC_F64, 3, SIZES(2, 1, 1), VALS(5, 13));
    EXPECT(&r.out[1], PTC_F64, 3, SIZES(2, 3, 3),
           VALS(1, 2, 0, 3, 5, 2, 0, 3, 4, 0, 5, 6, 5, 13, 8, 7, 8, 0));
    release(&r);
}
END_TEST

START_TEST(test_pooling)
{
    ptc_tensor in[1] = {T(PTC_F32, 4, SIZES(1, 1, 3, 3), VALS(1, 2, 3, 4, 5, 6, 7, 8, NAN))};
    result r = run("graph g(%x: f32[1,1,3,3] cpu) {\n"
                   "  %v, %i = max_pool2d_with_indices(%x, [2, 2], [2, 2], [1, 1]) "
                   ": f32[1,1,2,2], i64[1,1,2,2]\n"
                   "  %c = max_pool2d(%x, [2, 2], ceil_mode=true) : f32[1,1,2,2]\n"
                   "  %a = avg_pool2d(%x, [2, 2], [1, 1], [1, 1]) : f32[1,1,4,4]\n"
                   "  %e = avg_pool2d(%x, [2, 2], [1, 1], [1, 1], count_include_pad=false)"
                   " : f32[1,1,4,4]\n"
                   "  %ad = adaptive_avg_pool2d(%x, [2, 2]) : f32[1,1,2,2]\n"
                   "  return (%v, %i, %c, %a, %e, %ad)\n}\n",
                   in, 1);
    ok(&r);
    EXPECT(&r.out[0], PTC_F32, 4, SIZES(1, 1, 2, 2), VALS(1, 3, 7, NAN));
    EXPECT(&r.out[1], PTC_I64, 4, SIZES(1, 1, 2, 2), VALS(0, 2, 6, 8));
    EXPECT(&r.out[2], PTC_F32, 4, SIZES(1, 1, 2, 2), VALS(5, 6, 8, NAN));
    EXPECT(&r.out[3], PTC_F32, 4, SIZES(1, 1, 4, 4),
           VALS(0.25, 0.75, 1.25, 0.75, 1.25, 3, 4, 2.25, 2.75, 6, NAN, NAN, 1.75, 3.75, NAN, NAN));
    EXPECT(&r.out[4], PTC_F32, 4, SIZES(1, 1, 4, 4),
           VALS(1, 1.5, 2.5, 3, 2.5, 3, 4, 4.5, 5.5, 6, NAN, NAN, 7, 7.5, NAN, NAN));
    /* windows [0,2) x [0,2) etc. (overlapping at the middle row/col) */
    EXPECT(&r.out[5], PTC_F32, 4, SIZES(1, 1, 2, 2), VALS(3, 4, 6, NAN));
    release(&r);

    ptc_tensor in2[1] = {T(PTC_F64, 3, SIZES(1, 2, 5), VALS(1, 2, 3, 4, 5, 6, 7, 8, 9, 10))};
    r = run("graph g(%x: f64[1,2,5] cpu) {\n"
            "  %ad = adaptive_avg_pool2d(%x, [1, 3]) : f64[1,1,3]\n"
            "  %dv = avg_pool2d(%x, [2, 2], divisor_override=3) : f64[1,1,2]\n"
            "  return (%ad, %dv)\n}\n",
            in2, 1);
    ok(&r);
    /* columns [0,2) [1,4) [3,5) over both rows */
    EXPECT_NEAR(&r.out[0], PTC_F64, 3, SIZES(1, 1, 3), VALS(4, 5.5, 7), 1e-15);
    EXPECT_NEAR(&r.out[1], PTC_F64, 3, SIZES(1, 1, 2), VALS(16.0 / 3, 24.0 / 3), 1e-15);
    release(&r);
}
END_TEST

/* ---- shapes and indexing -------------------------------------------------------------- */

START_TEST(test_views_are_copies)
{
    ptc_tensor in[1] = {T(PTC_I32, 2, SIZES(2, 3), VALS(0, 1, 2, 3, 4, 5))};
    result r = run("graph g(%x: i32[2,3] cpu) {\n"
                   "  %t = t(%x) : i32[3,2]\n"
                   "  %p = permute(%x, [1, 0]) : i32[3,2]\n"
                   "  %s = slice(%x, 1, -2, none, 2) : i32[2,1]\n"
                   "  %s2 = slice(%x, 1, 0, 100, 2) : i32[2,2]\n"
                   "  %se = select(%x, 1, -1) : i32[2]\n"
                   "  %n = narrow(%x, 1, 1, 2) : i32[2,2]\n"
                   "  %e = expand(%se, [2, 2]) : i32[2,2]\n"
                   "  %r = reshape(%t, [6]) : i32[6]\n"
                   "  %fl = flatten(%x) : i32[6]\n"
                   "  %u = unsqueeze(%se, 0) : i32[1,2]\n"
                   "  return (%t, %p, %s, %s2, %se, %n, %e, %r, %fl, %u)\n}\n",
                   in, 1);
    ok(&r);
    ptc_dtype I = PTC_I32;
    EXPECT(&r.out[0], I, 2, SIZES(3, 2), VALS(0, 3, 1, 4, 2, 5));
    EXPECT(&r.out[1], I, 2, SIZES(3, 2), VALS(0, 3, 1, 4, 2, 5));
    EXPECT(&r.out[2], I, 2, SIZES(2, 1), VALS(1, 4));
    EXPECT(&r.out[3], I, 2, SIZES(2, 2), VALS(0, 2, 3, 5));
    EXPECT(&r.out[4], I, 1, SIZES(2), VALS(2, 5));
    EXPECT(&r.out[5], I, 2, SIZES(2, 2), VALS(1, 2, 4, 5));
    EXPECT(&r.out[6], I, 2, SIZES(2, 2), VALS(2, 5, 2, 5));
    EXPECT(&r.out[7], I, 1, SIZES(6), VALS(0, 3, 1, 4, 2, 5));
    EXPECT(&r.out[8], I, 1, SIZES(6), VALS(0, 1, 2, 3, 4, 5));
    EXPECT(&r.out[9], I, 2, SIZES(1, 2), VALS(2, 5));
    release(&r);

    ptc_tensor in2[1] = {T(PTC_I32, 1, SIZES(3), VALS(0, 1, 2))};
    r = run("graph g(%x: i32[3] cpu) {\n"
            "  %s = select(%x, 0, 3) : i32[]\n"
            "  return (%s)\n}\n",
            in2, 1);
    expect_error(&r, "select(): index 3 out of range for tensor of size 3 at dimension 0");
}
END_TEST

START_TEST(test_prim_shapes_and_pads)
{
    ptc_tensor in[1] = {T(PTC_F32, 2, SIZES(2, 3), VALS(1, 2, 3, 4, 5, 6))};
    result r = run("graph g(%x: f32[2,3] cpu) {\n"
                   "  %b = prims.broadcast_in_dim(%x, [2, 2, 3], [0, 2]) : f32[2,2,3]\n"
                   "  %s = prims.slice(%x, [0, 1], [2, 3], [1, 2]) : f32[2,1]\n"
                   "  %p = prims.pad(%x, 0.5, [1, 0, 0, -1, 1, 1]) : f32[3,5]\n"
                   "  %c = constant_pad_nd(%x, [1, -1], 9) : f32[2,3]\n"
                   "  %rp = repeat(%x, [2, 1, 2]) : f32[2,2,6]\n"
                   "  %ro = roll(%x, [1], [1]) : f32[2,3]\n"
                   "  %rf = roll(%x, [-1]) : f32[2,3]\n"
                   "  %tu = triu(%x, 1) : f32[2,3]\n"
                   "  %tl = tril(%x) : f32[2,3]\n"
                   "  return (%b, %s, %p, %c, %rp, %ro, %rf, %tu, %tl)\n}\n",
                   in, 1);
    ok(&r);
    EXPECT(&r.out[0], PTC_F32, 3, SIZES(2, 2, 3), VALS(1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6));
    EXPECT(&r.out[1], PTC_F32, 2, SIZES(2, 1), VALS(2, 5));
    /* rows: one low pad row; cols: interior 1 gives (a, p, b, p, c), the low -1
     * drops a, the high 1 appends a pad */
    EXPECT(&r.out[2], PTC_F32, 2, SIZES(3, 5),
           VALS(0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 2, 0.5, 3, 0.5, 0.5, 5, 0.5, 6, 0.5));
    EXPECT(&r.out[3], PTC_F32, 2, SIZES(2, 3), VALS(9, 1, 2, 9, 4, 5));
    EXPECT(&r.out[4], PTC_F32, 3, SIZES(2, 2, 6),
           VALS(1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6, 1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6));
    EXPECT(&r.out[5], PTC_F32, 2, SIZES(2, 3), VALS(3, 1, 2, 6, 4, 5));
    EXPECT(&r.out[6], PTC_F32, 2, SIZES(2, 3), VALS(2, 3, 4, 5, 6, 1));
    EXPECT(&r.out[7], PTC_F32, 2, SIZES(2, 3), VALS(0, 2, 3, 0, 0, 6));
    EXPECT(&r.out[8], PTC_F32, 2, SIZES(2, 3), VALS(1, 0, 0, 4, 5, 0));
    release(&r);
}
END_TEST

START_TEST(test_cat_stack_split)
{
    ptc_tensor in[3] = {
        T(PTC_I64, 2, SIZES(1, 2), VALS(1, 2)),
        T(PTC_F32, 2, SIZES(2, 2), VALS(0.5, 1.5, 2.5, 3.5)),
        T(PTC_F32, 1, SIZES(0), VALS(0)),
    };
    result r = run("graph g(%a: i64[1,2] cpu, %b: f32[2,2] cpu, %e: f32[0] cpu) {\n"
                   "  %c = cat([%a, %e, %b]) : f32[3,2]\n"
                   "  %s = stack([%b, %b], 2) : f32[2,2,2]\n"
                   "  %p0, %p1 = split(%c, 2) : f32[2,2], f32[1,2]\n"
                   "  %q0, %q1 = split_with_sizes(%c, [1, 1], 1) : f32[3,1], f32[3,1]\n"
                   "  %u0, %u1 = unbind(%b, 1) : f32[2], f32[2]\n"
                   "  %h0, %h1 = chunk(%c, 2) : f32[2,2], f32[1,2]\n"
                   "  return (%c, %s, %p1, %q1, %u0, %h0)\n}\n",
                   in, 3);
    ok(&r);
    EXPECT(&r.out[0], PTC_F32, 2, SIZES(3, 2), VALS(1, 2, 0.5, 1.5, 2.5, 3.5));
    EXPECT(&r.out[1], PTC_F32, 3, SIZES(2, 2, 2), VALS(0.5, 0.5, 1.5, 1.5, 2.5, 2.5, 3.5, 3.5));
    EXPECT(&r.out[2], PTC_F32, 2, SIZES(1, 2), VALS(2.5, 3.5));
    EXPECT(&r.out[3], PTC_F32, 2, SIZES(3, 1), VALS(2, 1.5, 3.5));
    EXPECT(&r.out[4], PTC_F32, 1, SIZES(2), VALS(0.5, 2.5));
    EXPECT(&r.out[5], PTC_F32, 2, SIZES(2, 2), VALS(1, 2, 0.5, 1.5));
    release(&r);
}
END_TEST

START_TEST(test_unbind_many_outputs)
{
    /* more outputs than any fixed array would hold */
    ptc_buf b = {0};
    ptc_buf_puts(&b, "graph g(%x: i64[40] cpu) {\n  ");
    for (int i = 0; i < 40; i++)
        ptc_buf_printf(&b, "%s%%u%d", i ? ", " : "", i);
    ptc_buf_puts(&b, " = unbind(%x) : ");
    for (int i = 0; i < 40; i++)
        ptc_buf_printf(&b, "%si64[]", i ? ", " : "");
    ptc_buf_puts(&b, "\n  return (%u39, %u7)\n}\n");
    double vals[40];
    for (int i = 0; i < 40; i++)
        vals[i] = 100 + i;
    ptc_tensor in[1] = {T(PTC_I64, 1, SIZES(40), vals)};
    result r = run(b.data, in, 1);
    ptc_buf_free(&b);
    ok(&r);
    EXPECT(&r.out[0], PTC_I64, 0, SIZES(0), VALS(139));
    EXPECT(&r.out[1], PTC_I64, 0, SIZES(0), VALS(107));
    release(&r);
}
END_TEST

START_TEST(test_advanced_indexing)
{
    ptc_tensor in[4] = {
        T(PTC_I32, 3, SIZES(2, 3, 2), VALS(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)),
        T(PTC_I64, 1, SIZES(2), VALS(-1, 0)),
        T(PTC_I32, 2, SIZES(2, 1), VALS(1, 0)),
        T(PTC_BOOL, 2, SIZES(2, 3), VALS(1, 0, 0, 0, 0, 1)),
    };
    result r = run("graph g(%x: i32[2,3,2] cpu, %i: i64[2] cpu, %j: i32[2,1] cpu,"
                   " %m: bool[2,3] cpu) {\n"
                   "  %a = index(%x, [none, %i]) : i32[2,2,2]\n"
                   "  %b = index(%x, [%j, none, %i]) : i32[2,2,3]\n"
                   "  %c = index(%x, [none, %i, %i]) : i32[2,2]\n"
                   "  %d = index(%x, [%m]) : i32[2,2]\n"
                   "  return (%a, %b, %c, %d)\n}\n",
                   in, 4);
    ok(&r);
    /* x[:, [-1, 0]] */
    EXPECT(&r.out[0], PTC_I32, 3, SIZES(2, 2, 2), VALS(4, 5, 0, 1, 10, 11, 6, 7));
    /* non-adjacent: broadcast (2,2) dims first, then dim 1: x[j, :, i] */
    EXPECT(&r.out[1], PTC_I32, 3, SIZES(2, 2, 3), VALS(7, 9, 11, 6, 8, 10, 1, 3, 5, 0, 2, 4));
    /* adjacent dims 1 and 2 replaced in place: x[:, [-1,0], [-1,0]] */
    EXPECT(&r.out[2], PTC_I32, 2, SIZES(2, 2), VALS(5, 0, 11, 6));
    /* mask over dims 0,1: positions (0,0) and (1,2) */
    EXPECT(&r.out[3], PTC_I32, 2, SIZES(2, 2), VALS(0, 1, 10, 11));
    release(&r);

    ptc_tensor in2[2] = {
        T(PTC_F32, 1, SIZES(3), VALS(1, 2, 3)),
        T(PTC_I64, 1, SIZES(2), VALS(0, -4)),
    };
    r = run("graph g(%x: f32[3] cpu, %i: i64[2] cpu) {\n"
            "  %a = index(%x, [%i]) : f32[2]\n"
            "  return (%a)\n}\n",
            in2, 2);
    expect_error(&r, "index -4 is out of bounds for dimension 0 with size 3");
    ck_assert(r.err.has_node);
}
END_TEST

START_TEST(test_gather_scatter_embedding)
{
    ptc_tensor in[4] = {
        T(PTC_F32, 2, SIZES(2, 3), VALS(1, 2, 3, 4, 5, 6)),
        T(PTC_I64, 2, SIZES(2, 2), VALS(2, 0, 1, 1)),
        T(PTC_F32, 2, SIZES(2, 2), VALS(10, 20, 30, 40)),
        T(PTC_I64, 1, SIZES(3), VALS(1, 0, 1)),
    };
    result r = run("graph g(%x: f32[2,3] cpu, %i: i64[2,2] cpu, %s: f32[2,2] cpu,"
                   " %e: i64[3] cpu) {\n"
                   "  %g = gather(%x, 1, %i) : f32[2,2]\n"
                   "  %pg = prims.gather(%x, 1, %i) : f32[2,2]\n"
                   "  %sa = prims.scatter_add(%x, 1, %i, %s) : f32[2,3]\n"
                   "  %is = index_select(%x, 1, %e) : f32[2,3]\n"
                   "  %em = embedding(%x, %e) : f32[3,3]\n"
                   "  return (%g, %pg, %sa, %is, %em)\n}\n",
                   in, 4);
    ok(&r);
    EXPECT(&r.out[0], PTC_F32, 2, SIZES(2, 2), VALS(3, 1, 5, 5));
    EXPECT(&r.out[1], PTC_F32, 2, SIZES(2, 2), VALS(3, 1, 5, 5));
    EXPECT(&r.out[2], PTC_F32, 2, SIZES(2, 3), VALS(21, 2, 13, 4, 75, 6));
    EXPECT(&r.out[3], PTC_F32, 2, SIZES(2, 3), VALS(2, 1, 2, 5, 4, 5));
    EXPECT(&r.out[4], PTC_F32, 2, SIZES(3, 3), VALS(4, 5, 6, 1, 2, 3, 4, 5, 6));
    release(&r);

    ptc_tensor in2[2] = {
        T(PTC_F32, 2, SIZES(2, 3), VALS(1, 2, 3, 4, 5, 6)),
        T(PTC_I64, 1, SIZES(1), VALS(2)),
    };
    r = run("graph g(%w: f32[2,3] cpu, %i: i64[1] cpu) {\n"
            "  %e = embedding(%w, %i) : f32[1,3]\n"
            "  return (%e)\n}\n",
            in2, 2);
    expect_error(&r, "index out of range in self");
}
END_TEST

/* ---- creation and randomness ------------------------------------------------------- */

START_TEST(test_creation)
{
    result r = run("graph g() {\n"
                   "  %f = full([2], 2.7, dtype=i32) : i32[2]\n"
                   "  %o = ones([2], dtype=f16) : f16[2]\n"
                   "  %a = arange(0, 1, 0.25) : f32[4]\n"
                   "  %ai = arange(5, 0, -2) : i64[3]\n"
                   "  %io = prims.iota(3, start=4, step=-2, dtype=f32, device=cpu) : f32[3]\n"
                   "  %pf = prims.full([1], true, dtype=bool, device=cpu) : bool[1]\n"
                   "  return (%f, %o, %a, %ai, %io, %pf)\n}\n",
                   NULL, 0);
    ok(&r);
    EXPECT(&r.out[0], PTC_I32, 1, SIZES(2), VALS(2, 2));
    EXPECT(&r.out[1], PTC_F16, 1, SIZES(2), VALS(1, 1));
    EXPECT(&r.out[2], PTC_F32, 1, SIZES(4), VALS(0, 0.25, 0.5, 0.75));
    EXPECT(&r.out[3], PTC_I64, 1, SIZES(3), VALS(5, 3, 1));
    EXPECT(&r.out[4], PTC_F32, 1, SIZES(3), VALS(4, 2, 0));
    EXPECT(&r.out[5], PTC_BOOL, 1, SIZES(1), VALS(1));
    release(&r);
}
END_TEST

/* Mean and variance of a tensor's elements. */
static void moments(const ptc_tensor *t, double *mean, double *var)
{
    int64_t n = ptc_tensor_numel(t);
    double s = 0, q = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = ptc_load_f64((char *)t->data + i * (int64_t)ptc_dtype_size(t->dtype), t->dtype);
        s += v;
        q += v * v;
    }
    *mean = s / (double)n;
    *var = q / (double)n - *mean * *mean;
}

START_TEST(test_random_ops)
{
    const char *src =
        "graph g(%x: f32[100,100] cpu) {\n"
        "  %u = rand([100, 100], seed=3) : f32[100,100]\n"
        "  %n = prims.randn([100, 100], dtype=f64, device=cpu, seed=3) : f64[100,100]\n"
        "  %d = dropout(%x, 0.25, true, seed=9) : f32[100,100]\n"
        "  return (%u, %n, %d)\n}\n";
    double ones[1];
    (void)ones;
    ptc_tensor x;
    ptc_error err;
    ck_assert_int_eq(ptc_tensor_alloc(&x, PTC_F32, 2, SIZES(100, 100), &err), 0);
    for (int i = 0; i < 10000; i++)
        ((float *)x.data)[i] = 1;
    ptc_tensor in[1] = {x};
    ptc_tensor_retain(&x);
    result a = run(src, in, 1);
    ok(&a);
    double mean, var;
    moments(&a.out[0], &mean, &var);
    ck_assert_msg(fabs(mean - 0.5) < 0.01 && fabs(var - 1.0 / 12) < 0.005, "rand %g %g", mean, var);
    for (int i = 0; i < 10000; i++)
        ck_assert(((float *)a.out[0].data)[i] >= 0 && ((float *)a.out[0].data)[i] < 1);
    moments(&a.out[1], &mean, &var);
    ck_assert_msg(fabs(mean) < 0.03 && fabs(var - 1) < 0.05, "randn %g %g", mean, var);
    /* element 0 follows ops.h's formula exactly */
    uint64_t key = ptc_rng_key(3, 0);
    ck_assert(((float *)a.out[0].data)[0] == ptc_rng_uniform(key, 0));
    ck_assert(((double *)a.out[1].data)[7] == (double)ptc_rng_normal(key, 7));
    int kept = 0;
    for (int i = 0; i < 10000; i++) {
        float v = ((float *)a.out[2].data)[i];
        ck_assert(v == 0 || fabsf(v - 1.0f / 0.75f) < 1e-6f);
        kept += v != 0;
    }
    ck_assert_msg(abs(kept - 7500) < 200, "kept %d", kept);

    /* same seed and offset: same values; another offset: others */
    ptc_tensor_retain(&x);
    in[0] = x;
    result b = run(src, in, 1);
    ok(&b);
    ck_assert(memcmp(a.out[2].data, b.out[2].data, 40000) == 0);
    ptc_run_opts opts = {.rng_offset = 1};
    in[0] = x;
    result c = run_opts(src, in, 1, &opts);
    ok(&c);
    ck_assert(memcmp(a.out[2].data, c.out[2].data, 40000) != 0);
    ck_assert(memcmp(a.out[0].data, c.out[0].data, 40000) != 0);
    release(&a);
    release(&b);
    release(&c);
}
END_TEST

/* ---- the interpreter ---------------------------------------------------------------- */

static int count_nodes(void *ctx, const ptc_node *n, const ptc_tensor *outs)
{
    int *count = ctx;
    ck_assert_int_eq(outs[0].ndim, n->outs[0]->type.ndim);
    return ++*count == 2 ? 7 : 0; /* stop after the second node */
}

START_TEST(test_symbols_strides_zero_size)
{
    const char *src = "graph g(%x: f32[s0,2] cpu, %y: f32[2*s0] cpu) {\n"
                      "  %0 = reshape(%y, [s0, 2]) : f32[s0,2]\n"
                      "  %1 = add(%x, %0) : f32[s0,2]\n"
                      "  %2 = sum(%1, [0]) : f32[2]\n"
                      "  %3 = add(%2, s0) : f32[2]\n"
                      "  return (%1, %3, %x)\n}\n";
    /* s0 = 3, with x a transposed (non-contiguous) view */
    ptc_tensor in[2] = {
        transposed(T(PTC_F32, 2, SIZES(2, 3), VALS(1, 2, 3, 4, 5, 6))),
        T(PTC_F32, 1, SIZES(6), VALS(10, 20, 30, 40, 50, 60)),
    };
    void *xdata = in[0].data;
    result r = run(src, in, 2);
    ok(&r);
    EXPECT(&r.out[0], PTC_F32, 2, SIZES(3, 2), VALS(11, 24, 32, 45, 53, 66));
    EXPECT(&r.out[1], PTC_F32, 1, SIZES(2), VALS(99, 138));
    EXPECT(&r.out[2], PTC_F32, 2, SIZES(3, 2), VALS(1, 4, 2, 5, 3, 6));
    ck_assert_ptr_ne(r.out[2].data, xdata); /* a returned input is a fresh copy */
    release(&r);

    /* s0 = 0: zero-size tensors all the way through */
    ptc_tensor in0[2] = {T(PTC_F32, 2, SIZES(0, 2), VALS(0)), T(PTC_F32, 1, SIZES(0), VALS(0))};
    r = run(src, in0, 2);
    ok(&r);
    EXPECT(&r.out[0], PTC_F32, 2, SIZES(0, 2), VALS(0));
    EXPECT(&r.out[1], PTC_F32, 1, SIZES(2), VALS(0, 0));
    release(&r);

    /* inconsistent sizes: 2*s0 must be 6 */
    ptc_tensor bad[2] = {T(PTC_F32, 2, SIZES(3, 2), VALS(0, 0, 0, 0, 0, 0)),
                         T(PTC_F32, 1, SIZES(5), VALS(0, 0, 0, 0, 0))};
    r = run(src, bad, 2);
    expect_error(&r, "input %y: dim 0 is 5, expected 2*s0 (= 6)");
    ck_assert(!r.err.has_node);

    ptc_tensor wrong_dtype[2] = {T(PTC_F64, 2, SIZES(3, 2), VALS(0, 0, 0, 0, 0, 0)),
                                 T(PTC_F32, 1, SIZES(6), VALS(0, 0, 0, 0, 0, 0))};
    r = run(src, wrong_dtype, 2);
    expect_error(&r, "expected dtype f32, got f64");

    /* on_node sees every node's outputs and can stop the run */
    int count = 0;
    ptc_run_opts opts = {.on_node = count_nodes, .ctx = &count};
    ptc_tensor in3[2] = {T(PTC_F32, 2, SIZES(1, 2), VALS(0, 0)),
                         T(PTC_F32, 1, SIZES(2), VALS(0, 0))};
    r = run_opts(src, in3, 2, &opts);
    expect_error(&r, "on_node");
    ck_assert_int_eq(count, 2);
    ck_assert(r.err.has_node);
    ck_assert_int_eq(r.err.node_id, 1);
}
END_TEST

START_TEST(test_inconsistent_types_fail_cleanly)
{
    /* types no meta function would infer: the kernels refuse, never overrun */
    const char *srcs[] = {
        "graph g(%x: f32[3] cpu) {\n  %0 = exp(%x) : f32[2]\n  return (%0)\n}\n",
        "graph g(%x: f32[3] cpu) {\n  %0 = cumsum(%x, 0) : f32[5]\n  return (%0)\n}\n",
        "graph g(%x: f32[3] cpu) {\n  %0 = sum(%x, [0]) : f32[2]\n  return (%0)\n}\n",
        "graph g(%x: f32[2,3] cpu) {\n  %0 = mm(%x, %x) : f32[2,2]\n  return (%0)\n}\n",
        "graph g(%x: f32[3] cpu, %i: i64[2] cpu) {\n  %0 = index(%x, [%i]) : f32[3]\n"
        "  return (%0)\n}\n",
    };
    const char *want[] = {"internal: output 0 has sizes [2]", "internal: output 0 has sizes [5]",
                          "internal: output 0 holds 2", "mat1 and mat2 shapes cannot be multiplied",
                          "internal: output 0 has sizes [3], the kernel makes [2]"};
    for (int i = 0; i < 5; i++) {
        ptc_tensor in[2] = {
            T(PTC_F32, i == 3 ? 2 : 1, i == 3 ? SIZES(2, 3) : SIZES(3), VALS(1, 2, 3, 4, 5, 6)),
            T(PTC_I64, 1, SIZES(2), VALS(0, 1))};
        result r = run(srcs[i], in, i == 4 ? 2 : 1);
        if (i != 4)
            ptc_tensor_release(&in[1]);
        expect_error(&r, want[i]);
        ck_assert(r.err.has_node);
    }
}
END_TEST

/* A storage whose release is counted: intermediates die, outputs survive. */
static int released;
static void count_release(ptc_storage *s)
{
    released++;
    free(s->data);
    free(s);
}

START_TEST(test_inputs_keep_their_references)
{
    ptc_tensor x = T(PTC_F32, 1, SIZES(2), VALS(1, 2));
    x.storage->release = count_release;
    released = 0;
    ptc_module *m = parse("graph g(%x: f32[2] cpu) {\n"
                          "  %0 = neg(%x) : f32[2]\n"
                          "  %1 = exp(%0) : f32[2]\n"
                          "  return (%1, %0)\n}\n",
                          NULL);
    ck_assert_ptr_nonnull(m);
    ptc_tensor out[2];
    ptc_error err;
    ck_assert_int_eq(ptc_interp_run(m->graphs[0], &x, 1, out, NULL, &err), 0);
    ck_assert_int_eq(released, 0);
    ck_assert_int_eq(x.storage->refs, 1);
    ck_assert_int_eq(out[0].storage->refs, 1);
    ck_assert_int_eq(out[1].storage->refs, 1);
    EXPECT_NEAR(&out[0], PTC_F32, 1, SIZES(2), VALS(exp(-1.0), exp(-2.0)), 1e-7);
    ptc_tensor_release(&out[0]);
    ptc_tensor_release(&out[1]);
    ptc_tensor_release(&x);
    ck_assert_int_eq(released, 1);

    ck_assert_int_eq(ptc_interp_run(m->graphs[0], &x, 0, out, NULL, &err), -1);
    ck_assert(strstr(err.msg, "takes 1 inputs, got 0"));
    ptc_module_free(m);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ref");
    TCase *p = tcase_create("pointwise");
    tcase_add_test(p, test_add_broadcast_strided_alpha);
    tcase_add_test(p, test_int_division_semantics);
    tcase_add_test(p, test_int_division_by_zero_names_node);
    tcase_add_test(p, test_float_floor_div_and_remainder);
    tcase_add_test(p, test_integer_pow_and_wrapping);
    tcase_add_test(p, test_nan_semantics);
    tcase_add_test(p, test_round_half_even_and_decimals);
    tcase_add_test(p, test_half_precision_rounds_once);
    tcase_add_test(p, test_bitwise_logical_bool);
    tcase_add_test(p, test_compare_promotes_operands);
    tcase_add_test(p, test_where_masked_fill_to);
    tcase_add_test(p, test_unary_activations);
    suite_add_tcase(s, p);
    TCase *r = tcase_create("reductions");
    tcase_add_test(r, test_sum_mean_keepdim_strided);
    tcase_add_test(r, test_integer_and_bool_reductions);
    tcase_add_test(r, test_zero_size_reductions);
    tcase_add_test(r, test_var_std_argmax);
    tcase_add_test(r, test_cumsum_softmax);
    tcase_add_test(r, test_norms);
    suite_add_tcase(s, r);
    TCase *l = tcase_create("linalg_conv");
    tcase_add_test(l, test_matmul_family);
    tcase_add_test(l, test_sdpa);
    tcase_add_test(l, test_conv);
    tcase_add_test(l, test_pooling);
    suite_add_tcase(s, l);
    TCase *v = tcase_create("shapes");
    tcase_add_test(v, test_views_are_copies);
    tcase_add_test(v, test_prim_shapes_and_pads);
    tcase_add_test(v, test_cat_stack_split);
    tcase_add_test(v, test_unbind_many_outputs);
    tcase_add_test(v, test_advanced_indexing);
    tcase_add_test(v, test_gather_scatter_embedding);
    tcase_add_test(v, test_creation);
    tcase_add_test(v, test_random_ops);
    suite_add_tcase(s, v);
    TCase *i = tcase_create("interp");
    tcase_add_test(i, test_symbols_strides_zero_size);
    tcase_add_test(i, test_inputs_keep_their_references);
    tcase_add_test(i, test_inconsistent_types_fail_cleanly);
    suite_add_tcase(s, i);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
