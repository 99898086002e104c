/* Internal to compiler/runtime: the C kernels behind externs when no framework
 * runs them (GEMM, convolution, attention, cumsum, scatter_add). */
#ifndef PTC_RT_H
#define PTC_RT_H

#include "runtime/runtime.h"

/* C[M,N] = A[M,K] @ B[K,N] (+ C when accumulate), any element strides. */
void ptc_sgemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t sam, int64_t sak,
               const float *B, int64_t sbk, int64_t sbn, float *C, int64_t scm, int64_t scn,
               bool accumulate);
void ptc_dgemm(int64_t M, int64_t N, int64_t K, const double *A, int64_t sam, int64_t sak,
               const double *B, int64_t sbk, int64_t sbn, double *C, int64_t scm, int64_t scn,
               bool accumulate);

/* ---- per-thread scratch of the C kernels (scratch.c) ---- */

/* What a scratch buffer is for; a call holds one slot at a time per use,
 * and the kernels it calls hold others. */
typedef enum {
    PTC_SCRATCH_PACK_A,  /* a GEMM thread's packed panel of A */
    PTC_SCRATCH_PACK_B,  /* ... of B */
    PTC_SCRATCH_COLUMNS, /* a convolution task's im2col (col2im) matrix */
    PTC_SCRATCH_CONV_X,  /* a convolution's contiguous copy of its input */
    PTC_SCRATCH_CONV_Y,  /* ... the contiguous result it copies out */
    PTC_SCRATCH_SLOTS
} ptc_scratch_slot;
/* The calling thread's buffer for slot, of at least bytes (64-aligned),
 * kept for the thread's life and grown as calls need: not freed by callers. */
void *ptc_scratch(ptc_scratch_slot slot, size_t bytes);
/* What a program's C externs will ask of the thread that runs the program
 * (caller) and of every thread of the OpenMP team (team). */
typedef struct ptc_scratch_need {
    size_t caller[PTC_SCRATCH_SLOTS], team[PTC_SCRATCH_SLOTS];
} ptc_scratch_need;
void ptc_scratch_need_at_least(ptc_scratch_need *need, bool team, ptc_scratch_slot slot,
                               size_t bytes);
/* Grows the calling thread's slots to bytes[PTC_SCRATCH_SLOTS] and touches
 * every page, so that calls find them in memory. */
void ptc_scratch_reserve(const size_t *bytes);
/* Writes a byte of every page of [mem, mem + bytes): the first-touch page
 * faults happen now rather than in a later call. */
void ptc_touch_pages(void *mem, size_t bytes);
/* Adds to need what one GEMM of M x N x K (f64 or f32) asks: the packed
 * panels of the calling thread, or of every team thread when it splits or
 * runs on each of them (in_team: inside a parallel region, serially).
 * Called outside parallel regions. */
void ptc_gemm_scratch(int64_t M, int64_t N, int64_t K, bool f64, bool in_team,
                      ptc_scratch_need *need);
/* Adds to need what extern node asks when it runs on ptc's C kernels with
 * these arguments (their sizes and strides; data is not read). */
void ptc_cextern_scratch(const ptc_node *node, const ptc_tensor *const *inputs,
                         const ptc_tensor *outs, ptc_scratch_need *need);

/* Runs an extern node on C kernels: mm, bmm, addmm, convolution,
 * scaled_dot_product_attention, prims.cumsum, prims.scatter_add. inputs are
 * the node's tensor args in schema order (NULL: absent); outs are allocated
 * (contiguous). */
int ptc_cextern_run(const ptc_node *node, const ptc_tensor *const *inputs, int ninputs,
                    ptc_tensor *outs, uint64_t rng_offset, ptc_error *err);



/* ---- programs (runtime.c compiles them, exec.c runs them) ---------------------------- */

#include "codegen/codegen.h"

#include <pthread.h>

/* A configuration a kernel can run in: on the CPU, its parallel split (a =
 * threads, 1 for the calling thread; b = chunks of the outer range, handed
 * out in order) or its code's form (a = vector lanes, b = PTC_UNROLL_*,
 * ptc_cpu_code); on CUDA, its launch (a = form, plan.c; b = 1 for the
 * vectorised entry). A CPU matmul extern's implementation: a = PTC_MM_TORCH
 * or PTC_MM_PTC (b unused). */
