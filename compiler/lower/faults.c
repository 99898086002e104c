/* PTC_INJECT for kernels and loop nodes: the codegen and runtime stages ask
 * about every op a kernel computes.
 *
 * A loop node knows the prims ops it came from (lower.c marks them, the
 * inliner merges a producer's into its consumer), so a kernel's ops are the
 * union over its members. Each op is asked once per kernel; an error wins
 * over a wrong result, crashes and hangs happen inside ptc_inject_hit (or,
 * deferred, come back to a caller that plants them in its compile worker).
 */
#include "lower/lower.h"

/* The runtime asks once per extern per call: the walk visits only the set
 * bits of ops (a few), not every op of the table. */
static ptc_inject_kind ask(const uint64_t *ops, const char *stage, ptc_error *err)
{
    ptc_inject_kind result = PTC_INJECT_NONE;
    for (int w = 0; w < (PTC_OP_COUNT + 63) / 64; w++)
        for (uint64_t bits = ops[w]; bits; bits &= bits - 1) {
            int op = w * 64 + __builtin_ctzll(bits);
            ptc_inject_kind k = ptc_inject_hit(stage, (ptc_op)op, err);
            if (k == PTC_INJECT_ERROR || k == PTC_INJECT_CRASH || k == PTC_INJECT_HANG ||
                k == PTC_INJECT_ABORT)
                return k; /* a crash or hang comes back only when deferred, an abort always */
            if (k == PTC_INJECT_WRONG)
                result = k;
        }
    return result;
}

ptc_inject_kind ptc_kernel_inject(const ptc_schedule *s, const ptc_kernel *k, const char *stage,
                                  ptc_error *err)
{
    if (!ptc_inject_armed()) /* the union below, per kernel per run, was 1.5% of a CPU step */
        return PTC_INJECT_NONE;
    uint64_t ops[(PTC_OP_COUNT + 63) / 64] = {0};
    for (int g = 0; g < k->ngroups; g++)
        for (int m = 0; m < k->groups[g].nmembers; m++) {
            const ptc_lnode *n = s->prog->nodes[k->groups[g].members[m].node];
            for (size_t i = 0; n && i < sizeof ops / sizeof *ops; i++)
                ops[i] |= n->ops[i];
        }
    return ask(ops, stage, err);
}

ptc_inject_kind ptc_lnode_inject(const ptc_lnode *n, const char *stage, ptc_error *err)
{
    return ask(n->ops, stage, err);
}
