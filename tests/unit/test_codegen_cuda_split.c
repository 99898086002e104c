/* The CUDA code generator's split rows without a GPU (plan.c): which
 * kernels split, into how many blocks a row, PTX that ptxas accepts (where
 * the CUDA toolkit is installed), and the launch and the zeroed row
 * counters against the stand-in libcuda. Their results are checked against
 * torch on a GPU in tests/python/test_gpu_split_rows.py. */
#include <check.h>

#include "cuda_suite.h"
#include "runtime/runtime.h"

#ifdef PTC_FAKE_CUDA
#include "fake_cuda.h"
#endif

/* Few long rows split: S blocks a row, as many as fill one wave of the
 * planned 132 SMs (264 blocks of 1024 threads), each thread folding 16
 * elements or more, so the sums of 64 BatchNorm channels of 32*112*112 take
 * 4 blocks each and a 4M-element sum 244; Welford's rows do not split. A block publishes its partial states
 * (membar, atom.add on the row's counter), the last block of a row
 * (bar.red.or) reads them (ld.volatile) and runs the epilogue.
 * PTC_CUDA_SPLIT_ROWS=0 keeps a block per row. */
START_TEST(few_long_rows_split_over_blocks)
{
    static const struct {
        const char *params, *body;
        int split;
    } cases[] = {
        /* BatchNorm training statistics, resnet50's first layer: Welford's
           rows keep a block each (faster unsplit on an H200: plan.c) */
        {"%x: bf16[32,64,112,112] cpu",
         "  %f = to(%x, f32) : f32[32,64,112,112]\n  %v = var(%f, [0, 2, 3]) : f32[64]\n"
         "  %s = sum(%f, [0, 2, 3]) : f32[64]\n  return (%v, %s)",
         0},
        /* its backward's two channel sums */
        {"%g: bf16[32,64,112,112] cpu, %x: bf16[32,64,112,112] cpu",
         "  %f = to(%g, f32) : f32[32,64,112,112]\n  %y = to(%x, f32) : f32[32,64,112,112]\n"
         "  %p = mul(%f, %y) : f32[32,64,112,112]\n  %s = sum(%f, [0, 2, 3]) : f32[64]\n"
         "  %t = sum(%p, [0, 2, 3]) : f32[64]\n  return (%s, %t)",
         4},
        {"%x: f32[3,1000000] cpu", "  %s = sum(%x, [1]) : f32[3]\n  return (%s)", 61},
        {"%x: f32[4000000] cpu",
         "  %s = sum(%x, [0]) : f32[]\n  %a = argmax(%x, 0) : i64[]\n  return (%s, %a)", 244},
        {"%x: f32[7,999983] cpu", "  %m = amax(%x, [1]) : f32[7]\n  return (%m)", 37},
        /* a pointwise epilogue, run by each row's last block */
        {"%x: f32[64,401408] cpu, %b: f32[64] cpu",
         "  %s = sum(%x, [1]) : f32[64]\n  %e = mul(%s, 0.5) : f32[64]\n"
         "  %o = add(%e, %b) : f32[64]\n  %h = to(%o, bf16) : bf16[64]\n  return (%h)",
         4},
        /* enough rows to fill the GPU, rows too short, symbolic sizes: as before */
        {"%x: f32[4096,4096] cpu", "  %s = sum(%x, [1]) : f32[4096]\n  return (%s)", 0},
        {"%x: f32[256,100352] cpu", "  %s = sum(%x, [1]) : f32[256]\n  return (%s)", 0},
        /* BatchNorm backward's sums at 56x56: rows that vector loads keep whole */
        {"%g: bf16[32,64,56,56] cpu, %x: bf16[32,64,56,56] cpu",
         "  %f = to(%g, f32) : f32[32,64,56,56]\n  %y = to(%x, f32) : f32[32,64,56,56]\n"
         "  %p = mul(%f, %y) : f32[32,64,56,56]\n  %s = sum(%f, [0, 2, 3]) : f32[64]\n"
         "  %t = sum(%p, [0, 2, 3]) : f32[64]\n  return (%s, %t)",
         0},
        {"%x: f32[64,4096] cpu", "  %s = softmax(%x, 1) : f32[64,4096]\n  return (%s)", 0},
        {"%x: f32[s0,401408] cpu", "  %s = sum(%x, [1]) : f32[s0]\n  return (%s)", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[1024];
        snprintf(text, sizeof text, "# ptc ir v1\ngraph f(%s) {\n%s\n}\n", cases[i].params,
                 cases[i].body);
        for (int on = 1; on >= 0; on--) {
            setenv("PTC_CUDA_SPLIT_ROWS", on ? "1" : "0", 1);
            ptc_cuda_code code;
            codegen_kernel0(text, &code);
            int want = on ? cases[i].split : 0;
            ck_assert_msg(code.forms[0].split == want, "case %zu, on %d: split %d, want %d", i, on,
                          code.forms[0].split, want);
            bool split = strstr(code.ptx, "atom.global.add") && strstr(code.ptx, "membar.gl") &&
                         strstr(code.ptx, "bar.red.or") && strstr(code.ptx, "ld.volatile.global");
            ck_assert_msg(split == (want > 0), "case %zu:\n%.3000s", i, code.ptx);
            if (want) {
                ck_assert_int_eq(code.forms[0].block, 1024);
                assemble(code.ptx, 90);
            }
            ptc_cuda_code_free(&code);
        }
        unsetenv("PTC_CUDA_SPLIT_ROWS");
    }
}
END_TEST

/* A split kernel's launch runs 64 rows x 4 blocks of 1024 threads, and
 * every run zeroes the row counters at the start of its scratch area
 * (which the kernel's last blocks leave zero, but a run must not trust a
 * fresh arena to be): poisoned between two runs, they are zero again. */
START_TEST(split_launch_zeroes_its_counters)
{
#ifdef PTC_FAKE_CUDA
    use_fake_cuda();
    ptc_error err;
    ptc_module *m = parse("# ptc ir v1\ngraph f(%x: i8[64,401408] cuda) {\n"
                          "  %0 = sum(%x, [1]) : i64[64]\n  return (%0)\n}\n");
    ptc_compile_opts o = {.backend = PTC_BACKEND_CUDA, .no_cache = true, .keep_text = true};
    ptc_program *p = ptc_compile(m->graphs[0], &o, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    ptc_tensor x = fake_device_i8(64, 401408), out;
    fake_watch_params(2); /* (x, out, scratch, ...) */
    for (int run = 0; run < 2; run++) {
        int first = fake_nlaunched();
        ck_assert_msg(ptc_program_run(p, &x, 1, &out, NULL, 0, &err) == 0, "%s", err.msg);
        ptc_tensor_release(&out);
        ck_assert_int_eq(fake_nlaunched(), first + 1);
        ck_assert_int_eq(fake_grid(first, 0), 64 * 4);
        ck_assert_int_eq(fake_grid(first, 1), 1024);
        unsigned char *counters = (unsigned char *)(uintptr_t)fake_param(first, 0);
        ck_assert_ptr_nonnull(counters);
        for (int b = 0; b < PTC_CUDA_SPLIT_COUNTERS; b++)
            ck_assert_msg(counters[b] == 0, "run %d: counter byte %d is %d", run, b, counters[b]);
        memset(counters, 0xff, PTC_CUDA_SPLIT_COUNTERS);
    }
    fake_watch_params(-1);
    ptc_program_release(p);
    ptc_module_free(m);
#endif
}
END_TEST

int main(void)
{
    const TTest *tests[] = {few_long_rows_split_over_blocks, split_launch_zeroes_its_counters};
    return run_cuda_suite("codegen_cuda_split", tests, sizeof tests / sizeof *tests);
}
