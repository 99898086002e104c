/* Decoding code objects for the interpreter.
 *
 * Opcode numbers and inline-cache sizes come from the running Python's `opcode`
 * module, matched by name against the table in opcodes.h, so one build serves
 * 3.11 and 3.12. A code object is decoded once into one cap_instr per code unit
 * (EXTENDED_ARG folded, jump targets resolved, cache units marked), its
 * exception table parsed, and its positions (line/column spans) kept for source
 * locations. Decoded forms are cached by the code object's identity and hold a
 * reference to it, so the identity stays valid until the cache is cleared.
 */
#include "capture/interp/interp.h"

#include <stdlib.h>
#include <string.h>

cap_py cap_P;

typedef struct opinfo {
    const char *name;
    uint8_t h, flags;
} opinfo;

static const opinfo table[] = {
#define X(name, handler, flags) {#name, H_##handler, flags},
    CAP_OPCODES(X)
#undef X
};

/* Per opcode number of the running Python. */
static struct {
    uint8_t h, flags, ncache, known;
    char name[40];
} ops[256];

static int end_for_raw = -1, extended_arg_raw = -1, cache_raw = 0;
static int intrinsic1_count, intrinsic2_count;
static const char *intrinsic1_ok[] = {"INTRINSIC_UNARY_POSITIVE", "INTRINSIC_LIST_TO_TUPLE",
                                      "INTRINSIC_STOPITERATION_ERROR"};

const char *cap_opname(int raw)
{
    return raw >= 0 && raw < 256 && ops[raw].known ? ops[raw].name : "<unknown>";
}

static int cache_entries(PyObject *opcode_mod, PyObject *name, int number)
{
    PyObject *ce = PyObject_GetAttrString(opcode_mod, "_inline_cache_entries");
    long n = 0;
    if (!ce) {
        PyErr_Clear();
        return 0;
    }
    PyObject *v = NULL;
    if (PyDict_Check(ce))
        v = PyDict_GetItem(ce, name); /* 3.13+: by name */
    else if (PyList_Check(ce) && number < PyList_Size(ce))
        v = PyList_GetItem(ce, number);
    if (v)
        n = PyLong_AsLong(v);
    Py_DECREF(ce);
    return (int)n;
}

static int init_nb_ops(PyObject *dis)
{
    static const char *syms[] = {
#define X(id, sym) sym,
        CAP_NB_OPS(X)
#undef X
    };
    PyObject *nb = PyObject_GetAttrString(dis, "_nb_ops");
    if (!nb)
        return -1;
    Py_ssize_t n = PySequence_Size(nb);
    if (n < 0 || n > 26) {
        Py_DECREF(nb);
        PyErr_SetString(PyExc_ImportError, "ptc: unexpected dis._nb_ops");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PySequence_GetItem(nb, i);
        PyObject *sym = pair ? PySequence_GetItem(pair, 1) : NULL;
        const char *s = sym ? PyUnicode_AsUTF8(sym) : NULL;
        int found = -1;
        if (s) {
            size_t len = strlen(s);
            bool inplace = len > 1 && s[len - 1] == '=' && strcmp(s, "==") != 0;
            char base[8];
            snprintf(base, sizeof base, "%.*s", (int)(inplace ? len - 1 : len), s);
            for (int k = 0; k < CAP_NB_COUNT; k++)
                if (strcmp(syms[k], base) == 0)
                    found = k | (inplace ? CAP_NB_INPLACE : 0);
        }
        Py_XDECREF(sym);
        Py_XDECREF(pair);
        if (found < 0) {
            Py_DECREF(nb);
            PyErr_Format(PyExc_ImportError, "ptc: unknown binary operator %zd in dis", i);
            return -1;
        }
        cap_P.nb_ops[i] = found;
    }
    Py_DECREF(nb);
    return 0;
}

