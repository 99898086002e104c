/* The .ptir parser: recursive descent over characters, tracking line and
 * column for every error.
 *
 * Everything it builds lives in the module's arena, so an error anywhere just
 * frees the arena: no partial state, no leaks. Newlines are whitespace (a node
 * ends where the next '%name =' or 'return' begins), '#' starts a comment. Args
 * are bound to the op's schema the way Python binds a call (positional, then
 * keywords, then defaults); words are classified as none/true/false, inf/nan,
 * dtypes, devices, or else symbolic integer expressions.
 */
#include "ir/ir.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    const char *text, *p, *end;
    const char *file;
    int line;
    const char *line_start;
    ptc_arena *arena;
    ptc_graph *g;
    ptc_error *err;
    /* Where the current graph begins (its nodes keep their own text_line and
     * text_col), so that verifier errors on a parsed graph point into the text. */
    int graph_line, graph_col;
} parser;

static int col_of(const parser *ps, const char *at) { return (int)(at - ps->line_start) + 1; }

/* Describes what is at p for "expected X, got Y". */
static void describe(const parser *ps, char *buf, size_t size)
{
    const char *p = ps->p;
    if (p >= ps->end) {
        snprintf(buf, size, "end of file");
        return;
    }
    if (*p == '\n') {
        snprintf(buf, size, "end of line");
        return;
    }
    size_t n = 0;
    while (p + n < ps->end && n < 16 && p[n] != '\n' && (n == 0 || !isspace((unsigned char)p[n])))
        n++;
    char tok[40];
    size_t k = 0;
    for (size_t i = 0; i < n && k + 4 < sizeof tok; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c < 0x7f)
            tok[k++] = (char)c;
        else
            k += (size_t)snprintf(tok + k, sizeof tok - k, "\\x%02x", c);
    }
    tok[k] = 0;
    snprintf(buf, size, "'%s'", tok);
}

__attribute__((format(printf, 3, 4))) static int fail_at(parser *ps, const char *at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ptc_verrorf(ps->err, PTC_ERR_PARSE, "parse", fmt, ap);
    va_end(ap);
    ptc_error_at(ps->err, ps->file, ps->line, col_of(ps, at));
    return -1;
}

static int expected(parser *ps, const char *what)
{
    char got[64];
    describe(ps, got, sizeof got);
    return fail_at(ps, ps->p, "expected %s, got %s", what, got);
}

static void ws(parser *ps)
{
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == '\n') {
            ps->p++;
            ps->line++;
            ps->line_start = ps->p;
        } else if (c == ' ' || c == '\t' || c == '\r') {
            ps->p++;
        } else if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n')
                ps->p++;
        } else {
            break;
        }
    }
}

static bool accept(parser *ps, char c)
{
    ws(ps);
    if (ps->p < ps->end && *ps->p == c) {
        ps->p++;
        return true;
    }
    return false;
}

static bool accept_str(parser *ps, const char *s)
{
    ws(ps);
    size_t n = strlen(s);
    if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, s, n) == 0) {
        ps->p += n;
        return true;
    }
    return false;
}

static int expect(parser *ps, char c, const char *what)
{
    if (accept(ps, c))
        return 0;
    return expected(ps, what);
}

static bool is_word_start(char c) { return isalpha((unsigned char)c) || c == '_'; }
static bool is_word_char(char c) { return isalnum((unsigned char)c) || c == '_'; }
static bool is_name_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '.'; }

/* A bare word [A-Za-z_][A-Za-z0-9_.]* (dots allowed: "prims.add"). */
static const char *word(parser *ps, bool dots)
{
    ws(ps);
    const char *s = ps->p;
    if (s >= ps->end || !is_word_start(*s))
        return NULL;
    while (ps->p < ps->end && (dots ? is_name_char(*ps->p) : is_word_char(*ps->p)))
        ps->p++;
    return ptc_arena_strndup(ps->arena, s, (size_t)(ps->p - s));
}

/* "%name" -> name. */
static const char *value_name(parser *ps)
{
    ws(ps);
    if (ps->p >= ps->end || *ps->p != '%')
        return NULL;
    const char *s = ++ps->p;
    while (ps->p < ps->end && is_name_char(*ps->p))
        ps->p++;
    if (ps->p == s) {
        fail_at(ps, s, "expected a value name after '%%'");
        return NULL;
    }
    return ptc_arena_strndup(ps->arena, s, (size_t)(ps->p - s));
}

