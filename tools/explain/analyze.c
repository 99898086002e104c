/* The analysis: from measured entries to ranked, explained break sites.
 *
 * A site's cost is what its entries measured: the time outside graphs from
 * the end of the graph before the break to the start of the next graph, on
 * every run (compiles excluded). Ranking uses a robust total, the fastest run
 * after each entry's first, times the runs: load only ever adds time, and a
 * first run pays one-time costs (a library's start-up, lazy imports, caches
 * filling; an rfft's first call once cost 12 ms), so a site that ran once
 * ranks as noise. Sites are then grouped into bands, costliest first: a band
 * holds every site within a factor of ten of its costliest one, and never
 * splits two sites within a factor of two of each other (a fixed grid would
 * split 9.9 ms from 10.1 ms); costs below 1 ms count as 1 ms, scheduler and
 * allocator noise. Sites in one band are ordered by source position, so the
 * order is the same from run to run unless a cost moves by several times.
 * Tensors that crossed a break
 * (an output of one graph read by the next, found by identity at run time)
 * are tied to the kernels that wrote and read them through the trace
 * folders' buffer tables. The rest collects what ran outside ptc's kernels
 * and the performance hints (syncs, dtype round trips, reductions that make
 * their own pass over memory, graphs that needed gradients).
 */
#include "explain.h"

#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double xp_median(const double *v, int n)
{
    if (n <= 0)
        return 0;
    double *s = malloc(sizeof *s * (size_t)n);
    memcpy(s, v, sizeof *s * (size_t)n);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    free(s);
    return m;
}

/* ---- source lines ------------------------------------------------------------------------- */

/* Line `line` of `file` (arena copy; "" when unreadable). */
static const char *source_line(ptc_arena *a, const char *file, int line)
{
    FILE *f = file && *file && line > 0 ? fopen(file, "r") : NULL;
    if (!f)
        return "";
    char buf[4096];
    const char *out = "";
    for (int i = 1; fgets(buf, sizeof buf, f); i++) {
        if (i == line) {
            buf[strcspn(buf, "\r\n")] = 0;
            out = ptc_arena_strdup(a, buf);
            break;
        }
    }
    fclose(f);
    return out;
}

/* The place of a captured node: its source line with the expression. */
static xp_loc node_loc(ptc_arena *a, const ptc_node *n)
{
    xp_loc l = {"", 0, 0, 0, ""};
    if (!n || !n->loc.file)
        return l;
    l.file = n->loc.file;
    l.line = n->loc.line;
    l.col = n->loc.col;
    l.text = source_line(a, l.file, l.line);
    size_t span = n->loc.text ? strlen(n->loc.text) : 0;
    if (l.col > 0 && span && (size_t)l.col - 1 + span <= strlen(l.text) &&
        !strncmp(l.text + l.col - 1, n->loc.text, span))
        l.endcol = l.col + (int)span;
    return l;
}

static const ptc_node *node_making(const ptc_graph *g, const char *value)
{
    if (!g || !value)
        return NULL;
    const char *name = value[0] == '%' ? value + 1 : value;
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->nout; j++)
            if (!strcmp(g->nodes[i]->outs[j]->name, name))
                return g->nodes[i];
    return NULL;
}

static double type_bytes(const ptc_ttype *t)
{
    double n = (double)ptc_dtype_size(t->dtype);
    for (int i = 0; i < t->ndim; i++)
        n *= ptc_dim_is_static(t->shape[i]) ? (double)t->shape[i].value : 1;
    return n;
}

static const char *type_text(ptc_arena *a, const ptc_ttype *t)
{
    ptc_buf b = {0};
    ptc_ttype_print(&b, t, false);
    const char *s = ptc_arena_strdup(a, b.data ? b.data : "?");
    ptc_buf_free(&b);
    return s;
}

/* ---- break costs ---------------------------------------------------------------------------- */

static const xp_graph *graph_by_id(const xp_report *r, int cf, int id)
{
    for (int i = 0; i < r->ngraphs; i++)
        if (r->graphs[i].cf == cf && r->graphs[i].id == id)
            return &r->graphs[i];
    return NULL;
}

/* The smaller of the fastest so far (negative: none yet) and ms. */
static double fastest(double so_far, double ms)
{
    return so_far < 0 || ms < so_far ? ms : so_far;
}

