/* ptview: browse a ptc trace directory (or one .ptir file) in the terminal,
 * render a stage with Graphviz, or check that a trace reads.
 *
 *   ptview [--compile ID] [--stage S] [--mono] TRACE_DIR|GRAPH.ptir
 *   ptview --render OUT.{svg,png,dot} [--compile ID] [--stage S] [--focus NODE]
 *          [--depth N] [--max-nodes N] TRACE_DIR|GRAPH.ptir
 *   ptview --check TRACE_DIR|GRAPH.ptir
 *   ptview --html OUT.html TRACE_DIR|GRAPH.ptir
 *
 * Exit status: 0 ok; 1 --check found unreadable parts or rendering failed;
 * 2 bad command line or input (one line on stderr naming the file).
 */
#include "logs/logs.h"
#include "tools/viewer/html.h"
#include "tools/viewer/render.h"
#include "tools/viewer/tui.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char TOOL[] = "ptview";

typedef struct options {
    const char *path, *render, *html, *compile, *stage, *focus;
    int depth, max_nodes;
    bool check, mono;
} options;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ptview [--compile ID] [--stage S] [--mono] TRACE_DIR|GRAPH.ptir\n"
            "       ptview --render OUT.{svg,png,dot} [--compile ID] [--stage S] [--focus NODE]\n"
            "              [--depth N] [--max-nodes N] TRACE_DIR|GRAPH.ptir\n"
            "       ptview --check TRACE_DIR|GRAPH.ptir\n"
            "       ptview --html OUT.html TRACE_DIR|GRAPH.ptir   (one self-contained page)\n"
            "NODE is [STAGE:]%%name (a value), or [STAGE:]N for kernel N. See man ptview.\n");
}

static int report(const ptc_error *err, int status)
{
    char buf[2048];
    if (err->file[0] && err->line > 0)
        snprintf(buf, sizeof buf, "%s:%d:%d: %s", err->file, err->line, err->col, err->msg);
    else
        snprintf(buf, sizeof buf, "%s", err->msg);
    fprintf(stderr, "%s: %s\n", TOOL, buf);
    return status;
}

static int parse_int(const char *opt, const char *v, int *out)
{
    char *end;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < 0 || n > 1000000)
        return ptc_cli_fail(TOOL, "%s expects a non-negative integer, got '%s'", opt, v);
    *out = (int)n;
    return 0;
}

/* 0 to go on, 1 when --help was printed, 2 on a bad command line. */
static int parse_args(int argc, char **argv, options *o)
{
    o->depth = -1;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(argv[i], "--version")) {
            printf("ptview %s\n", PTC_VERSION);
            return 1;
        } else if (!strcmp(argv[i], "--check")) {
            o->check = true;
        } else if (!strcmp(argv[i], "--mono")) {
            o->mono = true;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--render", NULL))) {
            o->render = v;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--compile", NULL))) {
            o->compile = v;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--html", NULL))) {
            o->html = v;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--stage", NULL))) {
            o->stage = v;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--focus", NULL))) {
            o->focus = v;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--depth", NULL))) {
            if (parse_int("--depth", v, &o->depth))
                return 2;
        } else if ((v = ptc_cli_opt(argc, argv, &i, "--max-nodes", NULL))) {
            if (parse_int("--max-nodes", v, &o->max_nodes))
                return 2;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return ptc_cli_fail(TOOL, "unknown option '%s' or missing value (try --help)", argv[i]);
        } else if (o->path) {
            return ptc_cli_fail(TOOL, "more than one trace given ('%s' and '%s')", o->path,
                                argv[i]);
        } else {
            o->path = argv[i];
        }
    }
    if (!o->path)
        return ptc_cli_fail(TOOL, "no trace directory or .ptir file given (try --help)");
    if ((o->check != 0) + (o->render != NULL) + (o->html != NULL) > 1)
        return ptc_cli_fail(TOOL, "--check, --render and --html are exclusive");
    if (!o->render && (o->focus || o->depth >= 0 || o->max_nodes))
        return ptc_cli_fail(TOOL, "--focus, --depth and --max-nodes go with --render");
    return 0;
}

static ptv_compile *pick_compile(ptv_trace *t, const char *id)
{
    if (!id)
        return t->ncompiles > 0 ? t->compiles[0] : NULL;
    for (int i = 0; i < t->ncompiles; i++)
        if (strcmp(t->compiles[i]->id, id) == 0)
            return t->compiles[i];
    return NULL;
}

static void list_ids(ptv_trace *t, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < t->ncompiles; i++)
        ptv_appendf(buf, size, &n, "%s%s", i ? ", " : "", t->compiles[i]->id);
}

