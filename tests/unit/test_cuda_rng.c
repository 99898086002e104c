/* The run's RNG offset on CUDA: a kernel takes it by value and, beside it,
 * the address of an offset cell whose int64 a drawing kernel adds when it
 * runs (a CUDA graph recording's, refilled before each replay; the device's
 * zeros outside recordings). The PTX of the new parameter form is checked
 * and assembled; which offset and cell a run passes, and PTC_ACCURACY's
 * choice of run to check, against a stand-in driver (fake_cuda.c). */
#include "runtime/runtime.h"

#include <check.h>
#include <stdint.h>

#include "cuda_suite.h"

/* A kernel takes (bufs..., scratch, rng offset, rng cell, sizes...): one
 * that draws adds the int64 its cell holds to the offset (a CUDA graph's
 * recorder rewrites the cell before each replay), read once per thread from
 * read-only global memory; one that draws nothing never reads its cell.
 * Both assemble. Before, the offset came by value alone, so a recorded
 * graph repeated its one draw on every replay. */
static const char *DROPOUT = "# ptc ir v1\n"
                             "graph f(%x: f32[4096] cuda) {\n"
                             "  %0 = dropout(%x, 0.1, true, seed=9) : f32[4096]\n"
                             "  return (%0)\n}\n";
static const char *DOUBLING = "# ptc ir v1\n"
                              "graph f(%y: f32[777] cuda) {\n"
                              "  %0 = add(%y, %y) : f32[777]\n"
                              "  return (%0)\n}\n";

START_TEST(drawing_kernels_add_their_cell_to_the_offset)
{
    for (int sm = 80; sm <= 90; sm += 10) {
        /* each kernel takes (x, out, scratch, offset, cell) */
        ptc_program *drawing = compile_text(DROPOUT, sm), *plain = compile_text(DOUBLING, sm);
        char *d = kernel_ptx(ptc_program_text(drawing, "ptx"), 0);
        char *n = kernel_ptx(ptc_program_text(plain, "ptx"), 0);
        ck_assert(d && n);
        ck_assert_msg(count(d, "_param_3]") >= 1 && count(d, "_param_4]") >= 1, "%s", d);
        ck_assert_msg(count(d, "ld.global.nc.u64") >= 1, "%s", d);
        ck_assert_msg(count(n, "_param_3]") == 0 && count(n, "_param_4]") == 0, "%s", n);
        ck_assert_int_eq(count(n, "ld.global.nc.u64"), 0);
        assemble_all(ptc_program_text(drawing, "ptx"), sm);
        assemble_all(ptc_program_text(plain, "ptx"), sm);
        free(d);
        free(n);
        ptc_program_release(drawing);
        ptc_program_release(plain);
    }
}
END_TEST

#ifdef PTC_FAKE_CUDA
#include "fake_cuda.h"

/* DROPOUT compiled for the stand-in's device, and its input: 4096 ones in
 * "device" memory (host memory, which PTC_ACCURACY's check copies). */
