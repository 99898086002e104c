/* The CUDA driver, opened at run time.
 *
 * libcuda.so.1 is dlopen'ed the first time a CUDA program is compiled or
 * run; a missing library, a missing entry point, a failing cuInit or a
 * machine without devices make the CUDA backend unavailable with a one-line
 * reason, and the CPU backend is unaffected. Devices are opened through
 * their primary context, the one PyTorch (the CUDA runtime) uses, so ptc's
 * kernels, torch's kernels and torch's allocations share one context;
 * ptc_cuda_enter makes it current only when the caller's thread has another
 * one. PTC_CUDA_LIBRARY names another library (tests use it to check the
 * no-driver path on machines that have one).
 */
#include "runtime/cuda_rt.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DEVICES = 16 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    bool tried, ok;
    char why[256];
    void *lib;
    ptc_cuda_api api;
    int ndev;
    ptc_cuda_device *dev[MAX_DEVICES];
} D;

static bool load_locked(void)
{
    if (D.tried)
        return D.ok;
    D.tried = true;
    const char *name = getenv("PTC_CUDA_LIBRARY");
    if (!name || !*name)
        name = "libcuda.so.1";
    D.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!D.lib) {
        const char *e = dlerror();
        snprintf(D.why, sizeof D.why, "no NVIDIA driver: cannot open %s (%s)", name, e ? e : "?");
        return false;
    }
#define X(fname, sym, params)                                                                      \
    *(void **)&D.api.fname = dlsym(D.lib, sym);                                                    \
    if (!D.api.fname) {                                                                            \
        snprintf(D.why, sizeof D.why, "the NVIDIA driver in %s lacks %s (too old?)", name, sym);   \
        return false;                                                                              \
    }
    PTC_CUDA_FUNCS(X)
#undef X
    CUresult r = D.api.cuInit(0);
    if (r != CUDA_SUCCESS) {
        char msg[160];
        ptc_cuda_strerror(r, msg, sizeof msg);
        snprintf(D.why, sizeof D.why, "cuInit failed: %s", msg);
        return false;
    }
    r = D.api.cuDeviceGetCount(&D.ndev);
    if (r != CUDA_SUCCESS || D.ndev <= 0) {
        snprintf(D.why, sizeof D.why, "the NVIDIA driver sees no CUDA device");
        return false;
    }
    if (D.ndev > MAX_DEVICES)
        D.ndev = MAX_DEVICES;
    D.ok = true;
    return true;
}

const ptc_cuda_api *ptc_cuda_api_get(const char **why)
{
    pthread_mutex_lock(&lock);
    bool ok = load_locked();
    pthread_mutex_unlock(&lock);
    if (!ok && why)
        *why = D.why;
    return ok ? &D.api : NULL;
}

void ptc_cuda_strerror(CUresult r, char *buf, size_t size)
{
    const char *name = NULL, *str = NULL;
    if (D.api.cuGetErrorName)
        D.api.cuGetErrorName(r, &name);
    if (D.api.cuGetErrorString)
        D.api.cuGetErrorString(r, &str);
    snprintf(buf, size, "%s (%d): %s", name ? name : "CUDA error", r, str ? str : "unknown error");
}

int ptc_cuda_fail(ptc_error *err, CUresult r, const char *fmt, ...)
{
    char what[700], msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    ptc_cuda_strerror(r, msg, sizeof msg);
    return ptc_errorf(err, PTC_ERR_RUNTIME, "runtime", "%s: %s", what, msg);
}

static ptc_cuda_device *open_locked(int ordinal, ptc_error *err)
{
    if (ordinal < 0 || ordinal >= D.ndev) {
        ptc_errorf(err, PTC_ERR_RUNTIME, "runtime", "CUDA device %d does not exist (%d visible)",
                   ordinal, D.ndev);
        return NULL;
    }
    if (D.dev[ordinal])
        return D.dev[ordinal];
    const ptc_cuda_api *A = &D.api;
    ptc_cuda_device *d = calloc(1, sizeof *d);
    d->ordinal = ordinal;
    int major = 0, minor = 0;
    CUresult r = A->cuDeviceGet(&d->dev, ordinal);
    if (r == CUDA_SUCCESS)
        r = A->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev);
    if (r == CUDA_SUCCESS)
        r = A->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev);
    if (r == CUDA_SUCCESS)
        r = A->cuDeviceGetAttribute(&d->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev);
    if (r == CUDA_SUCCESS)
        r = A->cuDriverGetVersion(&d->driver);
    if (r == CUDA_SUCCESS)
        r = A->cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
    bool pushed = false;
    if (r == CUDA_SUCCESS) {
        r = A->cuCtxPushCurrent(d->ctx);
        pushed = r == CUDA_SUCCESS;
    }
    if (r == CUDA_SUCCESS)
        r = A->cuMemAlloc(&d->zeros, 256);
    if (r == CUDA_SUCCESS)
        r = A->cuMemsetD8(d->zeros, 0, 256);
    if (pushed) {
        CUcontext old;
        A->cuCtxPopCurrent(&old);
    }
    if (r != CUDA_SUCCESS) {
        ptc_cuda_fail(err, r, "opening CUDA device %d", ordinal);
        free(d);
        return NULL;
    }
    d->sm = major * 10 + minor;
    D.dev[ordinal] = d;
    return d;
}

