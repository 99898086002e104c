/* Aligned matmul operands: padded rows for the matrices of mm and bmm.
 *
 * cuBLAS chooses its kernel by the alignment of each matrix's leading
 * dimension: GPT-2's bf16 logits, 50257 elements (100514 bytes) a row, get
 * the align1 cutlass kernels, which took 1.1-1.7 ms each on an H200 where
 * Inductor's aligned nvjet kernels took 0.2 ms. As Inductor's pad_mm and its
 * padded strides do, this pass gives every matrix an mm, addmm or bmm reads
 * or writes a leading dimension of a multiple of 16 bytes:
 *
 * - a temporary (a kernel's result, or a matmul's, which then writes it
 *   with out=) is stored with padded rows: its last dim keeps stride 1, the
 *   others step whole rows of P elements, N rounded up. Kernels address it
 *   through its strides and externs read it through views remapped to
 *   them, so the padding costs only its memory;
 * - a graph input (a weight, a gradient another graph made) and a graph
 *   output keep the user's layout: a matmul reading one reads a padded copy
 *   written by a kernel just before it, a matmul writing one writes a
 *   padded temporary copied into it just after. A copy is made only where
 *   it pays: the matmul does at least 2^29 flops (a copy's launch is worth
 *   ~5 us) and at least 256 flops per element copied (a copy moves 4 bytes
 *   an element; the slow kernels lose ~9 us per GFLOP).
 *
 * A buffer's rows are padded only where each view of it remaps (a view
 * whose rows straddle the padding, such as a flat reshape, keeps it
 * contiguous) and sizes are static.
 */
#include "lower/lower_int.h"

#include <string.h>

enum { ROW_ALIGN_BYTES = 16 };

#define COPY_MIN_FLOPS (1LL << 29)
#define COPY_MIN_FLOPS_PER_ELEM 256

/* mm, bmm, and addmm (an mm and its bias add, lower.c): the extern's
 * inputs are (bias,) a, b. */
static bool is_matmul(const ptc_lnode *n)
{
    return n && n->kind == PTC_LN_EXTERN && n->xkind == PTC_XK_HOST && n->xnode &&
           (n->xnode->op == PTC_OP_MM || n->xnode->op == PTC_OP_BMM ||
            n->xnode->op == PTC_OP_ADDMM);
}

static bool static_view(const ptc_lview *v)
{
    if (!ptc_dim_is_static(v->offset))
        return false;
    for (int d = 0; d < v->ndim; d++)
        if (!ptc_dim_is_static(v->sizes[d]) || !ptc_dim_is_static(v->strides[d]))
            return false;
    return true;
}

/* The leading dimension (elements) of the matrix in view v's last two dims:
 * the stride of the one that is not unit-stride; 0 when neither is (torch
 * copies such an operand anyway) or the matrix is one row or column. */
static int64_t leading_dim(const ptc_lview *v)
{
    if (v->ndim < 2 || !static_view(v))
        return 0;
    int r = v->ndim - 2, c = v->ndim - 1;
    if (v->sizes[r].value <= 1 || v->sizes[c].value <= 1)
        return 0;
    if (v->strides[c].value == 1)
        return v->strides[r].value;
    if (v->strides[r].value == 1)
        return v->strides[c].value;
    return 0;
}

static int64_t row_align(const ptc_lbuf *b)
{
    return ROW_ALIGN_BYTES / (int64_t)ptc_dtype_size(b->dtype);
}

/* Buffer b's whole memory as a view (its shape and strides). */
static ptc_lview whole(const ptc_lbuf *b)
{
    ptc_lview v = {.buf = b->id, .ndim = b->ndim, .offset = ptc_dim_c(0)};
    for (int d = 0; d < b->ndim; d++) {
        v.sizes[d] = b->shape[d];
        v.strides[d] = b->strides[d];
    }
    return v;
}

/* The row length N of buffer b when its rows are worth padding: b is
 * contiguous with static sizes, N * its element size is no multiple of 16
 * bytes, and ld (a matmul's leading dim over it) steps whole rows; else 0. */
