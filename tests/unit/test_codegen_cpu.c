/* The CPU backend through runtime.h: compiled programs against the reference
 * interpreter (random draws bit for bit), the kernel cache (warm starts
 * compile nothing; corrupt, truncated, altered or foreign files are
 * recompiled, never loaded; nothing others could write is trusted), host
 * hooks (outputs allocated and externs run by the host), a kernel's sections
 * kept within reach of each other, symbolic sizes,
 * strided inputs, the trace directory and stage texts; in an ASan build,
 * kernels checked by ASan. */
#define _GNU_SOURCE
#include "codegen/asan.h"
#include "codegen/codegen.h"
#include "pipeline/pipeline.h"

#include <check.h>
#include <dirent.h>
#include <dlfcn.h>
#include <omp.h>
#include <pthread.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef PTC_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

static char cache_dir[256];

static void set_cache(void)
{
    snprintf(cache_dir, sizeof cache_dir, "/tmp/ptc_test_cache_%d", (int)getpid());
    setenv("PTC_CACHE_DIR", cache_dir, 1);
}

static void clear_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
            clear_dir(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static ptc_module *parse(const char *text)
{
    ptc_error err;
    ptc_module *m = ptc_parse_module(text, strlen(text), "test", &err);
    ck_assert_msg(m != NULL, "%s", err.msg);
    return m;
}

static ptc_program *compile(const ptc_graph *g, ptc_backend b, bool no_cache)
{
    ptc_error err;
    ptc_compile_opts o = {.backend = b, .no_cache = no_cache};
    ptc_program *p = ptc_compile(g, &o, &err);
    ck_assert_msg(p != NULL, "%s: %s: %s", err.stage, ptc_errclass_name(err.cls), err.msg);
    return p;
}

static void make_inputs(const ptc_graph *g, ptc_tensor *in, const ptc_bindings *b, uint64_t seed)
{
    for (int i = 0; i < g->ninputs; i++) {
        int64_t sizes[PTC_MAX_DIMS];
        ptc_error err;
        ck_assert_int_eq(ptc_eval_shape(&g->inputs[i]->type, b, sizes, &err), 0);
        ck_assert_int_eq(ptc_tensor_alloc(&in[i], g->inputs[i]->type.dtype, g->inputs[i]->type.ndim,
                                          sizes, &err), 0);
        ptc_tensor_fill_random(&in[i], seed + (uint64_t)i);
    }
}

/* Max |a - b| over two tensors of one shape (0 for exact equality). */
static double max_diff(const ptc_tensor *a, const ptc_tensor *b)
{
    ck_assert_int_eq(a->ndim, b->ndim);
    for (int d = 0; d < a->ndim; d++)
        ck_assert_int_eq(a->sizes[d], b->sizes[d]);
    int64_t n = ptc_tensor_numel(a), idx[PTC_MAX_DIMS] = {0};
    double m = 0;
    for (int64_t k = 0; k < n; k++) {
        double x = ptc_tensor_get_f64(a, idx), y = ptc_tensor_get_f64(b, idx);
        if (!(isnan(x) && isnan(y)))
            m = fmax(m, fabs(x - y));
        for (int d = a->ndim - 1; d >= 0; d--) {
            if (++idx[d] < a->sizes[d])
                break;
            idx[d] = 0;
        }
    }
    return m;
}

/* Runs p and the interpreter on the same inputs; returns the largest error. */
static double run_vs_reference(ptc_program *p, const ptc_graph *g, const ptc_tensor *in,
                               const ptc_host *host, uint64_t rng_offset)
{
    ptc_error err;
    ptc_tensor out[8] = {{0}}, ref[8] = {{0}};
    ck_assert_msg(ptc_program_run(p, in, g->ninputs, out, host, rng_offset, &err) == 0, "%s", err.msg);
    ptc_run_opts ro = {.rng_offset = rng_offset};
    ck_assert_msg(ptc_interp_run(g, in, g->ninputs, ref, &ro, &err) == 0, "%s", err.msg);
    double m = 0;
    for (int i = 0; i < g->noutputs; i++) {
        m = fmax(m, max_diff(&out[i], &ref[i]));
        ptc_tensor_release(&out[i]);
        ptc_tensor_release(&ref[i]);
    }
    return m;
}

/* ---- random draws ------------------------------------------------------------------- */

START_TEST(dropout_and_rand_bit_exact)
{
    set_cache();
    ptc_module *m = parse("# ptc ir v1\n"
                          "graph g(%x: f32[1003] cpu, %h: f16[257] cpu, %d: f64[100] cpu) {\n"
                          "  %0 = dropout(%x, 0.3, true, seed=7) : f32[1003]\n"
                          "  %1 = dropout(%h, 0.5, true, seed=3) : f16[257]\n"
                          "  %2 = dropout(%d, 0.1, true) : f64[100]\n"
                          "  %3 = rand([33, 5], seed=11) : f32[33,5]\n"
                          "  %4 = randn([65], seed=2) : f32[65]\n"
                          /* %3's code, relative to its seed: launched shifted by 12 */
                          "  %5 = neg(%4) : f32[65]\n"
                          "  %6 = rand([33, 5], seed=12) : f32[33,5]\n"
                          "  return (%0, %1, %2, %3, %4, %5, %6)\n}\n");
    ptc_graph *g = m->graphs[0];
    ptc_program *p = compile(g, PTC_BACKEND_CPU, true);
    ptc_tensor in[3];
    ptc_bindings b = {0};
    make_inputs(g, in, &b, 5);
    for (uint64_t off = 0; off < 3; off++)
        ck_assert_msg(run_vs_reference(p, g, in, NULL, off * 977) == 0,
                      "random draws differ from the reference (offset %llu)", (unsigned long long)off);
    for (int i = 0; i < 3; i++)
        ptc_tensor_release(&in[i]);
    ptc_program_release(p);
    ptc_module_free(m);
    clear_dir(cache_dir);
}
END_TEST

/* ---- the kernel cache ----------------------------------------------------------------- */

static const char *cache_graph = "# ptc ir v1\n"
                                 "graph g(%x: f32[37,129] cpu) {\n"
                                 "  %0 = softmax(%x, 1) : f32[37,129]\n"
                                 "  return (%0)\n}\n";

/* The one cache file of the directory. */
static void the_cache_file(char *path, size_t size)
{
    DIR *d = opendir(cache_dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)))
        if (e->d_name[0] == 'k') {
            snprintf(path, size, "%s/%s", cache_dir, e->d_name);
            n++;
        }
    closedir(d);
    ck_assert_int_eq(n, 1);
}

