/* Symbolic sizes in one canonical form.
 *
 * An expression is a polynomial: constant + sum of coeff * monomial, where a
 * monomial is a sorted multiset of atoms and an atom is a symbol, a floor
 * division or a modulo (whose operands are themselves canonical dims). Terms
 * are sorted, like terms are merged and zero terms dropped, so structural
 * equality is the equality we can decide, and printing is a function of the
 * value: print(parse(print(x))) == print(x).
 *
 * Division by a static divisor pulls out whatever divides exactly:
 * (a*y + r)//y == a + r//y for integer a, which holds for floor division
 * because the monomials are integers. Modulo reduces coefficients mod y.
 */
#include "ir/ir.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

enum { ATOM_SYM, ATOM_FLOORDIV, ATOM_MOD };

typedef struct atom {
    int kind;
    const char *name; /* ATOM_SYM */
    ptc_dim a, b;     /* ATOM_FLOORDIV / ATOM_MOD */
} atom;

typedef struct term {
    int64_t coeff;
    int natoms;
    const atom **atoms; /* sorted by atom_cmp */
} term;

struct ptc_sym {
    int64_t constant;
    int nterms; /* >= 1 */
    term *terms; /* sorted by term_cmp */
};

/* A polynomial under construction (static dims have nterms == 0). */
typedef struct poly {
    int64_t constant;
    int nterms;
    term *terms;
} poly;

static int dim_cmp(ptc_dim x, ptc_dim y);

/* Coefficient arithmetic wraps (two's complement) instead of overflowing:
 * sizes near 2^63 are nonsense anyway, but signed overflow is undefined
 * behaviour, and the fuzzer feeds the parser such constants. Evaluation
 * (ptc_dim_eval) checks for overflow and reports it. */
static int64_t wadd(int64_t x, int64_t y) { return (int64_t)((uint64_t)x + (uint64_t)y); }
static int64_t wmul(int64_t x, int64_t y) { return (int64_t)((uint64_t)x * (uint64_t)y); }

/* Symbol names compare with embedded numbers by value, so s2 < s10. */
static int name_cmp(const char *a, const char *b)
{
    while (*a && *b) {
        if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
            char *ea, *eb;
            unsigned long long va = strtoull(a, &ea, 10), vb = strtoull(b, &eb, 10);
            if (va != vb)
                return va < vb ? -1 : 1;
            a = ea;
            b = eb;
            continue;
        }
        if (*a != *b)
            return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
        a++;
        b++;
    }
    return *a ? 1 : *b ? -1 : 0;
}

static int atom_cmp(const atom *x, const atom *y)
{
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    if (x->kind == ATOM_SYM)
        return name_cmp(x->name, y->name);
    int c = dim_cmp(x->a, y->a);
    return c ? c : dim_cmp(x->b, y->b);
}

/* Higher degree first, then atom by atom. */
static int monomial_cmp(const term *x, const term *y)
{
    if (x->natoms != y->natoms)
        return x->natoms > y->natoms ? -1 : 1;
    for (int i = 0; i < x->natoms; i++) {
        int c = atom_cmp(x->atoms[i], y->atoms[i]);
        if (c)
            return c;
    }
    return 0;
}

static int poly_cmp(const poly *x, const poly *y)
{
    if (x->nterms != y->nterms)
        return x->nterms < y->nterms ? -1 : 1;
    for (int i = 0; i < x->nterms; i++) {
        int c = monomial_cmp(&x->terms[i], &y->terms[i]);
        if (c)
            return c;
        if (x->terms[i].coeff != y->terms[i].coeff)
            return x->terms[i].coeff < y->terms[i].coeff ? -1 : 1;
    }
    if (x->constant != y->constant)
        return x->constant < y->constant ? -1 : 1;
    return 0;
}

static poly to_poly(ptc_dim d)
{
    if (!d.sym)
        return (poly){d.value, 0, NULL};
    return (poly){d.sym->constant, d.sym->nterms, d.sym->terms};
}

static int dim_cmp(ptc_dim x, ptc_dim y)
{
    poly px = to_poly(x), py = to_poly(y);
    return poly_cmp(&px, &py);
}

