/* Helpers of the CUDA code generator's Check suites (test_codegen_cuda.c,
 * test_codegen_cuda_columns.c): a kernel cache of the suite's own, parsing,
 * scheduling and generating a kernel's PTX, and assembling PTX with the CUDA
 * toolkit's ptxas where it is installed (PTC_PTXAS or /usr/local/cuda/bin).
 * Include after check.h. */
#ifndef PTC_TEST_CUDA_CODEGEN_H
#define PTC_TEST_CUDA_CODEGEN_H

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

static inline int count(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
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

/* A graph's loop program and schedule (allocated in its arena), with the
 * graphs it points into. */
typedef struct sched {
    ptc_arena *a;
    ptc_module *m;
    ptc_graph *prims;
    ptc_schedule *s;
} sched;

static inline sched schedule_of(const char *text)
{
    sched r = {ptc_arena_new(), parse(text), NULL, NULL};
    ptc_error err;
    r.prims = ptc_decompose(r.m->graphs[0], &err);
    ck_assert_msg(r.prims && ptc_simplify(r.prims, &err) == 0, "%s", err.msg);
    ptc_lprog *lp = ptc_lower(r.a, r.prims, &err);
    ck_assert_msg(lp != NULL, "%s", err.msg);
    ptc_sched_opts so = {.nthreads = 1024};
    r.s = ptc_schedule_build(r.a, lp, &so, &err);
    ck_assert_msg(r.s != NULL, "%s", err.msg);
    return r;
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

#endif /* PTC_TEST_CUDA_CODEGEN_H */