static void compile_expect(const ptc_graph *g, int compiled, int cached)
{
    ptc_program *p = compile(g, PTC_BACKEND_CPU, false);
    ptc_program_info info;
    ptc_program_get_info(p, &info);
    ck_assert_int_eq(info.ncompiled, compiled);
    ck_assert_int_eq(info.ncached, cached);
    ptc_tensor in[1];
    ptc_bindings b = {0};
    make_inputs(g, in, &b, 1);
    ck_assert(run_vs_reference(p, g, in, NULL, 0) < 1e-5);
    ptc_tensor_release(&in[0]);
    ptc_program_release(p); /* the last reference unloads the kernel */
}

START_TEST(cache_warm_and_corrupt)
{
    set_cache();
    clear_dir(cache_dir);
    ptc_module *m = parse(cache_graph);
    ptc_graph *g = m->graphs[0];
    compile_expect(g, 1, 0); /* cold */
    compile_expect(g, 0, 1); /* warm: from disk */
    char path[1024];
    the_cache_file(path, sizeof path);
    size_t len;
    ptc_error err;
    char *data = ptc_read_file(path, &len, &err);
    ck_assert_ptr_nonnull(data);
    /* a flipped byte in the object */
    data[len / 2] ^= 0x5a;
    ck_assert_int_eq(ptc_write_file(path, data, len, &err), 0);
    compile_expect(g, 1, 0);
    compile_expect(g, 0, 1); /* rewritten */
    /* truncated */
    ck_assert_int_eq(ptc_write_file(path, data, len / 3, &err), 0);
    compile_expect(g, 1, 0);
    /* a well-formed file for another key */
    ptc_cache_store("some other kernel", 17, (const uint8_t *)"not an object", 13);
    char other[1200];
    ptc_cache_path("some other kernel", 17, other, sizeof other);
    ck_assert_int_eq(rename(other, path), 0);
    compile_expect(g, 1, 0);
    /* garbage */
    ck_assert_int_eq(ptc_write_file(path, "PTCK", 4, &err), 0);
    compile_expect(g, 1, 0);
    compile_expect(g, 0, 1);
    free(data);
    ptc_module_free(m);
    clear_dir(cache_dir);
}
END_TEST

/* The file's object region: "PTCK" v, key length, key, object length, object. */
static void object_region(const uint8_t *data, size_t len, size_t *at, size_t *n)
{
    uint32_t kl;
    uint64_t ol;
    memcpy(&kl, data + 8, 4);
    ck_assert_uint_lt(12 + kl + 8, len);
    memcpy(&ol, data + 12 + kl, 8);
    *at = 12 + kl + 8;
    *n = (size_t)ol;
    ck_assert_uint_le(*at + *n, len);
}

/* Objects altered behind a valid CRC (what a CRC collision, or a tool that
 * rewrites the file, leaves): each once crashed the process (SIGILL,
 * SIGSEGV, SIGFPE, an LLVM abort) or loaded wrong code. Every one must be a
 * miss: recompiled, right, and the file rewritten. */
START_TEST(cache_altered_objects_recompile)
{
    set_cache();
    clear_dir(cache_dir);
    ptc_module *m = parse(cache_graph);
    ptc_graph *g = m->graphs[0];
    compile_expect(g, 1, 0);
    char path[1024];
    the_cache_file(path, sizeof path);
    size_t len;
    ptc_error err;
    uint8_t *good = (uint8_t *)ptc_read_file(path, &len, &err);
    ck_assert_ptr_nonnull(good);
    uint8_t *bad = malloc(len);
    size_t at, n;
    object_region(good, len, &at, &n);
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
    for (int mutant = 0; mutant < 48; mutant++) {
        memcpy(bad, good, len);
        int flips = 1 + mutant % 4;
        for (int f = 0; f < flips; f++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t i = at + (size_t)(seed >> 33) % n;
            bad[i] ^= (uint8_t)(1 + (seed >> 20) % 255);
        }
        uint32_t crc = ptc_crc32(0, bad, len - 4);
        memcpy(bad + len - 4, &crc, 4);
        ck_assert_int_eq(ptc_write_file(path, bad, len, &err), 0);
        compile_expect(g, 1, 0);
    }
    compile_expect(g, 0, 1); /* the last miss rewrote a good file */
    free(bad);
    free(good);
    ptc_module_free(m);
    clear_dir(cache_dir);
}
END_TEST

/* Things that are not a cache file of ours, in place of one: never a hang
 * (a FIFO blocked open() before), never followed, never trusted. */
START_TEST(cache_refuses_what_others_could_write)
{
    set_cache();
    clear_dir(cache_dir);
    ptc_module *m = parse(cache_graph);
    ptc_graph *g = m->graphs[0];
    compile_expect(g, 1, 0);
    struct stat st;
    ck_assert_int_eq(stat(cache_dir, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0700); /* made for its owner alone */
    char path[1024], elsewhere[1100];
    the_cache_file(path, sizeof path);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 077, 0);
    /* a FIFO */
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    compile_expect(g, 1, 0);
    compile_expect(g, 0, 1);
    /* a symbolic link to a good copy of the file */
    snprintf(elsewhere, sizeof elsewhere, "%s.copy", cache_dir);
    ck_assert_int_eq(rename(path, elsewhere), 0);
    ck_assert_int_eq(symlink(elsewhere, path), 0);
    compile_expect(g, 1, 0);
    ck_assert_int_eq(lstat(path, &st), 0);
    ck_assert(S_ISREG(st.st_mode)); /* replaced by a file of its own */
    unlink(elsewhere);
    /* a file others can write */
    ck_assert_int_eq(chmod(path, 0666), 0);
    compile_expect(g, 1, 0);
    compile_expect(g, 0, 1);
    /* a file of another user (only root can make one) */
    if (geteuid() == 0) {
        ck_assert_int_eq(chown(path, 65534, 65534), 0);
        compile_expect(g, 1, 0);
        compile_expect(g, 0, 1);
    }
    /* a directory others can write: not used, nothing written */
    ck_assert_int_eq(chmod(cache_dir, 0777), 0);
    compile_expect(g, 1, 0);
    compile_expect(g, 1, 0);
    ck_assert_int_eq(chmod(cache_dir, 0700), 0);
    compile_expect(g, 0, 1);
    ptc_module_free(m);
    clear_dir(cache_dir);
}
END_TEST