/* 3.12's CALL_INTRINSIC_1/2 operands, by name (dis._intrinsic_*_descs). */
static void init_intrinsics(PyObject *dis)
{
    for (int k = 0; k < 2; k++) {
        PyObject *d = PyObject_GetAttrString(dis, k ? "_intrinsic_2_descs" : "_intrinsic_1_descs");
        int *out = k ? cap_P.intrinsic2 : cap_P.intrinsic1;
        int cap = k ? 8 : 16;
        for (int i = 0; i < cap; i++)
            out[i] = -1;
        if (!d) {
            PyErr_Clear();
            continue;
        }
        Py_ssize_t n = PySequence_Size(d);
        for (Py_ssize_t i = 0; i < n && i < cap; i++) {
            PyObject *s = PySequence_GetItem(d, i);
            const char *name = s ? PyUnicode_AsUTF8(s) : NULL;
            if (name && k == 0) {
                for (int j = 0; j < 3; j++)
                    if (strcmp(name, intrinsic1_ok[j]) == 0)
                        out[i] = j;
            }
            Py_XDECREF(s);
        }
        if (k)
            intrinsic2_count = (int)n;
        else
            intrinsic1_count = (int)n;
        Py_DECREF(d);
    }
    PyErr_Clear();
}

int cap_opcodes_init(void)
{
    PyObject *opcode_mod = PyImport_ImportModule("opcode");
    PyObject *dis = PyImport_ImportModule("dis");
    PyObject *opmap = opcode_mod ? PyObject_GetAttrString(opcode_mod, "opmap") : NULL;
    if (!opmap)
        goto fail;
    memset(ops, 0, sizeof ops);
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(opmap, &pos, &key, &value)) {
        long number = PyLong_AsLong(value);
        const char *name = PyUnicode_AsUTF8(key);
        if (!name || number < 0)
            goto fail;
        if (number >= 256)
            continue; /* pseudo instructions never appear in co_code */
        ops[number].known = 1;
        snprintf(ops[number].name, sizeof ops[number].name, "%s", name);
        ops[number].h = H_UNSUPPORTED;
        ops[number].flags = NOTRACE;
        for (size_t i = 0; i < sizeof table / sizeof *table; i++)
            if (strcmp(table[i].name, name) == 0) {
                ops[number].h = table[i].h;
                ops[number].flags = table[i].flags;
            }
        if (strncmp(name, "INSTRUMENTED_", 13) == 0) {
            ops[number].h = H_UNSUPPORTED;
            ops[number].flags = NOTRACE;
        }
        ops[number].ncache = (uint8_t)cache_entries(opcode_mod, key, (int)number);
        if (strcmp(name, "END_FOR") == 0)
            end_for_raw = (int)number;
        if (strcmp(name, "EXTENDED_ARG") == 0)
            extended_arg_raw = (int)number;
        if (strcmp(name, "CACHE") == 0)
            cache_raw = (int)number;
    }
    if (init_nb_ops(dis) < 0)
        goto fail;
    init_intrinsics(dis);
    cap_P.py312 = Py_Version >= 0x030C0000;
    cap_P.cmp_shift = cap_P.py312 ? 4 : 0;
    Py_DECREF(opmap);
    Py_DECREF(opcode_mod);
    Py_DECREF(dis);
    return 0;
fail:
    Py_XDECREF(opmap);
    Py_XDECREF(opcode_mod);
    Py_XDECREF(dis);
    return -1;
}

/* ---- decoding ------------------------------------------------------------ */

static PyObject *code_cache; /* dict: id(code) -> capsule(cap_code) */

static void code_free(cap_code *c)
{
    Py_XDECREF(c->code);
    Py_XDECREF(c->consts);
    Py_XDECREF(c->names);
    Py_XDECREF(c->lpnames);
    Py_XDECREF(c->filename);
    Py_XDECREF(c->qualname);
    free(c->lpkind);
    free(c->ins);
    free(c->exc);
    free(c->pos);
    free(c);
}

cap_code *cap_code_ref(cap_code *c)
{
    if (c)
        c->refs++;
    return c;
}

void cap_code_unref(cap_code *c)
{
    if (c && --c->refs == 0)
        code_free(c);
}

static void capsule_free(PyObject *cap)
{
    cap_code_unref(PyCapsule_GetPointer(cap, "ptc.code"));
}

