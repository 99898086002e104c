/* The report as JSON (ptexplain --json): the same content as the text, in
 * the same order, with every number a number and every place an object
 * {"file", "line", "col", "endcol", "text"}. Times are milliseconds; keys
 * ending in "_ms" are the only ones that vary between runs of the same
 * program. The layout is documented in ptexplain(1).
 */
#include "explain.h"

#include <string.h>

static void kstr(ptc_jw *w, const char *k, const char *v)
{
    ptc_jw_key(w, k);
    ptc_jw_str(w, v ? v : "");
}

static void kint(ptc_jw *w, const char *k, int64_t v)
{
    ptc_jw_key(w, k);
    ptc_jw_int(w, v);
}

static void knum(ptc_jw *w, const char *k, double v)
{
    ptc_jw_key(w, k);
    ptc_jw_num(w, v);
}

static void kloc(ptc_jw *w, const char *k, const xp_loc *l)
{
    ptc_jw_key(w, k);
    if (!l->file || !*l->file) {
        ptc_jw_null(w);
        return;
    }
    ptc_jw_obj_begin(w);
    kstr(w, "file", l->file);
    kint(w, "line", l->line);
    kint(w, "col", l->col);
    kint(w, "endcol", l->endcol);
    kstr(w, "text", l->text);
    ptc_jw_obj_end(w);
}

static void summary(ptc_jw *w, const xp_report *r)
{
    long breaks = 0;
    for (int i = 0; i < r->nsites; i++)
        breaks += r->sites[i].runs;
    int graphs = 0;
    for (int i = 0; i < r->ngraphs; i++)
        graphs += r->graphs[i].g != NULL;
    ptc_jw_key(w, "summary");
    ptc_jw_obj_begin(w);
    ptc_jw_key(w, "functions");
    ptc_jw_arr_begin(w);
    for (int i = 0; i < r->nfunctions; i++)
        ptc_jw_str(w, r->functions[i]);
    ptc_jw_arr_end(w);
    kint(w, "graphs", graphs);
    kint(w, "break_sites", r->nsites);
    kint(w, "breaks_run", breaks);
    kint(w, "recompiles", r->nrecompiles);
    kint(w, "ops_captured", r->ops_captured);
    kint(w, "ops_no_lowering", r->ops_no_lowering);
    kint(w, "extern_kernels", r->nextern);
    kint(w, "compiled_calls", r->calls);
    knum(w, "script_ms", r->wall_ms);
    knum(w, "compiled_calls_ms", r->call_ms);
    knum(w, "inside_graphs_ms", r->graph_ms);
    double outside = r->call_ms - r->graph_ms - r->compile_ms;
    knum(w, "outside_graphs_ms", outside > 0 ? outside : 0);
    knum(w, "compile_ms", r->compile_ms);
    ptc_jw_key(w, "compile_stages_ms");
    ptc_jw_obj_begin(w);
    for (int i = 0; i < r->stages.n; i++)
        knum(w, r->stages.items[i].name, r->stages.items[i].value);
    ptc_jw_obj_end(w);
    ptc_jw_obj_end(w);
}

static void site(ptc_jw *w, const xp_report *r, int rank, const xp_site *s)
{
    ptc_jw_obj_begin(w);
    kint(w, "rank", rank);
    kstr(w, "code", s->code);
    kstr(w, "name", s->name);
    kstr(w, "reason", s->reason);
    kstr(w, "detail", s->detail);
    kstr(w, "function", s->frame);
    kloc(w, "where", &s->loc);
    kstr(w, "stack", s->stack);
    ptc_jw_key(w, "untraceable");
    ptc_jw_bool(w, s->untraceable);
    kint(w, "runs", s->runs);
    knum(w, "cost_ms", s->total_ms);
    knum(w, "median_ms", s->median_ms);
    knum(w, "steady_ms", s->steady_ms);
    knum(w, "rank_ms", s->rank_ms);
    kint(w, "band", s->band);
    ptc_jw_key(w, "after_graphs");
    ptc_jw_arr_begin(w);
    for (int i = 0; i < s->ngraphs; i++)
        if (r->graphs[s->graphs[i]].num)
            ptc_jw_int(w, r->graphs[s->graphs[i]].num);
    ptc_jw_arr_end(w);
    ptc_jw_key(w, "crossing");
    ptc_jw_arr_begin(w);
    for (int i = 0; i < s->ncross; i++) {
        const xp_crossing *x = &s->cross[i];
        ptc_jw_obj_begin(w);
        kint(w, "from_graph", x->from_graph);
        kint(w, "to_graph", x->to_graph);
        kstr(w, "value", x->value);
        kstr(w, "type", x->type);
        kstr(w, "op", x->op);
        kloc(w, "made", &x->made);
        knum(w, "bytes", x->bytes);
        kstr(w, "producer", x->producer);
        kstr(w, "consumers", x->consumers);
        ptc_jw_obj_end(w);
    }
    ptc_jw_arr_end(w);
    kstr(w, "explanation", s->explanation);
    kstr(w, "hint", s->advice);
    ptc_jw_obj_end(w);
}

static void pair(ptc_jw *w, const char *k, const int v[2])
{
    ptc_jw_key(w, k);
    ptc_jw_arr_begin(w);
    ptc_jw_int(w, v[0]);
    ptc_jw_int(w, v[1]);
    ptc_jw_arr_end(w);
}