/* Sorts terms, merges equal monomials, drops zeros; returns the dim. */
static ptc_dim finish(ptc_arena *a, int64_t constant, term *terms, int n)
{
    /* insertion sort: term lists are short */
    for (int i = 1; i < n; i++) {
        term t = terms[i];
        int j = i - 1;
        while (j >= 0 && monomial_cmp(&terms[j], &t) > 0) {
            terms[j + 1] = terms[j];
            j--;
        }
        terms[j + 1] = t;
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m > 0 && monomial_cmp(&terms[m - 1], &terms[i]) == 0)
            terms[m - 1].coeff = wadd(terms[m - 1].coeff, terms[i].coeff);
        else
            terms[m++] = terms[i];
    }
    int k = 0;
    for (int i = 0; i < m; i++)
        if (terms[i].coeff != 0)
            terms[k++] = terms[i];
    if (k == 0)
        return ptc_dim_c(constant);
    ptc_sym *s = PTC_NEW(a, ptc_sym);
    s->constant = constant;
    s->nterms = k;
    s->terms = ptc_arena_dup(a, terms, sizeof(term) * (size_t)k);
    return (ptc_dim){0, s};
}

static ptc_dim atom_dim(ptc_arena *a, const atom *at)
{
    term t = {1, 1, NULL};
    const atom **atoms = PTC_NEWN(a, const atom *, 1);
    atoms[0] = at;
    t.atoms = atoms;
    return finish(a, 0, &t, 1);
}

ptc_dim ptc_dim_symbol(ptc_arena *a, const char *name)
{
    atom *at = PTC_NEW(a, atom);
    at->kind = ATOM_SYM;
    at->name = ptc_arena_strdup(a, name);
    return atom_dim(a, at);
}

static ptc_dim add_scaled(ptc_arena *a, ptc_dim x, ptc_dim y, int64_t scale)
{
    if (!x.sym && !y.sym)
        return ptc_dim_c(wadd(x.value, wmul(scale, y.value)));
    poly px = to_poly(x), py = to_poly(y);
    int n = px.nterms + py.nterms;
    term *terms = PTC_NEWN(a, term, n);
    for (int i = 0; i < px.nterms; i++)
        terms[i] = px.terms[i];
    for (int i = 0; i < py.nterms; i++) {
        terms[px.nterms + i] = py.terms[i];
        terms[px.nterms + i].coeff = wmul(terms[px.nterms + i].coeff, scale);
    }
    return finish(a, wadd(px.constant, wmul(scale, py.constant)), terms, n);
}

ptc_dim ptc_dim_add(ptc_arena *a, ptc_dim x, ptc_dim y) { return add_scaled(a, x, y, 1); }
ptc_dim ptc_dim_sub(ptc_arena *a, ptc_dim x, ptc_dim y) { return add_scaled(a, x, y, -1); }

static term term_mul(ptc_arena *a, const term *x, const term *y)
{
    term t;
    t.coeff = wmul(x->coeff, y->coeff);
    t.natoms = x->natoms + y->natoms;
    const atom **atoms = PTC_NEWN(a, const atom *, t.natoms);
    int i = 0, j = 0, k = 0;
    while (i < x->natoms || j < y->natoms) {
        if (j >= y->natoms || (i < x->natoms && atom_cmp(x->atoms[i], y->atoms[j]) <= 0))
            atoms[k++] = x->atoms[i++];
        else
            atoms[k++] = y->atoms[j++];
    }
    t.atoms = atoms;
    return t;
}

ptc_dim ptc_dim_mul(ptc_arena *a, ptc_dim x, ptc_dim y)
{
    if (!x.sym && !y.sym)
        return ptc_dim_c(wmul(x.value, y.value));
    poly px = to_poly(x), py = to_poly(y);
    int n = px.nterms * py.nterms + px.nterms + py.nterms;
    term *terms = PTC_NEWN(a, term, n);
    int k = 0;
    for (int i = 0; i < px.nterms; i++)
        for (int j = 0; j < py.nterms; j++)
            terms[k++] = term_mul(a, &px.terms[i], &py.terms[j]);
    for (int i = 0; i < px.nterms; i++) {
        terms[k] = px.terms[i];
        terms[k].coeff = wmul(terms[k].coeff, py.constant);
        k++;
    }
    for (int j = 0; j < py.nterms; j++) {
        terms[k] = py.terms[j];
        terms[k].coeff = wmul(terms[k].coeff, px.constant);
        k++;
    }
    return finish(a, wmul(px.constant, py.constant), terms, k);
}