typedef struct ptc_tune_choice {
    int a, b;
} ptc_tune_choice;

/* The implementations max-autotune picks between for a CPU matmul (mm, bmm,
 * addmm): the host framework's (torch's mm: MKL/oneDNN) or ptc's own cache-
 * blocked GEMM (gemm.c, through cextern.c). */
enum { PTC_MM_TORCH, PTC_MM_PTC };

/* max-autotune's state of a program (autotune.c). */
typedef struct ptc_autotune {
    double budget_ms, spent_ms;
    uint8_t *state;          /* per kernel and stage (PTC_TUNE_STAGES slots per kernel),
                              * then per loop node (an extern's implementation):
                              * 0 untuned, 1 being tuned, 2 tuned */
    ptc_tune_choice *choice; /* per kernel and stage: the winner, once tuned */
    ptc_cpu_kernel *code;    /* per kernel: the CPU code of the winning form when it is
                              * not the program's own (fn NULL otherwise) */
} ptc_autotune;

/* What is tuned, in order: a CPU kernel's code form first, then its split. */
enum { PTC_TUNE_LAUNCH, PTC_TUNE_CODE, PTC_TUNE_STAGES };

enum { PTC_TEXT_PRIMS, PTC_TEXT_LOOPS, PTC_TEXT_KERNELS, PTC_TEXT_LLVM, PTC_TEXT_PTX, PTC_TEXT_COUNT };

struct ptc_program {
    int refs;
    ptc_backend backend;
    ptc_graph *graph;        /* reference: the input graph; cpu: the prims graph */
    ptc_arena *arena;        /* loop program, schedule, copied types */
    int ninputs, noutputs;
    ptc_ttype *in_types, *out_types;
    const char **in_names;
    ptc_lprog *prog;
    ptc_schedule *sched;
    ptc_cpu_kernel *kernels;
    struct ptc_cuda_prog *cuda; /* CUDA: PTX, launch plans, loaded modules (cuda_prog.h) */
    ptc_program_info info;
    char *text[PTC_TEXT_COUNT];
    /* a cached arena for runs (one run at a time uses it; others malloc) */
    pthread_mutex_t lock;
    void *mem;
    size_t mem_size;
    bool mem_busy;
    /* symbolic sizes: the arena layout placed for the last sizes seen (under
     * lock), which a loop of same-sized calls reuses */
    ptc_bindings layout_sizes;
    bool layout_provided; /* laid out without the extern-provided buffers */
    bool layout_segmented; /* split into segments (ptc_exec_layout.nsegs) */
    int64_t *layout_offset, *layout_nbytes, layout_size;
    int *layout_seg_of, layout_nsegs;
    /* PTC_ACCURACY: the input graph, which the interpreter runs on the first
     * run's inputs to check its outputs */
    ptc_graph *source;
    int accuracy_checked;
    ptc_autotune *tune; /* max-autotune (opts->autotune), else NULL */
    /* opts->extern_output_layouts: per buffer, a graph output an extern
     * writes and no node reads, which keeps torch's dense layout; else NULL */
    bool *any_layout;
    /* the buffers of the graph's inputs (PTC_LB_INPUT), which every run
     * points at its inputs: listed once at the compile, not found among all
     * of the program's buffers per run */
    int *input_bufs, ninput_bufs;
};

/* Fills p->any_layout (ptc_compile_opts.extern_output_layouts). */
void ptc_exec_mark_any_layouts(ptc_program *p);
/* Fills p->input_bufs (every compiled program with a loop program). */
void ptc_exec_list_input_bufs(ptc_program *p);

/* ---- max-autotune (autotune.c) ---- */
int ptc_autotune_prepare(ptc_program *p, double budget_ms);
void ptc_autotune_free(ptc_program *p);
/* What an executor offers the tuner for one kernel: the candidates (the
 * default first), how to run one and time it, and the sizes they were
 * timed at (part of the cache key: "outer 2^10 work 2^12 threads 16"). */
