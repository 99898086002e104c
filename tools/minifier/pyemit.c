/* repro.py: the minimal graph as a standalone torch program, run through ptc.
 *
 * Each node becomes one line of straight-line torch code in the spelling a
 * user would write (torch.add, F.gelu, x.view), so that ptc.compile captures
 * it like any model; prims (stage-2 graphs) become their torch equivalents,
 * and the few ops whose torch spelling differs in meaning go through small
 * helpers printed at the top of the script. The script compares ptc's result
 * with reference.bin, the reference interpreter's outputs, which is the same
 * oracle ptminify used; `--eager` instead checks the translation itself
 * (eager torch against reference.bin), skipping outputs that depend on random
 * ops, whose streams differ between torch and ptc.
 */
#include "minify.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    CALL,     /* fn(params before '*' up to the last non-default, kw-only as keywords) */
    KWCALL,   /* fn(tensor params, other non-default params as keywords) */
    METHOD,   /* first.fn(...), CALL rules for the rest */
    KWMETHOD, /* first.fn(...), KWCALL rules for the rest */
    HELPER,   /* fn(every param, positionally): a helper of the prelude */
} style;

typedef struct pyop {
    const char *fn;
    style how;
} pyop;

/* The pointwise ops bound to torch.<name> (ir/pointwise.def's bind column). */
#define PY_UNARY(name, id) [PTC_OP_##id] = {"torch." name, CALL},
#define PY_BINARY(name, id) PY_UNARY(name, id)
#define PY_NONE(name, id)
#define PW_UNARY(id, name, params, meta, eager, how, bind, sig, ref) PY_##bind(name, id)
#define PW_BINARY(id, name, params, meta, eager, how, bind, sig, ref) PY_##bind(name, id)

