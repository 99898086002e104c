/* The .ptir printer. Canonical by construction: tensor-ish leading params are
 * positional (trailing defaults dropped), every other param is a keyword and
 * printed only when it differs from its default; floats use the shortest text
 * that reads back to the same double; a node's device is printed only when it
 * differs from its first tensor argument's. The parser accepts exactly this
 * and more, so print(parse(print(g))) == print(g).
 */
#include "ir/ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Floats print as Python's repr does: the shortest digits that read back to
 * the same double, in fixed notation for exponents -4..15 ("100.0", "0.0001")
 * and scientific otherwise ("1e-05", "1e+300"); always with a '.' or an 'e'
 * so that they read back as floats, not ints. */
static void print_float(ptc_buf *b, double f)
{
    if (isnan(f)) {
        ptc_buf_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        ptc_buf_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    char s[64];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*e", prec - 1, f);
        if (strtod(s, NULL) == f)
            break;
    }
    int exp = atoi(strchr(s, 'e') + 1);
    if (exp >= -4 && exp < 16) {
        int decimals = prec - 1 - exp;
        snprintf(s, sizeof s, "%.*f", decimals > 0 ? decimals : 0, f);
        ptc_buf_puts(b, s);
        if (!strchr(s, '.'))
            ptc_buf_puts(b, ".0");
        return;
    }
    ptc_buf_puts(b, s);
}

void ptc_print_arg(ptc_buf *b, const ptc_arg *a)
{
    switch ((ptc_argkind)a->kind) {
    case PTC_ARG_NONE: ptc_buf_puts(b, "none"); break;
    case PTC_ARG_VALUE: ptc_buf_printf(b, "%%%s", a->v->name); break;
    case PTC_ARG_VALUES:
        ptc_buf_putc(b, '[');
        for (int i = 0; i < a->vs.n; i++) {
            if (i)
                ptc_buf_puts(b, ", ");
            if (a->vs.v[i])
                ptc_buf_printf(b, "%%%s", a->vs.v[i]->name);
            else
                ptc_buf_puts(b, "none");
        }
        ptc_buf_putc(b, ']');
        break;
    case PTC_ARG_INT: ptc_dim_print(b, a->i); break;
    case PTC_ARG_INTS:
        ptc_buf_putc(b, '[');
        for (int i = 0; i < a->is.n; i++) {
            if (i)
                ptc_buf_puts(b, ", ");
            ptc_dim_print(b, a->is.d[i]);
        }
        ptc_buf_putc(b, ']');
        break;
    case PTC_ARG_FLOAT: print_float(b, a->f); break;
    case PTC_ARG_BOOL: ptc_buf_puts(b, a->b ? "true" : "false"); break;
    case PTC_ARG_STR: ptc_buf_put_quoted(b, a->s); break;
    case PTC_ARG_DTYPE: ptc_buf_puts(b, ptc_dtype_name(a->dt)); break;
    case PTC_ARG_DEVICE: {
        char dev[32];
        ptc_device_str(a->dev, dev, sizeof dev);
        ptc_buf_puts(b, dev);
        break;
    }
    }
}

/* The device a node's outputs have unless its type says otherwise. */
ptc_device ptc_node_default_device(const ptc_node *n)
{
    for (int i = 0; i < n->nargs; i++) {
        const ptc_arg *a = &n->args[i];
        if (a->kind == PTC_ARG_VALUE)
            return a->v->type.device;
        if (a->kind == PTC_ARG_VALUES)
            for (int j = 0; j < a->vs.n; j++)
                if (a->vs.v[j])
                    return a->vs.v[j]->type.device;
    }
    return PTC_CPU;
}

static bool is_default(const ptc_param *p, const ptc_arg *a)
{
    return p->has_default && ptc_arg_eq(&p->def, a);
}