static int64_t paddable_rows(const ptc_lbuf *b, int64_t ld)
{
    if (b->ndim < 2 || b->permuted || b->padded || ROW_ALIGN_BYTES % ptc_dtype_size(b->dtype))
        return 0;
    int64_t s = 1;
    for (int d = b->ndim - 1; d >= 0; d--) {
        if (!ptc_dim_is_static(b->shape[d]) || !ptc_dim_is_static(b->strides[d]) ||
            b->strides[d].value != s)
            return 0;
        s *= b->shape[d].value;
    }
    int64_t n = b->shape[b->ndim - 1].value;
    if (n <= 1 || n % row_align(b) == 0 || ld % n != 0)
        return 0;
    return n;
}

/* View v of a contiguous buffer of rows of n elements rewritten for rows
 * of p elements: dims stepping whole rows step padded ones, the others stay
 * inside a row. False (v unchanged) when some element's row and column
 * cannot be told apart that way. */
static bool remap_rows(ptc_lview *v, int64_t n, int64_t p, bool apply)
{
    if (!static_view(v))
        return false;
    int64_t off = v->offset.value, within = off % n;
    for (int d = 0; d < v->ndim; d++)
        if (v->sizes[d].value > 1 && v->strides[d].value % n != 0)
            within += v->strides[d].value * (v->sizes[d].value - 1);
    if (within >= n)
        return false;
    for (int d = 0; apply && d < v->ndim; d++)
        if (v->strides[d].value % n == 0)
            v->strides[d] = ptc_dim_c(v->strides[d].value / n * p);
    if (apply)
        v->offset = ptc_dim_c(off / n * p + off % n);
    return true;
}

static int64_t round_up(int64_t n, int64_t al)
{
    return (n + al - 1) / al * al;
}

static int64_t padded_length(const ptc_lbuf *b, int64_t n)
{
    return round_up(n, row_align(b));
}

/* Buffer b stores rows of p elements. */
static void store_padded(ptc_lbuf *b, int64_t n, int64_t p)
{
    for (int d = 0; d < b->ndim - 1; d++)
        b->strides[d] = ptc_dim_c(b->strides[d].value / n * p);
    b->padded = true;
}

/* Temporary b, read by matmul views of leading dim ld, gets padded rows
 * where its writer addresses it through strides (a kernel, or a matmul
 * writing with out=) and every extern reading it remaps. */
static bool pad_temp(ptc_lprog *p, ptc_lbuf *b, int64_t ld)
{
    int64_t n = paddable_rows(b, ld);
    const ptc_lnode *w = b->def >= 0 ? p->nodes[b->def] : NULL;
    if (!n || b->kind != PTC_LB_TEMP || b->removed || !w ||
        (w->kind == PTC_LN_EXTERN && !is_matmul(w)))
        return false;
    for (int pass = 0; pass < 2; pass++)
        for (int r = 0; r < p->nnodes; r++) {
            ptc_lnode *x = p->nodes[r];
            for (int i = 0; x && x->kind == PTC_LN_EXTERN && i < x->nxin; i++)
                if (x->xin[i].buf == b->id &&
                    (x->xkind != PTC_XK_HOST ||
                     !remap_rows(&x->xin[i], n, padded_length(b, n), pass == 1)))
                    return false;
        }
    store_padded(b, n, padded_length(b, n));
    return true;
}

/* ---- graph inputs and outputs: padded copies ------------------------------------ */

static double view_numel(const ptc_lview *v)
{
    double e = 1;
    for (int d = 0; d < v->ndim; d++)
        e *= (double)v->sizes[d].value;
    return e;
}

/* Matmul m's flops: 2 * batch * M * N * K from its operands' views. */
static double matmul_flops(const ptc_lnode *m)
{
    const ptc_lview *a = &m->xin[m->nxin - 2], *b = &m->xin[m->nxin - 1];
    if (!static_view(a) || !static_view(b))
        return 0;
    return 2 * view_numel(a) * (double)b->sizes[b->ndim - 1].value;
}

/* Does a copy of `copied` elements for matmul m pay (the rule above)? */
static bool copy_pays(const ptc_lnode *m, double copied)
{
    double flops = matmul_flops(m);
    return flops >= (double)COPY_MIN_FLOPS && flops >= COPY_MIN_FLOPS_PER_ELEM * copied;
}