static const pyop pyops[PTC_OP_COUNT] = {
#include "ir/pointwise.def"
    [PTC_OP_ROUND] = {"torch.round", CALL},
    [PTC_OP_HARDTANH] = {"F.hardtanh", CALL},
    [PTC_OP_GELU] = {"F.gelu", CALL},
    [PTC_OP_SILU] = {"F.silu", CALL},
    [PTC_OP_HARDSWISH] = {"F.hardswish", CALL},
    [PTC_OP_HARDSIGMOID] = {"F.hardsigmoid", CALL},
    [PTC_OP_LEAKY_RELU] = {"F.leaky_relu", CALL},
    [PTC_OP_ELU] = {"torch.ops.aten.elu", CALL},
    [PTC_OP_SOFTPLUS] = {"F.softplus", CALL},
    [PTC_OP_ISNAN] = {"torch.isnan", CALL},
    [PTC_OP_RSUB] = {"torch.rsub", CALL},
    [PTC_OP_POW] = {"torch.pow", CALL},
    [PTC_OP_WHERE] = {"_where", HELPER},
    [PTC_OP_CLAMP] = {"torch.clamp", CALL},
    [PTC_OP_MASKED_FILL] = {"torch.masked_fill", CALL},
    [PTC_OP_SUM] = {"torch.sum", KWCALL},
    [PTC_OP_MEAN] = {"torch.mean", KWCALL},
    [PTC_OP_AMAX] = {"torch.amax", KWCALL},
    [PTC_OP_AMIN] = {"torch.amin", KWCALL},
    [PTC_OP_PROD] = {"_prod", HELPER},
    [PTC_OP_VAR] = {"torch.var", KWCALL},
    [PTC_OP_STD] = {"torch.std", KWCALL},
    [PTC_OP_ARGMAX] = {"torch.argmax", KWCALL},
    [PTC_OP_ARGMIN] = {"torch.argmin", KWCALL},
    [PTC_OP_LOGSUMEXP] = {"torch.logsumexp", CALL},
    [PTC_OP_ANY] = {"_any", HELPER},
    [PTC_OP_ALL] = {"_all", HELPER},
    [PTC_OP_CUMSUM] = {"torch.cumsum", CALL},
    [PTC_OP_CUMPROD] = {"torch.cumprod", CALL},
    [PTC_OP_SOFTMAX] = {"torch.softmax", KWCALL},
    [PTC_OP_LOG_SOFTMAX] = {"torch.log_softmax", KWCALL},
    [PTC_OP_LAYER_NORM] = {"F.layer_norm", KWCALL},
    [PTC_OP_BATCH_NORM] = {"_batch_norm", HELPER},
    [PTC_OP_GROUP_NORM] = {"F.group_norm", KWCALL},
    [PTC_OP_DROPOUT] = {"torch.dropout", CALL},
    [PTC_OP_MM] = {"torch.mm", CALL},
    [PTC_OP_BMM] = {"torch.bmm", CALL},
    [PTC_OP_MATMUL] = {"torch.matmul", CALL},
    [PTC_OP_ADDMM] = {"torch.addmm", CALL},
    [PTC_OP_LINEAR] = {"F.linear", CALL},
    [PTC_OP_BADDBMM] = {"torch.baddbmm", CALL},
    [PTC_OP_SDPA] = {"_sdpa", KWCALL},
    [PTC_OP_SORT] = {"torch.sort", KWCALL},
    [PTC_OP_TOPK] = {"torch.topk", KWCALL},
    [PTC_OP_CUMMAX] = {"torch.cummax", KWCALL},
    [PTC_OP_CUMMIN] = {"torch.cummin", KWCALL},
    [PTC_OP_CONVOLUTION] = {"torch.convolution", HELPER},
    [PTC_OP_CONVOLUTION_BACKWARD_WEIGHT] = {"_convolution_backward_weight", HELPER},
    [PTC_OP_CONVOLUTION_BACKWARD] = {"_convolution_backward", HELPER},
    [PTC_OP_CONV1D] = {"torch.conv1d", CALL},
    [PTC_OP_CONV2D] = {"torch.conv2d", CALL},
    [PTC_OP_CONV3D] = {"torch.conv3d", CALL},
    [PTC_OP_CONV_TRANSPOSE2D] = {"torch.conv_transpose2d", CALL},
    [PTC_OP_MAX_POOL2D] = {"torch.max_pool2d", CALL},
    [PTC_OP_MAX_POOL2D_WITH_INDICES] = {"torch.ops.aten.max_pool2d_with_indices", HELPER},
    [PTC_OP_AVG_POOL2D] = {"torch.ops.aten.avg_pool2d", HELPER},
    [PTC_OP_ADAPTIVE_AVG_POOL2D] = {"F.adaptive_avg_pool2d", CALL},
    [PTC_OP_VIEW] = {"view", METHOD},
    [PTC_OP_RESHAPE] = {"torch.reshape", CALL},
    [PTC_OP_PERMUTE] = {"torch.permute", CALL},
    [PTC_OP_TRANSPOSE] = {"torch.transpose", CALL},
    [PTC_OP_T] = {"torch.t", CALL},
    [PTC_OP_EXPAND] = {"expand", METHOD},
    [PTC_OP_SQUEEZE] = {"_squeeze", HELPER},
    [PTC_OP_UNSQUEEZE] = {"torch.unsqueeze", CALL},
    [PTC_OP_FLATTEN] = {"torch.flatten", CALL},
    [PTC_OP_SLICE] = {"_slice", HELPER},
    [PTC_OP_SELECT] = {"torch.select", CALL},
    [PTC_OP_NARROW] = {"torch.narrow", CALL},
    [PTC_OP_INDEX] = {"_index", HELPER},
    [PTC_OP_INDEX_SELECT] = {"torch.index_select", CALL},
    [PTC_OP_GATHER] = {"torch.gather", CALL},
    [PTC_OP_SCATTER] = {"torch.scatter", CALL},
    [PTC_OP_SCATTER_ADD] = {"torch.scatter_add", CALL},
    [PTC_OP_CAT] = {"torch.cat", CALL},
    [PTC_OP_STACK] = {"torch.stack", CALL},
    [PTC_OP_SPLIT] = {"torch.split", CALL},
    [PTC_OP_SPLIT_WITH_SIZES] = {"torch.split", CALL},
    [PTC_OP_CHUNK] = {"torch.chunk", CALL},
    [PTC_OP_UNBIND] = {"torch.unbind", CALL},
    [PTC_OP_CONTIGUOUS] = {"contiguous", METHOD},
    [PTC_OP_CLONE] = {"torch.clone", CALL},
    [PTC_OP_CONSTANT_PAD_ND] = {"torch.constant_pad_nd", CALL},
    [PTC_OP_REPEAT] = {"repeat", METHOD},
    [PTC_OP_ROLL] = {"torch.roll", CALL},
    [PTC_OP_TRIU] = {"torch.triu", CALL},
    [PTC_OP_TRIL] = {"torch.tril", CALL},
    [PTC_OP_EMBEDDING] = {"torch.embedding", CALL},
    [PTC_OP_FULL] = {"torch.full", CALL},
    [PTC_OP_ZEROS] = {"torch.zeros", CALL},
    [PTC_OP_ONES] = {"torch.ones", CALL},
    [PTC_OP_EMPTY] = {"torch.empty", CALL},
    [PTC_OP_ARANGE] = {"torch.arange", CALL},
    [PTC_OP_RAND] = {"torch.rand", CALL},
    [PTC_OP_RANDN] = {"torch.randn", CALL},
    [PTC_OP_TO] = {"to", KWMETHOD},
    [PTC_OP_PRIMS_CONVERT_ELEMENT_TYPE] = {"to", KWMETHOD},
    [PTC_OP_PRIMS_DEVICE_PUT] = {"to", KWMETHOD},
    [PTC_OP_PRIMS_BROADCAST_IN_DIM] = {"_broadcast_in_dim", HELPER},
    [PTC_OP_PRIMS_RESHAPE] = {"torch.reshape", CALL},
    [PTC_OP_PRIMS_PERMUTE] = {"torch.permute", CALL},
    [PTC_OP_PRIMS_SLICE] = {"_prim_slice", HELPER},
    [PTC_OP_PRIMS_PAD] = {"_prim_pad", HELPER},
    [PTC_OP_PRIMS_CAT] = {"torch.cat", CALL},
    [PTC_OP_PRIMS_IOTA] = {"_iota", HELPER},
    [PTC_OP_PRIMS_FULL] = {"torch.full", CALL},
    [PTC_OP_PRIMS_RAND] = {"torch.rand", CALL},
    [PTC_OP_PRIMS_RANDN] = {"torch.randn", CALL},
    [PTC_OP_PRIMS_DIV] = {"_prim_div", HELPER},
    [PTC_OP_PRIMS_SUM] = {"_prim_sum", HELPER},
    [PTC_OP_PRIMS_PROD] = {"_prim_prod", HELPER},
    [PTC_OP_PRIMS_AMAX] = {"_prim_amax", HELPER},
    [PTC_OP_PRIMS_AMIN] = {"_prim_amin", HELPER},
    [PTC_OP_PRIMS_ARGMAX] = {"torch.argmax", CALL},
    [PTC_OP_PRIMS_ARGMIN] = {"torch.argmin", CALL},
    [PTC_OP_PRIMS_VAR_MEAN] = {"_var_mean", HELPER},
    [PTC_OP_PRIMS_CUMSUM] = {"_prim_cumsum", HELPER},
    [PTC_OP_PRIMS_CUMPROD] = {"_prim_cumprod", HELPER},
    [PTC_OP_PRIMS_GATHER] = {"torch.gather", CALL},
    [PTC_OP_PRIMS_INDEX_SELECT] = {"torch.index_select", CALL},
    [PTC_OP_PRIMS_SCATTER_ADD] = {"torch.scatter_add", CALL},
    [PTC_OP_PRIMS_SCATTER] = {"torch.scatter", CALL},
};