static int get_int(PyObject *code, const char *attr, int *out)
{
    PyObject *v = PyObject_GetAttrString(code, attr);
    if (!v)
        return -1;
    *out = (int)PyLong_AsLong(v);
    Py_DECREF(v);
    return PyErr_Occurred() ? -1 : 0;
}

static int decode_instructions(cap_code *c, PyObject *bytes)
{
    char *raw;
    Py_ssize_t len;
    if (PyBytes_AsStringAndSize(bytes, &raw, &len) < 0)
        return -1;
    c->nunits = (int)(len / 2);
    c->ins = calloc((size_t)c->nunits + 1, sizeof *c->ins);
    if (!c->ins) {
        PyErr_NoMemory();
        return -1;
    }
    int ext = 0;
    for (int i = 0; i < c->nunits;) {
        int op = (uint8_t)raw[2 * i], arg = (uint8_t)raw[2 * i + 1] | (ext << 8);
        cap_instr *in = &c->ins[i];
        in->raw = (uint8_t)op;
        in->h = ops[op].known ? ops[op].h : H_UNSUPPORTED;
        in->flags = ops[op].known ? ops[op].flags : NOTRACE;
        in->ncache = ops[op].ncache;
        in->arg = arg;
        in->next = i + 1 + in->ncache;
        in->target = -1;
        ext = op == extended_arg_raw ? arg : 0;
        if (in->flags & J_FWD)
            in->target = in->next + arg;
        else if (in->flags & J_BACK)
            in->target = in->next - arg;
        for (int k = 1; k <= in->ncache && i + k < c->nunits; k++) {
            c->ins[i + k].h = H_NOP;
            c->ins[i + k].raw = (uint8_t)cache_raw;
            c->ins[i + k].next = i + k + 1;
            c->ins[i + k].target = -1;
        }
        if ((in->flags & NOTRACE) && !c->notrace)
            c->notrace = ops[op].known ? ops[op].name : "an unknown opcode";
        i = in->next;
    }
    /* 3.12: an exhausted FOR_ITER also skips the END_FOR at its target. */
    for (int i = 0; i < c->nunits; i++) {
        cap_instr *in = &c->ins[i];
        if (in->h == H_FOR_ITER && in->target >= 0 && in->target < c->nunits &&
            c->ins[in->target].raw == end_for_raw && end_for_raw >= 0)
            in->target = c->ins[in->target].next;
        if (in->h == H_CALL_INTRINSIC_1 && !c->notrace &&
            (in->arg >= intrinsic1_count || in->arg >= 16 || cap_P.intrinsic1[in->arg] < 0))
            c->notrace = "CALL_INTRINSIC_1 (an unsupported intrinsic)";
        if (in->h == H_CALL_INTRINSIC_2 && !c->notrace)
            c->notrace = "CALL_INTRINSIC_2 (except* or type parameters)";
        if (in->target >= c->nunits + 1 || (in->target < 0 && (in->flags & (J_FWD | J_BACK)))) {
            PyErr_Format(PyExc_SystemError, "ptc: jump out of range in %s", c->qualname_s);
            return -1;
        }
    }
    return 0;
}

static int varint(const unsigned char *p, Py_ssize_t n, Py_ssize_t *i, int *out)
{
    if (*i >= n)
        return -1;
    unsigned b = p[(*i)++];
    int v = b & 63;
    while (b & 64) {
        if (*i >= n)
            return -1;
        b = p[(*i)++];
        v = (v << 6) | (b & 63);
    }
    *out = v;
    return 0;
}

static int decode_exception_table(cap_code *c, PyObject *bytes)
{
    char *raw;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(bytes, &raw, &n) < 0)
        return -1;
    const unsigned char *p = (const unsigned char *)raw;
    int cap = 8;
    c->exc = malloc(sizeof *c->exc * (size_t)cap);
    for (Py_ssize_t i = 0; i < n;) {
        int start, length, target, dl;
        if (varint(p, n, &i, &start) || varint(p, n, &i, &length) ||
            varint(p, n, &i, &target) || varint(p, n, &i, &dl)) {
            PyErr_Format(PyExc_SystemError, "ptc: bad exception table in %s", c->qualname_s);
            return -1;
        }
        if (c->nexc == cap) {
            cap *= 2;
            c->exc = realloc(c->exc, sizeof *c->exc * (size_t)cap);
        }
        c->exc[c->nexc++] = (cap_exc_entry){start, start + length, target, dl >> 1, dl & 1};
    }
    return 0;
}

