/* The report's model, read from what ptc measured.
 *
 * The input is the JSON that ptexplain's bootstrap writes from
 * ptc._C._measured(): totals, the frames that ran eagerly, and every event of
 * every compiled function in order ("compile" with its stats, captured graph
 * and trace folder; "recompile" and "recompile_limit" with the failing guard;
 * "untraceable", "skipped", "fallback", "backend_fallback",
 * "autograd_fallback", "graph_pieces"). Each compile becomes an xp_graph
 * (its graph parsed, its trace folder's kernels and metrics loaded, the
 * pieces its cuts made attached); breaks are grouped into
 * sites by code, place and stack; everything else is copied as it is. The
 * analysis (analyze.c) then ranks and explains.
 */
#include "explain.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *jstr(ptc_arena *a, const ptc_json *o, const char *key)
{
    const char *s = ptc_json_str(o, key, "");
    return s ? s : ptc_arena_strdup(a, "");
}

static int jint(const ptc_json *o, const char *key)
{
    return (int)ptc_json_num(o, key, 0);
}

static bool is_null(const ptc_json *j)
{
    return !j || j->kind == PTC_JNULL;
}

static xp_loc loc_of(ptc_arena *a, const ptc_json *o)
{
    return (xp_loc){jstr(a, o, "file"), jint(o, "line"), jint(o, "col"), jint(o, "endcol"), jstr(a, o, "text")};
}

/* ---- compiles ---------------------------------------------------------------------------- */

static void read_stats(ptc_arena *a, const ptc_json *st, xp_graph *g)
{
    g->backend = jstr(a, st, "backend");
    g->runs = (long)ptc_json_num(st, "runs", 0);
    g->graph_ms = ptc_json_num(st, "graph_ms", 0);
    g->backend_ms = ptc_json_num(st, "backend_ms", 0);
    g->breaks = (long)ptc_json_num(st, "breaks", 0);
    g->break_ms = ptc_json_num(st, "break_ms", 0);
    g->tail_ms = ptc_json_num(st, "tail_ms", 0);
    const ptc_json *s = ptc_json_get(st, "samples");
    if (s && s->kind == PTC_JARR) {
        g->samples = PTC_NEWN(a, double, s->n + 1);
        for (int i = 0; i < s->n; i++)
            if (s->items[i]->kind == PTC_JNUM)
                g->samples[g->nsamples++] = s->items[i]->num;
    }
    const ptc_json *c = ptc_json_get(st, "cross");
    if (c && c->kind == PTC_JARR) {
        g->cross = PTC_NEWN(a, xp_cross, c->n + 1);
        for (int i = 0; i < c->n; i++) {
            const ptc_json *t = c->items[i];
            if (t->kind == PTC_JARR && t->n == 3)
                g->cross[g->ncross++] = (xp_cross){(int)t->items[0]->num, (int)t->items[1]->num,
                                                   (int)t->items[2]->num};
        }
    }
}

/* Dynamic shapes: each symbol a use pinned to a value, with its line. */
static void read_specialized(xp_report *r, const ptc_json *ev)
{
    const ptc_json *sp = ptc_json_get(ev, "specialized");
    for (int i = 0; sp && sp->kind == PTC_JARR && i < sp->n; i++) {
        const ptc_json *x = sp->items[i];
        r->dynamic[r->ndynamic++] = ptc_arena_printf(
            r->arena, "%s: %s specialised to %lld by %s at %s:%d\n      %s", jstr(r->arena, ev, "frame"),
            ptc_json_str(x, "expr", "?"), (long long)ptc_json_num(x, "value", 0), ptc_json_str(x, "why", ""),
            ptc_json_str(x, "file", ""), (int)ptc_json_num(x, "line", 0), ptc_json_str(x, "text", ""));
    }
}