static void site_cost(xp_report *r, xp_site *s)
{
    int nsamples = 0;
    for (int i = 0; i < s->ngraphs; i++)
        nsamples += r->graphs[s->graphs[i]].nsamples;
    double *all = PTC_NEWN(r->arena, double, nsamples + 1);
    int k = 0;
    double steady = -1;
    for (int i = 0; i < s->ngraphs; i++) {
        const xp_graph *g = &r->graphs[s->graphs[i]];
        s->runs += g->breaks;
        s->total_ms += g->break_ms;
        for (int j = 0; j < g->nsamples; j++)
            all[k++] = g->samples[j];
        for (int j = 1; j < g->nsamples; j++) /* an entry's first run pays one-time costs */
            steady = fastest(steady, g->samples[j]);
    }
    if (s->untraceable) {
        for (int i = 0; i < r->neager; i++) {
            if (!strcmp(r->eager[i].frame, s->frame)) {
                s->runs += r->eager[i].calls;
                s->total_ms += r->eager[i].ms;
                if (r->eager[i].calls > 1)
                    steady = fastest(steady, r->eager[i].steady_ms);
            }
        }
    }
    s->steady_ms = steady > 0 ? steady : 0;
    s->median_ms = k ? xp_median(all, k) : s->runs ? s->total_ms / (double)s->runs : 0;
    s->rank_ms = s->steady_ms * (double)s->runs;
}

/* Joins the names of the kernels of kn that read buffer buf. */
static const char *readers(ptc_arena *a, const xp_kernels *kn, int buf)
{
    ptc_buf b = {0};
    for (int i = 0; i < kn->nkernels; i++)
        for (int j = 0; j < kn->kernels[i].nreads; j++)
            if (kn->kernels[i].reads[j] == buf) {
                ptc_buf_printf(&b, "%s%s", b.len ? ", " : "", kn->kernels[i].name);
                break;
            }
    const char *s = ptc_arena_strdup(a, b.data ? b.data : "");
    ptc_buf_free(&b);
    return s;
}

static void add_crossing(xp_report *r, xp_site *s, const xp_graph *g, const xp_graph *next,
                         const xp_cross *c)
{
    ptc_arena *a = r->arena;
    if (!g->g || !next->g || c->out >= g->g->noutputs)
        return;
    const ptc_value *v = g->g->outputs[c->out];
    for (int i = 0; i < s->ncross; i++)
        if (s->cross[i].from_graph == g->num && s->cross[i].to_graph == next->num &&
            !strcmp(s->cross[i].value + 1, v->name))
            return;
    xp_crossing *x = &s->cross[s->ncross++];
    *x = (xp_crossing){.from_graph = g->num, .to_graph = next->num,
                       .value = ptc_arena_printf(a, "%%%s", v->name), .type = type_text(a, &v->type),
                       .op = v->def ? ptc_op_name(v->def->op) : "input", .made = node_loc(a, v->def),
                       .bytes = type_bytes(&v->type), .producer = "", .consumers = ""};
    const xp_buf *ob = g->kn.present ? xp_buf_find(&g->kn, XP_BUF_OUTPUT, c->out) : NULL;
    const xp_kernel *k = ob ? xp_kernel_writing(&g->kn, ob->num) : NULL;
    if (k)
        x->producer = k->name;
    const xp_buf *ib = next->kn.present ? xp_buf_find(&next->kn, XP_BUF_INPUT, c->in) : NULL;
    if (ib)
        x->consumers = readers(a, &next->kn, ib->num);
}

static void site_crossings(xp_report *r, xp_site *s)
{
    int n = 0;
    for (int i = 0; i < s->ngraphs; i++)
        n += r->graphs[s->graphs[i]].ncross;
    s->cross = PTC_NEWN(r->arena, xp_crossing, n + 1);
    for (int i = 0; i < s->ngraphs; i++) {
        const xp_graph *g = &r->graphs[s->graphs[i]];
        for (int j = 0; j < g->ncross; j++) {
            const xp_graph *next = graph_by_id(r, g->cf, g->cross[j].next);
            if (next)
                add_crossing(r, s, g, next, &g->cross[j]);
        }
    }
}

static int cmp_loc(const xp_loc *a, const xp_loc *b)
{
    int c = strcmp(a->file, b->file);
    if (c)
        return c;
    if (a->line != b->line)
        return a->line < b->line ? -1 : 1;
    return a->col < b->col ? -1 : a->col > b->col;
}

