/* Drawing a stage with Graphviz.
 *
 * The drawing is computed on the model first and only then handed to
 * cgraph: every item gets a representative ("unit"), either itself or the
 * outermost folded group holding it, and units become nodes, input edges
 * between different units become (deduplicated) edges. Groups are clusters
 * keyed by path, so two runs of one module share one cluster. Folding picks
 * the deepest module depth whose drawing stays under max_nodes, except for
 * groups holding the focus, which stay open so the highlighted nodes show.
 */
#include "tools/viewer/render.h"

#include <ctype.h>
#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>
#include <stdlib.h>
#include <string.h>

enum { SKIP = -0x7fffffff };

typedef struct rgroup {
    const char *path, *label;
    int parent;             /* rgroup, -1 */
    int depth;
    int nops;
    bool collapsed;         /* folded in the stage shown (honoured for the TUI's 'r') */
    bool fold, keep, hot;
    Agraph_t *cluster;
    Agnode_t *node;         /* when folded */
} rgroup;

typedef struct rctx {
    ptv_stage *s;           /* whose items are drawn */
    int ngroups;
    rgroup *groups;
    int *item_group;        /* rgroup of each item, -1 */
    int inputs_group;       /* rgroup of the graph inputs, -1 */
    bool *hot;              /* per item: the focus or sharing its provenance */
    int focus;              /* item of s, -1 */
    int *unit;              /* per item: item, -(g+1) folded group, SKIP */
    Agraph_t *g;
    Agnode_t **node;        /* per item */
    int nnodes, nedges, nclusters;
} rctx;

static char *S(const char *s) { return (char *)s; } /* cgraph 2.4x takes char * */

/* ---- groups: module paths, or kernels ------------------------------------------- */

/* One rgroup per collapse key of a graph stage, nested like the modules. */
static void module_groups(rctx *r)
{
    ptv_stage *s = r->s;
    r->ngroups = s->nkeys;
    r->groups = calloc((size_t)(s->nkeys + 1), sizeof *r->groups);
    for (int k = 0; k < s->nkeys; k++)
        r->groups[k].parent = -2;
    for (int g = 0; g < s->ngroups; g++) {
        const ptv_group *gr = &s->groups[g];
        rgroup *rg = &r->groups[gr->key];
        rg->path = gr->path;
        rg->label = gr->label;
        rg->depth = gr->depth;
        rg->collapsed = s->collapsed[gr->key];
        rg->parent = gr->parent >= 0 ? s->groups[gr->parent].key : -1;
        if (strcmp(gr->path, PTV_INPUTS) == 0)
            r->inputs_group = gr->key;
    }
    for (int i = 0; i < s->nitems; i++) {
        int g = s->items[i].group;
        r->item_group[i] = g >= 0 ? s->groups[g].key : -1;
        if (s->items[i].kind == PTV_ITEM_NODE)
            for (int k = r->item_group[i]; k >= 0; k = r->groups[k].parent)
                r->groups[k].nops++;
    }
}

/* Kernel view: captured items grouped by the first kernel of ks whose
 * provenance names them; the graph's inputs form one more group. */
static void kernel_groups(rctx *r, ptv_stage *ks)
{
    r->ngroups = 0;
    r->groups = calloc((size_t)(ks->nitems + 2), sizeof *r->groups);
    for (int h = 0; h < ks->nitems; h++) {
        const ptv_item *it = &ks->items[h];
        if (it->kind != PTV_ITEM_KERNEL)
            continue;
        rgroup *rg = &r->groups[r->ngroups];
        rg->path = ptc_arena_printf(ks->arena, "kernel %d", it->kernel);
        size_t len = strlen(it->text);
        while (len > 0 && (it->text[len - 1] == ':' || it->text[len - 1] == ' '))
            len--;
        rg->label = ptc_arena_strndup(ks->arena, it->text, len);
        rg->parent = -1;
        rg->collapsed = it->group >= 0 && ptv_group_collapsed(ks, it->group);
        for (int k = 0; k < it->nprov; k++) {
            int j = ptv_find_value(r->s, it->prov[k]);
            if (j >= 0 && r->item_group[j] < 0) {
                r->item_group[j] = r->ngroups;
                rg->nops++;
            }
        }
        r->ngroups++;
    }
    rgroup *inputs = &r->groups[r->ngroups];
    inputs->path = PTV_INPUTS;
    inputs->label = "inputs";
    inputs->parent = -1;
    inputs->collapsed = true;
    r->inputs_group = r->ngroups++;
    for (int i = 0; i < r->s->nitems; i++)
        if (r->s->items[i].kind == PTV_ITEM_INPUT)
            r->item_group[i] = r->inputs_group;
}