static int string_lit(parser *ps, const char **out)
{
    ws(ps);
    if (ps->p >= ps->end || *ps->p != '"')
        return expected(ps, "a string");
    const char *start = ps->p++;
    ptc_buf b = {0};
    ptc_buf_puts(&b, "");
    while (ps->p < ps->end && *ps->p != '"') {
        char c = *ps->p++;
        if (c == '\n') {
            ptc_buf_free(&b);
            return fail_at(ps, start, "unterminated string");
        }
        if (c == '\\') {
            if (ps->p >= ps->end)
                break;
            char e = *ps->p++;
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case '"': c = '"'; break;
            case '\\': c = '\\'; break;
            case 'x': {
                int v = 0, k = 0;
                for (; k < 2 && ps->p < ps->end && isxdigit((unsigned char)*ps->p); k++, ps->p++)
                    v = v * 16 + (isdigit((unsigned char)*ps->p) ? *ps->p - '0'
                                                                 : (tolower((unsigned char)*ps->p) - 'a' + 10));
                if (k != 2 || v == 0) {
                    ptc_buf_free(&b);
                    return fail_at(ps, ps->p - k - 2, "bad \\x escape in string (two hex digits, "
                                                      "not 00)");
                }
                c = (char)v;
                break;
            }
            default:
                ptc_buf_free(&b);
                return fail_at(ps, ps->p - 2, "unknown escape '\\%c' in string", e);
            }
        }
        ptc_buf_putc(&b, c);
    }
    if (ps->p >= ps->end) {
        ptc_buf_free(&b);
        return fail_at(ps, start, "unterminated string");
    }
    ps->p++;
    *out = ptc_arena_strndup(ps->arena, b.data, b.len);
    ptc_buf_free(&b);
    return 0;
}

static int dim_expr(parser *ps, ptc_dim *out)
{
    ws(ps);
    const char *end;
    ptc_error derr;
    if (ptc_dim_parse(ps->arena, ps->p, &end, out, &derr)) {
        ps->p = end;
        return fail_at(ps, end, "%s", derr.msg);
    }
    ps->p = end;
    return 0;
}

static int dim_list(parser *ps, char close, ptc_dim *dims, int *n, int max, const char *what)
{
    *n = 0;
    if (accept(ps, close))
        return 0;
    do {
        if (*n >= max)
            return fail_at(ps, ps->p, "too many %s (at most %d)", what, max);
        const char *at = (ws(ps), ps->p);
        if (dim_expr(ps, &dims[*n]))
            return -1;
        /* torch has neither negative sizes nor negative strides */
        if (!dims[*n].sym && dims[*n].value < 0)
            return fail_at(ps, at, "negative %s %lld", close == ']' ? "size" : "stride",
                           (long long)dims[*n].value);
        (*n)++;
    } while (accept(ps, ','));
    char want[32];
    snprintf(want, sizeof want, "',' or '%c'", close);
    return expect(ps, close, want);
}

static int device_word(const char *w, parser *ps, ptc_device *dev)
{
    /* "cuda" may be followed by ":N" */
    if (strcmp(w, "cuda") == 0 && ps->p < ps->end && *ps->p == ':' && ps->p + 1 < ps->end &&
        isdigit((unsigned char)ps->p[1])) {
        const char *s = ++ps->p;
        while (ps->p < ps->end && isdigit((unsigned char)*ps->p))
            ps->p++;
        char buf[32];
        snprintf(buf, sizeof buf, "cuda:%.*s", (int)(ps->p - s < 10 ? ps->p - s : 10), s);
        if (ps->p - s > 4 || ptc_device_parse(buf, dev))
            return fail_at(ps, s, "bad device index");
        return 1;
    }
    return ptc_device_parse(w, dev) == 0 ? 1 : 0;
}

