/* A stand-in for libcuda.so.1, loaded by ptc through PTC_CUDA_LIBRARY, so
 * that the CUDA runtime's choices can be tested without a GPU: one device
 * (an H100's sm_90 and 132 multiprocessors), "device" memory that is host
 * memory, a "JIT" that keeps the PTX as the cubin, modules that find their
 * entries in it, and launches that run nothing but record the entry they
 * were given (fake_cuda_launched), their grid (fake_cuda_grid) and the
 * 64-bit parameters a test asked to watch (fake_cuda_param); it counts its
 * JITs (fake_cuda_nlinked, fake_cuda_last_linked). Results are never
 * computed: a test reads which code ran, not what it wrote.
 */
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum { OK = 0, NOT_FOUND = 500, MAX_ENTRIES = 16, NAME = 128, LOG = 256 };

typedef struct module {
    char *ptx;
    int n;
    char entries[MAX_ENTRIES][NAME]; /* a CUfunction points at one of these */
} module;

static char context, *current;
static char launched[LOG][NAME];
static unsigned grids[LOG][3]; /* blocks, threads per block, shared bytes */
static int nlaunched;
enum { WATCHED = 2 };
static int watch_first = -1;                 /* the first parameter watched, -1: none */
static unsigned long long params64[LOG][WATCHED]; /* their values, per launch */

/* Launches from now on record their 64-bit parameters first and first+1
 * (each launch must take them); -1 stops. */
void fake_cuda_watch_params(int first)
{
    watch_first = first;
}

/* Watched parameter k (0, 1: first+k) of launch i. */
unsigned long long fake_cuda_param(int i, int k)
{
    return i >= 0 && i < nlaunched && i < LOG && k >= 0 && k < WATCHED ? params64[i][k] : 0;
}

/* The entry of launch i of this process (oldest first), NULL past the last. */
const char *fake_cuda_launched(int i)
{
    return i >= 0 && i < nlaunched && i < LOG ? launched[i] : NULL;
}

/* Launch i's blocks (what 0), threads per block (1), shared memory bytes (2). */
unsigned fake_cuda_grid(int i, int what)
{
    return i >= 0 && i < nlaunched && i < LOG && what >= 0 && what < 3 ? grids[i][what] : 0;
}

int fake_cuda_nlaunched(void)
{
    return nlaunched;
}

CUresult cuInit(unsigned flags)
{
    (void)flags;
    return OK;
}

CUresult cuDriverGetVersion(int *v)
{
    *v = 13000;
    return OK;
}

CUresult cuDeviceGetCount(int *n)
{
    *n = 1;
    return OK;
}

CUresult cuDeviceGet(int *d, int ordinal)
{
    *d = ordinal;
    return OK;
}

CUresult cuDeviceGetAttribute(int *v, int attr, int d)
{
    (void)d;
    *v = attr == 16 ? 132 : attr == 75 ? 9 : attr == 76 ? 0 : 1; /* SMs, major, minor */
    return OK;
}

CUresult cuDevicePrimaryCtxRetain(void **c, int d)
{
    (void)d;
    *c = &context;
    return OK;
}

CUresult cuCtxGetCurrent(void **c)
{
    *c = current;
    return OK;
}

CUresult cuCtxGetDevice(int *d)
{
    *d = 0;
    return OK;
}

CUresult cuCtxPushCurrent_v2(void *c)
{
    current = c;
    return OK;
}

CUresult cuCtxPopCurrent_v2(void **c)
{
    if (c)
        *c = current;
    current = NULL;
    return OK;
}

CUresult cuCtxSynchronize(void)
{
    return OK;
}

CUresult cuGetErrorName(CUresult r, const char **s)
{
    *s = r == NOT_FOUND ? "CUDA_ERROR_NOT_FOUND" : "CUDA_ERROR_FAKE";
    return OK;
}

CUresult cuGetErrorString(CUresult r, const char **s)
{
    *s = r == NOT_FOUND ? "named symbol not found" : "fake driver";
    return OK;
}

/* calloc: a large buffer nobody writes costs no memory */
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
    void *m = calloc(1, n ? n : 1);
    *p = (CUdeviceptr)(size_t)m;
    return m ? OK : 2;
}

CUresult cuMemFree_v2(CUdeviceptr p)
{
    free((void *)(size_t)p);
    return OK;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n)
{
    memcpy((void *)(size_t)d, s, n);
    return OK;
}

CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n)
{
    memcpy(d, (void *)(size_t)s, n);
    return OK;
}

CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n)
{
    memset((void *)(size_t)d, v, n);
    return OK;
}

CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, void *stream)
{
    (void)stream;
    return cuMemsetD8_v2(d, v, n);
}

CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, void *stream)
{
    (void)stream;
    return cuMemcpyDtoH_v2(d, s, n);
}

CUresult cuStreamSynchronize(void *stream)
{
    (void)stream;
    return OK;
}

CUresult cuStreamIsCapturing(void *stream, int *status)
{
    (void)stream;
    *status = 0;
    return OK;
}

CUresult cuEventCreate(void **e, unsigned flags)
{
    (void)flags;
    *e = malloc(1);
    return OK;
}

CUresult cuEventRecord(void *e, void *stream)
{
    (void)e, (void)stream;
    return OK;
}

CUresult cuEventSynchronize(void *e)
{
    (void)e;
    return OK;
}

CUresult cuEventElapsedTime(float *ms, void *start, void *end)
{
    (void)start, (void)end;
    *ms = 1;
    return OK;
}

CUresult cuEventDestroy_v2(void *e)
{
    free(e);
    return OK;
}

CUresult cuModuleLoadData(void **m, const void *image)
{
    module *mod = calloc(1, sizeof *mod);
    mod->ptx = strdup(image);
    *m = mod;
    return OK;
}

CUresult cuModuleUnload(void *m)
{
    module *mod = m;
    free(mod->ptx);
    free(mod);
    return OK;
}

CUresult cuModuleGetFunction(void **f, void *m, const char *name)
{
    module *mod = m;
    char want[NAME + 16];
    strcpy(want, ".entry ");
    strncat(want, name, NAME - 1);
    strcat(want, "(");
    if (!strstr(mod->ptx, want) || mod->n == MAX_ENTRIES || strlen(name) >= NAME)
        return NOT_FOUND;
    strcpy(mod->entries[mod->n], name);
    *f = mod->entries[mod->n++];
    return OK;
}

CUresult cuFuncSetAttribute(void *f, int attr, int v)
{
    (void)f, (void)attr, (void)v;
    return OK;
}

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned smem, void *stream, void **params, void **extra)
{
    (void)gy, (void)gz, (void)by, (void)bz, (void)stream;
    (void)extra;
    if (nlaunched < LOG) {
        strcpy(launched[nlaunched], f);
        grids[nlaunched][0] = gx, grids[nlaunched][1] = bx, grids[nlaunched][2] = smem;
        for (int k = 0; watch_first >= 0 && k < WATCHED; k++)
            memcpy(&params64[nlaunched][k], params[watch_first + k], 8);
    }
    nlaunched++;
    return OK;
}

CUresult cuLinkCreate_v2(unsigned n, int *opts, void **vals, void **state)
{
    (void)n, (void)opts, (void)vals;
    *state = calloc(1, sizeof(char *));
    return OK;
}

CUresult cuLinkAddData_v2(void *state, int type, void *data, size_t size, const char *name,
                          unsigned n, int *opts, void **vals)
{
    (void)type, (void)name, (void)n, (void)opts, (void)vals;
    *(char **)state = strndup(data, size);
    return OK;
}

static int nlinked;     /* atomic: ptc JITs on several threads */
static char *last_link; /* atomic: the PTX of the latest JIT */

/* The driver JITs (cuLinkComplete calls) of this process. */
int fake_cuda_nlinked(void)
{
    return __atomic_load_n(&nlinked, __ATOMIC_ACQUIRE);
}

/* The PTX the latest JIT was given ("" before the first). */
const char *fake_cuda_last_linked(void)
{
    const char *p = __atomic_load_n(&last_link, __ATOMIC_ACQUIRE);
    return p ? p : "";
}

CUresult cuLinkComplete(void *state, void **cubin, size_t *size)
{
    __atomic_fetch_add(&nlinked, 1, __ATOMIC_ACQ_REL);
    free(__atomic_exchange_n(&last_link, strdup(*(char **)state), __ATOMIC_ACQ_REL));
    *cubin = *(char **)state;
    *size = strlen(*cubin) + 1;
    return OK;
}

CUresult cuLinkDestroy(void *state)
{
    free(*(char **)state);
    free(state);
    return OK;
}