const cap_exc_entry *cap_code_handler(const cap_code *c, int pc)
{
    for (int i = 0; i < c->nexc; i++)
        if (c->exc[i].start <= pc && pc < c->exc[i].end)
            return &c->exc[i];
    return NULL;
}

static bool is_op(const cap_instr *in, const char *name)
{
    return strcmp(cap_opname(in->raw), name) == 0;
}

/* The RERAISE ending the handler at target, if that handler only leaves an
 * except block (COPY 3, POP_EXCEPT, RERAISE 1) or clears its `as` name
 * (LOAD_CONST None, STORE_FAST n, DELETE_FAST n, RERAISE 1): it runs no code
 * of the program's. Else -1. */
static int except_block_exit(const cap_code *c, int target)
{
    const cap_instr *first = &c->ins[target], *second = &c->ins[first->next];
    if (is_op(first, "COPY") && first->arg == 3 && is_op(second, "POP_EXCEPT"))
        return is_op(&c->ins[second->next], "RERAISE") ? second->next : -1;
    if (!is_op(first, "LOAD_CONST") || PyTuple_GetItem(c->consts, first->arg) != Py_None ||
        !is_op(second, "STORE_FAST"))
        return -1;
    const cap_instr *del = &c->ins[second->next];
    bool clears = is_op(del, "DELETE_FAST") && del->arg == second->arg;
    return clears && is_op(&c->ins[del->next], "RERAISE") ? del->next : -1;
}

/* Whether the class a LOAD_GLOBAL of an except clause names may catch
 * GeneratorExit (true when it cannot be looked up from here). */
static bool clause_may_catch_exit(const cap_code *c, const cap_instr *load, PyObject *globals,
                                  PyObject *builtins)
{
    if (!globals || !PyDict_CheckExact(globals) || !builtins || !PyDict_Check(builtins))
        return true;
    PyObject *name = PyTuple_GetItem(c->names, load->arg >> 1);
    PyObject *cls = name ? PyDict_GetItemWithError(globals, name) : NULL;
    if (!cls && !PyErr_Occurred())
        cls = PyDict_GetItemWithError(builtins, name);
    if (!cls) {
        PyErr_Clear();
        return true;
    }
    return !PyType_Check(cls) ||
           PyType_IsSubtype((PyTypeObject *)PyExc_GeneratorExit, (PyTypeObject *)cls);
}

/* The RERAISE 0 that the typed except clauses of the handler at target
 * reach when none matches, if none can match GeneratorExit: PUSH_EXC_INFO,
 * then per clause its global class or tuple of them, CHECK_EXC_MATCH and a
 * jump if false to the next clause. Their tests run no code of the
 * program's. Else -1. */
static int except_clauses_skip(const cap_code *c, int target, PyObject *globals, PyObject *builtins)
{
    const cap_instr *in = &c->ins[target];
    if (!is_op(in, "PUSH_EXC_INFO"))
        return -1;
    int pc = in->next;
    for (int clauses = 0; clauses < c->nunits; clauses++) {
        in = &c->ins[pc];
        if (is_op(in, "RERAISE"))
            return clauses > 0 && in->arg == 0 ? pc : -1;
        int n = 0;
        for (; is_op(in, "LOAD_GLOBAL"); in = &c->ins[in->next], n++)
            if (clause_may_catch_exit(c, in, globals, builtins))
                return -1;
        if (n > 1 && is_op(in, "BUILD_TUPLE") && in->arg == n)
            in = &c->ins[in->next];
        else if (n != 1)
            return -1;
        if (!is_op(in, "CHECK_EXC_MATCH"))
            return -1;
        in = &c->ins[in->next];
        bool if_false = is_op(in, "POP_JUMP_FORWARD_IF_FALSE") || is_op(in, "POP_JUMP_IF_FALSE");
        if (!if_false || in->target < 0)
            return -1;
        pc = in->target;
    }
    return -1;
}