static void read_graph(xp_report *r, const ptc_json *ev, xp_graph *g)
{
    ptc_arena *a = r->arena;
    g->cf = jint(ev, "cf");
    g->id = jint(ev, "id");
    g->recompile = jint(ev, "recompile");
    g->frame = jstr(a, ev, "frame");
    g->reason = jstr(a, ev, "reason");
    g->end = jstr(a, ev, "end");
    g->trace = jstr(a, ev, "trace");
    g->nodes = jint(ev, "nodes");
    g->nguards = jint(ev, "guard_count");
    g->trace_ms = ptc_json_num(ev, "compile_ms", 0);
    g->backend = "";
    g->site = -1;
    const ptc_json *st = ptc_json_get(ev, "stats");
    if (!is_null(st))
        read_stats(a, st, g);
    const char *ptir = ptc_json_str(ev, "ptir", NULL);
    if (ptir && g->nodes > 0) {
        ptc_error err;
        g->mod = ptc_parse_module(ptir, strlen(ptir), g->frame, &err);
        g->g = g->mod && g->mod->ngraphs ? g->mod->graphs[0] : NULL;
    }
    if (g->trace[0]) {
        ptc_error err;
        xp_kernels_load(a, g->trace, &g->kn, &err);
        xp_metrics_load(g->trace, &g->times);
    }
    const ptc_json *cuts = ptc_json_get(ev, "cuts"); /* [[node id, reason], ...] */
    if (cuts && cuts->kind == PTC_JARR) {
        g->cuts = PTC_NEWN(a, const char *, cuts->n + 1);
        for (int i = 0; i < cuts->n; i++) {
            const ptc_json *c = cuts->items[i];
            bool ok = c->kind == PTC_JARR && c->n == 2 && c->items[1]->kind == PTC_JSTR;
            g->cuts[g->ncuts++] = ok ? c->items[1]->str : "";
        }
    }
}

/* The numbers of a [forward, backward] pair. */
static void read_pair(const ptc_json *o, const char *key, int pair[2])
{
    const ptc_json *p = ptc_json_get(o, key);
    for (int k = 0; k < 2; k++)
        pair[k] = p && p->kind == PTC_JARR && p->n == 2 ? (int)p->items[k]->num : 0;
}

/* A graph_pieces event: the pieces of compile `id` of function cf. */
static void read_pieces(xp_report *r, const ptc_json *ev)
{
    xp_graph *g = NULL;
    for (int i = 0; i < r->ngraphs && !g; i++)
        if (r->graphs[i].cf == jint(ev, "cf") && r->graphs[i].id == jint(ev, "id"))
            g = &r->graphs[i];
    const ptc_json *list = ptc_json_get(ev, "piece_list");
    if (!g || !list || list->kind != PTC_JARR)
        return;
    g->npieces = list->n;
    g->nprograms = jint(ev, "programs");
    g->pieces = PTC_NEWN(r->arena, xp_piece, list->n + 1);
    for (int i = 0; i < list->n; i++) {
        const ptc_json *p = list->items[i];
        xp_piece *x = &g->pieces[i];
        *x = (xp_piece){.ops = jint(p, "ops"),
                        .modules = jstr(r->arena, p, "modules"),
                        .program = jint(p, "program"),
                        .compile_ms = ptc_json_num(p, "compile_ms", 0)};
        read_pair(p, "kernels", x->kernels);
        read_pair(p, "externs", x->externs);
        const ptc_json *cut = ptc_json_get(p, "cut");
        int c = is_null(cut) ? -1 : (int)cut->num;
        x->ends = c >= 0 && c < g->ncuts ? g->cuts[c] : NULL;
    }
}

/* ---- break sites ------------------------------------------------------------------------- */

static bool same_site(const xp_site *s, const char *code, const xp_loc *l, const char *detail,
                      const char *stack)
{
    return !strcmp(s->code, code) && !strcmp(s->loc.file, l->file) && s->loc.line == l->line &&
           s->loc.col == l->col && !strcmp(s->detail, detail) && !strcmp(s->stack, stack);
}

/* The site of break dict b (created on first sight); its index. */
static int site_of(xp_report *r, const ptc_json *b, const char *frame)
{
    ptc_arena *a = r->arena;
    xp_loc l = loc_of(a, b);
    const char *code = jstr(a, b, "code"), *detail = jstr(a, b, "detail"), *stack = jstr(a, b, "stack");
    for (int i = 0; i < r->nsites; i++)
        if (same_site(&r->sites[i], code, &l, detail, stack))
            return i;
    xp_site *s = &r->sites[r->nsites];
    *s = (xp_site){.code = code, .name = jstr(a, b, "name"), .reason = jstr(a, b, "reason"),
                   .explanation = jstr(a, b, "explanation"), .hint = jstr(a, b, "hint"),
                   .detail = detail, .stack = stack, .frame = frame, .loc = l};
    return r->nsites++;
}

static void site_add_graph(xp_report *r, xp_site *s, int gi)
{
    int *g = PTC_NEWN(r->arena, int, s->ngraphs + 1);
    if (s->ngraphs)
        memcpy(g, s->graphs, sizeof *g * (size_t)s->ngraphs);
    g[s->ngraphs++] = gi;
    s->graphs = g;
}

