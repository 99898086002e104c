/* Index expressions: affine sums over loop variables with floor divisions and
 * modulos, simplified as they are built.
 *
 * Every constructor returns a normal form: equal atoms merged, zero terms
 * dropped, variables sorted by number, and c*d*(x//d) + c*(x%d) folded back to
 * c*x (the pair a reshape of a reshape leaves behind). Division splits its
 * operand into the part the divisor divides exactly and a remainder; when the
 * remainder's range, known from the atoms' extents, lies in [0, d) it divides
 * to zero. That one rule is what turns a view of a view into plain strides,
 * for symbolic sizes as well as constant ones. Coefficient signs come from
 * ptc_dim_nonneg; when a sign is unknown the division is simply kept.
 */
#include "lower/lower.h"

#include <string.h>

static const ptc_dim zero = {0, NULL};

static bool dim_is(ptc_dim d, int64_t v) { return !d.sym && d.value == v; }

static bool atom_eq(const ptc_ixatom *x, const ptc_ixatom *y)
{
    if (x == y)
        return true;
    if (x->kind != y->kind)
        return false;
    if (x->kind == PTC_IXA_VAR || x->kind == PTC_IXA_VAL)
        return x->id == y->id;
    return ptc_dim_eq(x->d, y->d) && ptc_ix_eq(x->x, y->x);
}

bool ptc_ix_eq(const ptc_ix *x, const ptc_ix *y)
{
    if (x == y)
        return true;
    if (x->nterms != y->nterms || !ptc_dim_eq(x->constant, y->constant))
        return false;
    for (int i = 0; i < x->nterms; i++) {
        bool found = false;
        for (int j = 0; j < y->nterms && !found; j++)
            found = atom_eq(x->terms[i].atom, y->terms[j].atom) &&
                    ptc_dim_eq(x->terms[i].coeff, y->terms[j].coeff);
        if (!found)
            return false;
    }
    return true;
}

/* Sort key: variables first by number, then values, then divisions/modulos in
 * the order they were made (stable). */
static int term_rank(const ptc_ixterm *t)
{
    switch (t->atom->kind) {
    case PTC_IXA_VAR: return t->atom->id;
    case PTC_IXA_VAL: return (1 << 20) + t->atom->id;
    default: return 1 << 30;
    }
}

/* A growable term list used while building. */
typedef struct tlist {
    ptc_dim constant;
    int n, cap;
    ptc_ixterm *t;
} tlist;

static void tl_push(ptc_arena *a, tlist *l, ptc_dim coeff, const ptc_ixatom *atom)
{
    if (dim_is(coeff, 0))
        return;
    for (int i = 0; i < l->n; i++)
        if (atom_eq(l->t[i].atom, atom)) {
            l->t[i].coeff = ptc_dim_add(a, l->t[i].coeff, coeff);
            return;
        }
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 8;
        ptc_ixterm *t = PTC_NEWN(a, ptc_ixterm, cap);
        if (l->n)
            memcpy(t, l->t, sizeof *t * (size_t)l->n);
        l->t = t;
        l->cap = cap;
    }
    l->t[l->n].coeff = coeff;
    l->t[l->n].atom = atom;
    l->n++;
}

static void tl_add_ix(ptc_arena *a, tlist *l, const ptc_ix *x, ptc_dim scale)
{
    l->constant = ptc_dim_add(a, l->constant, ptc_dim_mul(a, x->constant, scale));
    for (int i = 0; i < x->nterms; i++)
        tl_push(a, l, ptc_dim_mul(a, x->terms[i].coeff, scale), x->terms[i].atom);
}

/* The atom x // d is, when its normal form is a lone atom (NULL otherwise). */
static const ptc_ixatom *div_atom(ptc_arena *a, const ptc_ix *x, ptc_dim d)
{
    const ptc_ix *q = ptc_ix_floordiv(a, x, d);
    return q->nterms == 1 && dim_is(q->constant, 0) && dim_is(q->terms[0].coeff, 1)
               ? q->terms[0].atom
               : NULL;
}

/* Folds c*d*(x//d) + c*(x%d) into c*x; true if something changed. x//d is
 * compared in normal form, so a flatten's (y//6)%4*6 + (y//24)*24 + y%6
 * folds twice back into y. */