static int cmp_site(const void *pa, const void *pb)
{
    const xp_site *a = pa, *b = pb;
    if (a->band != b->band)
        return a->band < b->band ? -1 : 1;
    int c = cmp_loc(&a->loc, &b->loc);
    if (c)
        return c;
    c = strcmp(a->code, b->code);
    return c ? c : strcmp(a->stack, b->stack);
}

static int cmp_cost_desc(const void *pa, const void *pb)
{
    const xp_site *a = *(xp_site *const *)pa, *b = *(xp_site *const *)pb;
    return (a->rank_ms < b->rank_ms) - (a->rank_ms > b->rank_ms);
}

#define NOISE_MS 1.0   /* a ranked cost below this is noise */
#define BAND_SPAN 10.0 /* a band reaches this factor below its costliest site */
#define BAND_GAP 2.0   /* sites closer than this factor share a band */

/* Bands by cost, 1 the costliest (see the top of the file). A site starts a
 * new band only when it is both far below the band's costliest site and
 * well below the site before it, so near-equal costs are never split. */
static void assign_bands(xp_report *r)
{
    xp_site **by_cost = PTC_NEWN(r->arena, xp_site *, r->nsites + 1);
    for (int i = 0; i < r->nsites; i++)
        by_cost[i] = &r->sites[i];
    qsort(by_cost, (size_t)r->nsites, sizeof *by_cost, cmp_cost_desc);
    int band = 1;
    double leader = 0, prev = 0;
    for (int i = 0; i < r->nsites; i++) {
        double c = by_cost[i]->rank_ms > NOISE_MS ? by_cost[i]->rank_ms : NOISE_MS;
        if (i == 0) {
            leader = c;
        } else if (c * BAND_SPAN < leader && c * BAND_GAP <= prev) {
            band++;
            leader = c;
        }
        by_cost[i]->band = band;
        prev = c;
    }
}

/* Sorting moves sites: graphs point at them by index. */
static void rank_sites(xp_report *r)
{
    assign_bands(r);
    qsort(r->sites, (size_t)r->nsites, sizeof *r->sites, cmp_site);
    for (int i = 0; i < r->ngraphs; i++)
        r->graphs[i].site = -1;
    for (int i = 0; i < r->nsites; i++)
        for (int j = 0; j < r->sites[i].ngraphs; j++)
            r->graphs[r->sites[i].graphs[j]].site = i;
}

/* ---- what ran outside ptc's kernels --------------------------------------------------------- */

static xp_outside *push_outside(xp_report *r, xp_out_kind kind, const char *what, const char *detail,
                                int graph, xp_loc loc, const char *module_path)
{
    for (int i = 0; i < r->noutside; i++) {
        xp_outside *o = &r->outside[i];
        if (o->kind == kind && !strcmp(o->what, what) && !strcmp(o->detail, detail) &&
            !cmp_loc(&o->loc, &loc) && !strcmp(o->module_path ? o->module_path : "", module_path ? module_path : "")) {
            o->count++;
            return o;
        }
    }
    xp_outside *o = &r->outside[r->noutside++];
    *o = (xp_outside){kind, what, detail, graph, 1, loc, module_path};
    return o;
}

static bool eager_op_code(const char *code)
{
    static const char *codes[] = {"PTC-B007", "PTC-B008", "PTC-B012", "PTC-B023", "PTC-B026"};
    for (size_t i = 0; i < sizeof codes / sizeof *codes; i++)
        if (!strcmp(code, codes[i]))
            return true;
    return false;
}

static void externs(xp_report *r, const xp_graph *g)
{
    for (int i = 0; i < g->kn.nkernels; i++) {
        const xp_kernel *k = &g->kn.kernels[i];
        if (!k->is_extern)
            continue;
        const ptc_node *n = k->nprov ? node_making(g->g, k->prov[0]) : NULL;
        push_outside(r, XP_OUT_EXTERN, k->name, n ? ptc_op_name(n->op) : "", g->num, node_loc(r->arena, n),
                     n ? n->module_path : NULL);
        r->nextern++;
    }
}