/* ---- compile workers ------------------------------------------------------------------ */

/* Item i: 0 and 5.. succeed, 1 fails, 2 segfaults, 3 aborts (what LLVM ERROR
 * does), 4 exits 1, 5 hangs when ctx says so. Run on as many threads as
 * items in one child, which each death ends: the items left run again, one
 * at a time where several were running, so each death is pinned on its own
 * item and the others still compile. */
static int worker_item(void *ctx, int item, ptc_buf *out, ptc_error *err)
{
    switch (item) {
    case 1:
        return ptc_errorf(err, PTC_ERR_COMPILE, "codegen", "item 1 failed on its own");
    case 2:
        raise(SIGSEGV);
        break;
    case 3:
        abort();
    case 4:
        exit(1);
    case 5:
        if (*(const bool *)ctx)
            for (;;)
                pause();
        break;
    }
    ptc_buf_printf(out, "result %d", item);
    return 0;
}

START_TEST(worker_failures_stay_in_the_worker)
{
    enum { N = 8 };
    ptc_worker_result res[N];
    bool hang = false;
    ck_assert_int_eq(ptc_worker_run(N, N, worker_item, &hang, res), 0);
    for (int i = 0; i < N; i++) {
        if (i == 0 || i >= 5) {
            ck_assert_int_eq(res[i].rc, 0);
            char want[32];
            snprintf(want, sizeof want, "result %d", i);
            ck_assert_uint_eq(res[i].out.len, strlen(want));
            ck_assert_int_eq(memcmp(res[i].out.data, want, res[i].out.len), 0);
        } else {
            ck_assert_int_eq(res[i].rc, -1);
            ck_assert_int_eq(res[i].err.cls, PTC_ERR_COMPILE);
        }
        ptc_buf_free(&res[i].out);
    }
    ck_assert(!res[1].died);
    ck_assert_str_eq(res[1].err.msg, "item 1 failed on its own");
    ck_assert(res[2].died && strstr(res[2].err.msg, "crashed (signal 11, "));
    ck_assert(res[3].died && strstr(res[3].err.msg, "crashed (signal 6, "));
    ck_assert(res[4].died && strstr(res[4].err.msg, "exited with status 1"));
    /* a hang is cut off at PTC_COMPILE_TIMEOUT */
    hang = true;
    setenv("PTC_COMPILE_TIMEOUT", "1", 1);
    double t0 = ptc_now_ms();
    ck_assert_int_eq(ptc_worker_run(N, N, worker_item, &hang, res), 0);
    unsetenv("PTC_COMPILE_TIMEOUT");
    ck_assert(ptc_now_ms() - t0 < 10e3);
    ck_assert(res[5].died && strstr(res[5].err.msg, "ran past the compile time limit"));
    ck_assert(res[2].died && strstr(res[2].err.msg, "crashed (signal 11, "));
    for (int i = 0; i < N; i++)
        ptc_buf_free(&res[i].out);
}
END_TEST

/* The host's Ctrl-C as a hook would see it: interrupted from its 5th question on. */
static atomic_int interrupt_questions;
static bool interrupted_after_a_while(void)
{
    return atomic_fetch_add(&interrupt_questions, 1) >= 4;
}

/* Ctrl-C while a worker hangs: the parent stops the child and every item not
 * done fails saying so, long before the time limit, and the next run is not
 * interrupted (Python sleeps through SIGINT: it waited for the limit). */
START_TEST(worker_stops_when_the_user_interrupts)
{
    enum { N = 8 };
    ptc_worker_result res[N];
    bool hang = true;
    ptc_set_interrupt_check(interrupted_after_a_while);
    double t0 = ptc_now_ms();
    ck_assert_int_eq(ptc_worker_run(N, 1, worker_item, &hang, res), 0);
    ck_assert(ptc_now_ms() - t0 < 60e3); /* the limit is 600 s */
    ck_assert_int_eq(res[0].rc, 0);
    ck_assert(res[5].died && strstr(res[5].err.msg, "interrupted (Ctrl-C)"));
    for (int i = 6; i < N; i++)
        ck_assert(res[i].rc == -1 &&
                  strstr(res[i].err.msg, "not compiled: the compile was interrupted"));
    for (int i = 0; i < N; i++)
        ptc_buf_free(&res[i].out);
    ptc_set_interrupt_check(NULL);
    hang = false;
    ck_assert_int_eq(ptc_worker_run(1, 1, worker_item, &hang, res), 0);
    ck_assert_int_eq(res[0].rc, 0);
    ptc_buf_free(&res[0].out);
}
END_TEST

