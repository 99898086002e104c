/* Tests for packages and the C model API (compiler/export), with no Python:
 * a package written here (graph.ptir, weights.bin, spec.json), sealed
 * (kernels + manifest), loaded and run against the same arithmetic done by
 * hand; inputs that break the specification and packages with a flipped
 * byte, another ptc version or another package format are refused, naming
 * the check or the file.
 * The weights of a version-2 tensor file are used where the loader mapped
 * them; XXH64 against the algorithm's published values, and the weights'
 * pin (the XXH64 of each 4 MiB chunk) against it, chunk by chunk.
 */
#define _GNU_SOURCE
#include "export/pkg.h"

#include <check.h>
#include <dirent.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char GRAPH[] = "# ptc ir v1\n"
                            "graph forward(%x: f32[s0,4] cpu, %fc.weight: f32[3,4] cpu, "
                            "%fc.bias: f32[3] cpu) {\n"
                            "  %0 = linear(%x, %fc.weight, %fc.bias) : f32[s0,3]\n"
                            "  %1 = relu(%0) : f32[s0,3]\n"
                            "  return (%1)\n"
                            "}\n";

static const char SPEC[] =
    "{\"spec_version\": 1,\n"
    " \"inputs\": [{\"name\": \"x\", \"kind\": \"user\", \"path\": \"x\"},\n"
    "            {\"name\": \"fc.weight\", \"kind\": \"parameter\", \"path\": \"fc.weight\"},\n"
    "            {\"name\": \"fc.bias\", \"kind\": \"parameter\", \"path\": \"fc.bias\"}],\n"
    " \"symbols\": [{\"symbol\": \"s0\", \"dim\": \"batch\", \"min\": 2, \"max\": 8}],\n"
    " \"outputs\": [{\"path\": \"[0]\", \"graph_output\": 0}, {\"path\": \"[1]\", \"input\": "
    "0},\n"
    "             {\"path\": \"[2]\", \"input\": 1}]}\n";

static float W[3][4], B[3];
static char pkg[256];

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[512];
    ptc_error err;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ck_assert_msg(ptc_write_file(path, text, strlen(text), &err) == 0, "%s", err.msg);
}

static void put(ptc_buf *b, const void *p, size_t n)
{
    ptc_buf_putn(b, p, n);
}

/* A version-2 tensor file (ir.h), written by hand as ptc.export writes it:
 * each tensor's bytes start at a multiple of 64. */
static void write_weights_v2(const char *path, const ptc_tensor *w, const char *const *names, int n)
{
    ptc_buf b = {0};
    uint32_t head[2] = {2, (uint32_t)n};
    put(&b, "PTCT", 4);
    put(&b, head, sizeof head);
    for (int i = 0; i < n; i++) {
        uint32_t len = (uint32_t)strlen(names[i]);
        unsigned char hdr[4] = {(unsigned char)w[i].dtype, (unsigned char)w[i].ndim, 0, 0};
        uint64_t nbytes = (uint64_t)ptc_tensor_numel(&w[i]) * ptc_dtype_size(w[i].dtype);
        put(&b, &len, 4);
        put(&b, names[i], len);
        put(&b, hdr, 4);
        put(&b, w[i].sizes, 8 * (size_t)w[i].ndim);
        put(&b, w[i].strides, 8 * (size_t)w[i].ndim);
        put(&b, &nbytes, 8);
        while (b.len % 64)
            put(&b, "", 1);
        put(&b, w[i].data, nbytes);
    }
    uint32_t crc = ptc_crc32(0, b.data, b.len);
    put(&b, &crc, 4);
    ptc_error err;
    ck_assert_msg(ptc_write_file(path, b.data, b.len, &err) == 0, "%s", err.msg);
    ptc_buf_free(&b);
}

/* The unsealed package of graph, spec and weights in a fresh temporary folder. */
static void write_package(const char *graph, const char *spec, const ptc_tensor *w,
                          const char *const *names, int n)
{
    char tmpl[] = "/tmp/ptc_export_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmpl));
    snprintf(pkg, sizeof pkg, "%s", tmpl);
    write_text(pkg, "graph.ptir", graph);
    write_text(pkg, "spec.json", spec);
    char path[512];
    snprintf(path, sizeof path, "%s/weights.bin", pkg);
    write_weights_v2(path, w, names, n);
}

static int seal_cpu(ptc_error *err)
{
    const char *targets[] = {"cpu"};
    return ptc_package_seal(pkg, targets, 1, err);
}

/* The same package, sealed. */
static void make_package_of(const char *graph, const char *spec, const ptc_tensor *w,
                            const char *const *names, int n)
{
    write_package(graph, spec, w, names, n);
    ptc_error err;
    ck_assert_msg(seal_cpu(&err) == 0, "%s", err.msg);
}

/* The package of GRAPH, its weights W and B after `padding` floats of an
 * unused tensor (0: none). */
