/* What the CUDA codegen suites share (test_codegen_cuda.c, test_cuda_rng.c):
 * a per-process PTX cache directory (the fixture), compiling .ptir text for
 * an explicit sm target without a GPU, picking a kernel's or combination's
 * PTX module out of a program's text, and assembling modules with ptxas when
 * the CUDA toolkit is installed. Include after check.h. */
#ifndef PTC_TEST_CUDA_SUITE_H
#define PTC_TEST_CUDA_SUITE_H

#include "codegen/codegen.h"
#include "pipeline/pipeline.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char cache_dir[256];

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

static void setup(void)
{
    snprintf(cache_dir, sizeof cache_dir, "/tmp/ptc_test_cuda_cache_%d", (int)getpid());
    setenv("PTC_CACHE_DIR", cache_dir, 1);
}

static void teardown(void)
{
    clear_dir(cache_dir);
}

static ptc_module *parse(const char *text)
{
    ptc_error err;
    ptc_module *m = ptc_parse_module(text, strlen(text), "test", &err);
    ck_assert_msg(m != NULL, "%s", err.msg);
    return m;
}

static ptc_program *compile_ptx(const ptc_graph *g, int sm, bool no_cache, ptc_trace_compile *tc)
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

static int count(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

/* The PTX module under header `head` (up to the next "; ptc " header: a
 * kernel's, or a horizontal combination's after its first member's). */
static char *module_ptx(const char *all, const char *head)
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
static char *kernel_ptx(const char *all, int k)
{
    char head[32];
    snprintf(head, sizeof head, "; ptc kernel %d ", k);
    return module_ptx(all, head);
}

static const char *ptxas(void)
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
static int assemble(const char *ptx, int sm)
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
static void assemble_all(const char *all, int sm)
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

static ptc_program *compile_text(const char *text, int sm)
{
    ptc_module *m = parse(text);
    ptc_program *p = compile_ptx(m->graphs[0], sm, true, NULL);
    ptc_module_free(m);
    return p;
}

#endif /* PTC_TEST_CUDA_SUITE_H */
