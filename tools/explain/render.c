/* The report in print: text for people, JSON for machines.
 *
 * The text is one section per question, in the order people ask them:
 * summary, graph breaks (most costly first), recompiles, ops that ran outside
 * ptc's kernels, performance hints. Everything that depends on timing is a
 * number followed by "ms" or "%", and no column is aligned after such a
 * number, so masking those numbers leaves text that is identical from run to
 * run of the same program (the golden tests do exactly that). Paths inside
 * the working directory print relative to it, library files from their
 * package folder on ("torch/nn/modules/linear.py"), and object addresses
 * ("at 0x7f...") are dropped. Long sentences wrap at 100 columns.
 */
#include "explain.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct out {
    ptc_buf *b;
    bool color;
    ptc_arena *a;
    char cwd[PATH_MAX];
} out;

enum { WIDTH = 100 };

static const char *paint(const out *o, const char *code)
{
    return o->color ? code : "";
}
#define BOLD(o) paint(o, "\033[1m")
#define YELLOW(o) paint(o, "\033[33m")
#define RED(o) paint(o, "\033[31m")
#define GREEN(o) paint(o, "\033[32m")
#define DIM(o) paint(o, "\033[2m")
#define RESET(o) paint(o, "\033[0m")

/* A path as the report shows it. */
static const char *show_path(const out *o, const char *file)
{
    if (!file || !*file)
        return "?";
    size_t n = strlen(o->cwd);
    if (n && !strncmp(file, o->cwd, n) && file[n] == '/')
        return file + n + 1;
    const char *sp = strstr(file, "/site-packages/");
    if (sp)
        return sp + strlen("/site-packages/");
    sp = strstr(file, "/dist-packages/");
    return sp ? sp + strlen("/dist-packages/") : file;
}

/* Drops " at 0x..." object addresses from a repr. */
static const char *no_addr(const out *o, const char *s)
{
    if (!s || !strstr(s, " at 0x"))
        return s ? s : "";
    ptc_buf b = {0};
    for (const char *p = s; *p;) {
        if (!strncmp(p, " at 0x", 6)) {
            p += 6;
            while ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || (*p >= 'A' && *p <= 'F'))
                p++;
        } else {
            ptc_buf_putc(&b, *p++);
        }
    }
    const char *r = ptc_arena_strdup(o->a, b.data ? b.data : "");
    ptc_buf_free(&b);
    return r;
}

/* Words of text, wrapped at WIDTH; the first line follows what is already
 * printed (at column `col`), later ones start with `indent` spaces. */