/* TYPE [DEVICE] [grad] ; device_required for graph inputs. */
static int tensor_type(parser *ps, ptc_ttype *t, bool device_required, bool *has_device)
{
    memset(t, 0, sizeof *t);
    const char *at = (ws(ps), ps->p);
    const char *dt = word(ps, false);
    int d = dt ? ptc_dtype_from_name(dt) : -1;
    if (d < 0) {
        ps->p = at;
        return expected(ps, "a dtype (bool, u8, i8, i16, i32, i64, f16, bf16, f32, f64)");
    }
    t->dtype = (ptc_dtype)d;
    if (expect(ps, '[', "'[' after the dtype"))
        return -1;
    int n;
    if (dim_list(ps, ']', t->shape, &n, PTC_MAX_DIMS, "dims"))
        return -1;
    t->ndim = (int8_t)n;
    if (accept(ps, '{')) {
        int ns;
        const char *sat = ps->p;
        if (dim_list(ps, '}', t->strides, &ns, PTC_MAX_DIMS, "strides"))
            return -1;
        if (ns != n)
            return fail_at(ps, sat, "%d strides given for %d dims", ns, n);
        t->layout = PTC_LAYOUT_STRIDED;
    }
    *has_device = false;
    const char *save = (ws(ps), ps->p);
    int save_line = ps->line;
    const char *save_ls = ps->line_start;
    const char *w = word(ps, false);
    if (w) {
        int r = device_word(w, ps, &t->device);
        if (r < 0)
            return -1;
        if (r > 0) {
            *has_device = true;
            save = (ws(ps), ps->p);
            save_line = ps->line;
            save_ls = ps->line_start;
            w = word(ps, false);
        }
        if (w && strcmp(w, "grad") == 0) {
            t->requires_grad = true;
        } else {
            ps->p = save;
            ps->line = save_line;
            ps->line_start = save_ls;
        }
    }
    if (device_required && !*has_device)
        return expected(ps, "a device (cpu, cuda, cuda:N) after the input's type");
    return 0;
}

/* Is the text at p a float literal (as opposed to an integer expression)? */
static bool looks_float(const char *p, const char *end)
{
    if (p < end && *p == '-')
        p++;
    if (p >= end || !isdigit((unsigned char)*p))
        return false;
    while (p < end && isdigit((unsigned char)*p))
        p++;
    if (p < end && *p == '.')
        return true;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        return p < end && isdigit((unsigned char)*p);
    }
    return false;
}

static int parse_value(parser *ps, ptc_arg *out, int depth);

static int parse_list(parser *ps, ptc_arg *out, int depth)
{
    const char *start = ps->p - 1;
    int n = 0, cap = 8;
    ptc_arg *items = PTC_NEWN(ps->arena, ptc_arg, cap);
    if (!accept(ps, ']')) {
        do {
            if (n == cap) {
                ptc_arg *bigger = PTC_NEWN(ps->arena, ptc_arg, cap * 2);
                memcpy(bigger, items, sizeof *items * (size_t)n);
                items = bigger;
                cap *= 2;
            }
            ws(ps);
            const char *at = ps->p;
            if (parse_value(ps, &items[n], depth + 1))
                return -1;
            int k = items[n].kind;
            if (k != PTC_ARG_VALUE && k != PTC_ARG_NONE && k != PTC_ARG_INT)
                return fail_at(ps, at, "lists hold tensors, none or ints");
            n++;
        } while (accept(ps, ','));
        if (expect(ps, ']', "',' or ']'"))
            return -1;
    }
    bool ints = true, values = true;
    for (int i = 0; i < n; i++) {
        if (items[i].kind != PTC_ARG_INT)
            ints = false;
        if (items[i].kind == PTC_ARG_INT)
            values = false;
    }
    if (n == 0 || ints) {
        ptc_dim *d = PTC_NEWN(ps->arena, ptc_dim, n > 0 ? n : 1);
        for (int i = 0; i < n; i++)
            d[i] = items[i].i;
        *out = (ptc_arg){.kind = PTC_ARG_INTS};
        out->is.n = n;
        out->is.d = d;
    } else if (values) {
        ptc_value **v = PTC_NEWN(ps->arena, ptc_value *, n);
        for (int i = 0; i < n; i++)
            v[i] = items[i].kind == PTC_ARG_VALUE ? items[i].v : NULL;
        *out = (ptc_arg){.kind = PTC_ARG_VALUES};
        out->vs.n = n;
        out->vs.v = v;
    } else {
        return fail_at(ps, start, "a list mixes tensors and ints");
    }
    return 0;
}

