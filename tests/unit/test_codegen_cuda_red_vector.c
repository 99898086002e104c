/* The CUDA code generator's vectorised reductions without a GPU (plan.c's
 * plan_red_vec, reduce.c's red_loop): which reduction kernels get a
 * vectorised entry whose loop loads 16-byte vectors along the reduction
 * (BatchNorm statistics and its backward's sums, long row sums, argmax),
 * which keep the scalar form (a misaligned or strided read, an odd length,
 * PTC_CUDA_RED_VECTOR=0), PTX that ptxas accepts (where the CUDA toolkit is
 * installed), and the launch against the stand-in libcuda: the vectorised
 * entry on aligned arguments with the scalar entry's grid, the scalar entry
 * on a misaligned one. Results against torch on a GPU:
 * tests/python/test_gpu_split_rows.py. */
#include <check.h>

#include "cuda_suite.h"
#include "runtime/runtime.h"

#ifdef PTC_FAKE_CUDA
#include "fake_cuda.h"
#endif

static const struct {
    const char *params, *body;
    int vec;          /* the vectorised form's W (1: none) */
    const char *load; /* its loop's vector load */
} CASES[] = {
    /* BatchNorm training statistics, resnet50's first layer (Welford, a
       block a channel) and its backward's two channel sums (split rows) */
    {"%x: bf16[32,64,112,112] cpu",
     "  %f = to(%x, f32) : f32[32,64,112,112]\n"
     "  %v, %m = prims.var_mean(%f, [0, 2, 3], 0.0) : f32[64], f32[64]\n  return (%v, %m)",
     8, "ld.global.nc.v4.u32"},
    {"%g: bf16[32,64,112,112] cpu, %x: bf16[32,64,112,112] cpu",
     "  %f = to(%g, f32) : f32[32,64,112,112]\n  %y = to(%x, f32) : f32[32,64,112,112]\n"
     "  %p = mul(%f, %y) : f32[32,64,112,112]\n  %s = sum(%f, [0, 2, 3]) : f32[64]\n"
     "  %t = sum(%p, [0, 2, 3]) : f32[64]\n  return (%s, %t)",
     8, "ld.global.nc.v4.u32"},
    {"%x: f32[3,1000000] cpu", "  %s = sum(%x, [1]) : f32[3]\n  return (%s)", 4,
     "ld.global.nc.v4.f32"},
    {"%x: bf16[1,4194304] cpu",
     "  %f = to(%x, f32) : f32[1,4194304]\n  %s = sum(%f, [1]) : f32[1]\n  return (%s)", 8,
     "ld.global.nc.v4.u32"},
    {"%x: f32[64,40960] cpu", "  %s = sum(%x, [1]) : f32[64]\n  return (%s)", 4,
     "ld.global.nc.v4.f32"},
    {"%x: f32[16,100000] cpu", "  %a = argmax(%x, 1) : i64[16]\n  return (%a)", 4,
     "ld.global.nc.v4.f32"},
    /* the same sum over a slice starting one element in (a misaligned
       read), over a transposed view (a strided read), over an odd length */
    {"%x: f32[64,40961] cpu",
     "  %v = slice(%x, 1, 1, 40961) : f32[64,40960]\n  %s = sum(%v, [1]) : f32[64]\n"
     "  return (%s)",
     1, NULL},
    {"%x: f32[40960,64] cpu",
     "  %v = transpose(%x, 0, 1) : f32[64,40960]\n  %s = sum(%v, [1]) : f32[64]\n  return (%s)", 1,
     NULL},
    {"%x: bf16[7,999983] cpu",
     "  %f = to(%x, f32) : f32[7,999983]\n  %s = sum(%f, [1]) : f32[7]\n  return (%s)", 1, NULL},
};

static char *text_of(size_t i)
{
    static char text[1024];
    snprintf(text, sizeof text, "# ptc ir v1\ngraph f(%s) {\n%s\n}\n", CASES[i].params,
             CASES[i].body);
    return text;
}

/* The vectorised entry of a code's PTX, to the next entry or the end. */
static char *vector_entry_of(const ptc_cuda_code *code)
{
    const char *at = strstr(strstr(code->ptx, code->ventry), "(");
    const char *end = strstr(at, ".visible .entry");
    return strndup(at, end ? (size_t)(end - at) : strlen(at));
}

/* Each case's vectorised entry loads 16-byte vectors in its loop (and its
 * scalar entry none); the others have no vectorised entry. */