static void wrap(out *o, int col, int indent, const char *text)
{
    const char *p = text;
    while (*p) {
        size_t w = strcspn(p, " ");
        if (col > indent && col + 1 + (int)w > WIDTH) {
            ptc_buf_printf(o->b, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            ptc_buf_putc(o->b, ' ');
            col++;
        }
        ptc_buf_putn(o->b, p, w);
        col += (int)w;
        p += w;
        while (*p == ' ')
            p++;
    }
    ptc_buf_putc(o->b, '\n');
}

/* "   label    text..." with text wrapped under itself; labels in a
 * column `width` wide. */
static void field_w(out *o, int indent, int width, const char *label, const char *text)
{
    int col = indent + width + 1;
    ptc_buf_printf(o->b, "%*s%s%-*s%s ", indent, "", DIM(o), width, label, RESET(o));
    wrap(o, col, col, text);
}

static void field(out *o, int indent, const char *label, const char *text)
{
    field_w(o, indent, 8, label, text);
}

/* The source line with a caret under the expression. */
static void caret(out *o, int indent, const xp_loc *l)
{
    if (!l->text || !*l->text || l->line <= 0)
        return;
    char num[16];
    int w = snprintf(num, sizeof num, "%d", l->line);
    ptc_buf_printf(o->b, "%*s%s | %s\n", indent, "", num, l->text);
    if (l->col < 1)
        return;
    int len = (int)strlen(l->text);
    int width = l->endcol > l->col ? l->endcol - l->col : 1;
    if (l->col - 1 + width > len)
        width = len - (l->col - 1) > 0 ? len - (l->col - 1) : 1;
    ptc_buf_printf(o->b, "%*s%*s | %*s%s", indent, "", w, "", l->col - 1, "", RED(o));
    for (int i = 0; i < width; i++)
        ptc_buf_putc(o->b, '^');
    ptc_buf_printf(o->b, "%s\n", RESET(o));
}

static const char *place(out *o, const xp_loc *l)
{
    if (!l->file || !*l->file)
        return "";
    return ptc_arena_printf(o->a, "%s:%d:%d", show_path(o, l->file), l->line, l->col);
}

static void heading(out *o, const char *title)
{
    ptc_buf_printf(o->b, "\n%s%s%s\n", BOLD(o), title, RESET(o));
}

/* ---- summary ------------------------------------------------------------------------------ */

static const char *plural(long n, const char *one, const char *many)
{
    return n == 1 ? one : many;
}

static double pct(double part, double whole)
{
    return whole > 0 ? 100.0 * part / whole : 0;
}

static void summary(out *o, const xp_report *r)
{
    long breaks = 0;
    int limits = 0, recompiles = 0;
    for (int i = 0; i < r->nsites; i++)
        breaks += r->sites[i].runs;
    for (int i = 0; i < r->nrecompiles; i++)
        r->recompiles[i].limit ? limits++ : recompiles++;
    int graphs = 0, cut = 0, pieces = 0;
    for (int i = 0; i < r->ngraphs; i++) {
        graphs += r->graphs[i].g != NULL;
        cut += r->graphs[i].npieces > 0;
        pieces += r->graphs[i].npieces;
    }
    heading(o, "Summary");
    ptc_buf fn = {0};
    for (int i = 0; i < r->nfunctions; i++)
        ptc_buf_printf(&fn, "%s%s", i ? ", " : "", r->functions[i]);
    ptc_buf_printf(o->b, "  compiled functions    %d%s%s\n", r->nfunctions, r->nfunctions ? ": " : "",
                   fn.data ? fn.data : "");
    ptc_buf_free(&fn);
    ptc_buf_printf(
        o->b, "  graphs                %d%s\n", graphs,
        cut ? ptc_arena_printf(o->a, " (%d cut into %d pieces: see Graph pieces)", cut, pieces)
            : "");
    ptc_buf_printf(o->b, "  graph breaks          %d %s, %ld %s run\n", r->nsites, plural(r->nsites, "site", "sites"),
                   breaks, plural(breaks, "break", "breaks"));
    ptc_buf_printf(o->b, "  recompiles            %d%s\n", recompiles,
                   limits ? ptc_arena_printf(o->a, " (%d %s hit the recompile limit)", limits,
                                             plural(limits, "position", "positions"))
                          : "");
    ptc_buf_printf(o->b, "  ops captured          %d\n", r->ops_captured);
    ptc_buf_printf(o->b, "  ops with no lowering  %d\n", r->ops_no_lowering);
    ptc_buf_printf(o->b, "  extern kernels        %d\n", r->nextern);
    double outside = r->call_ms - r->graph_ms - r->compile_ms;
    if (outside < 0)
        outside = 0;
    ptc_buf_printf(o->b, "  time                  script %.1f ms; %ld compiled %s %.1f ms\n", r->wall_ms, r->calls,
                   plural(r->calls, "call", "calls"), r->call_ms);
    ptc_buf_printf(o->b, "    inside graphs       %.2f ms (%.0f%%)\n", r->graph_ms, pct(r->graph_ms, r->call_ms));
    ptc_buf_printf(o->b, "    outside graphs      %.2f ms (%.0f%%)\n", outside, pct(outside, r->call_ms));
    ptc_buf_printf(o->b, "    compiling           %.2f ms (%.0f%%)\n", r->compile_ms, pct(r->compile_ms, r->call_ms));
    ptc_buf_printf(o->b, "  compile time          ");
    for (int i = 0; i < r->stages.n; i++)
        ptc_buf_printf(o->b, "%s%s %.1f ms", i ? ", " : "", r->stages.items[i].name, r->stages.items[i].value);
    ptc_buf_printf(o->b, "\n");
}

/* ---- graph pieces ---------------------------------------------------------------------------- */

/* "2 kernels + 1 extern" */
static const char *kernel_count(out *o, int kernels, int externs)
{
    return ptc_arena_printf(o->a, "%d %s%s", kernels, plural(kernels, "kernel", "kernels"),
                            externs ? ptc_arena_printf(o->a, " + %d extern", externs) : "");
}

static void piece(out *o, int k, const xp_piece *p, const xp_piece *pieces)
{
    int first = 0; /* the first piece of its program, which compiled it */
    while (pieces[first].program != p->program)
        first++;
    ptc_buf t = {0};
    ptc_buf_printf(&t, "%d %s", p->ops, plural(p->ops, "op", "ops"));
    if (p->modules[0])
        ptc_buf_printf(&t, " in %s", p->modules);
    ptc_buf_printf(&t, "; forward %s, backward %s; program %d, ",
                   kernel_count(o, p->kernels[0], p->externs[0]),
                   kernel_count(o, p->kernels[1], p->externs[1]), p->program);
    if (first == k)
        ptc_buf_printf(&t, "compiled in %.1f ms", p->compile_ms);
    else
        ptc_buf_printf(&t, "piece %d's (alike)", first + 1);
    field_w(o, 4, 9, ptc_arena_printf(o->a, "piece %d", k + 1), t.data);
    field_w(o, 4, 9, "",
            p->ends ? ptc_arena_printf(o->a, "ends at the cut \"%s\"", p->ends)
                    : "ends at the graph's end");
    ptc_buf_free(&t);
}

/* Graphs cut into pieces (ptc._split.graph_cut: ptc's DDP gradient-bucket
 * boundaries), each piece with what it holds and where it ends: why one
 * captured graph runs as N autograd nodes. */
static void graph_pieces(out *o, const xp_report *r)
{
    bool any = false;
    for (int i = 0; i < r->ngraphs; i++) {
        const xp_graph *g = &r->graphs[i];
        if (!g->npieces)
            continue;
        if (!any)
            heading(o, "Graph pieces");
        any = true;
        ptc_buf_puts(o->b, "  ");
        wrap(o, 2, 2,
             ptc_arena_printf(
                 o->a,
                 "graph %d of %s runs as %d %s, one autograd node each, cut where "
                 "ptc._split.graph_cut was called (%d %s; ptc cuts where each DDP gradient bucket "
                 "begins): the gradients of a piece's parameters are ready when its backward ends, "
                 "so their bucket's all-reduce starts while the backward of the pieces before it "
                 "runs. %d distinct %s (alike pieces share one).",
                 g->num, g->frame, g->npieces, plural(g->npieces, "piece", "pieces"), g->ncuts,
                 plural(g->ncuts, "cut", "cuts"), g->nprograms,
                 plural(g->nprograms, "program", "programs")));
        for (int k = 0; k < g->npieces; k++)
            piece(o, k, &g->pieces[k], g->pieces);
    }
}

/* ---- breaks --------------------------------------------------------------------------------- */

static void crossings(out *o, const xp_site *s)
{
    if (!s->ncross)
        return;
    ptc_buf t = {0};
    ptc_buf_printf(&t, "%d %s the break: written to memory by the graph before it and read back by "
                       "the graph after it, so the kernels on both sides could not fuse.",
                   s->ncross, plural(s->ncross, "tensor crosses", "tensors cross"));
    field(o, 3, "fusion", t.data);
    ptc_buf_free(&t);
    for (int i = 0; i < s->ncross; i++) {
        const xp_crossing *x = &s->cross[i];
        ptc_buf line = {0};
        ptc_buf_printf(&line, "%s %s (%s", x->value, x->type, x->op);
        if (x->made.file && *x->made.file)
            ptc_buf_printf(&line, " at %s", place(o, &x->made));
        ptc_buf_printf(&line, ", %.0f bytes) from graph %d to graph %d", x->bytes, x->from_graph, x->to_graph);
        if (*x->producer)
            ptc_buf_printf(&line, ": written by kernel %s", x->producer);
        if (*x->consumers)
            ptc_buf_printf(&line, ", read by %s", x->consumers);
        ptc_buf_printf(o->b, "%*s- ", 12, "");
        wrap(o, 14, 14, line.data);
        ptc_buf_free(&line);
    }
}

static void site(out *o, const xp_report *r, int rank, const xp_site *s)
{
    ptc_buf_printf(o->b, "\n%s#%d %s%s%s %s: %s%s\n", BOLD(o), rank, YELLOW(o), s->code, RESET(o), s->reason,
                   no_addr(o, s->detail), RESET(o));
    ptc_buf t = {0};
    if (s->untraceable)
        ptc_buf_printf(&t, "%.2f ms: %s ran eagerly for %ld %s because of it", s->total_ms, s->frame, s->runs,
                       plural(s->runs, "call", "calls"));
    else
        ptc_buf_printf(&t, "%.3f ms outside graphs over %ld %s (median %.3f ms per run)", s->total_ms, s->runs,
                       plural(s->runs, "run", "runs"), s->median_ms);
    field(o, 3, "cost", t.data);
    ptc_buf_free(&t);
    field(o, 3, "where", ptc_arena_printf(o->a, "%s in %s", place(o, &s->loc), s->frame));
    caret(o, 12, &s->loc);
    if (s->stack && strchr(s->stack, '>')) {
        /* the inlined call stack, outermost first, with paths shortened */
        ptc_buf st = {0};
        for (const char *p = s->stack; *p;) {
            const char *open = strstr(p, " ("), *close = open ? strchr(open, ')') : NULL;
            if (!open || !close) {
                ptc_buf_puts(&st, p);
                break;
            }
            ptc_buf_putn(&st, p, (size_t)(open - p));
            char *inner = ptc_arena_strndup(o->a, open + 2, (size_t)(close - open - 2));
            char *colon = strrchr(inner, ':');
            if (colon)
                *colon = 0;
            ptc_buf_printf(&st, " (%s:%s)", show_path(o, inner), colon ? colon + 1 : "");
            p = close + 1;
        }
        field(o, 3, "stack", st.data);
        ptc_buf_free(&st);
    }
    if (s->ngraphs) {
        ptc_buf g = {0};
        for (int i = 0; i < s->ngraphs; i++) {
            const xp_graph *x = &r->graphs[s->graphs[i]];
            if (x->num)
                ptc_buf_printf(&g, "%s%d", g.len ? ", " : "", x->num);
        }
        if (g.len)
            field(o, 3, "after", ptc_arena_printf(o->a, "graph %s", g.data));
        ptc_buf_free(&g);
    }
    crossings(o, s);
    field(o, 3, "why", s->explanation);
    ptc_buf_printf(o->b, "%*s%s%-8s%s ", 3, "", GREEN(o), "hint", RESET(o));
    wrap(o, 12, 12, s->advice);
}

static void breaks(out *o, const xp_report *r)
{
    heading(o, "Graph breaks");
    if (!r->nsites && !r->calls) {
        ptc_buf_printf(o->b, "  none: nothing was compiled\n");
        return;
    }
    if (!r->nsites) {
        ptc_buf_printf(o->b, "  none: every compiled function ran as whole graphs\n");
        return;
    }
    ptc_buf_printf(o->b, "  Most costly first. Cost: time outside graphs from the end of the graph before the\n"
                         "  break to the start of the next, measured on every run (compiles excluded). Ranked\n"
                         "  by the fastest run after the first (which pays one-time costs) times the runs, in\n"
                         "  bands (sites within a factor of 10 share one; below 1 ms is noise), then by source\n"
                         "  position.\n");
    for (int i = 0; i < r->nsites; i++)
        site(o, r, i + 1, &r->sites[i]);
}

/* ---- recompiles ------------------------------------------------------------------------------ */

static bool same_guard(const xp_recompile *a, const xp_recompile *b)
{
    return a->cf == b->cf && !strcmp(a->frame, b->frame) && !strcmp(a->source, b->source) &&
           !strcmp(a->kind, b->kind) && a->loc.line == b->loc.line && a->loc.col == b->loc.col &&
           !strcmp(a->loc.file, b->loc.file);
}

static void recompiles(out *o, const xp_report *r)
{
    heading(o, "Recompiles");
    if (!r->nrecompiles) {
        ptc_buf_printf(o->b, "  none: no guard failed\n");
        return;
    }
    bool *done = calloc((size_t)r->nrecompiles, sizeof *done);
    for (int i = 0; i < r->nrecompiles; i++) {
        if (done[i])
            continue;
        const xp_recompile *g = &r->recompiles[i];
        int n = 0;
        for (int j = i; j < r->nrecompiles; j++)
            n += same_guard(g, &r->recompiles[j]) && !r->recompiles[j].limit;
        ptc_buf_printf(o->b, "\n  %s%s%s: the guard on %s (%s) failed %d %s\n", BOLD(o), g->frame, RESET(o),
                       g->source[0] ? g->source : "global state", g->kind, n, plural(n, "time", "times"));
        field(o, 4, "guard", no_addr(o, g->expected));
        if (g->loc.file[0]) {
            field(o, 4, "made at", place(o, &g->loc));
            caret(o, 13, &g->loc);
        }
        const xp_recompile *limit = NULL;
        for (int j = i; j < r->nrecompiles; j++) {
            const xp_recompile *x = &r->recompiles[j];
            if (done[j] || !same_guard(g, x))
                continue;
            done[j] = true;
            if (x->limit) {
                limit = x;
                continue;
            }
            ptc_buf_printf(o->b, "%*s%s -> %s\n", 13, "", no_addr(o, x->old), no_addr(o, x->now));
        }
        if (limit) {
            field(o, 4, "limit",
                  ptc_arena_printf(o->a, "%s -> %s: the recompile limit (%d) was hit; later calls ran eagerly",
                                   no_addr(o, limit->old), no_addr(o, limit->now), limit->limit_value));
        }
        ptc_buf_printf(o->b, "    %s%-8s%s ", GREEN(o), "hint", RESET(o));
        wrap(o, 13, 13, xp_recompile_advice(g));
    }
    free(done);
}

/* ---- outside ptc's kernels ----------------------------------------------------------------- */

static const char *outside_label[] = {
    [XP_OUT_EAGER_OP] = "eager op", [XP_OUT_AUTOGRAD] = "autograd", [XP_OUT_BACKEND] = "fallback",
    [XP_OUT_NO_LOWERING] = "no lowering", [XP_OUT_EAGER_BACKEND] = "backend", [XP_OUT_EXTERN] = "extern",
    [XP_OUT_EAGER_FRAME] = "eager frame", [XP_OUT_INTERNAL] = "internal", [XP_OUT_SKIPPED] = "skipped",
};

static const char *outside_text(out *o, const xp_outside *x)
{
    switch (x->kind) {
    case XP_OUT_EAGER_OP:
        return ptc_arena_printf(o->a, "%s ran eagerly between graphs (%s)", no_addr(o, x->what), x->detail);
    case XP_OUT_AUTOGRAD:
        return ptc_arena_printf(o->a, "graph %d of %s needs gradients: it ran through torch ops%s%s",
                                x->graph, x->what, x->detail[0] ? ": " : "", x->detail);
    case XP_OUT_BACKEND:
        return ptc_arena_printf(o->a, "graph %d: the compiled backend failed (%s: %s); it ran through torch ops",
                                x->graph, x->what, x->detail);
    case XP_OUT_NO_LOWERING:
        return ptc_arena_printf(o->a, "%s in graph %d has no lowering", x->what, x->graph);
    case XP_OUT_EAGER_BACKEND:
        return ptc_arena_printf(o->a, "%d %s ran with backend \"eager\" (torch ops, no fused kernels)", x->count,
                                plural(x->count, "graph", "graphs"));
    case XP_OUT_EXTERN:
        return ptc_arena_printf(o->a, "%s x%d: the framework's own kernel for %s%s%s", x->what, x->count,
                                x->detail, x->module_path ? " in " : "", x->module_path ? x->module_path : "");
    case XP_OUT_EAGER_FRAME:
        return ptc_arena_printf(o->a, "%s ran eagerly%s (%s)", x->what,
                                x->count ? ptc_arena_printf(o->a, " for %d %s", x->count, plural(x->count, "call", "calls"))
                                         : "",
                                x->detail);
    case XP_OUT_INTERNAL:
        return ptc_arena_printf(o->a, "internal error in %s, the call ran eagerly: %s", x->what, x->detail);
    case XP_OUT_SKIPPED:
        return ptc_arena_printf(o->a, "%s ran untouched by ptc (%s)", x->what, x->detail);
    }
    return "";
}

static void outside(out *o, const xp_report *r)
{
    heading(o, "Ops that ran outside ptc's kernels");
    if (!r->noutside && !r->ops_captured) {
        ptc_buf_printf(o->b, "  none: %s\n",
                       r->calls ? "no compiled call captured an op" : "nothing was compiled");
        return;
    }
    if (!r->noutside) {
        ptc_buf_printf(o->b, "  none: every captured op ran in ptc's generated kernels\n");
        return;
    }
    for (int k = 0; k <= XP_OUT_SKIPPED; k++) {
        for (int i = 0; i < r->noutside; i++) {
            const xp_outside *x = &r->outside[i];
            if ((int)x->kind != k)
                continue;
            field_w(o, 2, 11, outside_label[k], outside_text(o, x));
            if (x->loc.file && *x->loc.file)
                ptc_buf_printf(o->b, "%*sat %s\n", 14, "", place(o, &x->loc));
        }
    }
}

static const char *hint_label[] = {
    [XP_HINT_SYNC] = "sync", [XP_HINT_DTYPE] = "dtype", [XP_HINT_REDUCTION] = "fusion",
    [XP_HINT_GRAD] = "grad", [XP_HINT_RECOMPILE] = "shapes",
};

static void hints(out *o, const xp_report *r)
{
    heading(o, "Performance hints");
    if (!r->nhints) {
        ptc_buf_printf(o->b, "  none\n");
        return;
    }
    for (int i = 0; i < r->nhints; i++) {
        const xp_hint *h = &r->hints[i];
        const char *text = h->text;
        if (h->others)
            text = ptc_arena_printf(o->a, "%s The same in %d other %s.", text, h->others,
                                    plural(h->others, "graph", "graphs"));
        field(o, 2, hint_label[h->kind], text);
        if (h->loc.file && *h->loc.file) {
            ptc_buf_printf(o->b, "%*sat %s\n", 11, "", place(o, &h->loc));
            caret(o, 11, &h->loc);
        }
    }
}

void xp_render_text(ptc_buf *b, const xp_report *r, bool color)
{
    out o = {.b = b, .color = color, .a = r->arena};
    if (!getcwd(o.cwd, sizeof o.cwd))
        o.cwd[0] = 0;
    ptc_buf_printf(b, "%sptexplain%s %s\n", BOLD(&o), RESET(&o), r->target);
    if (r->status) {
        const char *e = r->error ? r->error : "an exception";
        ptc_buf_printf(b, "  %s", RED(&o));
        if (!strncmp(e, "SystemExit: ", 12)) /* sys.exit(n): no traceback to show */
            wrap(&o, 2, 2,
                 ptc_arena_printf(o.a, "the script exited with status %s: the report covers what ran before "
                                       "it%s", e + 12, RESET(&o)));
        else
            wrap(&o, 2, 2,
                 ptc_arena_printf(o.a, "the script raised %s: the report covers what ran before it; the "
                                       "traceback follows on stderr%s", e, RESET(&o)));
    }
    if (!r->calls) {
        ptc_buf_puts(b, "  ");
        wrap(&o, 2, 2,
             "nothing was compiled: the script called no function compiled with torch.compile or "
             "ptc.compile, so every op ran eagerly in PyTorch");
    }
    summary(&o, r);
    graph_pieces(&o, r);
    breaks(&o, r);
    recompiles(&o, r);
    outside(&o, r);
    hints(&o, r);
    if (r->ndynamic) {
        heading(&o, "Dynamic shapes");
        for (int i = 0; i < r->ndynamic; i++)
            ptc_buf_printf(b, "  %s\n", r->dynamic[i]);
    }
    if (r->nnotes) {
        heading(&o, "Notes");
        for (int i = 0; i < r->nnotes; i++)
            ptc_buf_printf(b, "  %s\n", r->notes[i]);
    }
}
