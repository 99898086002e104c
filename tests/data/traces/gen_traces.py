#!/usr/bin/env python3
"""Writes ptview's test traces in the trace-directory format of logs/logs.h.

    gen_traces.py small OUT     the committed fixture tests/data/traces/small
    gen_traces.py broken OUT    the committed fixture tests/data/traces/broken
    gen_traces.py big OUT [--blocks N]   a large trace for bench/ptview_open.sh
                                (5 captured nodes per block: 2000 blocks = 10,000)

The model is tests/data/traces/small_model.py: a stack of residual MLP blocks
(fc1 -> gelu -> fc2 -> add -> layer_norm) and a softmax head. Every captured op
is written together with its prims decomposition, loop-IR buffers, kernels
and LLVM code, each carrying the captured value it came from (`<- %n`), the
way the compiler writes them. Output is deterministic.
"""
import json
import os
import sys

SRC = "small_model.py"  # found next to the trace directory (its parent)
# Source lines of small_model.py the ops come from: (line, col, text).
LOC = {
    "fc1": (15, 20, "self.fc1(x)"),
    "gelu": (15, 13, "F.gelu(self.fc1(x))"),
    "fc2": (16, 13, "self.fc2(h)"),
    "add": (17, 26, "x + h"),
    "norm": (17, 16, "self.norm(x + h)"),
    "head": (29, 30, "self.head(x)"),
    "softmax": (29, 16, "torch.softmax(self.head(x), dim=-1)"),
}


def t(shape):
    return "f32[%s]" % ",".join(str(d) for d in shape)


class Graph:
    """A .ptir graph written line by line."""

    def __init__(self, name):
        self.name, self.inputs, self.lines, self.count = name, [], [], 0

    def input(self, name, shape):
        self.inputs.append("%%%s: %s cpu" % (name, t(shape)))
        return name

    def node(self, text, shape, loc=None, module=None, prov=None, outs=1):
        names = [str(self.count + i) for i in range(outs)]
        self.count += outs
        line = "%s = %s : %s" % (", ".join("%" + n for n in names), text,
                                  ", ".join(t(s) for s in shape) if outs > 1 else t(shape))
        if loc or module:
            line += "  @"
            if loc:
                line += ' "%s":%d:%d "%s"' % (SRC, loc[0], loc[1], loc[2])
            if module:
                line += " [%s]" % module
        if prov:
            line += "  <- " + ", ".join("%" + p for p in prov)
        self.lines.append(line)
        return names[0] if outs == 1 else names

    def text(self, outputs):
        body = "".join("  %s\n" % l for l in self.lines)
        return "# ptc ir v1\ngraph %s(%s) {\n%s  return (%s)\n}\n" % (
            self.name, ", ".join(self.inputs), body, ", ".join("%" + o for o in outputs))


