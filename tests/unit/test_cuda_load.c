/* What the driver's JIT is given, and loading its modules, against the
 * stand-in driver (fake_cuda.c): the JIT runs once per distinct module of a
 * batch, however many kernels, combinations or programs of the batch share
 * it, and every program still loads and launches its own modules; kernels
 * that differ only by the seeds of their random draws are one module; a
 * scalar entry with a vectorised twin is JIT'd when a launch first needs it;
 * PTC_CUDA_WARPS_LOOP makes a block reduction's module smaller. */
#include "ops/ops.h"
#include "pipeline/pipeline.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef PTC_FAKE_CUDA
#include "fake_cuda.h"

/* Three combinations of a row sum and a product (the second's rows are
 * short: another block, so another combination), the first and the third
 * alike: one module for both. */
static const char *ALIKE =
    "# ptc ir v1\n"
    "graph f(%x: f32[64,4096] cuda, %a: f32[1000] cuda, %y: f32[64,32] cuda,\n"
    "        %c: f32[1000] cuda, %z: f32[64,4096] cuda, %b: f32[1000] cuda) {\n"
    "  %0 = sum(%x, [1]) : f32[64]\n"
    "  %1 = mul(%a, %a) : f32[1000]\n"
    "  %2 = sum(%y, [1]) : f32[64]\n"
    "  %3 = mul(%c, %c) : f32[1000]\n"
    "  %4 = sum(%z, [1]) : f32[64]\n"
    "  %5 = mul(%b, %b) : f32[1000]\n"
    "  return (%0, %1, %2, %3, %4, %5)\n"
    "}\n";

static ptc_tensor fake_f32(int64_t rows, int64_t cols)
{
    static _Alignas(16) float bytes[64]; /* the stand-in's launches read nothing */
    ptc_tensor t = {
        .dtype = PTC_F32, .ndim = rows ? 2 : 1, .device = {PTC_DEV_CUDA, 0}, .data = bytes};
    t.sizes[0] = rows ? rows : cols, t.sizes[1] = cols;
    t.strides[0] = rows ? cols : 1, t.strides[1] = 1;
    return t;
}

static ptc_module *parse(const char *text)
{
    ptc_error err;
    ptc_module *m = ptc_parse_module(text, strlen(text), "test", &err);
    ck_assert_msg(m != NULL, "%s", err.msg);
    return m;
}