START_TEST(reductions_load_vectors_where_they_can)
{
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        ptc_cuda_code code;
        codegen_kernel0(text_of(i), &code);
        ck_assert_msg(code.launch.vec == CASES[i].vec, "case %zu: vec %d, want %d", i,
                      code.launch.vec, CASES[i].vec);
        ck_assert_msg((code.ventry[0] != 0) == (CASES[i].vec > 1), "case %zu: entry '%s'", i,
                      code.ventry);
        if (CASES[i].vec > 1) {
            ck_assert(code.launch.vec_rows); /* a team per row, as the scalar entry */
            char *v = vector_entry_of(&code);
            ck_assert_msg(count(v, CASES[i].load) >= 1, "case %zu:\n%.4000s", i, v);
            free(v);
            assemble(code.ptx, 90);
        } else {
            ck_assert_msg(!strstr(code.ptx, "ld.global.nc.v"), "case %zu:\n%.4000s", i, code.ptx);
        }
        ptc_cuda_code_free(&code);
    }
}
END_TEST

/* BatchNorm statistics' vectorised entry loads 4 vectors an unrolled
 * iteration and one in the rest, PTC_CUDA_RED_VECTOR_UNROLL=N N and one. */
START_TEST(unrolled_vectors_follow_the_variable)
{
    for (int unroll = 0; unroll <= 2; unroll++) {
        char n[8];
        snprintf(n, sizeof n, "%d", unroll);
        if (unroll)
            setenv("PTC_CUDA_RED_VECTOR_UNROLL", n, 1);
        ptc_cuda_code code;
        codegen_kernel0(text_of(0), &code);
        unsetenv("PTC_CUDA_RED_VECTOR_UNROLL");
        char *v = vector_entry_of(&code);
        int want = (unroll ? unroll : 4) + 1;
        ck_assert_msg(count(v, "ld.global.nc.v4.u32") == want, "unroll %d: %d loads, want %d",
                      unroll, count(v, "ld.global.nc.v4.u32"), want);
        free(v);
        ptc_cuda_code_free(&code);
    }
}
END_TEST

/* PTC_CUDA_RED_VECTOR=0 keeps BatchNorm's statistics scalar: 2-byte loads. */
START_TEST(red_vector_off_keeps_scalar_loads)
{
    setenv("PTC_CUDA_RED_VECTOR", "0", 1);
    ptc_cuda_code code;
    codegen_kernel0(text_of(0), &code);
    unsetenv("PTC_CUDA_RED_VECTOR");
    ck_assert_int_eq(code.launch.vec, 1);
    ck_assert(!strstr(code.ptx, "ld.global.nc.v"));
    ck_assert_int_ge(count(code.ptx, "ld.global.nc.u16"), 8);
    ptc_cuda_code_free(&code);
}
END_TEST

/* A split row sum of int8 (8 bytes a vector) runs its vectorised entry on
 * an aligned argument, over the same 64 rows x 4 blocks as the scalar one
 * (a team a row, not a thread per 8 rows), and the scalar entry on an
 * argument one byte off. */
START_TEST(vector_entry_runs_where_aligned)
{
#ifdef PTC_FAKE_CUDA
    use_fake_cuda();
    ptc_error err;
    ptc_program *p = compile_text("# ptc ir v1\ngraph f(%x: i8[64,401408] cuda) {\n"
                                  "  %0 = sum(%x, [1]) : i64[64]\n  return (%0)\n}\n",
                                  0); /* the device's */
    _Alignas(16) static int8_t bytes[64];
    for (int off = 0; off < 2; off++) {
        ptc_tensor x = fake_device_i8(64, 401408), out;
        x.data = bytes + off;
        int first = fake_nlaunched();
        ck_assert_msg(ptc_program_run(p, &x, 1, &out, NULL, 0, &err) == 0, "%s", err.msg);
        ptc_tensor_release(&out);
        ck_assert_int_eq(fake_nlaunched(), first + 1);
        const char *entry = fake_launched(first);
        bool vector = strlen(entry) > 2 && strcmp(entry + strlen(entry) - 2, "_v") == 0;
        ck_assert_msg(vector == (off == 0), "offset %d: ran %s", off, entry);
        ck_assert_int_eq(fake_grid(first, 0), 64 * 4);
        ck_assert_int_eq(fake_grid(first, 1), 1024);
    }
    ptc_program_release(p);
#endif
}
END_TEST

int main(void)
{
    const TTest *tests[] = {reductions_load_vectors_where_they_can,
                            unrolled_vectors_follow_the_variable, red_vector_off_keeps_scalar_loads,
                            vector_entry_runs_where_aligned};
    return run_cuda_suite("codegen_cuda_red_vector", tests, sizeof tests / sizeof *tests);
}
