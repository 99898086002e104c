/* The shareable report: a whole trace as one self-contained HTML page.
 *
 * One section per compile and, inside it, one per stage: graph stages and
 * the kernels stage drawn as inline SVG by the Graphviz renderer (render.c),
 * then every item of every stage as a line with an anchor, followed by links
 * to what it came from and what it became in the compile's other stages
 * (ptv_provenance), so a reader can walk a value from the captured graph to
 * its prims, loops, kernel and generated code. An optional report text (the
 * one ptexplain prints) comes first. Nothing is fetched: no scripts, fonts
 * or images from elsewhere, so the page can be attached to a bug.
 */
#include "tools/viewer/html.h"

#include "logs/logs.h"

#include "tools/viewer/render.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Lines of one stage shown before the rest is summarised (the code of a big
 * model runs to hundreds of thousands of lines; the trace keeps all of it). */
#define HTML_MAX_LINES 4000
/* Provenance links per item, and per stage of them. */
#define HTML_MAX_LINKS 12
#define HTML_LINKS_PER_STAGE 3

static const char style[] =
    "body{font:14px/1.4 sans-serif;margin:1em 2em;color:#222}"
    "pre{font:12px/1.35 monospace;background:#f6f6f6;padding:.6em;overflow-x:auto}"
    "h2{border-bottom:1px solid #ccc;margin-top:2em}"
    ".svg{overflow:auto;max-height:70vh;border:1px solid #ddd;margin:.5em 0}"
    ".prov a{color:#06c;font-size:11px;margin-left:.6em}"
    ".err{color:#a00}"
    "span:target{background:#ffe58a}";

static void escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

/* The anchor of item `item` of stage s of the compile whose anchor is
 * compile ("c0-prims-12"; "r1c0-prims-12" in a page of several traces). */
static void anchor(char *buf, size_t size, const char *compile, const ptv_stage *s, int item)
{
    if (item < 0)
        snprintf(buf, size, "%s-%s", compile, s->name);
    else
        snprintf(buf, size, "%s-%s-%d", compile, s->name, item);
}

/* Renders s through Graphviz into a temporary SVG and copies its <svg>
 * element into the page; a failure is a line in the page, not an error. */
static void inline_svg(FILE *f, ptv_stage *s)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/ptview-html.XXXXXX.svg", ptc_temp_dir());
    int fd = mkstemps(path, 4);
    if (fd < 0) {
        fputs("<p class=err>no drawing: cannot create a temporary file</p>\n", f);
        return;
    }
    close(fd);
    ptv_render_opts o = {.out = path, .focus_item = -1, .depth = -1};
    char summary[512];
    ptc_error err;
    size_t len = 0;
    char *svg = NULL;
    if (ptv_render(s, &o, summary, sizeof summary, &err) == 0)
        svg = ptc_read_file(path, &len, &err);
    unlink(path);
    const char *start = svg ? strstr(svg, "<svg") : NULL;
    if (!start) {
        fputs("<p class=err>no drawing: ", f);
        escape(f, err.msg);
        fputs("</p>\n", f);
    } else {
        fputs("<div class=svg>", f);
        fputs(start, f);
        fputs("</div>\n", f);
    }
    free(svg);
}

static void provenance_links(FILE *f, const char *ci, ptv_stage *s, int item)
{
    ptv_target to[HTML_MAX_LINKS];
    int n = ptv_provenance(s, item, to, HTML_MAX_LINKS, HTML_LINKS_PER_STAGE, true);
    if (n == 0)
        return;
    fputs("<span class=prov>", f);
    for (int k = 0; k < n; k++) {
        char id[160];
        anchor(id, sizeof id, ci, to[k].stage, to[k].item);
        const ptv_item *it = &to[k].stage->items[to[k].item];
        fprintf(f, "<a href=\"#%s\">%s %s ", id, to[k].back ? "&larr;" : "&rarr;",
                to[k].stage->name);
        if (it->name)
            fprintf(f, "%%%s", it->name);
        else if (it->kind == PTV_ITEM_KERNEL)
            fprintf(f, "kernel %d", it->kernel);
        else
            fprintf(f, "line %d", it->line);
        fputs("</a>", f);
    }
    fputs("</span>", f);
}

static void stage_lines(FILE *f, const char *ci, ptv_stage *s)
{
    ptc_buf line = {0};
    int shown = s->nitems < HTML_MAX_LINES ? s->nitems : HTML_MAX_LINES;
    fputs("<pre>", f);
    for (int i = 0; i < shown; i++) {
        char id[160];
        anchor(id, sizeof id, ci, s, i);
        line.len = 0;
        ptv_item_text(&s->items[i], &line);
        fprintf(f, "<span id=\"%s\">", id);
        escape(f, line.data ? line.data : "");
        fputs("</span>", f);
        if (s->kind != 'I')
            provenance_links(f, ci, s, i);
        fputc('\n', f);
    }
    if (shown < s->nitems)
        fprintf(f, "... %d more lines in %s\n", s->nitems - shown,
                s->nfiles ? s->files[0] : s->name);
    fputs("</pre>\n", f);
    ptc_buf_free(&line);
}