/* A new temporary of b's dtype and shape, stored with rows of p. */
static ptc_lbuf *padded_twin(ptc_lprog *p, const ptc_lbuf *b, int64_t n)
{
    ptc_lbuf *t = ptc_lprog_add_buf(p, b->dtype, b->ndim, b->shape, PTC_LB_TEMP);
    store_padded(t, n, padded_length(b, n));
    return t;
}

/* A new temporary holding b zero-padded along dim d to ext elements (the
 * copy writing it fills the rest with zeros: ptc_lprog_insert_copy). */
static ptc_lbuf *zero_padded_twin(ptc_lprog *p, const ptc_lbuf *b, int d, int64_t ext)
{
    ptc_dim shape[PTC_MAX_DIMS];
    for (int i = 0; i < b->ndim; i++)
        shape[i] = i == d ? ptc_dim_c(ext) : b->shape[i];
    ptc_lbuf *t = ptc_lprog_add_buf(p, b->dtype, b->ndim, shape, PTC_LB_TEMP);
    t->zero_dim = d;
    t->zero_from = b->shape[d].value;
    return t;
}

/* View v of b reads padded twin t instead, where it is misaligned and
 * remaps; true when it does. */
static bool read_twin(ptc_lview *v, const ptc_lbuf *b, const ptc_lbuf *t, int64_t n)
{
    int64_t ld = leading_dim(v);
    if (v->buf != b->id || ld == 0 || ld % row_align(b) == 0 || ld % n != 0 ||
        !remap_rows(v, n, padded_length(b, n), true))
        return false;
    v->buf = t->id;
    return true;
}

/* Matmul m's operand k reads graph input or output b through a misaligned
 * view of leading dim ld: where the copy pays, m reads a padded copy of b
 * written just before it, and so do the later matmuls reading b as
 * misaligned (GPT-2's logits gradient feeds two). Returns the number of
 * views that read the copy. */
static int copy_operand(ptc_lprog *p, ptc_lnode *m, int k, int64_t ld)
{
    ptc_lbuf *b = p->bufs[m->xin[k].buf];
    int64_t n = paddable_rows(b, ld);
    ptc_lview v = whole(b), probe = m->xin[k];
    if (!n || !remap_rows(&probe, n, padded_length(b, n), false) || !copy_pays(m, view_numel(&v)))
        return 0;
    ptc_lbuf *t = zero_padded_twin(p, b, b->ndim - 1, padded_length(b, n));
    int at = m->id, moved = 0;
    for (int r = at; r < p->nnodes; r++)
        for (int j = 0; is_matmul(p->nodes[r]) && j < p->nodes[r]->nxin; j++)
            moved += read_twin(&p->nodes[r]->xin[j], b, t, n);
    ptc_lprog_insert_copy(p, at, b->id, t->id, m, "pad_rows");
    return moved;
}

/* Matmul m writes graph output b, misaligned: where the copy pays, m writes
 * a padded temporary that a kernel just after it copies into b. */
static int copy_result(ptc_lprog *p, ptc_lnode *m)
{
    ptc_lbuf *b = p->bufs[m->out[0]];
    ptc_lview v = whole(b);
    int64_t n = paddable_rows(b, leading_dim(&v));
    if (!n || !copy_pays(m, view_numel(&v)))
        return 0;
    ptc_lbuf *t = padded_twin(p, b, n);
    t->def = m->id;
    m->out[0] = t->id;
    ptc_lprog_insert_copy(p, m->id + 1, t->id, b->id, m, "unpad_rows");
    return 1;
}

/* ---- aligned extents ------------------------------------------------------------ */