class Trace:
    """One compile: the captured and prims graphs and the later text stages."""

    def __init__(self, batch, dim):
        self.b, self.d = batch, dim
        self.cap, self.prims = Graph("forward"), Graph("forward")
        self.loops, self.kernels, self.code = [], [], []
        self.nbuf = 0

    def param(self, name, shape):
        self.cap.input(name, shape)
        self.prims.input(name, shape)
        return name

    def buf(self, kind, text, shape, prov):
        name = "buf%d" % self.nbuf
        self.nbuf += 1
        self.loops.append("%s: %s = %s %s  <- %s" % (name, t(shape), kind, text,
                                                      ", ".join("%" + p for p in prov)))
        return name

    def kernel(self, name, members, prov):
        """members: [(text, shape, prov)]; returns the kernel number."""
        n = len(self.code)
        self.kernels.append("kernel %d %s:" % (n, name))
        for text, shape, mprov in members:
            self.kernels.append("  %s  %s  <- %s" % (text, t(shape), ", ".join("%" + p for p in mprov)))
        body = [
            "; ptc kernel %d %s  <- %s" % (n, name, ", ".join("%" + p for p in prov)),
            "define void @%s(i64 %%begin, i64 %%end, ptr noalias %%args) {" % name,
            "entry:",
            "  br label %loop",
            "loop:",
            "  %i = phi i64 [ %begin, %entry ], [ %i.next, %loop ]",
        ]
        for k, (text, _, _) in enumerate(members):
            body.append("  ; %s" % text)
            body.append("  %%v%d = call float @llvm.ptc.elem(ptr %%args, i64 %%i, i32 %d)" % (k, k))
        body += ["  %i.next = add nuw i64 %i, 1", "  %done = icmp eq i64 %i.next, %end",
                 "  br i1 %done, label %exit, label %loop", "exit:", "  ret void", "}"]
        self.code.append("\n".join(body) + "\n")
        return n

    # ---- ops: captured node + prims decomposition + buffers + kernel members ----

    def linear(self, x, w, bias, n_out, module, loc):
        b, d = self.b, n_out
        c = self.cap.node("linear(%%%s, %%%s, %%%s)" % (x, w, bias), [b, d], loc, module)
        wt = self.prims.node("prims.permute(%%%s, [1, 0])" % w, [self.d_in(w), d], loc, module, [c])
        mm = self.prims.node("mm(%%%s, %%%s)" % (self.px(x), wt), [b, d], loc, module, [c])
        bb = self.prims.node("prims.broadcast_in_dim(%%%s, [%d, %d], [1])" % (bias, b, d), [b, d],
                             loc, module, [c])
        out = self.prims.node("prims.add(%%%s, %%%s)" % (mm, bb), [b, d], loc, module, [c])
        self.pmap[c] = out
        b0 = self.buf("Extern", "mm(%s, %s^T)" % (self.bmap.get(x, x), w), [b, d], [c])
        b1 = self.buf("Pointwise", "[%d, %d] load(%s, %d*i0 + i1) + load(%s, i1)" % (b, d, b0, d, bias),
                      [b, d], [c])
        self.bmap[c] = b1
        return c, b0, b1

    def d_in(self, w):
        return self.dims[w][1]

    def px(self, name):
        return self.pmap.get(name, name)

    def gelu(self, x, module, loc):
        b, d = self.b, self.shape(x)
        c = self.cap.node("gelu(%%%s)" % x, [b, d], loc, module)
        p = self.px(x)
        k = self.prims.node("prims.full([%d, %d], 0.7071067811865476, dtype=f32, device=cpu)" % (b, d),
                            [b, d], loc, module, [c])
        m = self.prims.node("prims.mul(%%%s, %%%s)" % (p, k), [b, d], loc, module, [c])
        e = self.prims.node("prims.erf(%%%s)" % m, [b, d], loc, module, [c])
        one = self.prims.node("prims.full([%d, %d], 1.0, dtype=f32, device=cpu)" % (b, d), [b, d],
                              loc, module, [c])
        a = self.prims.node("prims.add(%%%s, %%%s)" % (e, one), [b, d], loc, module, [c])
        half = self.prims.node("prims.full([%d, %d], 0.5, dtype=f32, device=cpu)" % (b, d), [b, d],
                               loc, module, [c])
        h = self.prims.node("prims.mul(%%%s, %%%s)" % (p, half), [b, d], loc, module, [c])
        self.pmap[c] = self.prims.node("prims.mul(%%%s, %%%s)" % (h, a), [b, d], loc, module, [c])
        self.bmap[c] = self.buf("Pointwise", "[%d, %d] gelu(load(%s, %d*i0 + i1))" % (b, d, self.bmap[x], d, ),
                                [b, d], [c])
        self.widths[c] = d
        return c

    def add(self, x, y, module, loc):
        b, d = self.b, self.shape(x)
        c = self.cap.node("add(%%%s, %%%s)" % (x, y), [b, d], loc, module)
        self.pmap[c] = self.prims.node("prims.add(%%%s, %%%s)" % (self.px(x), self.px(y)), [b, d],
                                       loc, module, [c])
        self.bmap[c] = self.buf("Pointwise", "[%d, %d] load(%s, %d*i0 + i1) + load(%s, %d*i0 + i1)" % (
            b, d, self.bmap.get(x, x), d, self.bmap[y], d), [b, d], [c])
        self.widths[c] = d
        return c

    def layer_norm(self, x, w, bias, module, loc):
        b, d = self.b, self.shape(x)
        c = self.cap.node("layer_norm(%%%s, [%d], %%%s, %%%s)" % (x, d, w, bias), [b, d], loc, module)
        p = self.px(x)
        var, mean = self.prims.node("prims.var_mean(%%%s, [1], 0.0)" % p, [[b], [b]], loc, module, [c],
                                    outs=2)
        mb = self.prims.node("prims.broadcast_in_dim(%%%s, [%d, %d], [0])" % (mean, b, d), [b, d], loc,
                             module, [c])
        xc = self.prims.node("prims.sub(%%%s, %%%s)" % (p, mb), [b, d], loc, module, [c])
        eps = self.prims.node("prims.full([%d], 1e-05, dtype=f32, device=cpu)" % b, [b], loc, module, [c])
        ve = self.prims.node("prims.add(%%%s, %%%s)" % (var, eps), [b], loc, module, [c])
        r = self.prims.node("prims.rsqrt(%%%s)" % ve, [b], loc, module, [c])
        rb = self.prims.node("prims.broadcast_in_dim(%%%s, [%d, %d], [0])" % (r, b, d), [b, d], loc,
                             module, [c])
        n = self.prims.node("prims.mul(%%%s, %%%s)" % (xc, rb), [b, d], loc, module, [c])
        wb = self.prims.node("prims.broadcast_in_dim(%%%s, [%d, %d], [1])" % (w, b, d), [b, d], loc,
                             module, [c])
        s = self.prims.node("prims.mul(%%%s, %%%s)" % (n, wb), [b, d], loc, module, [c])
        bb = self.prims.node("prims.broadcast_in_dim(%%%s, [%d, %d], [1])" % (bias, b, d), [b, d], loc,
                             module, [c])
        self.pmap[c] = self.prims.node("prims.add(%%%s, %%%s)" % (s, bb), [b, d], loc, module, [c])
        stats = self.buf("Reduction", "[%d] welford over [%d] load(%s, %d*i0 + r0)" % (b, d, self.bmap[x], d),
                         [b], [c])
        self.bmap[c] = self.buf("Pointwise", "[%d, %d] (load(%s, %d*i0 + i1) - mean(%s, i0)) * rstd(%s, i0)"
                                " * load(%s, i1) + load(%s, i1)" % (b, d, self.bmap[x], d, stats, stats, w, bias),
                                [b, d], [c])
        self.widths[c] = d
        return c, stats

    def softmax(self, x, loc):
        b, d = self.b, self.shape(x)
        c = self.cap.node("softmax(%%%s, -1)" % x, [b, d], loc)
        p = self.px(x)
        mx = self.prims.node("prims.amax(%%%s, [1])" % p, [b], loc, None, [c])
        mb = self.prims.node("prims.broadcast_in_dim(%%%s, [%d, %d], [0])" % (mx, b, d), [b, d], loc, None, [c])
        sh = self.prims.node("prims.sub(%%%s, %%%s)" % (p, mb), [b, d], loc, None, [c])
        ex = self.prims.node("prims.exp(%%%s)" % sh, [b, d], loc, None, [c])
        sm = self.prims.node("prims.sum(%%%s, [1])" % ex, [b], loc, None, [c])
        sb = self.prims.node("prims.broadcast_in_dim(%%%s, [%d, %d], [0])" % (sm, b, d), [b, d], loc, None, [c])
        self.pmap[c] = self.prims.node("prims.div(%%%s, %%%s)" % (ex, sb), [b, d], loc, None, [c])
        red = self.buf("Reduction", "[%d] max, sum(exp) over [%d] load(%s, %d*i0 + r0)" % (b, d, self.bmap[x], d),
                       [b], [c])
        self.bmap[c] = self.buf("Pointwise", "[%d, %d] exp(load(%s, %d*i0 + i1) - max(%s, i0)) / sum(%s, i0)" % (
            b, d, self.bmap[x], d, red, red), [b, d], [c])
        return c, red

    def shape(self, name):
        return self.widths[name]