static int64_t floordiv64(int64_t x, int64_t y)
{
    if (y == -1) /* INT64_MIN / -1 traps */
        return wmul(x, -1);
    int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0)))
        q--;
    return q;
}

static int64_t mod64(int64_t x, int64_t y)
{
    if (y == -1)
        return 0;
    int64_t r = x % y; /* x - (x//y)*y could overflow; this cannot */
    if (r != 0 && ((r < 0) != (y < 0)))
        r += y;
    return r;
}

static ptc_dim binary_atom(ptc_arena *a, int kind, ptc_dim x, ptc_dim y)
{
    atom *at = PTC_NEW(a, atom);
    at->kind = kind;
    at->a = x;
    at->b = y;
    return atom_dim(a, at);
}

/* Splits x = y*quot + rem with every coefficient of rem in [0, y). */
static void split_by(ptc_arena *a, ptc_dim x, int64_t y, ptc_dim *quot, ptc_dim *rem)
{
    poly p = to_poly(x);
    term *q = PTC_NEWN(a, term, p.nterms + 1), *r = PTC_NEWN(a, term, p.nterms + 1);
    for (int i = 0; i < p.nterms; i++) {
        q[i] = r[i] = p.terms[i];
        q[i].coeff = floordiv64(p.terms[i].coeff, y);
        r[i].coeff = mod64(p.terms[i].coeff, y);
    }
    *quot = finish(a, floordiv64(p.constant, y), q, p.nterms);
    *rem = finish(a, mod64(p.constant, y), r, p.nterms);
}

ptc_dim ptc_dim_floordiv(ptc_arena *a, ptc_dim x, ptc_dim y)
{
    if (!y.sym) {
        PTC_ASSERT(y.value != 0);
        if (!x.sym)
            return ptc_dim_c(floordiv64(x.value, y.value));
        if (y.value == 1)
            return x;
        if (y.value == INT64_MIN) /* cannot be negated: leave it unsimplified */
            return binary_atom(a, ATOM_FLOORDIV, x, y);
        if (y.value < 0) /* x//y == (-x)//(-y) */
            return ptc_dim_floordiv(a, ptc_dim_mul(a, x, ptc_dim_c(-1)), ptc_dim_c(-y.value));
        ptc_dim quot, rem;
        split_by(a, x, y.value, &quot, &rem);
        if (!rem.sym)
            return quot; /* 0 <= rem < y: rem//y == 0 */
        return ptc_dim_add(a, quot, binary_atom(a, ATOM_FLOORDIV, rem, y));
    }
    if (ptc_dim_eq(x, y))
        return ptc_dim_c(1);
    if (!x.sym && x.value == 0)
        return ptc_dim_c(0);
    return binary_atom(a, ATOM_FLOORDIV, x, y);
}

ptc_dim ptc_dim_mod(ptc_arena *a, ptc_dim x, ptc_dim y)
{
    if (!y.sym) {
        PTC_ASSERT(y.value != 0);
        if (!x.sym)
            return ptc_dim_c(mod64(x.value, y.value));
        if (y.value == 1 || y.value == -1)
            return ptc_dim_c(0);
        if (y.value < 0)
            return binary_atom(a, ATOM_MOD, x, y);
        ptc_dim quot, rem;
        split_by(a, x, y.value, &quot, &rem);
        if (!rem.sym)
            return rem;
        return binary_atom(a, ATOM_MOD, rem, y);
    }
    if (ptc_dim_eq(x, y) || (!x.sym && x.value == 0))
        return ptc_dim_c(0);
    return binary_atom(a, ATOM_MOD, x, y);
}

ptc_dim ptc_dim_ceildiv(ptc_arena *a, ptc_dim x, ptc_dim y)
{
    ptc_dim neg = ptc_dim_mul(a, x, ptc_dim_c(-1));
    return ptc_dim_mul(a, ptc_dim_floordiv(a, neg, y), ptc_dim_c(-1));
}

bool ptc_dim_eq(ptc_dim x, ptc_dim y)
{
    if (!x.sym && !y.sym)
        return x.value == y.value;
    if (!x.sym || !y.sym)
        return false;
    return dim_cmp(x, y) == 0;
}