static ptc_program *fake_dropout(ptc_tensor *x)
{
    use_fake_cuda();
    static float ones[4096];
    for (int i = 0; i < 4096; i++)
        ones[i] = 1;
    *x = (ptc_tensor){.dtype = PTC_F32, .ndim = 1, .device = {PTC_DEV_CUDA, 0}, .data = ones};
    x->sizes[0] = 4096, x->strides[0] = 1;
    ptc_error err;
    ptc_module *m = parse(DROPOUT);
    ptc_compile_opts o = {.backend = PTC_BACKEND_CUDA, .no_cache = true};
    ptc_program *p = ptc_compile(m->graphs[0], &o, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    ptc_module_free(m);
    return p;
}
#endif

/* A run passes its rng offset by value and, as the cell, the device's
 * zeros (the offset is the value: today's draws) or the host's rng_cell
 * (a CUDA graph recorder's, whose contents a replay's kernels add). */
START_TEST(a_run_passes_its_offset_and_cell)
{
#ifdef PTC_FAKE_CUDA
    ptc_tensor x;
    ptc_program *p = fake_dropout(&x);
    ptc_error err;
    static int64_t cell;
    ptc_host recorded = {.rng_cell = &cell};
    const ptc_host *hosts[2] = {NULL, &recorded};
    uint64_t offsets[2] = {77, 0};
    fake_watch_params(3); /* (x, out, scratch, offset, cell) */
    unsigned long long passed[2];
    for (int h = 0; h < 2; h++) {
        int first = fake_nlaunched();
        ptc_tensor out;
        ck_assert_msg(ptc_program_run(p, &x, 1, &out, hosts[h], offsets[h], &err) == 0, "%s",
                      err.msg);
        ptc_tensor_release(&out);
        ck_assert_int_eq(fake_nlaunched() - first, 1);
        passed[h] = fake_param(first, 0); /* shifted by the kernel's seed base (ptc_rng_shift) */
        unsigned long long want = h ? (unsigned long long)(uintptr_t)&cell : 0;
        ck_assert(h ? fake_param(first, 1) == want : fake_param(first, 1) != 0);
    }
    ck_assert_uint_eq(passed[0] - passed[1], offsets[0] - offsets[1]); /* one shift, mod 2^64 */
    fake_watch_params(-1);
    ptc_program_release(p);
#endif
}
END_TEST

/* PTC_ACCURACY checks a program's first run whose offset it knows: the
 * stand-in computes nothing, so a checked dropout diverges; a run reading
 * its offset from a cell is left unchecked (the interpreter could not draw
 * what its kernels drew), and the next run is the one checked. */
START_TEST(accuracy_checks_the_first_run_whose_offset_it_knows)
{
#ifdef PTC_FAKE_CUDA
    setenv("PTC_ACCURACY", "1", 1);
    setenv("PTC_REPRO", cache_dir, 1);
    ptc_tensor x, out;
    ptc_program *p = fake_dropout(&x);
    ptc_error err;
    static int64_t cell;
    ptc_host recorded = {.rng_cell = &cell};
    ck_assert_msg(ptc_program_run(p, &x, 1, &out, &recorded, 0, &err) == 0, "%s", err.msg);
    ptc_tensor_release(&out);
    ck_assert_int_eq(ptc_program_run(p, &x, 1, &out, NULL, 5, &err), -1);
    ck_assert_msg(strstr(err.msg, "PTC_ACCURACY") != NULL, "%s", err.msg);
    ptc_program_release(p);
    unsetenv("PTC_ACCURACY");
#endif
}
END_TEST

/* Two combinations that differ only by the seed of their dropout (a
 * model's layers; the indexing kernel between them has checks, so it runs
 * alone and ends the first): one module serves both, drawing relative to
 * each combination's smallest seed, which its launch adds to the offset.
 * Before, a combination drew absolute seeds, and each layer's was a module
 * of its own (GPT-2's training forward: 43 distinct of 97, now 11). */
static const char *TWO_LAYERS =
    "# ptc ir v1\n"
    "graph f(%x: f32[64,64] cuda, %y: f32[64,64] cuda, %z: f32[64,64] cuda, "
    "%w: f32[64,64] cuda, %i: i64[8] cuda) {\n"
    "  %0 = dropout(%x, 0.1, true, seed=3) : f32[64,64]\n"
    "  %1 = sin(%y) : f32[64,64]\n"
    "  %2 = index(%x, [%i]) : f32[8,64]\n"
    "  %3 = dropout(%z, 0.1, true, seed=7) : f32[64,64]\n"
    "  %4 = sin(%w) : f32[64,64]\n"
    "  return (%0, %1, %2, %3, %4)\n}\n";

START_TEST(combinations_differing_by_their_seeds_share_one_module)
{
    ptc_program *p = compile_text(TWO_LAYERS, 90);
    const char *kt = ptc_program_text(p, "kernels");
    ck_assert_msg(strstr(kt, "combo 0: 2 kernels, one launch: 0 1\n") &&
                      strstr(kt, "combo 1: 2 kernels, one launch: 3 4\n"),
                  "%s", kt);
    const char *ptx = ptc_program_text(p, "ptx");
    char *first = module_ptx(ptx, "; ptc combination 0, one launch");
    char *second = module_ptx(ptx, "; ptc combination 1, one launch");
    ck_assert(first && second);
    const char *entry = strstr(first, ".visible .entry ");
    ck_assert(entry);
    char *name = strndup(entry, (size_t)(strchr(entry, '(') - entry));
    ck_assert_msg(strstr(second, name), "%s\n%s", first, second);
    free(name);
    free(first);
    free(second);
    ptc_program_release(p);
#ifdef PTC_FAKE_CUDA
    use_fake_cuda();
    static float data[4][64 * 64];
    static int64_t rows[8] = {0, 5, 9, 63, 1, 2, 3, 4};
    ptc_tensor in[5];
    for (int t = 0; t < 5; t++) {
        in[t] = (ptc_tensor){.dtype = t < 4 ? PTC_F32 : PTC_I64,
                             .ndim = t < 4 ? 2 : 1,
                             .device = {PTC_DEV_CUDA, 0},
                             .data = t < 4 ? (void *)data[t] : (void *)rows};
        in[t].sizes[0] = t < 4 ? 64 : 8, in[t].strides[0] = t < 4 ? 64 : 1;
        in[t].sizes[1] = 64, in[t].strides[1] = 1;
    }
    ptc_error err;
    ptc_module *m = parse(TWO_LAYERS);
    ptc_compile_opts o = {.backend = PTC_BACKEND_CUDA, .no_cache = true};
    p = ptc_compile(m->graphs[0], &o, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    ptc_module_free(m);
    fake_watch_params(4); /* a combination's (x, out0, y, out1, offset, cell, ends) */
    int at = fake_nlaunched();
    ptc_tensor out[5];
    ck_assert_msg(ptc_program_run(p, in, 5, out, NULL, 77, &err) == 0, "%s", err.msg);
    for (int o = 0; o < 5; o++)
        ptc_tensor_release(&out[o]);
    ck_assert_int_eq(fake_nlaunched() - at, 3);
    ck_assert_uint_eq(fake_param(at, 0), ptc_rng_shift(77, 3));
    ck_assert_uint_eq(fake_param(at + 2, 0), ptc_rng_shift(77, 7));
    fake_watch_params(-1);
    ptc_program_release(p);
#endif
}
END_TEST

int main(void)
{
    const TTest *tests[] = {
        drawing_kernels_add_their_cell_to_the_offset,
        a_run_passes_its_offset_and_cell,
        accuracy_checks_the_first_run_whose_offset_it_knows,
        combinations_differing_by_their_seeds_share_one_module,
    };
    return run_cuda_suite("cuda_rng", tests, sizeof tests / sizeof *tests);
}