def build(blocks, batch=2, dim=8, prefix="blocks"):
    tr = Trace(batch, dim)
    tr.pmap, tr.bmap, tr.widths, tr.dims = {}, {}, {}, {}
    x = tr.param("x", [batch, dim])
    tr.widths[x] = dim
    for i in range(blocks):
        m = "%s.%d" % (prefix, i)
        names = {}
        for p, shape in (("fc1_w", [2 * dim, dim]), ("fc1_b", [2 * dim]), ("fc2_w", [dim, 2 * dim]),
                         ("fc2_b", [dim]), ("norm_w", [dim]), ("norm_b", [dim])):
            names[p] = tr.param("%s_%d_%s" % (prefix.replace(".", "_"), i, p), shape)
            tr.dims[names[p]] = [shape[0], shape[-1]]
        h, mm1, b1 = tr.linear(x, names["fc1_w"], names["fc1_b"], 2 * dim, m + ".fc1", LOC["fc1"])
        tr.widths[h] = 2 * dim
        g = tr.gelu(h, m, LOC["gelu"])
        h2, mm2, b2 = tr.linear(g, names["fc2_w"], names["fc2_b"], dim, m + ".fc2", LOC["fc2"])
        tr.widths[h2] = dim
        r = tr.add(x, h2, m, LOC["add"])
        y, stats = tr.layer_norm(r, names["norm_w"], names["norm_b"], m + ".norm", LOC["norm"])
        sd = [batch, dim]
        tr.kernel("extern_mm_%d" % len(tr.code), [("%s = mm(...)" % mm1, [batch, 2 * dim], [h])], [h])
        tr.kernel("fused_add_gelu_%d" % len(tr.code), [("%s = add(%s, bias)" % (b1, mm1), [batch, 2 * dim], [h]),
                                                      ("%s = gelu(%s)" % (tr.bmap[g], b1), [batch, 2 * dim], [g])],
                  [h, g])
        tr.kernel("extern_mm_%d" % len(tr.code), [("%s = mm(...)" % mm2, sd, [h2])], [h2])
        tr.kernel("fused_add_add_layer_norm_%d" % len(tr.code),
                  [("%s = add(%s, bias)" % (b2, mm2), sd, [h2]), ("%s = add(x, %s)" % (tr.bmap[r], b2), sd, [r]),
                   ("%s = welford(%s)" % (stats, tr.bmap[r]), [batch], [y]),
                   ("%s = layer_norm(%s, %s)" % (tr.bmap[y], tr.bmap[r], stats), sd, [y])], [h2, r, y])
        x = y
    hw = tr.param("head_w", [4, dim])
    hb = tr.param("head_b", [4])
    tr.dims[hw] = [4, dim]
    o, mm3, b3 = tr.linear(x, hw, hb, 4, "head", LOC["head"])
    tr.widths[o] = 4
    s, red = tr.softmax(o, LOC["softmax"])
    tr.kernel("extern_mm_%d" % len(tr.code), [("%s = mm(...)" % mm3, [batch, 4], [o])], [o])
    tr.kernel("fused_add_softmax_%d" % len(tr.code),
              [("%s = add(%s, bias)" % (b3, mm3), [batch, 4], [o]), ("%s = max_sum_exp(%s)" % (red, b3), [batch], [s]),
               ("%s = softmax(%s)" % (tr.bmap[s], b3), [batch, 4], [s])], [o, s])
    return tr, s


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def write_compile(out, cid, tr, result, stages, reason, extra=None):
    folder = os.path.join(out, cid)
    files = []
    if "captured" in stages:
        write(os.path.join(folder, "captured.ptir"), tr.cap.text([result]))
        files.append("captured.ptir")
    if "prims" in stages:
        write(os.path.join(folder, "prims.ptir"), tr.prims.text([tr.pmap[result]]))
        files.append("prims.ptir")
    if "loops" in stages:
        write(os.path.join(folder, "loops.txt"),
              "# loop IR for %s: %d buffers\n%s\n" % (cid, tr.nbuf, "\n".join(tr.loops)))
        files.append("loops.txt")
    if "kernels" in stages:
        write(os.path.join(folder, "kernels.txt"),
              "# kernels for %s: %d kernels\n%s\nmemory plan: %d buffers in one arena of %d bytes\n" % (
                  cid, len(tr.code), "\n".join(tr.kernels), tr.nbuf, 64 * tr.nbuf))
        files.append("kernels.txt")
    if "llvm" in stages:
        for n, code in enumerate(tr.code):
            write(os.path.join(folder, "kernel_%d.ll" % n), code)
            files.append("kernel_%d.ll" % n)
    for name, text in (extra or {}).items():
        write(os.path.join(folder, name), text)
        files.append(name)
    return {"id": cid, "frame": cid.rsplit("_", 1)[0], "recompile": int(cid.rsplit("_", 1)[1]),
            "function": "forward", "file": SRC, "line": 26, "reason": reason,
            "stages": stages, "files": files}


