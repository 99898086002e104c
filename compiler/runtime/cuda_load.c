/* Loading compiled code on a device: each distinct cubin made once.
 *
 * The driver's PTX JIT is most of a cold compile's time (about 44 ms a
 * module alone on an H200's host, 95 ms each when 16 run at once), and a
 * program repeats itself: resnet50's training forward has 102 horizontal
 * combinations but 43 distinct modules (its repeated layers' batch-norm
 * statistics, each with a counter's increment), and a forward and its
 * backward may share kernels. So the modules of a batch (the kernels and
 * combinations of every program compiled together) are loaded as a list of
 * slots: slots whose cubin key is the same (the PTX's cache key, the
 * device's architecture and the driver version) make one job, whose cubin
 * comes from the disk cache or one JIT, and every slot of the job loads its
 * own module from it (cuModuleLoadData of a cubin is cheap, and modules so
 * stay owned by their programs). The jobs run on one pool of threads,
 * largest PTX first, so that the batch does not wait for a large module
 * started last.
 */
#include "runtime/cuda_prog.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the pool ------------------------------------------------------------------------------ */

int ptc_cuda_threads_for(int n)
{
    const char *env = getenv("PTC_COMPILE_THREADS");
    long t = env && atoi(env) > 0 ? atoi(env) : sysconf(_SC_NPROCESSORS_ONLN);
    if (t > 16)
        t = 16;
    if (t > n)
        t = n;
    return t < 1 ? 1 : (int)t;
}

void ptc_cuda_run_pool(void *(*fn)(void *), void *arg, int n)
{
    int nt = ptc_cuda_threads_for(n);
    pthread_t th[16];
    int started = 0;
    for (int i = 0; nt > 1 && i < nt; i++)
        if (pthread_create(&th[i], NULL, fn, arg) == 0)
            started++;
        else
            break;
    if (started == 0)
        fn(arg);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
}

/* ---- cubins -------------------------------------------------------------------------------- */

/* ptx without the definition of entry `name` (its ".visible .entry name("
 * ... "}" block, as LLVM's NVPTX backend prints it; the functions it calls
 * stay, and so does the comment that names it), malloc'd; NULL when ptx has
 * no such entry. */
static char *without_entry(const char *ptx, const char *name)
{
    ptc_buf head = {0};
    ptc_buf_printf(&head, "\n.visible .entry %s(", name);
    const char *at = head.data ? strstr(ptx, head.data) : NULL;
    ptc_buf_free(&head);
    const char *end = at ? strstr(at, "\n}\n") : NULL;
    if (!end)
        return NULL;
    const char *start = at + 1;
    ptc_buf out = {0};
    ptc_buf_putn(&out, ptx, (size_t)(start - ptx));
    ptc_buf_puts(&out, end + 3);
    return out.data;
}

/* The PTX slot s's module is made from: its code's, less the scalar entry
 * where s defers it; malloc'd, NULL when out of memory. */
static char *slot_ptx(const ptc_cuda_slot *s)
{
    char *ptx = s->defer_scalar ? without_entry(s->code->ptx, s->code->entry) : NULL;
    return ptx ? ptx : strdup(s->code->ptx);
}

static int jit(const ptc_cuda_api *A, const char *ptx, const char *entry, const char *what,
               uint8_t **cubin, size_t *len, ptc_error *err)
{
    char errlog[4096] = "", infolog[1024] = "";
    int opts[5] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                   CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                   CU_JIT_OPTIMIZATION_LEVEL};
    void *vals[5] = {errlog, (void *)(uintptr_t)sizeof errlog, infolog,
                     (void *)(uintptr_t)sizeof infolog, (void *)(uintptr_t)4};
    CUlinkState st = NULL;
    CUresult r = A->cuLinkCreate(5, opts, vals, &st);
    if (r == CUDA_SUCCESS)
        r = A->cuLinkAddData(st, CU_JIT_INPUT_PTX, (void *)ptx, strlen(ptx) + 1, entry, 0, NULL,
                             NULL);
    void *img = NULL;
    size_t n = 0;
    if (r == CUDA_SUCCESS)
        r = A->cuLinkComplete(st, &img, &n);
    if (r == CUDA_SUCCESS) {
        *cubin = malloc(n ? n : 1);
        memcpy(*cubin, img, n);
        *len = n;
    }
    if (st)
        A->cuLinkDestroy(st);
    if (r != CUDA_SUCCESS) {
        char *nl = strchr(errlog, '\n');
        if (nl && nl[1] == 0)
            *nl = 0;
        return ptc_cuda_fail(err, r, "%s: the driver's PTX JIT failed (%.300s)", what,
                             errlog[0] ? errlog : "no log");
    }
    return 0;
}