/* ---- exact division and sign ---------------------------------------------- */

/* Removes the atoms of `sub` (a sorted multiset) from t's atoms; false if t does
 * not contain them all. */
static bool atoms_remove(ptc_arena *a, const term *t, const term *sub, term *out)
{
    const atom **atoms = PTC_NEWN(a, const atom *, t->natoms + 1);
    int i = 0, j = 0, k = 0;
    while (i < t->natoms) {
        int c = j < sub->natoms ? atom_cmp(t->atoms[i], sub->atoms[j]) : -1;
        if (c == 0) {
            i++;
            j++;
        } else if (c < 0) {
            atoms[k++] = t->atoms[i++];
        } else {
            return false;
        }
    }
    if (j < sub->natoms)
        return false;
    out->natoms = k;
    out->atoms = atoms;
    return true;
}

bool ptc_dim_div_exact(ptc_arena *a, ptc_dim x, ptc_dim y, ptc_dim *quot)
{
    if (!y.sym) {
        if (y.value == 0)
            return false;
        poly p = to_poly(x);
        if (p.constant % y.value != 0)
            return false;
        term *q = PTC_NEWN(a, term, p.nterms + 1);
        for (int i = 0; i < p.nterms; i++) {
            if (p.terms[i].coeff % y.value != 0)
                return false;
            q[i] = p.terms[i];
            q[i].coeff /= y.value;
        }
        *quot = finish(a, p.constant / y.value, q, p.nterms);
        return true;
    }
    if (y.sym->constant != 0 || y.sym->nterms != 1)
        return false; /* only monomial divisors */
    const term *ty = &y.sym->terms[0];
    poly p = to_poly(x);
    if (p.constant != 0)
        return false;
    term *q = PTC_NEWN(a, term, p.nterms + 1);
    for (int i = 0; i < p.nterms; i++) {
        if (p.terms[i].coeff % ty->coeff != 0 || !atoms_remove(a, &p.terms[i], ty, &q[i]))
            return false;
        q[i].coeff = p.terms[i].coeff / ty->coeff;
    }
    /* terms whose atoms became empty are constants: fold them */
    int64_t constant = 0;
    int n = 0;
    for (int i = 0; i < p.nterms; i++) {
        if (q[i].natoms == 0)
            constant += q[i].coeff;
        else
            q[n++] = q[i];
    }
    *quot = finish(a, constant, q, n);
    return true;
}

bool ptc_dim_nonneg(ptc_dim d)
{
    if (!d.sym)
        return d.value >= 0;
    if (d.sym->constant < 0)
        return false;
    for (int i = 0; i < d.sym->nterms; i++) {
        const term *t = &d.sym->terms[i];
        if (t->coeff < 0)
            return false;
        for (int j = 0; j < t->natoms; j++) {
            const atom *at = t->atoms[j];
            if (at->kind != ATOM_SYM && (!ptc_dim_nonneg(at->a) || !ptc_dim_nonneg(at->b)))
                return false;
        }
    }
    return true;
}

/* ---- copying between arenas ------------------------------------------------ */

static const atom *atom_copy(ptc_arena *a, const atom *at)
{
    atom *c = PTC_NEW(a, atom);
    c->kind = at->kind;
    if (at->kind == ATOM_SYM) {
        c->name = ptc_arena_strdup(a, at->name);
    } else {
        c->a = ptc_dim_copy(a, at->a);
        c->b = ptc_dim_copy(a, at->b);
    }
    return c;
}

ptc_dim ptc_dim_copy(ptc_arena *a, ptc_dim d)
{
    if (!d.sym)
        return d;
    ptc_sym *s = PTC_NEW(a, ptc_sym);
    s->constant = d.sym->constant;
    s->nterms = d.sym->nterms;
    s->terms = PTC_NEWN(a, term, s->nterms);
    for (int i = 0; i < s->nterms; i++) {
        const term *t = &d.sym->terms[i];
        s->terms[i].coeff = t->coeff;
        s->terms[i].natoms = t->natoms;
        const atom **atoms = PTC_NEWN(a, const atom *, t->natoms);
        for (int j = 0; j < t->natoms; j++)
            atoms[j] = atom_copy(a, t->atoms[j]);
        s->terms[i].atoms = atoms;
    }
    return (ptc_dim){0, s};
}