static void make_padded_package(int64_t padding)
{
    for (int o = 0; o < 3; o++) {
        B[o] = 0.25f * (float)o - 0.3f;
        for (int i = 0; i < 4; i++)
            W[o][i] = 0.1f * (float)(o * 4 + i) - 0.5f;
    }
    float *pad = calloc((size_t)(padding ? padding : 1), sizeof *pad);
    for (int64_t i = 0; i < padding; i++)
        pad[i] = (float)(i % 1000);
    ptc_tensor w[3] = {ptc_tensor_borrow(pad, PTC_F32, 1, (int64_t[]){padding}, NULL),
                       ptc_tensor_borrow(W, PTC_F32, 2, (int64_t[]){3, 4}, NULL),
                       ptc_tensor_borrow(B, PTC_F32, 1, (int64_t[]){3}, NULL)};
    const char *names[] = {"padding", "fc.weight", "fc.bias"};
    make_package_of(GRAPH, SPEC, padding ? w : w + 1, padding ? names : names + 1, padding ? 3 : 2);
    free(pad);
}

/* The package of GRAPH, its weights W and B. */
static void make_package(void)
{
    make_padded_package(0);
}

static void remove_package(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", pkg);
    ck_assert_int_eq(system(cmd), 0);
}

static ptc_model *load_ok(void)
{
    ptc_error err;
    ptc_model *m = ptc_model_load(pkg, NULL, &err);
    ck_assert_msg(m != NULL, "%s", err.msg);
    return m;
}

/* The file mapped at addr in this process (from /proc/self/maps), or "". */
static void mapped_file(const void *addr, char *out, size_t size)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    out[0] = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int path_at = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &path_at) == 2 && path_at &&
            (unsigned long)addr >= lo && (unsigned long)addr < hi) {
            snprintf(out, size, "%s", line + path_at);
            out[strcspn(out, "\n")] = 0;
        }
    }
    if (f)
        fclose(f);
}