typedef struct ptc_tune_target {
    const char *what; /* "cpu split", "cpu code", "cuda launch", "cpu matmul" */
    int stage;        /* PTC_TUNE_LAUNCH (split, launch) or PTC_TUNE_CODE */
    const ptc_tune_choice *cands;
    int n;
    char sizes[192];
    /* runs the kernel once: its ms, or < 0 when it failed (the search stops
     * there and keeps nothing) */
    double (*time)(void *ctx, const ptc_tune_choice *c);
    void *ctx;
} ptc_tune_target;
/* Kernel ki's configuration in *out: the tuned one, the disk cache's, the
 * fastest candidate timed now, or the default (cands[0]) while another run
 * tunes it. True when the kernel ran (it was timed): the caller runs it
 * otherwise. */
bool ptc_autotune_pick(ptc_program *p, int ki, const ptc_tune_target *t, ptc_tune_choice *out);
/* The same for extern n of p->prog (which implementation runs it); the key
 * is the op and t->sizes (its inputs' dtypes, sizes and strides). */
bool ptc_autotune_pick_extern(ptc_program *p, const ptc_lnode *n, const ptc_tune_target *t,
                              ptc_tune_choice *out);
/* Extern n's implementation once a run has chosen it (false before): the
 * path every later call takes, without describing its operands. */
bool ptc_autotune_extern_settled(const ptc_program *p, const ptc_lnode *n, ptc_tune_choice *out);
/* Kernel ki's tuned configuration (its split or launch), if it has one. */
bool ptc_autotune_tuned(const ptc_program *p, int ki, ptc_tune_choice *out);
/* The same for a stage (PTC_TUNE_*). */
bool ptc_autotune_tuned_stage(const ptc_program *p, int ki, int stage, ptc_tune_choice *out);
int ptc_autotune_log2(int64_t n);

int ptc_exec_cpu(ptc_program *p, const ptc_tensor *inputs, int ninputs, ptc_tensor *outputs,
                 const ptc_host *host, uint64_t rng_offset, ptc_error *err);

/* ---- shared by the executors (runtime.c; used by exec.c and cuda_exec.c) ------------ */

/* A dimension's size under a run's bindings. */
int64_t ptc_exec_dim(const ptc_bindings *b, ptc_dim d);

/* The arena of a run: each temporary's byte offset and size (offset[n],
 * nbytes[n] for the schedule's n buffers; 0 bytes outside the arena) and the
 * arena's total. */
typedef struct ptc_exec_layout {
    int64_t *offset, *nbytes; /* per buffer; offsets within its segment */
    int64_t size;             /* all segments' bytes */
    int nsegs;                /* 1: one arena for the whole run */
    int *seg_of;              /* per arena buffer */
    int64_t seg_bytes[PTC_MPLAN_MAX_SEGMENTS];
    int seg_first[PTC_MPLAN_MAX_SEGMENTS], seg_last[PTC_MPLAN_MAX_SEGMENTS];
} ptc_exec_layout;
/* Fills l (freed by ptc_exec_layout_free, or on failure). segmented: split
 * into segments where that lowers the run's peak (ptc_mplan_segment, with
 * the inputs counted as let go at their last read where host takes them).
 * A static plan
 * gives the compile's layout; a symbolic one is placed for the run's sizes
 * and checked, once per new set of sizes: the program keeps the last layout
 * for calls of the same sizes. Temporaries an extern's kept result will
 * provide in this run (ptc_exec_extern_keeps with host, dev, outs_given)
 * take no room: the arena is placed without them, once, and kept alike. */
int ptc_exec_arena_layout(ptc_program *p, const ptc_bindings *b, const ptc_host *host,
                          ptc_device dev, bool outs_given, bool segmented, ptc_exec_layout *l,
                          ptc_error *err);
/* Whether a run with host on dev splits its arena into segments (each
 * allocated through host->alloc at its first step, released after its last:
 * ptc_mplan_segment): on CUDA with a host allocator (torch's caching
 * allocator keeps the blocks), on the CPU only with PTC_ARENA_SEGMENTS=1
 * (malloc gives a freed segment's pages back and the next run faults them
 * in again: BERT-2L's CPU step 70.8 -> 80.7 ms, 2,000 more faults a step);
 * never with PTC_ARENA_SEGMENTS=0. */
