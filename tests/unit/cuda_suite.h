/* What the CUDA codegen suites share (test_codegen_cuda.c,
 * test_codegen_cuda_columns.c, test_codegen_cuda_rows.c, test_cuda_rng.c):
 * a suite's main (run_cuda_suite), a per-process PTX cache
 * directory (the fixture), compiling .ptir text for an explicit sm target
 * without a GPU, a graph's schedule and one kernel's PTX, picking a kernel's
 * or combination's PTX module out of a program's text, and assembling
 * modules with ptxas (PTC_PTXAS or /usr/local/cuda/bin) when the CUDA
 * toolkit is installed. Include after check.h. */
#ifndef PTC_TEST_CUDA_SUITE_H
#define PTC_TEST_CUDA_SUITE_H

#include "codegen/codegen.h"
#include "passes/passes.h"
#include "pipeline/pipeline.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char cache_dir[256];

static inline void clear_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char p[1024];
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p)
            continue;
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
            clear_dir(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static inline void setup(void)
{
    snprintf(cache_dir, sizeof cache_dir, "/tmp/ptc_test_cuda_cache_%d", (int)getpid());
    setenv("PTC_CACHE_DIR", cache_dir, 1);
}

static inline void teardown(void)
{
    clear_dir(cache_dir);
}

static inline ptc_module *parse(const char *text)
{
    ptc_error err;
    ptc_module *m = ptc_parse_module(text, strlen(text), "test", &err);
    ck_assert_msg(m != NULL, "%s", err.msg);
    return m;
}

static inline ptc_program *compile_ptx(const ptc_graph *g, int sm, bool no_cache,
                                       ptc_trace_compile *tc)
{
    ptc_error err;
    ptc_compile_opts o = {.backend = PTC_BACKEND_CUDA,
                          .cuda_sm = sm,
                          .keep_text = true,
                          .no_cache = no_cache,
                          .trace = tc};
    ptc_program *p = ptc_compile(g, &o, &err);
    ck_assert_msg(p != NULL, "%s: %s: %s", err.stage, ptc_errclass_name(err.cls), err.msg);
    return p;
}

static inline int count(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

/* The PTX module under header `head` (up to the next "; ptc " header: a
 * kernel's, or a horizontal combination's after its first member's). */
static inline char *module_ptx(const char *all, const char *head)
{
    const char *p = strstr(all, head);
    if (!p)
        return NULL;
    p = strchr(p, '\n') + 1;
    const char *end = strstr(p, "\n; ptc ");
    size_t n = end ? (size_t)(end - p + 1) : strlen(p);
    return strndup(p, n);
}

/* The PTX of kernel k. */
static inline char *kernel_ptx(const char *all, int k)
{
    char head[32];
    snprintf(head, sizeof head, "; ptc kernel %d ", k);
    return module_ptx(all, head);
}

/* The vectorised entry ("..._v(" on) of kernel k's PTX, or NULL. */
static inline char *vector_entry_ptx(const char *all, int k)
{
    char *one = kernel_ptx(all, k);
    const char *v = one ? strstr(one, "_v(") : NULL;
    char *out = v ? strdup(v) : NULL;
    free(one);
    return out;
}

static inline const char *ptxas(void)
{
    static char path[512];
    const char *env = getenv("PTC_PTXAS");
    if (env && *env)
        snprintf(path, sizeof path, "%s", env);
    else
        snprintf(path, sizeof path, "/usr/local/cuda/bin/ptxas");
    return access(path, X_OK) == 0 ? path : NULL;
}

/* Assembles one module with ptxas when it is installed; 1 if it was. */
static inline int assemble(const char *ptx, int sm)
{
    const char *as = ptxas();
    if (!as)
        return 0;
    char file[300], cmd[1024];
    snprintf(file, sizeof file, "%s/module.ptx", cache_dir);
    mkdir(cache_dir, 0755);
    FILE *f = fopen(file, "w");
    ck_assert(f != NULL);
    fputs(ptx, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s -arch=sm_%d %s -o /dev/null 2>&1", as, sm, file);
    int rc = system(cmd);
    ck_assert_msg(rc == 0, "ptxas rejected a module for sm_%d:\n%.2000s", sm, ptx);
    return 1;
}

/* Assembles every module of a program's PTX text (kernels' and
 * combinations'). */
static inline void assemble_all(const char *all, int sm)
{
    for (const char *p = strstr(all, "; ptc "); p; p = strstr(p + 1, "\n; ptc ")) {
        const char *head = *p == '\n' ? p + 1 : p;
        const char *body = strchr(head, '\n') + 1;
        const char *end = strstr(body, "\n; ptc ");
        char *one = strndup(body, end ? (size_t)(end - body + 1) : strlen(body));
        if (strstr(one, ".version"))
            assemble(one, sm);
        free(one);
    }
}

static inline ptc_program *compile_text(const char *text, int sm)
{
    ptc_module *m = parse(text);
    ptc_program *p = compile_ptx(m->graphs[0], sm, true, NULL);
    ptc_module_free(m);
    return p;
}

/* A graph's loop program and schedule (allocated in its arena), with the
 * graphs it points into. */
typedef struct sched {
    ptc_arena *a;
    ptc_module *m;
    ptc_graph *prims;
    ptc_schedule *s;
} sched;

/* text scheduled with team_threads (the pipeline's CUDA programs: 1024;
 * 0: a thread per outer iteration, as the CPU's). */
static inline sched schedule_with(const char *text, int team_threads)
{
    sched r = {ptc_arena_new(), parse(text), NULL, NULL};
    ptc_error err;
    r.prims = ptc_decompose(r.m->graphs[0], &err);
    ck_assert_msg(r.prims && ptc_simplify(r.prims, &err) == 0, "%s", err.msg);
    ptc_lprog *lp = ptc_lower(r.a, r.prims, &err);
    ck_assert_msg(lp != NULL, "%s", err.msg);
    ptc_sched_opts so = {.nthreads = 1024, .team_threads = team_threads};
    r.s = ptc_schedule_build(r.a, lp, &so, &err);
    ck_assert_msg(r.s != NULL, "%s", err.msg);
    return r;
}

static inline sched schedule_of(const char *text)
{
    return schedule_with(text, 0);
}

static inline void sched_free(sched *r)
{
    ptc_graph_free(r->prims);
    ptc_arena_free(r->a);
    ptc_module_free(r->m);
}

/* Kernel k of s as the CUDA code generator makes it (wide_index: its
 * 64-bit variant). */
static inline void codegen_kernel(const ptc_schedule *s, int k, bool wide_index,
                                  ptc_cuda_code *code)
{
    ptc_error err;
    ptc_cuda_target t = {90, 132};
    ptc_codegen_opts co = {.no_cache = true, .wide_index = wide_index};
    ck_assert_msg(ptc_cuda_codegen(s, s->kernels[k], &t, &co, code, NULL, &err) == 0, "%s",
                  err.msg);
    ck_assert_int_eq(count(code->ptx, ".visible .entry"), code->nforms + (code->launch.vec > 1));
    assemble(code->ptx, 90);
}

/* Kernel 0 of a graph's schedule as the CUDA code generator makes it. */
static inline void codegen_kernel0(const char *text, ptc_cuda_code *code)
{
    sched r = schedule_of(text);
    codegen_kernel(r.s, 0, false, code);
    sched_free(&r);
}

/* A suite's main: tests[0..n) in one case, with the cache fixture and a
 * timeout of 300 s; nothing to test in a build without the CUDA backend. */
static inline int run_cuda_suite(const char *name, const TTest *const *tests, int n)
{
#ifndef PTC_HAVE_CUDA
    printf("test_%s: built with PTC_CUDA=OFF, nothing to test\n", name);
    return 0;
#endif
    Suite *s = suite_create(name);
    TCase *tc = tcase_create(name);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    for (int i = 0; i < n; i++)
        tcase_add_test(tc, tests[i]);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}

#endif /* PTC_TEST_CUDA_SUITE_H */