START_TEST(runs_like_the_arithmetic)
{
    make_package();
    ptc_model *m = load_ok();
    ck_assert_int_eq(ptc_model_ninputs(m), 1);
    ck_assert_int_eq(ptc_model_noutputs(m), 3);
    ck_assert_str_eq(ptc_model_input_name(m, 0), "x");
    ck_assert_str_eq(ptc_model_output_name(m, 1), "[1]");
    ck_assert_int_eq(ptc_model_compiled_kernels(m), 0); /* the package's kernels served */
    float x[5][4];
    for (int r = 0; r < 5; r++)
        for (int i = 0; i < 4; i++)
            x[r][i] = (float)((r * 7 + i * 3) % 11) * 0.2f - 1.0f;
    ptc_tensor in = ptc_tensor_borrow(x, PTC_F32, 2, (int64_t[]){5, 4}, NULL), out[3];
    ptc_error err;
    ck_assert_msg(ptc_model_run(m, &in, out, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(out[0].sizes[0], 5);
    ck_assert_int_eq(out[0].sizes[1], 3);
    for (int r = 0; r < 5; r++)
        for (int o = 0; o < 3; o++) {
            float want = B[o];
            for (int i = 0; i < 4; i++)
                want += x[r][i] * W[o][i];
            want = want > 0 ? want : 0;
            double got = ptc_tensor_get_f64(&out[0], (int64_t[]){r, o});
            ck_assert_msg(fabs(got - want) < 1e-5, "[%d,%d]: %g, want %g", r, o, got, want);
        }
    ck_assert_ptr_eq(out[1].data, x); /* the input, passed through */
    ptc_tensor_release(&out[0]);
    ptc_tensor_release(&out[1]);
    ptc_model_free(m);
    /* fc.weight, passed through: the bytes of weights.bin as mapped (not a
     * copy), alive after the model is freed for as long as the output is */
    ck_assert_float_eq(((float *)out[2].data)[5], W[1][1]);
    char file[512], want[512];
    mapped_file(out[2].data, file, sizeof file);
    snprintf(want, sizeof want, "%s/weights.bin", pkg);
    ck_assert_str_eq(file, want);
    void *at = out[2].data;
    ptc_tensor_release(&out[2]); /* the last reference: unmapped */
    mapped_file(at, file, sizeof file);
    ck_assert_str_ne(file, want);
    remove_package();
}
END_TEST

START_TEST(xxh64_is_the_published_function)
{
    const char *fox = "The quick brown fox jumps over the lazy dog";
    ck_assert_uint_eq(ptc_pkg_xxh64("", 0, 0), 0xef46db3751d8e999ULL);
    ck_assert_uint_eq(ptc_pkg_xxh64("abc", 3, 0), 0x44bc2cf5ad770999ULL);
    ck_assert_uint_eq(ptc_pkg_xxh64(fox, strlen(fox), 0), 0x0b242d361fda71bcULL);
    ck_assert_uint_eq(ptc_pkg_xxh64(fox, strlen(fox), 1), 0xdf5091b6dad2c6dbULL);
}
END_TEST

/* The sealed manifest's text (malloc'd). */
static char *read_manifest(void)
{
    char path[512];
    size_t len;
    ptc_error err;
    snprintf(path, sizeof path, "%s/manifest.json", pkg);
    char *text = ptc_read_file(path, &len, &err);
    ck_assert_msg(text != NULL, "%s", err.msg);
    return text;
}

/* Rewrites the first `old` in the sealed manifest as `new`. */
static void edit_manifest(const char *old, const char *new)
{
    char path[512], *text = read_manifest();
    char *at = strstr(text, old);
    ck_assert_msg(at != NULL, "no '%s' in the manifest", old);
    ptc_buf b = {0};
    ptc_buf_printf(&b, "%.*s%s%s", (int)(at - text), text, new, at + strlen(old));
    ptc_error err;
    snprintf(path, sizeof path, "%s/manifest.json", pkg);
    ck_assert_int_eq(ptc_write_file(path, b.data, b.len, &err), 0);
    ptc_buf_free(&b);
    free(text);
}

/* 2.6 million floats before fc's weights: a weights.bin of three chunks
 * (4 MiB, 4 MiB and a shorter last one), fc's weights in the last. */
enum { PADDING = 2600000 };

/* A package whose weights span several chunks is pinned by the XXH64 of
 * each, in order, and loads, on a team of one thread or several, and runs
 * on the weights in its last chunk. */
START_TEST(weights_of_several_chunks_round_trip)
{
    make_padded_package(PADDING);
    char path[512], *text = read_manifest();
    size_t len;
    ptc_error err;
    snprintf(path, sizeof path, "%s/weights.bin", pkg);
    unsigned char *data = (unsigned char *)ptc_read_file(path, &len, &err);
    ck_assert_ptr_nonnull(data);
    ck_assert_uint_eq(len / (4 << 20), 2); /* and a shorter third chunk */
    char want[160];
    snprintf(want, sizeof want, "\"bytes\": %zu,\n      \"chunk_bytes\": 4194304", len);
    ck_assert_msg(strstr(text, want), "%s", text);
    const char *at = text;
    for (size_t i = 0; i < 3; i++) {
        size_t from = i << 22, size = len - from < (4u << 20) ? len - from : 4u << 20;
        snprintf(want, sizeof want, "\"%016llx\"",
                 (unsigned long long)ptc_pkg_xxh64(data + from, size, 0));
        at = strstr(at, want);
        ck_assert_msg(at != NULL, "chunk %zu: no %s after the one before in %s", i, want, text);
    }
    free(data);
    free(text);
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    ptc_model_free(load_ok());
    omp_set_num_threads(3);
    ptc_model *m = load_ok();
    omp_set_num_threads(threads);
    float x[2][4] = {{1, 2, 3, 4}, {-1, 0.5f, 0, 2}};
    ptc_tensor in = ptc_tensor_borrow(x, PTC_F32, 2, (int64_t[]){2, 4}, NULL), out[3];
    ck_assert_msg(ptc_model_run(m, &in, out, &err) == 0, "%s", err.msg);
    for (int r = 0; r < 2; r++)
        for (int o = 0; o < 3; o++) {
            float y = B[o];
            for (int i = 0; i < 4; i++)
                y += x[r][i] * W[o][i];
            double got = ptc_tensor_get_f64(&out[0], (int64_t[]){r, o});
            ck_assert_msg(fabs(got - (y > 0 ? y : 0)) < 1e-5, "[%d,%d]: %g", r, o, got);
        }
    for (int k = 0; k < 3; k++)
        ptc_tensor_release(&out[k]);
    ptc_model_free(m);
    remove_package();
}
END_TEST

/* Runs the model on x[rows][cols] of dtype dt; returns the error message. */
static const char *refusal(ptc_model *m, ptc_dtype dt, int rows, int cols, ptc_error *err)
{
    static double buf[64];
    ptc_tensor in = ptc_tensor_borrow(buf, dt, 2, (int64_t[]){rows, cols}, NULL), out[3];
    ck_assert_int_eq(ptc_model_run(m, &in, out, err), -1);
    ck_assert_str_eq(err->stage, "inputs");
    return err->msg;
}

START_TEST(inputs_that_break_the_spec_are_refused)
{
    make_package();
    ptc_model *m = load_ok();
    ptc_error err;
    ck_assert_ptr_nonnull(strstr(refusal(m, PTC_F32, 9, 4, &err),
                                 "size 9 of dynamic dim 'batch' (s0) is outside its exported "
                                 "range [2, 8]"));
    ck_assert_ptr_nonnull(strstr(refusal(m, PTC_F64, 4, 4, &err), "expected dtype f32, got f64"));
    ck_assert_ptr_nonnull(strstr(refusal(m, PTC_F32, 4, 5, &err), "dim 1 is 5, expected 4"));
    ptc_model_free(m);
    remove_package();
}
END_TEST

/* Flips a bit of rel's byte at `at` (-1: its middle one). */
static void flip_byte_at(const char *rel, long at)
{
    char path[512];
    ptc_error err;
    size_t len;
    snprintf(path, sizeof path, "%s/%s", pkg, rel);
    char *data = ptc_read_file(path, &len, &err);
    ck_assert_ptr_nonnull(data);
    data[at < 0 ? len / 2 : (size_t)at] ^= 0x20;
    ck_assert_int_eq(ptc_write_file(path, data, len, &err), 0);
    free(data);
}

static void flip_byte(const char *rel)
{
    flip_byte_at(rel, -1);
}

/* Loading is refused naming rel, and so is verifying alone. */
static void assert_refused(const char *rel, const char *message)
{
    ptc_error err;
    char want_file[512];
    snprintf(want_file, sizeof want_file, "%s/%s", pkg, rel);
    ck_assert_ptr_null(ptc_model_load(pkg, NULL, &err));
    ck_assert_str_eq(err.file, want_file);
    ck_assert_msg(strstr(err.msg, message) != NULL, "%s", err.msg);
    ck_assert_int_eq(ptc_package_verify(pkg, &err), -1);
    ck_assert_str_eq(err.file, want_file);
}

/* Rewrites the sealed manifest's format version as v: a package as a ptc
 * of that format (older, newer) wrote its manifest. */
static void set_format_version(int v)
{
    char path[512], *end;
    size_t len;
    ptc_error err;
    snprintf(path, sizeof path, "%s/manifest.json", pkg);
    char *text = ptc_read_file(path, &len, &err);
    ck_assert_ptr_nonnull(text);
    char *at = strstr(text, "\"format_version\":");
    ck_assert_ptr_nonnull(at);
    at += strlen("\"format_version\":");
    strtol(at, &end, 10);
    ck_assert_ptr_ne(end, at);
    ptc_buf b = {0};
    ptc_buf_printf(&b, "%.*s %d%s", (int)(at - text), text, v, end);
    ck_assert_int_eq(ptc_write_file(path, b.data, b.len, &err), 0);
    ptc_buf_free(&b);
    free(text);
}

START_TEST(corrupt_packages_are_refused)
{
    make_package();
    flip_byte("graph.ptir");
    assert_refused("graph.ptir", "checksum mismatch");
    remove_package();

    make_package();
    flip_byte("weights.bin"); /* the manifest pins its XXH64 */
    assert_refused("weights.bin", "checksum mismatch");
    remove_package();

    make_package();
    char path[512];
    snprintf(path, sizeof path, "%s/weights.bin", pkg);
    ck_assert_int_eq(truncate(path, 100), 0);
    assert_refused("weights.bin", "size mismatch: 100 bytes, the package was sealed with");
    remove_package();

    make_package();
    ptc_error err;
    size_t len;
    snprintf(path, sizeof path, "%s/manifest.json", pkg);
    char *text = ptc_read_file(path, &len, &err);
    char *at = strstr(text, PTC_VERSION);
    ck_assert_ptr_nonnull(at);
    at[0] = '9';
    ck_assert_int_eq(ptc_write_file(path, text, len, &err), 0);
    free(text);
    assert_refused("manifest.json", "this is ptc " PTC_VERSION);
    remove_package();
}
END_TEST

/* Weights of three chunks: a flipped byte is found in whichever chunk it
 * is, which the refusal names; so is a file of another size (its last
 * chunk cut short, or a chunk more), and a manifest whose digests are not
 * one per chunk. */
START_TEST(a_corrupt_chunk_of_the_weights_is_refused)
{
    make_padded_package(PADDING);
    flip_byte_at("weights.bin", (4 << 20) + 12345);
    assert_refused("weights.bin", "checksum mismatch in chunk 2 of 3 (bytes 4194304 to 8388608)");
    flip_byte_at("weights.bin", (4 << 20) + 12345); /* put back: loads */
    ptc_model_free(load_ok());
    flip_byte_at("weights.bin", (8 << 20) + 1);
    assert_refused("weights.bin", "checksum mismatch in chunk 3 of 3 (bytes 8388608 to ");
    flip_byte_at("weights.bin", (8 << 20) + 1);
    flip_byte_at("weights.bin", 0);
    assert_refused("weights.bin", "checksum mismatch in chunk 1 of 3");
    flip_byte_at("weights.bin", 0);

    char path[512];
    snprintf(path, sizeof path, "%s/weights.bin", pkg);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(truncate(path, st.st_size + (4 << 20)), 0); /* a fourth chunk */
    assert_refused("weights.bin", "size mismatch");
    ck_assert_int_eq(truncate(path, st.st_size - 8), 0); /* the last chunk cut short */
    assert_refused("weights.bin", "size mismatch");
    ck_assert_int_eq(truncate(path, st.st_size), 0); /* zeros for its last 8 bytes */
    assert_refused("weights.bin", "checksum mismatch in chunk 3 of 3");
    remove_package();

    make_padded_package(PADDING);
    edit_manifest("\"chunk_bytes\": 4194304", "\"chunk_bytes\": 8388608");
    assert_refused("manifest.json", "weights.bin's pin has 3 chunk digests, its ");
    remove_package();

    make_package(); /* a format-3 pin in a format-4 manifest */
    edit_manifest("\"weights.bin\": {",
                  "\"weights.bin\": \"xxh64:0123456789abcdef:272\", \"x\": {");
    assert_refused("manifest.json", "weights.bin's pin is not {\"bytes\", \"chunk_bytes\", ");
    remove_package();
}
END_TEST

/* A package of an older format (one sealed before CUDA kernels carried
 * their 64-bit variants: format 2) is refused at load, in one line naming
 * the manifest, the format it has and what this ptc expects of it; so is
 * one of a newer format (main loaded the format-2 package, which failed
 * only at the first call that needed a variant). */
START_TEST(packages_of_another_format_are_refused_at_load)
{
    make_package();
    set_format_version(PTC_PACKAGE_FORMAT - 1);
    assert_refused("manifest.json",
                   "package format version 4, sealed by an older ptc: this ptc reads version 5, "
                   "whose packages also carry CUDA kernels that read their random-number offset "
                   "from a device cell too");
    set_format_version(PTC_PACKAGE_FORMAT - 2);
    assert_refused("manifest.json",
                   "package format version 3, sealed by an older ptc: this ptc reads version 5, "
                   "whose packages also carry weights.bin pinned by the XXH64 of each 4 MiB "
                   "chunk, checked in parallel; CUDA kernels");
    set_format_version(2);
    assert_refused("manifest.json",
                   "package format version 2, sealed by an older ptc: this ptc reads version 5, "
                   "whose packages also carry the 64-bit index variant of each CUDA kernel over "
                   "symbolic sizes (for calls past 2^30 elements); weights.bin pinned by");
    ptc_error err;
    ck_assert_ptr_null(ptc_model_load(pkg, NULL, &err));
    ck_assert_msg(strstr(err.msg, "export the model again") && !strchr(err.msg, '\n'), "%s",
                  err.msg);
    set_format_version(PTC_PACKAGE_FORMAT); /* the package as sealed loads */
    ptc_model_free(load_ok());
    set_format_version(PTC_PACKAGE_FORMAT + 1);
    assert_refused("manifest.json", "package format version 6, this ptc reads version 5: load it "
                                    "with the ptc that sealed it");
    remove_package();
}
END_TEST

#ifdef PTC_HAVE_CUDA
/* A package of graph and spec without weights, sealed for sm_90 (PTX: no GPU
 * is needed), in a fresh temporary folder. */
static void make_sm90_package(const char *graph, const char *spec)
{
    char tmpl[] = "/tmp/ptc_export_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmpl));
    snprintf(pkg, sizeof pkg, "%s", tmpl);
    write_text(pkg, "graph.ptir", graph);
    write_text(pkg, "spec.json", spec);
    char path[512];
    snprintf(path, sizeof path, "%s/weights.bin", pkg);
    write_weights_v2(path, NULL, NULL, 0);
    const char *targets[] = {"sm_90"};
    ptc_error err;
    ck_assert_msg(ptc_package_seal(pkg, targets, 1, &err) == 0, "%s", err.msg);
}

/* Kernels compiled from dir/kernels/sm_90 for a GPU of `sms` multiprocessors
 * (PTX only: no GPU is needed). */
static int compiled_for(const ptc_graph *g, int sms)
{
    char kdir[600];
    snprintf(kdir, sizeof kdir, "%s/kernels/sm_90", pkg);
    ptc_compile_opts co = {
        .backend = PTC_BACKEND_CUDA, .cuda_sm = 90, .cuda_sms = sms, .kernel_dir = kdir};
    ptc_error err;
    ptc_program *p = ptc_compile(g, &co, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    ptc_program_info info;
    ptc_program_get_info(p, &info);
    ptc_program_release(p);
    return info.ncompiled;
}

/* A column sum of 2000 columns (no row plan: a column is strided): a team
 * per column on a GPU of 132 multiprocessors (fewer than 16 columns each),
 * a warp's share on one of 114 or 78 — a plan
 * that differs by device, which the package holds for each planned count
 * (a package with only the 132-SM plan, as before, made the 114 and 78 SM
 * loads generate PTX). Column mode (split column reductions, the default)
 * plans this sum alike on the three planned counts, so the row plans are
 * asked for (PTC_CUDA_SPLIT_COLUMNS=0), the ones that differ. */
START_TEST(ptx_is_planned_for_each_gpu_of_its_arch)
{
    setenv("PTC_CUDA_SPLIT_COLUMNS", "0", 1);
    static const char rows[] = "# ptc ir v1\n"
                               "graph forward(%x: f32[4096,2000] cuda) {\n"
                               "  %0 = sum(%x, [0]) : f32[2000]\n"
                               "  return (%0)\n"
                               "}\n";
    make_sm90_package(rows, "{}");
    ptc_error err;
    ptc_module *m = ptc_parse_module(rows, strlen(rows), "rows.ptir", &err);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(compiled_for(m->graphs[0], 132), 0);
    ck_assert_int_eq(compiled_for(m->graphs[0], 114), 0);
    ck_assert_int_eq(compiled_for(m->graphs[0], 78), 0);
    ck_assert_int_eq(compiled_for(m->graphs[0], 16), 0); /* a warp's share, as on 114 */
    ptc_module_free(m);
    remove_package();
    unsetenv("PTC_CUDA_SPLIT_COLUMNS");
}
END_TEST
#endif

#ifdef PTC_FAKE_CUDA
/* ---- a package's PTX run against a stand-in driver (fake_cuda.c) ---- */

#include "fake_cuda.h"

/* The kernel cache (cubins) a folder of the test's own. */
static void use_own_cache(void)
{
    static char cache[64];
    snprintf(cache, sizeof cache, "/tmp/ptc_export_cache_%d", (int)getpid());
    setenv("PTC_CACHE_DIR", cache, 1);
}

static void remove_cache(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", getenv("PTC_CACHE_DIR"));
    ck_assert_int_eq(system(cmd), 0);
}

/* A package of a row sum over s0 x s1 int8 elements (s1 up to 4 billion),
 * sealed for sm_90: its kernel is over symbolic sizes. */
static void make_rows_package(void)
{
    make_sm90_package(
        "# ptc ir v1\ngraph forward(%x: i8[s0,s1] cuda) {\n"
        "  %0 = sum(%x, [1]) : i64[s0]\n  return (%0)\n}\n",
        "{\"spec_version\": 1,\n"
        " \"inputs\": [{\"name\": \"x\", \"kind\": \"user\", \"path\": \"x\"}],\n"
        " \"symbols\": [{\"symbol\": \"s0\", \"dim\": \"rows\", \"min\": 2, \"max\": 8},\n"
        "             {\"symbol\": \"s1\", \"dim\": \"cols\", \"min\": 2, \"max\": "
        "4000000000}],\n"
        " \"outputs\": [{\"path\": \"[0]\", \"graph_output\": 0}]}\n");
}

static ptc_model *load_on_gpu(void)
{
    ptc_error err;
    ptc_model_opts o = {.target = "cuda"};
    ptc_model *m = ptc_model_load(pkg, &o, &err);
    ck_assert_msg(m != NULL, "%s", err.msg);
    ck_assert_int_eq(ptc_model_compiled_kernels(m), 0);
    return m;
}

/* One run of the row sum over a "device" x of s0 x s1 elements
 * (fake_cuda.h): its rc, the entry it launched (""), the index counts it
 * added. */
static int run_rows(ptc_model *m, int64_t s0, int64_t s1, char entry[128],
                    ptc_cuda_index_counts *added, ptc_error *err)
{
    ptc_tensor x = fake_device_i8(s0, s1), out;
    ptc_cuda_index_counts before;
    ptc_cuda_get_index_counts(&before);
    int first = fake_nlaunched();
    int rc = ptc_model_run(m, &x, &out, err);
    if (rc == 0)
        ptc_tensor_release(&out);
    *added = index_counts_since(before);
    ck_assert_int_le(fake_nlaunched() - first, 1);
    snprintf(entry, 128, "%s", fake_nlaunched() > first ? fake_launched(first) : "");
    return rc;
}

/* The file of kernels/sm_90 whose PTX defines entry, into rel ("": none). */
static void file_defining(const char *entry, char *rel, size_t size)
{
    char dir[512], want[160];
    snprintf(dir, sizeof dir, "%s/kernels/sm_90", pkg);
    snprintf(want, sizeof want, ".entry %s(", entry);
    rel[0] = 0;
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e; (e = readdir(d));) {
        char path[1024];
        size_t len;
        ptc_error err;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        char *data = e->d_name[0] == '.' ? NULL : ptc_read_file(path, &len, &err);
        if (data && memmem(data, len, want, strlen(want)))
            snprintf(rel, size, "kernels/sm_90/%s", e->d_name);
        free(data);
    }
    closedir(d);
}

/* A package's kernel over symbolic sizes carries its 64-bit index variant:
 * a loaded package's small call launches the 32-bit entry, a call over
 * [3, 750 million] int8 elements (past 2^31) the 64-bit one, and both come
 * from the package's own files — nothing is generated where it runs (main
 * sealed only the 32-bit PTX; the big call generated the variant). */
START_TEST(symbolic_kernels_carry_their_64_bit_variant)
{
    use_own_cache();
    use_fake_cuda();
    make_rows_package();
    ptc_model *m = load_on_gpu();
    char narrow[128], wide[128], narrow_file[300], wide_file[300];
    ptc_cuda_index_counts d;
    ptc_error err;
    ck_assert_msg(run_rows(m, 3, 1000, narrow, &d, &err) == 0, "%s", err.msg);
    ck_assert(d.launches_i32 == 1 && d.launches_i64 == 0 && d.wide_variants == 0);
    ck_assert_msg(run_rows(m, 3, 750000001, wide, &d, &err) == 0, "%s", err.msg);
    ck_assert(d.launches_i32 == 0 && d.launches_i64 == 1 && d.wide_variants == 0);
    file_defining(narrow, narrow_file, sizeof narrow_file);
    file_defining(wide, wide_file, sizeof wide_file);
    ck_assert_msg(narrow_file[0] && wide_file[0] && strcmp(narrow_file, wide_file) != 0,
                  "'%s' in '%s', '%s' in '%s'", narrow, narrow_file, wide, wide_file);
    ptc_model_free(m);
    remove_package();
    remove_cache();
}
END_TEST

/* Drops dir/rel from the package and its line from the manifest: a package
 * as a ptc that sealed no such file wrote it. */
static void unseal(const char *rel)
{
    char path[600], line[400];
    snprintf(path, sizeof path, "%s/%s", pkg, rel);
    ck_assert_int_eq(unlink(path), 0);
    snprintf(path, sizeof path, "%s/manifest.json", pkg);
    snprintf(line, sizeof line, "\"%s\"", rel);
    size_t len;
    ptc_error err;
    char *text = ptc_read_file(path, &len, &err);
    char *at = strstr(text, line);
    ck_assert_ptr_nonnull(at);
    while (at > text && at[-1] != '\n')
        at--;
    char *end = strchr(at, '\n') + 1;
    memmove(at, end, strlen(end) + 1);
    ck_assert_int_eq(ptc_write_file(path, text, strlen(text), &err), 0);
    free(text);
}

/* A package without a 64-bit variant its manifest's format promises
 * (altered after sealing: a package of an older ptc, which sealed none, is
 * refused at load) still runs its small calls; a call that needs the
 * variant fails, naming the kernel and what to do, launches nothing and
 * generates nothing. */
/* The rows package (make_rows_package) less the file of its kernel's
 * 64-bit variant (found by a call that runs it) and its manifest line. */
static void make_rows_package_without_the_variant(void)
{
    use_own_cache();
    use_fake_cuda();
    make_rows_package();
    ptc_model *m = load_on_gpu();
    char entry[128], file[300];
    ptc_cuda_index_counts d;
    ptc_error err;
    ck_assert_msg(run_rows(m, 3, 750000001, entry, &d, &err) == 0, "%s", err.msg);
    ptc_model_free(m);
    file_defining(entry, file, sizeof file);
    ck_assert_msg(file[0], "'%s' is in no file of the package", entry);
    unseal(file);
}

START_TEST(packages_without_the_variant_refuse_big_calls)
{
    make_rows_package_without_the_variant();
    ptc_model *m = load_on_gpu();
    char entry[128];
    ptc_cuda_index_counts d;
    ptc_error err;
    ck_assert_msg(run_rows(m, 3, 1000, entry, &d, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(d.launches_i32, 1);
    ck_assert_int_eq(run_rows(m, 3, 750000001, entry, &d, &err), -1);
    ck_assert_msg(strstr(err.msg, "64-bit index variant") && strstr(err.msg, "export the model"),
                  "%s", err.msg);
    ck_assert_str_eq(entry, "");
    ck_assert(d.launches_i64 == 0 && d.wide_variants == 0);
    ck_assert_msg(run_rows(m, 4, 20, entry, &d, &err) == 0, "%s", err.msg);
    ptc_model_free(m);
    remove_package();
    remove_cache();
}
END_TEST

/* The package issue 21 is about: sm_90 kernels without their 64-bit
 * variant, and the manifest of format 2, as the ptc before them sealed it.
 * Loading it for the GPU is refused, naming the manifest (main loaded it
 * and refused only the first call past 2^30 elements). */
START_TEST(an_older_ptcs_package_is_refused_at_load)
{
    make_rows_package_without_the_variant();
    set_format_version(2);
    ptc_error err;
    ptc_model_opts o = {.target = "cuda"};
    ck_assert_ptr_null(ptc_model_load(pkg, &o, &err));
    char want_file[512];
    snprintf(want_file, sizeof want_file, "%s/manifest.json", pkg);
    ck_assert_str_eq(err.file, want_file);
    ck_assert_msg(strstr(err.msg, "package format version 2, sealed by an older ptc") &&
                      strstr(err.msg, "64-bit index variant"),
                  "%s", err.msg);
    remove_package();
    remove_cache();
}
END_TEST
#endif

/* ---- the first run ------------------------------------------------------------------- */

/* Two 3x3 convolutions of 32 channels at 128x128 (their im2col matrices 18
 * MiB, 2 MiB intermediates in the arena), summed to a small output. */
static const char CONV_GRAPH[] =
    "# ptc ir v1\n"
    "graph forward(%x: f32[1,32,128,128] cpu, %w: f32[32,32,3,3] cpu) {\n"
    "  %0 = conv2d(%x, %w, padding=1) : f32[1,32,128,128]\n"
    "  %1 = relu(%0) : f32[1,32,128,128]\n"
    "  %2 = conv2d(%1, %w, padding=1) : f32[1,32,128,128]\n"
    "  %3 = sum(%2, [2, 3]) : f32[1,32]\n"
    "  return (%3)\n"
    "}\n";
static const char CONV_SPEC[] =
    "{\"spec_version\": 1,\n"
    " \"inputs\": [{\"name\": \"x\", \"kind\": \"user\", \"path\": \"x\"},\n"
    "            {\"name\": \"w\", \"kind\": \"parameter\", \"path\": \"w\"}],\n"
    " \"symbols\": [], \"outputs\": [{\"path\": \"[0]\", \"graph_output\": 0}]}\n";

/* A line "Name: N" of /proc/self/status, -1 where it is missing. */
static long status_field(const char *name)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long n = -1;
    size_t len = strlen(name);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, name, len) == 0 && line[len] == ':') {
            n = strtol(line + len + 1, NULL, 10);
            break;
        }
    if (f)
        fclose(f);
    return n;
}

/* What one run of the model costs the process: the anonymous memory it
 * brought in and kept (KiB: the arena, the kernels' scratch) and the threads
 * it started. A bound on that has room for the sanitizers: in the ASan build
 * the first run's shadow pages bring in 180-200 KiB (65-72 page faults, a
 * bound of 64 faults failed 4 runs in 12), the plain build's 40 KiB;
 * an unwarmed first run brings in 30 MiB. */
typedef struct {
    long anon_kib;
    long threads;
} run_cost;

static run_cost cost_now(void)
{
    return (run_cost){status_field("RssAnon"), status_field("Threads")};
}

/* One run of the model: its first output value and its cost. */
static run_cost run_counted(ptc_model *m, const ptc_tensor *x, float *first)
{
    ptc_tensor out;
    ptc_error err;
    run_cost before = cost_now();
    ck_assert_msg(ptc_model_run(m, x, &out, &err) == 0, "%s", err.msg);
    run_cost after = cost_now();
    *first = ((float *)out.data)[0];
    ptc_tensor_release(&out);
    return (run_cost){after.anon_kib - before.anon_kib, after.threads - before.threads};
}

/* Two runs of a fresh load of the convolutions' package (warmed or not):
 * what each cost, the bytes the load readied; both runs give one result and
 * tune nothing. */
static size_t two_runs(bool warm, run_cost cost[2])
{
    omp_set_num_threads(2);
    static float w[32 * 32 * 9], x[32 * 128 * 128];
    for (size_t i = 0; i < sizeof w / sizeof *w; i++)
        w[i] = (float)((i * 37) % 19) * 0.01f - 0.09f;
    for (size_t i = 0; i < sizeof x / sizeof *x; i++)
        x[i] = (float)((i * 13) % 23) * 0.05f - 0.5f;
    ptc_tensor wt = ptc_tensor_borrow(w, PTC_F32, 4, (int64_t[]){32, 32, 3, 3}, NULL);
    ptc_tensor xt = ptc_tensor_borrow(x, PTC_F32, 4, (int64_t[]){1, 32, 128, 128}, NULL);
    const char *names[] = {"w"};
    write_package(CONV_GRAPH, CONV_SPEC, &wt, names, 1);
    pid_t sealer = fork(); /* compiling would start threads in this process */
    if (sealer == 0) {
        ptc_error err;
        _exit(seal_cpu(&err) == 0 ? 0 : 1);
    }
    int status;
    ck_assert_int_eq(waitpid(sealer, &status, 0), sealer);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "sealing failed");
    setenv("PTC_EXPORT_WARM", warm ? "1" : "0", 1);
    ptc_model *m = load_ok();
    unsetenv("PTC_EXPORT_WARM");
    float y[2];
    ptc_autotune_counts before, after;
    ptc_autotune_get_counts(&before);
    for (int r = 0; r < 2; r++)
        cost[r] = run_counted(m, &xt, &y[r]);
    ptc_autotune_get_counts(&after);
    ck_assert_float_eq(y[0], y[1]);
    ck_assert_int_eq(after.tuned + after.candidates_timed, before.tuned + before.candidates_timed);
    size_t readied = ptc_model_warm_bytes(m);
    ptc_model_free(m);
    remove_package();
    return readied;
}

