/* The CUDA code generator's row-mode options without a GPU: rows ahead
 * (plan.c's row_ahead, kernel.c's emit_rows_ahead): which row kernels load
 * their next row while they work on the current one under
 * PTC_CUDA_ROW_AHEAD, the loads that adds to their vectorised entry, PTX
 * that ptxas accepts for sm_80 and sm_90 (where the CUDA toolkit is
 * installed), and the launch that gives each team several rows (the
 * stand-in libcuda); and row-long locals kept in registers
 * (PTC_CUDA_ROW_FORWARD, body.c's row_forwarded). Results against the
 * reference and torch on a GPU: tests/python/test_gpu_rows_ahead.py. */
#include <check.h>

#include "cuda_suite.h"

static const char *LAYER_NORM = "# ptc ir v1\n"
                                "graph f(%%x: %s[%s,768] %s, %%w: %s[768] %s, %%b: %s[768] %s) {\n"
                                "  %%y = layer_norm(%%x, [768], %%w, %%b) : %s[%s,768]\n"
                                "  return (%%y)\n}\n";
static const char *SOFTMAX = "# ptc ir v1\n"
                             "graph f(%%x: %s[%s,%d] %s) {\n"
                             "  %%y = softmax(%%x, -1) : %s[%s,%d]\n  return (%%y)\n}\n";

static char *layer_norm(const char *dt, const char *rows, const char *dev)
{
    static char text[1024];
    snprintf(text, sizeof text, LAYER_NORM, dt, rows, dev, dt, dev, dt, dev, dt, rows);
    return text;
}

static char *softmax(const char *dt, int n)
{
    static char text[1024];
    snprintf(text, sizeof text, SOFTMAX, dt, "4096", n, "cpu", dt, "4096", n);
    return text;
}

/* The vectorised entry of a code's PTX, up to the next entry. */
static char *vector_entry_of(const ptc_cuda_code *code)
{
    const char *at = strstr(code->ptx, code->ventry);
    at = strstr(at, "(");
    const char *end = strstr(at, ".visible .entry");
    return strndup(at, end ? (size_t)(end - at) : strlen(at));
}

/* Kernel 0 of text for sm_80, assembled. */
static void assemble_for_sm80(const char *text)
{
    sched r = schedule_of(text);
    ptc_error err;
    ptc_cuda_target t = {80, 132};
    ptc_codegen_opts co = {.no_cache = true};
    ptc_cuda_code code;
    ck_assert_msg(ptc_cuda_codegen(r.s, r.s->kernels[0], &t, &co, &code, NULL, &err) == 0, "%s",
                  err.msg);
    assemble(code.ptx, 80);
    ptc_cuda_code_free(&code);
    sched_free(&r);
}

/* Kernel 0 of text under PTC_CUDA_ROW_AHEAD=ahead (NULL: unset), assembled
 * for sm_90 and sm_80; its row_ahead and the 16-byte loads of its
 * vectorised entry. */
static int loads_under(const char *text, const char *ahead, int *row_ahead, char **ptx)
{
    if (ahead)
        setenv("PTC_CUDA_ROW_AHEAD", ahead, 1);
    ptc_cuda_code code;
    codegen_kernel0(text, &code);
    assemble_for_sm80(text);
    unsetenv("PTC_CUDA_ROW_AHEAD");
    *row_ahead = code.launch.row_ahead;
    *ptx = strdup(code.ptx);
    char *v = vector_entry_of(&code);
    int n = count(v, "ld.global.nc.v4");
    free(v);
    ptc_cuda_code_free(&code);
    return n;
}

/* With PTC_CUDA_ROW_AHEAD=1 a 16-bit row kernel loads its first row before
 * the loop and each next row inside it: the first reduction's chunks are
 * loaded twice in the text (layer_norm bf16 over 768: 3 chunks of 8 a lane,
 * besides the 6 of the weights; softmax over 1024: 4; over 1000, 4 with
 * the last lanes clamped), and the launch gives a team 4 rows at least. f32
 * rows keep their code unless =2. Unset (the default) or 0, nothing changes. */
