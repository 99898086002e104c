/* ptc autograd: reverse-mode derivatives of prims graphs (stage 2b).
 *
 * Owns the derivative table (derivs.def: one row per op, naming the rule that
 * writes its vector-Jacobian product as prims, or saying why the op has none)
 * and the joint graph: a prims graph extended with one tangent input per
 * differentiable output and the gradients of the chosen inputs as outputs.
 * Derivatives are built from the same prims as the forward, so the backward
 * goes through the same loops -> kernels pipeline.
 */
#ifndef PTC_AUTOGRAD_H
#define PTC_AUTOGRAD_H

#include "passes/passes.h"

/* The joint graph of a prims graph g (ptc_decompose_for_autograd's: its
 * stop_gradients are the constants of the derivatives, and the joint has none).
 *
 *   inputs:  g's inputs, then tangent_<k> for each output k of g that has a
 *            floating dtype and depends on an input in wants_grad, unless
 *            no_tangent[k] (NULL: none is excluded) marks it forward-only
 *            (the new value of a buffer written in place, as BatchNorm's
 *            running statistics); in output order; tangent_of[k] names
 *            its input index, -1 for none;
 *   outputs: g's outputs, then one gradient per input i with wants_grad[i]
 *            (zeros where the outputs do not depend on it), in input order.
 *
 * Nodes of the backward carry the provenance, location and module path of
 * the forward node they differentiate. Fails with Unsupported (stage
 * "autograd") naming the op and node when a node on a path from a wanted
 * input to an output has no derivative. */
typedef struct ptc_joint {
    ptc_graph *graph;    /* owns its arena (ptc_graph_free) */
    int nprimal_inputs;  /* == g->ninputs */
    int nprimal_outputs; /* == g->noutputs */
    int ntangents;
    int *tangent_of; /* [nprimal_outputs]: joint input index or -1 */
    int ngrads;      /* gradients, after the primal outputs */
    int *grad_of;    /* [ngrads]: primal input index of each gradient */
} ptc_joint;

int ptc_autograd_joint(const ptc_graph *g, const bool *wants_grad, const bool *no_tangent,
                       ptc_joint *out, ptc_error *err);

/* The forward and the backward of a joint graph, to run at different times:
 *   forward:  the primal inputs -> the primal outputs, then the saved values
 *             that are not primal inputs (saved_input);
 *   backward: those nsaved values, then the tangents (joint order) -> the
 *             gradients (joint order).
 * What the backward reads is saved, except cheap pointwise and view results
 * it can recompute from values saved anyway at no more bytes (partition.c). */
typedef struct ptc_partition {
    ptc_graph *forward, *backward; /* each owns its arena */
    int nsaved;
    /* [nsaved] (malloc'd): the primal input the backward's saved value k
     * is, or -1 for the forward's next output after the primal ones. A
     * saved input (a weight, the batch) is handed over as it is: as a
     * forward output it was a copy (resnet18: 43 MiB of weights a step). */
    int *saved_input;
} ptc_partition;

int ptc_autograd_partition(const ptc_joint *j, ptc_partition *out, ptc_error *err);

/* A partition's backward in which the tangents flagged in absent (by
 * position among the tangents, which are backward's inputs from
 * first_tangent on) are zeros known when compiling: those inputs are
 * dropped and the zeros folded away (x * 0, x + 0, a matmul or a
 * convolution's gradient of 0), as eager's autograd skips an output with no
 * gradient (absent.c). The saved inputs and the outputs stay as they were. */
ptc_graph *ptc_autograd_without_tangents(const ptc_graph *backward, int first_tangent,
                                         const bool *absent, ptc_error *err);
/* Whether op has a derivative rule; if not, why (a static string). */
bool ptc_autograd_has_rule(ptc_op op, const char **why);

#endif /* PTC_AUTOGRAD_H */