/* FIPS 180-4 (and its examples' companion vectors), plus the padding edges. */
START_TEST(sha256_vectors)
{
    static const struct {
        const char *msg;
        size_t repeat;
        const char *hex;
    } v[] = {
        {"", 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
         "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
         1, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
        {"a", 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
        {"x", 55, "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072"},
        {"x", 56, "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e"},
        {"x", 64, "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c"},
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        ptc_sha256 s;
        ptc_sha256_init(&s);
        for (size_t r = 0; r < v[i].repeat; r++)
            ptc_sha256_update(&s, v[i].msg, strlen(v[i].msg));
        uint8_t d[PTC_SHA256_LEN];
        ptc_sha256_final(&s, d);
        char hex[2 * PTC_SHA256_LEN + 1];
        for (int j = 0; j < PTC_SHA256_LEN; j++)
            snprintf(hex + 2 * j, 3, "%02x", d[j]);
        ck_assert_str_eq(hex, v[i].hex);
    }
    /* one call over the whole message equals the piecewise one */
    uint8_t a[PTC_SHA256_LEN], b[PTC_SHA256_LEN];
    ptc_sha256_bytes("abc", 3, a);
    ptc_sha256 s;
    ptc_sha256_init(&s);
    ptc_sha256_update(&s, "a", 1);
    ptc_sha256_update(&s, "bc", 2);
    ptc_sha256_final(&s, b);
    ck_assert_mem_eq(a, b, PTC_SHA256_LEN);
}
END_TEST

START_TEST(in_process_sharing)
{
    set_cache();
    ptc_module *m = parse(cache_graph);
    ptc_program *p1 = compile(m->graphs[0], PTC_BACKEND_CPU, true);
    ptc_program *p2 = compile(m->graphs[0], PTC_BACKEND_CPU, true);
    ptc_program_info i1, i2;
    ptc_program_get_info(p1, &i1);
    ptc_program_get_info(p2, &i2);
    ck_assert_int_eq(i1.ncompiled, 1);
    ck_assert_int_eq(i2.ncached, 1); /* the loaded kernel is shared */
    ptc_program_release(p1);
    ptc_tensor in[1];
    ptc_bindings b = {0};
    make_inputs(m->graphs[0], in, &b, 3);
    ck_assert(run_vs_reference(p2, m->graphs[0], in, NULL, 0) < 1e-5);
    ptc_tensor_release(&in[0]);
    ptc_program_release(p2);
    ptc_module_free(m);
    clear_dir(cache_dir);
}
END_TEST

/* Programs compiled together (a training step's forward and backward) build
 * a kernel they share once, and run as each would alone. */
START_TEST(a_batch_builds_a_shared_kernel_once)
{
    set_cache();
    ptc_module *m = parse(cache_graph);
    ptc_error err;
    ptc_compile_opts o = {.backend = PTC_BACKEND_CPU, .no_cache = true};
    const ptc_graph *gs[2] = {m->graphs[0], m->graphs[0]};
    const ptc_compile_opts *os[2] = {&o, &o};
    ptc_program *ps[2];
    FILE *log = tmpfile();
    ck_assert_ptr_nonnull(log);
    ck_assert_int_eq(ptc_log_configure("perf", &err), 0);
    ptc_log_set_stream(log);
    int rc = ptc_compile_all(gs, os, 2, ps, &err);
    ptc_log_set_stream(stderr);
    ck_assert_int_eq(ptc_log_configure("", &err), 0);
    ck_assert_msg(rc == 0, "%s", err.msg);
    char said[4096] = "";
    rewind(log);
    said[fread(said, 1, sizeof said - 1, log)] = 0;
    fclose(log);
    if (ptc_worker_enabled()) /* off in ASan builds: built in process */
        ck_assert_msg(strstr(said, "compile workers: 1 item(s), 1 fork(s)"), "%s", said);
    ptc_program_info i1, i2;
    ptc_program_get_info(ps[0], &i1);
    ptc_program_get_info(ps[1], &i2);
    ck_assert_int_eq(i1.ncompiled, 1);
    ck_assert_int_eq(i2.ncached, 1); /* the first's kernel, linked once */
    ptc_tensor in[1];
    ptc_bindings b = {0};
    make_inputs(m->graphs[0], in, &b, 3);
    for (int i = 0; i < 2; i++)
        ck_assert(run_vs_reference(ps[i], m->graphs[0], in, NULL, 0) < 1e-5);
    ptc_tensor_release(&in[0]);
    ptc_program_release(ps[0]);
    ptc_program_release(ps[1]);
    ptc_module_free(m);
    clear_dir(cache_dir);
}
END_TEST

/* ---- host hooks ------------------------------------------------------------------------ */

typedef struct fake_host {
    int allocs, externs;
    ptc_op last_op;
} fake_host;

static int host_alloc(void *ctx, ptc_tensor *t, ptc_dtype dt, int ndim, const int64_t *sizes,
                      ptc_device dev, ptc_error *err)
{
    ((fake_host *)ctx)->allocs++;
    ck_assert_int_eq(dev.kind, PTC_DEV_CPU);
    return ptc_tensor_alloc(t, dt, ndim, sizes, err);
}

/* A naive mm / addmm in double. */
static int host_extern(void *ctx, const ptc_node *node, const ptc_tensor *const *in, int nin,
                       ptc_tensor *outs, ptc_error *err)
{
    fake_host *h = ctx;
    h->externs++;
    h->last_op = node->op;
    const ptc_tensor *a = in[nin - 2], *b = in[nin - 1];
    const ptc_tensor *bias = node->op == PTC_OP_ADDMM ? in[0] : NULL;
    for (int64_t i = 0; i < outs[0].sizes[0]; i++)
        for (int64_t j = 0; j < outs[0].sizes[1]; j++) {
            double acc = 0;
            for (int64_t k = 0; k < a->sizes[1]; k++) {
                int64_t ia[2] = {i, k}, ib[2] = {k, j};
                acc += ptc_tensor_get_f64(a, ia) * ptc_tensor_get_f64(b, ib);
            }
            int64_t jb[1] = {j}, io[2] = {i, j};
            if (bias)
                acc += ptc_tensor_get_f64(bias, jb);
            ptc_tensor_set_f64(&outs[0], io, acc);
        }
    (void)err;
    return 0;
}

/* A graph run through a fake host: parsed, compiled for the CPU, its
 * inputs random from seed. */
typedef struct host_case {
    ptc_module *m;
    ptc_graph *g;
    ptc_program *p;
    ptc_tensor in[8];
} host_case;

static void host_case_open(host_case *c, const char *text, uint64_t seed)
{
    set_cache();
    c->m = parse(text);
    c->g = c->m->graphs[0];
    ck_assert_int_le(c->g->ninputs, 8);
    c->p = compile(c->g, PTC_BACKEND_CPU, false);
    ptc_bindings b = {0};
    make_inputs(c->g, c->in, &b, seed);
}

static void host_case_close(host_case *c)
{
    for (int i = 0; i < c->g->ninputs; i++)
        ptc_tensor_release(&c->in[i]);
    ptc_program_release(c->p);
    ptc_module_free(c->m);
    clear_dir(cache_dir);
}

START_TEST(host_hooks)
{
    host_case c;
    host_case_open(&c,
                   "# ptc ir v1\n"
                   "graph g(%x: f32[5,8] cpu, %w: f32[6,8] cpu, %b: f32[6] cpu) {\n"
                   "  %0 = linear(%x, %w, %b) : f32[5,6]\n"
                   "  %1 = relu(%0) : f32[5,6]\n"
                   "  %2 = t(%x) : f32[8,5]\n"
                   "  %3 = mm(%x, %2) : f32[5,5]\n"
                   "  return (%1, %0)\n}\n",
                   9);
    fake_host fh = {0};
    ptc_host host = {.ctx = &fh, .alloc = host_alloc, .run_extern = host_extern};
    ck_assert(run_vs_reference(c.p, c.g, c.in, &host, 0) < 1e-5);
    ck_assert_int_eq(fh.allocs, 2);          /* both outputs */
    ck_assert_int_eq(fh.externs, 1);         /* the dead mm is gone */
    ck_assert_int_eq(fh.last_op, PTC_OP_ADDMM); /* linear's bias folded in */
    host_case_close(&c);
}
END_TEST

/* run_extern_new's results are freed once their buffers are last read, as
 * eager frees intermediates, not at the end of the run: a chain of four
 * matmuls with a relu after each holds one result at a time, not three (the
 * last is the graph's output); and the arena has no room for them, only for
 * a relu's result. */
static int live_results, most_live_results;

static void release_counted(ptc_storage *s)
{
    live_results--;
    free(s->data);
    free(s);
}

static int host_extern_new(void *ctx, const ptc_node *node, const ptc_tensor *const *in, int nin,
                           ptc_tensor *outs, ptc_error *err)
{
    ptc_tensor want = outs[0]; /* the buffer's type and sizes */
    if (ptc_tensor_alloc(&outs[0], want.dtype, want.ndim, want.sizes, err))
        return -1;
    outs[0].storage->release = release_counted;
    if (++live_results > most_live_results)
        most_live_results = live_results;
    return host_extern(ctx, node, in, nin, outs, err);
}

START_TEST(extern_results_are_freed_after_their_last_read)
{
    host_case c;
    host_case_open(&c,
                   "# ptc ir v1\n"
                   "graph g(%x: f32[4,4] cpu, %w: f32[4,4] cpu) {\n"
                   "  %0 = mm(%x, %w) : f32[4,4]\n  %1 = relu(%0) : f32[4,4]\n"
                   "  %2 = mm(%1, %w) : f32[4,4]\n  %3 = relu(%2) : f32[4,4]\n"
                   "  %4 = mm(%3, %w) : f32[4,4]\n  %5 = relu(%4) : f32[4,4]\n"
                   "  %6 = mm(%5, %w) : f32[4,4]\n  return (%6)\n}\n",
                   3);
    fake_host fh = {0};
    ptc_host host = {.ctx = &fh, .alloc = host_alloc, .run_extern = host_extern,
                     .run_extern_new = host_extern_new};
    live_results = most_live_results = 0;
    ck_assert(run_vs_reference(c.p, c.g, c.in, &host, 0) < 1e-4);
    ck_assert_int_eq(fh.externs, 4);
    ck_assert_int_eq(most_live_results, 1);
    ptc_program_info info;
    ptc_program_get_info(c.p, &info);
    ck_assert_int_eq(info.arena_bytes, 4 * 4 * sizeof(float)); /* one relu's result at a time */
    host_case_close(&c);
}
END_TEST

/* ptc_host.writes_in_place: an extern the host writes straight into ptc's
 * buffers (torch's out= forms) is given them through run_extern, never asked
 * for new results through run_extern_new, which would have torch allocate,
 * ptc read back and free each one per call. */
static bool mm_in_place(void *ctx, const ptc_node *node)
{
    (void)ctx;
    return node->op == PTC_OP_MM;
}

START_TEST(externs_written_in_place_are_given_buffers)
{
    host_case c;
    host_case_open(&c,
                   "# ptc ir v1\n"
                   "graph g(%x: f32[4,4] cpu, %w: f32[4,4] cpu) {\n"
                   "  %0 = mm(%x, %w) : f32[4,4]\n  %1 = relu(%0) : f32[4,4]\n"
                   "  %2 = mm(%1, %w) : f32[4,4]\n  return (%2)\n}\n",
                   5);
    fake_host fh = {0};
    ptc_host host = {.ctx = &fh, .alloc = host_alloc, .run_extern = host_extern,
                     .run_extern_new = host_extern_new, .writes_in_place = mm_in_place};
    live_results = most_live_results = 0;
    ck_assert(run_vs_reference(c.p, c.g, c.in, &host, 0) < 1e-4);
    ck_assert_int_eq(fh.externs, 2);
    ck_assert_int_eq(most_live_results, 0); /* run_extern_new was not called */
    ck_assert_int_eq(fh.allocs, 1);        /* the output, which the second mm writes */
    host_case_close(&c);
}
END_TEST

/* ptc_host.input_done: each input is let go after the last step that reads
 * it (a training backward's saved tensors go back to the allocator as
 * eager's do), not at the end of the run: x and w after the first matmul,
 * v after the second, the unread u after the first step. */
static int inputs_done_at[4];
static fake_host *done_host;

static void input_done(void *ctx, int input)
{
    ck_assert_ptr_eq(ctx, done_host);
    ck_assert_int_eq(inputs_done_at[input], -1); /* once */
    inputs_done_at[input] = done_host->externs;
}

START_TEST(inputs_are_let_go_after_their_last_read)
{
    host_case c;
    host_case_open(&c,
                   "# ptc ir v1\n"
                   "graph g(%x: f32[4,4] cpu, %w: f32[4,4] cpu, %v: f32[4,4] cpu, "
                   "%u: f32[4] cpu) {\n"
                   "  %0 = mm(%x, %w) : f32[4,4]\n  %1 = relu(%0) : f32[4,4]\n"
                   "  %2 = mm(%1, %v) : f32[4,4]\n  %3 = relu(%2) : f32[4,4]\n"
                   "  return (%3)\n}\n",
                   3);
    fake_host fh = {0};
    done_host = &fh;
    ptc_host host = {.ctx = &fh, .alloc = host_alloc, .run_extern = host_extern,
                     .input_done = input_done};
    for (int i = 0; i < 4; i++)
        inputs_done_at[i] = -1;
    ck_assert(run_vs_reference(c.p, c.g, c.in, &host, 0) < 1e-4);
    ck_assert_int_eq(fh.externs, 2);
    ck_assert_int_eq(inputs_done_at[0], 1); /* x: after the first matmul */
    ck_assert_int_eq(inputs_done_at[1], 1); /* w */
    ck_assert_int_eq(inputs_done_at[2], 2); /* v: after the second */
    ck_assert_int_eq(inputs_done_at[3], 1); /* u: read by nothing, after the first step */
    host_case_close(&c);
}
END_TEST

/* Outputs are allocated at the step that first writes them, not at the
 * run's start: a training backward writes its first gradient last, and
 * eager makes its gradients one node at a time (all of them allocated at the
 * start held every gradient beside every saved tensor: resnet18's backward
 * peaked 44 MiB over eager's). relu(x w) is written after the first matmul,
 * relu(relu(x w) w) after the second. */
static int allocs_at[4];
static fake_host *alloc_host;

static int alloc_recorded(void *ctx, ptc_tensor *t, ptc_dtype dt, int ndim, const int64_t *sizes,
                          ptc_device dev, ptc_error *err)
{
    ck_assert_ptr_eq(ctx, alloc_host);
    allocs_at[alloc_host->allocs] = alloc_host->externs;
    return host_alloc(ctx, t, dt, ndim, sizes, dev, err);
}

START_TEST(outputs_are_allocated_when_first_written)
{
    host_case c;
    host_case_open(&c,
                   "# ptc ir v1\n"
                   "graph g(%x: f32[4,4] cpu, %w: f32[4,4] cpu) {\n"
                   "  %0 = mm(%x, %w) : f32[4,4]\n  %1 = relu(%0) : f32[4,4]\n"
                   "  %2 = mm(%1, %w) : f32[4,4]\n  %3 = relu(%2) : f32[4,4]\n"
                   "  return (%3, %1)\n}\n",
                   7);
    fake_host fh = {0};
    alloc_host = &fh;
    ptc_host host = {.ctx = &fh, .alloc = alloc_recorded, .run_extern = host_extern};
    ck_assert(run_vs_reference(c.p, c.g, c.in, &host, 0) < 1e-4);
    ck_assert_int_eq(fh.allocs, 2);
    ck_assert_int_eq(allocs_at[0], 1); /* relu(x w): after the first matmul */
    ck_assert_int_eq(allocs_at[1], 2); /* the last relu: after the second */
    host_case_close(&c);
}
END_TEST

/* An output an extern's result becomes (a convolution's weight gradient)
 * is not allocated first: that tensor was released unwritten when torch's
 * result took its place, one gradient's bytes more at that step. */
START_TEST(outputs_externs_hand_over_are_not_allocated)
{
    host_case c;
    host_case_open(&c,
                   "# ptc ir v1\n"
                   "graph g(%x: f32[4,4] cpu, %w: f32[4,4] cpu) {\n"
                   "  %0 = mm(%x, %w) : f32[4,4]\n  %1 = relu(%0) : f32[4,4]\n"
                   "  %2 = mm(%1, %w) : f32[4,4]\n  return (%2)\n}\n",
                   8);
    fake_host fh = {0};
    ptc_host host = {.ctx = &fh, .alloc = host_alloc, .run_extern = host_extern,
                     .run_extern_new = host_extern_new};
    live_results = most_live_results = 0;
    ck_assert(run_vs_reference(c.p, c.g, c.in, &host, 0) < 1e-4);
    ck_assert_int_eq(fh.externs, 2);
    ck_assert_int_eq(fh.allocs, 0); /* the second mm's result is the output */
    host_case_close(&c);
}
END_TEST

/* ---- threads ------------------------------------------------------------------------- */

/* Every thread this process starts (libgomp's included: this definition
 * interposes on libc's, which it calls). */
static atomic_int threads_started;

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    static int (*libc_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    if (!libc_create)
        *(void **)&libc_create = dlsym(RTLD_NEXT, "pthread_create");
    atomic_fetch_add(&threads_started, 1);
    return libc_create(t, attr, fn, arg);
}

/* A convolution of one image (one task) runs on the calling thread and its
 * GEMM on the team: the OpenMP pool's threads, started once. A parallel
 * region around the task whose if() was false made each GEMM's team a
 * nested one, which libgomp starts with new threads on every call (resnet50
 * from C: 53 threads a call on 2 cores, 795 on 16). */
START_TEST(a_serial_convolution_starts_no_threads_per_call)
{
    omp_set_num_threads(2);
    ptc_module *m = parse("# ptc ir v1\n"
                          "graph g(%x: f32[1,64,32,32] cpu, %w: f32[64,64,3,3] cpu) {\n"
                          "  %0 = conv2d(%x, %w, none, 1, 1) : f32[1,64,32,32]\n"
                          "  return (%0)\n}\n");
    ptc_graph *g = m->graphs[0];
    ptc_program *p = compile(g, PTC_BACKEND_CPU, true);
    ptc_tensor in[2];
    make_inputs(g, in, NULL, 3);
    ck_assert(run_vs_reference(p, g, in, NULL, 0) < 1e-3); /* starts the pool */
    int before = atomic_load(&threads_started);
    for (int k = 0; k < 3; k++)
        ck_assert(run_vs_reference(p, g, in, NULL, 0) < 1e-3);
    int started = atomic_load(&threads_started) - before;
    ck_assert_msg(started == 0, "3 calls started %d threads", started);
    for (int i = 0; i < 2; i++)
        ptc_tensor_release(&in[i]);
    ptc_program_release(p);
    ptc_module_free(m);
}
END_TEST

/* ---- the JIT's memory ------------------------------------------------------------------- */

/* One free page above a 4 GiB wall, every other gap above the wall filled:
 * a linker that maps an object's sections one at a time puts the first in
 * that page and the next below the wall, out of reach of the code's 32-bit
 * RIP-relative offsets (a SIGSEGV on the first constant-pool load, as a
 * 10,000-op Python loop had in a process full of torch's libraries). */
START_TEST(sections_stay_within_reach)
{
    set_cache();
    ptc_module *m = parse("# ptc ir v1\n"
                          "graph g(%x: f32[19,64] cpu) {\n"
                          "  %0 = tanh(%x) : f32[19,64]\n"
                          "  %1 = softmax(%0, 1) : f32[19,64]\n"
                          "  return (%1)\n}\n");
    size_t page = (size_t)sysconf(_SC_PAGESIZE), wall_size = ((size_t)4 << 30) + page;
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    uint8_t *wall = mmap(NULL, wall_size, PROT_NONE, flags, -1, 0);
    ck_assert(wall != MAP_FAILED);
    size_t nfill = 0, cap = 1024;
    void **fill = malloc(cap * sizeof *fill);
    for (;;) {
        void *p = mmap(NULL, page, PROT_NONE, flags, -1, 0);
        ck_assert(p != MAP_FAILED);
        if ((uint8_t *)p < wall) { /* no gap left above the wall */
            munmap(p, page);
            break;
        }
        if (nfill == cap)
            fill = realloc(fill, (cap *= 2) * sizeof *fill);
        fill[nfill++] = p;
    }
    munmap(wall + wall_size - page, page); /* the one free page */
    ptc_program *p = compile(m->graphs[0], PTC_BACKEND_CPU, true);
    ptc_tensor in[1];
    ptc_bindings b = {0};
    make_inputs(m->graphs[0], in, &b, 5);
    ck_assert(run_vs_reference(p, m->graphs[0], in, NULL, 0) < 1e-5);
    ptc_tensor_release(&in[0]);
    ptc_program_release(p);
    for (size_t i = 0; i < nfill; i++)
        munmap(fill[i], page);
    free(fill);
    munmap(wall, wall_size - page);
    ptc_module_free(m);
    clear_dir(cache_dir);
}
END_TEST

#ifdef PTC_ASAN
enum { ASAN_REPORTED = 77 };
static void asan_reported(void) { _exit(ASAN_REPORTED); }

/* An ASan build's kernels are instrumented (codegen/cpu/jit.c): a kernel
 * reading past its input (a tensor of 64 floats over 63 malloc'd) is
 * reported as C code would be, the report ending the test's process
 * through the death callback. Uninstrumented, it ran on unseen. */
START_TEST(asan_sees_a_kernel_read_past_its_input)
{
    set_cache();
    ptc_module *m = parse("# ptc ir v1\n"
                          "graph g(%x: f32[64] cpu) {\n"
                          "  %0 = neg(%x) : f32[64]\n"
                          "  return (%0)\n}\n");
    ptc_program *p = compile(m->graphs[0], PTC_BACKEND_CPU, true);
    float *short_of_one = calloc(63, sizeof *short_of_one);
    int64_t n = 64;
    ptc_tensor in = ptc_tensor_borrow(short_of_one, PTC_F32, 1, &n, NULL);
    ptc_tensor out[1] = {{0}};
    ptc_error err;
    __sanitizer_set_death_callback(asan_reported);
    ptc_program_run(p, &in, 1, out, NULL, 0, &err);
    ck_abort_msg("a kernel read past its input and ASan did not report it");
}
END_TEST
#endif

/* ---- shapes and layouts ------------------------------------------------------------------ */

START_TEST(symbolic_sizes)
{
    set_cache();
    ptc_module *m = parse("# ptc ir v1\n"
                          "graph g(%x: f32[s0,s1] cpu, %w: f32[s1] cpu) {\n"
                          "  %0 = mul(%x, %w) : f32[s0,s1]\n"
                          "  %1 = layer_norm(%0, [s1]) : f32[s0,s1]\n"
                          "  %2 = view(%1, [s0*s1]) : f32[s0*s1]\n"
                          "  %3 = sum(%x, [0]) : f32[s1]\n"
                          "  return (%2, %3)\n}\n");
    ptc_graph *g = m->graphs[0];
    ptc_program *p = compile(g, PTC_BACKEND_CPU, true);
    int64_t sizes[][2] = {{3, 5}, {17, 100}, {1, 1}, {0, 7}, {64, 33}};
    for (int t = 0; t < 5; t++) {
        ptc_bindings b = {0};
        ptc_bindings_set(&b, "s0", sizes[t][0]);
        ptc_bindings_set(&b, "s1", sizes[t][1]);
        ptc_tensor in[2];
        make_inputs(g, in, &b, (uint64_t)t);
        ck_assert_msg(run_vs_reference(p, g, in, NULL, 0) < 1e-4, "sizes %lld x %lld",
                      (long long)sizes[t][0], (long long)sizes[t][1]);
        ptc_tensor_release(&in[0]);
        ptc_tensor_release(&in[1]);
    }
    ptc_program_release(p);
    ptc_module_free(m);
    clear_dir(cache_dir);
}
END_TEST

START_TEST(strided_inputs)
{
    set_cache();
    ptc_module *m = parse("# ptc ir v1\n"
                          "graph g(%x: f32[6,10] cpu) {\n"
                          "  %0 = exp(%x) : f32[6,10]\n"
                          "  %1 = sum(%0, [1]) : f32[6]\n"
                          "  return (%0, %1)\n}\n");
    ptc_graph *g = m->graphs[0];
    ptc_program *p = compile(g, PTC_BACKEND_CPU, true);
    /* a transposed view: the runtime must not read it as contiguous */
    float *data = malloc(sizeof(float) * 60);
    for (int i = 0; i < 60; i++)
        data[i] = (float)((i * 37) % 11) / 7.0f;
    int64_t sizes[2] = {6, 10}, strides[2] = {1, 6};
    ptc_tensor x = ptc_tensor_borrow(data, PTC_F32, 2, sizes, strides);
    ck_assert(run_vs_reference(p, g, &x, NULL, 0) < 1e-5);
    free(data);
    ptc_program_release(p);
    ptc_module_free(m);
    clear_dir(cache_dir);
}
END_TEST

/* ---- backends, stage texts, the trace ----------------------------------------------------- */

START_TEST(backends)
{
    set_cache();
    ptc_module *m = parse(cache_graph);
    ptc_error err;
    ptc_compile_opts o = {.backend = PTC_BACKEND_CUDA};
    ck_assert_ptr_null(ptc_compile(m->graphs[0], &o, &err));
    ck_assert_int_eq(err.cls, PTC_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "CUDA"));
    ptc_program *r = compile(m->graphs[0], PTC_BACKEND_REFERENCE, false);
    ptc_tensor in[1];
    ptc_bindings b = {0};
    make_inputs(m->graphs[0], in, &b, 4);
    ck_assert(run_vs_reference(r, m->graphs[0], in, NULL, 0) == 0);
    ptc_tensor_release(&in[0]);
    ptc_program_release(r);
    /* an op the CPU backend cannot lower fails with Unsupported naming it */
    ptc_module *s = parse("# ptc ir v1\n"
                          "graph g(%x: f32[1,2,s0,s0] cpu) {\n"
                          "  %0 = avg_pool2d(%x, [2, 2]) : f32[1,2,s0//2,s0//2]\n"
                          "  return (%0)\n}\n");
    ptc_compile_opts c = {.backend = PTC_BACKEND_CPU};
    ck_assert_ptr_null(ptc_compile(s->graphs[0], &c, &err));
    ck_assert_int_eq(err.cls, PTC_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err.msg, "avg_pool2d"));
    ptc_module_free(s);
    ptc_module_free(m);
    clear_dir(cache_dir);
}
END_TEST