/* Helpers for ops whose plain torch spelling means something else. */
static const char prelude[] =
    "def _where(cond, a, b):\n"
    "    if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):\n"
    "        a = torch.tensor(a)\n"
    "    return torch.where(cond, a, b)\n"
    "\n"
    "def _prod(x, dim, keepdim, dtype):\n"
    "    if dim is None:\n"
    "        r = torch.prod(x, dtype=dtype)\n"
    "        return r.reshape([1] * x.dim()) if keepdim else r\n"
    "    return torch.prod(x, dim, keepdim, dtype=dtype)\n"
    "\n"
    "def _reduce_dims(f, x, dim, keepdim):\n"
    "    if dim is None:\n"
    "        dim = list(range(x.dim()))\n"
    "    for d in sorted((d % max(x.dim(), 1) for d in dim), reverse=True):\n"
    "        x = f(x, d, keepdim=keepdim)\n"
    "    return x\n"
    "\n"
    "def _any(x, dim, keepdim):\n"
    "    return _reduce_dims(torch.any, x, dim, keepdim)\n"
    "\n"
    "def _all(x, dim, keepdim):\n"
    "    return _reduce_dims(torch.all, x, dim, keepdim)\n"
    "\n"
    "def _convolution_backward(grad, x, weight, stride, padding, dilation, groups,\n"
    "                          mask=(True, True, False)):\n"
    "    return torch.ops.aten.convolution_backward(grad, x, weight, None, stride, padding, "
    "dilation,\n"
    "                                               False, [0] * len(stride), groups, "
    "mask)[:2]\n"
    "\n"
    "def _convolution_backward_weight(grad, x, weight, stride, padding, dilation, groups):\n"
    "    return _convolution_backward(grad, x, weight, stride, padding, dilation, groups,\n"
    "                                 (False, True, False))[1]\n"
    "\n"
    "def _batch_norm(x, weight, bias, mean, var, training, momentum, eps):\n"
    "    if not training:\n"
    "        return (F.batch_norm(x, mean, var, weight, bias, False, momentum, eps),)\n"
    "    # functional: the updated statistics are results, not in-place writes\n"
    "    out = F.batch_norm(x, None, None, weight, bias, True, momentum, eps)\n"
    "    if mean is None:\n"
    "        return (out,)\n"
    "    dims = [0] + list(range(2, x.dim()))\n"
    "    new_mean = (1 - momentum) * mean + momentum * x.mean(dims)\n"
    "    new_var = (1 - momentum) * var + momentum * x.var(dims, correction=1)\n"
    "    return out, new_mean, new_var\n"
    "\n"
    "def _squeeze(x, dim):\n"
    "    if dim is None:\n"
    "        return torch.squeeze(x)\n"
    "    for d in sorted((d % max(x.dim(), 1) for d in dim), reverse=True):\n"
    "        if x.dim() and x.shape[d] == 1:\n"
    "            x = x.squeeze(d)\n"
    "    return x\n"
    "\n"
    "def _slice(x, dim, start, end, step):\n"
    "    idx = [slice(None)] * x.dim()\n"
    "    idx[dim] = slice(start, end, step)\n"
    "    return x[tuple(idx)]\n"
    "\n"
    "def _index(x, indices):\n"
    "    return x[tuple(slice(None) if i is None else i for i in indices)]\n"
    "\n"
    "def _broadcast_in_dim(a, shape, broadcast_dimensions):\n"
    "    s = [1] * len(shape)\n"
    "    for i, d in enumerate(broadcast_dimensions):\n"
    "        s[d] = a.shape[i]\n"
    "    return a.reshape(s).expand(shape)\n"
    "\n"
    "def _prim_slice(a, start, limit, strides):\n"
    "    return a[tuple(slice(s, l, st) for s, l, st in zip(start, limit, strides))]\n"
    "\n"
    "def _prim_pad(a, value, config):\n"
    "    lo, hi, interior = config[0::3], config[1::3], config[2::3]\n"
    "    if any(interior):\n"
    "        size = [n + (n - 1) * i if n else 0 for n, i in zip(a.shape, interior)]\n"
    "        b = torch.full(size, value, dtype=a.dtype, device=a.device)\n"
    "        b[tuple(slice(None, None, i + 1) for i in interior)] = a\n"
    "        a = b\n"
    "    pad = []\n"
    "    for l, h in zip(reversed(lo), reversed(hi)):\n"
    "        pad += [l, h]\n"
    "    return torch.nn.functional.pad(a, pad, value=value)\n"
    "\n"
    "def _iota(length, start, step, dtype, device):\n"
    "    return start + step * torch.arange(length, dtype=dtype, device=device)\n"
    "\n"
    "def _prim_div(a, b):\n"
    "    if a.is_floating_point() or a.is_complex():\n"
    "        return torch.div(a, b)\n"
    "    return torch.div(a, b, rounding_mode='trunc')\n"
    "\n"
    "def _prim_sum(a, dims):\n"
    "    return (torch.sum(a, dims) if len(dims) else a.clone()).to(a.dtype)\n"
    "\n"
    "def _prim_prod(a, dims):\n"
    "    for d in sorted(dims, reverse=True):\n"
    "        a = torch.prod(a, d).to(a.dtype)\n"
    "    return a\n"
    "\n"
    "def _prim_amax(a, dims):\n"
    "    return torch.amax(a, dims) if len(dims) else a.clone()\n"
    "\n"
    "def _prim_amin(a, dims):\n"
    "    return torch.amin(a, dims) if len(dims) else a.clone()\n"
    "\n"
    "def _var_mean(a, dims, correction):\n"
    "    # torch < 2 takes only an integer correction and a tuple of dims\n"
    "    if float(correction).is_integer():\n"
    "        correction = int(correction)\n"
    "    return torch.var_mean(a, tuple(dims), correction=correction)\n"
    "\n"
    "def _sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):\n"
    "    # torch < 2.0 has no F.scaled_dot_product_attention (< 2.1: no scale=)\n"
    "    if hasattr(F, 'scaled_dot_product_attention'):\n"
    "        kw = {} if scale is None else {'scale': scale}\n"
    "        try:\n"
    "            return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,\n"
    "                                                  dropout_p=dropout_p, is_causal=is_causal, "
    "**kw)\n"
    "        except TypeError:\n"
    "            pass\n"
    "    s = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale)\n"
    "    if is_causal:\n"
    "        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, "
    "device=q.device).tril()\n"
    "        s = s.masked_fill(~keep, float('-inf'))\n"
    "    if attn_mask is not None:\n"
    "        s = s.masked_fill(~attn_mask, float('-inf')) if attn_mask.dtype == torch.bool else s "
    "+ attn_mask\n"
    "    p = torch.softmax(s, dim=-1)\n"
    "    if dropout_p > 0:\n"
    "        p = F.dropout(p, dropout_p)\n"
    "    return p @ v\n"
    "\n"
    "def _prim_cumsum(a, dim):\n"
    "    return torch.cumsum(a, dim).to(a.dtype)\n"
    "\n"
    "def _prim_cumprod(a, dim):\n"
    "    return torch.cumprod(a, dim).to(a.dtype)\n"
    "\n";