START_TEST(row_kernels_load_their_next_row_ahead)
{
    static const struct {
        const char *dt;
        int kind, n, chunks, plain_loads;
        bool half;
    } cases[] = {
        {"bf16", 0, 768, 3, 9, true},  {"f16", 0, 768, 3, 9, true},   {"bf16", 1, 1024, 4, 4, true},
        {"bf16", 1, 1000, 4, 4, true}, {"f32", 0, 768, 6, 18, false}, {"f32", 1, 1024, 8, 8, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *text = cases[i].kind == 0 ? layer_norm(cases[i].dt, "4096", "cpu")
                                              : softmax(cases[i].dt, cases[i].n);
        int ahead_unset, ahead0, ahead1, ahead2;
        char *unset, *off, *one, *two;
        int loads = loads_under(text, NULL, &ahead_unset, &unset);
        ck_assert_int_eq(loads_under(text, "0", &ahead0, &off), loads);
        int loads1 = loads_under(text, "1", &ahead1, &one);
        int loads2 = loads_under(text, "2", &ahead2, &two);
        ck_assert_msg(loads == cases[i].plain_loads, "case %zu: %d loads", i, loads);
        ck_assert_int_eq(ahead_unset, 0);
        ck_assert_int_eq(ahead0, 0);
        ck_assert_str_eq(unset, off);
        ck_assert_int_eq(ahead1, cases[i].half ? 4 : 0);
        ck_assert_int_eq(ahead2, 4);
        ck_assert_int_eq(loads2, loads + cases[i].chunks);
        ck_assert_int_eq(loads1, cases[i].half ? loads2 : loads);
        if (!cases[i].half)
            ck_assert_str_eq(one, unset);
        free(unset), free(off), free(one), free(two);
    }
}
END_TEST

static int count_in_vector_entry(const char *text, const char *env, const char *what)
{
    if (env)
        setenv("PTC_CUDA_ROW_FORWARD", env, 1);
    ptc_cuda_code code;
    codegen_kernel0(text, &code);
    unsetenv("PTC_CUDA_ROW_FORWARD");
    char *v = vector_entry_of(&code);
    int n = count(v, what);
    free(v);
    ptc_cuda_code_free(&code);
    return n;
}

/* softmax's exponentials are a row-long local that the sum and the division
 * read: in shared memory, each lane loading again the 32 values it stored
 * (8 loads of 16 bytes over 1024 bf16); with PTC_CUDA_ROW_FORWARD=1 the
 * lane keeps them in registers (the stores stay), for bf16 and f32 rows.
 * layer_norm, which has no such local, is the same either way. */
START_TEST(row_locals_stay_in_registers_with_forwarding)
{
    static const char *dts[] = {"bf16", "f32"};
    for (int i = 0; i < 2; i++) {
        const char *text = softmax(dts[i], 1024);
        ck_assert_int_eq(count_in_vector_entry(text, NULL, "ld.shared.v4"), 8);
        ck_assert_int_eq(count_in_vector_entry(text, "0", "ld.shared.v4"), 8);
        ck_assert_int_eq(count_in_vector_entry(text, "1", "ld.shared.v4"), 0);
        ck_assert_int_eq(count_in_vector_entry(text, "1", "st.shared.v4"),
                         count_in_vector_entry(text, "0", "st.shared.v4"));
        text = layer_norm(dts[i], "4096", "cpu");
        ck_assert_int_eq(count_in_vector_entry(text, "1", "ld.shared"),
                         count_in_vector_entry(text, "0", "ld.shared"));
    }
}
END_TEST

#ifdef PTC_FAKE_CUDA
#include "fake_cuda.h"

/* A borrowed "device" bf16 tensor of the given sizes, 16-byte aligned (the
 * stand-in's launches read nothing). */
static ptc_tensor fake_device_bf16(int ndim, int64_t s0, int64_t s1)
{
    static _Alignas(16) uint16_t bytes[64];
    ptc_tensor x = {.dtype = PTC_BF16, .ndim = ndim, .device = {PTC_DEV_CUDA, 0}, .data = bytes};
    x.sizes[0] = s0, x.sizes[ndim - 1] = s1;
    x.strides[0] = ndim == 2 ? s1 : 1, x.strides[ndim - 1] = 1;
    return x;
}

static const char *BOTH = "# ptc ir v1\n"
                          "graph f(%x: bf16[32768,768] cuda, %w: bf16[768] cuda, "
                          "%b: bf16[768] cuda) {\n"
                          "  %l = layer_norm(%x, [768], %w, %b) : bf16[32768,768]\n"
                          "  %s = softmax(%x, -1) : bf16[32768,768]\n"
                          "  return (%l, %s)\n}\n";

/* Blocks of the one launch of a graph over bf16 x [32768,768], w and b
 * [768] (a kernel's or a combination's: rows take warps, 8 a block) and the
 * entry it ran, under PTC_CUDA_ROW_AHEAD=ahead. */
static unsigned blocks_of(const char *text, int nout, const char *ahead, char *entry, size_t size)
{
    setenv("PTC_CUDA_ROW_AHEAD", ahead, 1);
    ptc_module *m = parse(text);
    ptc_compile_opts o = {.backend = PTC_BACKEND_CUDA, .no_cache = true};
    ptc_error err;
    ptc_program *p = ptc_compile(m->graphs[0], &o, &err);
    unsetenv("PTC_CUDA_ROW_AHEAD");
    ck_assert_msg(p != NULL, "%s", err.msg);
    ptc_tensor in[3] = {fake_device_bf16(2, 32768, 768), fake_device_bf16(1, 768, 768),
                        fake_device_bf16(1, 768, 768)};
    ptc_tensor out[2];
    int first = fake_nlaunched();
    ck_assert_msg(ptc_program_run(p, in, 3, out, NULL, 0, &err) == 0, "%s", err.msg);
    for (int i = 0; i < nout; i++)
        ptc_tensor_release(&out[i]);
    ck_assert_int_eq(fake_nlaunched(), first + 1);
    ck_assert_int_eq(fake_grid(first, 1), 256);
    snprintf(entry, size, "%s", fake_launched(first));
    unsigned blocks = fake_grid(first, 0);
    ptc_program_release(p);
    ptc_module_free(m);
    return blocks;
}
#endif

/* A team given one row has no next row to load: with rows ahead, the
 * launch gives each team 4 (32768 rows, 8 teams a block: 1024 blocks, not
 * 4096), and runs the vectorised entry as before; so does each member of a
 * horizontal combination of two row kernels (2048 blocks, not 8192). */
START_TEST(rows_ahead_give_each_team_several_rows)
{
#ifdef PTC_FAKE_CUDA
    use_fake_cuda();
    char plain[128], ahead[128];
    const char *ln = layer_norm("bf16", "32768", "cuda");
    ck_assert_uint_eq(blocks_of(ln, 1, "0", plain, sizeof plain), 4096);
    ck_assert_uint_eq(blocks_of(ln, 1, "1", ahead, sizeof ahead), 1024);
    ck_assert_msg(strstr(plain, "_v") && strstr(ahead, "_v"), "%s %s", plain, ahead);
    ck_assert_uint_eq(blocks_of(BOTH, 2, "0", plain, sizeof plain), 8192);
    ck_assert_uint_eq(blocks_of(BOTH, 2, "1", ahead, sizeof ahead), 2048);
    ck_assert_msg(strstr(plain, "combo") && strstr(ahead, "combo"), "%s %s", plain, ahead);
#endif
}
END_TEST

int main(void)
{
    const TTest *tests[] = {row_kernels_load_their_next_row_ahead,
                            row_locals_stay_in_registers_with_forwarding,
                            rows_ahead_give_each_team_several_rows};
    return run_cuda_suite("codegen_cuda_rows", tests, sizeof tests / sizeof *tests);
}
