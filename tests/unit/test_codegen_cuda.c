/* The CUDA backend without a GPU: PTX generation for sm_80 and sm_90 (an
 * explicit target needs no device), the shape of the generated kernels
 * (vectorised 16-byte accesses, warp shuffles for rows, block barriers for
 * long reductions, a thread per element for tiny ones), the PTX disk cache,
 * trace files, and the CUDA path reporting itself unavailable, with the
 * reason, when there is no driver while the CPU backend keeps working. When
 * the CUDA toolkit's ptxas is installed (PTC_PTXAS or /usr/local/cuda/bin)
 * every module is also assembled for its target. Kernels over symbolic sizes
 * are planned in forms (one team size each) that the run picks from, with
 * 32-bit indices and a 64-bit variant for calls past 2^30 elements; which
 * one a call runs is checked against a stand-in driver (fake_cuda.c). */
#include "codegen/codegen.h"
#include "passes/passes.h"
#include "pipeline/pipeline.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda_suite.h"

/* What the text of a kernel that runs only in its horizontal combination
 * says in place of its own PTX. */
static const char *COMBINED_ONLY = "// runs only in its horizontal combination";

static const char *MODEL = "# ptc ir v1\n"
                           "graph forward(%x: f32[4096,1024] cpu, %w: f32[1024] cpu, %b: f32[1024] "
                           "cpu, %h: bf16[4096,1024] cpu) {\n"
                           "  %s = softmax(%x, -1) : f32[4096,1024]\n"
                           "  %l = layer_norm(%x, [1024], %w, %b) : f32[4096,1024]\n"
                           "  %g = gelu(%l) : f32[4096,1024]\n"
                           "  %hf = to(%h, f32) : f32[4096,1024]\n"
                           "  %m = mul(%g, %hf) : f32[4096,1024]\n"
                           "  %o = to(%m, bf16) : bf16[4096,1024]\n"
                           "  %t = sum(%x) : f32[]\n"
                           "  %c = sum(%x, [1]) : f32[4096]\n"
                           "  %p = amax(%x, [0]) : f32[1024]\n"
                           "  return (%s, %o, %t, %c, %p)\n"
                           "}\n";

START_TEST(ptx_for_sm80_and_sm90)
{
    ptc_module *m = parse(MODEL);
    int sms[2] = {80, 90};
    for (int i = 0; i < 2; i++) {
        ptc_program *p = compile_ptx(m->graphs[0], sms[i], true, NULL);
        const char *ptx = ptc_program_text(p, "ptx");
        ck_assert(ptx != NULL);
        ck_assert(ptc_program_text(p, "llvm") == NULL);
        char target[32];
        snprintf(target, sizeof target, ".target sm_%d", sms[i]);
        ptc_program_info info;
        ptc_program_get_info(p, &info);
        ck_assert_int_ge(info.nkernels, 3);
        ck_assert_int_eq(count(ptx, "; ptc kernel "), info.nkernels);
        /* a module per horizontal combination (one launch) and per kernel
         * outside one */
        int combined = count(ptx, COMBINED_ONLY);
        ck_assert_int_eq(count(ptx, target),
                         info.nkernels - combined + count(ptx, "; ptc combination "));
        ck_assert_int_eq(info.ncached, 0);
        /* 16-byte loads and stores, warp shuffles, bf16 conversions in one instruction */
        ck_assert_int_gt(count(ptx, "ld.global.nc.v4.f32"), 0);
        ck_assert_int_gt(count(ptx, "shfl.sync.bfly"), 0);
        ck_assert_int_gt(count(ptx, "cvt.rn.bf16.f32"), 0);
        for (int k = 0; k < info.nkernels; k++) {
            char *one = kernel_ptx(ptx, k);
            ck_assert(one != NULL);
            ck_assert(strstr(one, COMBINED_ONLY) ||
                      (count(one, ".visible .entry ptc_") >= 1 && count(one, ".maxntid") >= 1));
            free(one);
        }
        assemble_all(ptx, sms[i]);
        ptc_program_release(p);
    }
    ptc_module_free(m);
}
END_TEST

/* The vectorised form of a bf16 or int8 pointwise kernel moves its lanes in
 * one access, ld.global.v4.u32 / st.global.v4.u32 for 8 bf16 lanes as for 4
 * f32: LLVM 16's NVPTX split 8 bf16 lanes into two 8-byte ld.global.v4.u16
 * (89% of copy bandwidth on the H100 for x*sigmoid(x)+y in bf16, against 96%
 * in f32). */
START_TEST(narrow_lanes_move_16_bytes_per_access)
{
    ptc_module *m = parse("# ptc ir v1\n"
                          "graph f(%x: bf16[1048576] cpu, %y: bf16[1048576] cpu, "
                          "%c: i8[1048576] cpu) {\n"
                          "  %s = sigmoid(%x) : bf16[1048576]\n"
                          "  %m = mul(%x, %s) : bf16[1048576]\n"
                          "  %o = add(%m, %y) : bf16[1048576]\n"
                          "  %d = add(%c, %c) : i8[1048576]\n"
                          "  return (%o, %d)\n"
                          "}\n");
    int sms[2] = {80, 90};
    for (int i = 0; i < 2; i++) {
        ptc_program *p = compile_ptx(m->graphs[0], sms[i], true, NULL);
        const char *ptx = ptc_program_text(p, "ptx");
        ck_assert_int_ge(count(ptx, "ld.global.nc.v4.u32"), 2); /* bf16: 8 lanes */
        ck_assert_int_ge(count(ptx, "st.global.v4.u32"), 1);
        ck_assert_int_ge(count(ptx, "ld.global.nc.v2.u32"), 1); /* int8: 8 lanes */
        ck_assert_int_ge(count(ptx, "st.global.v2.u32"), 1);
        ck_assert_int_eq(count(ptx, ".v4.u16"), 0);
        ck_assert_int_eq(count(ptx, ".v4.u8"), 0);
        assemble_all(ptx, sms[i]);
        ptc_program_release(p);
    }
    ptc_module_free(m);
}
END_TEST

/* The PTX of kernel 0's vectorised entry (its name ends in _v), or NULL. */
static char *vector_entry(const ptc_program *p)
{
    return vector_entry_ptx(ptc_program_text(p, "ptx"), 0);
}

/* Assembles kernel 0's module with ptxas where it is installed. */
static void assemble_kernel0(const ptc_program *p, int sm)
{
    char *one = kernel_ptx(ptc_program_text(p, "ptx"), 0);
    assemble(one, sm);
    free(one);
}

/* f16 / bf16 values are stored two lanes per cvt.rn.{bf16x2,f16x2}.f32,
 * converted from the f32 value before the cast's rounding (rounding twice is
 * rounding once). gelu(x + b) in bf16 (x + b rounded as eager rounds it),
 * its sum in f32 (PTC_CUDA_PACKED_ADD=0, see the next test): 8 roundings and
 * 4 packing conversions for 8 lanes, where each lane was rounded, converted
 * again and packed with shifts (24 conversions). */
START_TEST(half_lanes_are_stored_in_pairs_from_one_rounding)
{
    static const char *GELU = "# ptc ir v1\n"
                              "graph f(%x: bf16[256,4096] cpu, %b: bf16[4096] cpu) {\n"
                              "  %s = add(%x, %b) : bf16[256,4096]\n"
                              "  %g = gelu(%s) : bf16[256,4096]\n"
                              "  return (%g)\n"
                              "}\n";
    static const char *ADD16 = "# ptc ir v1\n"
                               "graph f(%x: f16[65536] cpu, %y: f16[65536] cpu) {\n"
                               "  %s = add(%x, %y) : f16[65536]\n"
                               "  return (%s)\n"
                               "}\n";
    int sms[2] = {80, 90};
    for (int i = 0; i < 2; i++) {
        setenv("PTC_CUDA_PACKED_ADD", "0", 1);
        ptc_program *p = compile_text(GELU, sms[i]);
        unsetenv("PTC_CUDA_PACKED_ADD");
        char *v = vector_entry(p);
        ck_assert(v != NULL);
        ck_assert_int_eq(count(v, "cvt.rn.bf16.f32"), 0);
        ck_assert_int_eq(count(v, "cvt.rn.bf16x2.f32"), 8 + 4);
        ck_assert_int_eq(count(v, "st.global.v4.u32"), 1);
        free(v);
        assemble_kernel0(p, sms[i]);
        ptc_program_release(p);
        p = compile_text(ADD16, sms[i]);
        v = vector_entry(p);
        ck_assert(v != NULL);
        ck_assert_int_eq(count(v, "cvt.rn.f16.f32"), 0); /* the rounding is dead */
        ck_assert_int_eq(count(v, "cvt.rn.f16x2.f32"), 4);
        free(v);
        assemble_kernel0(p, sms[i]);
        ptc_program_release(p);
    }
}
END_TEST