static int parse_value(parser *ps, ptc_arg *out, int depth)
{
    ws(ps);
    if (depth > 2)
        return fail_at(ps, ps->p, "lists nest too deeply");
    const char *at = ps->p;
    if (at >= ps->end)
        return expected(ps, "an argument");
    char c = *at;
    if (c == '%') {
        const char *name = value_name(ps);
        if (!name)
            return -1;
        ptc_value *v = ptc_graph_find_value(ps->g, name);
        if (!v)
            return fail_at(ps, at, "use of undefined value %%%s", name);
        *out = ptc_arg_value(v);
        return 0;
    }
    if (c == '[') {
        ps->p++;
        return parse_list(ps, out, depth);
    }
    if (c == '"') {
        const char *s;
        if (string_lit(ps, &s))
            return -1;
        *out = (ptc_arg){.kind = PTC_ARG_STR, .s = s};
        return 0;
    }
    if (c == '-' && ps->end - at >= 4 && memcmp(at, "-inf", 4) == 0 &&
        (ps->end - at == 4 || !is_word_char(at[4]))) {
        ps->p += 4;
        *out = ptc_arg_float(-INFINITY);
        return 0;
    }
    if (looks_float(at, ps->end)) {
        char *e;
        double f = strtod(at, &e);
        ps->p = e;
        *out = ptc_arg_float(f);
        return 0;
    }
    if (is_word_start(c)) {
        const char *w = word(ps, false);
        if (strcmp(w, "none") == 0) {
            *out = ptc_arg_none();
            return 0;
        }
        if (strcmp(w, "true") == 0 || strcmp(w, "false") == 0) {
            *out = ptc_arg_bool(w[0] == 't');
            return 0;
        }
        if (strcmp(w, "inf") == 0 || strcmp(w, "nan") == 0) {
            *out = ptc_arg_float(w[0] == 'i' ? INFINITY : NAN);
            return 0;
        }
        int dt = ptc_dtype_from_name(w);
        if (dt >= 0) {
            *out = ptc_arg_dtype((ptc_dtype)dt);
            return 0;
        }
        ptc_device dev;
        int r = device_word(w, ps, &dev);
        if (r < 0)
            return -1;
        if (r > 0) {
            *out = ptc_arg_device(dev);
            return 0;
        }
        ps->p = at; /* a symbolic integer expression */
    }
    if (is_word_start(c) || isdigit((unsigned char)c) || c == '-' || c == '(') {
        ptc_dim d;
        if (dim_expr(ps, &d))
            return -1;
        *out = ptc_arg_dim(d);
        return 0;
    }
    return expected(ps, "an argument");
}

static ptc_device args_device(const ptc_arg *args, int n)
{
    for (int i = 0; i < n; i++) {
        if (args[i].kind == PTC_ARG_VALUE)
            return args[i].v->type.device;
        if (args[i].kind == PTC_ARG_VALUES)
            for (int j = 0; j < args[i].vs.n; j++)
                if (args[i].vs.v[j])
                    return args[i].vs.v[j]->type.device;
    }
    return PTC_CPU;
}

static bool is_tensor_list_kind(int k) { return k == PTC_PK_TENSOR_LIST || k == PTC_PK_TENSOR_OPT_LIST; }

