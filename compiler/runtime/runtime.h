/* ptc runtime: execute a compiled program.
 *
 * Owns: compiled programs (kernels + memory plan, reference counted because
 * they outlive a compile; built by compiler/pipeline's ptc_compile), and
 * execution on CPU (OpenMP) or CUDA (driver API via dlopen).
 *
 * A host framework (the Python module) plugs in through ptc_host: it allocates
 * outputs so that they belong to the user, runs extern ops (mm, bmm, addmm,
 * convolution, scaled_dot_product_attention) with its own kernels, and names
 * the stream to launch on. With no host, outputs are malloc'd ptc tensors and
 * externs run on ptc's own C implementations, so ptc-run and ptminify work
 * without Python.
 */
#ifndef PTC_RUNTIME_H
#define PTC_RUNTIME_H

#include "logs/logs.h"
#include "ops/ops.h"

typedef struct ptc_program ptc_program;

typedef enum {
    PTC_BACKEND_REFERENCE = 0, /* ptc_interp_run on the stage-1 graph */
    PTC_BACKEND_CPU = 1,       /* LLVM ORC JIT + OpenMP */
    PTC_BACKEND_CUDA = 2,      /* LLVM NVPTX + CUDA driver */
} ptc_backend;

typedef struct ptc_compile_opts {
    ptc_backend backend;
    ptc_trace_compile *trace; /* optional: every stage is written here */
    ptc_metrics *metrics;     /* optional: per-pass ms, node/kernel counts, cache hits */
    bool no_cache;            /* skip the on-disk kernel cache */
    const char *kernel_dir;   /* optional: the kernel cache directory of this compile
                               * (an exported package's kernels/<target>) */
    bool keep_text;           /* keep each stage's text (ptc_program_text) */
    int cuda_sm;              /* CUDA: target compute capability x 10 (80, 90); 0 = the
                               * device's. With a target no GPU is needed to compile:
                               * kernels load on the first run's device. */
    int cuda_sms;             /* with cuda_sm: the multiprocessors the launch plans are
                               * for (0: PTC_CUDA_DEFAULT_SMS, an H100's) */
    /* CUDA: the 64-bit index variants of the kernels planned with 32-bit
     * indices for symbolic sizes are generated now too (into kernel_dir),
     * not when a call first needs one: an export package is sealed with
     * them. A program whose kernels came from kernel_dir takes their
     * variants from there, never generated. */
    bool cuda_wide_variants;
    bool autotune;            /* max-autotune: each kernel's configuration (CPU: parallel
                               * split; CUDA: form and vectorised entry) is timed at its
                               * first run and the fastest kept (autotune.c), cached */
    double autotune_budget_ms; /* the program's tuning time at most; 0 = the default
                                * (PTC_AUTOTUNE_BUDGET_MS, else 2000) */
    bool extern_output_layouts; /* CPU: a graph output that an extern writes and no
                                 * node reads is torch's result in torch's own layout
                                 * where that is dense (a training backward: a
                                 * channels-last weight's gradient comes back
                                 * channels-last, as ptc._autograd wants it, not
                                 * copied contiguous) */
    bool contiguous_layouts;    /* no channels-last layout planning unless
                                 * PTC_LAYOUT=channels_last (ptc_layout_plan) */
    bool weights_kept;          /* the caller hands convolutions kept channels-last
                                 * copies of their weight inputs (the capture's
                                 * weight cache): layout planning converts none */
    /* Optional, [graph outputs]: the input whose memory output i may be
     * written into (its new value, which the caller copies into that input
     * after the run), -1 for none. Where the schedule allows it
     * (ptc_schedule_write_in_place) the run writes the input itself and
     * hands it back as the output (ptc_program_output_input). */
    const int *output_inputs;
    /* no folding of per-channel affine epilogues (eval BatchNorm) into
     * convolution weights (a training graph: the fold would scale the
     * weights every step); also PTC_FOLD_CONV=0 */
    bool keep_conv_epilogues;
    bool trace_keeps_captured;  /* the trace's captured stage is the caller's (a
                                 * training forward: captured.ptir stays the user's
                                 * graph, forward.ptir is this one); the stages
                                 * from prims on are written */
} ptc_compile_opts;