bool ptc_exec_segments_on(const ptc_host *host, ptc_device dev);
/* Allocates the segments of l whose first step is at most t (from *next on,
 * which it advances) through host on dev, and points their buffers there
 * (buffers of no bytes: ptc_exec_point_arena, called first with base 0). */
int ptc_exec_segments_alloc(const ptc_program *p, const ptc_exec_layout *l, const ptc_host *host,
                            ptc_device dev, int t, int *next, ptc_tensor *segs, void **bufptr,
                            ptc_error *err);
/* Releases the segments of l whose last step is t. */
void ptc_exec_segments_release_after(const ptc_exec_layout *l, int t, ptc_tensor *segs);
void ptc_exec_layout_free(ptc_exec_layout *l);
/* Points bufptr at each buffer in the arena: the arena's base address plus
 * its offset, or empty (readable zeros) where it has no bytes. */
void ptc_exec_point_arena(const ptc_program *p, const ptc_exec_layout *l, uintptr_t base,
                          const void *empty, void **bufptr);
/* Points bufptr at each input buffer: its tensor's data (conformed[i]'s
 * where that holds a copy, conformed may be NULL), or empty where it has no
 * elements. */
void ptc_exec_point_inputs(const ptc_program *p, const ptc_tensor *inputs,
                           const ptc_tensor *conformed, const void *empty, void **bufptr);
/* The end of a run: outs become the caller's outputs (ok), or are released. */
void ptc_exec_hand_over(const ptc_program *p, bool ok, ptc_tensor *outs, ptc_tensor *outputs);

/* How a run allocates the graph's outputs. */
typedef struct ptc_exec_alloc {
    const ptc_bindings *b; /* the run's sizes */
    const ptc_host *host;  /* its allocator wins when it has one: the outputs are the user's */
    ptc_device device;
    /* else the executor's own, a contiguous tensor on device */
    int (*own)(void *ctx, ptc_tensor *t, ptc_dtype dt, int ndim, const int64_t *sizes,
               ptc_error *err);
    void *ctx;
    void *empty; /* what an output without elements points its buffer at */
    /* the run's inputs, and their typed-layout copies (storage NULL where
     * none): an output written into an input's memory is that tensor */
    const ptc_tensor *inputs, *conformed;
    /* the run's externs hand their results over as graph outputs
     * (ptc_exec_kept.outs): those outputs are not allocated */
    bool extern_results_are_outputs;
} ptc_exec_alloc;

/* Allocates the outputs of outs[p->noutputs] that step t or an earlier one
 * writes (ptc_mplan.output_first; t = -1: those no step writes), from
 * *next on in ptc_mplan.output_order, which it advances; an output that is
 * the same buffer as an earlier one shares its tensor. Points bufptr[buffer]
 * at each. Called before each step, an output lives from the step that
 * makes it, as eager's results do, not from the run's start. */
int ptc_exec_alloc_outputs(const ptc_program *p, const ptc_exec_alloc *a, int t, int *next,
                           ptc_tensor *outs, void **bufptr, ptc_error *err);

/* Binds the symbols of the inputs' types from their sizes and checks every
 * dim, in passes while one binds more (a dim over a symbol a later input
 * binds is checked in the next). */
int ptc_exec_check_inputs(const ptc_program *p, const ptc_tensor *in, ptc_bindings *b,
                          ptc_error *err);

/* The strides the compiled code assumes for a tensor of type t (its own for
 * a strided type, else contiguous) under a run's sizes. */
void ptc_exec_typed_strides(const ptc_bindings *b, const ptc_ttype *t, int64_t *strides);


/* An extern's arguments as tensors on dev: each input a view of its buffer
 * (NULL where it has none; at most 16), each output (at most 2) its whole
 * buffer, contiguous. Returns the number of outputs. */
int ptc_exec_extern_args(const ptc_program *p, const ptc_bindings *b, void *const *bufptr,
                         const ptc_lnode *n, ptc_device dev, ptc_tensor in[16],
                         const ptc_tensor *inp[16], ptc_tensor outs[2]);
/* An extern node with its symbolic int arguments (a convolution's padding
 * s0//8) evaluated under a run's sizes, so the kernels behind externs, torch's
 * and ptc's C ones, read numbers: the node itself when it has none. */