def write_index(out, compiles):
    write(os.path.join(out, "index.json"),
          json.dumps({"version": 1, "ptc_version": "0.1.0", "compiles": compiles}, indent=1) + "\n")


ALL = ["captured", "prims", "loops", "kernels", "llvm"]


def small(out):
    tr, s = build(2)
    c0 = write_compile(out, "forward_0", tr, s, ALL, "first call", {
        "guards.txt": "x: Tensor f32[2,8] cpu, requires_grad=False\nself.blocks: len == 2\ngrad mode: enabled\n",
        "metrics.json": json.dumps({"times_ms": {"capture": 0.41, "prims": 0.22, "total": 0.63},
                                    "counts": {"nodes_captured": tr.cap.count, "nodes_prims": tr.prims.count,
                                               "kernels": len(tr.code)}}, indent=1) + "\n"})
    tr1, s1 = build(1, batch=3)
    c1 = write_compile(out, "forward_1", tr1, s1, ["captured", "prims"],
                       "guard failed: x.size(0) == 2 (got 3)")
    write_index(out, [c0, c1])


def broken(out):
    tr, s = build(1)
    c0 = write_compile(out, "forward_0", tr, s, ALL, "first call")
    # prims.ptir cut off mid-line, loops.txt and kernel_5.ll listed but absent,
    # forward_1 listed but its folder absent.
    p = os.path.join(out, "forward_0", "prims.ptir")
    text = open(p).read()
    write(p, text[: text.index("prims.erf")] + "prims.erf(%")
    os.remove(os.path.join(out, "forward_0", "loops.txt"))
    os.remove(os.path.join(out, "forward_0", "kernel_5.ll"))
    c1 = {"id": "forward_1", "frame": "forward", "recompile": 1, "function": "forward", "file": SRC,
          "line": 26, "reason": "guard failed: x.size(0) == 2 (got 5)", "stages": ["captured"],
          "files": ["captured.ptir"]}
    write_index(out, [c0, c1])


def big(out, blocks):
    tr, s = build(blocks, prefix="encoder.layers")
    c0 = write_compile(out, "forward_0", tr, s, ALL, "first call")
    write_index(out, [c0])
    print("%s: captured %d nodes, prims %d nodes, %d buffers, %d kernels" % (
        out, tr.cap.count, tr.prims.count, tr.nbuf, len(tr.code)))


def main(argv):
    if len(argv) < 3 or argv[1] not in ("small", "broken", "big"):
        sys.exit("usage: gen_traces.py small|broken|big OUT [--blocks N]")
    out = argv[2]
    if argv[1] == "small":
        small(out)
    elif argv[1] == "broken":
        broken(out)
    else:
        blocks = int(argv[argv.index("--blocks") + 1]) if "--blocks" in argv else 2000
        big(out, blocks)


if __name__ == "__main__":
    main(sys.argv)