static const char loader[] =
    "DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,\n"
    "          torch.float16, torch.bfloat16, torch.float32, torch.float64]\n"
    "\n"
    "def load_tensors(path):\n"
    "    \"\"\"A ptc tensor file (compiler/ir/ir.h) -> list of (name, tensor).\"\"\"\n"
    "    with open(path, 'rb') as f:\n"
    "        data = f.read()\n"
    "    if data[:4] != b'PTCT' or struct.unpack_from('<I', data, len(data) - 4)[0] != \\\n"
    "            zlib.crc32(data[:-4]) & 0xffffffff:\n"
    "        raise SystemExit('%s: not a ptc tensor file, or damaged' % path)\n"
    "    count = struct.unpack_from('<I', data, 8)[0]\n"
    "    pos, out = 12, []\n"
    "    for _ in range(count):\n"
    "        (nlen,) = struct.unpack_from('<I', data, pos)\n"
    "        name = data[pos + 4:pos + 4 + nlen].decode()\n"
    "        pos += 4 + nlen\n"
    "        code, ndim, _ = struct.unpack_from('<BBH', data, pos)\n"
    "        sizes = struct.unpack_from('<%dq' % ndim, data, pos + 4)\n"
    "        pos += 4 + 16 * ndim\n"
    "        (nbytes,) = struct.unpack_from('<Q', data, pos)\n"
    "        raw = bytearray(data[pos + 8:pos + 8 + nbytes])\n"
    "        pos += 8 + nbytes\n"
    "        dt = DTYPES[code]\n"
    "        store = {torch.float16: torch.int16, torch.bfloat16: torch.int16,\n"
    "                 torch.bool: torch.uint8}.get(dt, dt)\n"
    "        t = torch.frombuffer(raw, dtype=store).clone() if nbytes else "
    "torch.empty(0, dtype=store)\n"
    "        t = t.to(torch.bool) if dt is torch.bool else t.view(dt)\n"
    "        out.append((name, t.reshape(sizes)))\n"
    "    return out\n"
    "\n"
    "def compare(got, want, rtol, atol, skip=()):\n"
    "    \"\"\"The first output that differs, as a message; None when all agree.\"\"\"\n"
    "    got = list(got) if isinstance(got, (tuple, list)) else [got]\n"
    "    if len(got) != len(want):\n"
    "        return '%d outputs, expected %d' % (len(got), len(want))\n"
    "    for i, (g, w) in enumerate(zip(got, want)):\n"
    "        if i in skip:\n"
    "            continue\n"
    "        g = g.detach().cpu()\n"
    "        if g.dtype != w.dtype or tuple(g.shape) != tuple(w.shape):\n"
    "            return 'output %d: %s%s vs %s%s' % (i, g.dtype, list(g.shape), w.dtype,\n"
    "                                                 list(w.shape))\n"
    "        if g.is_floating_point():\n"
    "            # ptc's rule (ops.h, ptc_tensor_close): atol is relative to max(1, max|want|)\n"
    "            r = rtol if rtol >= 0 else {torch.float64: 1e-7, torch.float16: 2e-3,\n"
    "                                         torch.bfloat16: 1.6e-2}.get(w.dtype, 1e-4)\n"
    "            a = atol if atol >= 0 else {torch.float64: 1e-7, torch.float16: 1e-4,\n"
    "                                         torch.bfloat16: 1e-3}.get(w.dtype, 1e-5)\n"
    "            finite = w.double()[torch.isfinite(w.double())].abs()\n"
    "            scale = max(1.0, finite.max().item()) if finite.numel() else 1.0\n"
    "            ok = torch.allclose(g.double(), w.double(), rtol=r, atol=a * scale,\n"
    "                                equal_nan=True)\n"
    "        else:\n"
    "            ok = torch.equal(g, w)\n"
    "        if not ok:\n"
    "            diff = (g.double() - w.double()).abs().nan_to_num(float('inf'))\n"
    "            return 'output %d: max abs difference %g' % (i, diff.max().item())\n"
    "    return None\n"
    "\n";

