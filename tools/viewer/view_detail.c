/* The detail of one item, group or compile, as a list of lines the TUI
 * shows and follows (links). Kept in the model so that what a person sees
 * next to a node, and where each line jumps, is tested without a terminal.
 */
#include "tools/viewer/view_int.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static ptv_dline *add(ptv_detail *d, ptv_dlkind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ptv_dline *add(ptv_detail *d, ptv_dlkind kind, const char *fmt, ...)
{
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 32;
        d->lines = realloc(d->lines, sizeof *d->lines * (size_t)d->cap);
        PTC_ASSERT(d->lines);
    }
    ptv_dline *l = &d->lines[d->n++];
    memset(l, 0, sizeof *l);
    l->kind = kind;
    l->item = -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->text, sizeof l->text, fmt, ap);
    va_end(ap);
    return l;
}

static void link_to(ptv_detail *d, const char *prefix, ptv_stage *s, int item)
{
    const ptv_item *it = &s->items[item];
    char where[96] = "";
    if (it->file && it->line > 0)
        snprintf(where, sizeof where, "  (%s:%d)", it->file, it->line);
    ptv_dline *l;
    if (it->kind == PTV_ITEM_NODE)
        l = add(d, PTV_DL_LINK, "%s%-9s %%%.100s = %.60s : %.100s%s", prefix, s->name, it->name, it->op,
                it->type, where);
    else
        l = add(d, PTV_DL_LINK, "%s%-9s %.300s%s", prefix, s->name, it->text, where);
    l->stage = s;
    l->item = item;
}

void ptv_detail_free(ptv_detail *d)
{
    free(d->lines);
    memset(d, 0, sizeof *d);
}

/* Non-tensor arguments that differ from their defaults, "name=value". */
static void attrs(ptv_detail *d, const ptc_node *n)
{
    const ptc_schema *sc = ptc_op_schema(n->op);
    ptc_buf b = {0};
    for (int i = 0; i < n->nargs; i++) {
        const ptc_arg *a = &n->args[i];
        const ptc_param *p = &sc->params[i];
        if (a->kind == PTC_ARG_VALUE || a->kind == PTC_ARG_VALUES ||
            (p->has_default && ptc_arg_eq(&p->def, a)))
            continue;
        ptc_buf_printf(&b, "%s%s=", b.len ? ", " : "", p->name);
        ptc_print_arg(&b, a);
    }
    add(d, PTV_DL_FIELD, "attrs     %s", b.len ? b.data : "(none besides defaults)");
    ptc_buf_free(&b);
}

static void source_context(ptv_detail *d, ptv_trace *t, const ptc_srcloc *loc, int context)
{
    if (!loc->file) {
        add(d, PTV_DL_NOTE, "no source location recorded for this item");
        return;
    }
    const char *lines[64];
    int first;
    char why[600];
    if (context > 20)
        context = 20;
    int n = ptv_source(t, loc->file, loc->line, context, &first, lines, 64, why, sizeof why);
    if (n < 0) {
        add(d, PTV_DL_NOTE, "%s", why);
        return;
    }
    for (int i = 0; i < n; i++) {
        int ln = first + i;
        add(d, ln == loc->line ? PTV_DL_SOURCE_HERE : PTV_DL_SOURCE, "%s%5d | %.400s",
            ln == loc->line ? ">" : " ", ln, lines[i]);
        if (ln == loc->line && loc->col > 0) {
            int width = loc->text ? (int)strlen(loc->text) : 1;
            char caret[256];
            int k = 0;
            for (; k < loc->col - 1 && k < 200; k++)
                caret[k] = lines[i][k] == '\t' ? '\t' : ' ';
            for (int w = 0; w < width && k < 250; w++)
                caret[k++] = w ? '~' : '^';
            caret[k] = 0;
            add(d, PTV_DL_CARET, "        %s", caret);
        }
    }
}

static void provenance(ptv_detail *d, ptv_stage *s, int item)
{
    ptv_target targets[128];
    int n = ptv_provenance(s, item, targets, 128, 12, false);
    bool any_back = false, any_fwd = false;
    for (int i = 0; i < n; i++) {
        any_back |= targets[i].back;
        any_fwd |= !targets[i].back;
    }
    if (any_back) {
        add(d, PTV_DL_FIELD, "came from");
        for (int i = 0; i < n; i++)
            if (targets[i].back)
                link_to(d, "  ", targets[i].stage, targets[i].item);
    }
    if (any_fwd) {
        add(d, PTV_DL_FIELD, "became");
        for (int i = 0; i < n; i++)
            if (!targets[i].back)
                link_to(d, "  ", targets[i].stage, targets[i].item);
    }
    int unloaded = ptv_compile_unloaded(s->compile);
    if (unloaded > 0) {
        char names[256];
        size_t len = 0;
        names[0] = 0;
        for (int i = 0; i < s->compile->nstages; i++) {
            const ptv_stage *t = s->compile->stages[i];
            if (t->state == PTV_UNLOADED && t->kind != 'I')
                ptv_appendf(names, sizeof names, &len, "%s%s", len ? ", " : "", t->name);
        }
        add(d, PTV_DL_NOTE, "provenance in %s: not loaded yet (g loads them)", names);
    } else if (n == 0) {
        const char *const *names;
        int norigins = ptv_item_origins(s, item, &names);
        add(d, PTV_DL_NOTE, norigins ? "provenance: no other stage of this compile refers to it"
                                     : "provenance: none recorded");
    }
}