/* An aligned leading dim is not enough: cuBLAS's aligned kernels (CUTLASS's
 * can_implement) also need the extent of each operand's unit-stride dim to
 * be a multiple of the alignment. The backward of GPT-2's LM head reads the
 * logits' gradient g (2048 x 50257, rows padded to 50264) as grad_h = g @ W,
 * unit-stride along K = 50257, and grad_W = g^T @ h, unit-stride along
 * M = 50257: both ran align1 kernels (1.7 and 1.2 ms on an H200). As
 * Inductor's pad_mm does, the matmul is run over aligned extents instead:
 * - K: both operands read K rounded up, zeros past K in both (a
 *   zero-padded copy: the graph input's copy above, or a copy of the other
 *   operand with zero rows added; or a temporary's padded rows, whose
 *   writer is made to write zeros into the padding);
 * - M: A reads M rounded up (the padding of its rows) and the result, a
 *   temporary, gets the extra rows, which nothing reads;
 * - N: the result, a temporary stored with padded rows, is unit-stride
 *   along N: the forward's logits = h @ W^T (W the tied embedding, 50257
 *   rows) ran the last align1 kernel (1.7 ms on an H200). The result gets
 *   the extra columns in its rows' padding, which nothing reads (its
 *   readers run over N), and B reads N rounded up: memory of its own
 *   buffer, or rows its writer kernel is made to write, or a copy with
 *   rows added. An extra column of the result depends only on the same
 *   column of B, so what B holds there does not matter; written rows are
 *   zeros all the same. */

/* Elements buffer b's memory holds; 0 where unknown. */
static int64_t buf_elems(const ptc_lbuf *b)
{
    if (b->ndim < 1 || b->permuted || !ptc_dim_is_static(b->shape[0]) ||
        !ptc_dim_is_static(b->strides[0]))
        return 0;
    return b->shape[0].value * b->strides[0].value;
}

/* Does view v, its dim d grown to ext, stay inside its buffer's memory and,
 * where d is unit-stride, inside the rows its other dim steps? */
static bool fits(const ptc_lprog *p, const ptc_lview *v, int d, int64_t ext)
{
    int64_t end = v->offset.value + 1;
    for (int i = 0; i < v->ndim; i++) {
        int64_t size = i == d ? ext : v->sizes[i].value;
        end += (size - 1) * v->strides[i].value;
        if (i != d && v->strides[d].value == 1 && size > 1 && v->strides[i].value < ext)
            return false;
    }
    return end <= buf_elems(p->bufs[v->buf]);
}

/* Would view v read zeros past the end of its dim d, up to ext, were its
 * buffer's elements from zero_from on along dim zero_dim zeros? */
static bool reads_zeros_from(const ptc_lprog *p, const ptc_lview *v, int d, int64_t ext,
                             int zero_dim, int64_t zero_from)
{
    const ptc_lbuf *b = p->bufs[v->buf];
    if (v->strides[d].value != b->strides[zero_dim].value)
        return false;
    int64_t step = b->strides[zero_dim].value, len = b->shape[zero_dim].value;
    int64_t start = v->offset.value / step % len;
    return start + v->sizes[d].value == zero_from && fits(p, v, d, ext);
}

/* Are the elements view v reads past the end of its dim d, up to ext, zeros
 * (of a zero-padded copy, or padding its writer fills with zeros)? */
static bool zeros_past(const ptc_lprog *p, const ptc_lview *v, int d, int64_t ext)
{
    const ptc_lbuf *b = p->bufs[v->buf];
    return b->zero_from && reads_zeros_from(p, v, d, ext, b->zero_dim, b->zero_from);
}

/* The pointwise kernel writing temporary b where it can also write zeros
 * past b's shape: it runs over b's shape, writes nothing else, and checks
 * nothing (a check must not see the padding). */
static ptc_lnode *zeroing_writer(const ptc_lprog *p, const ptc_lbuf *b)
{
    ptc_lnode *w = b->def >= 0 ? p->nodes[b->def] : NULL;
    if (b->kind != PTC_LB_TEMP || b->permuted || b->removed || b->zero_from || !w ||
        w->kind != PTC_LN_POINTWISE || w->out[1] >= 0 || w->ndim != b->ndim)
        return NULL;
    for (int d = 0; d < b->ndim; d++)
        if (!ptc_dim_is_static(w->ranges[d]) || w->ranges[d].value != b->shape[d].value)
            return NULL;
    for (int i = 0; i < w->body.n; i++)
        if (w->body.e[i].op == PTC_L_CHECK)
            return NULL;
    return w;
}

/* Writer w of temporary b writes zeros past b's dim d, up to ext. */
static void write_zeros_past(ptc_lprog *p, ptc_lnode *w, ptc_lbuf *b, int d, int64_t ext)
{
    ptc_dim grown[PTC_MAX_DIMS];
    memcpy(grown, w->ranges, sizeof grown);
    grown[d] = ptc_dim_c(ext);
    ptc_lnode_zero_past(p, w, grown);
    b->zero_dim = d;
    b->zero_from = b->shape[d].value;
}

