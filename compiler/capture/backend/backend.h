/* Backends: running an entry's graph (compiler/capture/backend).
 *
 * An entry's graph runs on one backend: "eager" (torch ops, node by node),
 * "ptc" (compiler/pipeline and compiler/runtime, with torch as the host),
 * the training program (compiled forward and backward as one autograd
 * node), a user's callable, or the reference interpreter. Backends know
 * entries and nothing above them: a failure is a return value (and, for a
 * fallback to torch ops, a message) that the caller reports.
 */
#ifndef PTC_CAP_BACKEND_H
#define PTC_CAP_BACKEND_H

#include "capture/entry/entry.h"

/* Runs the graph on the state's values; outputs[graph->noutputs] new refs.
 * *fell_back (malloc'd, NULL if none): the failure of a compiling backend
 * after which the graph ran through torch ops instead; the caller reports it. */
int cap_entry_run_graph(cap_entry *e, PyObject **vals, PyObject **outputs, char **fell_back);
/* A run that failed after writing graph inputs in place must not run again
 * (eagerly: the writes would repeat): the pending error is ptc.PartialRunError,
 * or the user's own (a failed check) marked by cap_mark_partial_run, as is a
 * check failing on CUDA, where eager would not raise it. */
void cap_mark_partial_run(void);
bool cap_is_partial_run(void);
/* Preparing, running and freeing an entry's backend. */
int cap_backend_prepare(cap_entry *e, const cap_options *opts, ptc_error *err);
void cap_backend_free(cap_entry *e);
int cap_backend_run(cap_entry *e, PyObject **inputs, PyObject **outputs);
/* The runtime (backend "ptc"): compile, run with torch as the host, release. */
/* For each output of e's graph, the input it is the new value of
 * (cap_entry.writeback), or -1; malloc'd, NULL with err set. */
int *cap_writeback_inputs(const cap_entry *e, ptc_error *err);
/* mode: ptc.compile's; reduce-overhead and max-autotune record the
 * program's CUDA runs into CUDA graphs (a notice where they cannot: CPU
 * programs), the max-autotune modes tune its kernels. */
int cap_runtime_compile(cap_entry *e, const char *mode, void **program, ptc_trace_compile *tc,
                        ptc_error *err);
int cap_runtime_run(cap_entry *e, void *program, PyObject **inputs, PyObject **outputs);
/* Whether a CUDA graph needing gradients has its compiled forward and
 * backward recorded into CUDA graphs under reduce-overhead / max-autotune:
 * with ptc's compiled autograd (compiled); where the mode cannot act, one
 * notice says why. */
bool cap_runtime_records_training(const ptc_graph *g, const char *mode, bool compiled);
/* Compiled forward and backward of a graph that needs gradients, whole
 * (backend_train.c; the caller checks that it has one grad mode): a
 * ptc._C.TrainProgram, run as one autograd node (a ptc._cudagraphs.
 * TrainGraphs over it where mode records CUDA graphs). */
int cap_train_prepare(cap_entry *e, const char *mode, PyObject **program, ptc_error *err);
int cap_train_run(cap_entry *e, PyObject *program, PyObject **inputs, PyObject **outputs);
/* The TrainProgram of graph g (e's, or a piece of it; written[k]: output k
 * is the new value of an input written in place, output_inputs[k] (or
 * NULL: none) the input its forward may write it into itself); its stages
 * go to tc (or nowhere: NULL). NULL with err set on failure. */
PyObject *cap_train_program(const ptc_graph *g, const bool *written, const int *output_inputs,
                            ptc_trace_compile *tc, ptc_error *err);
/* A TrainProgram's kernels and extern calls: [0] its forward's, [1] its
 * backward's. */
void cap_train_count_kernels(PyObject *program, int kernels[2], int externs[2]);
/* What runs program under mode: reduce-overhead / max-autotune on CUDA wrap
 * it in the recorder of its forward and backward (ptc._cudagraphs.
 * TrainGraphs), one per use (a recorder's recordings are its caller's);
 * otherwise program itself. whole: program's inputs are e's graph inputs
 * (not a piece's), so the recorder learns which are held in place
 * (cap_recorder_kwargs). New reference; NULL with err set. */
