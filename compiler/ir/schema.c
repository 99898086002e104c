/* Op schemas: the signatures written in ops.def, parsed once into ptc_schema,
 * and the checks and canonicalisation of argument lists against them.
 *
 * The schema strings are PyTorch's syntax ("add(Tensor self, Tensor|Scalar
 * other, *, Scalar alpha=1) -> Tensor") so that capture can bind torch call
 * arguments by name, the printer can omit defaults, and the parser can accept
 * positional and keyword forms alike. A malformed schema is a bug in ops.def
 * and aborts at first use.
 */
#include "ir/ir.h"

#include <ctype.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    ptc_opstage stage;
    const char *schema;
} optable[] = {
#define TORCH PTC_STAGE_TORCH
#define PRIM PTC_STAGE_PRIM
#define BOTH PTC_STAGE_BOTH
#define OP(id, stage, schema, meta, ref, flags, ...) {stage, schema},
#include "ir/ops.def"
#undef OP
#undef TORCH
#undef PRIM
#undef BOTH
};
_Static_assert(sizeof optable / sizeof *optable == PTC_OP_COUNT, "op table out of step");

static ptc_schema schemas[PTC_OP_COUNT];
static char names[PTC_OP_COUNT][64];
static pthread_once_t schemas_once = PTHREAD_ONCE_INIT;
static ptc_arena *schema_arena;

static const char *paramkind_names[PTC_PK_COUNT] = {
    [PTC_PK_TENSOR] = "Tensor",
    [PTC_PK_TENSOR_OPT] = "Tensor?",
    [PTC_PK_TENSOR_LIST] = "Tensor[]",
    [PTC_PK_TENSOR_OPT_LIST] = "Tensor?[]",
    [PTC_PK_TENSOR_SCALAR] = "Tensor|Scalar",
    [PTC_PK_TENSOR_SCALAR_OPT] = "Tensor|Scalar?",
    [PTC_PK_SCALAR] = "Scalar",
    [PTC_PK_SCALAR_OPT] = "Scalar?",
    [PTC_PK_INT] = "int",
    [PTC_PK_INT_OPT] = "int?",
    [PTC_PK_INT_LIST] = "int[]",
    [PTC_PK_INT_LIST_OPT] = "int[]?",
    [PTC_PK_FLOAT] = "float",
    [PTC_PK_FLOAT_OPT] = "float?",
    [PTC_PK_BOOL] = "bool",
    [PTC_PK_STR] = "str",
    [PTC_PK_STR_OPT] = "str?",
    [PTC_PK_DTYPE] = "ScalarType",
    [PTC_PK_DTYPE_OPT] = "ScalarType?",
    [PTC_PK_DEVICE] = "Device",
    [PTC_PK_DEVICE_OPT] = "Device?",
};

_Noreturn static void schema_bug(int op, const char *what)
{
    fprintf(stderr, "ptc: internal error: ops.def schema of op %d is malformed (%s): %s\n", op,
            what, optable[op].schema);
    abort();
}

static void skip(const char **p)
{
    while (**p == ' ')
        (*p)++;
}

static bool eat(const char **p, const char *tok)
{
    skip(p);
    size_t n = strlen(tok);
    if (strncmp(*p, tok, n) != 0)
        return false;
    *p += n;
    return true;
}

static int parse_kind(int op, const char **p, int8_t *list_len)
{
    skip(p);
    static const struct { const char *text; int kind; } kinds[] = {
        /* longest first */
        {"Tensor|Scalar?", PTC_PK_TENSOR_SCALAR_OPT}, {"Tensor|Scalar", PTC_PK_TENSOR_SCALAR},
        {"Tensor?[]", PTC_PK_TENSOR_OPT_LIST},        {"Tensor[]", PTC_PK_TENSOR_LIST},
        {"Tensor?", PTC_PK_TENSOR_OPT},               {"Tensor", PTC_PK_TENSOR},
        {"Scalar?", PTC_PK_SCALAR_OPT},               {"Scalar", PTC_PK_SCALAR},
        {"ScalarType?", PTC_PK_DTYPE_OPT},            {"ScalarType", PTC_PK_DTYPE},
        {"int[]?", PTC_PK_INT_LIST_OPT},              {"int[]", PTC_PK_INT_LIST},
        {"int?", PTC_PK_INT_OPT},                     {"float?", PTC_PK_FLOAT_OPT},
        {"float", PTC_PK_FLOAT},                      {"bool", PTC_PK_BOOL},
        {"str?", PTC_PK_STR_OPT},                     {"str", PTC_PK_STR},
        {"Device?", PTC_PK_DEVICE_OPT},               {"Device", PTC_PK_DEVICE},
    };
    *list_len = 0;
    /* "ScalarType" must be tried before "Scalar": order the checks so. */
    if (strncmp(*p, "ScalarType", 10) == 0) {
        bool opt = (*p)[10] == '?';
        *p += 10 + opt;
        return opt ? PTC_PK_DTYPE_OPT : PTC_PK_DTYPE;
    }
    if (strncmp(*p, "int[", 4) == 0 && isdigit((unsigned char)(*p)[4])) {
        *list_len = (int8_t)((*p)[4] - '0');
        if ((*p)[5] != ']')
            schema_bug(op, "int[N]");
        *p += 6;
        return PTC_PK_INT_LIST;
    }
    if (strncmp(*p, "int", 3) == 0 && (*p)[3] == ' ') {
        *p += 3;
        return PTC_PK_INT;
    }
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        size_t n = strlen(kinds[i].text);
        if (strncmp(*p, kinds[i].text, n) == 0 && ((*p)[n] == ' ')) {
            *p += n;
            return kinds[i].kind;
        }
    }
    schema_bug(op, "unknown type");
}

