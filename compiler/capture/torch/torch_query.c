/* Tensor methods that are old spellings of mapped ones: Tensor.new(*sizes)
 * is new_empty, Tensor.new(data) and Tensor.new_tensor(data) are
 * torch.tensor(data) with the tensor's dtype and device, Tensor.type(dtype)
 * is to(dtype). Their other forms (a tensor given to new, a type name
 * string, no argument) stay breaks.
 */
#include "capture/torch/torch.h"

/* Whether data is a number, or lists and tuples of them, all constants. */
static bool constant_data(PyObject *data)
{
    if (!PyList_Check(data) && !PyTuple_Check(data))
        return cap_is_constant(data);
    bool all = true;
    for (Py_ssize_t i = 0; all && i < PySequence_Size(data); i++) {
        PyObject *item = PySequence_GetItem(data, i);
        all = item && constant_data(item);
        Py_XDECREF(item);
    }
    PyErr_Clear();
    return all;
}

/* torch.tensor(data, dtype=, device=) made now, a constant of the graph:
 * the dtype and device given, else the tensor's. */
static int tensor_of_data(cap_tcall *c, PyObject *data, PyObject *dtype, PyObject *device,
                          PyObject **out)
{
    const ptc_ttype *tt = &((cap_tensor *)c->pos[0])->v->type;
    PyObject *dev = device && device != Py_None ? Py_NewRef(device) : cap_device_obj(tt->device);
    PyObject *kw = dev ? Py_BuildValue("{sOsO}", "dtype",
                                       dtype && dtype != Py_None ? dtype : cap_dtype_obj(tt->dtype),
                                       "device", dev)
                       : NULL;
    PyObject *fn = kw ? cap_import_path("torch.tensor") : NULL;
    PyObject *args = fn ? PyTuple_Pack(1, data) : NULL;
    PyObject *real = args ? PyObject_Call(fn, args, kw) : NULL;
    Py_XDECREF(fn), Py_XDECREF(args), Py_XDECREF(kw), Py_XDECREF(dev);
    if (!real)
        return CAP_ERR;
    *out = cap_tensor_const(c->T, real);
    Py_DECREF(real);
    return *out ? CAP_NEXT : CAP_ERR;
}

/* x.new(2, 3), x.new(torch.Size): an uninitialised tensor like new_empty;
 * x.new(data) with data a list, tuple or number: a copy of it (a plain tuple
 * is data, not sizes, as in eager). */
int cap_th_new(cap_tcall *c, PyObject **out)
{
    bool sizes = true;
    for (int i = 1; i < c->npos; i++)
        sizes = sizes && (PyLong_Check(c->pos[i]) ||
                          (c->npos == 2 && Py_IS_TYPE(c->pos[i], (PyTypeObject *)cap_T.Size)));
    if (sizes)
        return cap_th_new_full(c, out);
    PyObject *device = cap_targ(c, -1, "device");
    if (c->npos != 2 || c->nkw > (device ? 1 : 0) || !constant_data(c->pos[1]))
        return cap_t_break(c->T, CAP_B_TENSOR_DATA, "Tensor.new() of data");
    return tensor_of_data(c, c->pos[1], NULL, device, out);
}

/* x.new_tensor(data, dtype=, device=): data copied, detached, as a tensor of
 * x's dtype and device unless given; requires_grad=True (a new leaf) and
 * pin_memory break. */
int cap_th_new_tensor(cap_tcall *c, PyObject **out)
{
    PyObject *data = cap_targ(c, 1, "data"), *dtype = cap_targ(c, -1, "dtype");
    PyObject *device = cap_targ(c, -1, "device"), *rg = cap_targ(c, -1, "requires_grad");
    PyObject *pin = cap_targ(c, -1, "pin_memory");
    if (!data || (rg && PyObject_IsTrue(rg)) || (pin && PyObject_IsTrue(pin)))
        return cap_t_break(c->T, CAP_B_TENSOR_DATA, "Tensor.new_tensor (requires_grad or pin_memory)");
    if (!cap_is_tensor(data))
        return constant_data(data) ? tensor_of_data(c, data, dtype, device, out)
                                   : cap_t_break(c->T, CAP_B_TENSOR_DATA, "Tensor.new_tensor of a %s",
                                                 cap_tpname(Py_TYPE(data)));
    const ptc_ttype *tt = &((cap_tensor *)c->pos[0])->v->type;
    int dt = dtype && dtype != Py_None ? cap_dtype_from_obj(dtype) : (int)tt->dtype;
    ptc_device dev = tt->device;
    if (dt < 0 || (device && device != Py_None && cap_device_from_obj(device, &dev) < 0))
        return cap_t_break(c->T, CAP_B_TRACE_ERROR, "Tensor.new_tensor: unsupported dtype or device");
    return cap_th_tensor_copy(c->T, (cap_tensor *)data, dt, dev, "tensor.new_tensor", true, out);
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