/* "prims: sort (%3): no decomposition ..." -> the op and its value. */
static void no_lowering(xp_report *r, xp_outside *o)
{
    const char *msg = o->detail;
    if (!strstr(msg, "no decomposition") && !strstr(msg, "no lowering") && !strstr(msg, "Unsupported"))
        return;
    const char *paren = strstr(msg, " (%");
    if (!paren)
        return;
    const char *start = paren;
    while (start > msg && start[-1] != ' ')
        start--;
    const char *op = ptc_arena_strndup(r->arena, start, (size_t)(paren - start));
    const char *val = ptc_arena_strndup(r->arena, paren + 2, strcspn(paren + 2, ")"));
    const xp_graph *g = NULL;
    for (int i = 0; i < r->ngraphs; i++)
        if (r->graphs[i].num == o->graph)
            g = &r->graphs[i];
    const ptc_node *n = g ? node_making(g->g, val) : NULL;
    push_outside(r, XP_OUT_NO_LOWERING, op, msg, o->graph, node_loc(r->arena, n), n ? n->module_path : NULL);
    r->ops_no_lowering++;
}

static void outside_ops(xp_report *r)
{
    int nevents = r->noutside;
    for (int i = 0; i < nevents; i++)
        if (r->outside[i].kind == XP_OUT_BACKEND)
            no_lowering(r, &r->outside[i]);
    for (int i = 0; i < r->nsites; i++)
        if (eager_op_code(r->sites[i].code))
            push_outside(r, XP_OUT_EAGER_OP, r->sites[i].detail, r->sites[i].code, 0, r->sites[i].loc, NULL);
    int eager_graphs = 0;
    for (int i = 0; i < r->ngraphs; i++) {
        const xp_graph *g = &r->graphs[i];
        externs(r, g);
        bool fell_back = false;
        for (int j = 0; j < nevents; j++)
            fell_back |= r->outside[j].graph == g->num && (r->outside[j].kind == XP_OUT_AUTOGRAD ||
                                                            r->outside[j].kind == XP_OUT_BACKEND);
        if (g->g && !strcmp(g->backend, "eager") && !fell_back)
            eager_graphs++;
    }
    if (eager_graphs)
        r->outside[r->noutside++] = (xp_outside){XP_OUT_EAGER_BACKEND, "eager", "", 0, eager_graphs,
                                                 {"", 0, 0, 0, ""}, NULL};
    for (int i = 0; i < r->neager; i++) {
        xp_outside *o = NULL;
        for (int j = 0; j < r->noutside && !o; j++)
            if (r->outside[j].kind == XP_OUT_EAGER_FRAME && !strcmp(r->outside[j].what, r->eager[i].frame))
                o = &r->outside[j];
        if (!o) {
            o = &r->outside[r->noutside++];
            *o = (xp_outside){XP_OUT_EAGER_FRAME, r->eager[i].frame, "recompile limit", 0, 0, {"", 0, 0, 0, ""}, NULL};
        }
        o->count = (int)r->eager[i].calls;
    }
}

/* ---- hints ----------------------------------------------------------------------------------- */

/* Adds a hint; one with the same kind, key and place counts as a repeat. */
static void hint(xp_report *r, xp_hint_kind kind, xp_loc loc, const char *key, const char *text)
{
    for (int i = 0; key && i < r->nhints; i++) {
        xp_hint *o = &r->hints[i];
        if (o->kind == kind && o->key && !strcmp(o->key, key) && !cmp_loc(&o->loc, &loc)) {
            o->others++;
            return;
        }
    }
    xp_hint *h = PTC_NEWN(r->arena, xp_hint, r->nhints + 1);
    if (r->nhints)
        memcpy(h, r->hints, sizeof *h * (size_t)r->nhints);
    h[r->nhints++] = (xp_hint){kind, text, loc, key, 0};
    r->hints = h;
}

static bool graph_on_cuda(const xp_graph *g)
{
    for (int i = 0; g->g && i < g->g->ninputs; i++)
        if (g->g->inputs[i]->type.device.kind == PTC_DEV_CUDA)
            return true;
    return false;
}

