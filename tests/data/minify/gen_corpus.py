#!/usr/bin/env python3
"""One-off generator of ptminify's corpus graphs from real models.

ptc's own capture (compiler/capture) was not on main when the corpus was
made, so this records the models' torch-level calls with a TorchFunctionMode
and writes them as stage-1 .ptir with the ops.def names, the way capture
would: module parameters and buffers become graph inputs named by their
module path, in-place ops become functional ones that rebind the tensor, and
every node carries its source line and module path. Each graph is then run by
ptc-run on the model's real weights and compared with eager torch, so the
files are known to mean what the models compute.

  python3 tests/data/minify/gen_corpus.py [--build BUILD_DIR]

writes tests/data/minify/resnet18.ptir (torchvision resnet18, 10 classes, four
32x32 images, training mode so that batch norm uses batch statistics and
seeded random inputs stay finite; num_batches_tracked disabled; with fewer
values per channel in the last stage, batch norm amplifies the rounding of
compiled convolutions past the default tolerances) and
tests/data/minify/bert.ptir + bert.inputs.bin (a 4-layer BERT from a small
config, eval mode, 16 tokens; its token ids need a real inputs file).
"""
import argparse
import inspect
import linecache
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import ptcio  # noqa: E402

DT = dict(zip(ptcio.DTYPES, ptcio.NAMES))