PyObject *cap_train_recorded(cap_entry *e, const char *mode, PyObject *program, bool whole,
                             ptc_error *err);
/* What a CUDA graph recorder (ptc._cudagraphs) knows of e's graph inputs,
 * as its keyword arguments: held, the inputs whose tensor stays where it is
 * from call to call (module parameters and buffers, which the module holds,
 * and the entry's constant tensors), read in place instead of copied at each
 * replay, as torch's trees read static inputs; fixed_signature, whether the
 * guards fix every input's dtype, device and sizes (no size symbols), so
 * the recorder need not look them up. New dict, or NULL with an exception. */
PyObject *cap_recorder_kwargs(const cap_entry *e);
/* e's graph cut at e->cut_at (backend_pieces.c): a ptc._split.GraphPieces
 * running one TrainProgram per piece (pieces alike share one), each its own
 * autograd node; sets e->npieces and e->nprograms. */
int cap_pieces_prepare(cap_entry *e, const char *mode, PyObject **program, ptc_error *err);
/* ptc._C._compile_ptir(text): the first graph of a .ptir text compiled with
 * the ptc backend, as a capsule (kernel_dir: compiled as an export
 * package's graph, its kernels there); _run_compiled(capsule, tensors, rng)
 * runs it, binding the graph's symbolic sizes from the tensors' shapes on
 * every call (one compile for every size), its random ops drawing with rng
 * (cap_runtime_rng_value's; NULL: a fresh draw where it has any). */
PyObject *cap_compile_ptir(PyObject *text, const char *kernel_dir);
PyObject *cap_run_compiled(PyObject *capsule, PyObject *tensors, PyObject *rng);
/* ptc._C._compiled_draws(capsule): whether its program has random ops. */
PyObject *cap_compiled_draws(PyObject *capsule);
/* Any graph compiled into a program that returns its outputs as its kernels
 * write them (a .ptir text's graph). */
int cap_runtime_compile_graph(const ptc_graph *g, void **program, ptc_trace_compile *tc,
                              ptc_error *err);
/* A training step's forward and backward, compiled together (one compile
 * worker for both halves' kernels; tc: the trace compile; the forward's
 * stage files go there, and both halves' compile times, the backward's
 * named "backward_<stage>", to its metrics.json, the code of both under the
 * forward's "codegen"). A backward's gradients that torch's externs compute
 * keep torch's dense layout (ptc_compile_opts.extern_output_layouts), which
 * ptc._autograd then fits to the inputs' layouts. On the CPU both keep
 * contiguous layouts (backend_ptc.c says why). output_inputs (or NULL): for
 * each output of the forward, the input it is the new value of (-1: none),
 * which the program may write itself (ptc_compile_opts.output_inputs): a
 * forward's BatchNorm statistics. All or nothing: -1 with err, the first
 * failure (the forward's before the backward's). forward NULL: the backward
 * alone (a variant for outputs with no gradient, backend_train.c). */
int cap_runtime_compile_training(const ptc_graph *forward, const int *output_inputs,
                                 const ptc_graph *backward, void **forward_program,
                                 void **backward_program, ptc_trace_compile *tc, ptc_error *err);
/* Runs a compiled program on torch tensors; outputs receive new references.
 * The first nconsumed inputs are references the caller hands over: each is
 * released (and set to NULL) after the last step that reads it, or at the
 * end; the caller releases any left. */
/* A run's RNG offset: the value its kernels draw with, plus (CUDA) the
 * int64 a device cell holds when they run (ptc_host.rng_cell; NULL: none). */