/* View v reads zeros past the end of its dim d, up to ext: they are there
 * already, or v reads the rows of a padded temporary to their end and the
 * kernel writing it is made to write zeros into the padding too. The arena
 * reuses memory, so the zeros must be written on every call: the kernel
 * that writes the rows does, for the 7 columns' cost of a select, with no
 * launch of its own (a kernel zeroing only the padding would cost one). */
static bool zeros_written_past(ptc_lprog *p, const ptc_lview *v, int d, int64_t ext, bool apply)
{
    if (zeros_past(p, v, d, ext))
        return true;
    ptc_lbuf *b = p->bufs[v->buf];
    ptc_lnode *w = b->padded ? zeroing_writer(p, b) : NULL;
    int last = b->ndim - 1;
    int64_t n = b->shape[last].value, padded_n = b->strides[last - 1].value;
    if (!w || ext > padded_n || !reads_zeros_from(p, v, d, ext, last, n))
        return false;
    if (apply)
        write_zeros_past(p, w, b, last, padded_n);
    return true;
}

/* View v reads its dim d up to ext from rows added to its buffer: v's dim
 * d walks all the rows of a temporary whose writer kernel is made to write
 * ext rows, zeros past the old ones. */
static bool rows_written_past(ptc_lprog *p, const ptc_lview *v, int d, int64_t ext)
{
    ptc_lbuf *b = p->bufs[v->buf];
    ptc_lnode *w = b->padded ? NULL : zeroing_writer(p, b);
    if (!w || b->ndim < 2 || v->offset.value >= b->strides[0].value ||
        v->strides[d].value != b->strides[0].value || v->sizes[d].value != b->shape[0].value)
        return false;
    write_zeros_past(p, w, b, 0, ext);
    b->shape[0] = ptc_dim_c(ext);
    return true;
}

static bool same_dim(const ptc_lview *v, int i, const ptc_lview *w, int k)
{
    return v->sizes[i].value == w->sizes[k].value && v->strides[i].value == w->strides[k].value;
}

/* mm m's B read from a copy of its buffer, a matrix, with zero rows up to
 * ext, where that pays and B is that matrix or its transpose, B's dim j
 * walking the rows. */
static bool zero_rows_copy(ptc_lprog *p, ptc_lnode *m, int j, int64_t ext)
{
    ptc_lview *v = &m->xin[m->nxin - 1];
    const ptc_lbuf *b = p->bufs[v->buf];
    ptc_lview w = whole(b);
    if (b->ndim != 2 || b->permuted || b->padded || !static_view(&w) || v->offset.value != 0 ||
        !same_dim(v, j, &w, 0) || !same_dim(v, 1 - j, &w, 1) || !copy_pays(m, view_numel(&w)))
        return false;
    ptc_lbuf *t = zero_padded_twin(p, b, 0, ext);
    ptc_lprog_insert_copy(p, m->id, b->id, t->id, m, "pad_zero_rows");
    v->buf = t->id;
    return true;
}

/* Runs mm m over K rounded up to ext: A must read zeros past K (a
 * zero-padded copy, or padding its writer fills), and B zeros too, the same
 * ways or from a new copy with zero rows (rows past K of other memory could
 * hold NaNs, and 0 * NaN is NaN). True when it does. */
static bool align_k(ptc_lprog *p, ptc_lnode *m, int64_t ext)
{
    ptc_lview *a = &m->xin[m->nxin - 2], *b = &m->xin[m->nxin - 1];
    if (!zeros_written_past(p, a, 1, ext, false) ||
        (!zeros_written_past(p, b, 0, ext, true) && !zero_rows_copy(p, m, 0, ext)))
        return false;
    zeros_written_past(p, a, 1, ext, true);
    a->sizes[1] = b->sizes[0] = ptc_dim_c(ext);
    return true;
}

