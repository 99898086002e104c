/* Internal to compiler/lower: helpers shared by its files. */
#ifndef PTC_LOWER_INT_H
#define PTC_LOWER_INT_H

#include "lower/lower.h"

/* Symbolic sizes are assumed to be this large when a decision needs a number. */
#define PTC_SIZE_HINT 128

double ptc_dim_hint(ptc_dim d);
double ptc_node_iterations(const ptc_lnode *n);
double ptc_buf_numel_hint(const ptc_lbuf *b);

/* The buffers node n reads, slot by slot: extern inputs, or body entries
 * (a LOAD's buffer, -1 for other entries and absent optional inputs). */
static inline int ptc_lnode_nslots(const ptc_lnode *n)
{
    return n->kind == PTC_LN_EXTERN ? n->nxin : n->body.n;
}
static inline int ptc_lnode_slot_buf(const ptc_lnode *n, int k)
{
    if (n->kind == PTC_LN_EXTERN)
        return n->xin[k].buf;
    return n->body.e[k].op == PTC_L_LOAD ? n->body.e[k].buf : -1;
}

/* Appends e unless an equal entry exists (returns that one). */
int ptc_body_emit(ptc_arena *a, ptc_lbody *b, const ptc_lexpr *e);
/* Copies what `root` of src depends on into dst, variables bound to vars,
 * `mask` (or -1) ANDed into every load. Returns root's index in dst. */
int ptc_body_copy(ptc_arena *a, ptc_lbody *dst, const ptc_lbody *src, int root,
                  const ptc_ix *const *vars, int nvars, int mask);

int ptc_inline_pass(ptc_lprog *p, int limit, int *ninlined, int *nrefused);
/* After inlining: a kept temporary whose value is a float widened exactly
 * from a narrower one (autocast's bf16 result read back as f32, kept for a
 * max-pool's window) is stored narrow and widened by its readers as they
 * load it: the same values in half the memory. Returns how many. */
int ptc_store_narrow_pass(ptc_lprog *p);
/* Removes dead loop nodes and turns reductions of a few elements per output
 * (pooling windows) into pointwise nodes; returns how many it unrolled. */
int ptc_unroll_small_reductions(ptc_lprog *p);

/* Builds the memory plan of a schedule (steps and locals set). */
void ptc_mplan_build(ptc_arena *a, ptc_schedule *s);
/* Counts each horizontal combination's steps as one in the plan's live
 * ranges (and its inputs' last reads, outputs' first writes) and places a
 * static arena again. */
void ptc_mplan_merge_combos(ptc_schedule *s);

#endif /* PTC_LOWER_INT_H */