static void write_stage(FILE *f, const char *ci, ptv_stage *s)
{
    char id[160];
    anchor(id, sizeof id, ci, s, -1);
    fprintf(f, "<h3 id=\"%s\">%s</h3>\n", id, s->name);
    if (ptv_stage_load(s) != 0) {
        fputs("<p class=err>", f);
        escape(f, s->error);
        fputs("</p>\n", f);
        return;
    }
    if (s->kind == 'G' || s->id == PTV_KERNELS)
        inline_svg(f, s);
    stage_lines(f, ci, s);
}

static void write_compile(FILE *f, const char *ci, ptv_compile *c)
{
    fprintf(f, "<h2 id=\"%s\">", ci);
    escape(f, c->id);
    fputs(": ", f);
    escape(f, c->frame ? c->frame : "");
    fputs("</h2>\n<p>", f);
    escape(f, c->reason && *c->reason ? c->reason : "first call");
    if (c->error[0]) {
        fputs(" <span class=err>", f);
        escape(f, c->error);
        fputs("</span>", f);
    }
    fputs("</p>\n<p>stages:", f);
    for (int k = 0; k < c->nstages; k++) {
        char id[160];
        anchor(id, sizeof id, ci, c->stages[k], -1);
        fprintf(f, " <a href=\"#%s\">%s</a>", id, c->stages[k]->name);
    }
    fputs("</p>\n", f);
    for (int k = 0; k < c->nstages; k++)
        write_stage(f, ci, c->stages[k]);
}

/* The anchor of compile i of trace k of a page of ntraces ("c3"; "r1c3"). */
static void compile_anchor(char *buf, size_t size, int ntraces, int k, int i)
{
    if (ntraces == 1)
        snprintf(buf, size, "c%d", i);
    else
        snprintf(buf, size, "r%dc%d", k, i);
}

/* Trace k's warnings, its list of compiles and each compile. */
static void write_trace(FILE *f, const ptv_html_trace *traces, int ntraces, int k)
{
    const ptv_trace *t = traces[k].trace;
    for (int i = 0; i < t->nwarnings; i++) {
        fputs("<p class=err>", f);
        escape(f, t->warnings[i]);
        fputs("</p>\n", f);
    }
    fputs("<h2>Compiles", f);
    if (traces[k].label) {
        fputs(" of ", f);
        escape(f, traces[k].label);
    }
    fputs("</h2>\n<ul>\n", f);
    char ci[32];
    for (int i = 0; i < t->ncompiles; i++) {
        compile_anchor(ci, sizeof ci, ntraces, k, i);
        fprintf(f, "<li><a href=\"#%s\">", ci);
        escape(f, t->compiles[i]->id);
        fputs("</a> ", f);
        escape(f, t->compiles[i]->reason && *t->compiles[i]->reason ? t->compiles[i]->reason : "");
        fputs("</li>\n", f);
    }
    fputs("</ul>\n", f);
    for (int i = 0; i < t->ncompiles; i++) {
        compile_anchor(ci, sizeof ci, ntraces, k, i);
        write_compile(f, ci, t->compiles[i]);
    }
}

int ptv_write_html_traces(const ptv_html_trace *traces, int ntraces, const char *title,
                          const char *report, const char *out, ptc_error *err)
{
    ptc_error_clear(err);
    FILE *f = fopen(out, "w");
    if (!f) {
        ptc_errorf(err, PTC_ERR_IO, "html", "cannot write %s", out);
        return -1;
    }
    fprintf(f, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>ptc: ");
    escape(f, title);
    fprintf(f, "</title><style>%s</style></head><body>\n<h1>ptc: ", style);
    escape(f, title);
    fputs("</h1>\n", f);
    if (report) {
        fputs("<h2 id=\"report\">Report</h2>\n<pre>", f);
        escape(f, report);
        fputs("</pre>\n", f);
    }
    for (int k = 0; k < ntraces; k++)
        write_trace(f, traces, ntraces, k);
    fputs("</body></html>\n", f);
    if (ferror(f) | (fclose(f) != 0)) {
        ptc_errorf(err, PTC_ERR_IO, "html", "cannot write %s", out);
        return -1;
    }
    return 0;
}

int ptv_write_html(ptv_trace *t, const char *title, const char *report, const char *out,
                   ptc_error *err)
{
    ptv_html_trace one = {t, NULL};
    return ptv_write_html_traces(&one, 1, title ? title : t->path, report, out, err);
}
