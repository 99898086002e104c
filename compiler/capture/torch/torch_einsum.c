/* torch.einsum as permutes, reshapes, sums and one bmm per pair of operands.
 *
 * Two operands contract as Inductor's decomposition does: letters shared by
 * both and the output are batch dims, shared letters absent from the output
 * are contracted, the rest are kept from one side; each side is permuted to
 * [batch, kept, contracted] and flattened to three dims for bmm, and the result
 * is unflattened and permuted to the output's order. More operands fold left.
 * Ellipses and repeated letters in one operand (diagonals) run for real.
 */
#include "capture/torch/torch.h"

#include <string.h>

/* Appends one character to a NUL-terminated buffer of `size` bytes. */
static void put(char *buf, size_t size, char ch)
{
    size_t n = strlen(buf);
    if (n + 1 < size) {
        buf[n] = ch;
        buf[n + 1] = 0;
    }
}

typedef struct term {
    ptc_value *v;
    char letters[PTC_MAX_DIMS + 1];
} term;

static int64_t size_of(const term *t, char l)
{
    const char *p = strchr(t->letters, l);
    return p ? t->v->type.shape[p - t->letters].value : 1;
}

/* Sums away letters of t not in `keep`. */
static bool reduce_to(cap_trace *T, term *t, const char *keep)
{
    int64_t dims[PTC_MAX_DIMS];
    int n = 0;
    char rest[PTC_MAX_DIMS + 1];
    int r = 0;
    for (int i = 0; t->letters[i]; i++) {
        if (!strchr(keep, t->letters[i]))
            dims[n++] = i;
        else
            rest[r++] = t->letters[i];
    }
    rest[r] = 0;
    if (!n)
        return true;
    ptc_arg a[3] = {ptc_arg_value(t->v), ptc_arg_ints(T->arena, dims, n), ptc_arg_bool(false)};
    t->v = cap_build1(T, PTC_OP_SUM, a, 3);
    strcpy(t->letters, rest);
    return t->v != NULL;
}

static bool permute_to(cap_trace *T, term *t, const char *order)
{
    int64_t perm[PTC_MAX_DIMS];
    int n = (int)strlen(order);
    bool identity = true;
    for (int i = 0; i < n; i++) {
        perm[i] = strchr(t->letters, order[i]) - t->letters;
        identity = identity && perm[i] == i;
    }
    if (!identity) {
        ptc_arg a[2] = {ptc_arg_value(t->v), ptc_arg_ints(T->arena, perm, n)};
        t->v = cap_build1(T, PTC_OP_PERMUTE, a, 2);
    }
    strcpy(t->letters, order);
    return t->v != NULL;
}

static bool reshape(cap_trace *T, ptc_value **v, const int64_t *shape, int n)
{
    ptc_arg a[2] = {ptc_arg_value(*v), ptc_arg_ints(T->arena, shape, n)};
    *v = cap_build1(T, PTC_OP_RESHAPE, a, 2);
    return *v != NULL;
}

/* a (x) b keeping the letters in `out` (in that order). */
static bool contract(cap_trace *T, term *a, term *b, const char *out, term *res)
{
    char batch[9] = "", ka[9] = "", kb[9] = "", con[9] = "";
    char keep_a[17], keep_b[17];
    snprintf(keep_a, sizeof keep_a, "%s%s", b->letters, out);
    snprintf(keep_b, sizeof keep_b, "%s%s", a->letters, out);
    if (!reduce_to(T, a, keep_a) || !reduce_to(T, b, keep_b))
        return false;
    for (int i = 0; a->letters[i]; i++) {
        char l = a->letters[i];
        char s[2] = {l, 0};
        bool in_b = strchr(b->letters, l), in_o = strchr(out, l);
        char *dst = in_b ? (in_o ? batch : con) : ka;
        put(dst, 9, s[0]);
    }
    for (int i = 0; b->letters[i]; i++)
        if (!strchr(a->letters, b->letters[i]))
            put(kb, sizeof kb, b->letters[i]);
    int64_t B = 1, M = 1, N = 1, K = 1;
    for (int i = 0; batch[i]; i++)
        B *= size_of(a, batch[i]);
    for (int i = 0; ka[i]; i++)
        M *= size_of(a, ka[i]);
    for (int i = 0; kb[i]; i++)
        N *= size_of(b, kb[i]);
    for (int i = 0; con[i]; i++)
        K *= size_of(a, con[i]);
    char oa[17], ob[17], orr[25];
    snprintf(oa, sizeof oa, "%s%s%s", batch, ka, con);
    snprintf(ob, sizeof ob, "%s%s%s", batch, con, kb);
    snprintf(orr, sizeof orr, "%s%s%s", batch, ka, kb);
    int64_t shape[PTC_MAX_DIMS];
    int n = 0;
    for (int i = 0; orr[i]; i++)
        shape[n++] = strchr(ka, orr[i]) || strchr(batch, orr[i]) ? size_of(a, orr[i]) : size_of(b, orr[i]);
    if (n > PTC_MAX_DIMS || !permute_to(T, a, oa) || !permute_to(T, b, ob) ||
        !reshape(T, &a->v, (int64_t[]){B, M, K}, 3) || !reshape(T, &b->v, (int64_t[]){B, K, N}, 3))
        return false;
    ptc_arg mm[2] = {ptc_arg_value(a->v), ptc_arg_value(b->v)};
    res->v = cap_build1(T, PTC_OP_BMM, mm, 2);
    if (!res->v || !reshape(T, &res->v, shape, n))
        return false;
    strcpy(res->letters, orr);
    return true;
}