/* Runs p (ALIKE) once: the combination entries it launched, each in its PTX. */
static int run_alike(ptc_program *p)
{
    ptc_tensor in[6] = {fake_f32(64, 4096), fake_f32(0, 1000),  fake_f32(64, 32),
                        fake_f32(0, 1000),  fake_f32(64, 4096), fake_f32(0, 1000)};
    ptc_tensor out[6];
    ptc_error err;
    int first = fake_nlaunched();
    ck_assert_msg(ptc_program_run(p, in, 6, out, NULL, 0, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 6; i++)
        ptc_tensor_release(&out[i]);
    const char *ptx = ptc_program_text(p, "ptx");
    for (int i = first; i < fake_nlaunched(); i++)
        ck_assert_msg(strncmp(fake_launched(i), "ptc_combo_", 10) == 0 &&
                          strstr(ptx, fake_launched(i)) != NULL,
                      "%s", fake_launched(i));
    return fake_nlaunched() - first;
}
#endif

/* ALIKE's two distinct combinations are two JITs, not three; two programs
 * of ALIKE compiled together are two JITs too, and each runs its three
 * combinations from modules of its own. */
START_TEST(a_batch_jits_each_distinct_module_once)
{
#ifdef PTC_FAKE_CUDA
    use_fake_cuda();
    setenv("PTC_CUDA_VECTOR", "0", 1);
    ptc_error err;
    ptc_module *m = parse(ALIKE);
    ptc_compile_opts o = {.backend = PTC_BACKEND_CUDA, .no_cache = true, .keep_text = true};
    int before = fake_nlinked();
    ptc_program *p = ptc_compile(m->graphs[0], &o, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    const char *kt = ptc_program_text(p, "kernels");
    ck_assert_msg(strstr(kt, "# 3 horizontal combinations") != NULL, "%s", kt);
    ck_assert_int_eq(fake_nlinked() - before, 2);
    ck_assert_int_eq(run_alike(p), 3);
    ptc_program_release(p);

    const ptc_graph *gs[2] = {m->graphs[0], m->graphs[0]};
    const ptc_compile_opts *os[2] = {&o, &o};
    ptc_program *ps[2];
    before = fake_nlinked();
    ck_assert_msg(ptc_compile_all(gs, os, 2, ps, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(fake_nlinked() - before, 2);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(run_alike(ps[i]), 3);
        ptc_program_release(ps[i]);
    }
    unsetenv("PTC_CUDA_VECTOR");
    ptc_module_free(m);
#endif
}
END_TEST

/* Two draws that differ only by their seeds are one code, so one JIT; each
 * launch passes the run's offset shifted by its own seed (ops.h's
 * ptc_rng_shift), which makes the draws the reference's (the CPU backend's
 * test_codegen_cpu checks them bit for bit). */
START_TEST(draws_that_differ_by_their_seeds_share_their_code)
{
#ifdef PTC_FAKE_CUDA
    use_fake_cuda();
    setenv("PTC_CUDA_COMBOS", "0", 1); /* a launch each */
    static const char *TWO_DRAWS =
        "# ptc ir v1\n"
        "graph f(%x: f32[64,4096] cuda, %y: f32[64,4096] cuda) {\n"
        "  %0 = rand([64, 4096], seed=7, device=cuda) : f32[64,4096] cuda\n"
        "  %1 = mul(%0, %x) : f32[64,4096] cuda\n"
        "  %2 = rand([64, 4096], seed=12, device=cuda) : f32[64,4096] cuda\n"
        "  %3 = mul(%2, %y) : f32[64,4096] cuda\n"
        "  return (%1, %3)\n"
        "}\n";
    ptc_error err;
    ptc_module *m = parse(TWO_DRAWS);
    ptc_compile_opts o = {.backend = PTC_BACKEND_CUDA, .no_cache = true};
    int before = fake_nlinked();
    ptc_program *p = ptc_compile(m->graphs[0], &o, &err);
    unsetenv("PTC_CUDA_COMBOS");
    ck_assert_msg(p != NULL, "%s", err.msg);
    ck_assert_int_eq(fake_nlinked() - before, 1);
    ptc_tensor in[2] = {fake_f32(64, 4096), fake_f32(64, 4096)}, out[2];
    int first = fake_nlaunched();
    fake_watch_params(3); /* (out, x, scratch, rng offset, rng cell, ...) */
    uint64_t offset = 977;
    ck_assert_msg(ptc_program_run(p, in, 2, out, NULL, offset, &err) == 0, "%s", err.msg);
    fake_watch_params(-1);
    ck_assert_int_eq(fake_nlaunched() - first, 2);
    ck_assert_str_eq(fake_launched(first), fake_launched(first + 1));
    ck_assert_uint_eq((uint64_t)fake_param(first, 0), ptc_rng_shift(offset, 7));
    ck_assert_uint_eq((uint64_t)fake_param(first + 1, 0), ptc_rng_shift(offset, 12));
    for (int i = 0; i < 2; i++)
        ptc_tensor_release(&out[i]);
    ptc_program_release(p);
    ptc_module_free(m);
#endif
}
END_TEST

/* A kernel that checks its indices takes the checks' status record as its
 * last parameter (after its buffers, scratch, rng offset and cell), a
 * device address in the run's arena; whether a kernel checks is read once
 * at the compile (ckernel.checks), not per launch. */
START_TEST(a_checking_kernel_is_passed_the_status_record)
{
#ifdef PTC_FAKE_CUDA
    use_fake_cuda();
    setenv("PTC_CUDA_COMBOS", "0", 1); /* a launch each */
    static const char *GATHER = "# ptc ir v1\n"
                                "graph f(%x: f32[64,8] cuda, %i: i64[16] cuda) {\n"
                                "  %0 = index_select(%x, 0, %i) : f32[16,8] cuda\n"
                                "  return (%0)\n"
                                "}\n";
    ptc_error err;
    ptc_module *m = parse(GATHER);
    ptc_compile_opts o = {.backend = PTC_BACKEND_CUDA, .no_cache = true};
    ptc_program *p = ptc_compile(m->graphs[0], &o, &err);
    unsetenv("PTC_CUDA_COMBOS");
    ck_assert_msg(p != NULL, "%s", err.msg);
    static int64_t rows[16]; /* index 0: in range */
    ptc_tensor in[2] = {fake_f32(64, 8),
                        {.dtype = PTC_I64, .ndim = 1, .device = {PTC_DEV_CUDA, 0}, .data = rows}},
               out;
    in[1].sizes[0] = 16, in[1].strides[0] = 1;
    int first = fake_nlaunched();
    /* (out, x, i, scratch, rng offset, rng cell, status record): static
       sizes, no size parameters; the rng cell and the record watched */
    fake_watch_params(5);
    ck_assert_msg(ptc_program_run(p, in, 2, &out, NULL, 0, &err) == 0, "%s", err.msg);
    fake_watch_params(-1);
    ck_assert_int_eq(fake_nlaunched() - first, 1);
    uint64_t status = (uint64_t)fake_param(first, 1);
    ck_assert_uint_ne(status, 0);
    ck_assert_uint_eq(status % 8, 0);
    ptc_tensor_release(&out);
    ptc_program_release(p);
    ptc_module_free(m);
#endif
}
END_TEST

/* A kernel with a vectorised entry (16-byte accesses where its pointers
 * allow) loads without its scalar twin: the stand-in's module, which is
 * the PTX it was given, finds no scalar entry until a launch on an input
 * not aligned for the vectorised one loads it, once (one more JIT).
 * PTC_CUDA_DEFER_SCALAR=0: both at once, as before. */
START_TEST(a_scalar_entry_loads_when_a_launch_first_needs_it)
{
#ifdef PTC_FAKE_CUDA
    use_fake_cuda();
    static const char *SQUARE = "# ptc ir v1\n"
                                "graph f(%a: f32[1000] cuda) {\n"
                                "  %0 = mul(%a, %a) : f32[1000] cuda\n"
                                "  return (%0)\n"
                                "}\n";
    ptc_error err;
    ptc_module *m = parse(SQUARE);
    for (int defer = 1; defer >= 0; defer--) {
        setenv("PTC_CUDA_DEFER_SCALAR", defer ? "1" : "0", 1);
        ptc_compile_opts o = {.backend = PTC_BACKEND_CUDA, .no_cache = true};
        int jits = fake_nlinked();
        ptc_program *p = ptc_compile(m->graphs[0], &o, &err);
        unsetenv("PTC_CUDA_DEFER_SCALAR");
        ck_assert_msg(p != NULL, "%s", err.msg);
        ck_assert_int_eq(fake_nlinked() - jits, 1);
        /* the JIT's PTX: the vectorised entry, the scalar one where not deferred */
        const char *ptx = fake_last_linked(), *entry = strstr(ptx, ".visible .entry ");
        ck_assert(entry && (strstr(entry + 1, ".visible .entry ") != NULL) == !defer);
        ck_assert(strstr(ptx, "_v(\n") != NULL);
        ptc_tensor a = fake_f32(0, 1000), out;
        static const int shift[3] = {0, 4, 4}; /* aligned, then twice not */
        static const bool vectorised[3] = {true, false, false};
        for (int call = 0; call < 3; call++) {
            a.data = (char *)fake_f32(0, 1000).data + shift[call];
            int first = fake_nlaunched();
            ck_assert_msg(ptc_program_run(p, &a, 1, &out, NULL, 0, &err) == 0, "%s", err.msg);
            ptc_tensor_release(&out);
            ck_assert_int_eq(fake_nlaunched() - first, 1);
            const char *e = fake_launched(first);
            ck_assert_msg((strcmp(e + strlen(e) - 2, "_v") == 0) == vectorised[call], "%s", e);
        }
        /* the scalar entry's module: one JIT at the first unaligned call */
        ck_assert_int_eq(fake_nlinked() - jits, defer ? 2 : 1);
        ptc_program_release(p);
    }
    ptc_module_free(m);
#endif
}
END_TEST

/* A row sum of 1024 threads a row combines its 32 warps' sums through
 * shared memory: 31 loads an entry unrolled, or with PTC_CUDA_WARPS_LOOP=1 one loop
 * (a smaller module for the driver's JIT; no device needed: sm_90 named). */
START_TEST(warps_combine_in_a_loop_on_request)
{
#ifdef PTC_FAKE_CUDA /* built with the CUDA backend */
    ptc_module *m = parse("# ptc ir v1\n"
                          "graph f(%x: f32[8,65536] cuda) {\n"
                          "  %0 = sum(%x, [1]) : f32[8] cuda\n"
                          "  return (%0)\n"
                          "}\n");
    for (int looped = 0; looped < 2; looped++) {
        setenv("PTC_CUDA_WARPS_LOOP", looped ? "1" : "0", 1);
        setenv("PTC_CUDA_SPLIT_ROWS", "0", 1); /* split rows always loop */
        ptc_error err;
        ptc_compile_opts o = {
            .backend = PTC_BACKEND_CUDA, .cuda_sm = 90, .no_cache = true, .keep_text = true};
        ptc_program *p = ptc_compile(m->graphs[0], &o, &err);
        unsetenv("PTC_CUDA_WARPS_LOOP");
        unsetenv("PTC_CUDA_SPLIT_ROWS");
        ck_assert_msg(p != NULL, "%s", err.msg);
        const char *ptx = ptc_program_text(p, "ptx");
        ck_assert_msg(strstr(ptx, ".maxntid 1024") != NULL, "%s", ptx);
        int loads = 0, entries = 0; /* the scalar entry and the vectorised one */
        for (const char *q = ptx; (q = strstr(q, "ld.shared")); q++)
            loads++;
        for (const char *q = ptx; (q = strstr(q, ".visible .entry")); q++)
            entries++;
        ck_assert_msg(looped ? loads <= 2 * entries : loads >= 31 * entries, "%d loads, %d entries",
                      loads, entries);
        ptc_program_release(p);
    }
    ptc_module_free(m);
#endif
}
END_TEST

int main(void)
{
#ifndef PTC_FAKE_CUDA
    printf("test_cuda_load: built with PTC_CUDA=OFF, nothing to test\n");
    return 0;
#endif
    char cache[64];
    snprintf(cache, sizeof cache, "/tmp/ptc_test_cuda_load_%d", (int)getpid());
    setenv("PTC_CACHE_DIR", cache, 1); /* the compiles bypass it (no_cache) */
    Suite *s = suite_create("cuda_load");
    TCase *tc = tcase_create("load");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, a_batch_jits_each_distinct_module_once);
    tcase_add_test(tc, draws_that_differ_by_their_seeds_share_their_code);
    tcase_add_test(tc, a_checking_kernel_is_passed_the_status_record);
    tcase_add_test(tc, a_scalar_entry_loads_when_a_launch_first_needs_it);
    tcase_add_test(tc, warps_combine_in_a_loop_on_request);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