/* A bf16 sum rounded to bf16 (torch adds in f32 and rounds) is one
 * fma.rn.bf16x2 (x * 1 + y) per two lanes on sm_80+: the same value (f32
 * holds more than 2 * 8 + 2 bits, so rounding twice is rounding once) in one
 * instruction where unpacking, adding and rounding took six. gelu(x + b):
 * 4 for 8 lanes, and only the store's 4 packing conversions left; another
 * entry name under PTC_CUDA_PACKED_ADD=0 (the f32 form); none on sm_70 or
 * in the scalar entry. */
START_TEST(half_sums_are_one_fma_per_pair)
{
    static const char *GELU = "# ptc ir v1\n"
                              "graph f(%x: bf16[256,4096] cpu, %b: bf16[4096] cpu) {\n"
                              "  %s = add(%x, %b) : bf16[256,4096]\n"
                              "  %g = gelu(%s) : bf16[256,4096]\n"
                              "  return (%g)\n"
                              "}\n";
    int sms[2] = {80, 90};
    for (int i = 0; i < 2; i++) {
        ptc_program *p = compile_text(GELU, sms[i]);
        char *v = vector_entry(p);
        ck_assert(v != NULL);
        ck_assert_int_eq(count(v, "fma.rn.bf16x2"), 4);
        ck_assert_int_eq(count(v, "cvt.rn.bf16x2.f32"), 4);
        free(v);
        char *one = kernel_ptx(ptc_program_text(p, "ptx"), 0);
        ck_assert_int_eq(count(one, "fma.rn.bf16x2"), 4); /* the scalar entry has none */
        free(one);
        assemble_kernel0(p, sms[i]);
        ptc_program_release(p);
    }
    ptc_program *p = compile_text(GELU, 70);
    char *one = kernel_ptx(ptc_program_text(p, "ptx"), 0);
    ck_assert_int_eq(count(one, "fma.rn.bf16x2"), 0);
    free(one);
    ptc_program_release(p);
    char *names[2];
    for (int i = 0; i < 2; i++) {
        if (i)
            setenv("PTC_CUDA_PACKED_ADD", "0", 1);
        p = compile_text(GELU, 90);
        unsetenv("PTC_CUDA_PACKED_ADD");
        one = kernel_ptx(ptc_program_text(p, "ptx"), 0);
        ck_assert_int_eq(count(one, "fma.rn.bf16x2"), (i ? 0 : 4));
        const char *entry = strstr(one, ".entry ") + 7;
        names[i] = strndup(entry, strcspn(entry, "("));
        free(one);
        ptc_program_release(p);
    }
    ck_assert_str_ne(names[0], names[1]);
    free(names[0]);
    free(names[1]);
}
END_TEST

/* f32 erf is two fitted polynomials and one ex2.approx per element, with no
 * reciprocal: gelu's bf16 kernel was issue-bound on the old erf (a Taylor
 * series, an erfc fit through rcp.approx and a corrected exp per element). */
START_TEST(erf_takes_one_ex2_and_no_reciprocal)
{
    ptc_program *p = compile_text("# ptc ir v1\n"
                                  "graph f(%x: f32[1048576] cpu) {\n"
                                  "  %e = erf(%x) : f32[1048576]\n"
                                  "  return (%e)\n"
                                  "}\n",
                                  90);
    char *v = vector_entry(p);
    ck_assert(v != NULL);
    ck_assert_int_eq(count(v, "ex2.approx"), 4); /* 4 f32 lanes */
    ck_assert_int_eq(count(v, "rcp."), 0);
    ck_assert_int_eq(count(v, "div."), 0);
    free(v);
    assemble_kernel0(p, 90);
    ptc_program_release(p);
}
END_TEST

/* gelu's 1 + erf(z) in a kernel that stores bf16 is erfc(-z): one
 * polynomial of degree 9 and one ex2 per element (10 FMAs a lane, erf's two
 * polynomials took 14, and a select between them), issue-bound bf16 gelu
 * having most of its instructions in erf. An f32 kernel keeps erf (1.5 ulp
 * against the erfc form's 50); PTC_CUDA_ERFC=0 or 2 gives every kernel the
 * one or the other, as another plan, so another cache key and entry. */
START_TEST(half_gelu_is_one_polynomial_of_erfc)
{
    static const char *GELU = "# ptc ir v1\n"
                              "graph f(%%x: %s[256,4096] cpu, %%b: %s[4096] cpu) {\n"
                              "  %%s = add(%%x, %%b) : %s[256,4096]\n"
                              "  %%g = gelu(%%s) : %s[256,4096]\n"
                              "  return (%%g)\n"
                              "}\n";
    static const struct {
        const char *dt, *env;
        int lanes, fmas_per_lane;
    } cases[] = {
        {"bf16", NULL, 8, 10},
        {"f32", NULL, 4, 14},
        {"bf16", "0", 8, 14},
        {"f32", "2", 4, 10},
    };
    char *names[4];
    for (int i = 0; i < 4; i++) {
        char text[512];
        const char *dt = cases[i].dt;
        snprintf(text, sizeof text, GELU, dt, dt, dt, dt);
        if (cases[i].env)
            setenv("PTC_CUDA_ERFC", cases[i].env, 1);
        ptc_program *p = compile_text(text, 90);
        unsetenv("PTC_CUDA_ERFC");
        char *v = vector_entry(p);
        ck_assert(v != NULL);
        ck_assert_int_eq(count(v, "ex2.approx"), cases[i].lanes);
        ck_assert_msg(count(v, "fma.rn.f32") == cases[i].lanes * cases[i].fmas_per_lane,
                      "%s, PTC_CUDA_ERFC=%s: %d FMAs for %d lanes", dt,
                      cases[i].env ? cases[i].env : "(unset)", count(v, "fma.rn.f32"),
                      cases[i].lanes);
        free(v);
        char *one = kernel_ptx(ptc_program_text(p, "ptx"), 0);
        const char *entry = strstr(one, ".entry ") + 7;
        names[i] = strndup(entry, strcspn(entry, "("));
        free(one);
        assemble_kernel0(p, 90);
        ptc_program_release(p);
    }
    ck_assert_str_ne(names[0], names[2]); /* bf16: the variable changed the key */
    ck_assert_str_ne(names[1], names[3]); /* f32 */
    for (int i = 0; i < 4; i++)
        free(names[i]);
}
END_TEST

/* A division by a value that is the same in every lane (softmax's sum) is a
 * multiplication by its reciprocal, as on the CPU: the IEEE division per
 * element (div.rn.f32, a slow path and a call) made softmax issue-bound in
 * bf16. The reciprocal itself stays IEEE. */
START_TEST(division_by_a_row_value_is_a_multiplication)
{
    ptc_program *p = compile_text("# ptc ir v1\n"
                                  "graph f(%x: f32[4096,1024] cpu) {\n"
                                  "  %s = softmax(%x, -1) : f32[4096,1024]\n"
                                  "  return (%s)\n"
                                  "}\n",
                                  90);
    char *v = vector_entry(p);
    ck_assert(v != NULL);
    ck_assert_int_eq(count(v, "div.rn.f32"), 0);
    ck_assert_int_gt(count(v, "rcp.rn.f32"), 0);
    free(v);
    assemble_kernel0(p, 90);
    ptc_program_release(p);
}
END_TEST

/* Where `what` first occurs in text (its length if nowhere). */
static size_t first_at(const char *text, const char *what)
{
    const char *p = strstr(text, what);
    return p ? (size_t)(p - text) : strlen(text);
}

/* Where `what` last occurs in text (0 if nowhere). */
static size_t last_at(const char *text, const char *what)
{
    size_t at = 0;
    for (const char *p = text; (p = strstr(p, what)); p++)
        at = (size_t)(p - text);
    return at;
}

/* A flat kernel's loads are issued together before its arithmetic: the
 * sigmoid's IEEE reciprocal has a slow path that ptxas does not move a load
 * above, and x*sigmoid(x)+y in bf16 read y only after it, a second memory
 * latency per element. */
START_TEST(flat_loads_come_before_the_arithmetic)
{
    ptc_program *p = compile_text("# ptc ir v1\n"
                                  "graph f(%x: bf16[1048576] cpu, %y: bf16[1048576] cpu) {\n"
                                  "  %s = sigmoid(%x) : bf16[1048576]\n"
                                  "  %m = mul(%x, %s) : bf16[1048576]\n"
                                  "  %a = add(%m, %y) : bf16[1048576]\n"
                                  "  return (%a)\n"
                                  "}\n",
                                  90);
    char *v = vector_entry(p);
    ck_assert(v != NULL);
    ck_assert_int_eq(count(v, "ld.global.nc.v4.u32"), 2);
    ck_assert_int_gt(count(v, "rcp.rn.f32"), 0);
    ck_assert_msg(last_at(v, "ld.global") < first_at(v, "rcp.rn.f32"),
                  "a load after the reciprocal:\n%.3000s", v);
    free(v);
    assemble_kernel0(p, 90);
    ptc_program_release(p);
}
END_TEST