bool cap_code_cleanup_at(const cap_code *c, int pc, PyObject *globals, PyObject *builtins)
{
    enum { INTRINSIC_STOPITERATION_ERROR = 3 };
    for (int hops = 0; hops < c->nexc + 1; hops++) {
        const cap_exc_entry *h = cap_code_handler(c, pc);
        if (!h)
            return false;
        const cap_instr *in = &c->ins[h->target];
        if (in->h == H_CALL_INTRINSIC_1 && in->arg == INTRINSIC_STOPITERATION_ERROR)
            return false;
        if (in->h == H_CLEANUP_THROW) { /* a yield from's: re-raises GeneratorExit */
            pc = h->target;
            continue;
        }
        int exit = except_block_exit(c, h->target);
        if (exit < 0)
            exit = except_clauses_skip(c, h->target, globals, builtins);
        if (exit < 0)
            return true;
        pc = exit;
    }
    return true;
}

static int decode_positions(cap_code *c)
{
    c->pos = malloc(sizeof *c->pos * 4 * (size_t)(c->nunits + 1));
    for (int i = 0; i < 4 * (c->nunits + 1); i++)
        c->pos[i] = -1;
    PyObject *it = PyObject_CallMethod(c->code, "co_positions", NULL);
    PyObject *iter = it ? PyObject_GetIter(it) : NULL;
    Py_XDECREF(it);
    if (!iter)
        return -1;
    PyObject *t;
    for (int i = 0; (t = PyIter_Next(iter)) != NULL; i++) {
        for (int k = 0; k < 4 && i < c->nunits; k++) {
            PyObject *v = PyTuple_GetItem(t, k);
            if (v && v != Py_None)
                c->pos[4 * i + k] = (int32_t)PyLong_AsLong(v);
        }
        Py_DECREF(t);
    }
    Py_DECREF(iter);
    return PyErr_Occurred() ? -1 : 0;
}

void cap_code_pos(const cap_code *c, int pc, int *line, int *col, int *endline, int *endcol)
{
    if (pc < 0 || pc >= c->nunits) {
        *line = *col = *endline = *endcol = 0;
        return;
    }
    const int32_t *p = &c->pos[4 * pc];
    *line = p[0] > 0 ? p[0] : 0;
    *endline = p[1] > 0 ? p[1] : *line;
    *col = p[2] >= 0 ? p[2] : -1;
    *endcol = p[3] >= 0 ? p[3] : -1;
}

/* localsplus: co_varnames, then cell variables that are not arguments, then
 * free variables (CPython's compute_localsplus_info). */
static int build_localsplus(cap_code *c)
{
    PyObject *varnames = PyObject_GetAttrString(c->code, "co_varnames");
    PyObject *cellvars = PyObject_GetAttrString(c->code, "co_cellvars");
    PyObject *freevars = PyObject_GetAttrString(c->code, "co_freevars");
    PyObject *names = PyList_New(0);
    int rc = -1;
    if (!varnames || !cellvars || !freevars || !names)
        goto done;
    Py_ssize_t nv = PyTuple_Size(varnames), nc = PyTuple_Size(cellvars),
               nf = PyTuple_Size(freevars);
    c->lpkind = calloc((size_t)(nv + nc + nf + 1), 1);
    for (Py_ssize_t i = 0; i < nv; i++) {
        PyList_Append(names, PyTuple_GetItem(varnames, i));
        c->lpkind[i] = CAP_LP_LOCAL;
    }
    for (Py_ssize_t i = 0; i < nc; i++) {
        PyObject *name = PyTuple_GetItem(cellvars, i);
        int found = PySequence_Index(varnames, name);
        if (found >= 0) {
            c->lpkind[found] |= CAP_LP_CELL;
            continue;
        }
        PyErr_Clear();
        c->lpkind[PyList_Size(names)] = CAP_LP_CELL;
        PyList_Append(names, name);
    }
    for (Py_ssize_t i = 0; i < nf; i++) {
        c->lpkind[PyList_Size(names)] = CAP_LP_FREE;
        PyList_Append(names, PyTuple_GetItem(freevars, i));
    }
    c->nvarnames = (int)nv;
    c->nfree = (int)nf;
    c->nlp = (int)PyList_Size(names);
    c->lpnames = PyList_AsTuple(names);
    rc = c->lpnames ? 0 : -1;
done:
    Py_XDECREF(varnames);
    Py_XDECREF(cellvars);
    Py_XDECREF(freevars);
    Py_XDECREF(names);
    return rc;
}