/* ---- the rest ------------------------------------------------------------------------------ */

static void add_outside(xp_report *r, xp_out_kind kind, const char *what, const char *detail,
                        int graph)
{
    r->outside[r->noutside++] = (xp_outside){.kind = kind, .what = what, .detail = detail,
                                             .graph = graph, .count = 1, .loc = {"", 0, 0, 0, ""}};
}

/* The graph number of compile `id` of compiled function cf (0: none). */
static int graph_num(const xp_report *r, int cf, int id)
{
    for (int i = 0; i < r->ngraphs; i++)
        if (r->graphs[i].cf == cf && r->graphs[i].id == id)
            return r->graphs[i].num;
    return 0;
}

static void read_recompile(xp_report *r, const ptc_json *ev, bool limit)
{
    ptc_arena *a = r->arena;
    xp_recompile *rc = &r->recompiles[r->nrecompiles++];
    *rc = (xp_recompile){.cf = jint(ev, "cf"), .frame = jstr(a, ev, "frame"), .guard = jstr(a, ev, "guard"),
                         .kind = jstr(a, ev, "guard_kind"), .source = jstr(a, ev, "source"),
                         .expected = jstr(a, ev, "expected"), .old = jstr(a, ev, "old"),
                         .now = jstr(a, ev, "new"), .loc = loc_of(a, ev), .limit = limit,
                         .limit_value = jint(ev, "limit")};
}

static void read_event(xp_report *r, const ptc_json *ev)
{
    ptc_arena *a = r->arena;
    const char *kind = ptc_json_str(ev, "kind", "");
    int cf = jint(ev, "cf");
    if (!strcmp(kind, "recompile") || !strcmp(kind, "recompile_limit")) {
        read_recompile(r, ev, kind[9] == '_');
    } else if (!strcmp(kind, "untraceable")) {
        const ptc_json *b = ptc_json_get(ev, "break");
        if (!is_null(b) && ptc_json_str(b, "code", NULL) && *ptc_json_str(b, "code", "")) {
            xp_site *s = &r->sites[site_of(r, b, jstr(a, ev, "frame"))];
            s->untraceable = true;
        }
        add_outside(r, XP_OUT_EAGER_FRAME, jstr(a, ev, "frame"), jstr(a, ev, "why"), 0);
    } else if (!strcmp(kind, "skipped")) {
        add_outside(r, XP_OUT_SKIPPED, jstr(a, ev, "frame"), jstr(a, ev, "why"), 0);
    } else if (!strcmp(kind, "fallback")) {
        add_outside(r, XP_OUT_INTERNAL, jstr(a, ev, "frame"), jstr(a, ev, "error"), 0);
    } else if (!strcmp(kind, "backend_fallback")) {
        add_outside(r, XP_OUT_BACKEND, jstr(a, ev, "stage"), jstr(a, ev, "error"),
                    graph_num(r, cf, jint(ev, "id")));
    } else if (!strcmp(kind, "static_fallback")) {
        r->dynamic[r->ndynamic++] = ptc_arena_printf(a, "%s: symbolic sizes failed (%s); compiled with %s",
                                                     jstr(a, ev, "frame"), jstr(a, ev, "why"), jstr(a, ev, "then"));
    } else if (!strcmp(kind, "autograd_fallback")) {
        add_outside(r, XP_OUT_AUTOGRAD, jstr(a, ev, "frame"), jstr(a, ev, "why"),
                    graph_num(r, cf, jint(ev, "id")));
    } else if (!strcmp(kind, "graph_pieces")) {
        read_pieces(r, ev);
    }
}

/* Counts events by kind so that arrays can be sized once. */
static void count_events(const ptc_json *evs, int *ncompile, int *nother)
{
    *ncompile = *nother = 0;
    for (int i = 0; i < evs->n; i++) {
        const char *k = ptc_json_str(evs->items[i], "kind", "");
        if (!strcmp(k, "compile"))
            (*ncompile)++;
        else
            (*nother)++;
    }
}

static void read_functions(xp_report *r)
{
    r->functions = PTC_NEWN(r->arena, const char *, r->ngraphs + 1);
    int last_cf = -1;
    for (int i = 0; i < r->ngraphs; i++) {
        bool seen = false;
        for (int j = 0; j < i && !seen; j++)
            seen = r->graphs[j].cf == r->graphs[i].cf;
        if (!seen && r->graphs[i].cf != last_cf)
            r->functions[r->nfunctions++] = r->graphs[i].frame;
        last_cf = r->graphs[i].cf;
    }
}

