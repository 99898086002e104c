#!/usr/bin/env python3
"""numpy on traced tensors: graphs and breaks of 34 small programs under
ptc.compile and torch.compile (a measurement, not a test).

Each program calls .numpy() (or np.asarray / np.array) on its tensor
argument and goes on with numpy. For each: whether ptc's result agrees with
eager's (type, dtype, values rounded to 5 decimals), ptc's graph and break
counts and, with --dynamo, torch.compile's (torch._dynamo.explain) and
whether its result agrees with eager's. The totals line is what issue 13's
numpy item is measured by. Measured 2026-11-28 (torch 2.11, CPU): main
before the traced arrays, 85 breaks; with them, 2 (float() and .item():
values Python needs) and, with --backend eager, p05's float32 exp one ulp
off numpy's (torch's kernel; --backend ptc matches); torch.compile 0
breaks and 7 results unlike eager's (0-d arrays for numpy scalars, p05).
p28-p34 (int(), dtype=, a boolean mask, more functions), 2026-11-28: before
dtype= and the functions were traced, 27 breaks over p19-p34; after, 15
(p19, p20, p28: Python numbers, where torch.compile breaks too: explain
lists "Data dependent operator" though its break count says 0; p30: a
boolean mask, PTC-B008, torch.compile 2 graphs and 1 break; p31, p32: tan,
arcsin, arccos, sinh, cosh, fmod, sort, argsort and cumprod, ops ptc
lacks, and the calls of them after the first break; p33: flip, a view
with negative strides; p34: count_nonzero without axis, a Python int). torch.compile makes
one graph with no break of p29 and p31-p34, unlike eager's in p29, p31
and p34. With tan, arcsin, arccos, sinh, cosh and fmod traced
(2026-11-28): 9 breaks over p19-p34; p31 one graph and none, its float32
results within an ulp of numpy's but unlike them at 5 decimals (as
--backend eager's, torch's kernels); p32 3 (cumprod, sort, argsort).
With sort/argsort/cumprod ops and flip/einsum of one array as views
(2026-11-28, s19sort): 9 -> 5 breaks over p19-p34 (p32 and p33 one graph
and none each); left: p19, p20, p28 (Python numbers), p30 (a boolean
mask), p34 (count_nonzero without axis).
p35-p37 (in-place sort, flip of an array from outside, a flip alive across
a break), 2026-11-28 (s20cum): before ndarray.sort and those flips were
traced, 10 breaks over p01-p37 (p35: 2, p36: 2, p37: 1) and 3 results
unlike eager's (p05, p31 at 5 decimals; p37: the flip came back a copy, so
the write after the break missed it); after, 8 breaks and 2 unlike
eager's: p35, p36 one graph and none; p37 right, with 3 breaks (its flip
has negative strides after the break, which torch.from_numpy refuses:
the write and f.copy() run for real). torch.compile: p35-p36 one graph
and none, p37 2 graphs and 1 break, its result unlike eager's (a copy).
With negative-step slices as flip views and arrays from outside with
negative strides as flips of graph inputs (s20cum), over p01-p39 (p38:
negative-step slices of a traced array, p39: of a global array): before
(s20lead) 19 breaks (p35 2, p36 2, p37 1, p38 7, p39 2) and 3 results
unlike eager's; after, 8 breaks and 2 unlike eager's (p05, p31 at 5
decimals): p35, p36, p38, p39 one graph and none; p37 right, with 3
breaks (print; PTC-B012: the flip and its array are two inputs sharing
memory, one written; then PTC-B006, the real array's copy method).
torch.compile: 2 breaks, 12 results unlike eager's (p38: 0-d arrays and
copies where eager has views).

    python3 bench/numpy_probe.py [--backend eager|ptc] [--dynamo] [NAME ...]
"""
import argparse
import warnings

import numpy as np
import torch

import ptc