/* The load readies the first run: the OpenMP team started, the arena of
 * intermediates and the C kernels' scratch (im2col, GEMM panels, layout
 * copies) allocated and touched, so the first run brings in no memory and
 * starts no threads, as the second; nothing is tuned. (Each test runs in a
 * process of its own: the team and the scratch outlive a model.) */
START_TEST(the_first_run_costs_what_later_runs_do)
{
    run_cost cost[2];
    size_t readied = two_runs(true, cost);
    for (int r = 0; r < 2; r++) /* malloc's pages and stacks */
        ck_assert_msg(cost[r].anon_kib < 1024 && cost[r].threads == 0,
                      "run %d: %ld KiB brought in, %ld threads started", r + 1, cost[r].anon_kib,
                      cost[r].threads);
    ck_assert_msg(readied > (18u << 20), "readied %zu bytes", readied);
}
END_TEST

/* PTC_EXPORT_WARM=0 (the benchmark's baseline): the first run starts the
 * team and brings the arena and the scratch in, 18 MiB and more; the second
 * finds them. */
START_TEST(without_warming_the_first_run_faults_its_memory_in)
{
    run_cost cost[2];
    ck_assert_int_eq(two_runs(false, cost), 0);
    ck_assert_msg(cost[0].anon_kib > (18 << 10) && cost[0].threads == 1,
                  "first run: %ld KiB brought in, %ld threads", cost[0].anon_kib, cost[0].threads);
    ck_assert_msg(cost[1].anon_kib < 1024 && cost[1].threads == 0,
                  "second run: %ld KiB brought in, %ld threads", cost[1].anon_kib, cost[1].threads);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("export");
    TCase *tc = tcase_create("package");
    tcase_add_test(tc, runs_like_the_arithmetic);
    tcase_add_test(tc, inputs_that_break_the_spec_are_refused);
    tcase_add_test(tc, corrupt_packages_are_refused);
    tcase_add_test(tc, packages_of_another_format_are_refused_at_load);
    tcase_add_test(tc, xxh64_is_the_published_function);
    tcase_add_test(tc, weights_of_several_chunks_round_trip);
    tcase_add_test(tc, a_corrupt_chunk_of_the_weights_is_refused);
    tcase_add_test(tc, the_first_run_costs_what_later_runs_do);
    tcase_add_test(tc, without_warming_the_first_run_faults_its_memory_in);
#ifdef PTC_HAVE_CUDA
    tcase_add_test(tc, ptx_is_planned_for_each_gpu_of_its_arch);
#endif
#ifdef PTC_FAKE_CUDA
    tcase_add_test(tc, symbolic_kernels_carry_their_64_bit_variant);
    tcase_add_test(tc, packages_without_the_variant_refuse_big_calls);
    tcase_add_test(tc, an_older_ptcs_package_is_refused_at_load);
#endif
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
