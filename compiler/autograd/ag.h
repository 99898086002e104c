/* Internal to compiler/autograd: the context a derivative rule builds in and
 * the prims builders rules use. */
#ifndef PTC_AG_H
#define PTC_AG_H

#include "autograd/autograd.h"

typedef struct ag {
    ptc_graph *g;         /* the joint graph being built */
    const ptc_node *node; /* the forward node being differentiated (in g) */
    bool *needs;          /* [value id]: a gradient must flow to this value */
    ptc_value **grad;     /* [value id]: accumulated gradient, NULL = zero */
    int nvalues;          /* size of needs/grad */
    ptc_error *err;
    bool failed;
} ag;

/* A rule: given the gradients of n's outputs (gout[i] NULL when output i
 * gets none), adds the gradient of each input that needs one (ag_accum). */
typedef int (*ag_rule)(ag *a, const ptc_node *n, ptc_value *const *gout);

/* Adds grad to x's gradient, if x needs one (grad has x's type). */
void ag_accum(ag *a, const ptc_value *x, ptc_value *grad);
bool ag_needs(const ag *a, const ptc_value *x);

/* Builders: each returns NULL (with a->failed set) on error and passes NULL
 * inputs through, so a chain needs one check at the end. New nodes carry the
 * forward node's provenance, location and module path. */
ptc_value *ag_build(ag *a, ptc_op op, const ptc_arg *args, int nargs);
/* The same for an op of several outputs: the node. */
ptc_node *ag_build_node(ag *a, ptc_op op, const ptc_arg *args, int nargs);
ptc_value *ag_unary(ag *a, ptc_op op, ptc_value *x);
ptc_value *ag_binary(ag *a, ptc_op op, ptc_value *x, ptc_value *y); /* same type */
/* A tensor of shape[n] filled with v, in like's dtype and device. */
ptc_value *ag_full(ag *a, const ptc_dim *shape, int n, double v, const ptc_value *like);
ptc_value *ag_full_like(ag *a, const ptc_value *like, double v);
/* A tensor like `like` filled with the (possibly symbolic) integer n. */
ptc_value *ag_full_dim(ag *a, const ptc_value *like, ptc_dim n);
ptc_value *ag_scale(ag *a, ptc_value *x, double v); /* x * v */
ptc_value *ag_convert(ag *a, ptc_value *x, ptc_dtype dt);
ptc_value *ag_where(ag *a, ptc_value *pred, ptc_value *x, ptc_value *y);
/* x broadcast to shape[n], x's dims landing on bdims. */
ptc_value *ag_broadcast(ag *a, ptc_value *x, const ptc_dim *shape, int n, const int *bdims);
/* prims.sum of x over the dims flagged in mask (PTC_MAX_DIMS entries). */
ptc_value *ag_sum(ag *a, ptc_value *x, const bool *mask);
/* A reduction's result r (of x over mask) broadcast back to x's shape. */
ptc_value *ag_unreduce(ag *a, ptc_value *r, const ptc_value *x, const bool *mask);
ptc_value *ag_reshape(ag *a, ptc_value *x, const ptc_dim *shape, int n);
ptc_value *ag_permute(ag *a, ptc_value *x, const int *perm);

/* Int-list arguments (copied into the joint graph's arena). */
ptc_arg ag_arg_ints(ag *a, const ptc_dim *d, int n);
ptc_arg ag_arg_int_list(ag *a, const int *v, int n);

/* Argument access on the forward node. */
ptc_value *ag_in(const ptc_node *n, int argi); /* the VALUE arg argi, or NULL */
int ag_fail(ag *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The rules of the externs and pools (derivs_nn.c). */
int ag_d_convolution(ag *a, const ptc_node *n, ptc_value *const *gout);
int ag_d_max_pool(ag *a, const ptc_node *n, ptc_value *const *gout);
int ag_d_avg_pool(ag *a, const ptc_node *n, ptc_value *const *gout);
int ag_d_adaptive_avg_pool(ag *a, const ptc_node *n, ptc_value *const *gout);
int ag_d_sdpa(ag *a, const ptc_node *n, ptc_value *const *gout);

/* The rules (derivs.c), by op. */
ag_rule ag_rule_of(ptc_op op);

#endif /* PTC_AG_H */