/* Runs mm m over M rounded up, its result a temporary with the extra rows. */
static bool align_m(ptc_lprog *p, ptc_lnode *m, int64_t ext)
{
    ptc_lview *a = &m->xin[m->nxin - 2];
    ptc_lbuf *out = p->bufs[m->out[0]];
    ptc_lview o = whole(out);
    if (out->kind != PTC_LB_TEMP || out->ndim != 2 || out->permuted || out->padded ||
        !static_view(&o) || !fits(p, a, 0, ext))
        return false;
    a->sizes[0] = out->shape[0] = ptc_dim_c(ext);
    return true;
}

/* Runs mm m over N rounded up to ext: its result, a temporary, has the
 * columns in its rows' padding, and B reads them from its own memory, rows
 * its writer adds, or a copy with rows added. */
static bool align_n(ptc_lprog *p, ptc_lnode *m, int64_t ext)
{
    ptc_lview *b = &m->xin[m->nxin - 1];
    ptc_lbuf *out = p->bufs[m->out[0]];
    if (out->kind != PTC_LB_TEMP || out->ndim != 2 || !out->padded || out->strides[0].value < ext)
        return false;
    if (!fits(p, b, 1, ext) && !rows_written_past(p, b, 1, ext) && !zero_rows_copy(p, m, 1, ext))
        return false;
    b->sizes[1] = out->shape[1] = ptc_dim_c(ext);
    return true;
}

/* mm m's extents made aligned where an operand is unit-stride along them;
 * returns the number grown. */
static int align_extents(ptc_lprog *p, ptc_lnode *m)
{
    ptc_lview *a = &m->xin[m->nxin - 2], *b = &m->xin[m->nxin - 1];
    if (m->xnode->op != PTC_OP_MM || !static_view(a) || !static_view(b))
        return 0;
    int64_t al = row_align(p->bufs[a->buf]);
    int64_t M = a->sizes[0].value, K = a->sizes[1].value, N = b->sizes[1].value;
    int n = 0;
    if (K % al && K > 1 && (a->strides[1].value == 1 || b->strides[0].value == 1))
        n += align_k(p, m, round_up(K, al));
    if (M % al && M > 1 && a->strides[0].value == 1)
        n += align_m(p, m, round_up(M, al));
    if (N % al && N > 1) /* the result is unit-stride along N */
        n += align_n(p, m, round_up(N, al));
    return n;
}

/* ---- the pass ------------------------------------------------------------------- */

/* PTC_PAD_MM=1 pads on every target, 0 on none; unset, the target's default
 * (on for CUDA). */
static bool pad_on(bool on)
{
    static int warned;
    return ptc_env_switch("PTC_PAD_MM", on, &warned, "matmul operands are padded as by default");
}

enum { RESULT = -1 }; /* align_matrix's k for a matmul's result */

/* Aligns the matrix of matmul m's input k, or of its result (an addmm's
 * bias, one row, has no leading dim to align). */
static int align_matrix(ptc_lprog *p, ptc_lnode *m, int k)
{
    bool result = k == RESULT;
    int buf = result ? m->out[0] : m->xin[k].buf;
    if (buf < 0)
        return 0;
    ptc_lbuf *b = p->bufs[buf];
    ptc_lview whole_b = whole(b);
    int64_t ld = leading_dim(result ? &whole_b : &m->xin[k]);
    if (ld == 0 || ld % row_align(b) == 0)
        return 0;
    if (b->kind == PTC_LB_TEMP)
        return pad_temp(p, b, ld);
    if (result)
        return b->kind == PTC_LB_OUTPUT ? copy_result(p, m) : 0;
    return copy_operand(p, m, k, ld);
}

int ptc_pad_plan(ptc_lprog *p, bool on)
{
    if (!pad_on(on))
        return 0;
    int n = 0;
    for (int i = 0; i < p->nnodes; i++) {
        ptc_lnode *m = p->nodes[i];
        if (!is_matmul(m) || m->out[1] >= 0)
            continue;
        for (int k = RESULT; k < m->nxin; k++) {
            int before = m->id;
            n += align_matrix(p, m, k);
            i += m->id - before; /* a copy inserted before m moved it on */
        }
    }
    for (int i = 0; i < p->nnodes; i++) {
        ptc_lnode *m = p->nodes[i];
        if (!is_matmul(m) || m->out[1] >= 0)
            continue;
        int before = m->id;
        n += align_extents(p, m);
        i += m->id - before;
    }
    return n;
}