static int einsum(cap_tcall *c, PyObject *const *ops, int nops, PyObject **out);

int cap_th_einsum(cap_tcall *c, PyObject **out)
{
    PyObject *const *ops = c->pos + 1;
    int nops = c->npos - 1;
    if (nops == 1 && (PyList_Check(ops[0]) || PyTuple_Check(ops[0]))) {
        /* einsum(eq, [a, b]) */
        PyObject *seq = PySequence_Tuple(ops[0]);
        if (!seq)
            return CAP_ERR;
        PyObject *items[8];
        int n = (int)PyTuple_Size(seq);
        if (n > 8) {
            Py_DECREF(seq);
            return cap_t_break(c->T, CAP_B_UNSUPPORTED_TORCH, "einsum with more than 8 operands");
        }
        for (int i = 0; i < n; i++)
            items[i] = PyTuple_GetItem(seq, i);
        int rc = einsum(c, items, n, out);
        Py_DECREF(seq);
        return rc;
    }
    return einsum(c, ops, nops, out);
}

static int einsum(cap_tcall *c, PyObject *const *ops, int nops, PyObject **out)
{
    cap_trace *T = c->T;
    PyObject *eq = c->npos > 0 ? c->pos[0] : NULL;
    if (!eq || !PyUnicode_Check(eq))
        return cap_t_break(T, CAP_B_TRACE_ERROR, "einsum needs an equation");
    const char *s = PyUnicode_AsUTF8(eq);
    char lhs[128], rhs[16] = "";
    const char *arrow = strstr(s, "->");
    int k = 0;
    for (const char *p = s; *p && (!arrow || p < arrow) && k < 127; p++)
        if (*p != ' ')
            lhs[k++] = *p;
    lhs[k] = 0;
    if (strstr(s, "..."))
        return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "einsum with an ellipsis");
    term terms[8];
    int nt = 0;
    for (char *tok = lhs; nt < 8;) {
        char *comma = strchr(tok, ',');
        size_t len = comma ? (size_t)(comma - tok) : strlen(tok);
        if (len > PTC_MAX_DIMS || nt >= nops)
            return cap_t_break(T, CAP_B_TRACE_ERROR, "einsum: equation and operands disagree");
        if (!cap_is_tensor(ops[nt]))
            return cap_t_break(T, CAP_B_TRACE_ERROR, "einsum operands must be tensors");
        memcpy(terms[nt].letters, tok, len);
        terms[nt].letters[len] = 0;
        terms[nt].v = cap_val(ops[nt]);
        if ((int)len != terms[nt].v->type.ndim)
            return cap_t_break(T, CAP_B_TRACE_ERROR, "einsum: operand %d has %d dims, equation says %zu",
                               nt, terms[nt].v->type.ndim, len);
        for (size_t i = 0; i < len; i++)
            if (memchr(tok + i + 1, tok[i], len - i - 1))
                return cap_t_break(T, CAP_B_UNSUPPORTED_TORCH, "einsum with a repeated index");
        nt++;
        if (!comma)
            break;
        tok = comma + 1;
    }
    if (nt != nops)
        return cap_t_break(T, CAP_B_TRACE_ERROR, "einsum: equation and operands disagree");
    if (arrow) {
        k = 0;
        for (const char *p = arrow + 2; *p && k < 15; p++)
            if (*p != ' ')
                rhs[k++] = *p;
        rhs[k] = 0;
    } else {
        /* Implicit output: letters appearing once, in alphabetical order. */
        k = 0;
        for (char l = 'A'; l <= 'z'; l++) {
            int count = 0;
            for (int i = 0; i < nt; i++)
                count += strchr(terms[i].letters, l) && l ? 1 : 0;
            if (count == 1 && k < 15)
                rhs[k++] = l;
        }
        rhs[k] = 0;
    }
    term acc = terms[0];
    for (int i = 1; i < nt; i++) {
        /* Keep letters still needed by later operands or the output. */
        char need[64] = "";
        strncat(need, rhs, sizeof need - 1);
        for (int j = i + 1; j < nt; j++)
            strncat(need, terms[j].letters, sizeof need - strlen(need) - 1);
        char out_letters[17] = "";
        char both[17];
        snprintf(both, sizeof both, "%s", acc.letters);
        for (int q = 0; terms[i].letters[q]; q++)
            if (!strchr(both, terms[i].letters[q]))
                put(both, sizeof both, terms[i].letters[q]);
        for (int q = 0; both[q]; q++)
            if (strchr(need, both[q]))
                put(out_letters, sizeof out_letters, both[q]);
        term r;
        if (!contract(T, &acc, &terms[i], out_letters, &r))
            return CAP_BREAK;
        acc = r;
    }
    if (!reduce_to(T, &acc, rhs) || !permute_to(T, &acc, rhs))
        return CAP_BREAK;
    *out = cap_tensor_new(T, acc.v);
    return *out ? CAP_NEXT : CAP_ERR;
}
