/* Tensor methods that are old spellings of mapped ones: Tensor.new(*sizes)
 * is new_empty, Tensor.type(dtype) is to(dtype). Their other forms (data to
 * copy, a type name string, no argument) stay breaks.
 */
#include "capture/torch/torch.h"

/* x.new(2, 3), x.new(size): an uninitialised tensor like new_empty; x.new(data)
 * copies data, a break as new_tensor is. */
int cap_th_new(cap_tcall *c, PyObject **out)
{
    bool sizes = true;
    for (int i = 1; i < c->npos; i++)
        sizes = sizes && (PyLong_Check(c->pos[i]) || (c->npos == 2 && PyTuple_Check(c->pos[i])));
    if (!sizes)
        return cap_t_break(c->T, CAP_B_TENSOR_DATA, "Tensor.new() of data");
    return cap_th_new_full(c, out);
}

/* x.type(dtype) converts; x.type() names the type (a string) and
 * x.type("torch.DoubleTensor") parses one: breaks. */
int cap_th_type(cap_tcall *c, PyObject **out)
{
    PyObject *d = cap_targ(c, 1, "dtype");
    if (!d || !PyObject_TypeCheck(d, (PyTypeObject *)cap_T.dtype_type))
        return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "Tensor.type() %s",
                           d ? "with a type name" : "without a dtype");
    return cap_th_to(c, out);
}