START_TEST(texts_and_trace)
{
    set_cache();
    char dir[512];
    snprintf(dir, sizeof dir, "%s_trace", cache_dir);
    ptc_module *m = parse(cache_graph);
    ptc_error err;
    ptc_trace *t = ptc_trace_open(dir, &err);
    ck_assert_ptr_nonnull(t);
    ptc_trace_compile *tc = ptc_trace_begin(t, "g", 0, "g", "test", 1, "test", &err);
    ck_assert_ptr_nonnull(tc);
    ptc_metrics metrics = {0};
    ptc_compile_opts o = {.backend = PTC_BACKEND_CPU, .trace = tc, .keep_text = true, .metrics = &metrics};
    ptc_program *p = ptc_compile(m->graphs[0], &o, &err);
    ck_assert_msg(p != NULL, "%s", err.msg);
    ck_assert_int_eq(ptc_trace_end(tc, &err), 0);
    const char *folder = NULL;
    (void)folder;
    ck_assert_ptr_nonnull(strstr(ptc_program_text(p, "prims"), "prims.amax"));
    ck_assert_ptr_nonnull(strstr(ptc_program_text(p, "loops"), "reduction max"));
    ck_assert_ptr_nonnull(strstr(ptc_program_text(p, "kernels"), "kernel 0 "));
    ck_assert_ptr_nonnull(strstr(ptc_program_text(p, "llvm"), "; ptc kernel 0 "));
    ck_assert(ptc_metrics_get(&metrics, "codegen") >= 0);
    ck_assert_int_eq((int)ptc_metrics_get(&metrics, "kernel_count"), 1);
    /* the stage's time is its own, not added to the kernel count */
    for (int i = 0; i < metrics.n; i++)
        if (strcmp(metrics.items[i].name, "kernels") == 0)
            ck_assert(metrics.items[i].is_time);
    static const char *files[] = {"captured.ptir", "prims.ptir", "loops.txt", "kernels.txt",
                                  "kernel_0.ll", "metrics.json"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/g_0/%s", dir, files[i]);
        size_t len;
        char *data = ptc_read_file(path, &len, &err);
        ck_assert_msg(data != NULL, "trace lacks %s", files[i]);
        if (strcmp(files[i], "kernel_0.ll") == 0)
            ck_assert_msg(strncmp(data, "; ptc kernel 0 ", 15) == 0, "kernel_0.ll header: %.60s", data);
        free(data);
    }
    ptc_trace_close(t);
    ptc_program_release(p);
    ptc_module_free(m);
    clear_dir(dir);
    clear_dir(cache_dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("codegen_cpu");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, dropout_and_rand_bit_exact);
    tcase_add_test(tc, cache_warm_and_corrupt);
    tcase_add_test(tc, in_process_sharing);
    tcase_add_test(tc, a_batch_builds_a_shared_kernel_once);
    tcase_add_test(tc, sections_stay_within_reach);
    tcase_add_test(tc, host_hooks);
    tcase_add_test(tc, extern_results_are_freed_after_their_last_read);
    tcase_add_test(tc, inputs_are_let_go_after_their_last_read);
    tcase_add_test(tc, outputs_are_allocated_when_first_written);
    tcase_add_test(tc, outputs_externs_hand_over_are_not_allocated);
    tcase_add_test(tc, externs_written_in_place_are_given_buffers);
    tcase_add_test(tc, symbolic_sizes);
    tcase_add_test(tc, strided_inputs);
    tcase_add_test(tc, backends);
    tcase_add_test(tc, texts_and_trace);
    tcase_add_test(tc, a_serial_convolution_starts_no_threads_per_call);
#ifdef PTC_ASAN
    tcase_add_exit_test(tc, asan_sees_a_kernel_read_past_its_input, ASAN_REPORTED);
#endif
    suite_add_tcase(s, tc);
    /* short timeouts: a cache file that blocks must fail, not stall the suite */
    TCase *mutants = tcase_create("mutants"); /* 48 compiles: slow under ASan */
    tcase_set_timeout(mutants, 400);
    tcase_add_test(mutants, cache_altered_objects_recompile);
    suite_add_tcase(s, mutants);
    TCase *cache = tcase_create("cache");
    tcase_set_timeout(cache, 60);
    tcase_add_test(cache, cache_refuses_what_others_could_write);
    tcase_add_test(cache, sha256_vectors);
    tcase_add_test(cache, worker_failures_stay_in_the_worker);
    tcase_add_test(cache, worker_stops_when_the_user_interrupts);
    suite_add_tcase(s, cache);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
