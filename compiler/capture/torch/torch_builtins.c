/* Python builtins applied to symbolic tensors, where eager's answer is a
 * tensor computed from tensor values.
 *
 * max(a, b, ...) and min(a, b, ...) compare with `item > best` (`<` for min)
 * and keep the first best; bool() of the comparison needs one element, so
 * eager works only on one-element tensors (others raise, as a break here
 * lets them). Of tensors of one dtype, device and static one-element shape,
 * the value eager returns is where(item > best, item, best) folded over the
 * items, a NaN comparing false as in eager, and its gradient reaches the
 * argument picked. The result is a new tensor, not the argument object
 * itself (`max(a, b) is a` is False), as under torch.compile.
 */
#include "capture/torch/torch.h"

/* Are these tensors eager's builtin min/max can compare, of one kind? */
static bool comparable_scalars(PyObject *const *args, int nargs)
{
    if (nargs < 2 || !cap_is_tensor(args[0]))
        return false;
    const ptc_ttype *first = &cap_val(args[0])->type;
    if (!ptc_ttype_is_static(first))
        return false;
    for (int d = 0; d < first->ndim; d++)
        if (first->shape[d].value != 1)
            return false;
    for (int i = 1; i < nargs; i++) {
        if (!cap_is_tensor(args[i]))
            return false;
        const ptc_ttype *t = &cap_val(args[i])->type;
        if (t->dtype != first->dtype || t->ndim != first->ndim || !ptc_ttype_is_static(t) ||
            !ptc_device_eq(t->device, first->device))
            return false;
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d].value != 1)
                return false;
    }
    return true;
}

int cap_torch_builtin_minmax(cap_trace *T, bool is_max, PyObject *const *args, int nargs,
                             PyObject **out)
{
    if (!comparable_scalars(args, nargs))
        return CAP_NONE;
    ptc_value *best = cap_val(args[0]);
    for (int i = 1; i < nargs && best; i++) {
        ptc_value *item = cap_val(args[i]);
        ptc_arg cmp[2] = {ptc_arg_value(item), ptc_arg_value(best)};
        ptc_value *better = cap_build1(T, is_max ? PTC_OP_GT : PTC_OP_LT, cmp, 2);
        ptc_arg pick[3] = {ptc_arg_value(better), ptc_arg_value(item), ptc_arg_value(best)};
        best = better ? cap_build1(T, PTC_OP_WHERE, pick, 3) : NULL;
    }
    return cap_wrap_value(T, best, out);
}
