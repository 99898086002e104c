/* ptc passes: from torch-level graphs to the closed set of prims, and the
 * clean-ups that run on prims graphs.
 *
 * Owns: decomposition (every torch-level op of ops.def written in prims, with
 * broadcasting and type promotion made explicit as broadcast_in_dim and
 * convert_element_type; ops that are already prims or externs are copied),
 * dead-code elimination, common-subexpression elimination and constant
 * folding. Every prims node carries the provenance of the stage-1 node it
 * came from (ptc_node.prov), its source location and module path.
 */
#ifndef PTC_PASSES_H
#define PTC_PASSES_H

#include "ops/ops.h"

/* Decomposes a verified stage-1 (or stage-2) graph into a new prims graph
 * with its own arena. Ops without a decomposition fail with Unsupported
 * naming the op and the node. */
ptc_graph *ptc_decompose(const ptc_graph *g, ptc_error *err);

/* Removes nodes whose outputs nobody uses; returns how many. */
int ptc_pass_dce(ptc_graph *g);
/* Merges nodes with the same op and arguments (random draws included: they
 * are functions of their seed); returns how many were merged. */
int ptc_pass_cse(ptc_graph *g);
/* Folds constants: views and conversions of prims.full, arithmetic between
 * prims.full values, identity views and conversions; returns how many nodes
 * were replaced. */
int ptc_pass_fold(ptc_graph *g, ptc_error *err);
/* fold, cse and dce until nothing changes. */
int ptc_simplify(ptc_graph *g, ptc_error *err);

#endif /* PTC_PASSES_H */