static cap_code *decode(PyObject *code)
{
    cap_code *c = calloc(1, sizeof *c);
    PyObject *bytes = NULL, *exctab = NULL;
    if (!c)
        return (cap_code *)PyErr_NoMemory();
    c->code = Py_NewRef(code);
    c->consts = PyObject_GetAttrString(code, "co_consts");
    c->names = PyObject_GetAttrString(code, "co_names");
    c->filename = PyObject_GetAttrString(code, "co_filename");
    c->qualname = PyObject_GetAttrString(code, "co_qualname");
    if (!c->consts || !c->names || !c->filename || !c->qualname)
        goto fail;
    c->file = PyUnicode_AsUTF8(c->filename);
    c->qualname_s = PyUnicode_AsUTF8(c->qualname);
    if (!c->file || !c->qualname_s)
        goto fail;
    if (get_int(code, "co_argcount", &c->argcount) || get_int(code, "co_posonlyargcount", &c->posonly) ||
        get_int(code, "co_kwonlyargcount", &c->kwonly) || get_int(code, "co_flags", &c->flags) ||
        get_int(code, "co_stacksize", &c->stacksize) || get_int(code, "co_firstlineno", &c->firstlineno))
        goto fail;
    if (build_localsplus(c) < 0)
        goto fail;
    bytes = PyObject_GetAttrString(code, "co_code");
    exctab = PyObject_GetAttrString(code, "co_exceptiontable");
    if (!bytes || !exctab || decode_instructions(c, bytes) < 0 ||
        decode_exception_table(c, exctab) < 0 || decode_positions(c) < 0)
        goto fail;
    if (c->flags & 0x20) {
        /* A generator expression made only of ordinary opcodes runs lazily
           in a trace (iter.c); other generators never run. */
        size_t n = strlen(c->qualname_s);
        c->genexpr = !c->notrace && n >= 9 && strcmp(c->qualname_s + n - 9, "<genexpr>") == 0;
        c->genfunc = !c->notrace && !c->genexpr;
        c->notrace = "a generator";
    }
    else if (c->flags & (0x80 | 0x100))
        c->notrace = "a coroutine";
    else if (c->flags & 0x200)
        c->notrace = "an async generator";
    Py_DECREF(bytes);
    Py_DECREF(exctab);
    return c;
fail:
    Py_XDECREF(bytes);
    Py_XDECREF(exctab);
    code_free(c);
    return NULL;
}

cap_code *cap_code_get(PyObject *code)
{
    if (!code_cache && !(code_cache = PyDict_New()))
        return NULL;
    PyObject *key = PyLong_FromVoidPtr(code);
    if (!key)
        return NULL;
    PyObject *cap = PyDict_GetItem(code_cache, key);
    if (cap) {
        Py_DECREF(key);
        return PyCapsule_GetPointer(cap, "ptc.code");
    }
    cap_code *c = decode(code);
    if (!c) {
        Py_DECREF(key);
        return NULL;
    }
    c->refs = 1; /* the cache's */
    /* Decoding ran Python code: another thread may have cached the same code
       meanwhile. The first stays, so frames of one code share one decoding. */
    if ((cap = PyDict_GetItem(code_cache, key))) {
        code_free(c);
        Py_DECREF(key);
        return PyCapsule_GetPointer(cap, "ptc.code");
    }
    cap = PyCapsule_New(c, "ptc.code", capsule_free);
    if (!cap || PyDict_SetItem(code_cache, key, cap) < 0) {
        if (!cap)
            code_free(c);
        Py_XDECREF(cap);
        Py_DECREF(key);
        return NULL;
    }
    Py_DECREF(cap);
    Py_DECREF(key);
    return c;
}

void cap_code_cache_clear(void)
{
    if (code_cache)
        PyDict_Clear(code_cache);
}