/* A row's statistics (layer_norm's Welford mean and variance) are two sums
 * over the row held in registers: a warp team shuffles one value per step
 * of each sum (10 shuffles), divides twice (the mean and the variance) and
 * normalises with values every lane holds: no reading back through shared
 * memory, one square root per row, not one per chunk. It was Welford's
 * update and merge: 20 shuffles, a division per merge (7), 3 square roots
 * and 6 shared loads for 24 bf16 elements a lane. The row's loads stay in
 * the loop over rows (machine LICM had hoisted the weights out of it, held
 * in registers across rows). */
START_TEST(row_statistics_are_two_sums_in_registers)
{
    ptc_program *p = compile_text("# ptc ir v1\n"
                                  "graph f(%x: bf16[4096,768] cpu, %w: bf16[768] cpu, "
                                  "%b: bf16[768] cpu) {\n"
                                  "  %l = layer_norm(%x, [768], %w, %b) : bf16[4096,768]\n"
                                  "  return (%l)\n"
                                  "}\n",
                                  90);
    char *v = vector_entry(p);
    ck_assert(v != NULL);
    ck_assert_int_eq(count(v, "shfl.sync.bfly"), 10);
    ck_assert_int_eq(count(v, "div.rn.f32"), 2);
    ck_assert_int_eq(count(v, "sqrt.rn.f32"), 1);
    ck_assert_int_eq(count(v, "ld.shared"), 0);
    ck_assert_int_eq(count(v, "ld.global.nc.v4.u32"), 9); /* x, w, b: 3 chunks each */
    ck_assert_msg(first_at(v, "ld.global") > first_at(v, "$L__BB"),
                  "a load hoisted out of the loop over rows:\n%.3000s", v);
    free(v);
    assemble_kernel0(p, 90);
    ptc_program_release(p);
}
END_TEST

/* PTC_CUDA_ROW_MIN_BLOCKS=N asks ptxas, through .minnctapersm on both
 * entries of a row-mode kernel, for registers that let N blocks share an SM
 * (bf16 layer_norm: 64 registers, 4 blocks of 256 threads; with 5, 48 and a
 * 16-byte spill). Another plan, so another entry name; flat kernels are
 * untouched. */
START_TEST(row_kernels_ask_for_blocks_per_sm)
{
    static const char *LN = "# ptc ir v1\n"
                            "graph f(%x: bf16[4096,768] cpu, %w: bf16[768] cpu, "
                            "%b: bf16[768] cpu) {\n"
                            "  %l = layer_norm(%x, [768], %w, %b) : bf16[4096,768]\n"
                            "  return (%l)\n"
                            "}\n";
    static const char *ADD = "# ptc ir v1\n"
                             "graph f(%x: bf16[65536] cpu) {\n"
                             "  %a = add(%x, %x) : bf16[65536]\n"
                             "  return (%a)\n"
                             "}\n";
    char *names[2];
    for (int i = 0; i < 2; i++) {
        if (i)
            setenv("PTC_CUDA_ROW_MIN_BLOCKS", "5", 1);
        ptc_program *p = compile_text(LN, 90), *flat = compile_text(ADD, 90);
        unsetenv("PTC_CUDA_ROW_MIN_BLOCKS");
        char *one = kernel_ptx(ptc_program_text(p, "ptx"), 0);
        ck_assert_int_eq(count(one, ".minnctapersm 5"), (i ? 2 : 0));
        ck_assert_int_eq(count(one, ".minnctapersm"), (i ? 2 : 0));
        const char *entry = strstr(one, ".entry ") + 7;
        names[i] = strndup(entry, strcspn(entry, "("));
        assemble(one, 90);
        free(one);
        one = kernel_ptx(ptc_program_text(flat, "ptx"), 0);
        ck_assert_int_eq(count(one, ".minnctapersm"), 0);
        free(one);
        ptc_program_release(flat);
        ptc_program_release(p);
    }
    ck_assert_str_ne(names[0], names[1]);
    free(names[0]);
    free(names[1]);
}
END_TEST

/* Row lengths pick the team: a thread per row for tiny rows (no shuffles),
 * part of a warp or a warp for ordinary rows, a block (bar.sync through
 * shared memory) for one long reduction. */
START_TEST(teams_follow_sizes)
{
    static const struct {
        const char *shape, *out;
        int shfl, barsync;
    } cases[] = {
        {"f32[100000,5]", "f32[100000]", 0, 0},
        {"f32[8192,768]", "f32[8192]", 1, 0},
        {"f32[1,4194304]", "f32[1]", 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[512];
        snprintf(
            text, sizeof text,
            "# ptc ir v1\ngraph f(%%x: %s cpu) {\n  %%y = sum(%%x, [1]) : %s\n  return (%%y)\n}\n",
            cases[i].shape, cases[i].out);
        ptc_module *m = parse(text);
        ptc_program *p = compile_ptx(m->graphs[0], 90, true, NULL);
        const char *ptx = ptc_program_text(p, "ptx");
        ck_assert_msg((count(ptx, "shfl.sync") > 0) == cases[i].shfl, "%s: shuffles",
                      cases[i].shape);
        ck_assert_msg((count(ptx, "bar.sync") > 0) == cases[i].barsync, "%s: bar.sync",
                      cases[i].shape);
        assemble(strchr(ptx, '\n') + 1, 90);
        ptc_program_release(p);
        ptc_module_free(m);
    }
}
END_TEST

/* A row of 16-bit elements (8 to a 16-byte chunk) gives each lane no more
 * elements than a row of f32 (4 to a chunk) does: both rows of 768 take a
 * warp. bf16 rows used to take 16 lanes of 48 elements (layer_norm: 125
 * registers, 63% of copy bandwidth on an H100 against f32's 98%). */
START_TEST(half_rows_give_a_lane_as_many_elements_as_f32_rows)
{
    static const char *dtypes[] = {"f32", "bf16", "f16"};
    for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "# ptc ir v1\ngraph f(%%x: %s[8192,768] cpu) {\n  %%y = sum(%%x, [1]) : %s[8192]\n"
                 "  return (%%y)\n}\n",
                 dtypes[i], dtypes[i]);
        ptc_cuda_code code;
        codegen_kernel0(text, &code);
        ck_assert_msg(code.forms[0].team == 32, "%s: a team of %d", dtypes[i], code.forms[0].team);
        ptc_cuda_code_free(&code);
    }
}
END_TEST

/* A kernel of few rows, each a per-row factor (group 0) and a pointwise
 * pass over the row (group 1) — a BatchNorm fold's weight kernel, 256
 * rows of 1024 — gets teams that fill the GPU: 256 threads a row, four
 * elements each. With a warp a row (8192 threads on 132 SMs, 32 elements
 * each) it took 14 us a call on an H200 where Inductor reads no weight;
 * resnet50's forward: 2682 -> 2532 us of GPU time (fp32), 1668 -> 1514
 * (bf16). A reduction over rows of the same size keeps its warp. */
START_TEST(few_pointwise_rows_get_teams_that_fill_the_gpu)
{
    ptc_cuda_code code;
    sched r = schedule_with("# ptc ir v1\ngraph f(%w: f32[256,1024,1,1] cpu, %v: f32[256] cpu, "
                            "%g: f32[256] cpu, %m: f32[256] cpu) {\n"
                            "  %a = add(%v, 1e-05) : f32[256]\n  %r = rsqrt(%a) : f32[256]\n"
                            "  %s = mul(%r, %g) : f32[256]\n  %b = mul(%m, %s) : f32[256]\n"
                            "  %s4 = reshape(%s, [256, 1, 1, 1]) : f32[256,1,1,1]\n"
                            "  %y = mul(%w, %s4) : f32[256,1024,1,1]\n  return (%y, %b)\n}\n",
                            1024);
    ck_assert_int_eq(r.s->nkernels, 1);
    ck_assert_int_eq(r.s->kernels[0]->ngroups, 2);
    codegen_kernel(r.s, 0, false, &code);
    ck_assert_int_eq(code.forms[0].team, 256);
    ptc_cuda_code_free(&code);
    sched_free(&r);
    r = schedule_with("# ptc ir v1\ngraph f(%x: f32[256,1024] cpu) {\n"
                      "  %y = sum(%x, [1]) : f32[256]\n  return (%y)\n}\n",
                      1024);
    codegen_kernel(r.s, 0, false, &code);
    ck_assert_int_eq(code.forms[0].team, 32);
    ptc_cuda_code_free(&code);
    sched_free(&r);
}
END_TEST