static void sync_hints(xp_report *r)
{
    static const char *codes[] = {"PTC-B001", "PTC-B002", "PTC-B003", "PTC-B004"};
    for (int i = 0; i < r->nsites; i++) {
        const xp_site *s = &r->sites[i];
        bool sync = false, cuda = false;
        for (size_t c = 0; c < sizeof codes / sizeof *codes; c++)
            sync |= !strcmp(s->code, codes[c]);
        for (int j = 0; j < s->ngraphs; j++)
            cuda |= graph_on_cuda(&r->graphs[s->graphs[j]]);
        if (!sync)
            continue;
        hint(r, XP_HINT_SYNC, s->loc, NULL,
             ptc_arena_printf(r->arena,
                              "%s reads a tensor's value in Python (%ld time%s): the graph before it must "
                              "finish first%s. Keep the value on the device (torch.where, masks) or read it "
                              "once after the loop.",
                              s->detail, s->runs, s->runs == 1 ? "" : "s",
                              cuda ? ", a host-device sync on the GPU" : " (a host-device sync on a GPU)"));
    }
    for (int i = 0; i < r->ngraphs; i++) {
        const ptc_graph *g = r->graphs[i].g;
        for (int j = 0; g && j < g->nnodes; j++) {
            const ptc_node *n = g->nodes[j];
            if (n->op != PTC_OP_TO || !n->nout || !n->args[0].v)
                continue;
            const ptc_ttype *from = &n->args[0].v->type, *to = &n->outs[0]->type;
            if (ptc_device_eq(from->device, to->device))
                continue;
            char a[32], b[32];
            ptc_device_str(from->device, a, sizeof a);
            ptc_device_str(to->device, b, sizeof b);
            hint(r, XP_HINT_SYNC, node_loc(r->arena, n), ptc_arena_printf(r->arena, "to %s %s", a, b),
                 ptc_arena_printf(r->arena, "graph %d copies a %s tensor from %s to %s: the copy waits for "
                                            "the device. Move it out of the hot path or keep the data on one device.",
                                  r->graphs[i].num, type_text(r->arena, to), a, b));
        }
    }
}

static void dtype_hints(xp_report *r)
{
    for (int i = 0; i < r->ngraphs; i++) {
        const ptc_graph *g = r->graphs[i].g;
        for (int j = 0; g && j < g->nnodes; j++) {
            const ptc_node *n = g->nodes[j];
            const ptc_value *in = n->nargs && n->args[0].kind == PTC_ARG_VALUE ? n->args[0].v : NULL;
            const ptc_node *p = in ? in->def : NULL;
            if (n->op != PTC_OP_TO || !p || p->op != PTC_OP_TO || !p->nargs || p->args[0].kind != PTC_ARG_VALUE)
                continue;
            ptc_dtype a = p->args[0].v->type.dtype, mid = in->type.dtype, b = n->outs[0]->type.dtype;
            if (a != b || a == mid)
                continue;
            bool lossy = ptc_dtype_size(mid) < ptc_dtype_size(a) ||
                         (ptc_dtype_is_float(a) && !ptc_dtype_is_float(mid));
            hint(r, XP_HINT_DTYPE, node_loc(r->arena, n), ptc_arena_printf(r->arena, "%s %s", ptc_dtype_name(a), ptc_dtype_name(mid)),
                 ptc_arena_printf(r->arena,
                                  "graph %d converts %%%s from %s to %s and back to %s: two conversions%s. "
                                  "Drop the round trip, or keep the narrower dtype if that was the point.",
                                  r->graphs[i].num, p->args[0].v->name, ptc_dtype_name(a), ptc_dtype_name(mid),
                                  ptc_dtype_name(b), lossy ? " that lose precision" : " for nothing"));
        }
    }
}

static void reduction_hints(xp_report *r)
{
    for (int i = 0; i < r->ngraphs; i++) {
        const xp_graph *g = &r->graphs[i];
        for (int k = 0; g->kn.present && k < g->kn.nkernels; k++) {
            const xp_kernel *kern = &g->kn.kernels[k];
            if (kern->is_extern || !kern->nreduce)
                continue;
            for (int b = 0; b < kern->nreads; b++) {
                const xp_kernel *w = xp_kernel_writing(&g->kn, kern->reads[b]);
                if (!w || w == kern || w->is_extern)
                    continue;
                const ptc_node *n = node_making(g->g, kern->reduce_prov[0]);
                const char *type = "";
                for (int j = 0; j < g->kn.nbufs; j++)
                    if (g->kn.bufs[j].num == kern->reads[b])
                        type = g->kn.bufs[j].type;
                hint(r, XP_HINT_REDUCTION, node_loc(r->arena, n), kern->name,
                     ptc_arena_printf(r->arena,
                                      "graph %d: the reduction %s%s%s (kernel %s) makes its own pass: it reads "
                                      "back buf%d (%s) that kernel %s wrote, instead of fusing with it. "
                                      "Reductions over different dimensions than their producer cannot share its "
                                      "loop; compute it from the producer's inputs or reduce along the same dimension.",
                                      g->num, n ? ptc_op_name(n->op) : "", n && n->loc.text ? " " : "",
                                      n && n->loc.text ? ptc_arena_printf(r->arena, "(%s)", n->loc.text) : "",
                                      kern->name, kern->reads[b], type, w->name));
                break;
            }
        }
        if (g->kn.refused_recompute + g->kn.refused_memory > 0)
            hint(r, XP_HINT_REDUCTION, (xp_loc){"", 0, 0, 0, ""},
                 ptc_arena_printf(r->arena, "declined %d %d", g->kn.refused_recompute, g->kn.refused_memory),
                 ptc_arena_printf(r->arena,
                                  "graph %d: the scheduler declined %d fusion%s that would recompute an "
                                  "expensive producer and %d that would raise peak memory (see its kernels.txt "
                                  "with PTC_TRACE_DIR).",
                                  g->num, g->kn.refused_recompute, g->kn.refused_recompute == 1 ? "" : "s",
                                  g->kn.refused_memory));
    }
}