typedef struct cap_rng {
    uint64_t offset;
    const void *cell;
} cap_rng;
/* What a run takes and makes beside torch tensors (saved_blocks.c): ready,
 * where given, [ninputs]: an input given as a ptc tensor where its owner is
 * set (a reference the run takes over, and lets go with the input; inputs[i]
 * is NULL there); placing, where given, puts outputs in blocks of its own
 * (the run hands those out as NULL). */
typedef struct cap_ready {
    ptc_tensor t;
    PyObject *owner;
} cap_ready;
typedef struct cap_placing cap_placing;
typedef struct cap_run_io {
    cap_ready *ready;
    cap_placing *placing;
} cap_run_io;
int cap_runtime_run_program(void *program, PyObject **inputs, int ninputs, int nconsumed,
                            PyObject **outputs, int noutputs, cap_rng rng, const cap_run_io *io);

/* A training forward's saved values in a few blocks (saved_blocks.c): a
 * placing puts forward outputs [first, first + n) in at most
 * CAP_SAVED_BLOCKS torch allocations, by order (the values in the order the
 * backward reads them last); a SavedLayout (cap_saved_layout_new, one per
 * run) says where each saved value sits, and expands the saved tensors (of
 * their own, then the blocks) into the backward's inputs. */
enum { CAP_SAVED_BLOCKS = 8 };
typedef struct cap_saved_layout cap_saved_layout;
cap_placing *cap_placing_new(int first, int n, const int *order);
void cap_placing_free(cap_placing *pl);
int cap_placing_alloc(void *placing, int i, ptc_tensor *outs, int noutputs, ptc_error *err);
bool cap_placing_took(const cap_run_io *io, int i);
struct ptc_host;
void cap_placing_hook(const cap_run_io *io, struct ptc_host *host); /* its alloc_output */
int cap_ready_input(const cap_run_io *io, int i, ptc_tensor *t, PyObject **held);
cap_saved_layout *cap_saved_layout_new(const cap_placing *pl, int nsaved, const int *saved_input,
                                       PyObject **blocks, int *nblocks);
bool cap_saved_layout_check(PyObject *o);
int cap_saved_layout_given(const cap_saved_layout *l);
int cap_saved_layout_expand(const cap_saved_layout *l, PyObject **given, bool owned,
                            PyObject **ins, cap_ready *ready);
/* Whether program has random ops; if so each run takes an RNG offset, drawn
 * from torch's generator by cap_runtime_rng_draw (a 0-dim int64 tensor) and
 * read by cap_runtime_rng_value: None reads as 0, a CPU tensor (or int) as
 * its value, a 0-dim int64 CUDA tensor as the cell the kernels read (a CUDA
 * graph recorder's: python/ptc/_cudagraphs.py). */
bool cap_runtime_draws(void *program);
/* What program is: its kernels, extern calls and the bytes of its arena of
 * temporaries at its last run (on the CPU the arena is malloc'd, outside
 * torch's allocator, and a memory count must add it). */
struct ptc_program_info;
void cap_runtime_info(void *program, struct ptc_program_info *info);
PyObject *cap_runtime_rng_draw(void);
/* The compiled program inside a backend program. */
struct ptc_program *cap_runtime_program(void *program);
int cap_runtime_rng_value(PyObject *draw, cap_rng *rng);
void cap_runtime_release(void *program);
/* Can the entry's graph run through torch ops (its eager steps are whole)? */
bool cap_backend_ready(cap_entry *e);

/* The eager program of a graph (eager.c; also what backends fall back to):
 * its steps through torch ops, made into *out (kept, partial, on failure:
 * cap_eager_whole says whether every node has its step). */
typedef struct cap_eager cap_eager;
int cap_eager_prepare(const ptc_graph *g, const uint8_t *node_grad, cap_eager **out);
int cap_eager_run(const ptc_graph *g, const cap_eager *ep, PyObject **inputs, PyObject **outputs);
bool cap_eager_whole(const cap_eager *ep, const ptc_graph *g);
void cap_eager_free(cap_eager *ep);
/* The outputs of e's graph that eager returns as views, planned into ep (on
 * failure they come back as copies: drop them); remade after a run from
 * their bases (ep may be NULL: none). */