static int picked_team(const ptc_cuda_code *c, double outer, double work)
{
    return c->forms[ptc_cuda_pick(c, outer, work, 132)].team;
}

/* A reduction over a row of s0 elements is planned for tiny, short and long
 * rows, and each call takes the form its row length wants: a thread per row
 * of 8, a warp per row of 300, a block per row of 3000 or 20000. Columns
 * summed over many rows take a thread each. */
START_TEST(symbolic_rows_get_forms)
{
    ptc_cuda_code c;
    codegen_kernel0("# ptc ir v1\ngraph f(%x: f32[6,s0] cpu) {\n"
                    "  %y = softmax(%x, -1) : f32[6,s0]\n  return (%y)\n}\n",
                    &c);
    ck_assert_int_eq(c.nforms, 3);
    ck_assert_int_eq(picked_team(&c, 6, 8), 1);
    ck_assert_int_eq(picked_team(&c, 6, 300), 32);
    ck_assert_int_eq(picked_team(&c, 6, 3000), 1024);
    ck_assert_int_eq(picked_team(&c, 6, 20000), 1024);
    ck_assert_int_eq(picked_team(&c, 100000, 300), 32);
    for (int f = 1; f < c.nforms; f++)
        ck_assert_msg(strstr(c.ptx, c.forms[f].entry) != NULL, "%s", c.forms[f].entry);
    ptc_cuda_code_free(&c);
    codegen_kernel0("# ptc ir v1\ngraph f(%x: f32[s0,s1] cpu) {\n"
                    "  %y = sum(%x, [0]) : f32[s1]\n  return (%y)\n}\n",
                    &c);
    ck_assert_int_gt(c.nforms, 1);
    ck_assert_int_eq(picked_team(&c, 100000, 64), 1);
    ptc_cuda_code_free(&c);
    /* static sizes: one form */
    codegen_kernel0("# ptc ir v1\ngraph f(%x: f32[6,300] cpu) {\n"
                    "  %y = softmax(%x, -1) : f32[6,300]\n  return (%y)\n}\n",
                    &c);
    ck_assert_int_eq(c.nforms, 1);
    ptc_cuda_code_free(&c);
}
END_TEST

/* A pointwise kernel over [s0, 768] keeps 16-byte accesses: 4 divides
 * 768*s0 whatever s0 is. Over [s0, s1] it cannot know, and stays scalar. */
START_TEST(symbolic_pointwise_vectorised)
{
    ptc_cuda_code c;
    codegen_kernel0("# ptc ir v1\ngraph f(%x: f32[s0,768] cpu) {\n"
                    "  %y = exp(%x) : f32[s0,768]\n  return (%y)\n}\n",
                    &c);
    ck_assert_int_eq(c.launch.vec, 4);
    ck_assert_int_gt(count(c.ptx, "ld.global.nc.v4.f32"), 0);
    ptc_cuda_code_free(&c);
    codegen_kernel0("# ptc ir v1\ngraph f(%x: f32[s0,s1] cpu) {\n"
                    "  %y = exp(%x) : f32[s0,s1]\n  return (%y)\n}\n",
                    &c);
    ck_assert_int_eq(c.launch.vec, 1);
    ptc_cuda_code_free(&c);
}
END_TEST

/* Sizes for ptc_cuda_fits_i32 from symbol values. */
static double bound_size(void *b, ptc_dim d)
{
    int64_t v;
    ptc_error err;
    ck_assert_msg(ptc_dim_eval(d, b, &v, &err) == 0, "%s", err.msg);
    return (double)v;
}

static bool fits_at(const ptc_schedule *s, int k, int64_t s0, int64_t s1)
{
    ptc_bindings b = {0};
    ptc_bindings_set(&b, "s0", s0);
    ptc_bindings_set(&b, "s1", s1);
    return ptc_cuda_fits_i32(s->prog, s->kernels[k], bound_size, &b);
}

/* Size arguments a kernel loads as 32-bit (".param .u64" truncated: the
 * kernel reads the low word) and the 64-bit multiplies of its index math. */
static void index_width(const char *ptx, int *u32_params, int *mul64)
{
    *u32_params = count(ptx, "ld.param.u32");
    *mul64 = count(ptx, "mul.lo.s64") + count(ptx, "mad.lo.s64") + count(ptx, "mul.lo.u64");
}

/* Kernels over symbolic sizes get 32-bit index arithmetic (main gave every
 * one 64-bit), marked so that a call past the bound runs the 64-bit variant
 * (wide_index), whose index math is 64-bit; the bound is ptc_cuda_fits_i32's
 * 2^30 elements of any buffer, outer range or row, checked per call. */
START_TEST(symbolic_kernels_index_width)
{
    sched r = schedule_of("# ptc ir v1\ngraph f(%x: i8[s0,s1] cpu) {\n"
                          "  %0 = mul(%x, 3) : i8[s0,s1]\n"
                          "  %1 = sum(%x, [1]) : i64[s0]\n"
                          "  return (%0, %1)\n}\n");
    const ptc_schedule *s = r.s;
    ck_assert_int_ge(s->nkernels, 2);
    for (int k = 0; k < s->nkernels; k++) {
        ck_assert_int_gt(s->kernels[k]->nparams, 0);
        ptc_cuda_code narrow, wide;
        codegen_kernel(s, k, false, &narrow);
        codegen_kernel(s, k, true, &wide);
        ck_assert_msg(narrow.i32 && narrow.i32_symbolic, "kernel %d", k);
        ck_assert_msg(!wide.i32 && !wide.i32_symbolic, "kernel %d", k);
        ck_assert_str_ne(narrow.entry, wide.entry);
        ck_assert_int_eq(narrow.nforms, wide.nforms);
        for (int f = 0; f < narrow.nforms; f++)
            ck_assert_int_eq(narrow.forms[f].team, wide.forms[f].team);
        int u32, mul64;
        index_width(narrow.ptx, &u32, &mul64);
        ck_assert_msg(u32 >= 1 && mul64 == 0, "kernel %d i32 variant: %d %d\n%s", k, u32, mul64,
                      narrow.ptx);
        index_width(wide.ptx, &u32, &mul64);
        ck_assert_msg(u32 == 0, "kernel %d i64 variant: %d\n%s", k, u32, wide.ptx);
        if (s->kernels[k]->groups[0].reduction) /* row offsets: row * s1 */
            ck_assert_msg(mul64 > 0, "kernel %d i64 variant\n%s", k, wide.ptx);
        ptc_cuda_code_free(&narrow);
        ptc_cuda_code_free(&wide);
    }
    /* the bound: every buffer (here [s0, s1]) below 2^30 elements */
    ck_assert(fits_at(s, 0, 4, 1000));
    ck_assert(fits_at(s, 0, 1, (1 << 30) - 1));
    ck_assert(!fits_at(s, 0, 1, 1 << 30));
    ck_assert(!fits_at(s, 0, 3, 750000001)); /* 2.25e9 elements, each row below 2^31 */
    ck_assert(!fits_at(s, 1, 2, 1100000000));
    sched_free(&r);
    /* static sizes: 32-bit below the bound, nothing to vary; 64-bit above */
    ptc_cuda_code c;
    codegen_kernel0("# ptc ir v1\ngraph f(%x: i8[4,1000] cpu) {\n"
                    "  %y = mul(%x, 3) : i8[4,1000]\n  return (%y)\n}\n",
                    &c);
    ck_assert(c.i32 && !c.i32_symbolic);
    ptc_cuda_code_free(&c);
    codegen_kernel0("# ptc ir v1\ngraph f(%x: i8[2,1073741824] cpu) {\n"
                    "  %y = sum(%x, [1]) : i64[2]\n  return (%y)\n}\n",
                    &c);
    ck_assert(!c.i32 && !c.i32_symbolic);
    ptc_cuda_code_free(&c);
    /* a static size past the bound rules 32 bits out for a symbolic kernel too */
    codegen_kernel0("# ptc ir v1\ngraph f(%x: i8[s0,1073741824] cpu) {\n"
                    "  %y = sum(%x, [1]) : i64[s0]\n  return (%y)\n}\n",
                    &c);
    ck_assert(!c.i32 && !c.i32_symbolic);
    ptc_cuda_code_free(&c);
}
END_TEST

/* The instruction that defines PTX register reg ("%rd11"): its opcode, e.g.
 * "cvt.s64.s32", in op[size]; "" when none does. */
static void defining_op(const char *ptx, const char *reg, char *op, size_t size)
{
    op[0] = 0;
    char dst[40];
    snprintf(dst, sizeof dst, " \t%s,", reg);
    const char *at = strstr(ptx, dst);
    if (!at)
        return;
    const char *line = at;
    while (line > ptx && line[-1] != '\n')
        line--;
    line += strspn(line, "\t ");
    size_t n = (size_t)(at - line);
    snprintf(op, size, "%.*s", (int)(n < size ? n : size - 1), line);
}