static ptc_arg parse_default(int op, const char **p)
{
    skip(p);
    const char *s = *p;
    if (eat(p, "None"))
        return ptc_arg_none();
    if (eat(p, "True"))
        return ptc_arg_bool(true);
    if (eat(p, "False"))
        return ptc_arg_bool(false);
    if (*s == '"') {
        const char *e = strchr(s + 1, '"');
        if (!e)
            schema_bug(op, "string default");
        *p = e + 1;
        return (ptc_arg){.kind = PTC_ARG_STR, .s = ptc_arena_strndup(schema_arena, s + 1, (size_t)(e - s - 1))};
    }
    if (*s == '[') {
        int64_t vals[16];
        int n = 0;
        (*p)++;
        while (!eat(p, "]")) {
            char *end;
            if (n >= 16)
                schema_bug(op, "list default too long");
            vals[n++] = strtoll(*p, &end, 10);
            if (end == *p)
                schema_bug(op, "list default");
            *p = end;
            eat(p, ",");
        }
        return ptc_arg_ints(schema_arena, vals, n);
    }
    char *end;
    bool is_float = false;
    for (const char *q = s; *q && *q != ',' && *q != ')'; q++)
        if (*q == '.' || *q == 'e')
            is_float = true;
    if (is_float) {
        double f = strtod(s, &end);
        if (end == s)
            schema_bug(op, "float default");
        *p = end;
        return ptc_arg_float(f);
    }
    long long v = strtoll(s, &end, 10);
    if (end == s)
        schema_bug(op, "default");
    *p = end;
    return ptc_arg_int(v);
}

/* The words each str parameter accepts (torch checks them when called; ptc's
 * meta inference, for every op alike). Every str parameter of ops.def must
 * have its row here. */
static const struct {
    const char *op, *param;
    const char *const words[4];
} str_words[] = {
    {"gelu", "approximate", {"none", "tanh"}},
    {"div", "rounding_mode", {"trunc", "floor"}},
};

static const char *const *words_of(int op, const ptc_param *prm)
{
    for (size_t i = 0; i < sizeof str_words / sizeof *str_words; i++)
        if (strcmp(str_words[i].op, names[op]) == 0 && strcmp(str_words[i].param, prm->name) == 0)
            return str_words[i].words;
    schema_bug(op, "a str parameter without its words in schema.c");
}

static bool is_tensorish(int kind)
{
    return kind == PTC_PK_TENSOR || kind == PTC_PK_TENSOR_OPT || kind == PTC_PK_TENSOR_LIST ||
           kind == PTC_PK_TENSOR_OPT_LIST || kind == PTC_PK_TENSOR_SCALAR ||
           kind == PTC_PK_TENSOR_SCALAR_OPT;
}