/* Keeps glibc from trimming the heap's top under a CPU training step
 * (heap.c says why): sets malloc's mmap threshold to 32 MiB and its trim
 * threshold to twice gradient_bytes, 64 MiB at least, unless the user tuned
 * malloc. Returns the trim threshold in force (0: left alone). */
size_t ptc_runtime_keep_heap(size_t gradient_bytes);

/* Readies a CPU program for a first run that costs what later ones do, on
 * its C kernels (no host: an exported model run from C): starts the OpenMP
 * team and, for a static memory plan, allocates the program's arena and
 * gives every team thread the scratch memory the C kernels behind its
 * externs will ask for (runtime/rt.h, ptc_scratch), touching every page,
 * so that no run takes their first-touch page faults. The calling thread's
 * scratch is readied for the externs' serial work: warm a program on the
 * thread that will run it. Returns the bytes touched (0 for other backends). */
size_t ptc_program_warm(ptc_program *p);

void ptc_program_retain(ptc_program *p);
void ptc_program_release(ptc_program *p);

typedef struct ptc_host {
    void *ctx;
    /* Allocates a tensor for a graph output (or, on CUDA, the arena) on dev. */
    int (*alloc)(void *ctx, ptc_tensor *t, ptc_dtype dt, int ndim, const int64_t *sizes,
                 ptc_device dev, ptc_error *err);
    /* Runs an extern node: `node` gives the op and its non-tensor args (schema
     * order); inputs are its tensor args in order (NULL for an absent optional);
     * outs[node->nout] are allocated and must be written. */
    int (*run_extern)(void *ctx, const ptc_node *node, const ptc_tensor *const *inputs,
                      int ninputs, ptc_tensor *outs, ptc_error *err);
    /* The stream to launch on for a CUDA device (CUstream), NULL = default. */
    void *(*cuda_stream)(void *ctx, ptc_device dev);
    /* Optional: runs an extern node like run_extern but returns its
     * results as new tensors of the framework (outs[i] receive references)
     * instead of writing ptc's buffers; the run keeps them while their
     * buffers are read (released after the last reading step) and uses their
     * memory as the node's outputs, which saves a copy per extern.
     * outs[k] arrive with the dtype, sizes and strides the buffer wants
     * (contiguous, or channels-last where layout planning chose it): the
     * host hands back a result laid out so, converting it if torch's is not.
     * Strides all 0 ask for any dense layout (ptc_tensor_is_dense): torch's
     * result as it is where it is dense, else contiguous
     * (ptc_compile_opts.extern_output_layouts). */
    int (*run_extern_new)(void *ctx, const ptc_node *node, const ptc_tensor *const *inputs,
                          int ninputs, ptc_tensor *outs, ptc_error *err);
    /* Optional: whether run_extern writes node's results straight into the
     * buffers it is given (torch's out= forms: mm, bmm, addmm). Such an
     * extern is run so even where run_extern_new could be: a result written
     * in place is not read back, nor allocated and freed, each call. */
    bool (*writes_in_place)(void *ctx, const ptc_node *node);
    /* Optional: the run reads input i no more (called once per input, after
     * the last step that reads it, or after the first step for an input no
     * step reads); the host may release an input it handed over for good.
     * Not called under PTC_ACCURACY, whose check reads the inputs after the
     * run. On CUDA the steps are queued, not done: a tensor released here
     * goes back to a stream-ordered allocator (torch's), as eager's frees do. */
    void (*input_done)(void *ctx, int input);
    /* Optional (CUDA): the device address of an int64 that the kernels
     * drawing random numbers add to the run's rng_offset, read when they run
     * (NULL: nothing is added). A CUDA graph recorder passes its own cell and
     * rewrites it before each replay, so every replay draws anew from the
     * one recording, as torch's graphs read their philox offset. */
    const void *rng_cell;
    /* Optional: makes graph output i itself (returns 1: outs[i] is set to a
     * contiguous tensor), leaves it to alloc (0) or fails (-1), with
     * output_ctx. From the run's start outs[noutputs] hold every output's
     * dtype, sizes and device (data NULL until made; ndim -1 for an output
     * the run does not allocate: written into an input, an extern's result,
     * a second name of an earlier output), so a host can put several in one
     * allocation of its own: ptc's training forward places its saved values
     * in a few blocks (compiler/capture/backend/saved_blocks.c). */
    int (*alloc_output)(void *output_ctx, int i, ptc_tensor *outs, int noutputs, ptc_error *err);
    void *output_ctx;
} ptc_host;