/* ---- substitution ------------------------------------------------------------ */

static bool mentions(ptc_dim d, const char *name)
{
    const char *names[32];
    int n = ptc_dim_symbols(d, names, 0, 32);
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return true;
    return false;
}

static ptc_dim atom_subst(ptc_arena *a, const atom *at, const char *name, ptc_dim by)
{
    if (at->kind == ATOM_SYM)
        return strcmp(at->name, name) == 0 ? by : atom_dim(a, at);
    ptc_dim x = ptc_dim_subst(a, at->a, name, by), y = ptc_dim_subst(a, at->b, name, by);
    if (!y.sym && y.value == 0)
        return atom_dim(a, at); /* a divisor that became 0 was never a size */
    return at->kind == ATOM_FLOORDIV ? ptc_dim_floordiv(a, x, y) : ptc_dim_mod(a, x, y);
}

ptc_dim ptc_dim_subst(ptc_arena *a, ptc_dim d, const char *name, ptc_dim by)
{
    if (!d.sym || !mentions(d, name))
        return d;
    ptc_dim sum = ptc_dim_c(d.sym->constant);
    for (int i = 0; i < d.sym->nterms; i++) {
        const term *t = &d.sym->terms[i];
        ptc_dim prod = ptc_dim_c(t->coeff);
        for (int j = 0; j < t->natoms; j++)
            prod = ptc_dim_mul(a, prod, atom_subst(a, t->atoms[j], name, by));
        sum = ptc_dim_add(a, sum, prod);
    }
    return sum;
}

static int eval_atom(const atom *at, const ptc_bindings *b, int64_t *out, ptc_error *err);

bool ptc_dim_binds_given(ptc_dim d, const ptc_bindings *known, const char **name, int64_t size,
                         int64_t *value)
{
    if (!d.sym)
        return false;
    int64_t c = 0, rest = d.sym->constant, x;
    for (int i = 0; i < d.sym->nterms; i++) {
        const term *t = &d.sym->terms[i];
        if (t->natoms == 1 && t->atoms[0]->kind == ATOM_SYM &&
            !ptc_bindings_get(known, t->atoms[0]->name, &x)) {
            if (c != 0)
                return false; /* a second unknown symbol */
            c = t->coeff;
            *name = t->atoms[0]->name;
            continue;
        }
        int64_t prod = t->coeff;
        for (int j = 0; j < t->natoms; j++)
            if (!known || eval_atom(t->atoms[j], known, &x, NULL) ||
                __builtin_mul_overflow(prod, x, &prod))
                return false;
        rest = wadd(rest, prod);
    }
    if (c == 0 || (value && (size - rest) % c != 0))
        return false;
    if (value)
        *value = (size - rest) / c;
    return true;
}

bool ptc_dim_binds(ptc_dim d, const char **name, int64_t size, int64_t *value)
{
    return ptc_dim_binds_given(d, NULL, name, size, value);
}

bool ptc_dim_solve(ptc_arena *a, ptc_dim d, const char *name, ptc_dim *out)
{
    if (!d.sym)
        return false;
    int at = -1;
    for (int i = 0; i < d.sym->nterms; i++) {
        const term *t = &d.sym->terms[i];
        bool bare =
            t->natoms == 1 && t->atoms[0]->kind == ATOM_SYM && strcmp(t->atoms[0]->name, name) == 0;
        if (bare && at < 0) {
            at = i;
            continue;
        }
        for (int j = 0; j < t->natoms; j++)
            if (mentions(atom_dim(a, t->atoms[j]), name))
                return false; /* not linear in name */
    }
    if (at < 0)
        return false;
    int64_t c = d.sym->terms[at].coeff;
    ptc_dim rest = ptc_dim_sub(a, d, ptc_dim_mul(a, ptc_dim_c(c), ptc_dim_symbol(a, name)));
    ptc_dim q;
    if (!ptc_dim_div_exact(a, rest, ptc_dim_c(c), &q))
        return false;
    *out = ptc_dim_mul(a, q, ptc_dim_c(-1));
    return true;
}

/* ---- ranges ------------------------------------------------------------------ */

/* Interval arithmetic saturating at INT64_MIN / INT64_MAX (unbounded). */
static int64_t sat_add(int64_t x, int64_t y)
{
    int64_t r;
    return __builtin_add_overflow(x, y, &r) ? (x > 0 ? INT64_MAX : INT64_MIN) : r;
}