/* ---- names and literals -------------------------------------------------------- */

static const char *const reserved[] = {
    "False",   "None",     "True",     "and",    "as",      "assert",       "async",  "await",
    "break",   "class",    "continue", "def",    "del",     "elif",         "else",   "except",
    "finally", "for",      "from",     "global", "if",      "import",       "in",     "is",
    "lambda",  "nonlocal", "not",      "or",     "pass",    "raise",        "return", "try",
    "while",   "with",     "yield",    "torch",  "F",       "os",           "re",     "sys",
    "struct",  "zlib",     "fn",       "main",   "compare", "load_tensors", "DTYPES", "float",
    "int",     "len",      "list",     "range",  "slice",   "tuple",        "print",  "any",
    "all",     "sorted",   "max",      "min",    "abs",     "sum",          "id",     "input",
    "type",    "object"};

typedef struct emitter {
    const ptc_graph *g;
    ptc_buf *b;
    char **names; /* python name by value id */
    bool *random; /* value depends on a random op */
    ptc_error *err;
} emitter;

static bool is_reserved(const char *s)
{
    for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
        if (strcmp(s, reserved[i]) == 0)
            return true;
    if (s[0] == '_') /* the prelude's helpers */
        return true;
    if (s[0] != 's' || !s[1]) /* s0, s1, ...: symbols */
        return false;
    for (const char *p = s + 1; *p; p++)
        if (!isdigit((unsigned char)*p))
            return false;
    return true;
}

static char *py_name(const char *name)
{
    size_t n = strlen(name);
    char *out = malloc(n + 4);
    bool ident = isalpha((unsigned char)name[0]) || name[0] == '_';
    size_t k = 0;
    if (!ident)
        out[k++] = 'v';
    for (size_t i = 0; i < n; i++)
        out[k++] = isalnum((unsigned char)name[i]) ? name[i] : '_';
    out[k] = 0;
    if (is_reserved(out)) {
        memmove(out + 2, out, k + 1);
        out[0] = 'v', out[1] = '_';
    }
    return out;
}

static void assign_names(emitter *e)
{
    for (int v = 0; v < e->g->nvalues; v++) {
        char *n = py_name(e->g->values[v]->name);
        for (bool clash = true; clash;) {
            clash = false;
            for (int w = 0; w < v && !clash; w++)
                clash = strcmp(e->names[w], n) == 0;
            if (clash) {
                size_t len = strlen(n);
                n = realloc(n, len + 2);
                n[len] = '_', n[len + 1] = 0;
            }
        }
        e->names[v] = n;
    }
}

static void put_float(ptc_buf *b, double f)
{
    if (isnan(f)) {
        ptc_buf_puts(b, "float('nan')");
        return;
    }
    if (isinf(f)) {
        ptc_buf_puts(b, f < 0 ? "float('-inf')" : "float('inf')");
        return;
    }
    char s[40];
    snprintf(s, sizeof s, "%.17g", f);
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, f);
        if (strtod(s, NULL) == f)
            break;
    }
    ptc_buf_puts(b, s);
    if (!strpbrk(s, ".e"))
        ptc_buf_puts(b, ".0");
}

static const char *torch_dtype(ptc_dtype dt)
{
    static const char *const names[] = {
        "torch.bool",  "torch.uint8",   "torch.int8",     "torch.int16",   "torch.int32",
        "torch.int64", "torch.float16", "torch.bfloat16", "torch.float32", "torch.float64"};
    _Static_assert(sizeof names / sizeof *names == PTC_DTYPE_COUNT, "dtype names out of step");
    return (unsigned)dt < PTC_DTYPE_COUNT ? names[dt] : "None";
}