/* Runs a program. outputs[noutputs] receive new references. host may be NULL.
 * rng_offset feeds random ops (see ptc_rng_key). */
int ptc_program_run(ptc_program *p, const ptc_tensor *inputs, int ninputs, ptc_tensor *outputs,
                    const ptc_host *host, uint64_t rng_offset, ptc_error *err);

/* Introspection for tools: number of kernels, how many came from the cache. */
typedef struct ptc_program_info {
    int nkernels;
    int ncompiled;
    int ncached;
    int nexterns;
    size_t arena_bytes; /* the last run's arena: before one, a static plan's (symbolic: 0); a
                           run whose externs' kept results provide buffers places less; all
                           its segments' bytes */
    int arena_segments; /* the segments the last run's arena was split into (ptc_mplan_segment;
                           1: one arena) */
} ptc_program_info;
void ptc_program_get_info(const ptc_program *p, ptc_program_info *info);
/* The graph input whose memory output i is written into (the run hands that
 * input back as output i; ptc_compile_opts.output_inputs), or -1. */
int ptc_program_output_input(const ptc_program *p, int i);
/* The first graph output that is the same tensor as output i (a value the
 * graph returns twice is one buffer, and the run hands out one tensor for
 * it): i itself when no earlier output is. */
int ptc_program_output_first(const ptc_program *p, int i);
/* The last step of a run that reads input i (-1: none; steps count from 0),
 * after which the run lets it go (ptc_host.input_done). */
int ptc_program_input_last(const ptc_program *p, int i);

/* The printed form of a stage of the compile ("prims", "loops", "kernels",
 * "llvm" (CPU), "ptx" (CUDA)), kept when opts->keep_text was set; NULL otherwise. */
const char *ptc_program_text(const ptc_program *p, const char *stage);

/* What max-autotune did in this process: kernels tuned (candidates timed),
 * winners read from the disk cache instead, searches the budget cut short,
 * candidates timed, the milliseconds spent timing and the longest single
 * timed run (the most a budget can be overrun by); only_choice: the
 * configurations settled without a search because their first run had one
 * candidate (a single outer iteration, one planned form). */
typedef struct ptc_autotune_counts {
    int tuned, cache_hits, budget_cut, candidates_timed, only_choice;
    double ms, slowest_run_ms;
} ptc_autotune_counts;
void ptc_autotune_get_counts(ptc_autotune_counts *out);
/* A program's tuning budget when its options give none: PTC_AUTOTUNE_BUDGET_MS, else 2000. */
double ptc_autotune_default_budget_ms(void);

/* ---- CUDA for tools and tests ----------------------------------------------------- */

/* CUDA kernel launches in this process by the width of their index
 * arithmetic, and the 64-bit variants of symbolic kernels generated because
 * a call's sizes were past the 32-bit bound (ptc_cuda_fits_i32). */
typedef struct ptc_cuda_index_counts {
    int64_t launches_i32, launches_i64, wide_variants;
} ptc_cuda_index_counts;
void ptc_cuda_get_index_counts(ptc_cuda_index_counts *out);

/* 0 when the CUDA backend can run here (a driver and a device); otherwise -1
 * with the reason in err ("no NVIDIA driver: ...", "built without CUDA"). */
int ptc_cuda_available(ptc_error *err);
/* The architecture kernels are generated for on the current device (its
 * compute capability x 10, capped at 90 as codegen is); -1 with err without one. */
int ptc_cuda_device_arch(ptc_error *err);
/* A copy of t on dev with t's strides (the memory span t covers is copied):
 * CPU -> CUDA, CUDA -> CPU or CUDA -> CUDA through the host, synchronously.
 * The copy holds one reference. */
int ptc_tensor_to_device(const ptc_tensor *t, ptc_device dev, ptc_tensor *out, ptc_error *err);
/* Writes copy, made from t by ptc_tensor_to_device(t, PTC_CPU, copy), back
 * into t's memory (undoing writes made to t since), synchronously. */
int ptc_tensor_put_back(const ptc_tensor *t, const ptc_tensor *copy, ptc_error *err);

#endif /* PTC_RUNTIME_H */