/* OP '(' args ')' bound to the schema into args[nparams]. */
static int call_args(parser *ps, ptc_op op, const char *op_at, ptc_arg *args)
{
    const ptc_schema *s = ptc_op_schema(op);
    bool given[16] = {false};
    ptc_args_defaults(op, args);
    int npos = 0;
    bool seen_kw = false;
    if (!accept(ps, ')')) {
        do {
            ws(ps);
            const char *at = ps->p;
            /* keyword?  name '=' */
            const char *q = at;
            while (q < ps->end && is_word_char(*q))
                q++;
            const char *r = q;
            while (r < ps->end && (*r == ' ' || *r == '\t'))
                r++;
            int idx;
            if (q > at && is_word_start(*at) && r < ps->end && *r == '=') {
                char name[64];
                snprintf(name, sizeof name, "%.*s", (int)(q - at < 63 ? q - at : 63), at);
                idx = ptc_param_index(op, name);
                if (idx < 0)
                    return fail_at(ps, at, "%s has no argument '%s'", s->name, name);
                if (given[idx])
                    return fail_at(ps, at, "argument '%s' of %s given twice", name, s->name);
                ps->p = r + 1;
                seen_kw = true;
            } else {
                if (seen_kw)
                    return fail_at(ps, at, "positional argument after keyword arguments");
                if (npos >= s->nparams || s->params[npos].kwarg_only)
                    return fail_at(ps, at, "too many positional arguments for %s (takes %d)",
                                   s->name, npos);
                idx = npos++;
            }
            if (parse_value(ps, &args[idx], 0))
                return -1;
            if (args[idx].kind == PTC_ARG_INTS && args[idx].is.n == 0 &&
                is_tensor_list_kind(s->params[idx].kind))
                args[idx] = (ptc_arg){.kind = PTC_ARG_VALUES};
            given[idx] = true;
        } while (accept(ps, ','));
        if (expect(ps, ')', "',' or ')' after the arguments"))
            return -1;
    }
    for (int i = 0; i < s->nparams; i++)
        if (!given[i] && !s->params[i].has_default)
            return fail_at(ps, op_at, "%s: missing argument '%s'", s->name, s->params[i].name);
    ptc_error cerr;
    if (ptc_args_check(op, args, s->nparams, &cerr))
        return fail_at(ps, op_at, "%s", cerr.msg);
    ptc_args_normalize(ps->arena, op, args);
    return 0;
}

/* '@' ["file"[:L[:C]]] ["text"] [[module]] */
static int source_loc(parser *ps, ptc_srcloc *loc, const char **module)
{
    ws(ps);
    if (ps->p < ps->end && *ps->p == '"') {
        if (string_lit(ps, &loc->file))
            return -1;
        if (ps->p < ps->end && *ps->p == ':' && ps->p + 1 < ps->end && isdigit((unsigned char)ps->p[1])) {
            char *e;
            long v = strtol(ps->p + 1, &e, 10);
            if (v <= 0 || v > 100000000)
                return fail_at(ps, ps->p + 1, "bad line number");
            loc->line = (int)v;
            ps->p = e;
            if (ps->p < ps->end && *ps->p == ':' && ps->p + 1 < ps->end && isdigit((unsigned char)ps->p[1])) {
                v = strtol(ps->p + 1, &e, 10);
                if (v <= 0 || v > 100000000)
                    return fail_at(ps, ps->p + 1, "bad column number");
                loc->col = (int)v;
                ps->p = e;
            }
        }
        ws(ps);
        if (ps->p < ps->end && *ps->p == '"' && string_lit(ps, &loc->text))
            return -1;
    }
    if (accept(ps, '[')) {
        const char *s = ps->p;
        while (ps->p < ps->end && *ps->p != ']' && *ps->p != '\n')
            ps->p++;
        if (ps->p >= ps->end || *ps->p != ']')
            return fail_at(ps, s - 1, "unterminated module path (expected ']')");
        *module = ptc_arena_strndup(ps->arena, s, (size_t)(ps->p - s));
        ps->p++;
    }
    if (!loc->file && !loc->text && !*module)
        return expected(ps, "a source location after '@'");
    return 0;
}