static void other_hints(xp_report *r)
{
    int grad = 0;
    for (int i = 0; i < r->noutside; i++)
        if (r->outside[i].kind == XP_OUT_AUTOGRAD)
            grad++;
    if (grad)
        hint(r, XP_HINT_GRAD, (xp_loc){"", 0, 0, 0, ""}, NULL,
             ptc_arena_printf(r->arena,
                              "%d graph%s needed gradients (parameters or inputs require grad while grad mode "
                              "is on) and could not be compiled for training (the reason is on its line above), "
                              "so %s through torch ops, not ptc's fused kernels. For inference, call the "
                              "model under torch.no_grad() or torch.inference_mode().",
                              grad, grad == 1 ? "" : "s", grad == 1 ? "it ran" : "they ran"));
    for (int i = 0; i < r->nrecompiles; i++)
        if (r->recompiles[i].limit)
            hint(r, XP_HINT_RECOMPILE, r->recompiles[i].loc, NULL, xp_recompile_advice(&r->recompiles[i]));
}

static bool has_metric(const ptc_metrics *m, const char *name)
{
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->items[i].name, name) == 0)
            return true;
    return false;
}

/* Compile time per stage, summed over the graphs: tracing, then the stages
 * of metrics.json in pipeline order. A training graph's joint graph,
 * partition and backward stages are listed when some graph was compiled for
 * training (their presence, not their times, decides the line's words). */
static void stage_times(xp_report *r)
{
    static const struct {
        const char *name;
        bool training;
    } stages[] = {{"joint", true},          {"partition", true},       {"prims", false},
                  {"loops", false},         {"kernels", false},        {"codegen", false},
                  {"backward_prims", true}, {"backward_loops", true},  {"backward_kernels", true}};
    bool training = false;
    for (int i = 0; i < r->ngraphs; i++)
        training |= has_metric(&r->graphs[i].times, "joint");
    double tracing = 0;
    for (int i = 0; i < r->ngraphs; i++) {
        tracing += r->graphs[i].trace_ms;
        for (size_t s = 0; s < sizeof stages / sizeof *stages; s++) {
            if (stages[s].training && !training)
                continue;
            /* every stage, also at 0 ms: the line's words must not depend on timing */
            double v = ptc_metrics_get(&r->graphs[i].times, stages[s].name);
            ptc_metrics_add(&r->stages, stages[s].name, v > 0 ? v : 0, true);
        }
    }
    double parts = tracing;
    for (int i = 0; i < r->stages.n; i++)
        parts += r->stages.items[i].value;
    ptc_metrics staged = {0};
    ptc_metrics_add(&staged, "tracing", tracing, true);
    for (int i = 0; i < r->stages.n; i++)
        ptc_metrics_add(&staged, r->stages.items[i].name, r->stages.items[i].value, true);
    ptc_metrics_add(&staged, "other", r->compile_ms > parts ? r->compile_ms - parts : 0, true);
    r->stages = staged;
}

void xp_analyze(xp_report *r)
{
    for (int i = 0; i < r->nsites; i++) {
        site_cost(r, &r->sites[i]);
        site_crossings(r, &r->sites[i]);
    }
    rank_sites(r);
    for (int i = 0; i < r->nsites; i++)
        r->sites[i].advice = xp_advice(r->arena, &r->sites[i]);
    outside_ops(r);
    sync_hints(r);
    dtype_hints(r);
    reduction_hints(r);
    other_hints(r);
    stage_times(r);
}