static int64_t sat_mul(int64_t x, int64_t y)
{
    int64_t r;
    return __builtin_mul_overflow(x, y, &r) ? ((x > 0) == (y > 0) ? INT64_MAX : INT64_MIN) : r;
}

static void range_mul(int64_t *lo, int64_t *hi, int64_t clo, int64_t chi)
{
    int64_t p[4] = {sat_mul(*lo, clo), sat_mul(*lo, chi), sat_mul(*hi, clo), sat_mul(*hi, chi)};
    *lo = *hi = p[0];
    for (int i = 1; i < 4; i++) {
        *lo = p[i] < *lo ? p[i] : *lo;
        *hi = p[i] > *hi ? p[i] : *hi;
    }
}

static void atom_range(const atom *at, const ptc_bindings *lo, const ptc_bindings *hi, int64_t *min,
                       int64_t *max)
{
    *min = INT64_MIN;
    *max = INT64_MAX;
    if (at->kind == ATOM_SYM) {
        ptc_bindings_get(lo, at->name, min);
        ptc_bindings_get(hi, at->name, max);
        return;
    }
    if (at->b.sym || at->b.value <= 0)
        return;
    if (at->kind == ATOM_MOD) {
        *min = 0;
        *max = at->b.value - 1;
        return;
    }
    int64_t xlo, xhi;
    ptc_dim_range(at->a, lo, hi, &xlo, &xhi);
    *min = xlo == INT64_MIN ? INT64_MIN : floordiv64(xlo, at->b.value);
    *max = xhi == INT64_MAX ? INT64_MAX : floordiv64(xhi, at->b.value);
}

void ptc_dim_range(ptc_dim d, const ptc_bindings *lo, const ptc_bindings *hi, int64_t *min,
                   int64_t *max)
{
    *min = *max = d.sym ? d.sym->constant : d.value;
    for (int i = 0; d.sym && i < d.sym->nterms; i++) {
        const term *t = &d.sym->terms[i];
        int64_t tlo = t->coeff, thi = t->coeff;
        for (int j = 0; j < t->natoms; j++) {
            int64_t alo, ahi;
            atom_range(t->atoms[j], lo, hi, &alo, &ahi);
            range_mul(&tlo, &thi, alo, ahi);
        }
        *min = sat_add(*min, tlo);
        *max = sat_add(*max, thi);
    }
}

/* ---- printing -------------------------------------------------------------- */

static bool is_single_factor(ptc_dim d)
{
    if (!d.sym)
        return d.value >= 0;
    return d.sym->constant == 0 && d.sym->nterms == 1 && d.sym->terms[0].coeff == 1 &&
           d.sym->terms[0].natoms == 1 && d.sym->terms[0].atoms[0]->kind == ATOM_SYM;
}

static void print_operand(ptc_buf *b, ptc_dim d)
{
    if (is_single_factor(d)) {
        ptc_dim_print(b, d);
    } else {
        ptc_buf_putc(b, '(');
        ptc_dim_print(b, d);
        ptc_buf_putc(b, ')');
    }
}

static void print_atom(ptc_buf *b, const atom *at, bool alone)
{
    if (at->kind == ATOM_SYM) {
        ptc_buf_puts(b, at->name);
        return;
    }
    /* In a product, a//b must be parenthesised: 3*(x//2) != (3*x)//2. */
    if (!alone)
        ptc_buf_putc(b, '(');
    print_operand(b, at->a);
    ptc_buf_puts(b, at->kind == ATOM_FLOORDIV ? "//" : "%");
    print_operand(b, at->b);
    if (!alone)
        ptc_buf_putc(b, ')');
}