static void read_top(xp_report *r, const ptc_json *root)
{
    ptc_arena *a = r->arena;
    r->calls = (long)ptc_json_num(root, "calls", 0);
    r->call_ms = ptc_json_num(root, "call_ms", 0);
    r->compile_ms = ptc_json_num(root, "compile_ms", 0);
    r->graph_ms = ptc_json_num(root, "graph_ms", 0);
    r->versions = jstr(a, root, "versions");
    r->proc_rank = (int)ptc_json_num(root, "rank", -1);
    r->pid = (long)ptc_json_num(root, "pid", 0);
    r->argv = jstr(a, root, "argv");
    /* a process the script started: its time since it imported ptc */
    r->wall_ms = ptc_json_num(root, "wall_ms", r->wall_ms);
    const ptc_json *e = ptc_json_get(root, "eager");
    if (e && e->kind == PTC_JARR) {
        r->eager = PTC_NEWN(a, xp_eager, e->n + 1);
        for (int i = 0; i < e->n; i++) {
            const ptc_json *t = e->items[i];
            if (t->kind == PTC_JARR && t->n == 4 && t->items[0]->kind == PTC_JSTR)
                r->eager[r->neager++] = (xp_eager){t->items[0]->str, (long)t->items[1]->num,
                                                   t->items[2]->num, t->items[3]->num};
        }
    }
    const ptc_json *n = ptc_json_get(root, "notes");
    if (n && n->kind == PTC_JARR) {
        r->notes = PTC_NEWN(a, const char *, n->n + 1);
        for (int i = 0; i < n->n; i++)
            if (n->items[i]->kind == PTC_JSTR)
                r->notes[r->nnotes++] = n->items[i]->str;
    }
}

int xp_report_build(xp_report *r, const char *json, size_t len, ptc_error *err)
{
    r->arena = ptc_arena_new();
    ptc_arena *a = r->arena;
    ptc_json *root = ptc_json_parse(a, json, len, "measurements", err);
    if (!root)
        return -1;
    const ptc_json *evs = ptc_json_get(root, "events");
    if (root->kind != PTC_JOBJ || !evs || evs->kind != PTC_JARR)
        return ptc_errorf(err, PTC_ERR_PARSE, "explain", "measurements: expected an object with \"events\"");
    read_top(r, root);
    int ncompile, nother, num = 0;
    count_events(evs, &ncompile, &nother);
    r->graphs = PTC_NEWN(a, xp_graph, ncompile + 1);
    r->sites = PTC_NEWN(a, xp_site, ncompile + nother + 1);
    r->recompiles = PTC_NEWN(a, xp_recompile, nother + 1);
    int ndyn = 0;
    for (int i = 0; i < evs->n; i++) {
        const ptc_json *sp = ptc_json_get(evs->items[i], "specialized");
        ndyn += sp && sp->kind == PTC_JARR ? sp->n : 0;
    }
    r->dynamic = PTC_NEWN(a, const char *, ndyn + nother + 1);
    int room = 2 * (ncompile + nother) + 1; /* outside: events, externs, eager ops */
    for (int i = 0; i < evs->n; i++) {
        const ptc_json *ev = evs->items[i];
        if (strcmp(ptc_json_str(ev, "kind", ""), "compile"))
            continue;
        xp_graph *g = &r->graphs[r->ngraphs++];
        read_graph(r, ev, g);
        read_specialized(r, ev);
        room += g->kn.nkernels;
        const ptc_json *b = ptc_json_get(ev, "break");
        if (!is_null(b)) {
            g->site = site_of(r, b, g->frame);
            site_add_graph(r, &r->sites[g->site], r->ngraphs - 1);
        }
        if (g->g) {
            g->num = ++num;
            r->ops_captured += g->g->nnodes;
        }
    }
    r->outside = PTC_NEWN(a, xp_outside, room);
    for (int i = 0; i < evs->n; i++)
        if (strcmp(ptc_json_str(evs->items[i], "kind", ""), "compile"))
            read_event(r, evs->items[i]);
    read_functions(r);
    xp_analyze(r);
    return 0;
}

void xp_report_free(xp_report *r)
{
    for (int i = 0; i < r->ngraphs; i++)
        ptc_module_free(r->graphs[i].mod);
    if (r->arena)
        ptc_arena_free(r->arena);
    r->arena = NULL;
}
