/* The source table: each trace interns its sources (how a value is reached
 * from the segment's starting state: a local, an attribute of a source, an
 * item, ...) so that one path has one id, and writes a source as the Python
 * expression it stands for ("L['self'].conv1.weight") for guards and
 * messages. Wrapping values with sources is sources.c's.
 */
#include "capture/trace/trace.h"

#include <stdlib.h>
#include <string.h>

static const char *kind_names[] = {
#define X(id, s) #id,
    CAP_SOURCE_KINDS(X)
#undef X
};

int cap_source_add(cap_trace *T, int kind, int parent, int frame, int index, PyObject *key)
{
    PyObject *k = kind == CAP_S_CONST ? PyLong_FromVoidPtr(key) : Py_NewRef(key ? key : Py_None);
    PyObject *tk = k ? Py_BuildValue("(iiiiN)", kind, parent, frame, index, k) : NULL;
    if (!tk)
        return -1;
    PyObject *hit = PyDict_GetItemWithError(T->src_index, tk);
    if (hit || PyErr_Occurred()) {
        Py_DECREF(tk);
        return hit ? (int)PyLong_AsLong(hit) : -1;
    }
    if (T->nsrc == T->capsrc) {
        int cap = T->capsrc ? 2 * T->capsrc : 64;
        T->src = realloc(T->src, sizeof *T->src * (size_t)cap);
        T->src_val = realloc(T->src_val, sizeof *T->src_val * (size_t)cap);
        T->capsrc = cap;
    }
    int id = T->nsrc++;
    T->src[id] = (cap_source){(uint8_t)kind, parent, frame, index, Py_XNewRef(key)};
    T->src_val[id] = NULL;
    PyObject *v = PyLong_FromLong(id);
    int rc = v ? PyDict_SetItem(T->src_index, tk, v) : -1;
    Py_XDECREF(v);
    Py_DECREF(tk);
    return rc < 0 ? -1 : id;
}

void cap_source_str(const cap_source *src, int nsrc, int id, char *buf, size_t size)
{
    if (id < 0 || id >= nsrc) {
        snprintf(buf, size, "?");
        return;
    }
    const cap_source *s = &src[id];
    char parent[400] = "";
    if (s->parent >= 0)
        cap_source_str(src, nsrc, s->parent, parent, sizeof parent);
    const char *key = s->key && PyUnicode_Check(s->key) ? PyUnicode_AsUTF8(s->key) : NULL;
    PyObject *r = NULL;
    if (!key && s->key && s->kind != CAP_S_CONST) {
        r = PyObject_Repr(s->key);
        key = r ? PyUnicode_AsUTF8(r) : "?";
    }
    switch (s->kind) {
    case CAP_S_LOCAL:
        if (s->frame)
            snprintf(buf, size, "L%d['%s']", s->frame, key);
        else
            snprintf(buf, size, "L['%s']", key);
        break;
    case CAP_S_STACK: snprintf(buf, size, "S%d[%d]", s->frame, s->index); break;
    case CAP_S_FUNC: snprintf(buf, size, "F%d", s->frame); break;
    case CAP_S_RETA: snprintf(buf, size, "R%d", s->frame); break;
    case CAP_S_CONST: {
        PyObject *n = PyObject_GetAttrString(s->key, "__qualname__");
        if (!n) {
            PyErr_Clear();
            n = PyObject_GetAttrString(s->key, "__name__");
        }
        if (!n)
            PyErr_Clear();
        const char *ns = n && PyUnicode_Check(n) ? PyUnicode_AsUTF8(n) : cap_tpname(Py_TYPE(s->key));
        snprintf(buf, size, "%s", ns);
        Py_XDECREF(n);
        break;
    }
    case CAP_S_ATTR:
    case CAP_S_INSTDICT:
    case CAP_S_MODPARAM:
    case CAP_S_MODBUF:
    case CAP_S_MODCHILD: snprintf(buf, size, "%s.%s", parent, key); break;
    case CAP_S_ITEM: {
        PyObject *kr = s->key ? PyObject_Repr(s->key) : NULL;
        const char *ks = kr ? PyUnicode_AsUTF8(kr) : "?";
        if (s->parent >= 0 && src[s->parent].kind == CAP_S_CONST && PyDict_Check(src[s->parent].key) &&
            PyDict_GetItemString(src[s->parent].key, "__name__"))
            snprintf(buf, size, "G[%s]", ks); /* a module's globals */
        else
            snprintf(buf, size, "%s[%s]", parent, ks);
        Py_XDECREF(kr);
        break;
    }
    case CAP_S_INDEX: snprintf(buf, size, "%s[%d]", parent, s->index); break;
    case CAP_S_CELL: snprintf(buf, size, "%s.cell_contents", parent); break;
    case CAP_S_TYPE: snprintf(buf, size, "type(%s)", parent); break;
    case CAP_S_ITERSEQ: snprintf(buf, size, "%s.seq", parent); break;
    case CAP_S_ITERREST: snprintf(buf, size, "%s.rest", parent); break;
    case CAP_S_FROM_NUMPY:
        if (key) /* its flip dims: an array whose strides run backwards along them */
            snprintf(buf, size, "torch.from_numpy(np.flip(%s, %s))", parent, key);
        else
            snprintf(buf, size, "torch.from_numpy(%s)", parent);
        break;
    default: snprintf(buf, size, "%s?%s", parent, kind_names[s->kind]); break;
    }
    Py_XDECREF(r);
    PyErr_Clear();
}