def fmt(v):
    """A .ptir literal for a Python value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        r = repr(v)
        return r if any(c in r for c in ".en") else r + ".0"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(fmt(x) for x in v) + "]"
    if isinstance(v, str):
        return '"%s"' % v
    if v is None:
        return "none"
    raise TypeError("no literal for %r" % (v,))


def pair(v):
    return list(v) if isinstance(v, (list, tuple)) else [v, v]


def bind(fn, args, kwargs):
    sig = inspect.signature(fn)
    b = sig.bind(*args, **kwargs)
    b.apply_defaults()
    return b.arguments


class Recorder(TorchFunctionMode):
    """Records torch calls on tracked tensors as .ptir nodes."""

    def __init__(self, inputs):
        super().__init__()
        self.names = {}          # id(tensor) -> value name
        self.alive = []          # keeps recorded tensors alive: ids stay unique
        self.inputs = []         # (name, tensor)
        self.lines = []
        self.next = 0
        self.module_stack = []
        for name, t in inputs:
            self.names[id(t)] = name
            self.alive.append(t)
            self.inputs.append((name, t))

    # ---- values ---------------------------------------------------------------
    def ref(self, t):
        if not isinstance(t, torch.Tensor):
            return fmt(t)
        if id(t) not in self.names:
            raise RuntimeError("untracked tensor of shape %s" % (tuple(t.shape),))
        return "%" + self.names[id(t)]

    def bind_out(self, t):
        name = str(self.next)
        self.next += 1
        self.names[id(t)] = name
        self.alive.append(t)
        return name

    def emit(self, op, args, outs):
        """args: list of (param name or None for positional, value)."""
        parts = []
        for key, v in args:
            text = self.ref(v) if isinstance(v, torch.Tensor) else fmt(v)
            parts.append(text if key is None else "%s=%s" % (key, text))
        names = [self.bind_out(t) for t in outs]
        types = ", ".join("%s[%s]" % (DT[t.dtype], ",".join(str(d) for d in t.shape))
                          for t in outs)
        line = "  %s = %s(%s) : %s" % (", ".join("%" + n for n in names), op, ", ".join(parts),
                                        types)
        line += self.location()
        self.lines.append(line)

    def location(self):
        f = inspect.currentframe()
        while f and (f.f_code.co_filename == __file__ or "torch/overrides" in f.f_code.co_filename
                     or "torch/utils/_device" in f.f_code.co_filename
                     or "torch/nn/functional.py" in f.f_code.co_filename):
            f = f.f_back
        loc = ""
        if f:
            path = "/".join(f.f_code.co_filename.split(os.sep)[-3:])
            text = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
            text = text.replace("\\", "/").replace('"', "'")[:60]
            loc = '  @ "%s":%d:1 "%s"' % (path, f.f_lineno, text)
        if self.module_stack:
            loc += " [%s]" % self.module_stack[-1]
        return loc

    # ---- calls ------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if isinstance(out, torch.Tensor) or (isinstance(out, tuple) and out and
                                              all(isinstance(o, torch.Tensor) for o in out)):
            self.record(func, args, kwargs, out)
        return out

    def record(self, func, args, kw, out):
        name = getattr(func, "__name__", str(func))
        T = torch.Tensor
        if func is torch.conv2d:
            a = list(args) + [None] * (7 - len(args))
            x, w, b, stride, padding, dilation, groups = a
            self.emit("conv2d", [(None, x), (None, w), ("bias", b), ("stride", pair(stride or 1)),
                                 ("padding", pair(padding or 0)),
                                 ("dilation", pair(dilation or 1)), ("groups", groups or 1)],
                      [out])
        elif func is F.batch_norm:
            p = bind(F.batch_norm, args, kw)
            outs = [out]
            if p["training"] and p["running_mean"] is not None:
                outs += [p["running_mean"], p["running_var"]]  # updated in place: rebound
            self.emit("batch_norm", [(None, p["input"]), ("weight", p["weight"]),
                                     ("bias", p["bias"]), ("running_mean", p["running_mean"]),
                                     ("running_var", p["running_var"]),
                                     ("training", p["training"]), ("momentum", p["momentum"]),
                                     ("eps", p["eps"])], outs)
        elif func is F.relu:
            self.emit("relu", [(None, bind(F.relu, args, kw)["input"])], [out])
        elif name == "fn" and "max_pool2d" in str(getattr(func, "__qualname__", "")) or \
                func is F.max_pool2d:
            p = bind(F._max_pool2d, args, kw)
            stride = p["stride"] if p["stride"] not in (None, []) else p["kernel_size"]
            self.emit("max_pool2d", [(None, p["input"]), ("kernel_size", pair(p["kernel_size"])),
                                     ("stride", pair(stride)), ("padding", pair(p["padding"])),
                                     ("dilation", pair(p["dilation"])),
                                     ("ceil_mode", p["ceil_mode"])], [out])
        elif func in (T.add, T.add_, T.__add__, T.__iadd__, T.__radd__, torch.add):
            self.emit("add", [(None, args[0]), (None, args[1])], [out])
        elif func in (T.__truediv__, torch.div, T.div):
            self.emit("div", [(None, args[0]), (None, args[1])], [out])
        elif func in (T.__mul__, torch.mul, T.mul):
            self.emit("mul", [(None, args[0]), (None, args[1])], [out])
        elif func is F.adaptive_avg_pool2d:
            self.emit("adaptive_avg_pool2d", [(None, args[0]), ("output_size", pair(args[1]))],
                      [out])
        elif func in (torch.flatten, T.flatten):
            a = list(args) + [0, -1][len(args) - 1:]
            self.emit("flatten", [(None, a[0]), ("start_dim", a[1]), ("end_dim", a[2])], [out])
        elif func is F.linear:
            self.emit("linear", [(None, args[0]), (None, args[1]),
                                 ("bias", args[2] if len(args) > 2 else kw.get("bias"))], [out])
        elif func is F.embedding:
            p = bind(F.embedding, args, kw)
            pad = p["padding_idx"]
            self.emit("embedding", [(None, p["weight"]), (None, p["input"]),
                                    ("padding_idx", -1 if pad is None else pad)], [out])
        elif func is F.layer_norm:
            p = bind(F.layer_norm, args, kw)
            self.emit("layer_norm", [(None, p["input"]),
                                     ("normalized_shape", list(p["normalized_shape"])),
                                     ("weight", p["weight"]), ("bias", p["bias"]),
                                     ("eps", float(p["eps"]))], [out])
        elif func is F.dropout:
            p = bind(F.dropout, args, kw)
            if p["training"] and p["p"] > 0:
                raise RuntimeError("training-mode dropout is not recorded")
            self.names[id(out)] = self.names[id(p["input"])]  # the identity
            self.alive.append(out)
        elif func is F.gelu:
            self.emit("gelu", [(None, args[0]), ("approximate", kw.get("approximate", "none"))],
                      [out])
        elif func is F.scaled_dot_product_attention:
            p = bind(lambda query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                     scale=None, enable_gqa=False: None, args, kw)
            self.emit("scaled_dot_product_attention",
                      [(None, p["query"]), (None, p["key"]), (None, p["value"]),
                       ("attn_mask", p["attn_mask"]), ("dropout_p", float(p["dropout_p"])),
                       ("is_causal", p["is_causal"]), ("scale", p["scale"])], [out])
        elif func is T.view or func is T.reshape:
            shape = args[1] if len(args) == 2 and isinstance(args[1], (tuple, list, torch.Size)) \
                else args[1:]
            self.emit("view" if func is T.view else "reshape",
                      [(None, args[0]), (None, [int(s) for s in shape])], [out])
        elif func is T.transpose:
            self.emit("transpose", [(None, args[0]), ("dim0", args[1]), ("dim1", args[2])], [out])
        elif func is T.permute:
            dims = args[1] if len(args) == 2 and isinstance(args[1], (tuple, list)) else args[1:]
            self.emit("permute", [(None, args[0]), ("dims", list(dims))], [out])
        elif func is T.contiguous:
            self.emit("contiguous", [(None, args[0])], [out])
        elif func is T.expand:
            shape = args[1] if len(args) == 2 and isinstance(args[1], (tuple, list, torch.Size)) \
                else args[1:]
            self.emit("expand", [(None, args[0]), ("size", [int(s) for s in shape])], [out])
        elif func is torch.gather or func is T.gather:
            p = bind(lambda input, dim, index, sparse_grad=False: None, args, kw)
            self.emit("gather", [(None, p["input"]), ("dim", p["dim"]), ("index", p["index"])],
                      [out])
        elif func is torch.tanh or func is T.tanh:
            self.emit("tanh", [(None, args[0])], [out])
        elif func is T.__getitem__:
            self.getitem(args[0], args[1], out)
        else:
            raise RuntimeError("no .ptir mapping for %s" % getattr(func, "__qualname__", func))

    def getitem(self, x, index, out):
        """x[index] for slices and integers: one slice/select node per indexed dim."""
        index = index if isinstance(index, tuple) else (index,)
        cur, dim = x, 0
        steps = []
        for item in index:
            if isinstance(item, slice):
                if item != slice(None):
                    steps.append(("slice", dim, item))
                dim += 1
            elif isinstance(item, int):
                steps.append(("select", dim, item))
            else:
                raise RuntimeError("unsupported index %r" % (item,))
        for k, (kind, d, item) in enumerate(steps):
            if kind == "slice":
                nxt = cur[(slice(None),) * d + (item,)] if k + 1 < len(steps) else out
                self.emit("slice", [(None, cur), ("dim", d), ("start", item.start),
                                    ("end", item.stop), ("step", item.step or 1)], [nxt])
            else:
                nxt = cur.select(d, item) if k + 1 < len(steps) else out
                self.emit("select", [(None, cur), ("dim", d), ("index", item)], [nxt])
            cur = nxt

    def graph(self, name, outputs):
        ins = ", ".join("%%%s: %s[%s] cpu" % (n, DT[t.dtype], ",".join(str(d) for d in t.shape))
                        for n, t in self.inputs)
        outs = ", ".join(self.ref(t) for t in outputs)
        return "# ptc ir v1\ngraph %s(%s) {\n%s\n  return (%s)\n}\n" % (
            name, ins, "\n".join(self.lines), outs)


def module_hooks(model, rec):
    """Keeps rec.module_stack as the path of the module running."""
    handles = []
    for path, mod in model.named_modules():
        if not path:
            continue
        handles.append(mod.register_forward_pre_hook(
            lambda m, a, path=path: rec.module_stack.append(path)))
        handles.append(mod.register_forward_hook(lambda m, a, o: rec.module_stack.pop() and None))
    return handles


def record(model, example_inputs, name):
    inputs = list(example_inputs) + [(n, p.detach()) for n, p in model.named_parameters()] + \
        [(n, b) for n, b in model.named_buffers() if b is not None]
    rec = Recorder(inputs)
    for n, p in model.named_parameters():  # the model reads the Parameters themselves
        rec.names[id(p)] = n
        rec.alive.append(p)
    hooks = module_hooks(model, rec)
    with torch.no_grad(), rec:
        out = model(*[t for _, t in example_inputs])
    for h in hooks:
        h.remove()
    outs = [out] if isinstance(out, torch.Tensor) else [out[0], out[1]]
    return rec.graph(name, outs), rec.inputs, outs


def check(build, ptir, inputs, outs, tol):
    """Runs the graph in ptc-run on the real inputs and compares with torch."""
    with tempfile.TemporaryDirectory() as d:
        g, i, o = (os.path.join(d, f) for f in ("g.ptir", "in.bin", "out.bin"))
        open(g, "w").write(ptir)
        ptcio.write_tensors(i, [(n, t.contiguous()) for n, t in inputs])
        exe = os.path.join(build, "tools", "run", "ptc-run")
        r = subprocess.run([exe, "--inputs", i, "--save-outputs", o, g], capture_output=True,
                           text=True)
        if r.returncode:
            raise SystemExit("ptc-run failed: %s" % r.stderr)
        got = [t for _, t in ptcio.read_tensors(o)]
        for a, b in zip(got, outs):
            if not torch.allclose(a, b.float(), rtol=tol, atol=tol):
                raise SystemExit("mismatch with torch: max diff %g" % (a - b).abs().max())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "..", "build"))
    build = ap.parse_args().build
    torch.manual_seed(0)

    import torchvision
    resnet = torchvision.models.resnet18(num_classes=10).train()
    for m in resnet.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.num_batches_tracked = None
    x = torch.randn(4, 3, 32, 32)
    text, inputs, outs = record(resnet, [("x", x)], "resnet18")
    check(build, text, inputs, outs, 1e-3)
    open(os.path.join(HERE, "resnet18.ptir"), "w").write(text)
    print("resnet18.ptir: %d nodes" % text.count("\n  %"))

    from transformers import BertConfig, BertModel
    cfg = BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64)
    bert = BertModel(cfg).eval()
    ids = torch.randint(0, 128, (1, 16))
    text, inputs, outs = record(bert, [("input_ids", ids)], "bert")
    check(build, text, inputs, outs, 1e-4)
    open(os.path.join(HERE, "bert.ptir"), "w").write(text)
    ptcio.write_tensors(os.path.join(HERE, "bert.inputs.bin"),
                        [(n, t.contiguous()) for n, t in inputs])
    print("bert.ptir: %d nodes" % text.count("\n  %"))


if __name__ == "__main__":
    main()
