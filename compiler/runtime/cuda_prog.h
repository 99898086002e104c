/* Internal to compiler/runtime: a program compiled for CUDA, shared by the
 * file that makes and loads its code (cuda_compile.c) and the one that runs
 * it (cuda_exec.c): its kernels' code, its horizontal combinations' and
 * their modules loaded on each device.
 */
#ifndef PTC_CUDA_PROG_H
#define PTC_CUDA_PROG_H

#include "runtime/cuda_rt.h"

#include <pthread.h>

enum { MAX_DEV = 16, MAX_PARAMS = PTC_LAUNCH_PARAM_SLOTS };

typedef struct ckernel {
    ptc_cuda_code code;
    ptc_cuda_code wide; /* code.i32_symbolic: the 64-bit variant once a call needed it */
    int same_as;        /* an identical earlier kernel whose code this one uses, or -1 */
    bool combined_only; /* runs only in a one-launch combination: no code of its own */
    bool checks;        /* ptc_kernel_has_checks, read once at the compile: a launch passes
                           the status record (a walk of every body, per launch, before) */
} ckernel;

/* A kernel's 64-bit variant loaded on a device: fn[f] is form f's entry. */
typedef struct cwide {
    CUmodule mod;
    CUfunction fn[PTC_CUDA_MAX_FORMS], vfn;
} cwide;

typedef struct cloaded {
    ptc_cuda_device *dev;
    CUmodule *mods;
    CUfunction *fn, *vfn;
    CUfunction *ffn; /* [kernel * PTC_CUDA_MAX_FORMS + form]: the forms after the first */
    cwide *wide;     /* per kernel: its 64-bit variant, loaded when a call first needs it */
    CUmodule *cmods; /* per horizontal combination: its module, entry, vectorised entry */
    CUfunction *cfn, *cvfn;
    /* per kernel, per combination: the module of its deferred scalar entry
     * (ptc_cuda_slot.defer_scalar), once a launch needed it */
    CUmodule *smods, *csmods;
} cloaded;

struct ptc_cuda_prog {
    ptc_cuda_target target;
    int nk;
    ckernel *k;
    int ncombos; /* the schedule's horizontal combinations, each one launch */
    ptc_cuda_code *combos;
    int **combo_args; /* per combination: the buffers its launch takes (ptc_combo_args) */
    int *combo_nargs;
    bool any_checks; /* a kernel has checks: a run's arena holds the status record */
    pthread_mutex_t lock;
    cloaded *loaded[MAX_DEV];
    bool no_cache;    /* the compile's, for the 64-bit variants made later */
    char *kernel_dir; /* the compile's (an export package's kernels), or NULL */
    /* the arena of runs without a host */
    CUdeviceptr mem;
    size_t mem_size;
    int mem_dev;
};

/* The kernel whose code kernel k runs: an identical earlier one, or k. */
static inline int source_of(const ptc_cuda_prog *cp, int k)
{
    return cp->k[k].same_as >= 0 ? cp->k[k].same_as : k;
}

static inline const ptc_cuda_code *code_of(const ptc_cuda_prog *cp, int k)
{
    return &cp->k[source_of(cp, k)].code;
}

/* A launch's parameters: buffers, scratch, rng offset, rng cell, sizes,
 * [status record, where the kernel checks]. */
static inline int launch_params(const ptc_kernel *k, bool checks)
{
    return k->nargs + 3 + k->nparams + checks;
}

static inline int too_many_params(const ptc_kernel *k, bool checks, ptc_error *err)
{
    return ptc_errorf(err, PTC_ERR_UNSUPPORTED, "runtime",
                      "kernel %d %s takes %d parameters, more than the %d of a CUDA launch", k->id,
                      k->name, launch_params(k, checks), MAX_PARAMS);
}

/* One module to load on a device (cuda_load.c): code's (of `what`, for
 * messages: "kernel 3 add") into *mod, its entries into *fn (form 0), *vfn
 * (the vectorised one) and ffn[f] (form f > 0). A JIT it needs is counted in
 * m's cuda_jit_ms and cuda_jit_kernels (m may be NULL). */
typedef struct ptc_cuda_slot {
    const ptc_cuda_code *code;
    char what[96];
    const ptc_cuda_device *dev;
    bool no_cache;
    /* the module leaves out the scalar entry of a code with a vectorised
     * twin (*fn stays NULL): a launch that needs it loads it then */
    bool defer_scalar;
    ptc_metrics *m;
    CUmodule *mod;
    CUfunction *fn, *vfn, *ffn;
} ptc_cuda_slot;

/* Loads the modules of slots[0..n): one cubin per distinct cubin key (from
 * the disk cache or the driver's JIT, largest PTX first, on a pool of
 * threads), each slot's module from it. -1 with err: the first failure. */
int ptc_cuda_load_slots(ptc_cuda_slot *slots, int n, ptc_error *err);
/* The threads for n items of work (PTC_COMPILE_THREADS, else the cores;
 * at most 16 and n), and fn(arg) run on that many (on this thread alone
 * where one is enough or none starts): fn takes the items itself. */
int ptc_cuda_threads_for(int n);
void ptc_cuda_run_pool(void *(*fn)(void *), void *arg, int n);

/* Whether compiles defer scalar entries that have a vectorised twin
 * (PTC_CUDA_DEFER_SCALAR, on unless 0): most launches run the vectorised
 * one, and the driver's JIT of the scalar one was a third of a cold step's. */
bool ptc_cuda_defer_scalar(void);
/* Loads the deferred scalar entry of kernel k (ci < 0) or combination ci
 * of cp on L's device (into L->fn[k] or L->cfn[ci]); 0 if it is there. The
 * caller holds cp->lock. */
int ptc_cuda_load_scalar(ptc_cuda_prog *cp, const ptc_schedule *s, cloaded *L, int k, int ci,
                         ptc_error *err);

/* The program's functions on device d, loading them on first use. */
cloaded *ptc_cuda_loaded_on(ptc_program *p, ptc_cuda_device *d, ptc_error *err);
/* The 64-bit variants (ckernel.wide) of kernels ks[0..n) of s, generated
 * with co but for the index width (those the cache lacks in one compile
 * worker, as a compile's kernels are); not loaded. */
int ptc_cuda_generate_wide(ptc_cuda_prog *cp, const ptc_schedule *s, const ptc_codegen_opts *co,
                           int *ks, int n, ptc_error *err);
/* Loads kernel k's 64-bit variant on L's device (into L->wide[k]). */
int ptc_cuda_load_wide(ptc_cuda_prog *cp, const ptc_schedule *s, int k, cloaded *L, ptc_error *err);

#endif