static char *cubin_key(const ptc_cuda_slot *s)
{
    ptc_buf key = {0};
    ptc_buf_printf(&key, "%s\ncubin sm_%d driver %d O4%s\n", s->code->key, s->dev->sm,
                   s->dev->driver, s->defer_scalar ? " scalar deferred" : "");
    return key.data;
}

/* The cubin of slot s (its key: key), from the cache or the JIT; the JIT's
 * time counted in s's metrics (under mlock). */
static int make_cubin(const ptc_cuda_slot *s, const char *key, pthread_mutex_t *mlock,
                      uint8_t **cubin, size_t *len, ptc_error *err)
{
    if (!s->no_cache && ptc_cache_load(key, strlen(key), cubin, len))
        return 0;
    double t0 = ptc_now_ms();
    char *ptx = slot_ptx(s);
    if (!ptx)
        return ptc_errorf(err, PTC_ERR_INTERNAL, "runtime", "%s: out of memory", s->what);
    int rc = jit(ptc_cuda_api_get(NULL), ptx, s->code->entry, s->what, cubin, len, err);
    free(ptx);
    if (rc)
        return -1;
    if (!s->no_cache)
        ptc_cache_store(key, strlen(key), *cubin, *len);
    if (s->m) {
        pthread_mutex_lock(mlock);
        ptc_metrics_add(s->m, "cuda_jit_ms", ptc_now_ms() - t0, true);
        ptc_metrics_add(s->m, "cuda_jit_kernels", 1, false);
        pthread_mutex_unlock(mlock);
    }
    return 0;
}

/* Slot s's module from cubin (in the current context: s's device's), and
 * its entries: fn for form 0, vfn for the vectorised one, ffn[f] for form f > 0. */
static int load_module(const ptc_cuda_slot *s, const uint8_t *cubin, ptc_error *err)
{
    const ptc_cuda_api *A = ptc_cuda_api_get(NULL);
    const ptc_cuda_code *code = s->code;
    CUresult r = A->cuModuleLoadData(s->mod, cubin);
    if (r == CUDA_SUCCESS && !s->defer_scalar)
        r = A->cuModuleGetFunction(s->fn, *s->mod, code->entry);
    if (r == CUDA_SUCCESS && code->launch.vec > 1)
        r = A->cuModuleGetFunction(s->vfn, *s->mod, code->ventry);
    for (int f = 1; r == CUDA_SUCCESS && f < code->nforms; f++)
        r = A->cuModuleGetFunction(&s->ffn[f], *s->mod, code->forms[f].entry);
    if (r != CUDA_SUCCESS)
        return ptc_cuda_fail(err, r, "%s: loading its module on device %d", s->what,
                             s->dev->ordinal);
    return 0;
}

/* ---- jobs ---------------------------------------------------------------------------------- */

/* Slot `slot` in the loading order: its key and the size of its PTX. */
typedef struct ordered {
    int slot;
    size_t size;
    char *key;
} ordered;

/* Largest PTX first; slots of one key next to each other. */
static int by_size_then_key(const void *a, const void *b)
{
    const ordered *x = a, *y = b;
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    int c = strcmp(x->key, y->key);
    return c ? c : x->slot - y->slot;
}

