/* ptc pipeline: compile a graph into a program.
 *
 * Owns the whole-pipeline driver (decompose -> lower -> schedule -> codegen,
 * with a verifier between stages and each stage dumped to the trace). The
 * program it returns is run with compiler/runtime (ptc_program_run).
 */
#ifndef PTC_PIPELINE_H
#define PTC_PIPELINE_H

#include "runtime/runtime.h"

/* Compiles a stage-1 or stage-2 graph. The graph is not modified and may be
 * freed afterwards. NULL with err (stage set to the failing pass) on error. */
ptc_program *ptc_compile(const ptc_graph *g, const ptc_compile_opts *opts, ptc_error *err);

/* Compiles gs[0..n) as ptc_compile compiles each (with opts[i], into
 * out[i]), their kernels' code made together: every stage up to the
 * kernels runs for each graph in turn, then the code of all their kernels
 * (those of one backend) in one batch: one compile worker (one fork, one
 * pool of threads) for every kernel the cache lacks, and on CUDA one pool
 * of threads that loads them. A training step's forward and backward
 * compile so. The batch's codegen time is its first program's. All or
 * nothing: -1 with err, the first failure in graph order (a stage before
 * codegen stops the later graphs), and every out[i] NULL. */
int ptc_compile_all(const ptc_graph *const *gs, const ptc_compile_opts *const *opts, int n,
                    ptc_program **out, ptc_error *err);

#endif