ptc_cuda_device *ptc_cuda_device_get(int ordinal, ptc_error *err)
{
    const char *why = NULL;
    if (!ptc_cuda_api_get(&why)) {
        ptc_errorf(err, PTC_ERR_UNSUPPORTED, "runtime", "the CUDA backend is unavailable: %s", why);
        return NULL;
    }
    if (ordinal < 0) {
        /* the device of the current context (torch's current device), else 0 */
        CUcontext cur = NULL;
        CUdevice dev;
        ordinal = 0;
        if (D.api.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur &&
            D.api.cuCtxGetDevice(&dev) == CUDA_SUCCESS)
            for (int i = 0; i < D.ndev; i++) {
                CUdevice di;
                if (D.api.cuDeviceGet(&di, i) == CUDA_SUCCESS && di == dev)
                    ordinal = i;
            }
    }
    pthread_mutex_lock(&lock);
    ptc_cuda_device *d = open_locked(ordinal, err);
    pthread_mutex_unlock(&lock);
    return d;
}

int ptc_cuda_enter(const ptc_cuda_device *d, bool *pushed, ptc_error *err)
{
    CUcontext cur = NULL;
    *pushed = false;
    if (D.api.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == d->ctx)
        return 0;
    CUresult r = D.api.cuCtxPushCurrent(d->ctx);
    if (r != CUDA_SUCCESS)
        return ptc_cuda_fail(err, r, "making CUDA device %d current", d->ordinal);
    *pushed = true;
    return 0;
}

void ptc_cuda_leave(bool pushed)
{
    if (pushed) {
        CUcontext old;
        D.api.cuCtxPopCurrent(&old);
    }
}

/* ---- for tools and tests (runtime.h) ----------------------------------------------------------
 */

int ptc_cuda_available(ptc_error *err)
{
#ifndef PTC_HAVE_CUDA
    return ptc_errorf(err, PTC_ERR_UNSUPPORTED, "runtime",
                      "the CUDA backend is not part of this build (PTC_CUDA=OFF)");
#else
    const char *why = NULL;
    if (!ptc_cuda_api_get(&why))
        return ptc_errorf(err, PTC_ERR_UNSUPPORTED, "runtime",
                          "the CUDA backend is unavailable: %s", why);
    return 0;
#endif
}

static ptc_cuda_index_counts index_counts;

void ptc_cuda_count_launch(bool i32)
{
    __atomic_add_fetch(i32 ? &index_counts.launches_i32 : &index_counts.launches_i64, 1,
                       __ATOMIC_RELAXED);
}

void ptc_cuda_count_wide_variant(void)
{
    __atomic_add_fetch(&index_counts.wide_variants, 1, __ATOMIC_RELAXED);
}

void ptc_cuda_get_index_counts(ptc_cuda_index_counts *out)
{
    out->launches_i32 = __atomic_load_n(&index_counts.launches_i32, __ATOMIC_RELAXED);
    out->launches_i64 = __atomic_load_n(&index_counts.launches_i64, __ATOMIC_RELAXED);
    out->wide_variants = __atomic_load_n(&index_counts.wide_variants, __ATOMIC_RELAXED);
}

int ptc_cuda_device_arch(ptc_error *err)
{
#ifndef PTC_HAVE_CUDA
    return ptc_cuda_available(err);
#else
    if (ptc_cuda_available(err))
        return -1;
    ptc_cuda_device *d = ptc_cuda_device_get(-1, err);
    return d ? (d->sm > 90 ? 90 : d->sm) : -1;
#endif
}