void ptv_detail_item(ptv_detail *d, ptv_stage *s, int item, int context)
{
    d->n = 0;
    const ptv_item *it = &s->items[item];
    ptv_compile *c = s->compile;
    ptc_buf title = {0};
    ptv_item_text(it, &title);
    add(d, PTV_DL_TITLE, "%.500s", title.data ? title.data : "");
    ptc_buf_free(&title);
    char at[300] = "";
    if (it->file && it->file[0])
        snprintf(at, sizeof at, it->line > 0 ? "  (%s:%d)" : "  (%s)", it->file, it->line);
    add(d, PTV_DL_FIELD, "stage     %s of %s%s", s->name, c->id, at);
    const ptv_stage *cap = ptv_compile_stage(c, "captured");
    const char *via = it->inherited_from >= 0 && cap && cap != s
                          ? ptc_arena_printf(s->arena, "  (from %%%s in captured)",
                                             cap->items[it->inherited_from].name)
                          : "";
    if (it->type)
        add(d, PTV_DL_FIELD, "type      %s", it->type);
    if (it->module)
        add(d, PTV_DL_FIELD, "module    %s%s", it->module, via);
    if (it->loc.file || it->loc.text)
        add(d, PTV_DL_FIELD, "source    %s:%d:%d  %s%s", it->loc.file ? it->loc.file : "?",
            it->loc.line, it->loc.col, it->loc.text ? it->loc.text : "", via);
    if (it->kind == PTV_ITEM_NODE || it->loc.file)
        source_context(d, c->trace, &it->loc, context);
    if (it->kernel >= 0)
        add(d, PTV_DL_FIELD, "kernel    %d", it->kernel);
    if (it->node)
        attrs(d, it->node);
    if (it->ninputs > 0) {
        add(d, PTV_DL_FIELD, "inputs");
        for (int k = 0; k < it->ninputs; k++)
            link_to(d, "  ", s, it->inputs[k]);
    }
    if (it->nusers > 0) {
        add(d, PTV_DL_FIELD, "users");
        for (int k = 0; k < it->nusers; k++)
            link_to(d, "  ", s, it->users[k]);
    }
    if (it->kind == PTV_ITEM_NODE || it->kind == PTV_ITEM_INPUT || it->nprov > 0 ||
        it->kernel >= 0)
        provenance(d, s, item);
}

void ptv_detail_group(ptv_detail *d, ptv_stage *s, int group)
{
    d->n = 0;
    const ptv_group *g = &s->groups[group];
    if (g->titled) {
        /* The header line is its first item: show that, and the block's size. */
        ptv_detail_item(d, s, g->first, 3);
        ptv_dline block = *add(d, PTV_DL_FIELD, "block     %d more line%s%s", g->end - g->first - 1,
                               g->end - g->first == 2 ? "" : "s",
                               ptv_group_collapsed(s, group) ? "  (collapsed: c or Enter unfolds)" : "");
        /* Moved up to follow the title and stage lines. */
        memmove(&d->lines[3], &d->lines[2], sizeof *d->lines * (size_t)(d->n - 3));
        d->lines[2] = block;
        return;
    }
    add(d, PTV_DL_TITLE, "%s", g->label);
    add(d, PTV_DL_FIELD, "stage     %s of %s", s->name, s->compile->id);
    add(d, PTV_DL_FIELD, "path      %s", g->path);
    add(d, PTV_DL_FIELD, "contains  %d item%s, %d op%s%s", g->end - g->first,
        g->end - g->first == 1 ? "" : "s", g->nops, g->nops == 1 ? "" : "s",
        ptv_group_collapsed(s, group) ? "  (collapsed: c or Enter expands)" : "");
    link_to(d, "first     ", s, g->first);
    const ptv_item *first = &s->items[g->first];
    if (first->loc.file)
        source_context(d, s->compile->trace, &first->loc, 2);
}

void ptv_detail_compile(ptv_detail *d, ptv_compile *c)
{
    d->n = 0;
    add(d, PTV_DL_TITLE, "compile %s", c->id);
    add(d, PTV_DL_FIELD, "frame     %s  (recompile %d)", c->frame ? c->frame : "?", c->recompile);
    if (c->function || c->file)
        add(d, PTV_DL_FIELD, "function  %s  at %s:%d", c->function ? c->function : "?",
            c->file ? c->file : "?", c->line);
    add(d, PTV_DL_FIELD, "reason    %s", c->reason ? c->reason : "(not recorded)");
    add(d, PTV_DL_FIELD, "folder    %s", c->dir);
    if (c->error[0])
        add(d, PTV_DL_NOTE, "%s", c->error);
    for (int i = 0; i < c->nstages; i++) {
        const ptv_stage *s = c->stages[i];
        switch (s->state) {
        case PTV_LOADED:
            add(d, PTV_DL_FIELD, "  %-9s %d %s", s->name, s->nnodes,
                s->kind == 'G' ? "nodes" : s->id == PTV_KERNELS ? "kernels"
                                     : s->kind == 'C'       ? "kernel files"
                                     : s->kind == 'I'       ? "lines"
                                                            : "buffers");
            break;
        case PTV_UNLOADED: add(d, PTV_DL_FIELD, "  %-9s (not loaded yet)", s->name); break;
        default: add(d, PTV_DL_NOTE, "  %-9s %s", s->name, s->error); break;
        }
    }
}