def described(v):
    if isinstance(v, (tuple, list)):
        return type(v).__name__, [described(i) for i in v]
    if isinstance(v, torch.Tensor):
        return "Tensor", str(v.dtype), np.round(v.double().numpy(), 5).tolist()
    if isinstance(v, np.ndarray):
        return "ndarray", str(v.dtype), np.round(v.astype(np.float64), 5).tolist()
    if isinstance(v, np.generic):
        return type(v).__name__, round(float(v), 5)
    return type(v).__name__, repr(v)


def as_int_array(x):
    return x.int().numpy()


def add_in_place(x):
    a = x.numpy()
    a += 1
    return x * 2


def set_item(x):
    a = x.numpy()
    a[0, 0] = 100.0
    return x.sum()


def copy_then_add(x):
    a = np.array(x)
    a += 1
    return a, x


def sort_in_place(x):
    a = x.numpy() * -1
    a.sort(axis=1)
    return a, a[:, 0]


NP_ROW = np.array([3.0, 1.0, 2.0], dtype=np.float32)


def flip_across_a_break(x):
    a = x.numpy() * 2
    f = np.flip(a, 1)
    print(end="")  # a break (PTC-B005), with f alive across it
    a[0, 0] = -1.0  # f[0, -1]
    return f.copy()