/* The opcode that makes the byte offset a kernel adds to its scratch
 * pointer (parameter nargs: after the buffers), e.g. "mul.wide.u32". */
static void scratch_offset_op(const char *ptx, int nargs, char *op, size_t size)
{
    char param[40], base[24] = "", off[24] = "";
    snprintf(param, sizeof param, "_param_%d];", nargs);
    const char *at = strstr(ptx, param);
    ck_assert_msg(at != NULL, "no scratch parameter\n%s", ptx);
    while (at > ptx && at[-1] != '%')
        at--;
    sscanf(at - 1, "%23[^,]", base); /* "ld.param.u64 %rdN, [entry_param_K];" */
    char add[40];
    snprintf(add, sizeof add, ", %s, ", base);
    const char *use = strstr(ptx, add); /* add.s64 %rdB, %rdA, %rdC */
    ck_assert_msg(use != NULL, "scratch %s is not offset\n%s", base, ptx);
    sscanf(use + strlen(add), "%23[^;]", off);
    defining_op(ptx, off, op, size);
}

/* Locals of a thread-per-iteration kernel that do not fit in registers
 * live in a scratch slot per resident thread; with a few KB a slot, a wave
 * of an H100's 270,336 threads passes 2^31 bytes, so the slot's offset is
 * 64-bit in both variants — main computed slot * bytes in 32 bits in the
 * 32-bit variant and sign-extended the wrapped product. */
START_TEST(scratch_offsets_are_64_bit)
{
    setenv("PTC_CUDA_TEAM", "1", 1);
    setenv("PTC_CUDA_SMEM_LIMIT", "0", 1);
    sched r = schedule_of("# ptc ir v1\ngraph f(%x: f32[64,768] cpu, %w: f32[768] cpu, "
                          "%b: f32[768] cpu) {\n"
                          "  %y = layer_norm(%x, [768], %w, %b) : f32[64,768]\n"
                          "  return (%y)\n}\n");
    ck_assert_int_eq(r.s->nkernels, 1);
    for (int wide = 0; wide < 2; wide++) {
        ptc_cuda_code c;
        codegen_kernel(r.s, 0, wide, &c);
        ck_assert_int_eq(c.forms[0].team, 1);
        ck_assert_int_gt(c.forms[0].scratch_team, 0);
        char op[40];
        scratch_offset_op(c.ptx, r.s->kernels[0]->nargs, op, sizeof op);
        ck_assert_msg(op[0] && strncmp(op, "cvt.", 4) != 0,
                      "variant %d: the scratch offset is '%s'\n%s", wide, op, c.ptx);
        ptc_cuda_code_free(&c);
    }
    sched_free(&r);
    unsetenv("PTC_CUDA_TEAM");
    unsetenv("PTC_CUDA_SMEM_LIMIT");
}
END_TEST

/* ---- horizontal combinations: one launch ---- */

/* Independent flat kernels over static sizes of different shapes (which the
 * scheduler cannot fuse) run as one launch: kernels.txt says so, and the
 * combination's module has one entry taking every buffer once, the rng
 * offset and cell and an i32 block end per member, and picks the member by comparing
 * its block index with those ends. Before, CUDA launched each kernel. */
static const char *THREE = "# ptc ir v1\n"
                           "graph f(%a: i8[1,1000] cuda, %b: i8[1,185] cuda, %c: i8[1,64] cuda) {\n"
                           "  %0 = mul(%a, %a) : i8[1,1000]\n"
                           "  %1 = add(%b, %b) : i8[1,185]\n"
                           "  %2 = neg(%c) : i8[1,64]\n"
                           "  return (%0, %1, %2)\n}\n";

START_TEST(independent_kernels_are_one_launch)
{
    for (int sm = 80; sm <= 90; sm += 10) {
        ptc_program *p = compile_text(THREE, sm);
        const char *kt = ptc_program_text(p, "kernels");
        ck_assert_msg(strstr(kt, "combo 0: 3 kernels, one launch: 0 1 2\n") != NULL, "%s", kt);
        /* the members have no module of their own: the combination's is theirs */
        ck_assert_int_eq(count(ptc_program_text(p, "ptx"), COMBINED_ONLY), 3);
        ck_assert_int_eq(count(ptc_program_text(p, "ptx"), ".target sm_"), 1);
        char *combo = module_ptx(ptc_program_text(p, "ptx"), "; ptc combination 0, one launch");
        ck_assert_msg(combo != NULL, "%s", ptc_program_text(p, "ptx"));
        /* 6 buffers + rng offset and cell, then the 3 ends */
        ck_assert_int_eq(count(combo, "_param_7,\n\t.param .u32 "), 2); /* both entries */
        ck_assert_int_eq(count(combo, "_param_10\n)"), 2);
        ck_assert_msg(count(combo, "%ctaid.x") >= 1 && count(combo, "setp.lt.u32") >= 2, "%s",
                      combo);
        assemble(combo, sm);
        free(combo);
        ptc_program_release(p);
    }
}
END_TEST

/* Kernels with teams share a launch with others of their block size (their
 * barriers need the whole block), the flat ones take that block: a row sum
 * of 768 (warp teams, 256-thread blocks) joins the multiply before it, a
 * row sum of 65536 over 8 rows (a team of a 1024-thread block) starts
 * another combination, which the negation joins. Every module assembles. */
static const char *TEAMS = "# ptc ir v1\n"
                           "graph f(%a: f32[1000] cuda, %r: f32[64,768] cuda, %w: f32[8,65536] "
                           "cuda, %c: f32[77] cuda) {\n"
                           "  %0 = mul(%a, %a) : f32[1000]\n"
                           "  %1 = sum(%r, [1]) : f32[64]\n"
                           "  %2 = sum(%w, [1]) : f32[8]\n"
                           "  %3 = neg(%c) : f32[77]\n"
                           "  return (%0, %1, %2, %3)\n}\n";

START_TEST(kernels_with_teams_share_a_launch_of_their_block)
{
    /* a block per row: with split rows the 8 long rows take 4 blocks each
       and never share a launch (test_codegen_cuda_split.c) */
    setenv("PTC_CUDA_SPLIT_ROWS", "0", 1);
    ptc_program *p = compile_text(TEAMS, 90);
    unsetenv("PTC_CUDA_SPLIT_ROWS");
    const char *kt = ptc_program_text(p, "kernels");
    ck_assert_msg(strstr(kt, "combo 0: 2 kernels, one launch: 0 1\n") != NULL &&
                      strstr(kt, "combo 1: 2 kernels, one launch: 2 3\n") != NULL,
                  "%s", kt);
    const char *heads[2] = {"; ptc combination 0, one launch", "; ptc combination 1, one launch"};
    const char *blocks[2] = {".maxntid 256, 1, 1", ".maxntid 1024, 1, 1"};
    for (int i = 0; i < 2; i++) {
        char *combo = module_ptx(ptc_program_text(p, "ptx"), heads[i]);
        ck_assert_msg(combo && strstr(combo, blocks[i]) &&
                          count(combo, ".maxntid") == count(combo, blocks[i]),
                      "%s", combo ? combo : "no module");
        ck_assert_msg(strstr(combo, i ? "bar.sync" : "shfl.sync.bfly") != NULL, "%s", combo);
        assemble(combo, 90);
        free(combo);
    }
    ptc_program_release(p);
}
END_TEST

/* Two combinations of the same three kernels over the same number of
 * buffers, whose members share their inputs differently (the first two
 * read %w in one, the first and the last in the other): their launches
 * take the buffers in other orders, so the second must not be given the
 * first's PTX from the cache (a kernel's key names its own buffers only). */
static char *sharing_text(const char *second, const char *third)
{
    ptc_buf b = {0};
    ptc_buf_printf(&b,
                   "# ptc ir v1\ngraph f(%%a: i8[1000] cuda, %%b: i8[185] cuda, %%c: i8[64] cuda, "
                   "%%w: i8[1] cuda, %%v: i8[1] cuda) {\n"
                   "  %%0 = add(%%a, %%w) : i8[1000]\n  %%1 = add(%%b, %%%s) : i8[185]\n"
                   "  %%2 = add(%%c, %%%s) : i8[64]\n  return (%%0, %%1, %%2)\n}\n",
                   second, third);
    return b.data;
}