static void parse_schema(int op)
{
    ptc_schema *s = &schemas[op];
    const char *p = optable[op].schema;
    s->text = p;
    s->stage = optable[op].stage;
    const char *paren = strchr(p, '(');
    if (!paren || paren - p >= (long)sizeof names[op])
        schema_bug(op, "name");
    memcpy(names[op], p, (size_t)(paren - p));
    s->name = names[op];
    p = paren + 1;
    bool kwonly = false, positional = true;
    while (!eat(&p, ")")) {
        if (s->nparams > 0 && !eat(&p, ","))
            schema_bug(op, "expected ','");
        if (eat(&p, "*")) {
            kwonly = true;
            continue;
        }
        if (s->nparams >= (int)(sizeof s->params / sizeof *s->params))
            schema_bug(op, "too many params");
        ptc_param *prm = &s->params[s->nparams++];
        prm->kind = (uint8_t)parse_kind(op, &p, &prm->list_len);
        skip(&p);
        const char *n0 = p;
        while (isalnum((unsigned char)*p) || *p == '_')
            p++;
        if (p == n0)
            schema_bug(op, "param name");
        prm->name = ptc_arena_strndup(schema_arena, n0, (size_t)(p - n0));
        prm->kwarg_only = kwonly;
        if (prm->kind == PTC_PK_STR || prm->kind == PTC_PK_STR_OPT)
            prm->words = words_of(op, prm);
        if (eat(&p, "=")) {
            prm->has_default = true;
            prm->def = parse_default(op, &p);
            if (prm->kind == PTC_PK_FLOAT || prm->kind == PTC_PK_FLOAT_OPT) {
                if (prm->def.kind == PTC_ARG_INT)
                    prm->def = ptc_arg_float((double)prm->def.i.value);
            }
            if (prm->kind == PTC_PK_INT_LIST && prm->def.kind == PTC_ARG_INT) {
                int64_t v[8];
                for (int i = 0; i < prm->list_len; i++)
                    v[i] = prm->def.i.value;
                prm->def = ptc_arg_ints(schema_arena, v, prm->list_len);
            }
        }
        if (positional && !kwonly && is_tensorish(prm->kind))
            s->npositional = s->nparams;
        else
            positional = false;
    }
    if (!eat(&p, "->"))
        schema_bug(op, "expected '->'");
    skip(&p);
    if (eat(&p, "Tensor[]")) {
        s->nreturns = -1;
    } else if (eat(&p, "(")) {
        s->nreturns = 0;
        do {
            if (!eat(&p, "Tensor"))
                schema_bug(op, "return type");
            s->nreturns++;
        } while (eat(&p, ","));
        if (!eat(&p, ")"))
            schema_bug(op, "return tuple");
    } else if (eat(&p, "Tensor")) {
        s->nreturns = 1;
    } else {
        schema_bug(op, "return type");
    }
}

static void parse_all(void)
{
    schema_arena = ptc_arena_new();
    for (int i = 0; i < PTC_OP_COUNT; i++)
        parse_schema(i);
}

const ptc_schema *ptc_op_schema(ptc_op op)
{
    PTC_ASSERT((unsigned)op < PTC_OP_COUNT);
    pthread_once(&schemas_once, parse_all);
    return &schemas[op];
}

const char *ptc_op_name(ptc_op op) { return ptc_op_schema(op)->name; }

int ptc_op_lookup(const char *name)
{
    pthread_once(&schemas_once, parse_all);
    for (int i = 0; i < PTC_OP_COUNT; i++)
        if (strcmp(names[i], name) == 0)
            return i;
    return -1;
}

int ptc_param_index(ptc_op op, const char *name)
{
    const ptc_schema *s = ptc_op_schema(op);
    for (int i = 0; i < s->nparams; i++)
        if (strcmp(s->params[i].name, name) == 0)
            return i;
    return -1;
}

const char *ptc_paramkind_name(int kind)
{
    return (unsigned)kind < PTC_PK_COUNT ? paramkind_names[kind] : "?";
}

/* ---- args ------------------------------------------------------------------ */

ptc_arg ptc_arg_none(void) { return (ptc_arg){.kind = PTC_ARG_NONE}; }
int ptc_arg_nvalues(const ptc_arg *a)
{
    return a->kind == PTC_ARG_VALUE ? 1 : a->kind == PTC_ARG_VALUES ? a->vs.n : 0;
}

ptc_value *ptc_arg_value_at(const ptc_arg *a, int k)
{
    return a->kind == PTC_ARG_VALUE ? a->v : a->vs.v[k];
}