static bool fold_divmod(ptc_arena *a, tlist *l)
{
    for (int i = 0; i < l->n; i++) {
        const ptc_ixatom *m = l->t[i].atom, *div = NULL;
        if (m->kind != PTC_IXA_MOD || dim_is(l->t[i].coeff, 0))
            continue;
        ptc_dim want = ptc_dim_mul(a, l->t[i].coeff, m->d);
        for (int j = 0; j < l->n; j++) {
            const ptc_ixatom *q = l->t[j].atom;
            if (q->kind != PTC_IXA_DIV || !ptc_dim_eq(l->t[j].coeff, want))
                continue;
            if (!ptc_dim_eq(q->d, m->d) || !ptc_ix_eq(q->x, m->x)) {
                div = div ? div : div_atom(a, m->x, m->d);
                if (!div || !atom_eq(div, q))
                    continue;
            }
            ptc_dim c = l->t[i].coeff;
            l->t[i].coeff = zero;
            l->t[j].coeff = zero;
            tl_add_ix(a, l, m->x, c);
            return true;
        }
    }
    return false;
}

static const ptc_ix *tl_finish(ptc_arena *a, tlist *l)
{
    while (fold_divmod(a, l))
        ;
    ptc_ix *x = PTC_NEW(a, ptc_ix);
    x->constant = l->constant;
    ptc_ixterm *t = PTC_NEWN(a, ptc_ixterm, l->n ? l->n : 1);
    int n = 0;
    for (int i = 0; i < l->n; i++)
        if (!dim_is(l->t[i].coeff, 0))
            t[n++] = l->t[i];
    /* insertion sort by rank, stable */
    for (int i = 1; i < n; i++) {
        ptc_ixterm v = t[i];
        int j = i - 1;
        while (j >= 0 && term_rank(&t[j]) > term_rank(&v)) {
            t[j + 1] = t[j];
            j--;
        }
        t[j + 1] = v;
    }
    x->nterms = n;
    x->terms = t;
    return x;
}

const ptc_ix *ptc_ix_const(ptc_arena *a, ptc_dim c)
{
    ptc_ix *x = PTC_NEW(a, ptc_ix);
    x->constant = c;
    return x;
}

const ptc_ix *ptc_ix_int(ptc_arena *a, int64_t c) { return ptc_ix_const(a, ptc_dim_c(c)); }

static const ptc_ix *atom_ix(ptc_arena *a, ptc_ixatom *at)
{
    tlist l = {zero, 0, 0, NULL};
    tl_push(a, &l, ptc_dim_c(1), at);
    return tl_finish(a, &l);
}

const ptc_ix *ptc_ix_var(ptc_arena *a, int id, ptc_dim extent)
{
    ptc_ixatom *at = PTC_NEW(a, ptc_ixatom);
    at->kind = PTC_IXA_VAR;
    at->id = id;
    at->d = extent;
    return atom_ix(a, at);
}

const ptc_ix *ptc_ix_val(ptc_arena *a, int expr, ptc_dim extent)
{
    ptc_ixatom *at = PTC_NEW(a, ptc_ixatom);
    at->kind = PTC_IXA_VAL;
    at->id = expr;
    at->d = extent;
    return atom_ix(a, at);
}

const ptc_ix *ptc_ix_madd(ptc_arena *a, const ptc_ix *x, ptc_dim c, const ptc_ix *y)
{
    tlist l = {zero, 0, 0, NULL};
    tl_add_ix(a, &l, x, c);
    tl_add_ix(a, &l, y, ptc_dim_c(1));
    return tl_finish(a, &l);
}

const ptc_ix *ptc_ix_add(ptc_arena *a, const ptc_ix *x, const ptc_ix *y)
{
    return ptc_ix_madd(a, x, ptc_dim_c(1), y);
}

const ptc_ix *ptc_ix_scale(ptc_arena *a, const ptc_ix *x, ptc_dim c)
{
    tlist l = {zero, 0, 0, NULL};
    tl_add_ix(a, &l, x, c);
    return tl_finish(a, &l);
}

bool ptc_ix_is_var(const ptc_ix *x, int v)
{
    return x->nterms == 1 && ptc_dim_is_static(x->constant) && x->constant.value == 0 &&
           x->terms[0].atom->kind == PTC_IXA_VAR && x->terms[0].atom->id == v &&
           ptc_dim_is_static(x->terms[0].coeff) && x->terms[0].coeff.value == 1;
}

bool ptc_ix_is_const(const ptc_ix *x, ptc_dim *c)
{
    if (x->nterms)
        return false;
    if (c)
        *c = x->constant;
    return true;
}

/* ---- ranges ---------------------------------------------------------------- */

static bool ix_bounds(ptc_arena *a, const ptc_ix *x, ptc_dim *mn, ptc_dim *mx);

