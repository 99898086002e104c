"""Marks on tensors that choose which sizes ptc makes symbolic.

They set the attributes torch._dynamo's own mark_dynamic / maybe_mark_dynamic
/ mark_static set, so ptc reads one set of marks whichever API made them.
A mark belongs to the tensor object: mark each new input you pass.
"""


def _dims(t, index):
    if index is None:
        return list(range(t.dim()))
    if isinstance(index, int):
        return [index]
    return list(index)


def _check_dim(t, d, what):
    if not -t.dim() <= d < t.dim():
        raise IndexError("ptc.%s: dim %d is out of range for a tensor of %d dims" % (what, d, t.dim()))
    return d % t.dim()


def mark_dynamic(t, index, min=None, max=None):
    """Makes dim(s) `index` of t symbolic when a compiled function receives t,
    from the first compile on, whatever dynamic= says (except False). min and
    max bound the sizes that compile serves: a size outside them compiles a
    specialised graph instead."""
    if min is not None and max is not None and min > max:
        raise ValueError("ptc.mark_dynamic: min %d is greater than max %d" % (min, max))
    for d in _dims(t, index):
        d = _check_dim(t, d, "mark_dynamic")
        if not hasattr(t, "_dynamo_dynamic_indices"):
            t._dynamo_dynamic_indices = set()
            t._dynamo_dynamic_range = set()
        t._dynamo_dynamic_indices.add(d)
        t._dynamo_dynamic_range.add((d, min, max))


def maybe_mark_dynamic(t, index):
    """Like mark_dynamic, without bounds (torch: a hint that may be overruled)."""
    for d in _dims(t, index):
        d = _check_dim(t, d, "maybe_mark_dynamic")
        if not hasattr(t, "_dynamo_weak_dynamic_indices"):
            t._dynamo_weak_dynamic_indices = set()
        t._dynamo_weak_dynamic_indices.add(d)


def mark_static(t, index=None):
    """Keeps dim(s) `index` of t (all when None) static even under
    dynamic=True or after a size-only recompile."""
    for d in _dims(t, index):
        d = _check_dim(t, d, "mark_static")
        if not hasattr(t, "_dynamo_static_indices"):
            t._dynamo_static_indices = set()
        t._dynamo_static_indices.add(d)
