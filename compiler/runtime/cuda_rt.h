/* Internal to compiler/runtime: the CUDA driver, opened with dlopen.
 *
 * ptc has no link-time dependency on CUDA: libcuda.so.1 is opened at run
 * time and the few driver entry points ptc needs are looked up by name
 * (their ABI is stable; the _v2 names are the ones cuda.h maps to). The
 * types below mirror cuda.h's. cuda_drv.c owns the library, the devices'
 * primary contexts and error messages; cuda_compile.c compiles programs for
 * a device and cuda_exec.c runs them (cuda_prog.h).
 */
#ifndef PTC_CUDA_RT_H
#define PTC_CUDA_RT_H

#include "runtime/rt.h"

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUlinkState_st *CUlinkState;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUdeviceptr;

enum {
    CUDA_SUCCESS = 0,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
    CU_JIT_INFO_LOG_BUFFER = 3,
    CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
    CU_JIT_ERROR_LOG_BUFFER = 5,
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
    CU_JIT_OPTIMIZATION_LEVEL = 7,
    CU_JIT_INPUT_PTX = 1,
    CU_STREAM_CAPTURE_STATUS_NONE = 0, /* cuStreamIsCapturing: 1 active, 2 invalidated */
};

/* X(name, symbol, params): every driver entry point ptc calls. */
#define PTC_CUDA_FUNCS(X)                                                                          \
    X(cuInit, "cuInit", (unsigned flags))                                                          \
    X(cuDriverGetVersion, "cuDriverGetVersion", (int *v))                                          \
    X(cuDeviceGetCount, "cuDeviceGetCount", (int *n))                                              \
    X(cuDeviceGet, "cuDeviceGet", (CUdevice * d, int ordinal))                                     \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute", (int *v, int attr, CUdevice d))                \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext * c, CUdevice d))           \
    X(cuCtxGetCurrent, "cuCtxGetCurrent", (CUcontext * c))                                         \
    X(cuCtxGetDevice, "cuCtxGetDevice", (CUdevice * d))                                            \
    X(cuCtxPushCurrent, "cuCtxPushCurrent_v2", (CUcontext c))                                      \
    X(cuCtxPopCurrent, "cuCtxPopCurrent_v2", (CUcontext * c))                                      \
    X(cuCtxSynchronize, "cuCtxSynchronize", (void))                                                \
    X(cuGetErrorName, "cuGetErrorName", (CUresult r, const char **s))                              \
    X(cuGetErrorString, "cuGetErrorString", (CUresult r, const char **s))                          \
    X(cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr * p, size_t n))                                    \
    X(cuMemFree, "cuMemFree_v2", (CUdeviceptr p))                                                  \
    X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", (CUdeviceptr d, const void *s, size_t n))                   \
    X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", (void *d, CUdeviceptr s, size_t n))                         \
    X(cuMemsetD8, "cuMemsetD8_v2", (CUdeviceptr d, unsigned char v, size_t n))                     \
    X(cuMemsetD8Async, "cuMemsetD8Async", (CUdeviceptr d, unsigned char v, size_t n, CUstream s))  \
    X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", (void *d, CUdeviceptr s, size_t n, CUstream st))  \
    X(cuStreamSynchronize, "cuStreamSynchronize", (CUstream s))                                    \
    X(cuStreamIsCapturing, "cuStreamIsCapturing", (CUstream s, int *status))                       \
    X(cuEventCreate, "cuEventCreate", (CUevent * e, unsigned flags))                               \
    X(cuEventRecord, "cuEventRecord", (CUevent e, CUstream s))                                     \
    X(cuEventSynchronize, "cuEventSynchronize", (CUevent e))                                       \
    X(cuEventElapsedTime, "cuEventElapsedTime", (float *ms, CUevent start, CUevent end))           \
    X(cuEventDestroy, "cuEventDestroy_v2", (CUevent e))                                            \
    X(cuModuleLoadData, "cuModuleLoadData", (CUmodule * m, const void *image))                     \
    X(cuModuleUnload, "cuModuleUnload", (CUmodule m))                                              \
    X(cuModuleGetFunction, "cuModuleGetFunction", (CUfunction * f, CUmodule m, const char *n))     \
    X(cuFuncSetAttribute, "cuFuncSetAttribute", (CUfunction f, int attr, int v))                   \
    X(cuLaunchKernel, "cuLaunchKernel",                                                            \
      (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
       unsigned smem, CUstream s, void **params, void **extra))                                    \
    X(cuLinkCreate, "cuLinkCreate_v2", (unsigned n, int *opts, void **vals, CUlinkState *s))       \
    X(cuLinkAddData, "cuLinkAddData_v2",                                                           \
      (CUlinkState s, int type, void *data, size_t size, const char *name, unsigned n, int *opts,  \
       void **vals))                                                                               \
    X(cuLinkComplete, "cuLinkComplete", (CUlinkState s, void **cubin, size_t *size))               \
    X(cuLinkDestroy, "cuLinkDestroy", (CUlinkState s))