static bool atom_bounds(ptc_arena *a, const ptc_ixatom *at, ptc_dim *mn, ptc_dim *mx)
{
    switch (at->kind) {
    case PTC_IXA_VAR:
    case PTC_IXA_VAL:
        *mn = zero;
        *mx = ptc_dim_sub(a, at->d, ptc_dim_c(1));
        return true;
    case PTC_IXA_MOD:
        *mn = zero;
        *mx = ptc_dim_sub(a, at->d, ptc_dim_c(1));
        return true;
    default: {
        ptc_dim lo, hi;
        if (!ix_bounds(a, at->x, &lo, &hi) || !ptc_dim_nonneg(lo))
            return false;
        *mn = ptc_dim_floordiv(a, lo, at->d);
        *mx = ptc_dim_floordiv(a, hi, at->d);
        return true;
    }
    }
}

static bool ix_bounds(ptc_arena *a, const ptc_ix *x, ptc_dim *mn, ptc_dim *mx)
{
    ptc_dim lo = x->constant, hi = x->constant;
    for (int i = 0; i < x->nterms; i++) {
        ptc_dim c = x->terms[i].coeff, alo, ahi;
        if (!atom_bounds(a, x->terms[i].atom, &alo, &ahi))
            return false;
        if (ptc_dim_nonneg(c)) {
            lo = ptc_dim_add(a, lo, ptc_dim_mul(a, c, alo));
            hi = ptc_dim_add(a, hi, ptc_dim_mul(a, c, ahi));
        } else if (ptc_dim_nonneg(ptc_dim_mul(a, c, ptc_dim_c(-1)))) {
            lo = ptc_dim_add(a, lo, ptc_dim_mul(a, c, ahi));
            hi = ptc_dim_add(a, hi, ptc_dim_mul(a, c, alo));
        } else {
            return false;
        }
    }
    *mn = lo;
    *mx = hi;
    return true;
}

bool ptc_ix_max(ptc_arena *a, const ptc_ix *x, ptc_dim *max)
{
    ptc_dim lo, hi;
    if (!ix_bounds(a, x, &lo, &hi) || !ptc_dim_nonneg(lo))
        return false;
    *max = hi;
    return true;
}

/* 0 <= x <= d-1 provably. */
static bool within(ptc_arena *a, const ptc_ix *x, ptc_dim d)
{
    ptc_dim lo, hi;
    if (!ix_bounds(a, x, &lo, &hi))
        return false;
    return ptc_dim_nonneg(lo) && ptc_dim_nonneg(ptc_dim_sub(a, ptc_dim_sub(a, d, ptc_dim_c(1)), hi));
}

/* ---- division -------------------------------------------------------------- */

/* x = d*q + r where q collects what d divides (floor-split for constants). */
static void split(ptc_arena *a, const ptc_ix *x, ptc_dim d, tlist *q, tlist *r)
{
    *q = (tlist){zero, 0, 0, NULL};
    *r = (tlist){zero, 0, 0, NULL};
    ptc_dim c;
    if (!d.sym && !x->constant.sym) {
        q->constant = ptc_dim_floordiv(a, x->constant, d);
        r->constant = ptc_dim_mod(a, x->constant, d);
    } else if (ptc_dim_div_exact(a, x->constant, d, &c)) {
        q->constant = c;
    } else {
        r->constant = x->constant;
    }
    for (int i = 0; i < x->nterms; i++) {
        ptc_dim k = x->terms[i].coeff;
        if (!d.sym && !k.sym) {
            tl_push(a, q, ptc_dim_floordiv(a, k, d), x->terms[i].atom);
            tl_push(a, r, ptc_dim_mod(a, k, d), x->terms[i].atom);
        } else if (ptc_dim_div_exact(a, k, d, &c)) {
            tl_push(a, q, c, x->terms[i].atom);
        } else {
            tl_push(a, r, k, x->terms[i].atom);
        }
    }
}

static const ptc_ixatom *binary_atom(ptc_arena *a, int kind, const ptc_ix *x, ptc_dim d)
{
    ptc_ixatom *at = PTC_NEW(a, ptc_ixatom);
    at->kind = (uint8_t)kind;
    at->x = x;
    at->d = d;
    return at;
}

/* A factor g of d that splits rem = g*hi + lo with 0 <= lo < g: then
 * rem // d == hi // (d/g) and rem % d == g*(hi % (d/g)) + lo. This is what
 * a reshape that splits a dimension needs: (196*y1 + 14*y2 + y3) // 784 with
 * 14*y2 + y3 < 196 is y1 // 4. Candidates are rem's coefficients. */