START_TEST(a_combination_is_cached_with_its_members_buffers)
{
    char entries[2][80];
    for (int i = 0; i < 2; i++) {
        char *text = sharing_text(i ? "v" : "w", i ? "w" : "v");
        ptc_module *m = parse(text);
        ptc_program *p = compile_ptx(m->graphs[0], 90, false, NULL);
        char *combo = module_ptx(ptc_program_text(p, "ptx"), "; ptc combination 0, one launch");
        ck_assert_msg(combo != NULL, "%s", ptc_program_text(p, "kernels"));
        const char *e = strstr(combo, ".visible .entry ");
        ck_assert(e != NULL);
        sscanf(e + strlen(".visible .entry "), "%79[^(]", entries[i]);
        free(combo);
        ptc_program_release(p);
        ptc_module_free(m);
        free(text);
    }
    ck_assert_str_ne(entries[0], entries[1]);
}
END_TEST

/* A combination's launch takes each member's buffers, the rng offset and
 * cell and a block end per member: 9 kernels of 70 inputs each (71 buffers)
 * pass the 512 slots of a launch, so the run is split where the next would
 * pass it (7 members: 7 * 71 + 2 + 7 = 506), and the rest make a second one. The
 * CPU's parallel region has no such limit. */
static char *wide_kernels_text(void)
{
    ptc_buf b = {0};
    ptc_buf_puts(&b, "# ptc ir v1\ngraph f(");
    for (int k = 0; k < 9; k++)
        for (int i = 0; i < 70; i++)
            ptc_buf_printf(&b, "%s%%x%d_%d: i8[1,%d] cuda", k || i ? ", " : "", k, i, k + 2);
    ptc_buf_puts(&b, ") {\n");
    for (int k = 0; k < 9; k++) {
        ptc_buf_printf(&b, "  %%s%d_1 = add(%%x%d_0, %%x%d_1) : i8[1,%d]\n", k, k, k, k + 2);
        for (int i = 2; i < 70; i++)
            ptc_buf_printf(&b, "  %%s%d_%d = add(%%s%d_%d, %%x%d_%d) : i8[1,%d]\n", k, i, k, i - 1,
                           k, i, k + 2);
    }
    ptc_buf_puts(&b, "  return (");
    for (int k = 0; k < 9; k++)
        ptc_buf_printf(&b, "%s%%s%d_69", k ? ", " : "", k);
    ptc_buf_puts(&b, ")\n}\n");
    return b.data;
}