void ptc_dim_print(ptc_buf *b, ptc_dim d)
{
    if (!d.sym) {
        ptc_buf_printf(b, "%lld", (long long)d.value);
        return;
    }
    for (int i = 0; i < d.sym->nterms; i++) {
        const term *t = &d.sym->terms[i];
        uint64_t c = (uint64_t)t->coeff; /* magnitude; INT64_MIN has no positive twin */
        if (t->coeff < 0) {
            ptc_buf_putc(b, '-');
            c = 0 - c;
        } else if (i > 0) {
            ptc_buf_putc(b, '+');
        }
        /* A leading unary minus binds tighter than // and % (as in Python):
         * -(x//2) must not print as -x//2, which reads as (-x)//2. */
        bool alone = c == 1 && t->natoms == 1 && !(i == 0 && t->coeff < 0);
        if (c != 1)
            ptc_buf_printf(b, "%llu*", (unsigned long long)c);
        for (int j = 0; j < t->natoms; j++) {
            if (j)
                ptc_buf_putc(b, '*');
            print_atom(b, t->atoms[j], alone);
        }
    }
    if (d.sym->constant > 0)
        ptc_buf_printf(b, "+%lld", (long long)d.sym->constant);
    else if (d.sym->constant < 0)
        ptc_buf_printf(b, "-%llu", (unsigned long long)(0 - (uint64_t)d.sym->constant));
}

static int symbols_of(ptc_dim d, const char **names, int n, int max)
{
    if (!d.sym)
        return n;
    for (int i = 0; i < d.sym->nterms; i++) {
        const term *t = &d.sym->terms[i];
        for (int j = 0; j < t->natoms; j++) {
            const atom *at = t->atoms[j];
            if (at->kind == ATOM_SYM) {
                bool seen = false;
                for (int k = 0; k < n; k++)
                    if (strcmp(names[k], at->name) == 0)
                        seen = true;
                if (!seen && n < max)
                    names[n++] = at->name;
            } else {
                n = symbols_of(at->a, names, n, max);
                n = symbols_of(at->b, names, n, max);
            }
        }
    }
    return n;
}

int ptc_dim_symbols(ptc_dim d, const char **names, int n, int max)
{
    return symbols_of(d, names, n, max);
}

/* ---- evaluation ------------------------------------------------------------ */

int ptc_bindings_set(ptc_bindings *b, const char *name, int64_t value)
{
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->names[i], name) == 0) {
            b->values[i] = value;
            return 0;
        }
    if (b->n >= (int)(sizeof b->values / sizeof *b->values))
        return -1;
    b->names[b->n] = name;
    b->values[b->n++] = value;
    return 0;
}

bool ptc_bindings_get(const ptc_bindings *b, const char *name, int64_t *value)
{
    for (int i = 0; b && i < b->n; i++)
        if (strcmp(b->names[i], name) == 0) {
            *value = b->values[i];
            return true;
        }
    return false;
}

static int eval_atom(const atom *at, const ptc_bindings *b, int64_t *out, ptc_error *err)
{
    if (at->kind == ATOM_SYM) {
        if (!ptc_bindings_get(b, at->name, out))
            return ptc_errorf(err, PTC_ERR_RUNTIME, "shape", "symbol '%s' is not bound", at->name);
        return 0;
    }
    int64_t x, y;
    if (ptc_dim_eval(at->a, b, &x, err) || ptc_dim_eval(at->b, b, &y, err))
        return -1;
    if (y == 0)
        return ptc_errorf(err, PTC_ERR_RUNTIME, "shape", "division by zero in a symbolic size");
    *out = at->kind == ATOM_FLOORDIV ? floordiv64(x, y) : mod64(x, y);
    return 0;
}

int ptc_dim_eval(ptc_dim d, const ptc_bindings *b, int64_t *out, ptc_error *err)
{
    if (!d.sym) {
        *out = d.value;
        return 0;
    }
    int64_t sum = d.sym->constant;
    for (int i = 0; i < d.sym->nterms; i++) {
        const term *t = &d.sym->terms[i];
        int64_t prod = t->coeff;
        for (int j = 0; j < t->natoms; j++) {
            int64_t v;
            if (eval_atom(t->atoms[j], b, &v, err))
                return -1;
            if (__builtin_mul_overflow(prod, v, &prod))
                return ptc_errorf(err, PTC_ERR_RUNTIME, "shape", "a symbolic size overflows int64");
        }
        if (__builtin_add_overflow(sum, prod, &sum))
            return ptc_errorf(err, PTC_ERR_RUNTIME, "shape", "a symbolic size overflows int64");
    }
    *out = sum;
    return 0;
}

/* ---- parsing: expr := term (('+'|'-') term)*; term := unary (('*'|'//'|'%') unary)*;
 *               unary := '-' unary | INT | NAME | '(' expr ')' ----------------- */

