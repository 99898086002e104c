/* ptc codegen: kernels into machine code, and the on-disk kernel cache.
 *
 * Owns: the CPU backend (compiler/codegen/cpu: LLVM IR for each kernel of a
 * schedule, optimised and compiled for the host CPU with the LLVM C API, then
 * linked into one process-wide ORC LLJIT), the kernel cache (compiled objects
 * keyed by the kernel's loop IR, the target and the ptc version), and the
 * description of the host target. LLVM types never leave this module: other
 * modules see kernels as plain C function pointers. A GPU backend
 * (compiler/codegen/cuda, NVPTX) sits beside cpu/ with the same shape.
 */
#ifndef PTC_CODEGEN_H
#define PTC_CODEGEN_H

#include "lower/lower.h"

/* A compiled kernel: runs outer iterations [begin, end) of the kernel's
 * parallel range. bufs[i] is the element-0 address of kernel arg i; params[0]
 * is the run's RNG offset, params[1 + j] the value of the kernel's symbolic
 * parameter j. */
typedef void (*ptc_kernel_fn)(int64_t begin, int64_t end, void *const *bufs,
                              const int64_t *params);

typedef struct ptc_cpu_kernel {
    ptc_kernel_fn fn;
    void *entry;   /* the JIT registry entry (reference counted) */
    bool cached;   /* came from the disk cache or was already loaded */
} ptc_cpu_kernel;

typedef struct ptc_codegen_opts {
    bool no_cache;       /* neither read nor write the disk cache */
    bool want_text;      /* return the LLVM IR of each kernel */
    ptc_metrics *metrics;
} ptc_codegen_opts;

/* Compiles (or loads) every kernel of s into out[s->nkernels]. With
 * want_text, texts[k] receives malloc'd LLVM IR whose first line is
 * "; ptc kernel <n> <name>  <- %a, %b". On error nothing is kept. */
int ptc_cpu_compile(const ptc_schedule *s, const ptc_codegen_opts *o, ptc_cpu_kernel *out,
                    char **texts, ptc_error *err);
void ptc_cpu_kernel_release(ptc_cpu_kernel *k);

/* "x86_64-pc-linux-gnu skylake-avx512 +avx512f,..." (static string). */
const char *ptc_cpu_target(void);
/* SIMD lanes used for 4-byte elements (16 with AVX-512, 8 with AVX2, ...). */
int ptc_cpu_lanes(void);

/* ---- kernel cache ---------------------------------------------------------- */

/* $PTC_CACHE_DIR, else ~/.cache/ptc (static string). */
const char *ptc_cache_dir(void);
/* Looks up an object by key. 1: hit (*obj malloc'd); 0: miss. A corrupt,
 * truncated or mismatching file counts as a miss and is removed. */
int ptc_cache_load(const char *key, size_t keylen, uint8_t **obj, size_t *objlen);
/* Stores atomically (write + rename). Failures are logged, not fatal. */
void ptc_cache_store(const char *key, size_t keylen, const uint8_t *obj, size_t objlen);
/* The file a key maps to (for tests that corrupt it). */
void ptc_cache_path(const char *key, size_t keylen, char *path, size_t size);

#endif /* PTC_CODEGEN_H */