typedef struct ptc_exec_bound {
    ptc_node node;
    ptc_arg args[16];
    ptc_dim dims[64]; /* the int lists' values */
} ptc_exec_bound;
const ptc_node *ptc_exec_bind_node(const ptc_node *n, const ptc_bindings *b, ptc_exec_bound *out);
/* Whether extern n runs through the host framework (torch) rather than ptc's
 * C kernels: the matmul, convolution and attention kinds whenever there is a
 * host; cumsum and the scatters only on CUDA, where the C kernel needs its
 * inputs copied to the host and its result back (GPT-2's embedding gradient:
 * 154 MB each way per step). */
bool ptc_exec_extern_by_host(const ptc_host *host, const ptc_lnode *n, ptc_device dev);
/* t's dtype, rank, sizes and strides: buffer lb as a tensor of its graph
 * value's (logical) shape — channels-last strides for a permuted buffer. */
void ptc_exec_buf_logical(const ptc_bindings *b, const ptc_lbuf *lb, ptc_tensor *t);

/* Extern results kept while their buffers are read, their memory serving
 * as the extern's output buffers (ptc_host.run_extern_new): one copy fewer
 * per extern than writing them into the arena. */
typedef struct ptc_exec_kept {
    ptc_tensor *t;
    int *buf; /* t[i] is buffer buf[i]; -1 once released */
    int n, cap;
    /* The run's graph outputs, or NULL. Given, a result that is a graph
     * output becomes that output (the tensor allocated for it is released):
     * a weight gradient from torch's convolution_backward is the user's
     * .grad without a copy (resnet18's training step copied 9.4 MB
     * gradients at 7 ms each on this machine). */
    ptc_tensor *outs;
} ptc_exec_kept;
/* Runs extern n (node: n->xnode with its arguments bound, ptc_exec_bind_node)
 * through host->run_extern_new when the host has it and every
 * output of n is a temporary or (kept->outs given) a graph output (else the
 * user's outputs are written in place by host->run_extern), pointing bufptr
 * at the results; returns 1 when it did not apply, 0 when it ran, -1 on error
 * (a result that is not laid out as its buffer — contiguous, or channels-last
 * for a permuted one — with its type and sizes on dev's kind is one). */
/* Whether ptc_exec_extern_kept applies to extern n in a run with host on
 * dev: the host runs it, has run_extern_new, and each of its outputs is a
 * temporary or (outs_given: the run's graph outputs are kept->outs) a graph
 * output, none of them with padded rows (written through out=). */
bool ptc_exec_extern_keeps(const ptc_program *p, const ptc_host *host, const ptc_lnode *n,
                           ptc_device dev, bool outs_given);
int ptc_exec_extern_kept(const ptc_program *p, const ptc_bindings *b, void **bufptr,
                         const ptc_host *host, const ptc_lnode *n, const ptc_node *node,
                         const ptc_tensor *const *inp, ptc_device dev, ptc_exec_kept *kept,
                         ptc_error *err);
void ptc_exec_kept_release(ptc_exec_kept *kept);
/* Releases the kept results of temporaries last read at step t (the memory
 * plan's live range), so that they go back to the framework's allocator as
 * eager's intermediates do, not at the end of the run: resnet50's training
 * backward on CUDA held 686 MiB of convolution input gradients at once. */
void ptc_exec_kept_release_after(const ptc_program *p, ptc_exec_kept *kept, int t);
/* Tells the host (ptc_host.input_done) which inputs step t was the last to
 * read; *next (0 at the start of a run) walks ptc_mplan.input_order. */
void ptc_exec_inputs_done_after(const ptc_program *p, const ptc_host *host, int t, int *next);
/* A run failed with steps [0, t) started: where one of them wrote a graph
 * input in place, err->inputs_written is set. */
void ptc_exec_failed_after(const ptc_program *p, int t, ptc_error *err);
/* The tensor of view v over bufptr[v->buf] on dev. */
ptc_tensor ptc_exec_view(const ptc_program *p, const ptc_bindings *b, void *const *bufptr,
                         const ptc_lview *v, ptc_device dev);
#endif /* PTC_RT_H */