static bool factor_split(ptc_arena *a, const ptc_ix *rem, ptc_dim d, ptc_dim *g, ptc_dim *k,
                         const ptc_ix **hi, const ptc_ix **lo)
{
    for (int i = 0; i < rem->nterms; i++) {
        ptc_dim c = rem->terms[i].coeff, kk;
        if (dim_is(c, 1) || !ptc_dim_nonneg(c) || !ptc_dim_div_exact(a, d, c, &kk) || dim_is(kk, 1))
            continue;
        tlist h = {zero, 0, 0, NULL}, l = {zero, 0, 0, NULL};
        ptc_dim q;
        if (ptc_dim_div_exact(a, rem->constant, c, &q))
            h.constant = q;
        else
            l.constant = rem->constant;
        for (int j = 0; j < rem->nterms; j++) {
            if (ptc_dim_div_exact(a, rem->terms[j].coeff, c, &q))
                tl_push(a, &h, q, rem->terms[j].atom);
            else
                tl_push(a, &l, rem->terms[j].coeff, rem->terms[j].atom);
        }
        const ptc_ix *lx = tl_finish(a, &l);
        if (!within(a, lx, c))
            continue;
        *g = c;
        *k = kk;
        *hi = tl_finish(a, &h);
        *lo = lx;
        return true;
    }
    return false;
}

const ptc_ix *ptc_ix_floordiv(ptc_arena *a, const ptc_ix *x, ptc_dim d)
{
    if (dim_is(d, 1))
        return x;
    if (dim_is(d, 0)) /* a product of sizes with a zero: nothing is ever indexed */
        return ptc_ix_int(a, 0);
    if (x->nterms == 0 && !d.sym && !x->constant.sym)
        return ptc_ix_const(a, ptc_dim_floordiv(a, x->constant, d));
    /* (y // e) // d == y // (e*d) for positive divisors: one normal form */
    if (x->nterms == 1 && dim_is(x->constant, 0) && dim_is(x->terms[0].coeff, 1) &&
        x->terms[0].atom->kind == PTC_IXA_DIV)
        return ptc_ix_floordiv(a, x->terms[0].atom->x, ptc_dim_mul(a, x->terms[0].atom->d, d));
    tlist q, r;
    split(a, x, d, &q, &r);
    const ptc_ix *rem = tl_finish(a, &r), *hi, *lo;
    ptc_dim g, k;
    if (within(a, rem, d))
        return tl_finish(a, &q);
    if (factor_split(a, rem, d, &g, &k, &hi, &lo)) {
        tl_add_ix(a, &q, ptc_ix_floordiv(a, hi, k), ptc_dim_c(1));
        return tl_finish(a, &q);
    }
    tl_push(a, &q, ptc_dim_c(1), binary_atom(a, PTC_IXA_DIV, rem, d));
    return tl_finish(a, &q);
}

const ptc_ix *ptc_ix_mod(ptc_arena *a, const ptc_ix *x, ptc_dim d)
{
    if (dim_is(d, 1) || dim_is(d, 0))
        return ptc_ix_int(a, 0);
    if (x->nterms == 0 && !d.sym && !x->constant.sym)
        return ptc_ix_const(a, ptc_dim_mod(a, x->constant, d));
    tlist q, r;
    split(a, x, d, &q, &r);
    const ptc_ix *rem = tl_finish(a, &r), *hi, *lo;
    ptc_dim g, k;
    if (within(a, rem, d))
        return rem;
    if (factor_split(a, rem, d, &g, &k, &hi, &lo))
        return ptc_ix_madd(a, ptc_ix_mod(a, hi, k), g, lo);
    return atom_ix(a, (ptc_ixatom *)binary_atom(a, PTC_IXA_MOD, rem, d));
}

/* ---- substitution and queries ---------------------------------------------- */

const ptc_ix *ptc_ix_subst(ptc_arena *a, const ptc_ix *x, const ptc_ix *const *vars, int nvars,
                           const int *vals, int nvals)
{
    tlist l = {x->constant, 0, 0, NULL};
    for (int i = 0; i < x->nterms; i++) {
        const ptc_ixatom *at = x->terms[i].atom;
        ptc_dim c = x->terms[i].coeff;
        switch (at->kind) {
        case PTC_IXA_VAR:
            if (at->id < nvars && vars && vars[at->id])
                tl_add_ix(a, &l, vars[at->id], c);
            else
                tl_push(a, &l, c, at);
            break;
        case PTC_IXA_VAL:
            if (at->id < nvals && vals)
                tl_add_ix(a, &l, ptc_ix_val(a, vals[at->id], at->d), c);
            else
                tl_push(a, &l, c, at);
            break;
        case PTC_IXA_DIV:
            tl_add_ix(a, &l,
                      ptc_ix_floordiv(a, ptc_ix_subst(a, at->x, vars, nvars, vals, nvals), at->d),
                      c);
            break;
        default:
            tl_add_ix(a, &l, ptc_ix_mod(a, ptc_ix_subst(a, at->x, vars, nvars, vals, nvals), at->d),
                      c);
            break;
        }
    }
    return tl_finish(a, &l);
}

