/* The CUDA code generator's column mode without a GPU (plan.c): which
 * kernels it takes, the blocks it plans from their sizes, the forms of
 * kernels over symbolic sizes and which one a call runs, and PTX that ptxas
 * accepts (where the CUDA toolkit is installed). The launches it makes are
 * checked against the stand-in libcuda in test_codegen_cuda.c, its results
 * against the reference on a GPU in tests/python/test_column_reductions.py. */
#include <check.h>

#include "cuda_suite.h"

/* Column sums (a reduction over the outer, strided dimension: bias and
 * LayerNorm weight gradients) run in column mode: a block of C columns x R
 * row slices, C elements filling a 32-byte sector (16 of bf16, 8 of f32),
 * R leaving each thread 16 rows or more within 1024 threads and the shared
 * memory of the partial states (Welford's 5 fields each shrink it), which
 * meet in a tree of bar.sync steps, no shuffles. Before, a column took a
 * team of 256 threads reading 256 rows apart. A kernel summing rows (dim 1)
 * keeps its plan; PTC_CUDA_SPLIT_COLUMNS=0 turns column mode off,
 * PTC_CUDA_COLUMN_TILE sets the tile's columns. Over symbolic sizes column
 * mode is one more form, which a call runs where it has fewer than 16384
 * columns of 32 rows or more. */
START_TEST(column_sums_split_rows_over_a_block)
{
    static const struct {
        const char *params, *body;
        int block, team;
    } cases[] = {
        {"%x: bf16[2048,768] cpu",
         "  %s = sum(%x, [0]) : bf16[768]\n  %f = to(%s, f32) : f32[768]\n  return (%f)", 1024, 64},
        {"%x: f32[2048,768] cpu, %r: f32[2048,1] cpu",
         "  %p = mul(%x, %r) : f32[2048,768]\n  %a = sum(%p, [0]) : f32[768]\n"
         "  %b = sum(%x, [0]) : f32[768]\n  return (%a, %b)",
         1024, 128},
        {"%x: f16[1000,3072] cpu", "  %s = sum(%x, [0], true) : f16[1,3072]\n  return (%s)", 512,
         32},
        {"%x: f32[3000,64] cpu",
         "  %v = var(%x, [0]) : f32[64]\n  %a = argmax(%x, 0) : i64[64]\n  return (%v, %a)", 512,
         64},
        {"%x: bf16[8,28,28,64] cpu", "  %s = sum(%x, [0, 1, 2]) : bf16[64]\n  return (%s)", 1024,
         64},
        /* short columns: 4 slices, and tiles widened to 32 columns for a block of 128 */
        {"%x: f32[64,4096] cpu", "  %s = sum(%x, [0]) : f32[4096]\n  return (%s)", 128, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[1024];
        snprintf(text, sizeof text, "# ptc ir v1\ngraph f(%s) {\n%s\n}\n", cases[i].params,
                 cases[i].body);
        ptc_cuda_code code;
        for (int split = 1; split >= 0; split--) {
            setenv("PTC_CUDA_SPLIT_COLUMNS", split ? "1" : "0", 1);
            codegen_kernel0(text, &code);
            bool col = code.forms[0].block == cases[i].block &&
                       code.forms[0].team == cases[i].team && code.nforms == 1;
            ck_assert_msg(col == split, "case %zu, split %d: block %d team %d", i, split,
                          code.forms[0].block, code.forms[0].team);
            if (split)
                ck_assert_msg(count(code.ptx, "bar.sync") > 0 && !strstr(code.ptx, "shfl.sync"),
                              "case %zu:\n%.3000s", i, code.ptx);
            ptc_cuda_code_free(&code);
        }
        unsetenv("PTC_CUDA_SPLIT_COLUMNS");
    }
    static const char *kept[] = {
        "%x: f32[2048,768] cpu",
        "  %s = sum(%x, [1]) : f32[2048]\n  return (%s)",
    };
    static const char *SYMBOLIC = "# ptc ir v1\ngraph f(%x: f32[s0,768] cpu) {\n"
                                  "  %s = sum(%x, [0]) : f32[768]\n  return (%s)\n}\n";
    ptc_cuda_code sym, plain;
    codegen_kernel0(SYMBOLIC, &sym);
    setenv("PTC_CUDA_SPLIT_COLUMNS", "0", 1);
    codegen_kernel0(SYMBOLIC, &plain);
    unsetenv("PTC_CUDA_SPLIT_COLUMNS");
    ck_assert_int_eq(sym.nforms, plain.nforms + 1);
    const ptc_cuda_form *col = &sym.forms[sym.nforms - 1];
    ck_assert(col->col && strrchr(col->entry, '_')[1] == 'c' && strstr(sym.ptx, col->entry));
    ck_assert(sym.forms[ptc_cuda_pick(&sym, 768, 2048, 132)].col);
    ck_assert(!sym.forms[ptc_cuda_pick(&sym, 768, 8, 132)].col);
    ck_assert(!sym.forms[ptc_cuda_pick(&sym, 100000, 2048, 132)].col);
    for (int f = 0; f < plain.nforms; f++)
        ck_assert(!plain.forms[f].col && !sym.forms[f].col);
    ptc_cuda_code_free(&sym);
    ptc_cuda_code_free(&plain);
    /* PTC_CUDA_COLUMN_TILE=4: tiles of 4 bf16 columns, 128 slices of 16 rows */
    setenv("PTC_CUDA_COLUMN_TILE", "4", 1);
    ptc_cuda_code narrow;
    codegen_kernel0("# ptc ir v1\ngraph f(%x: bf16[2048,768] cpu) {\n"
                    "  %s = sum(%x, [0]) : bf16[768]\n  return (%s)\n}\n",
                    &narrow);
    unsetenv("PTC_CUDA_COLUMN_TILE");
    ck_assert_int_eq(narrow.forms[0].block, 512);
    ck_assert_int_eq(narrow.forms[0].team, 128);
    ptc_cuda_code_free(&narrow);
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i += 2) {
        char text[512];
        snprintf(text, sizeof text, "# ptc ir v1\ngraph f(%s) {\n%s\n}\n", kept[i], kept[i + 1]);
        ptc_cuda_code on, off;
        codegen_kernel0(text, &on);
        setenv("PTC_CUDA_SPLIT_COLUMNS", "0", 1);
        codegen_kernel0(text, &off);
        unsetenv("PTC_CUDA_SPLIT_COLUMNS");
        ck_assert_str_eq(on.ptx, off.ptx);
        ptc_cuda_code_free(&on);
        ptc_cuda_code_free(&off);
    }
}
END_TEST

int main(void)
{
    const TTest *tests[] = {column_sums_split_rows_over_a_block};
    return run_cuda_suite("codegen_cuda_columns", tests, sizeof tests / sizeof *tests);
}