/* ---- units: what each item is drawn as ----------------------------------------------- */

static bool drawn_kind(const ptv_item *it)
{
    return it->kind == PTV_ITEM_NODE || it->kind == PTV_ITEM_INPUT || it->kind == PTV_ITEM_RETURN;
}

static void assign_units(rctx *r)
{
    for (int i = 0; i < r->s->nitems; i++) {
        const ptv_item *it = &r->s->items[i];
        int outer = -1;
        for (int g = r->item_group[i]; g >= 0; g = r->groups[g].parent)
            if (r->groups[g].fold)
                outer = g;
        if (!drawn_kind(it) || (outer >= 0 && outer == r->inputs_group))
            r->unit[i] = SKIP;
        else
            r->unit[i] = outer >= 0 ? -(outer + 1) : i;
    }
}

static int count_units(rctx *r)
{
    assign_units(r);
    bool *seen = calloc((size_t)(r->s->nitems + r->ngroups + 1), 1);
    int n = 0;
    for (int i = 0; i < r->s->nitems; i++) {
        int u = r->unit[i];
        if (u == SKIP)
            continue;
        int slot = u >= 0 ? u : r->s->nitems - u - 1;
        n += !seen[slot];
        seen[slot] = true;
    }
    free(seen);
    return n;
}

static void set_folds(rctx *r, int depth, bool honour, bool auto_inputs)
{
    for (int g = 0; g < r->ngroups; g++) {
        rgroup *rg = &r->groups[g];
        bool collapsed = honour && rg->collapsed;
        if (g == r->inputs_group)
            rg->fold = honour ? collapsed : auto_inputs;
        else
            rg->fold = !rg->keep && (collapsed || (depth >= 0 && rg->depth >= depth));
    }
}

/* Picks the fold depth; returns it (-1: nothing folded). */
static int choose_depth(rctx *r, const ptv_render_opts *o)
{
    int max_nodes = o->max_nodes > 0 ? o->max_nodes : 300;
    int ninputs = 0;
    for (int i = 0; i < r->s->nitems; i++)
        ninputs += r->inputs_group >= 0 && r->item_group[i] == r->inputs_group;
    bool auto_inputs = ninputs > 16;
    int max_depth = 0;
    for (int g = 0; g < r->ngroups; g++)
        if (r->groups[g].depth + 1 > max_depth)
            max_depth = r->groups[g].depth + 1;
    if (o->depth >= 0 || o->honour_collapse) {
        set_folds(r, o->depth, o->honour_collapse, auto_inputs);
        return o->depth;
    }
    int d = max_depth;
    for (; d > 0; d--) {
        set_folds(r, d, false, auto_inputs);
        if (count_units(r) <= max_nodes)
            break;
    }
    set_folds(r, d, false, auto_inputs);
    return d < max_depth ? d : -1;
}

/* ---- focus ------------------------------------------------------------------------------ */

static bool shares_origin(const char *const *a, int na, const char *const *b, int nb)
{
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            if (strcmp(a[i], b[j]) == 0)
                return true;
    return false;
}

static void mark_focus(rctx *r, const ptv_render_opts *o)
{
    r->focus = -1;
    if (!o->focus_stage || o->focus_item < 0)
        return;
    if (o->focus_stage == r->s)
        r->focus = o->focus_item;
    const char *const *fo;
    int nf = ptv_item_origins(o->focus_stage, o->focus_item, &fo);
    for (int i = 0; i < r->s->nitems; i++) {
        const char *const *io;
        int ni = ptv_item_origins(r->s, i, &io);
        r->hot[i] = i == r->focus || (nf > 0 && shares_origin(fo, nf, io, ni));
        if (r->hot[i])
            for (int g = r->item_group[i]; g >= 0; g = r->groups[g].parent)
                r->groups[g].keep = r->groups[g].hot = true;
    }
}

/* ---- cgraph ------------------------------------------------------------------------------ */

