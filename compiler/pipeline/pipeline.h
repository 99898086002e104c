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

#endif
