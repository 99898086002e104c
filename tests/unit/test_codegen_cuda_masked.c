/* Masked contiguous loads in the vectorised form of CUDA pointwise kernels
 * (cuda/body.c, masked_contig_load), without a GPU: the copies that pad a
 * matmul operand's rows (lower/pad.c) mask their loads past the source's
 * extent, and those loads stay vector loads. Before, each was a
 * llvm.masked.gather, which NVPTX splits into a branch and an
 * ld.global.u16 per bf16 lane. Results are checked against torch on a GPU
 * in tests/python/test_gpu_masked_loads.py. */
#include <check.h>

#include "cuda_suite.h"

/* GPT-2's LM-head gradients: g (rows of 50257 bf16) is copied into rows of
 * 50264 (pad_rows: the mask o1 < 50257 differs between the lanes of the
 * last vector of a row) and W into 50264 rows of 768 (pad_zero_rows: the
 * mask o0 < 50257 is the same in every lane). */
static const char *LM_HEAD_GRADS =
    "# ptc ir v1\n"
    "graph f(%g: bf16[2048,50257] cpu, %w: bf16[50257,768] cpu, %h: bf16[2048,768] cpu) {\n"
    "  %0 = mm(%g, %w) : bf16[2048,768]\n"
    "  %1 = prims.permute(%g, dims=[1, 0]) : bf16[50257,2048]\n"
    "  %2 = mm(%1, %h) : bf16[50257,768]\n"
    "  return (%0, %2)\n"
    "}\n";

static const char *LM_HEAD_GRADS_F32 =
    "# ptc ir v1\n"
    "graph f(%g: f32[1024,50257] cpu, %w: f32[50257,768] cpu, %h: f32[1024,768] cpu) {\n"
    "  %0 = mm(%g, %w) : f32[1024,768]\n"
    "  %1 = prims.permute(%g, dims=[1, 0]) : f32[50257,1024]\n"
    "  %2 = mm(%1, %h) : f32[50257,768]\n"
    "  return (%0, %2)\n"
    "}\n";

/* The vectorised entry (name ending in _v) of kernel k of a program's PTX. */
static char *vector_entry_of(const char *ptx, int k)
{
    char *v = vector_entry_ptx(ptx, k);
    ck_assert_msg(v != NULL, "kernel %d has no vectorised entry", k);
    return v;
}

/* The program compiled with a launch per kernel (PTC_CUDA_COMBOS=0): the
 * two pad kernels write arena temporaries and are independent, so by
 * default they run as one combination, whose module holds their code. */
static ptc_program *compile_alone(const char *text, int sm)
{
    setenv("PTC_CUDA_COMBOS", "0", 1);
    ptc_program *p = compile_text(text, sm);
    unsetenv("PTC_CUDA_COMBOS");
    return p;
}

static int narrow_loads(const char *ptx)
{
    return count(ptx, "ld.global.u16") + count(ptx, "ld.global.nc.u16");
}

/* A mask the same in every lane branches once around one 16-byte load of
 * 8 bf16 lanes: no 16-bit loads are left. */
START_TEST(a_mask_uniform_over_the_lanes_is_one_wide_load)
{
    int sms[2] = {80, 90};
    for (int i = 0; i < 2; i++) {
        ptc_program *p = compile_alone(LM_HEAD_GRADS, sms[i]);
        const char *ptx = ptc_program_text(p, "ptx");
        ck_assert_msg(strstr(ptx, "k1_pad_zero_rows") != NULL, "%.400s", ptx);
        char *v = vector_entry_of(ptx, 1);
        ck_assert_int_eq(count(v, "ld.global.nc.v4.u32"), 1);
        ck_assert_int_eq(count(v, "st.global.v4.u32"), 1);
        ck_assert_msg(narrow_loads(v) == 0, "%s", v);
        free(v);
        assemble_all(ptx, sms[i]);
        ptc_program_release(p);
    }
    /* f32 lanes (LLVM's own vector load), and the LLVM verifier's check of
     * the join: f32 vectors are not joined as words */
    ptc_program *p = compile_alone(LM_HEAD_GRADS_F32, 90);
    char *v = vector_entry_of(ptc_program_text(p, "ptx"), 1);
    ck_assert_int_eq(count(v, "ld.global.nc.v4.f32"), 1);
    ck_assert_msg(count(v, "ld.global.f32") + count(v, "ld.global.nc.f32") == 0, "%s", v);
    free(v);
    ptc_program_release(p);
    /* combined (the default), the launch's vectorised entry keeps the wide
       load and the two members' wide stores */
    p = compile_text(LM_HEAD_GRADS, 90);
    char *combo = module_ptx(ptc_program_text(p, "ptx"), "; ptc combination 0, one launch");
    ck_assert_msg(combo && strstr(combo, "_v("), "%s", ptc_program_text(p, "kernels"));
    ck_assert_int_eq(count(strstr(combo, "_v("), "ld.global.nc.v4.u32"), 1);
    ck_assert_int_eq(count(strstr(combo, "_v("), "st.global.v4.u32"), 2);
    free(combo);
    ptc_program_release(p);
}
END_TEST

/* A mask that differs between lanes: where all 8 lanes are inside the
 * source's row, one load of the 8 lanes with no branch between them (g's
 * rows of 50257 are not 16-byte aligned, so 8 ld.global.nc.u16 here); only
 * the vector straddling the row's end goes lane by lane, 8 loads behind 8
 * branches. */
START_TEST(a_mask_differing_between_lanes_loads_whole_vectors_unmasked)
{
    ptc_program *p = compile_alone(LM_HEAD_GRADS, 90);
    const char *ptx = ptc_program_text(p, "ptx");
    ck_assert_msg(strstr(ptx, "k0_pad_rows") != NULL, "%.400s", ptx);
    char *v = vector_entry_of(ptx, 0);
    ck_assert_int_eq(count(v, "ld.global.nc.u16"), 8);
    ck_assert_int_eq(count(v, "ld.global.u16"), 8);
    /* the unmasked path's 8 loads are consecutive, unbranched */
    const char *first = strstr(v, "ld.global.nc.u16");
    const char *last = first;
    for (int k = 1; k < 8; k++)
        last = strstr(last + 1, "ld.global.nc.u16");
    char *between = strndup(first, (size_t)(last - first));
    ck_assert_msg(!strstr(between, "bra") && !strstr(between, "$L__"), "%s", v);
    free(between);
    ck_assert_int_eq(count(v, "st.global.v4.u32"), 1);
    free(v);
    assemble_all(ptx, 90);
    ptc_program_release(p);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {a_mask_uniform_over_the_lanes_is_one_wide_load,
                            a_mask_differing_between_lanes_loads_whole_vectors_unmasked};
    return run_cuda_suite("codegen_cuda_masked", tests, sizeof tests / sizeof *tests);
}