static void put_arg(emitter *e, const ptc_arg *a)
{
    ptc_buf *b = e->b;
    switch (a->kind) {
    case PTC_ARG_NONE:
        ptc_buf_puts(b, "None");
        break;
    case PTC_ARG_VALUE:
        ptc_buf_puts(b, e->names[a->v->id]);
        break;
    case PTC_ARG_VALUES:
        ptc_buf_putc(b, '[');
        for (int i = 0; i < a->vs.n; i++)
            ptc_buf_printf(b, "%s%s", i ? ", " : "",
                           a->vs.v[i] ? e->names[a->vs.v[i]->id] : "None");
        ptc_buf_putc(b, ']');
        break;
    case PTC_ARG_INT:
        ptc_dim_print(b, a->i);
        break;
    case PTC_ARG_INTS:
        ptc_buf_putc(b, '[');
        for (int i = 0; i < a->is.n; i++) {
            if (i)
                ptc_buf_puts(b, ", ");
            ptc_dim_print(b, a->is.d[i]);
        }
        ptc_buf_putc(b, ']');
        break;
    case PTC_ARG_FLOAT:
        put_float(b, a->f);
        break;
    case PTC_ARG_BOOL:
        ptc_buf_puts(b, a->b ? "True" : "False");
        break;
    case PTC_ARG_STR:
        ptc_buf_put_quoted(b, a->s);
        break;
    case PTC_ARG_DTYPE:
        ptc_buf_puts(b, torch_dtype(a->dt));
        break;
    case PTC_ARG_DEVICE: {
        char dev[32];
        ptc_device_str(a->dev, dev, sizeof dev);
        ptc_buf_printf(b, "'%s'", dev);
        break;
    }
    }
}

/* ---- one node -------------------------------------------------------------------- */

static bool is_tensor_param(int kind)
{
    return kind == PTC_PK_TENSOR || kind == PTC_PK_TENSOR_OPT || kind == PTC_PK_TENSOR_LIST ||
           kind == PTC_PK_TENSOR_OPT_LIST || kind == PTC_PK_TENSOR_SCALAR ||
           kind == PTC_PK_TENSOR_SCALAR_OPT;
}

static bool is_default(const ptc_param *p, const ptc_arg *a)
{
    if (!p->has_default)
        return false;
    if (p->def.kind == PTC_ARG_NONE || a->kind == PTC_ARG_NONE)
        return p->def.kind == a->kind;
    return ptc_arg_eq(&p->def, a);
}

static void put_call_args(emitter *e, const ptc_node *n, int first, style how)
{
    const ptc_schema *s = ptc_op_schema(n->op);
    bool kw = how == KWCALL || how == KWMETHOD, all = how == HELPER, comma = false;
    bool positional[16], prefix = true;
    int last_positional = first - 1;
    for (int i = first; i < s->nparams; i++) {
        const ptc_param *p = &s->params[i];
        /* In the keyword styles only a leading run of tensors is positional:
         * F.layer_norm(x, normalized_shape=..., weight=w). */
        positional[i] = all || (!p->kwarg_only && (!kw || (prefix && is_tensor_param(p->kind))));
        prefix &= positional[i];
        if (positional[i] && strcmp(p->name, "seed") != 0 &&
            (all || kw || !is_default(p, &n->args[i])))
            last_positional = i;
    }
    for (int i = first; i < s->nparams; i++) {
        const ptc_param *p = &s->params[i];
        if (strcmp(p->name, "seed") == 0)
            continue; /* ptc's RNG stream has no torch spelling */
        if (positional[i] && i > last_positional)
            continue;
        if (!positional[i] && is_default(p, &n->args[i]))
            continue;
        ptc_buf_puts(e->b, comma ? ", " : "");
        comma = true;
        if (!positional[i])
            ptc_buf_printf(e->b, "%s=", p->name);
        put_arg(e, &n->args[i]);
    }
}

static bool node_is_random(const ptc_node *n)
{
    if (ptc_op_flags(n->op) & PTC_F_RANDOM || n->op == PTC_OP_EMPTY)
        return n->op != PTC_OP_DROPOUT || ptc_node_arg(n, "p")->f > 0;
    if (n->op == PTC_OP_SDPA)
        return ptc_node_arg(n, "dropout_p")->f > 0;
    return false;
}

static void taint(void *ctx, const ptc_arg *a, bool *out)
{
    emitter *e = ctx;
    if (a->kind == PTC_ARG_VALUE && a->v)
        *out |= e->random[a->v->id];
    else if (a->kind == PTC_ARG_VALUES)
        for (int k = 0; k < a->vs.n; k++)
            if (a->vs.v[k])
                *out |= e->random[a->vs.v[k]->id];
}

/* The pointwise prims not spelled above are torch.<lname> (pointwise.def's
 * PW_PRIM rows: the loop op's name is the torch function's). */
static const pyop pointwise_prims[PTC_OP_COUNT] = {
#define PW_PRIM(id, lop, lname, cost, kind, ref, bools, fold, emit) [PTC_OP_##id] = {"torch." lname, CALL},
#include "ir/pointwise.def"
};