PROGRAMS = {
    "p01": lambda x: x.numpy(),
    "p02": lambda x: (lambda a: (a + 1, a * 2.5, a / 2, a - a))(x.numpy()),
    "p03": lambda x: (lambda a: (a.sum(), a.mean(), a.max(), a.min(), a.argmax()))(x.numpy()),
    "p04": lambda x: (lambda a: (a.sum(axis=0), a.mean(axis=1, keepdims=True)))(x.numpy()),
    "p05": lambda x: (lambda a: (np.exp(a), np.log(a), np.sqrt(a), np.abs(-a)))(x.numpy()),
    "p06": lambda x: (lambda a: (np.maximum(a, 2.0), np.minimum(a, a.T.T),
                                 np.where(a > 2, a, 0.0)))(x.numpy()),
    "p07": lambda x: np.clip(x.numpy(), 1.5, 4.5),
    "p08": lambda x: (lambda a: (a @ a.T, np.matmul(a, a.T), np.dot(a, a.T)))(x.numpy()),
    "p09": lambda x: (lambda a: (np.concatenate([a, a], axis=0), np.stack([a, a], axis=1)))(
        x.numpy()),
    "p10": lambda x: (lambda a: (np.zeros_like(a), np.ones_like(a), np.zeros(3), np.ones((2, 2)),
                                 np.arange(4), np.linspace(0, 1, 5)))(x.numpy()),
    "p11": lambda x: torch.from_numpy(x.numpy() * 2) + x,
    "p12": lambda x: torch.as_tensor(x.numpy().sum(axis=0)),
    "p13": lambda x: (lambda a: (a.shape, a.ndim, a.size, a.dtype, a.T))(x.numpy()),
    "p14": lambda x: (lambda a: (a.reshape(3, 2), a.reshape(-1), a.transpose(), a.flatten(),
                                 a.copy(), a.astype(np.int64)))(x.numpy()),
    "p15": lambda x: (lambda a: (a[0], a[1, 2], a[:, 1], a[::2]))(x.numpy()),
    "p16": add_in_place,
    "p17": set_item,
    "p18": lambda x: (lambda a: (a // 2, a / 2, a + 1.5, a * np.float32(2)))(as_int_array(x)),
    "p19": lambda x: float(x.numpy().sum()) + 1,
    "p20": lambda x: x.numpy().sum().item(),
    "p21": lambda x: np.asarray(x) * 2,
    "p22": copy_then_add,
    "p23": lambda x: (lambda a: (a < 3, a == a, -a))(x.numpy()),
    "p24": lambda x: x.numpy() + np.array([1.0, 2.0, 3.0]),
    "p25": lambda x: (lambda a, s: (s * 2, s + a))(x.numpy(), x.numpy().sum()),
    "p26": lambda x: [r.sum() for r in x.numpy()],
    "p27": lambda x: np.sum(x.numpy() ** 2),
    "p28": lambda x: int(x.numpy().sum()) + 1,
    "p29": lambda x: (lambda a: (np.sum(a, dtype=np.float64), a.mean(dtype=np.float64),
                                 a.sum(axis=0, dtype=np.int64), np.add(a, 1, dtype=np.float64)))(
        x.numpy()),
    "p30": lambda x: (lambda a: a[a > 2])(x.numpy()),
    "p31": lambda x: (lambda a: (np.tan(a / 10), np.arcsin(a / 10), np.arccos(a / 10),
                                 np.arctan(a), np.sinh(a), np.cosh(a)))(x.numpy()),
    "p32": lambda x: (lambda a: (np.fmod(a, 2.5), np.cumprod(a, axis=1), np.round(a / 3, 2),
                                 np.sort(-a, axis=1), np.argsort(-a, axis=1)))(x.numpy()),
    "p33": lambda x: (lambda a: (np.flip(a, 0), np.squeeze(a[None]), np.expand_dims(a, 0),
                                 np.tile(a, (2, 1)), np.outer(a[0], a[1])))(x.numpy()),
    "p34": lambda x: (lambda a: (np.diff(a, axis=1), np.count_nonzero(a > 2),
                                 np.einsum("ij,kj->ik", a, a)))(x.numpy()),
    "p35": sort_in_place,
    "p36": lambda x: np.flip(NP_ROW) + x.numpy(),
    "p37": flip_across_a_break,
    "p38": lambda x: (lambda a: (a[::-1] * 2, a[:, ::-2] + 1, a[1, ::-1].sum()))(x.numpy()),
    "p39": lambda x: (NP_ROW[::-1] * x.numpy()).sum(axis=1),
}


def x23():
    return torch.arange(1.0, 7.0).reshape(2, 3)


def outcome(fn):
    try:
        return described(fn(x23()))
    except Exception as e:  # noqa: BLE001 - the error is what is compared
        return "raises", type(e).__name__


def ptc_row(fn, backend):
    compiled = ptc.compile(fn, backend=backend)
    same = outcome(compiled) == outcome(fn)
    ex = ptc.ExplainOutput(list(compiled._events()), None)
    details = [e["break"]["code"] + " " + e["break"]["detail"] for e in compiled._events()
               if e.get("break") and e["break"]["code"] != "PTC-B000"]
    return same, ex.graph_count, ex.break_count, details


def dynamo_row(fn):
    import torch._dynamo as dynamo
    dynamo.reset()
    try:
        ex = dynamo.explain(fn)(x23())
        same = outcome(torch.compile(fn, backend="eager")) == outcome(fn)
        return same, ex.graph_count, ex.graph_break_count
    except Exception as e:  # noqa: BLE001
        return None, type(e).__name__, None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*")
    p.add_argument("--backend", default="eager")
    p.add_argument("--dynamo", action="store_true")
    args = p.parse_args()
    totals = {"ptc": 0, "ptc_wrong": 0, "dynamo": 0, "dynamo_differs": 0}
    for name, fn in PROGRAMS.items():
        if args.names and name not in args.names:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            same, graphs, breaks, details = ptc_row(fn, args.backend)
            line = "%s ptc: %s graphs=%d breaks=%d" % (name, "same" if same else "DIFFERS",
                                                         graphs, breaks)
            totals["ptc"] += breaks
            totals["ptc_wrong"] += not same
            if args.dynamo:
                dsame, dgraphs, dbreaks = dynamo_row(fn)
                line += "  torch.compile: %s graphs=%s breaks=%s" % (
                    "same" if dsame else "DIFFERS" if dsame is False else "raises", dgraphs, dbreaks)
                totals["dynamo"] += dbreaks or 0
                totals["dynamo_differs"] += dsame is False
        print(line + ("  " + "; ".join(details) if details else ""))
    print("total: ptc %(ptc)d breaks, %(ptc_wrong)d results unlike eager's" % totals +
          (";  torch.compile %(dynamo)d breaks, %(dynamo_differs)d results unlike eager's" % totals
           if args.dynamo else ""))


if __name__ == "__main__":
    main()