static void release_device_storage(ptc_storage *s)
{
    if (s->data && D.ok)
        D.api.cuMemFree((CUdeviceptr)(uintptr_t)s->data);
    free(s);
}

/* Elements of the memory span t covers (strides are non-negative). */
static int64_t span_of(const ptc_tensor *t)
{
    int64_t n = ptc_tensor_numel(t), span = 1;
    if (n == 0)
        return 0;
    for (int d = 0; d < t->ndim; d++)
        span += (t->sizes[d] - 1) * t->strides[d];
    return span;
}

static ptc_storage *storage_new(void *data, size_t bytes, bool device)
{
    ptc_storage *s = calloc(1, sizeof *s);
    s->refs = 1;
    s->data = data;
    s->nbytes = bytes;
    s->release = device ? release_device_storage : NULL;
    return s;
}

int ptc_tensor_to_device(const ptc_tensor *t, ptc_device dev, ptc_tensor *out, ptc_error *err)
{
    bool to_cuda = dev.kind == PTC_DEV_CUDA, from_cuda = t->device.kind == PTC_DEV_CUDA;
    memset(out, 0, sizeof *out);
    for (int d = 0; d < t->ndim; d++)
        if (t->strides[d] < 0)
            return ptc_errorf(err, PTC_ERR_UNSUPPORTED, "runtime",
                              "copying a tensor with negative strides");
    if (!to_cuda && !from_cuda) {
        if (ptc_tensor_alloc(out, t->dtype, t->ndim, t->sizes, err))
            return -1;
        return ptc_tensor_copy(out, t, err);
    }
    if (ptc_cuda_available(err))
        return -1;
    ptc_cuda_device *d = ptc_cuda_device_get(to_cuda ? dev.index : t->device.index, err);
    if (!d)
        return -1;
    bool pushed = false;
    if (ptc_cuda_enter(d, &pushed, err))
        return -1;
    size_t bytes = (size_t)span_of(t) * ptc_dtype_size(t->dtype);
    void *host = NULL;
    CUdeviceptr p = 0;
    CUresult r = CUDA_SUCCESS;
    if (to_cuda && bytes)
        r = D.api.cuMemAlloc(&p, bytes);
    if (r == CUDA_SUCCESS && bytes && !(host = malloc(bytes)))
        r = 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    if (r == CUDA_SUCCESS && bytes) {
        if (from_cuda)
            r = D.api.cuMemcpyDtoH(host, (CUdeviceptr)(uintptr_t)t->data, bytes);
        else
            memcpy(host, t->data, bytes);
    }
    if (r == CUDA_SUCCESS && to_cuda && bytes)
        r = D.api.cuMemcpyHtoD(p, host, bytes);
    ptc_cuda_leave(pushed);
    if (r != CUDA_SUCCESS) {
        free(host);
        if (p)
            D.api.cuMemFree(p);
        return ptc_cuda_fail(err, r, "copying a tensor %s cuda:%d", to_cuda ? "to" : "from",
                             d->ordinal);
    }
    *out = *t;
    out->device = to_cuda ? (ptc_device){PTC_DEV_CUDA, (int16_t)d->ordinal} : PTC_CPU;
    if (to_cuda) {
        free(host);
        out->storage = storage_new((void *)(uintptr_t)p, bytes, true);
    } else {
        out->storage = storage_new(host ? host : malloc(1), bytes, false);
    }
    out->data = out->storage->data;
    return 0;
}

int ptc_tensor_put_back(const ptc_tensor *t, const ptc_tensor *copy, ptc_error *err)
{
    if (t->device.kind != PTC_DEV_CUDA) {
        ptc_tensor dst = *t;
        return ptc_tensor_copy(&dst, copy, err);
    }
    ptc_cuda_device *d = ptc_cuda_device_get(t->device.index, err);
    bool pushed = false;
    if (!d || ptc_cuda_enter(d, &pushed, err))
        return -1;
    size_t bytes = (size_t)span_of(t) * ptc_dtype_size(t->dtype);
    CUresult r = bytes ? D.api.cuMemcpyHtoD((CUdeviceptr)(uintptr_t)t->data, copy->data, bytes)
                       : CUDA_SUCCESS;
    ptc_cuda_leave(pushed);
    return r == CUDA_SUCCESS ? 0 : ptc_cuda_fail(err, r, "putting a tensor back on cuda:%d", d->ordinal);
}
