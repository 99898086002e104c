/* Reference kernels of the creation ops: full/zeros/ones/empty, arange,
 * prims.iota and the random ones (rand/randn and their prims).
 *
 * Random values come from ops.h's counter-based RNG, element by element in
 * row-major order, so every backend that follows the same formula produces
 * the same tensor for the same seed and run offset. empty is zero-filled:
 * deterministic, which is what an oracle must be.
 */
#include "ops/ref.h"

int ptc_ref_full(ptc_kctx *k)
{
    ptc_tensor *out = &k->out[0];
    ref_scalar v = {.f = 0, .i = 0};
    if (k->node->op == PTC_OP_ONES)
        v.f = 1, v.i = 1;
    else if (k->node->op == PTC_OP_FULL || k->node->op == PTC_OP_PRIMS_FULL)
        v = ref_scalar_arg(k, ref_argi(k, "fill_value"));
    int64_t n = ptc_tensor_numel(out);
    bool fl = ref_is_float(out->dtype);
    double f = fl ? ref_scalar_as_f(v, out->dtype) : 0;
    int64_t i = fl ? 0 : ref_scalar_as_i(v, out->dtype);
    for (int64_t o = 0; o < n; o++) {
        if (fl)
            ref_stf(out, o, f);
        else
            ref_sti(out, o, i);
    }
    return 0;
}

/* arange: start + i * step, in double for float dtypes and in int64 (start
 * and step truncated, as torch's integer accumulate type does) otherwise. */
int ptc_ref_arange(ptc_kctx *k)
{
    ptc_tensor *out = &k->out[0];
    ref_scalar start = ref_scalar_arg(k, ref_argi(k, "start"));
    ref_scalar end = ref_scalar_arg(k, ref_argi(k, "end"));
    ref_scalar step = ref_scalar_arg(k, ref_argi(k, "step"));
    if (step.f == 0)
        return ref_fail(k, "step must be nonzero");
    if ((step.f > 0 && end.f < start.f) || (step.f < 0 && end.f > start.f))
        return ref_fail(k, "upper bound and larger bound inconsistent with step sign");
    int64_t n = ptc_tensor_numel(out);
    bool fl = ref_is_float(out->dtype);
    int64_t istart = ref_scalar_as_i(start, PTC_I64), istep = ref_scalar_as_i(step, PTC_I64);
    for (int64_t o = 0; o < n; o++) {
        if (fl)
            ref_stf(out, o, start.f + step.f * (double)o);
        else
            ref_sti(out, o, (int64_t)((uint64_t)istart + (uint64_t)istep * (uint64_t)o));
    }
    return 0;
}

int ptc_ref_prim_iota(ptc_kctx *k)
{
    ptc_tensor *out = &k->out[0];
    int64_t start = ref_int(k, "start"), step = ref_int(k, "step");
    int64_t n = ptc_tensor_numel(out);
    if (n != ref_int(k, "length"))
        return ref_fail(k, "internal: iota output size disagrees with its length");
    for (int64_t o = 0; o < n; o++)
        ref_sti(out, o, start + step * o);
    return 0;
}

/* rand: u; randn: ptc_rng_normal; both stored rounded to the dtype. */
int ptc_ref_rand(ptc_kctx *k)
{
    ptc_tensor *out = &k->out[0];
    ptc_op op = k->node->op;
    bool normal = op == PTC_OP_RANDN || op == PTC_OP_PRIMS_RANDN;
    if (!ref_is_float(out->dtype))
        return ref_fail(k, "\"%s\" not implemented for '%s'", normal ? "normal" : "uniform",
                        ptc_dtype_name(out->dtype));
    uint64_t key = ptc_rng_key((uint64_t)ref_int(k, "seed"), k->rng_offset);
    int64_t n = ptc_tensor_numel(out);
    for (int64_t o = 0; o < n; o++)
        ref_stf(out, o,
                normal ? ptc_rng_normal(key, (uint64_t)o) : ptc_rng_uniform(key, (uint64_t)o));
    return 0;
}