ptc_arg ptc_arg_value(ptc_value *v) { return (ptc_arg){.kind = PTC_ARG_VALUE, .v = v}; }
ptc_arg ptc_arg_values(ptc_arena *a, ptc_value *const *v, int n)
{
    ptc_arg r = {.kind = PTC_ARG_VALUES};
    r.vs.n = n;
    r.vs.v = ptc_arena_dup(a, v, sizeof(ptc_value *) * (size_t)n);
    return r;
}
ptc_arg ptc_arg_int(int64_t i) { return (ptc_arg){.kind = PTC_ARG_INT, .i = ptc_dim_c(i)}; }
ptc_arg ptc_arg_dim(ptc_dim d) { return (ptc_arg){.kind = PTC_ARG_INT, .i = d}; }
ptc_arg ptc_arg_ints(ptc_arena *a, const int64_t *v, int n)
{
    ptc_arg r = {.kind = PTC_ARG_INTS};
    r.is.n = n;
    r.is.d = PTC_NEWN(a, ptc_dim, n);
    for (int i = 0; i < n; i++)
        r.is.d[i] = ptc_dim_c(v[i]);
    return r;
}
ptc_arg ptc_arg_dims(ptc_arena *a, const ptc_dim *d, int n)
{
    ptc_arg r = {.kind = PTC_ARG_INTS};
    r.is.n = n;
    r.is.d = ptc_arena_dup(a, d, sizeof(ptc_dim) * (size_t)n);
    return r;
}
ptc_arg ptc_arg_float(double f) { return (ptc_arg){.kind = PTC_ARG_FLOAT, .f = f}; }
ptc_arg ptc_arg_bool(bool b) { return (ptc_arg){.kind = PTC_ARG_BOOL, .b = b}; }
ptc_arg ptc_arg_str(ptc_arena *a, const char *s)
{
    return (ptc_arg){.kind = PTC_ARG_STR, .s = ptc_arena_strdup(a, s)};
}
ptc_arg ptc_arg_dtype(ptc_dtype dt) { return (ptc_arg){.kind = PTC_ARG_DTYPE, .dt = dt}; }
ptc_arg ptc_arg_device(ptc_device d) { return (ptc_arg){.kind = PTC_ARG_DEVICE, .dev = d}; }

bool ptc_arg_eq(const ptc_arg *x, const ptc_arg *y)
{
    if (x->kind != y->kind)
        return false;
    switch ((ptc_argkind)x->kind) {
    case PTC_ARG_NONE: return true;
    case PTC_ARG_VALUE: return x->v == y->v;
    case PTC_ARG_VALUES:
        if (x->vs.n != y->vs.n)
            return false;
        for (int i = 0; i < x->vs.n; i++)
            if (x->vs.v[i] != y->vs.v[i])
                return false;
        return true;
    case PTC_ARG_INT: return ptc_dim_eq(x->i, y->i);
    case PTC_ARG_INTS:
        if (x->is.n != y->is.n)
            return false;
        for (int i = 0; i < x->is.n; i++)
            if (!ptc_dim_eq(x->is.d[i], y->is.d[i]))
                return false;
        return true;
    case PTC_ARG_FLOAT:
        /* bitwise, so that nan == nan and -0.0 != 0.0 */
        return memcmp(&x->f, &y->f, sizeof x->f) == 0;
    case PTC_ARG_BOOL: return x->b == y->b;
    case PTC_ARG_STR: return strcmp(x->s, y->s) == 0;
    case PTC_ARG_DTYPE: return x->dt == y->dt;
    case PTC_ARG_DEVICE: return ptc_device_eq(x->dev, y->dev) && x->dev.index == y->dev.index;
    }
    return false;
}

void ptc_args_defaults(ptc_op op, ptc_arg *args)
{
    const ptc_schema *s = ptc_op_schema(op);
    for (int i = 0; i < s->nparams; i++)
        args[i] = s->params[i].has_default ? s->params[i].def : ptc_arg_none();
}

static const char *argkind_desc(const ptc_arg *a)
{
    switch ((ptc_argkind)a->kind) {
    case PTC_ARG_NONE: return "None";
    case PTC_ARG_VALUE: return "a tensor";
    case PTC_ARG_VALUES: return "a list of tensors";
    case PTC_ARG_INT: return "an int";
    case PTC_ARG_INTS: return "an int list";
    case PTC_ARG_FLOAT: return "a float";
    case PTC_ARG_BOOL: return "a bool";
    case PTC_ARG_STR: return "a string";
    case PTC_ARG_DTYPE: return "a dtype";
    case PTC_ARG_DEVICE: return "a device";
    }
    return "?";
}