typedef struct ptc_cuda_api {
#define X(name, sym, params) CUresult(*name) params;
    PTC_CUDA_FUNCS(X)
#undef X
} ptc_cuda_api;

/* The driver, loaded and initialised once; NULL with *why set when there is
 * no usable driver or GPU. */
const ptc_cuda_api *ptc_cuda_api_get(const char **why);
/* "CUDA_ERROR_OUT_OF_MEMORY: out of memory" for a result code. */
void ptc_cuda_strerror(CUresult r, char *buf, size_t size);
/* Fills err with "<what>: <CUDA error name>: <string>" and returns -1. */
int ptc_cuda_fail(ptc_error *err, CUresult r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

typedef struct ptc_cuda_device {
    int ordinal;
    CUdevice dev;
    CUcontext ctx;     /* its primary context (retained for the process) */
    int sm;            /* compute capability x 10 */
    int sms;           /* multiprocessors */
    int driver;        /* driver version (CUDA API number) */
    CUdeviceptr zeros; /* 256 zero bytes: the address of buffers without elements */
} ptc_cuda_device;

/* A device by ordinal (-1: the device of the calling thread's current
 * context, else 0), its primary context retained. NULL with err on failure. */
ptc_cuda_device *ptc_cuda_device_get(int ordinal, ptc_error *err);
/* Makes d's primary context current on the calling thread unless it already
 * is; *pushed tells ptc_cuda_leave whether to pop it. */
int ptc_cuda_enter(const ptc_cuda_device *d, bool *pushed, ptc_error *err);
void ptc_cuda_leave(bool pushed);

/* ptc_cuda_get_index_counts's counts: one launch of an entry with 32-bit
 * (i32) or 64-bit index arithmetic; one 64-bit variant generated. */
void ptc_cuda_count_launch(bool i32);
void ptc_cuda_count_wide_variant(void);

/* ---- programs (cuda_compile.c, cuda_exec.c) ---- */

typedef struct ptc_cuda_prog ptc_cuda_prog;
/* The target program p is compiled for: opts->cuda_sm (no device needed),
 * else its inputs' device (*dev), at most sm_90. */
int ptc_cuda_target_of(const ptc_program *p, const ptc_compile_opts *o, ptc_cuda_target *t,
                       ptc_cuda_device **dev, ptc_error *err);
/* Generates the program's PTX (in parallel) and, when a device is at hand,
 * loads it; texts[k] (optional) receive each kernel's PTX with its header. */
int ptc_cuda_prepare(ptc_program *p, const ptc_compile_opts *o, ptc_metrics *m, char **texts,
                     ptc_error *err);
/* ptc_cuda_prepare for programs ps[0..n) together (os[i], ms[i], texts[i]
 * each's): the PTX of all their kernels and horizontal combinations the
 * cache lacks is generated in one compile worker, then all are loaded (the
 * kernels by one pool of threads). The batch's
 * wall time goes to ms[0]. -1 with err: the first failure (in program
 * order for the PTX). */
int ptc_cuda_prepare_all(ptc_program *const *ps, int n, const ptc_compile_opts *const *os,
                         ptc_metrics *const *ms, char **const *texts, ptc_error *err);
void ptc_cuda_prog_free(ptc_cuda_prog *cp);
int ptc_exec_cuda(ptc_program *p, const ptc_tensor *inputs, int ninputs, ptc_tensor *outputs,
                  const ptc_host *host, uint64_t rng_offset, ptc_error *err);

#endif /* PTC_CUDA_RT_H */