/* Graphviz labels interpret backslash escapes: keep the user's text literal. */
static void put_label_text(ptc_buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\')
            ptc_buf_puts(b, "\\\\");
        else if (*s == '\n')
            ptc_buf_puts(b, "\\n");
        else
            ptc_buf_putc(b, *s);
    }
}

static Agraph_t *cluster_of(rctx *r, int g)
{
    if (g < 0)
        return r->g;
    rgroup *rg = &r->groups[g];
    if (rg->cluster)
        return rg->cluster;
    Agraph_t *parent = cluster_of(r, rg->parent);
    char name[600];
    snprintf(name, sizeof name, "cluster_%.500s", rg->path);
    rg->cluster = agsubg(parent, name, 1);
    ptc_buf b = {0};
    put_label_text(&b, rg->label);
    agsafeset(rg->cluster, S("label"), b.data, S(""));
    ptc_buf_free(&b);
    agsafeset(rg->cluster, S("style"), S("rounded"), S(""));
    agsafeset(rg->cluster, S("color"), rg->hot ? S("#e65100") : S("#9e9e9e"), S(""));
    agsafeset(rg->cluster, S("fontname"), S("Helvetica"), S(""));
    r->nclusters++;
    return rg->cluster;
}

static void style_node(Agnode_t *n, const char *shape, const char *fill, bool focus)
{
    agsafeset(n, S("shape"), S(shape), S(""));
    agsafeset(n, S("style"), S("rounded,filled"), S(""));
    agsafeset(n, S("fillcolor"), S(fill), S(""));
    if (focus)
        agsafeset(n, S("penwidth"), S("3"), S(""));
}

static Agnode_t *item_node(rctx *r, int i)
{
    if (r->node[i])
        return r->node[i];
    const ptv_item *it = &r->s->items[i];
    /* Named by the value name without its '%': cgraph reserves names that
     * start with '%' for anonymous objects and renames them. */
    char name[300];
    snprintf(name, sizeof name, "%.250s", it->kind == PTV_ITEM_RETURN ? "return" : it->name);
    /* Several graphs in one file may reuse names. */
    size_t base = strlen(name);
    for (int k = 2; agnode(r->g, name, 0); k++)
        snprintf(name + base, sizeof name - base, "#%d", k);
    Agnode_t *n = agnode(cluster_of(r, r->item_group[i] == r->inputs_group ? -1 : r->item_group[i]),
                         name, 1);
    ptc_buf b = {0};
    if (it->kind == PTV_ITEM_NODE) {
        put_label_text(&b, it->op);
        ptc_buf_printf(&b, "\\n%%%s : ", it->name);
        put_label_text(&b, it->type ? it->type : "");
    } else if (it->kind == PTV_ITEM_INPUT) {
        ptc_buf_printf(&b, "%%%s\\n", it->name);
        put_label_text(&b, it->type ? it->type : "");
    } else {
        put_label_text(&b, it->text);
    }
    agsafeset(n, S("label"), b.data, S(""));
    ptc_buf_free(&b);
    const char *fill = i == r->focus ? "#ffb300" : r->hot[i] ? "#fff59d"
                       : it->kind == PTV_ITEM_NODE ? "#ffffff" : "#e3f2fd";
    style_node(n, it->kind == PTV_ITEM_NODE ? "box" : "ellipse", fill, i == r->focus);
    r->node[i] = n;
    r->nnodes++;
    return n;
}

static Agnode_t *group_node(rctx *r, int g)
{
    rgroup *rg = &r->groups[g];
    if (rg->node)
        return rg->node;
    char name[600];
    snprintf(name, sizeof name, "[%.500s]", rg->path);
    rg->node = agnode(cluster_of(r, rg->parent), name, 1);
    ptc_buf b = {0};
    put_label_text(&b, rg->label);
    ptc_buf_printf(&b, "\\n%d op%s", rg->nops, rg->nops == 1 ? "" : "s");
    agsafeset(rg->node, S("label"), b.data, S(""));
    ptc_buf_free(&b);
    style_node(rg->node, "box3d", rg->hot ? "#fff59d" : "#eeeeee", false);
    r->nnodes++;
    return rg->node;
}

static Agnode_t *unit_node(rctx *r, int u)
{
    return u >= 0 ? item_node(r, u) : group_node(r, -u - 1);
}