static int emit_node(emitter *e, const ptc_node *n)
{
    const pyop *op = pyops[n->op].fn ? &pyops[n->op] : &pointwise_prims[n->op];
    const ptc_schema *s = ptc_op_schema(n->op);
    if (!op->fn)
        return ptc_errorf(e->err, PTC_ERR_UNSUPPORTED, "minify",
                          "repro.py: no torch spelling for %s", ptc_op_name(n->op));
    bool random = node_is_random(n);
    for (int i = 0; i < n->nargs; i++)
        taint(e, &n->args[i], &random);
    ptc_buf *b = e->b;
    ptc_buf_puts(b, "    ");
    bool unpack = s->nreturns != 1 || n->op == PTC_OP_BATCH_NORM;
    for (int o = 0; o < n->nout; o++) {
        e->random[n->outs[o]->id] = random;
        ptc_buf_printf(b, "%s%s", o ? ", " : "", e->names[n->outs[o]->id]);
    }
    ptc_buf_puts(b, unpack && n->nout == 1 ? ", = " : " = ");
    if (op->how == METHOD || op->how == KWMETHOD) {
        put_arg(e, &n->args[0]);
        ptc_buf_printf(b, ".%s(", op->fn);
        put_call_args(e, n, 1, op->how);
    } else {
        ptc_buf_printf(b, "%s(", op->fn);
        put_call_args(e, n, 0, op->how);
    }
    ptc_buf_puts(b, ")  # ");
    ptc_buf line = {0};
    ptc_print_node(&line, n);
    /* The .ptir line without its source location: it is in the graph file. */
    char *at = strstr(line.data, "  @ ");
    if (at)
        *at = 0;
    ptc_buf_puts(b, line.data);
    ptc_buf_free(&line);
    ptc_buf_putc(b, '\n');
    return 0;
}

/* s0 = x.shape[0] for every symbol a plain input dim names. */
static void emit_symbols(emitter *e)
{
    const char *done[64];
    int ndone = 0;
    for (int i = 0; i < e->g->ninputs; i++) {
        const ptc_value *in = e->g->inputs[i];
        for (int d = 0; d < in->type.ndim; d++) {
            if (ptc_dim_is_static(in->type.shape[d]))
                continue;
            ptc_buf txt = {0};
            ptc_dim_print(&txt, in->type.shape[d]);
            bool plain = true, seen = false;
            for (const char *p = txt.data; *p; p++)
                plain &= isalnum((unsigned char)*p) || *p == '_';
            for (int k = 0; k < ndone && plain; k++)
                seen |= strcmp(done[k], txt.data) == 0;
            if (plain && !seen && ndone < 64) {
                ptc_buf_printf(e->b, "    %s = %s.shape[%d]\n", txt.data, e->names[in->id], d);
                done[ndone++] = strdup(txt.data);
            }
            ptc_buf_free(&txt);
        }
    }
    for (int k = 0; k < ndone; k++)
        free((char *)done[k]);
}

/* The masked message as a Python regex: '#' stands for a number. */
static void put_pattern(ptc_buf *b, const mf_signature *sig)
{
    ptc_buf re = {0};
    if (sig->has_regex) {
        ptc_buf_puts(&re, sig->regex_src);
    } else {
        for (const char *p = sig->pattern; *p; p++) {
            if (strncmp(p, "0x#", 3) == 0) {
                ptc_buf_puts(&re, "0x[0-9a-fA-F]+");
                p += 2;
            } else if (*p == '#') {
                ptc_buf_puts(&re, "[-+0-9.eE]+");
            } else if (strchr("\\.^$*+?()[]{}|", *p)) {
                ptc_buf_putc(&re, '\\');
                ptc_buf_putc(&re, *p);
            } else {
                ptc_buf_putc(&re, *p);
            }
        }
    }
    ptc_buf_put_quoted(b, re.data ? re.data : "");
    ptc_buf_free(&re);
}

static void emit_header(emitter *e, const mf_signature *sig, const mf_result *r,
                        const mf_options *o)
{
    ptc_buf *b = e->b;
    char sigtxt[1400], what[1400];
    mf_signature_format(sig, sigtxt, sizeof sigtxt);
    mf_result_format(r, what, sizeof what);
    const char *inject = ptc_inject_spec();
    ptc_buf_puts(b, "#!/usr/bin/env python3\n\"\"\"ptminify repro: ");
    for (const char *p = sigtxt; *p; p++) /* no closing quotes inside the docstring */
        ptc_buf_putc(b, *p == '"' ? '\'' : *p == '\\' ? '/' : *p);
    ptc_buf_puts(
        b, "\n\nRuns the minimal graph as torch code through ptc.compile and checks for the "
           "failure.\n"
           "Exit status: 1 when it shows, 0 when it does not, 2 when it cannot run.\n"
           "A crash or a hang reproduces as a crash or a hang of this script.\n"
           "  python3 repro.py           reproduce through ptc\n"
           "  python3 repro.py --eager   check this translation: eager torch against "
           "reference.bin\n\"\"\"\n"
           "import os\nimport re\nimport struct\nimport sys\nimport warnings\nimport zlib\n\n");
    if (*inject) {
        ptc_buf_puts(b, "os.environ.setdefault('PTC_INJECT', ");
        ptc_buf_put_quoted(b, inject);
        ptc_buf_puts(b, ")  # the planted bug: set before ptc loads\n");
    }
    ptc_buf_puts(b,
                 "os.environ.setdefault('PTC_STRICT', '1')  # errors raise: no eager fallback\n");
    ptc_buf_puts(b, "\nimport torch\nimport torch.nn.functional as F\n\n");
    ptc_buf_printf(b, "KIND = '%s'\nSTAGE = ", mf_kind_name(sig->kind));
    ptc_buf_put_quoted(b, sig->stage);
    ptc_buf_puts(b, "\nFAILURE = ");
    ptc_buf_put_quoted(b, what);
    ptc_buf_puts(b, "\nPATTERN = ");
    put_pattern(b, sig);
    double rtol = o->check.rtol, atol = o->check.atol;
    ptc_buf_printf(b, "\nRTOL, ATOL = %.17g, %.17g  # < 0: the dtype's default\n", rtol, atol);
    ptc_buf_printf(b, "BACKEND = '%s'\n\n", mf_backend_name(o->backend));
}

