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

#include <string.h>

/* Are these tensors eager's builtin min/max can compare, of one kind? */
static bool comparable_scalars(PyObject *const *args, int nargs)
{
    if (nargs < 2 || !cap_is_tensor(args[0]))
        return false;
    for (int i = 0; i < nargs; i++)
        if (cap_is_traced_numpy(args[i])) /* numpy's comparisons give arrays */
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

/* ---- torch.tensor(t), torch.as_tensor(t) of a traced tensor --------------------------- */

/* torch.tensor copies t's data, detached from autograd, converted to dtype
 * and device when given (a graph copy: writes to one never reach the
 * other); as_tensor returns t itself when nothing changes. Eager's
 * UserWarning of torch.tensor is given once, when the call is traced (not
 * for t standing for the call's ndarray, torch_numpy.c: eager gives none).
 * requires_grad=True or pin_memory=True (a new leaf, pinned memory) break. */
int cap_th_tensor_of_tensor(cap_tcall *c, cap_tensor *t, bool of_array, PyObject **out)
{
    bool copies = strcmp(c->m->name, "torch.tensor") == 0;
    PyObject *kd = cap_targ(c, 1, "dtype"), *kdev = cap_targ(c, 2, "device");
    PyObject *rg = cap_targ(c, -1, "requires_grad"), *pin = cap_targ(c, -1, "pin_memory");
    if ((rg && PyObject_IsTrue(rg)) || (pin && PyObject_IsTrue(pin)) || c->npos > (copies ? 1 : 3))
        return cap_t_break(c->T, CAP_B_TENSOR_DATA,
                           "%s of a traced %s (requires_grad or pin_memory)", c->m->name,
                           of_array ? "array" : "tensor");
    int dt = kd && kd != Py_None ? cap_dtype_from_obj(kd) : -1;
    ptc_device dev = t->v->type.device;
    if ((kd && kd != Py_None && dt < 0) ||
        (kdev && kdev != Py_None && cap_device_from_obj(kdev, &dev) < 0))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "%s: unsupported dtype or device", c->m->name);
    bool same = (dt < 0 || dt == (int)t->v->type.dtype) && ptc_device_eq(dev, t->v->type.device);
    if (!copies && same) {
        *out = Py_NewRef((PyObject *)t);
        return CAP_NEXT;
    }
    return cap_th_tensor_copy(c->T, t, dt, dev, copies && !of_array ? "torch.tensor" : NULL,
                              copies, out);
}

/* t converted to dtype dt (-1: its own) and device dev; detached and cloned
 * where `copies` (a graph copy: writes to one never reach the other). warn_as
 * names the call in eager's UserWarning (NULL: none). */
int cap_th_tensor_copy(cap_trace *T, cap_tensor *t, int dt, ptc_device dev, const char *warn_as,
                       bool copies, PyObject **out)
{
    ptc_arg a[3] = {ptc_arg_value(t->v), ptc_arg_none(), ptc_arg_none()};
    if (dt >= 0)
        a[1] = ptc_arg_dtype((ptc_dtype)dt);
    if (!ptc_device_eq(dev, t->v->type.device))
        a[2] = ptc_arg_device(dev);
    if (warn_as && PyErr_WarnFormat(PyExc_UserWarning, 1,
                                    "To copy construct from a tensor, it is recommended to use "
                                    "sourceTensor.detach().clone() or "
                                    "sourceTensor.detach().clone().requires_grad_(True), rather "
                                    "than %s(sourceTensor).",
                                    warn_as) < 0)
        return CAP_ERR;
    /* detached and converted first, then cloned: the clone's type follows */
    ptc_value *v = cap_build1(T, PTC_OP_TO, a, 3);
    if (v && copies) {
        v->type.requires_grad = false;
        ptc_arg detached = ptc_arg_value(v);
        v = cap_build1(T, PTC_OP_CLONE, &detached, 1);
    }
    if (!v)
        return CAP_BREAK;
    *out = cap_tensor_new(T, v);
    return *out ? CAP_NEXT : CAP_ERR;
}
