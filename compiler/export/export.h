/* ptc export: models exported ahead of time by ptc.export, loaded and run
 * from C with no Python in the process.
 *
 * Owns the package folder's C half: sealing a folder the Python side wrote
 * (compiling its kernels for the chosen targets and writing the manifest),
 * verifying it (ptc's version, a SHA-256 of every file), and the model: the
 * graph compiled from the package's kernels, its weights, and the input
 * checks the export recorded (the exported guards), applied before every run.
 *
 * A package folder:
 *   manifest.json  format, ptc's version, the CPU the cpu kernels were built
 *                  for, the targets, and the SHA-256 of every other file
 *                  (weights.bin: its XXH64 and size)
 *   graph.ptir     the whole forward as one stage-1 graph; parameters and
 *                  buffers are inputs named as in weights.bin
 *   weights.bin    parameters and buffers (a ptc tensor file, version 2:
 *                  mapped at load, its tensors used where they lie)
 *   spec.json      the inputs (user inputs, parameters, buffers), the ranges
 *                  of symbolic sizes, and the outputs (graph outputs, inputs
 *                  passed through, or ints computed from symbolic sizes),
 *                  each with its path in the Python structure
 *   kernels/cpu/, kernels/sm_80/, kernels/sm_90/
 *                  compiled kernels (kernel-cache files: CPU objects, PTX;
 *                  a CUDA kernel over symbolic sizes also in its 64-bit
 *                  index variant, for calls past 2^30 elements)
 *
 * Usage:
 *   ptc_error err;
 *   ptc_model *m = ptc_model_load("resnet.ptc", NULL, &err);
 *   ptc_tensor in[1] = {ptc_tensor_borrow(data, PTC_F32, 4, sizes, NULL)};
 *   ptc_tensor out[1];   // ptc_model_noutputs(m) of them
 *   if (ptc_model_run(m, in, out, &err) == 0) { ...; ptc_tensor_release(&out[0]); }
 *   ptc_model_free(m);
 * Errors are 0 / -1 with a one-line message in err (ptc_error_format).
 */
#ifndef PTC_EXPORT_H
#define PTC_EXPORT_H

#include "pipeline/pipeline.h"

/* What ptc_package_seal writes into manifest.json's "format_version"; a
 * package of another version is refused at load, saying what the versions
 * since its own added (package.c: FORMAT_ADDED). 2: weights.bin is a
 * version-2 tensor file pinned by its XXH64; 3: a CUDA kernel over symbolic
 * sizes is there with its 64-bit index variant; 4: weights.bin is pinned by
 * the XXH64 of each 4 MiB chunk, which loading checks in parallel. */
enum { PTC_PACKAGE_FORMAT = 5 };

typedef struct ptc_model ptc_model;

typedef struct ptc_model_opts {
    /* "cpu" (the default) or "cuda": on cuda, inputs and outputs are CUDA
     * tensors and the package's PTX for the device's architecture is used. */
    const char *target;
} ptc_model_opts;

/* Verifies the package in dir and compiles its graph from its kernels. A
 * package whose manifest, version or checksums do not check out is refused:
 * err names the file. NULL on error. */
ptc_model *ptc_model_load(const char *dir, const ptc_model_opts *opts, ptc_error *err);
void ptc_model_free(ptc_model *m);

/* The user inputs, in the order ptc_model_run takes them, and the outputs. */
int ptc_model_ninputs(const ptc_model *m);
int ptc_model_noutputs(const ptc_model *m);
/* The input's path in the exported call ("x", "args[1]"), and its graph name. */
const char *ptc_model_input_name(const ptc_model *m, int i);
/* The output's path in the returned structure ("[0]", "['logits']"). An
 * int the forward computed from symbolic sizes (return y, x.shape[0]) is
 * computed from each run's input sizes and handed out as a 0-dim i64 tensor
 * on the CPU (whatever the model's device). */
const char *ptc_model_output_name(const ptc_model *m, int i);
/* The exported type of input i ("f32[s0,3,224,224] cpu"), printed into b. */
void ptc_model_input_type(const ptc_model *m, int i, ptc_buf *b);

/* Runs the model: inputs[ptc_model_ninputs(m)] are checked against the
 * exported specification (dtype, device, rank, static sizes, the ranges of
 * symbolic ones, sizes that must agree) and refused with the failing check,
 * never computed on; outputs[ptc_model_noutputs(m)] receive new references.
 * On CUDA, a call whose sizes reach 2^30 elements runs the package's 64-bit
 * index variants; a package sealed without them fails such a call, saying
 * so. Calls on one model are serialised. */
int ptc_model_run(ptc_model *m, const ptc_tensor *inputs, ptc_tensor *outputs, ptc_error *err);

/* How long loading took (ms): verifying, reading weights, loading kernels,
 * readying the first run. */
double ptc_model_load_ms(const ptc_model *m);
/* The memory the load touched so that the first run costs what later ones
 * do (on the CPU: the arena of intermediates and the scratch of the C
 * kernels on each OpenMP thread, whose team it started; runtime.h's
 * ptc_program_warm). 0 with PTC_EXPORT_WARM=0, for CUDA, and where sizes are
 * symbolic (the team is started all the same). Load on the thread that runs. */
size_t ptc_model_warm_bytes(const ptc_model *m);
/* Kernels the load had to compile (0 when the package's served them all). */
int ptc_model_compiled_kernels(const ptc_model *m);

/* ---- writing packages (ptc.export's C half) ------------------------------------ */

/* Completes a package folder holding graph.ptir, weights.bin and spec.json:
 * compiles the graph's kernels for each target ("cpu", "sm_80", "sm_90"; no
 * GPU is needed for PTX) into kernels/<target>/ and writes manifest.json with
 * ptc's version and the SHA-256 of every file. */
int ptc_package_seal(const char *dir, const char *const *targets, int ntargets, ptc_error *err);

/* Verifies a package without loading it: what ptc_model_load refuses. */
int ptc_package_verify(const char *dir, ptc_error *err);

/* Verifies the package and writes into out the folder of the kernels a model
 * loaded for target ("cpu", "cuda") on this machine runs (this CPU's, the
 * GPU's architecture), or "" where it has none to fit (they are compiled):
 * a compile of graph.ptir with that kernel_dir finds the package's own. */
int ptc_package_kernels(const char *dir, const char *target, char *out, size_t size,
                        ptc_error *err);

#endif /* PTC_EXPORT_H */