int cap_eager_plan_aliases(const cap_entry *e, cap_eager *ep);
void cap_eager_drop_aliases(cap_eager *ep);
int cap_eager_remake_aliases(const ptc_graph *g, const cap_eager *ep, PyObject **inputs,
                             PyObject **outputs);

/* torch tensor -> borrowed ptc tensor (held: a reference keeping it alive);
 * a ptc tensor (CPU) -> a new torch tensor with its contents (tensors.c). */
int cap_torch_to_ptc(PyObject *t, ptc_tensor *out, PyObject **held);
PyObject *cap_torch_from_ptc(const ptc_tensor *t);
PyObject *cap_torch_view_of_ptc(const ptc_tensor *t); /* no copy (DLPack) */
/* v.contiguous(), or v.contiguous(memory_format=torch.channels_last): a new
 * reference (v itself when it is laid out so already). */
PyObject *cap_contiguous_as(PyObject *v, bool channels_last);

/* An inference program's channels-last copies of the convolution weights
 * among its graph inputs, kept from run to run while each input is the same
 * tensor at the same version (weight_cache.c). */
typedef struct cap_weight_cache cap_weight_cache;
/* The cache of an inference program of g: NULL where g has no convolution,
 * unless PTC_WEIGHT_CACHE is set (it is opt-in), or out of memory. Made
 * before g is compiled: a program compiled without one converts its weight
 * inputs channels-last with kernels of its own every call (layout.c), one
 * with one leaves them to it (ptc_compile_opts.weights_kept). output_inputs
 * (or NULL): for each output of g, the input it is the new value of (-1:
 * none); those inputs are never kept. */
cap_weight_cache *cap_weight_cache_new(const ptc_graph *g, const int *output_inputs);
void cap_weight_cache_free(cap_weight_cache *c); /* takes the GIL */
/* Whether a convolution reading channels-last `input` takes `weight`
 * (contiguous, not channels-last as well) as a channels-last copy. */
bool cap_weight_wants_channels_last(const ptc_tensor *input, const ptc_tensor *weight);
/* Convolution operand t, shown by torch tensor view, in channels-last
 * layout: where t is the memory of one of the run's graph inputs (given[i],
 * read by the runtime as ins[i]), the copy kept for that input when given[i]
 * is the tensor copied last time, at the same address, layout and
 * `_version`, else a new copy, kept (each logged: PTC_LOGS=+runtime); view
 * itself for any other operand, and for an input the program writes. A new
 * reference; NULL with an exception. */
PyObject *cap_weight_cache_get(cap_weight_cache *c, PyObject *const *given, const ptc_tensor *ins,
                               int ninputs, const ptc_tensor *t, PyObject *view);

/* Eager's output strides (out_strides.c). Kernels write outputs
 * contiguous; where eager's result is laid out otherwise (a pointwise op of
 * a transposed input, a sort of one), the compiled graph returns the output
 * permuted to be contiguous and the caller makes a tensor with eager's
 * sizes and strides over the same memory. */
typedef struct cap_out_layout {
    int8_t perm[PTC_MAX_DIMS];     /* its dims outermost first, or [0] = -1 */
    int64_t strides[PTC_MAX_DIMS]; /* eager's (size-1 dims included) */
} cap_out_layout;
/* *layout (malloc'd, per output of g) and *permuted, a copy of g returning
 * the outputs to permute permuted (NULL when none is, or g's sizes are
 * symbolic). known: strides the trace knew (cap_entry.out_strides) or NULL,
 * which win over the ops'. -1 with err set. */
int cap_plan_out_layouts(const ptc_graph *g, const cap_out_strides *known, cap_out_layout **layout,
                         ptc_graph **permuted, ptc_error *err);

/* The Graph handle handed to callable backends and to ptc.explain. */
PyObject *cap_graph_object(cap_entry *e);

#endif /* PTC_CAP_BACKEND_H */