static int node_stmt(parser *ps)
{
    ws(ps);
    const char *stmt_at = ps->p;
    int stmt_line = ps->line, stmt_col = col_of(ps, stmt_at);
    const char *names[256];
    int nout = 0;
    do {
        ws(ps);
        const char *at = ps->p;
        const char *name = value_name(ps);
        if (!name)
            return ps->err->cls ? -1 : expected(ps, "a value name");
        if (nout >= 256)
            return fail_at(ps, at, "too many outputs");
        if (ptc_graph_find_value(ps->g, name))
            return fail_at(ps, at, "value %%%s is defined twice", name);
        for (int i = 0; i < nout; i++)
            if (strcmp(names[i], name) == 0)
                return fail_at(ps, at, "value %%%s is defined twice", name);
        names[nout++] = name;
    } while (accept(ps, ','));
    if (expect(ps, '=', "'=' after the result names"))
        return -1;
    ws(ps);
    const char *op_at = ps->p;
    const char *opname = word(ps, true);
    if (!opname)
        return expected(ps, "an op name");
    int op = ptc_op_lookup(opname);
    if (op < 0)
        return fail_at(ps, op_at, "unknown op '%s'", opname);
    if (expect(ps, '(', "'(' after the op name"))
        return -1;
    ptc_arg args[16];
    if (call_args(ps, (ptc_op)op, op_at, args))
        return -1;
    const ptc_schema *s = ptc_op_schema((ptc_op)op);
    if (s->nreturns >= 0 && s->nreturns != nout)
        return fail_at(ps, stmt_at, "%s returns %d value%s, %d named", s->name, s->nreturns,
                       s->nreturns == 1 ? "" : "s", nout);
    if (expect(ps, ':', "':' and the result types"))
        return -1;
    ptc_ttype *types = PTC_NEWN(ps->arena, ptc_ttype, nout);
    ptc_device dflt = args_device(args, s->nparams);
    for (int i = 0; i < nout; i++) {
        if (i && expect(ps, ',', "',' and one more result type"))
            return -1;
        bool has_dev;
        if (tensor_type(ps, &types[i], false, &has_dev))
            return -1;
        if (!has_dev)
            types[i].device = dflt;
    }
    ptc_srcloc loc = {0};
    const char *module = NULL;
    if (accept(ps, '@') && source_loc(ps, &loc, &module))
        return -1;
    const char *prov[64];
    int nprov = 0;
    if (accept_str(ps, "<-")) {
        do {
            const char *at = (ws(ps), ps->p);
            const char *name = value_name(ps);
            if (!name)
                return ps->err->cls ? -1 : expected(ps, "a provenance value name");
            if (nprov >= 64)
                return fail_at(ps, at, "too many provenance entries");
            prov[nprov++] = name;
        } while (accept(ps, ','));
    }
    ptc_node *n = ptc_graph_add_node(ps->g, (ptc_op)op, args, s->nparams, nout, types, names);
    n->loc = loc;
    n->module_path = module;
    n->nprov = nprov;
    n->prov = ptc_arena_dup(ps->arena, prov, sizeof(char *) * (size_t)(nprov > 0 ? nprov : 1));
    n->text_line = stmt_line;
    n->text_col = stmt_col;
    return 0;
}

static int graph_def(parser *ps)
{
    ws(ps);
    const char *name = word(ps, true);
    if (!name)
        return expected(ps, "a graph name");
    ps->g = ptc_graph_new(ps->arena, name);
    if (expect(ps, '(', "'(' after the graph name"))
        return -1;
    if (!accept(ps, ')')) {
        do {
            ws(ps);
            const char *at = ps->p;
            const char *vname = value_name(ps);
            if (!vname)
                return ps->err->cls ? -1 : expected(ps, "an input name like %x");
            if (ptc_graph_find_value(ps->g, vname))
                return fail_at(ps, at, "input %%%s is declared twice", vname);
            if (expect(ps, ':', "':' and the input's type"))
                return -1;
            ptc_ttype t;
            bool has_dev;
            if (tensor_type(ps, &t, true, &has_dev))
                return -1;
            ptc_graph_add_input(ps->g, vname, &t);
        } while (accept(ps, ','));
        if (expect(ps, ')', "',' or ')' after the inputs"))
            return -1;
    }
    if (expect(ps, '{', "'{' to open the graph body"))
        return -1;
    for (;;) {
        ws(ps);
        if (ps->p >= ps->end)
            return expected(ps, "'return' before the end of the graph");
        if (*ps->p == '%') {
            if (node_stmt(ps))
                return -1;
            continue;
        }
        const char *at = ps->p;
        const char *w = word(ps, false);
        if (!w || strcmp(w, "return") != 0) {
            ps->p = at;
            return expected(ps, "a node ('%name = op(...)') or 'return'");
        }
        break;
    }
    if (expect(ps, '(', "'(' after return"))
        return -1;
    ptc_value **outs = NULL;
    int nouts = 0, cap = 0;
    if (!accept(ps, ')')) {
        do {
            ws(ps);
            const char *at = ps->p;
            const char *vname = value_name(ps);
            if (!vname)
                return ps->err->cls ? -1 : expected(ps, "a returned value like %x");
            ptc_value *v = ptc_graph_find_value(ps->g, vname);
            if (!v)
                return fail_at(ps, at, "return of undefined value %%%s", vname);
            if (nouts == cap) {
                int ncap = cap ? cap * 2 : 8;
                ptc_value **bigger = PTC_NEWN(ps->arena, ptc_value *, ncap);
                if (outs)
                    memcpy(bigger, outs, sizeof *outs * (size_t)nouts);
                outs = bigger;
                cap = ncap;
            }
            outs[nouts++] = v;
        } while (accept(ps, ','));
        if (expect(ps, ')', "',' or ')' after the returned values"))
            return -1;
    }
    ptc_graph_set_outputs(ps->g, outs, nouts);
    if (expect(ps, '}', "'}' to close the graph"))
        return -1;
    return 0;
}