bool ptc_ix_uses_var(const ptc_ix *x, int v)
{
    for (int i = 0; i < x->nterms; i++) {
        const ptc_ixatom *at = x->terms[i].atom;
        if (at->kind == PTC_IXA_VAR && at->id == v)
            return true;
        if ((at->kind == PTC_IXA_DIV || at->kind == PTC_IXA_MOD) && ptc_ix_uses_var(at->x, v))
            return true;
    }
    return false;
}

int ptc_ix_vals(const ptc_ix *x, int *vals, int n, int max)
{
    for (int i = 0; i < x->nterms; i++) {
        const ptc_ixatom *at = x->terms[i].atom;
        if (at->kind == PTC_IXA_VAL && n < max)
            vals[n++] = at->id;
        else if (at->kind == PTC_IXA_DIV || at->kind == PTC_IXA_MOD)
            n = ptc_ix_vals(at->x, vals, n, max);
    }
    return n;
}

bool ptc_ix_uses_val(const ptc_ix *x)
{
    for (int i = 0; i < x->nterms; i++) {
        const ptc_ixatom *at = x->terms[i].atom;
        if (at->kind == PTC_IXA_VAL)
            return true;
        if ((at->kind == PTC_IXA_DIV || at->kind == PTC_IXA_MOD) && ptc_ix_uses_val(at->x))
            return true;
    }
    return false;
}

ptc_dim ptc_ix_coeff(const ptc_ix *x, int v, bool *nested)
{
    ptc_dim c = zero;
    bool n = false;
    for (int i = 0; i < x->nterms; i++) {
        const ptc_ixatom *at = x->terms[i].atom;
        if (at->kind == PTC_IXA_VAR && at->id == v)
            c = x->terms[i].coeff;
        else if ((at->kind == PTC_IXA_DIV || at->kind == PTC_IXA_MOD) && ptc_ix_uses_var(at->x, v))
            n = true;
    }
    if (nested)
        *nested = n;
    return c;
}

/* ---- printing -------------------------------------------------------------- */

static void print_dim_factor(ptc_buf *b, ptc_dim d)
{
    ptc_buf tmp = {0};
    ptc_dim_print(&tmp, d);
    bool simple = true;
    for (const char *s = tmp.data; *s; s++)
        if (strchr("+-/%", *s) && s != tmp.data)
            simple = false;
    if (simple)
        ptc_buf_puts(b, tmp.data);
    else
        ptc_buf_printf(b, "(%s)", tmp.data);
    ptc_buf_free(&tmp);
}

static void print_atom(ptc_buf *b, const ptc_ixatom *at, const char *const *names, int nnames)
{
    switch (at->kind) {
    case PTC_IXA_VAR:
        if (names && at->id < nnames && names[at->id])
            ptc_buf_puts(b, names[at->id]);
        else
            ptc_buf_printf(b, "v%d", at->id);
        break;
    case PTC_IXA_VAL: ptc_buf_printf(b, "t%d", at->id); break;
    default:
        ptc_buf_putc(b, '(');
        ptc_ix_print(b, at->x, names, nnames);
        ptc_buf_puts(b, at->kind == PTC_IXA_DIV ? ")//" : ")%");
        print_dim_factor(b, at->d);
        break;
    }
}

void ptc_ix_print(ptc_buf *b, const ptc_ix *x, const char *const *names, int nnames)
{
    for (int i = 0; i < x->nterms; i++) {
        ptc_dim c = x->terms[i].coeff;
        bool neg = !c.sym && c.value < 0;
        if (neg)
            ptc_buf_puts(b, i ? " - " : "-");
        else if (i)
            ptc_buf_puts(b, " + ");
        if (neg)
            c.value = -c.value;
        if (!dim_is(c, 1)) {
            print_dim_factor(b, c);
            ptc_buf_putc(b, '*');
        }
        print_atom(b, x->terms[i].atom, names, nnames);
    }
    ptc_dim k = x->constant;
    if (x->nterms == 0) {
        ptc_dim_print(b, k);
    } else if (!dim_is(k, 0)) {
        if (!k.sym && k.value < 0) {
            ptc_buf_printf(b, " - %lld", (long long)-k.value);
        } else {
            ptc_buf_puts(b, " + ");
            print_dim_factor(b, k);
        }
    }
}