static void print_args(ptc_buf *b, const ptc_node *n)
{
    const ptc_schema *s = ptc_op_schema(n->op);
    int last = -1;
    for (int i = 0; i < s->npositional; i++)
        if (!is_default(&s->params[i], &n->args[i]))
            last = i;
    bool first = true;
    for (int i = 0; i <= last; i++) {
        if (!first)
            ptc_buf_puts(b, ", ");
        ptc_print_arg(b, &n->args[i]);
        first = false;
    }
    for (int i = s->npositional; i < n->nargs; i++) {
        if (is_default(&s->params[i], &n->args[i]))
            continue;
        if (!first)
            ptc_buf_puts(b, ", ");
        ptc_buf_printf(b, "%s=", s->params[i].name);
        ptc_print_arg(b, &n->args[i]);
        first = false;
    }
}

void ptc_print_node(ptc_buf *b, const ptc_node *n)
{
    for (int i = 0; i < n->nout; i++)
        ptc_buf_printf(b, "%s%%%s", i ? ", " : "", n->outs[i]->name);
    ptc_buf_printf(b, " = %s(", ptc_op_name(n->op));
    print_args(b, n);
    ptc_buf_puts(b, ") : ");
    ptc_device dflt = ptc_node_default_device(n);
    for (int i = 0; i < n->nout; i++) {
        const ptc_ttype *t = &n->outs[i]->type;
        if (i)
            ptc_buf_puts(b, ", ");
        ptc_ttype_print(b, t, false);
        if (!ptc_device_eq(t->device, dflt) || t->device.index != dflt.index) {
            char dev[32];
            ptc_device_str(t->device, dev, sizeof dev);
            ptc_buf_printf(b, " %s", dev);
        }
        if (t->requires_grad)
            ptc_buf_puts(b, " grad");
    }
    if (n->loc.file || n->loc.text || n->module_path) {
        ptc_buf_puts(b, "  @");
        if (n->loc.file) {
            ptc_buf_putc(b, ' ');
            ptc_buf_put_quoted(b, n->loc.file);
            if (n->loc.line > 0) {
                ptc_buf_printf(b, ":%d", n->loc.line);
                if (n->loc.col > 0)
                    ptc_buf_printf(b, ":%d", n->loc.col);
            }
        }
        if (n->loc.text) {
            ptc_buf_putc(b, ' ');
            ptc_buf_put_quoted(b, n->loc.text);
        }
        if (n->module_path)
            ptc_buf_printf(b, " [%s]", n->module_path);
    }
    if (n->nprov > 0) {
        ptc_buf_puts(b, "  <-");
        for (int i = 0; i < n->nprov; i++)
            ptc_buf_printf(b, "%s %%%s", i ? "," : "", n->prov[i]);
    }
}

static void print_graph_body(ptc_buf *b, const ptc_graph *g)
{
    ptc_buf_printf(b, "graph %s(", g->name);
    for (int i = 0; i < g->ninputs; i++) {
        if (i)
            ptc_buf_puts(b, ", ");
        ptc_buf_printf(b, "%%%s: ", g->inputs[i]->name);
        ptc_ttype_print(b, &g->inputs[i]->type, true);
    }
    ptc_buf_puts(b, ") {\n");
    for (int i = 0; i < g->nnodes; i++) {
        ptc_buf_puts(b, "  ");
        ptc_print_node(b, g->nodes[i]);
        ptc_buf_putc(b, '\n');
    }
    ptc_buf_puts(b, "  return (");
    for (int i = 0; i < g->noutputs; i++)
        ptc_buf_printf(b, "%s%%%s", i ? ", " : "", g->outputs[i]->name);
    ptc_buf_puts(b, ")\n}\n");
}

void ptc_print_graph(ptc_buf *b, const ptc_graph *g)
{
    ptc_buf_puts(b, "# ptc ir v1\n");
    print_graph_body(b, g);
}

void ptc_print_module(ptc_buf *b, const ptc_module *m)
{
    ptc_buf_puts(b, "# ptc ir v1\n");
    for (int i = 0; i < m->ngraphs; i++) {
        if (i)
            ptc_buf_putc(b, '\n');
        print_graph_body(b, m->graphs[i]);
    }
}