static void build(rctx *r)
{
    r->g = agopen(S("ptview"), Agdirected, NULL);
    agattr(r->g, AGRAPH, S("rankdir"), S("TB"));
    agattr(r->g, AGRAPH, S("fontname"), S("Helvetica"));
    agattr(r->g, AGNODE, S("fontname"), S("Helvetica"));
    agattr(r->g, AGNODE, S("fontsize"), S("10"));
    agattr(r->g, AGEDGE, S("color"), S("#616161"));
    for (int i = 0; i < r->s->nitems; i++) {
        int v = r->unit[i];
        if (v == SKIP)
            continue;
        Agnode_t *head = unit_node(r, v);
        const ptv_item *it = &r->s->items[i];
        for (int k = 0; k < it->ninputs; k++) {
            int u = r->unit[it->inputs[k]];
            if (u == SKIP || u == v)
                continue;
            Agnode_t *tail = unit_node(r, u);
            if (agedge(r->g, tail, head, NULL, 0))
                continue;
            Agedge_t *e = agedge(r->g, tail, head, NULL, 1);
            r->nedges++;
            bool hot = (u >= 0 ? r->hot[u] : r->groups[-u - 1].hot) && (v >= 0 ? r->hot[v] : r->groups[-v - 1].hot);
            if (hot) {
                agsafeset(e, S("color"), S("#e65100"), S(""));
                agsafeset(e, S("penwidth"), S("2"), S(""));
            }
        }
    }
}

/* ---- output --------------------------------------------------------------------------------- */

static const char *format_of(const char *path)
{
    const char *dot = strrchr(path, '.');
    if (!dot)
        return NULL;
    if (strcasecmp(dot, ".svg") == 0)
        return "svg";
    if (strcasecmp(dot, ".png") == 0)
        return "png";
    if (strcasecmp(dot, ".dot") == 0 || strcasecmp(dot, ".gv") == 0)
        return "dot";
    return NULL;
}

/* The process's one Graphviz context, never freed. With a context per
 * drawing, Graphviz 2.42's pango plugin read (strcmp) a font name that
 * libgvc's text-span code had strdup'd and then freed, at the second
 * drawing's first label (ASan: heap-use-after-free under gvLayout; ptview
 * and ptexplain --html draw a graph per stage). With one context the second
 * drawing is clean. Graphviz is not thread safe: they draw from one thread. */
static GVC_t *graphviz(void)
{
    static GVC_t *gvc;
    if (!gvc)
        gvc = gvContext();
    return gvc;
}

static int write_out(rctx *r, const char *format, const char *path, ptc_error *err)
{
    if (strcmp(format, "dot") == 0) {
        FILE *f = fopen(path, "w");
        if (!f)
            return ptc_errorf(err, PTC_ERR_IO, "", "cannot write %s", path);
        int rc = agwrite(r->g, f);
        if (fclose(f) != 0 || rc != 0)
            return ptc_errorf(err, PTC_ERR_IO, "", "cannot write %s", path);
        return 0;
    }
    GVC_t *gvc = graphviz();
    if (!gvc)
        return ptc_errorf(err, PTC_ERR_INTERNAL, "", "Graphviz: no context");
    int rc = 0;
    if (gvLayout(gvc, r->g, "dot") != 0) {
        rc = ptc_errorf(err, PTC_ERR_INTERNAL, "", "Graphviz: dot layout failed (is the graphviz "
                        "plugin package installed?)");
    } else {
        if (gvRenderFilename(gvc, r->g, format, path) != 0)
            rc = ptc_errorf(err, PTC_ERR_IO, "", "Graphviz: cannot render %s as %s", path, format);
        gvFreeLayout(gvc, r->g);
    }
    return rc;
}

/* The stage drawn for s: itself, or for kernel/code stages the captured graph. */
static ptv_stage *drawn_stage(ptv_stage *s, ptv_stage **kernels, ptc_error *err)
{
    *kernels = NULL;
    if (s->kind == 'G')
        return s;
    if (s->id != PTV_KERNELS && s->kind != 'C') {
        ptc_errorf(err, PTC_ERR_UNSUPPORTED, "", "stage '%s' is text; --render draws graph stages "
                   "(captured, prims, ...) and kernels, llvm, ptx (as kernel clusters)", s->name);
        return NULL;
    }
    ptv_stage *cap = ptv_compile_stage(s->compile, "captured");
    if (!cap || ptv_stage_load(cap) != 0) {
        ptc_errorf(err, PTC_ERR_IO, "", "drawing %s needs the captured stage: %s", s->name,
                   cap ? cap->error : "not in this compile");
        return NULL;
    }
    *kernels = s;
    return cap;
}