typedef struct loader {
    ptc_cuda_slot *slots;
    ordered *order;
    int *job_start; /* job j is order[job_start[j] .. job_start[j + 1]) */
    int njobs;
    int next; /* atomic */
    pthread_mutex_t mlock;
    int failed; /* atomic */
    ptc_error err;
} loader;

/* The thread's current context made d's (tracked in *current, *pushed). */
static int enter(const ptc_cuda_device *d, const ptc_cuda_device **current, bool *pushed,
                 ptc_error *err)
{
    if (d == *current)
        return 0;
    ptc_cuda_leave(*pushed);
    *pushed = false;
    *current = NULL;
    if (ptc_cuda_enter(d, pushed, err))
        return -1;
    *current = d;
    return 0;
}

/* Job j: its cubin made once, then every slot's module loaded from it. */
static int run_job(loader *ld, int j, const ptc_cuda_device **current, bool *pushed, ptc_error *err)
{
    const ordered *first = &ld->order[ld->job_start[j]];
    const ptc_cuda_slot *s = &ld->slots[first->slot];
    uint8_t *cubin = NULL;
    size_t len = 0;
    int rc = enter(s->dev, current, pushed, err);
    if (rc == 0)
        rc = make_cubin(s, first->key, &ld->mlock, &cubin, &len, err);
    for (int i = ld->job_start[j]; rc == 0 && i < ld->job_start[j + 1]; i++) {
        s = &ld->slots[ld->order[i].slot];
        rc = enter(s->dev, current, pushed, err);
        if (rc == 0)
            rc = load_module(s, cubin, err);
    }
    free(cubin);
    return rc;
}

static void *load_jobs(void *arg)
{
    loader *ld = arg;
    const ptc_cuda_device *current = NULL;
    bool pushed = false;
    ptc_error err;
    for (;;) {
        int j = __atomic_fetch_add(&ld->next, 1, __ATOMIC_ACQ_REL);
        if (j >= ld->njobs || __atomic_load_n(&ld->failed, __ATOMIC_ACQUIRE))
            break;
        if (run_job(ld, j, &current, &pushed, &err) &&
            __atomic_fetch_add(&ld->failed, 1, __ATOMIC_ACQ_REL) == 0)
            ld->err = err;
    }
    ptc_cuda_leave(pushed);
    return NULL;
}

/* ld's order and jobs for its n slots; -1 when out of memory. */
static int plan_jobs(loader *ld, int n)
{
    ld->order = calloc((size_t)n + 1, sizeof *ld->order);
    ld->job_start = calloc((size_t)n + 2, sizeof *ld->job_start);
    if (!ld->order || !ld->job_start)
        return -1;
    for (int i = 0; i < n; i++) {
        const ptc_cuda_slot *s = &ld->slots[i];
        ld->order[i] = (ordered){i, strlen(s->code->ptx), cubin_key(s)};
        if (!ld->order[i].key)
            return -1;
    }
    qsort(ld->order, (size_t)n, sizeof *ld->order, by_size_then_key);
    for (int i = 0; i < n; i++)
        if (i == 0 || strcmp(ld->order[i].key, ld->order[i - 1].key) != 0)
            ld->job_start[ld->njobs++] = i;
    ld->job_start[ld->njobs] = n;
    return 0;
}

int ptc_cuda_load_slots(ptc_cuda_slot *slots, int n, ptc_error *err)
{
    if (n == 0)
        return 0;
    loader ld = {.slots = slots};
    int rc = 0;
    if (plan_jobs(&ld, n)) {
        rc = ptc_errorf(err, PTC_ERR_INTERNAL, "runtime", "out of memory listing CUDA modules");
    } else {
        pthread_mutex_init(&ld.mlock, NULL);
        ptc_cuda_run_pool(load_jobs, &ld, ld.njobs);
        pthread_mutex_destroy(&ld.mlock);
        if (ld.failed) {
            if (err)
                *err = ld.err;
            rc = -1;
        }
    }
    for (int i = 0; ld.order && i < n; i++)
        free(ld.order[i].key);
    free(ld.order);
    free(ld.job_start);
    return rc;
}