static bool kind_ok(const ptc_param *p, const ptc_arg *a)
{
    int k = a->kind;
    bool none = k == PTC_ARG_NONE, num = k == PTC_ARG_INT || k == PTC_ARG_FLOAT || k == PTC_ARG_BOOL;
    switch ((ptc_paramkind)p->kind) {
    case PTC_PK_TENSOR: return k == PTC_ARG_VALUE && a->v;
    case PTC_PK_TENSOR_OPT: return (k == PTC_ARG_VALUE && a->v) || none;
    case PTC_PK_TENSOR_LIST:
        if (k != PTC_ARG_VALUES)
            return false;
        for (int i = 0; i < a->vs.n; i++)
            if (!a->vs.v[i])
                return false;
        return true;
    case PTC_PK_TENSOR_OPT_LIST: return k == PTC_ARG_VALUES;
    case PTC_PK_TENSOR_SCALAR: return (k == PTC_ARG_VALUE && a->v) || num;
    case PTC_PK_TENSOR_SCALAR_OPT: return (k == PTC_ARG_VALUE && a->v) || num || none;
    case PTC_PK_SCALAR: return num;
    case PTC_PK_SCALAR_OPT: return num || none;
    case PTC_PK_INT: return k == PTC_ARG_INT;
    case PTC_PK_INT_OPT: return k == PTC_ARG_INT || none;
    case PTC_PK_INT_LIST: return k == PTC_ARG_INTS || k == PTC_ARG_INT;
    case PTC_PK_INT_LIST_OPT: return k == PTC_ARG_INTS || k == PTC_ARG_INT || none;
    case PTC_PK_FLOAT: return k == PTC_ARG_FLOAT || (k == PTC_ARG_INT && !a->i.sym);
    case PTC_PK_FLOAT_OPT: return k == PTC_ARG_FLOAT || (k == PTC_ARG_INT && !a->i.sym) || none;
    case PTC_PK_BOOL: return k == PTC_ARG_BOOL;
    case PTC_PK_STR: return k == PTC_ARG_STR;
    case PTC_PK_STR_OPT: return k == PTC_ARG_STR || none;
    case PTC_PK_DTYPE: return k == PTC_ARG_DTYPE && a->dt != PTC_DTYPE_NONE;
    case PTC_PK_DTYPE_OPT: return k == PTC_ARG_DTYPE || none;
    case PTC_PK_DEVICE: return k == PTC_ARG_DEVICE;
    case PTC_PK_DEVICE_OPT: return k == PTC_ARG_DEVICE || none;
    case PTC_PK_COUNT: break;
    }
    return false;
}

int ptc_args_check(ptc_op op, const ptc_arg *args, int nargs, ptc_error *err)
{
    const ptc_schema *s = ptc_op_schema(op);
    if (nargs != s->nparams)
        return ptc_errorf(err, PTC_ERR_VERIFY, "verify", "%s: expected %d arguments, got %d",
                          s->name, s->nparams, nargs);
    for (int i = 0; i < nargs; i++) {
        const ptc_param *p = &s->params[i];
        if (!kind_ok(p, &args[i]))
            return ptc_errorf(err, PTC_ERR_VERIFY, "verify", "%s: argument '%s' expects %s, got %s",
                              s->name, p->name, ptc_paramkind_name(p->kind),
                              argkind_desc(&args[i]));
        if (p->kind == PTC_PK_INT_LIST && p->list_len > 0 && args[i].kind == PTC_ARG_INTS &&
            args[i].is.n != p->list_len && args[i].is.n != 1 &&
            !(args[i].is.n == 0 && p->has_default && p->def.kind == PTC_ARG_INTS && p->def.is.n == 0))
            return ptc_errorf(err, PTC_ERR_VERIFY, "verify",
                              "%s: argument '%s' expects %d ints, got %d", s->name, p->name,
                              p->list_len, args[i].is.n);
    }
    return 0;
}

void ptc_args_normalize(ptc_arena *a, ptc_op op, ptc_arg *args)
{
    const ptc_schema *s = ptc_op_schema(op);
    for (int i = 0; i < s->nparams; i++) {
        const ptc_param *p = &s->params[i];
        ptc_arg *x = &args[i];
        if ((p->kind == PTC_PK_INT_LIST || p->kind == PTC_PK_INT_LIST_OPT) &&
            (x->kind == PTC_ARG_INT || (x->kind == PTC_ARG_INTS && x->is.n == 1 && p->list_len > 1))) {
            ptc_dim v = x->kind == PTC_ARG_INT ? x->i : x->is.d[0];
            int n = p->list_len > 0 ? p->list_len : 1;
            ptc_dim d[8];
            for (int j = 0; j < n; j++)
                d[j] = v;
            *x = ptc_arg_dims(a, d, n);
        } else if ((p->kind == PTC_PK_FLOAT || p->kind == PTC_PK_FLOAT_OPT) && x->kind == PTC_ARG_INT) {
            *x = ptc_arg_float((double)x->i.value);
        }
    }
}

const ptc_arg *ptc_node_arg(const ptc_node *n, const char *param)
{
    int i = ptc_param_index(n->op, param);
    PTC_ASSERT(i >= 0 && i < n->nargs);
    return &n->args[i];
}