static int do_render(ptv_trace *t, const options *o)
{
    char ids[512];
    ptv_compile *c = pick_compile(t, o->compile);
    if (!c) {
        list_ids(t, ids, sizeof ids);
        return ptc_cli_fail(TOOL, "%s: no compile '%s' (there are: %s)", t->path, o->compile, ids);
    }
    ptv_stage *s = o->stage ? ptv_compile_stage(c, o->stage) : ptv_compile_stage(c, "captured");
    if (!s && o->stage) {
        size_t n = 0;
        for (int i = 0; i < c->nstages; i++)
            ptv_appendf(ids, sizeof ids, &n, "%s%s", i ? ", " : "", c->stages[i]->name);
        return ptc_cli_fail(TOOL, "%s: no stage '%s' (there are: %s)", c->id, o->stage, ids);
    }
    if (!s)
        s = c->stages[0];
    ptc_error err;
    if (ptv_stage_load(s) != 0)
        return ptc_cli_fail(TOOL, "%s", s->error);
    ptv_render_opts ro = {.out = o->render, .focus_item = -1, .depth = o->depth,
                          .max_nodes = o->max_nodes};
    if (o->focus && ptv_resolve_focus(c, s, o->focus, &ro.focus_stage, &ro.focus_item, &err))
        return report(&err, 2);
    char summary[1024];
    if (ptv_render(s, &ro, summary, sizeof summary, &err) != 0)
        return report(&err, err.cls == PTC_ERR_UNSUPPORTED || err.cls == PTC_ERR_PARSE ? 2 : 1);
    printf("ptview: wrote %s\n", summary);
    return 0;
}

/* Loads everything; prints one line per compile and every problem. */
static int do_check(ptv_trace *t, double started, bool timings)
{
    int problems = t->nwarnings;
    for (int i = 0; i < t->nwarnings; i++)
        printf("warning: %s\n", t->warnings[i]);
    for (int i = 0; i < t->ncompiles; i++) {
        ptv_compile *c = t->compiles[i];
        double ms[sizeof c->stages / sizeof *c->stages];
        for (int k = 0; k < c->nstages; k++) {
            double t0 = ptc_now_ms();
            ptv_stage_load(c->stages[k]);
            ms[k] = ptc_now_ms() - t0;
        }
        printf("%s:", c->id);
        for (int k = 0; k < c->nstages; k++) {
            ptv_stage *s = c->stages[k];
            printf(" %s %s", s->name, s->state == PTV_LOADED ? "" : s->state == PTV_MISSING ? "missing" : "broken");
            if (s->state == PTV_LOADED)
                printf("%d", s->nnodes);
            if (timings)
                printf(" (%.0f ms)", ms[k]);
        }
        printf("%s\n", c->incomplete ? " (unfinished)" : "");
        if (c->error[0]) {
            printf("  %s\n", c->error);
            problems++;
        }
        for (int k = 0; k < c->nstages; k++)
            if (c->stages[k]->error[0]) {
                printf("  %s\n", c->stages[k]->error);
                problems++;
            }
    }
    printf("%d compile%s, %d problem%s, read in %.0f ms\n", t->ncompiles,
           t->ncompiles == 1 ? "" : "s", problems, problems == 1 ? "" : "s", ptc_now_ms() - started);
    return problems ? 1 : 0;
}

int main(int argc, char **argv)
{
    double started = ptc_now_ms();
    options o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    ptc_error err;
    ptv_trace *t = ptv_open(o.path, &err);
    if (!t)
        return report(&err, 2);
    if (o.render) {
        rc = do_render(t, &o);
    } else if (o.html) {
        rc = ptv_write_html(t, NULL, NULL, o.html, &err) == 0 ? 0 : report(&err, 1);
        if (rc == 0)
            printf("ptview: wrote %s (%d compile%s)\n", o.html, t->ncompiles,
                   t->ncompiles == 1 ? "" : "s");
    } else if (o.check) {
        rc = do_check(t, started, getenv("PTVIEW_TIMINGS") != NULL);
    } else if (!isatty(STDOUT_FILENO) || !isatty(STDIN_FILENO)) {
        rc = ptc_cli_fail(TOOL, "the browser needs a terminal; use --render or --check otherwise");
    } else {
        ptv_tui_opts to = {.mono = o.mono, .compile = o.compile, .stage = o.stage,
                           .started_ms = started};
        if (o.compile && !pick_compile(t, o.compile)) {
            char ids[512];
            list_ids(t, ids, sizeof ids);
            rc = ptc_cli_fail(TOOL, "%s: no compile '%s' (there are: %s)", t->path, o.compile, ids);
        } else if (ptv_tui_run(t, &to, &err) != 0) {
            rc = report(&err, 2);
        }
    }
    ptv_close(t);
    return rc;
}