static void emit_main(emitter *e)
{
    ptc_buf *b = e->b;
    ptc_buf_puts(b, "INPUTS = [");
    for (int i = 0; i < e->g->ninputs; i++) {
        ptc_buf_puts(b, i ? ", " : "");
        ptc_buf_put_quoted(b, e->g->inputs[i]->name);
    }
    ptc_buf_puts(b, "]\nRANDOM_OUTPUTS = [");
    for (int i = 0, k = 0; i < e->g->noutputs; i++)
        if (e->random[e->g->outputs[i]->id])
            ptc_buf_printf(b, "%s%d", k++ ? ", " : "", i);
    ptc_buf_puts(
        b, "]  # depend on random ops: torch's stream is not ptc's\n\n"
           "def main(argv):\n"
           "    here = os.path.dirname(os.path.abspath(__file__))\n"
           "    tensors = dict(load_tensors(os.path.join(here, 'inputs.bin')))\n"
           "    inputs = [tensors[name] for name in INPUTS]\n"
           "    want = [t for _, t in load_tensors(os.path.join(here, 'reference.bin'))]\n"
           "    if '--eager' in argv:\n"
           "        bad = compare(fn(*inputs), want, RTOL, ATOL, skip=RANDOM_OUTPUTS)\n"
           "        print('eager torch vs reference.bin: %s' % (bad or 'agree'))\n"
           "        return 1 if bad else 0\n"
           "    try:\n"
           "        import ptc\n"
           "    except ImportError as e:\n"
           "        print('repro.py: cannot import ptc (%s); install it (pip install . in ptc\\'s '\n"
           "              'source) or put its build/python on PYTHONPATH' % e)\n"
           "        return 2\n"
           "    compiled = ptc.compile(fn, backend='reference' if BACKEND == 'reference' else "
           "'ptc')\n"
           "    errors = []\n"
           "    with warnings.catch_warnings(record=True) as caught:\n"
           "        warnings.simplefilter('always')\n"
           "        try:\n"
           "            got = compiled(*inputs)\n"
           "        except Exception as e:  # an error from ptc\n"
           "            errors.append('%s: %s' % (type(e).__name__, e))\n"
           "    # a compile that fails is also reported as a warning (ptc then runs it eagerly)\n"
           "    errors += [str(w.message) for w in caught if 'ptc' in str(w.message)]\n"
           "    for text in errors:\n"
           "        if KIND == 'error' and re.search(PATTERN, text):\n"
           "            print('reproduced: %s' % text)\n"
           "            return 1\n"
           "    if errors:\n"
           "        print('did not reproduce: a different error: %s' % errors[0])\n"
           "        return 0\n"
           "    if KIND not in ('accuracy', 'pass'):\n"
           "        print('did not reproduce: ptc ran it to completion (expected: %s)' % FAILURE)\n"
           "        return 0\n"
           "    bad = compare(got, want, RTOL, ATOL)\n"
           "    print('reproduced: %s' % bad if bad else 'did not reproduce: outputs agree')\n"
           "    return 1 if bad else 0\n\n"
           "if __name__ == '__main__':\n"
           "    sys.exit(main(sys.argv[1:]))\n");
}

int mf_emit_python(const ptc_graph *g, const mf_signature *sig, const mf_result *r,
                   const mf_options *o, ptc_buf *b, ptc_error *err)
{
    emitter e = {g, b, calloc((size_t)g->nvalues + 1, sizeof(char *)),
                 calloc((size_t)g->nvalues + 1, sizeof(bool)), err};
    assign_names(&e);
    emit_header(&e, sig, r, o);
    ptc_buf_puts(b, prelude);
    ptc_buf_puts(b, loader);
    ptc_buf_puts(b, "def fn(");
    for (int i = 0; i < g->ninputs; i++)
        ptc_buf_printf(b, "%s%s", i ? ", " : "", e.names[g->inputs[i]->id]);
    ptc_buf_puts(b, "):\n");
    emit_symbols(&e);
    int rc = 0;
    for (int i = 0; i < g->nnodes && rc == 0; i++)
        rc = emit_node(&e, g->nodes[i]);
    if (rc == 0) {
        ptc_buf_puts(b, "    return (");
        for (int i = 0; i < g->noutputs; i++)
            ptc_buf_printf(b, "%s%s", e.names[g->outputs[i]->id],
                           g->noutputs == 1      ? ","
                           : i + 1 < g->noutputs ? ", "
                                                 : "");
        ptc_buf_puts(b, ")\n\n");
        emit_main(&e);
    }
    for (int v = 0; v < g->nvalues; v++)
        free(e.names[v]);
    free(e.names);
    free(e.random);
    return rc;
}