START_TEST(a_combination_ends_at_the_launch_parameter_limit)
{
    char *text = wide_kernels_text();
    ptc_program *p = compile_text(text, 90);
    const char *kt = ptc_program_text(p, "kernels");
    ck_assert_msg(strstr(kt, "combo 0: 7 kernels, one launch: 0 1 2 3 4 5 6\n") != NULL &&
                      strstr(kt, "combo 1: 2 kernels, one launch: 7 8\n") != NULL,
                  "%.3000s", kt);
    char *combo = module_ptx(ptc_program_text(p, "ptx"), "; ptc combination 0, one launch");
    ck_assert_int_eq(count(combo, "_param_505\n)"), 2); /* both entries */
    ck_assert_int_eq(count(combo, "_param_506"), 0);
    assemble(combo, 90);
    free(combo);
    ptc_program_release(p);
    ptc_module *m = parse(text);
    ptc_error err;
    ptc_compile_opts o = {.backend = PTC_BACKEND_CPU, .no_cache = true, .keep_text = true};
    p = ptc_compile(m->graphs[0], &o, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    kt = ptc_program_text(p, "kernels");
    ck_assert_msg(strstr(kt, "combo 0: 9 kernels, one parallel region") != NULL, "%.3000s", kt);
    ptc_program_release(p);
    ptc_module_free(m);
    free(text);
}
END_TEST

/* ---- the runtime against a stand-in driver (fake_cuda.c) ---- */

#ifdef PTC_FAKE_CUDA
#include "fake_cuda.h"

/* Runs the row sum over a "device" x of s0 x s1 int8 elements (fake_cuda.h):
 * the index counts it adds, and whether every entry it launched is in ptx. */
static ptc_cuda_index_counts run_rows(ptc_program *p, int64_t s0, int64_t s1, const char *ptx,
                                      bool *in_ptx)
{
    ptc_tensor x = fake_device_i8(s0, s1);
    ptc_cuda_index_counts before;
    ptc_cuda_get_index_counts(&before);
    int first = fake_nlaunched();
    ptc_tensor out;
    ptc_error err;
    ck_assert_msg(ptc_program_run(p, &x, 1, &out, NULL, 0, &err) == 0, "%s", err.msg);
    ptc_tensor_release(&out);
    *in_ptx = fake_nlaunched() > first;
    for (int i = first; i < fake_nlaunched(); i++)
        *in_ptx &= strstr(ptx, fake_launched(i)) != NULL;
    return index_counts_since(before);
}
#endif

/* A column-mode launch runs a block per tile of columns: 24 blocks of 1024
 * threads for 768 i8 columns (32 a tile), with shared memory for one 8-byte
 * partial sum per thread. Over symbolic rows, calls of 32 rows or more run
 * the column-mode form (its entry ends in _c<slices>), 8 rows another. */
START_TEST(column_sums_launch_a_block_per_tile)
{
#ifdef PTC_FAKE_CUDA
    use_fake_cuda();
    ptc_error err;
    ptc_module *m = parse("# ptc ir v1\ngraph f(%x: i8[2048,768] cuda) {\n"
                          "  %0 = sum(%x, [0]) : i64[768]\n  return (%0)\n}\n");
    ptc_compile_opts o = {.backend = PTC_BACKEND_CUDA, .no_cache = true, .keep_text = true};
    ptc_program *p = ptc_compile(m->graphs[0], &o, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    ptc_tensor x = fake_device_i8(2048, 768), out;
    int first = fake_nlaunched();
    ck_assert_msg(ptc_program_run(p, &x, 1, &out, NULL, 0, &err) == 0, "%s", err.msg);
    ptc_tensor_release(&out);
    ck_assert_int_eq(fake_nlaunched(), first + 1);
    /* 32 i8 columns fill a sector; 32 slices fill the block (each 64 rows) */
    ck_assert_int_eq(fake_grid(first, 0), 24);
    ck_assert_int_eq(fake_grid(first, 1), 1024);
    ck_assert_int_eq(fake_grid(first, 2), 1024 * 8);
    ptc_program_release(p);
    ptc_module_free(m);
    /* over symbolic rows, the column-mode form where the call's sizes suit it */
    m = parse("# ptc ir v1\ngraph f(%x: i8[s0,768] cuda) {\n"
              "  %0 = sum(%x, [0]) : i64[768]\n  return (%0)\n}\n");
    p = ptc_compile(m->graphs[0], &o, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    static const struct {
        int64_t rows;
        bool col;
    } calls[] = {{2048, true}, {8, false}, {100000, true}};
    for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
        x = fake_device_i8(calls[i].rows, 768);
        first = fake_nlaunched();
        ck_assert_msg(ptc_program_run(p, &x, 1, &out, NULL, 0, &err) == 0, "%s", err.msg);
        ptc_tensor_release(&out);
        ck_assert_int_eq(fake_nlaunched(), first + 1);
        const char *entry = fake_launched(first);
        ck_assert_msg((strrchr(entry, '_')[1] == 'c') == calls[i].col, "%lld rows: %s",
                      (long long)calls[i].rows, entry);
    }
    ptc_program_release(p);
    ptc_module_free(m);
#endif
}
END_TEST

/* A symbolic kernel's calls run its 32-bit entries (those the compile
 * generated) while their buffers are below 2^30 elements; a call past that,
 * the 64-bit variant generated then, once: [3, 750 million] (each row below
 * 2^30, the buffer past 2^31) and [2, 1.1 billion] make one between them. */
START_TEST(calls_past_the_bound_run_the_64_bit_variant)
{
#ifdef PTC_FAKE_CUDA
    use_fake_cuda();
    ptc_error err;
    ptc_module *m = parse("# ptc ir v1\ngraph f(%x: i8[s0,s1] cuda) {\n"
                          "  %0 = sum(%x, [1]) : i64[s0]\n  return (%0)\n}\n");
    ptc_compile_opts o = {.backend = PTC_BACKEND_CUDA, .no_cache = true, .keep_text = true};
    ptc_program *p = ptc_compile(m->graphs[0], &o, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    const char *ptx = ptc_program_text(p, "ptx");
    bool in_ptx;
    ptc_cuda_index_counts d = run_rows(p, 3, 1000, ptx, &in_ptx);
    ck_assert(d.launches_i32 == 1 && d.launches_i64 == 0 && d.wide_variants == 0 && in_ptx);
    d = run_rows(p, 3, 750000001, ptx, &in_ptx);
    ck_assert(d.launches_i32 == 0 && d.launches_i64 == 1 && d.wide_variants == 1 && !in_ptx);
    d = run_rows(p, 2, 1100000000, ptx, &in_ptx);
    ck_assert(d.launches_i32 == 0 && d.launches_i64 == 1 && d.wide_variants == 0 && !in_ptx);
    d = run_rows(p, 7, 5, ptx, &in_ptx);
    ck_assert(d.launches_i32 == 1 && d.launches_i64 == 0 && in_ptx);
    ptc_program_release(p);
    ptc_module_free(m);
#endif
}
END_TEST

/* The three kernels of THREE run as one launch of the combination's entry
 * (PTC_CUDA_COMBOS=0: a launch each, as before); max-autotune, which times
 * each kernel alone, launches them one by one (each of its candidates). */
START_TEST(a_combination_runs_as_one_launch)
{
#ifdef PTC_FAKE_CUDA
    use_fake_cuda();
    ptc_module *m = parse(THREE);
    ptc_tensor in[3] = {fake_device_i8(1, 1000), fake_device_i8(1, 185), fake_device_i8(1, 64)};
    setenv("PTC_CUDA_VECTOR", "0", 1);
    for (int mode = 0; mode < 3; mode++) {
        if (mode == 1)
            setenv("PTC_CUDA_COMBOS", "0", 1);
        ptc_error err;
        ptc_compile_opts o = {.backend = PTC_BACKEND_CUDA, .no_cache = true, .autotune = mode == 2};
        ptc_program *p = ptc_compile(m->graphs[0], &o, &err);
        unsetenv("PTC_CUDA_COMBOS");
        ck_assert_msg(p != NULL, "%s", err.msg);
        int first = fake_nlaunched();
        ptc_tensor out[3];
        ck_assert_msg(ptc_program_run(p, in, 3, out, NULL, 0, &err) == 0, "%s", err.msg);
        for (int i = 0; i < 3; i++)
            ptc_tensor_release(&out[i]);
        int n = fake_nlaunched() - first;
        if (mode < 2)
            ck_assert_int_eq(n, mode == 0 ? 1 : 3);
        else /* each kernel's candidates, timed */
            ck_assert_int_ge(n, 3);
        /* scalar entries of 128 threads: 1000, 185 and 64 elements take 8, 2
         * and 1 blocks, alone or in the combination's one grid */
        if (mode == 0)
            ck_assert(fake_grid(first, 0) == 11 && fake_grid(first, 1) == 128);
        static const unsigned alone[3] = {8, 2, 1};
        for (int i = 0; mode == 1 && i < 3; i++)
            ck_assert_uint_eq(fake_grid(first + i, 0), alone[i]);
        for (int i = first; i < fake_nlaunched(); i++)
            ck_assert_msg((strncmp(fake_launched(i), "ptc_combo_", 10) == 0) == (mode == 0), "%s",
                          fake_launched(i));
        ptc_program_release(p);
    }
    unsetenv("PTC_CUDA_VECTOR");
    ptc_module_free(m);
    /* two combinations of two (TEAMS): two launches */
    m = parse(TEAMS);
    static float bytes[64];
    ptc_tensor t[4];
    int64_t shapes[4][2] = {{1000, 1}, {64, 768}, {8, 65536}, {77, 1}};
    for (int i = 0; i < 4; i++) {
        t[i] = (ptc_tensor){.dtype = PTC_F32,
                            .ndim = i == 1 || i == 2 ? 2 : 1,
                            .device = {PTC_DEV_CUDA, 0},
                            .data = bytes};
        t[i].sizes[0] = shapes[i][0], t[i].sizes[1] = shapes[i][1];
        t[i].strides[0] = t[i].ndim == 2 ? shapes[i][1] : 1, t[i].strides[1] = 1;
    }
    ptc_error err;
    ptc_compile_opts o = {.backend = PTC_BACKEND_CUDA, .no_cache = true};
    setenv("PTC_CUDA_SPLIT_ROWS", "0", 1); /* a block per long row, as above */
    ptc_program *p = ptc_compile(m->graphs[0], &o, &err);
    unsetenv("PTC_CUDA_SPLIT_ROWS");
    ck_assert_msg(p != NULL, "%s", err.msg);
    int first = fake_nlaunched();
    ptc_tensor out[4];
    setenv("PTC_CUDA_VECTOR", "0", 1);
    ck_assert_msg(ptc_program_run(p, t, 4, out, NULL, 0, &err) == 0, "%s", err.msg);
    unsetenv("PTC_CUDA_VECTOR");
    for (int i = 0; i < 4; i++)
        ptc_tensor_release(&out[i]);
    ck_assert_int_eq(fake_nlaunched() - first, 2);
    /* 256 threads: the multiply's 1000 elements 4 blocks, the 64 rows of
     * warp teams 8 a block, 8 blocks; 1024 threads: a block per row of the
     * long sum (8), the negation's 77 one; the long sum's warps meet in
     * shared memory (5 fields of 8 bytes for each of 32 warps) */
    ck_assert(fake_grid(first, 0) == 12 && fake_grid(first, 1) == 256 && fake_grid(first, 2) == 0);
    ck_assert(fake_grid(first + 1, 0) == 9 && fake_grid(first + 1, 1) == 1024 &&
              fake_grid(first + 1, 2) == 1280);
    ptc_program_release(p);
    ptc_module_free(m);
#endif
}
END_TEST

/* Under max-autotune a kernel whose first run has one launch to choose
 * from (one planned form, no vectorised entry) is settled at that launch:
 * before, it was never settled, and every later call formatted the kernel's
 * cache key and looked again (BERT-base ran 1.4x slower on the H100 under
 * max-autotune than in the default mode). */
START_TEST(a_kernel_with_one_launch_to_choose_is_settled_at_its_first_run)
{
#ifdef PTC_FAKE_CUDA
    use_fake_cuda();
    ptc_error err;
    ptc_module *m = parse("# ptc ir v1\ngraph f(%x: i8[3,5] cuda) {\n"
                          "  %0 = add(%x, %x) : i8[3,5]\n  return (%0)\n}\n");
    ptc_compile_opts o = {.backend = PTC_BACKEND_CUDA, .no_cache = true, .autotune = true};
    ptc_program *p = ptc_compile(m->graphs[0], &o, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    ptc_autotune_counts before, first, later;
    ptc_autotune_get_counts(&before);
    ptc_tensor x = fake_device_i8(3, 5), out;
    ck_assert_msg(ptc_program_run(p, &x, 1, &out, NULL, 0, &err) == 0, "%s", err.msg);
    ptc_tensor_release(&out);
    ptc_autotune_get_counts(&first);
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(ptc_program_run(p, &x, 1, &out, NULL, 0, &err) == 0, "%s", err.msg);
        ptc_tensor_release(&out);
    }
    ptc_autotune_get_counts(&later);
    ck_assert_int_eq(first.only_choice - before.only_choice, 1);
    ck_assert_int_eq(later.only_choice, first.only_choice);
    ck_assert_int_eq(later.tuned, before.tuned);
    ptc_program_release(p);
    ptc_module_free(m);
#endif
}
END_TEST

/* The PTX cache's key names the emitter by a hash of its sources, so PTX
 * cached by an older emitter is never taken for a newer one's (main's key
 * said "cuda-1-dev" whatever the sources: the build's definition of the
 * hash did not reach ptx.c). */
START_TEST(ptx_cache_key_names_the_emitter)
{
    ptc_cuda_code c;
    codegen_kernel0("# ptc ir v1\ngraph f(%x: f32[64,768] cpu) {\n"
                    "  %y = exp(%x) : f32[64,768]\n  return (%y)\n}\n",
                    &c);
    const char *at = strstr(c.key, " codegen cuda-1-");
    ck_assert_msg(at != NULL, "%.200s", c.key);
    at += strlen(" codegen cuda-1-");
    ck_assert_msg(strspn(at, "0123456789abcdef") == 16 && at[16] == ' ', "%.200s", c.key);
    ptc_cuda_code_free(&c);
}
END_TEST

START_TEST(ptx_cache_warm_start)
{
    ptc_module *m = parse(MODEL);
    ptc_program *p = compile_ptx(m->graphs[0], 90, false, NULL);
    ptc_program_info a, b;
    ptc_program_get_info(p, &a);
    char *first = strdup(ptc_program_text(p, "ptx"));
    ptc_program_release(p);
    p = compile_ptx(m->graphs[0], 90, false, NULL);
    ptc_program_get_info(p, &b);
    ck_assert_int_eq(a.ncached, 0);
    ck_assert_int_eq(b.ncached, b.nkernels);
    ck_assert_str_eq(first, ptc_program_text(p, "ptx"));
    free(first);
    ptc_program_release(p);
    ptc_module_free(m);
}
END_TEST

/* The "N item(s)" of each "compile workers" line of a perf log. */
static int worker_items(FILE *log, int *items, int most)
{
    char line[512];
    int n = 0;
    rewind(log);
    while (fgets(line, sizeof line, log))
        if (strstr(line, "compile workers: ") && n < most)
            items[n++] = atoi(strstr(line, "compile workers: ") + 17);
    return n;
}

/* Compiles g with o on its own or, with batch, twice together
 * (ptc_compile_all); the perf log's worker lines into items[]. */
static int compile_logged(const ptc_graph *g, bool batch, ptc_program **ps, int *items, int most)
{
    ptc_error err;
    ptc_compile_opts o = {
        .backend = PTC_BACKEND_CUDA, .cuda_sm = 90, .keep_text = true, .no_cache = true};
    FILE *log = tmpfile();
    ck_assert_ptr_nonnull(log);
    ck_assert_int_eq(ptc_log_configure("perf", &err), 0);
    ptc_log_set_stream(log);
    const ptc_graph *gs[2] = {g, g};
    const ptc_compile_opts *os[2] = {&o, &o};
    int rc = 0;
    if (batch)
        rc = ptc_compile_all(gs, os, 2, ps, &err);
    else if (!(ps[0] = ptc_compile(g, &o, &err)))
        rc = -1;
    ptc_log_set_stream(stderr);
    ck_assert_int_eq(ptc_log_configure("", &err), 0);
    ck_assert_msg(rc == 0, "%s", err.msg);
    int n = worker_items(log, items, most);
    fclose(log);
    return n;
}

/* Programs compiled together (a training step's forward and backward) make
 * ptc_compile's PTX in one compile worker, a kernel they share once. */
START_TEST(a_batch_builds_each_kernel_once_in_one_worker)
{
    ptc_module *m = parse(MODEL);
    ptc_program *alone, *both[2];
    int items_alone[4], items_both[4];
    int lines_alone = compile_logged(m->graphs[0], false, &alone, items_alone, 4);
    int lines_both = compile_logged(m->graphs[0], true, both, items_both, 4);
    for (int i = 0; i < 2; i++)
        ck_assert_str_eq(ptc_program_text(both[i], "ptx"), ptc_program_text(alone, "ptx"));
    if (ptc_worker_enabled()) { /* off in ASan builds: the PTX is made in process */
        ck_assert_int_eq(lines_alone, 1);
        ck_assert_int_eq(lines_both, 1);
        ck_assert_int_eq(items_both[0], items_alone[0]);
    }
    ptc_program_release(alone);
    ptc_program_release(both[0]);
    ptc_program_release(both[1]);
    ptc_module_free(m);
}
END_TEST

/* A batch makes its programs' horizontal combinations in the same compile
 * worker as their kernels, a combination they share once: THREE's members
 * have no module of their own, so its one item is the combination. */
START_TEST(a_batch_builds_its_combinations_in_its_worker)
{
    ptc_module *m = parse(THREE);
    ptc_program *alone, *both[2];
    int items_alone[4], items_both[4];
    int lines_alone = compile_logged(m->graphs[0], false, &alone, items_alone, 4);
    int lines_both = compile_logged(m->graphs[0], true, both, items_both, 4);
    for (int i = 0; i < 2; i++) {
        const char *ptx = ptc_program_text(both[i], "ptx");
        ck_assert_str_eq(ptx, ptc_program_text(alone, "ptx"));
        ck_assert_ptr_nonnull(strstr(ptx, "; ptc combination 0, one launch"));
        ck_assert_int_eq(count(ptx, COMBINED_ONLY), 3);
    }
    if (ptc_worker_enabled()) { /* off in ASan builds: the PTX is made in process */
        ck_assert_int_eq(lines_alone, 1);
        ck_assert_int_eq(lines_both, 1);
        ck_assert_int_eq(items_alone[0], 1);
        ck_assert_int_eq(items_both[0], 1);
    }
    ptc_program_release(alone);
    ptc_program_release(both[0]);
    ptc_program_release(both[1]);
    ptc_module_free(m);
}
END_TEST

START_TEST(trace_holds_ptx_files)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s/trace", cache_dir);
    mkdir(cache_dir, 0755);
    ptc_error err;
    ptc_trace *t = ptc_trace_open(dir, &err);
    ck_assert_msg(t != NULL, "%s", err.msg);
    ptc_trace_compile *tc = ptc_trace_begin(t, "forward", 0, "forward", "test", 0, "unit", &err);
    ck_assert(tc != NULL);
    ptc_module *m = parse(MODEL);
    ptc_program *p = compile_ptx(m->graphs[0], 90, true, tc);
    ck_assert_int_eq(ptc_trace_end(tc, &err), 0);
    ptc_trace_close(t);
    /* the compile folder holds kernel_0.ptx opening with its provenance line */
    DIR *d = opendir(dir);
    ck_assert(d != NULL);
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[700];
        snprintf(path, sizeof path, "%s/%s/kernel_0.ptx", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        char line[256] = "";
        ck_assert(fgets(line, sizeof line, f) != NULL);
        fclose(f);
        ck_assert_msg(strncmp(line, "; ptc kernel 0 k0_", 18) == 0, "%s", line);
        found = 1;
    }
    closedir(d);
    ck_assert(found);
    ptc_program_release(p);
    ptc_module_free(m);
}
END_TEST

/* No driver: the CUDA path says why, the CPU backend runs as before. Runs
 * in a child so that the driver is looked for afresh. */
START_TEST(unavailable_without_driver)
{
    setenv("PTC_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    ptc_error err;
    ck_assert_int_eq(ptc_cuda_available(&err), -1);
    ck_assert_msg(strstr(err.msg, "no NVIDIA driver") != NULL, "%s", err.msg);
    ptc_module *m = parse(
        "# ptc ir v1\ngraph f(%x: f32[8] cpu) {\n  %y = exp(%x) : f32[8]\n  return (%y)\n}\n");
    ptc_compile_opts o = {.backend = PTC_BACKEND_CUDA};
    ck_assert(ptc_compile(m->graphs[0], &o, &err) == NULL);
    ck_assert_msg(strstr(err.msg, "CUDA backend is unavailable") != NULL, "%s", err.msg);
    /* compiled for a named target: generated, but it cannot run here */
    ptc_program *p = compile_ptx(m->graphs[0], 90, true, NULL);
    ptc_tensor in, out;
    int64_t n = 8;
    ck_assert_int_eq(ptc_tensor_alloc(&in, PTC_F32, 1, &n, &err), 0);
    ck_assert_int_eq(ptc_program_run(p, &in, 1, &out, NULL, 0, &err), -1);
    ck_assert_msg(strstr(err.msg, "unavailable") != NULL, "%s", err.msg);
    ptc_tensor copy;
    ck_assert_int_eq(ptc_tensor_to_device(&in, (ptc_device){PTC_DEV_CUDA, 0}, &copy, &err), -1);
    ptc_program_release(p);
    /* the CPU backend is unaffected */
    ptc_compile_opts co = {.backend = PTC_BACKEND_CPU, .no_cache = true};
    p = ptc_compile(m->graphs[0], &co, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    ck_assert_int_eq(ptc_program_run(p, &in, 1, &out, NULL, 0, &err), 0);
    ptc_tensor_release(&out);
    ptc_tensor_release(&in);
    ptc_program_release(p);
    ptc_module_free(m);
}
END_TEST

int main(void)
{
    const TTest *tests[] = {
        ptx_for_sm80_and_sm90,
        teams_follow_sizes,
        half_rows_give_a_lane_as_many_elements_as_f32_rows,
        few_pointwise_rows_get_teams_that_fill_the_gpu,
        symbolic_rows_get_forms,
        column_sums_launch_a_block_per_tile,
        symbolic_pointwise_vectorised,
        symbolic_kernels_index_width,
        scratch_offsets_are_64_bit,
        narrow_lanes_move_16_bytes_per_access,
        half_lanes_are_stored_in_pairs_from_one_rounding,
        erf_takes_one_ex2_and_no_reciprocal,
        half_gelu_is_one_polynomial_of_erfc,
        half_sums_are_one_fma_per_pair,
        row_kernels_ask_for_blocks_per_sm,
        division_by_a_row_value_is_a_multiplication,
        flat_loads_come_before_the_arithmetic,
        row_statistics_are_two_sums_in_registers,
        calls_past_the_bound_run_the_64_bit_variant,
        a_kernel_with_one_launch_to_choose_is_settled_at_its_first_run,
        ptx_cache_warm_start,
        ptx_cache_key_names_the_emitter,
        trace_holds_ptx_files,
        a_batch_builds_each_kernel_once_in_one_worker,
        unavailable_without_driver,
        independent_kernels_are_one_launch,
        kernels_with_teams_share_a_launch_of_their_block,
        a_combination_is_cached_with_its_members_buffers,
        a_combination_ends_at_the_launch_parameter_limit,
        a_combination_runs_as_one_launch,
        a_batch_builds_its_combinations_in_its_worker,
    };
    return run_cuda_suite("codegen_cuda", tests, sizeof tests / sizeof *tests);
}
