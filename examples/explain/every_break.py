"""One small function per graph-break code of ptc (PTC-B001 ... PTC-B027).

    ptexplain examples/explain/every_break.py

Each function is compiled with torch.compile and called once, so the report
lists every code of the break table (man ptc.7, GRAPH BREAKS) with its source
line, explanation and hint. ptexplain's golden tests run it. It uses ptc
itself for three codes (ptc.disable, ptc.config.inline_depth, its own split), so it runs under
ptexplain or with the ptc package on the path.
"""
import contextlib
import copy

import torch
from torch import nn

import ptc

STEPS = []
COUNT = 0


def t(*shape):
    return torch.arange(float(torch.Size(shape).numel())).reshape(shape) / 7 - 0.5


def b001(x):
    y = x * 2
    if y.sum() > 0:
        y = y + 1
    return y * 3


def b002(x):
    v = (x * 2).sum().item()
    return x + v


def b003(x):
    return (x * 2).tolist()


def b004(x):
    s = str(x.sum())
    return s, x + 1


def b005(x):
    y = x * 2
    print("y has shape", tuple(y.shape))
    return y + 1


def b006(x):
    y = x * 2
    z = copy.deepcopy([1, 2])
    return y + len(z)


def b007(x):
    y = x * 2
    return torch.logcumsumexp(y, dim=1) + 1


def b008(x):
    idx = torch.nonzero(x > 0)
    return idx * 2


def b009(x):
    y = x + 1
    STEPS.append(y.sum())  # replayed after the graph: no break
    STEPS.sort(key=lambda t: -t)  # keys that are tensor values: runs for real
    return y * 2


class B010(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("last", torch.zeros(3, 4))

    def forward(self, x):
        y = x * 2
        self.last = y.detach()
        return y + 1


def b011(x):
    global COUNT
    y = x * 2
    COUNT = COUNT + 1  # replayed after the graph: no break
    saved = COUNT
    del COUNT
    try:
        COUNT  # read after the delete: runs for real
    except NameError:
        COUNT = saved
    return y + 1


def b012(x):
    y = x * 2
    x.t().reshape(-1)[:2].add_(1)  # an argument written through a reshape that copies
    return x + y


def b013(x):
    y = x * 2
    if y.dim() == 2:
        raise ValueError("two dims: %d" % y.dim())
    return y


@ptc.disable
def _eager_only(v):
    return v * 10


def b014(x):
    y = x + 1
    return _eager_only(y) - 1


def _gen(n):
    try: yield from range(n)  # noqa: E701 (a try block, left unfinished below)
    finally: pass  # noqa: E701


def b015(x):
    for i in _gen(3): return x * i  # noqa: E701 (left unfinished)


def b016(x):
    y = x * 2
    with contextlib.suppress(KeyError):
        y = y + 1
    return y * 3


def b017(x):
    y = x * 2  # a traced tensor, which the class body reads

    class Local:
        t = y + 1
    return Local.t * 3, Local.__name__


def _rec(v, n):
    return v if n == 0 else _rec(v * 2, n - 1)


def b018(x):
    return _rec(x, 6) + 1


def b019(x):
    y = (x * 2).sum()
    y.backward()
    return x.grad * 1


def b020(x):
    y = x * 2
    import every_break_import  # not loaded yet: the import runs for real
    return y + every_break_import.VALUE


def b021(x, it):
    total = x * 0
    for v in it:
        total = total + v
    return total


def b022(x):
    y = x * 2
    return y + torch.ones(5)


class MyTensor(torch.Tensor):
    pass


def b023(x):
    return x * 2 + 1


def b024(x):
    y = x * 2
    y.requires_grad = True
    return (y + 1).requires_grad, (y + 1).detach()


def _handler(v):
    try:
        raise KeyError("k")
    except KeyError:
        print("in the handler")
        return v * 2


def b025(x):
    return _handler(x + 1) + 1


def b026(x):
    y = x * 2
    c = torch.fft.rfft(y)
    return c.abs() + 1


def b027(x):
    y = x * 2
    ptc._split.graph_split("where DDP's next gradient bucket begins")
    return y + 1


def call(fn, make, expect=None, warm=True):
    """Runs fn eagerly once (first-call costs stay out of the report), then
    compiled once."""
    for f in (fn, torch.compile(fn)) if warm else (torch.compile(fn),):
        try:
            f(*make())
        except Exception as e:  # the program raises on purpose (PTC-B013, PTC-B022)
            if expect is None or not isinstance(e, expect):
                raise
            if f is not fn:
                print("%s raised %s" % (getattr(fn, "__name__", type(fn).__name__), type(e).__name__))


def main():
    x34 = lambda: (t(3, 4),)
    for fn in (b001, b002, b003, b004, b005, b006, b007, b008, b009):
        call(fn, x34)
    call(B010(), x34)
    for fn in (b011, b012):
        call(fn, x34)
    call(b013, x34, expect=ValueError)
    for fn in (b014, b015, b016, b017):
        call(fn, x34)
    depth = ptc.config.inline_depth
    ptc.config.inline_depth = 3
    call(b018, x34)
    ptc.config.inline_depth = depth
    call(b019, lambda: (t(3, 4).requires_grad_(),))
    call(b020, x34, warm=False)  # warm, the module would be loaded already
    call(b021, lambda: (t(3, 4), iter([1, 2])))
    call(b022, x34, expect=RuntimeError)
    call(b023, lambda: (t(3, 4).as_subclass(MyTensor),))
    call(b024, x34)
    call(b025, x34)
    call(b026, x34)
    call(b027, x34)


if __name__ == "__main__":
    main()