int ptv_render(ptv_stage *s, const ptv_render_opts *o, char *summary, size_t size, ptc_error *err)
{
    const char *format = format_of(o->out);
    if (!format)
        return ptc_errorf(err, PTC_ERR_PARSE, "", "%s: unknown output format (use .svg, .png or .dot)",
                          o->out);
    if (ptv_stage_load(s) != 0)
        return ptc_errorf(err, PTC_ERR_IO, "", "%s", s->error);
    ptv_stage *ks;
    rctx r = {0};
    r.s = drawn_stage(s, &ks, err);
    if (!r.s)
        return -1;
    int n = r.s->nitems;
    r.item_group = malloc(sizeof(int) * (size_t)(n + 1));
    r.unit = malloc(sizeof(int) * (size_t)(n + 1));
    r.hot = calloc((size_t)n + 1, 1);
    r.node = calloc((size_t)n + 1, sizeof *r.node);
    PTC_ASSERT(r.item_group && r.unit && r.hot && r.node);
    for (int i = 0; i < n; i++)
        r.item_group[i] = -1;
    r.inputs_group = -1;
    if (ks)
        kernel_groups(&r, ks);
    else
        module_groups(&r);
    mark_focus(&r, o);
    int depth = choose_depth(&r, o);
    assign_units(&r);
    build(&r);
    int rc = write_out(&r, format, o->out, err);
    if (rc == 0) {
        size_t len = 0;
        summary[0] = 0;
        ptv_appendf(summary, size, &len, "%s: %s of %s, %d nodes, %d edges, %d clusters", o->out,
                    s->name, s->compile->id, r.nnodes, r.nedges, r.nclusters);
        if (depth >= 0)
            ptv_appendf(summary, size, &len, ", %s folded below depth %d", ks ? "kernels" : "modules",
                        depth);
        if (r.focus >= 0 || (o->focus_stage && o->focus_item >= 0)) {
            int hot = 0;
            for (int i = 0; i < n; i++)
                hot += r.hot[i];
            ptv_appendf(summary, size, &len, ", %d highlighted", hot);
        }
    }
    agclose(r.g);
    free(r.item_group);
    free(r.unit);
    free(r.hot);
    free(r.node);
    free(r.groups);
    return rc;
}

/* ---- --focus --------------------------------------------------------------------------------- */

int ptv_resolve_focus(ptv_compile *c, ptv_stage *default_stage, const char *spec,
                      ptv_stage **stage, int *item, ptc_error *err)
{
    ptv_stage *s = default_stage;
    const char *name = spec;
    const char *colon = strchr(spec, ':');
    if (colon) {
        char sname[64];
        snprintf(sname, sizeof sname, "%.*s", (int)(colon - spec), spec);
        s = ptv_compile_stage(c, sname);
        if (!s)
            return ptc_errorf(err, PTC_ERR_PARSE, "", "--focus %s: no stage '%s' in %s", spec, sname,
                              c->id);
        name = colon + 1;
    } else if (s->kind != 'G' && name[0] == '%') {
        s = ptv_compile_stage(c, "captured");
        if (!s)
            return ptc_errorf(err, PTC_ERR_PARSE, "", "--focus %s: %s has no captured stage", spec, c->id);
    }
    if (ptv_stage_load(s) != 0)
        return ptc_errorf(err, PTC_ERR_IO, "", "--focus %s: %s", spec, s->error);
    if (s->kind == 'G') {
        *item = ptv_find_value(s, name[0] == '%' ? name + 1 : name);
        if (*item < 0)
            return ptc_errorf(err, PTC_ERR_PARSE, "", "--focus %s: no value %%%s in %s of %s", spec,
                              name[0] == '%' ? name + 1 : name, s->name, c->id);
    } else {
        char *end;
        long k = strtol(strncmp(name, "kernel", 6) == 0 ? name + 6 : name, &end, 10);
        *item = *end == 0 && end != name ? ptv_find_kernel(s, (int)k) : -1;
        if (*item < 0)
            return ptc_errorf(err, PTC_ERR_PARSE, "", "--focus %s: expected a kernel number in %s of %s",
                              spec, s->name, c->id);
    }
    *stage = s;
    return 0;
}