/* The pieces a graph's cuts made (none: []). */
static void pieces(ptc_jw *w, const xp_graph *g)
{
    kint(w, "programs", g->nprograms);
    ptc_jw_key(w, "pieces");
    ptc_jw_arr_begin(w);
    for (int k = 0; k < g->npieces; k++) {
        const xp_piece *p = &g->pieces[k];
        ptc_jw_obj_begin(w);
        kint(w, "ops", p->ops);
        kstr(w, "modules", p->modules);
        kint(w, "program", p->program);
        knum(w, "compile_ms", p->compile_ms);
        pair(w, "kernels", p->kernels);
        pair(w, "externs", p->externs);
        ptc_jw_key(w, "ends_at");
        if (p->ends)
            ptc_jw_str(w, p->ends);
        else
            ptc_jw_null(w);
        ptc_jw_obj_end(w);
    }
    ptc_jw_arr_end(w);
}

static void graphs(ptc_jw *w, const xp_report *r)
{
    ptc_jw_key(w, "graphs");
    ptc_jw_arr_begin(w);
    for (int i = 0; i < r->ngraphs; i++) {
        const xp_graph *g = &r->graphs[i];
        if (!g->num)
            continue;
        ptc_jw_obj_begin(w);
        kint(w, "graph", g->num);
        kstr(w, "function", g->frame);
        kint(w, "recompile", g->recompile);
        kstr(w, "reason", g->reason);
        kstr(w, "end", g->end);
        kstr(w, "backend", g->backend);
        kint(w, "ops", g->g ? g->g->nnodes : 0);
        kint(w, "guards", g->nguards);
        kint(w, "kernels", g->kn.nkernels);
        kint(w, "runs", g->runs);
        knum(w, "graph_ms", g->graph_ms);
        knum(w, "trace_ms", g->trace_ms);
        knum(w, "backend_ms", g->backend_ms);
        pieces(w, g);
        ptc_jw_obj_end(w);
    }
    ptc_jw_arr_end(w);
}

static void recompiles(ptc_jw *w, const xp_report *r)
{
    ptc_jw_key(w, "recompiles");
    ptc_jw_arr_begin(w);
    for (int i = 0; i < r->nrecompiles; i++) {
        const xp_recompile *x = &r->recompiles[i];
        ptc_jw_obj_begin(w);
        kstr(w, "function", x->frame);
        kstr(w, "guard", x->expected);
        kstr(w, "kind", x->kind);
        kstr(w, "source", x->source);
        kstr(w, "old", x->old);
        kstr(w, "new", x->now);
        kloc(w, "made_at", &x->loc);
        ptc_jw_key(w, "limit");
        ptc_jw_bool(w, x->limit);
        kstr(w, "hint", xp_recompile_advice(x));
        ptc_jw_obj_end(w);
    }
    ptc_jw_arr_end(w);
}

static const char *outside_kind[] = {
    [XP_OUT_EAGER_OP] = "eager_op", [XP_OUT_AUTOGRAD] = "autograd", [XP_OUT_BACKEND] = "backend_fallback",
    [XP_OUT_NO_LOWERING] = "no_lowering", [XP_OUT_EAGER_BACKEND] = "eager_backend", [XP_OUT_EXTERN] = "extern",
    [XP_OUT_EAGER_FRAME] = "eager_frame", [XP_OUT_INTERNAL] = "internal_error", [XP_OUT_SKIPPED] = "skipped",
};

static const char *hint_kind[] = {
    [XP_HINT_SYNC] = "sync", [XP_HINT_DTYPE] = "dtype_round_trip", [XP_HINT_REDUCTION] = "unfused_reduction",
    [XP_HINT_GRAD] = "needs_grad", [XP_HINT_RECOMPILE] = "recompile_limit",
};

static void rest(ptc_jw *w, const xp_report *r)
{
    ptc_jw_key(w, "outside");
    ptc_jw_arr_begin(w);
    for (int i = 0; i < r->noutside; i++) {
        const xp_outside *x = &r->outside[i];
        ptc_jw_obj_begin(w);
        kstr(w, "kind", outside_kind[x->kind]);
        kstr(w, "what", x->what);
        kstr(w, "detail", x->detail);
        kint(w, "graph", x->graph);
        kint(w, "count", x->count);
        kloc(w, "where", &x->loc);
        kstr(w, "module", x->module_path);
        ptc_jw_obj_end(w);
    }
    ptc_jw_arr_end(w);
    ptc_jw_key(w, "hints");
    ptc_jw_arr_begin(w);
    for (int i = 0; i < r->nhints; i++) {
        ptc_jw_obj_begin(w);
        kstr(w, "kind", hint_kind[r->hints[i].kind]);
        kstr(w, "text", r->hints[i].text);
        kloc(w, "where", &r->hints[i].loc);
        kint(w, "other_graphs", r->hints[i].others);
        ptc_jw_obj_end(w);
    }
    ptc_jw_arr_end(w);
    ptc_jw_key(w, "notes");
    ptc_jw_arr_begin(w);
    for (int i = 0; i < r->nnotes; i++)
        ptc_jw_str(w, r->notes[i]);
    ptc_jw_arr_end(w);
}

void xp_render_json_fields(ptc_jw *w, const xp_report *r)
{
    kint(w, "version", 1);
    kstr(w, "target", r->target);
    kstr(w, "status", r->status ? "raised" : "ran");
    ptc_jw_key(w, "error");
    ptc_jw_str(w, r->error);
    kstr(w, "versions", r->versions);
    summary(w, r);
    ptc_jw_key(w, "breaks");
    ptc_jw_arr_begin(w);
    for (int i = 0; i < r->nsites; i++)
        site(w, r, i + 1, &r->sites[i]);
    ptc_jw_arr_end(w);
    recompiles(w, r);
    graphs(w, r);
    rest(w, r);
}

void xp_render_json(ptc_buf *b, const xp_report *r)
{
    ptc_jw w;
    ptc_jw_init(&w, b, true);
    ptc_jw_obj_begin(&w);
    xp_render_json_fields(&w, r);
    ptc_jw_obj_end(&w);
    ptc_buf_putc(b, '\n');
}