typedef struct dparser {
    ptc_arena *a;
    const char *p;
    ptc_error *err;
    int depth;
} dparser;

static int parse_sum(dparser *d, ptc_dim *out);

static void skip_ws(dparser *d)
{
    while (*d->p == ' ' || *d->p == '\t')
        d->p++;
}

static int dfail(dparser *d, const char *what)
{
    return ptc_errorf(d->err, PTC_ERR_PARSE, "parse", "expected %s in a size expression", what);
}

static int parse_unary(dparser *d, ptc_dim *out)
{
    skip_ws(d);
    if (++d->depth > 64)
        return ptc_errorf(d->err, PTC_ERR_PARSE, "parse", "size expression nested too deeply");
    int rc = 0;
    if (*d->p == '-') {
        d->p++;
        ptc_dim x;
        if ((rc = parse_unary(d, &x)) == 0)
            *out = ptc_dim_mul(d->a, x, ptc_dim_c(-1));
    } else if (isdigit((unsigned char)*d->p)) {
        /* Up to 2^63, which wraps to INT64_MIN like all size arithmetic, so
         * that INT64_MIN prints ("-9223372036854775808") and reads back;
         * INT64_MAX (torch's open slice end) is an ordinary literal. */
        const uint64_t limit = (uint64_t)1 << 63;
        const char *start = d->p;
        uint64_t v = 0;
        while (isdigit((unsigned char)*d->p)) {
            unsigned digit = (unsigned)(*d->p - '0');
            if (v > (limit - digit) / 10) {
                rc = ptc_errorf(d->err, PTC_ERR_PARSE, "parse", "integer too large in a size");
                d->p = start; /* the error points at the number */
                break;
            }
            v = v * 10 + digit;
            d->p++;
        }
        *out = ptc_dim_c((int64_t)v);
    } else if (isalpha((unsigned char)*d->p) || *d->p == '_') {
        const char *s = d->p;
        while (isalnum((unsigned char)*d->p) || *d->p == '_')
            d->p++;
        char *name = ptc_arena_strndup(d->a, s, (size_t)(d->p - s));
        *out = ptc_dim_symbol(d->a, name);
    } else if (*d->p == '(') {
        d->p++;
        if ((rc = parse_sum(d, out)) == 0) {
            skip_ws(d);
            if (*d->p == ')')
                d->p++;
            else
                rc = dfail(d, "')'");
        }
    } else {
        rc = dfail(d, "an integer, a symbol or '('");
    }
    d->depth--;
    return rc;
}

static int parse_product(dparser *d, ptc_dim *out)
{
    if (parse_unary(d, out))
        return -1;
    for (;;) {
        skip_ws(d);
        int op;
        if (d->p[0] == '/' && d->p[1] == '/') {
            op = '/';
            d->p += 2;
        } else if (*d->p == '*' || *d->p == '%') {
            op = *d->p++;
        } else {
            return 0;
        }
        ptc_dim y;
        skip_ws(d);
        const char *divisor = d->p;
        if (parse_unary(d, &y))
            return -1;
        if (op != '*' && !y.sym && y.value == 0) {
            d->p = divisor; /* the error points at the zero */
            return ptc_errorf(d->err, PTC_ERR_PARSE, "parse", "division by zero in a size");
        }
        *out = op == '*' ? ptc_dim_mul(d->a, *out, y)
               : op == '/' ? ptc_dim_floordiv(d->a, *out, y)
                           : ptc_dim_mod(d->a, *out, y);
    }
}

static int parse_sum(dparser *d, ptc_dim *out)
{
    if (parse_product(d, out))
        return -1;
    for (;;) {
        skip_ws(d);
        if (*d->p != '+' && *d->p != '-')
            return 0;
        int op = *d->p++;
        ptc_dim y;
        if (parse_product(d, &y))
            return -1;
        *out = op == '+' ? ptc_dim_add(d->a, *out, y) : ptc_dim_sub(d->a, *out, y);
    }
}

int ptc_dim_parse(ptc_arena *a, const char *s, const char **end, ptc_dim *out, ptc_error *err)
{
    dparser d = {a, s, err, 0};
    int rc = parse_sum(&d, out);
    if (end)
        *end = d.p;
    return rc;
}