static int check_header(parser *ps)
{
    /* The first non-blank line must be the version line. */
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\r' || *ps->p == '\n')) {
        if (*ps->p == '\n') {
            ps->line++;
            ps->line_start = ps->p + 1;
        }
        ps->p++;
    }
    static const char head[] = "# ptc ir v";
    if ((size_t)(ps->end - ps->p) < sizeof head - 1 || memcmp(ps->p, head, sizeof head - 1) != 0)
        return fail_at(ps, ps->p, "expected '# ptc ir v1' on the first line");
    const char *v = ps->p + sizeof head - 1;
    if (!(v < ps->end && *v == '1' && (v + 1 == ps->end || isspace((unsigned char)v[1]))))
        return fail_at(ps, v, "unsupported .ptir version (this ptc reads v1)");
    return 0;
}

ptc_module *ptc_parse_module(const char *text, size_t len, const char *filename, ptc_error *err)
{
    ptc_error local;
    if (!err)
        err = &local;
    ptc_error_clear(err);
    ptc_arena *arena = ptc_arena_new();
    ptc_module *m = PTC_NEW(arena, ptc_module);
    m->arena = arena;
    parser ps = {text, text, text + len, filename ? filename : "<input>", 1, text, arena, NULL, err,
                 0, 0};
    const char *nul = memchr(text, 0, len);
    if (nul) {
        for (const char *q = text; q < nul; q++)
            if (*q == '\n') {
                ps.line++;
                ps.line_start = q + 1;
            }
        fail_at(&ps, nul, "unexpected NUL byte");
        goto fail;
    }
    if (check_header(&ps))
        goto fail;
    int cap = 0;
    for (;;) {
        ws(&ps);
        if (ps.p >= ps.end)
            break;
        const char *at = ps.p;
        ps.graph_line = ps.line;
        ps.graph_col = col_of(&ps, at);
        const char *w = word(&ps, false);
        if (!w || strcmp(w, "graph") != 0) {
            ps.p = at;
            expected(&ps, "'graph'");
            goto fail;
        }
        if (graph_def(&ps))
            goto fail;
        if (ptc_ir_verify(ps.g, 0, err)) {
            /* Point at the node's statement, or at the graph for errors
             * about its inputs or outputs. */
            ptc_node *bad = err->has_node ? ptc_graph_find_node(ps.g, err->node_id) : NULL;
            err->cls = PTC_ERR_PARSE;
            snprintf(err->stage, sizeof err->stage, "parse");
            if (bad)
                ptc_error_at(err, ps.file, bad->text_line, bad->text_col);
            else
                ptc_error_at(err, ps.file, ps.graph_line, ps.graph_col);
            goto fail;
        }
        if (m->ngraphs == cap) {
            int ncap = cap ? cap * 2 : 4;
            ptc_graph **bigger = PTC_NEWN(arena, ptc_graph *, ncap);
            if (m->graphs)
                memcpy(bigger, m->graphs, sizeof *bigger * (size_t)m->ngraphs);
            m->graphs = bigger;
            cap = ncap;
        }
        m->graphs[m->ngraphs++] = ps.g;
    }
    if (m->ngraphs == 0) {
        expected(&ps, "at least one graph");
        goto fail;
    }
    return m;
fail:
    ptc_arena_free(arena);
    return NULL;
}

ptc_module *ptc_parse_file(const char *path, ptc_error *err)
{
    size_t len;
    char *text = ptc_read_file(path, &len, err);
    if (!text)
        return NULL;
    ptc_module *m = ptc_parse_module(text, len, path, err);
    free(text);
    return m;
}

void ptc_module_free(ptc_module *m)
{
    if (m)
        ptc_arena_free(m->arena);
}
