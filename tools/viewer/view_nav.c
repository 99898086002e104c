/* Navigating the model: origins, provenance, linked selection, the visible
 * lines of a view, collapse, search, and the column layout of a line.
 *
 * A view's lines are rebuilt from scratch whenever its stage's collapse
 * state changes (a generation counter says when): one pass over the items
 * that skips collapsed groups, O(items), a few milliseconds at 10,000 nodes,
 * which is simpler than patching the list and fast enough for a keypress.
 */
#include "tools/viewer/view_int.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---- origins and provenance --------------------------------------------------- */

int ptv_item_origins(const ptv_stage *s, int item, const char *const **names)
{
    const ptv_item *it = &s->items[item];
    bool own = it->name && (it->kind == PTV_ITEM_NODE || it->kind == PTV_ITEM_INPUT) &&
               (s->id == PTV_CAPTURED || (s->id == PTV_OTHER && it->nprov == 0));
    if (own) {
        *names = &it->name;
        return 1;
    }
    *names = it->prov;
    return it->nprov;
}

void ptv_item_text(const ptv_item *it, ptc_buf *b)
{
    if (it->node && !it->text)
        ptc_print_node(b, it->node);
    else
        ptc_buf_puts(b, it->text ? it->text : "");
}

int ptv_find_origin(const ptv_stage *s, const char *name, int *out, int max)
{
    return s->state == PTV_LOADED ? ptv_strmap_get(s->by_origin, name, out, max) : 0;
}

int ptv_find_value(const ptv_stage *s, const char *name)
{
    return s->state == PTV_LOADED && s->by_name ? ptv_strmap_first(s->by_name, name) : -1;
}

int ptv_find_kernel(const ptv_stage *s, int kernel)
{
    for (int i = 0; s->state == PTV_LOADED && i < s->nitems; i++)
        if (s->items[i].kind == PTV_ITEM_KERNEL && s->items[i].kernel == kernel)
            return i;
    return -1;
}

static int int_cmp(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Items of t related to (s, item): sharing an origin, or the same kernel's
 * header. Collects at most `cap` (out's size), then sorts and deduplicates;
 * returns how many are left. */
static int related(const ptv_stage *s, int item, const ptv_stage *t, int *out, int cap)
{
    const char *const *names;
    int norigins = ptv_item_origins(s, item, &names);
    int n = 0;
    for (int k = 0; k < norigins && n < cap; k++) {
        int got = ptv_find_origin(t, names[k], out + n, cap - n);
        n += got < cap - n ? got : cap - n;
    }
    int kernel = s->items[item].kernel;
    if (kernel >= 0 && n < cap && t->kind != 'G') {
        int h = ptv_find_kernel(t, kernel);
        if (h >= 0)
            out[n++] = h;
    }
    qsort(out, (size_t)n, sizeof(int), int_cmp);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (m == 0 || out[m - 1] != out[i])
            out[m++] = out[i];
    return m;
}

int ptv_compile_unloaded(const ptv_compile *c)
{
    int n = 0;
    for (int i = 0; i < c->nstages; i++)
        n += c->stages[i]->state == PTV_UNLOADED && c->stages[i]->kind != 'I';
    return n;
}

int ptv_provenance(ptv_stage *s, int item, ptv_target *out, int max, int per_stage, bool load)
{
    ptv_compile *c = s->compile;
    int me = ptv_stage_index(c, s), n = 0;
    if (per_stage > 256)
        per_stage = 256;
    int cap = 4 * per_stage + 1;
    int *found = malloc(sizeof(int) * (size_t)cap);
    PTC_ASSERT(found);
    for (int i = 0; i < c->nstages && n < max; i++) {
        ptv_stage *t = c->stages[i];
        if (t == s || t->kind == 'I' || (!load && t->state != PTV_LOADED) || ptv_stage_load(t) != 0)
            continue;
        int got = related(s, item, t, found, cap);
        for (int k = 0; k < got && k < per_stage && n < max; k++)
            out[n++] = (ptv_target){t, found[k], i < me};
    }
    free(found);
    return n;
}

int ptv_link(const ptv_stage *from, int item, ptv_stage *to)
{
    if (item < 0 || ptv_stage_load(to) != 0)
        return -1;
    if (from == to)
        return item;
    /* The first item sharing any origin, else the same kernel's header. */
    const char *const *names;
    int norigins = ptv_item_origins(from, item, &names), best = -1;
    for (int k = 0; k < norigins; k++) {
        int first;
        if (ptv_find_origin(to, names[k], &first, 1) > 0 && (best < 0 || first < best))
            best = first;
    }
    if (best < 0 && from->items[item].kernel >= 0 && to->kind != 'G')
        best = ptv_find_kernel(to, from->items[item].kernel);
    return best;
}

/* ---- visible lines ------------------------------------------------------------- */

bool ptv_group_collapsed(const ptv_stage *s, int group)
{
    return s->collapsed[s->groups[group].key];
}

void ptv_stage_collapse_all(ptv_stage *s, bool collapsed)
{
    for (int k = 0; k < s->nkeys; k++)
        s->collapsed[k] = collapsed;
    s->generation++;
}

void ptv_stage_set_collapsed(ptv_stage *s, const char *path, bool collapsed)
{
    for (int k = 0; k < s->nkeys; k++)
        if (strcmp(s->keys[k], path) == 0 && s->collapsed[k] != collapsed) {
            s->collapsed[k] = collapsed;
            s->generation++;
        }
}

static void push_line(ptv_view *v, int value)
{
    PTC_ASSERT(v->nlines < v->cap);
    v->lines[v->nlines++] = value;
}

static void build_lines(ptv_view *v)
{
    const ptv_stage *s = v->stage;
    v->nlines = 0;
    v->generation = s ? s->generation : 0;
    if (!s || s->state != PTV_LOADED)
        return;
    if (v->cap < s->nitems + s->ngroups) {
        v->cap = s->nitems + s->ngroups;
        free(v->lines);
        v->lines = malloc(sizeof(int) * (size_t)(v->cap > 0 ? v->cap : 1));
        PTC_ASSERT(v->lines);
    }
    int g = 0;
    for (int i = 0; i < s->nitems;) {
        bool folded = false, titled = false;
        while (g < s->ngroups && s->groups[g].first == i) {
            push_line(v, -(g + 1));
            titled |= s->groups[g].titled;
            if (ptv_group_collapsed(s, g)) {
                int end = s->groups[g].end;
                while (g < s->ngroups && s->groups[g].first < end)
                    g++;
                i = end;
                folded = true;
                break;
            }
            g++;
        }
        if (folded)
            continue;
        if (!titled) /* a title shows on its header line */
            push_line(v, i);
        i++;
    }
}

void ptv_view_init(ptv_view *v, ptv_stage *s)
{
    int *lines = v->lines, cap = v->cap;
    memset(v, 0, sizeof *v);
    v->lines = lines;
    v->cap = cap;
    v->stage = s;
    if (s)
        ptv_stage_load(s);
    build_lines(v);
}

void ptv_view_free(ptv_view *v)
{
    free(v->lines);
    memset(v, 0, sizeof *v);
}

/* The header line of the outermost collapsed group holding item, or -1. */
static int folded_header(const ptv_view *v, int item)
{
    const ptv_stage *s = v->stage;
    int outer = -1;
    for (int g = s->items[item].group; g >= 0; g = s->groups[g].parent)
        if (ptv_group_collapsed(s, g))
            outer = g;
    if (outer < 0)
        return -1;
    for (int l = 0; l < v->nlines; l++)
        if (v->lines[l] == -(outer + 1))
            return l;
    return -1;
}

static int find_line(const ptv_view *v, int value)
{
    for (int l = 0; l < v->nlines; l++)
        if (v->lines[l] == value)
            return l;
    return -1;
}

void ptv_view_sync(ptv_view *v)
{
    if (!v->stage || (v->generation == v->stage->generation && (v->nlines > 0 ||
                                                               v->stage->state != PTV_LOADED)))
        return;
    int old = v->nlines > 0 ? v->lines[v->sel] : 0;
    build_lines(v);
    int l = find_line(v, old);
    if (l < 0 && old >= 0 && v->nlines > 0)
        l = folded_header(v, old);
    if (l < 0 && old < 0) {
        /* A header inside a group that got folded: its first item's place. */
        const ptv_group *gr = &v->stage->groups[-old - 1];
        l = folded_header(v, gr->first);
    }
    v->sel = l >= 0 ? l : 0;
    if (v->sel >= v->nlines)
        v->sel = v->nlines > 0 ? v->nlines - 1 : 0;
}

int ptv_view_item(const ptv_view *v)
{
    if (!v->stage || v->nlines == 0)
        return -1;
    int value = v->lines[v->sel];
    return value >= 0 ? value : v->stage->groups[-value - 1].first;
}

/* The group item is the title of, -1. */
static int titled_by(const ptv_stage *s, int item)
{
    int g = s->items[item].group;
    return g >= 0 && s->groups[g].titled && s->groups[g].first == item ? g : -1;
}

int ptv_view_select_item(ptv_view *v, int item)
{
    ptv_stage *s = v->stage;
    if (!s || item < 0 || item >= s->nitems)
        return -1;
    /* Unfold what hides the item (a title shows even when its group is folded). */
    int title_of = titled_by(s, item);
    int g = title_of >= 0 ? s->groups[title_of].parent : s->items[item].group;
    for (; g >= 0; g = s->groups[g].parent)
        if (ptv_group_collapsed(s, g)) {
            s->collapsed[s->groups[g].key] = false;
            s->generation++;
        }
    ptv_view_sync(v);
    int l = find_line(v, title_of >= 0 ? -(title_of + 1) : item);
    if (l >= 0)
        v->sel = l;
    return l;
}

void ptv_view_move(ptv_view *v, int delta)
{
    long sel = (long)v->sel + delta;
    v->sel = sel < 0 ? 0 : sel >= v->nlines ? (v->nlines > 0 ? v->nlines - 1 : 0) : (int)sel;
}

void ptv_view_scroll(ptv_view *v, int rows)
{
    if (rows < 1)
        rows = 1;
    if (v->sel < v->top)
        v->top = v->sel;
    if (v->sel >= v->top + rows)
        v->top = v->sel - rows + 1;
    if (v->top > v->nlines - rows)
        v->top = v->nlines - rows;
    if (v->top < 0)
        v->top = 0;
}

bool ptv_view_toggle(ptv_view *v)
{
    ptv_stage *s = v->stage;
    if (!s || v->nlines == 0)
        return false;
    int value = v->lines[v->sel];
    int g = value < 0 ? -value - 1 : s->items[value].group;
    if (g < 0)
        return false;
    bool fold = value >= 0 || !ptv_group_collapsed(s, g);
    s->collapsed[s->groups[g].key] = fold;
    s->generation++;
    ptv_view_sync(v);
    int l = find_line(v, -(g + 1));
    if (l < 0)
        l = folded_header(v, s->groups[g].first);
    if (l >= 0)
        v->sel = l;
    return true;
}

/* ---- search --------------------------------------------------------------------- */

static bool contains(const char *hay, const char *needle)
{
    if (!hay)
        return false;
    size_t n = strlen(needle);
    for (const char *p = hay; *p; p++)
        if (strncasecmp(p, needle, n) == 0)
            return true;
    return false;
}

bool ptv_item_matches(const ptv_stage *s, int item, const char *query)
{
    const ptv_item *it = &s->items[item];
    if (!query[0])
        return false;
    if (query[0] == '%' && it->name && strcmp(it->name, query + 1) == 0 &&
        (it->kind == PTV_ITEM_NODE || it->kind == PTV_ITEM_INPUT))
        return true;
    if (it->kind != PTV_ITEM_NODE && it->kind != PTV_ITEM_INPUT)
        return contains(it->text, query) || contains(it->module, query) ||
               contains(it->loc.file, query) || contains(it->loc.text, query);
    return contains(it->op, query) || contains(it->module, query) ||
           contains(it->loc.file, query) || contains(it->loc.text, query);
}

int ptv_view_search(ptv_view *v, const char *query, int dir)
{
    const ptv_stage *s = v->stage;
    if (!s || s->nitems == 0 || !query[0])
        return -1;
    int start = ptv_view_item(v);
    if (start < 0)
        start = 0;
    else if (dir > 0 && v->lines[v->sel] < 0 && !s->groups[-v->lines[v->sel] - 1].titled)
        start--; /* from a header, its first item is next (unless it is the title) */
    for (int k = 1; k <= s->nitems; k++) {
        int i = (int)((((long)start + (long)dir * k) % s->nitems + s->nitems) % s->nitems);
        if (ptv_item_matches(s, i, query)) {
            ptv_view_select_item(v, i);
            return i;
        }
    }
    return -1;
}

/* ---- line layout --------------------------------------------------------------------- */

typedef struct lay {
    ptv_linefmt *f;
    size_t len;
    int width;
} lay;

/* Appends text (bytes; display width counted per UTF-8 code point is the
 * caller's concern at the edge: we cut at `width` bytes at most). */
static void put(lay *l, const char *s, size_t n)
{
    size_t room = sizeof l->f->text - 1 - l->len;
    if (n > room)
        n = room;
    memcpy(l->f->text + l->len, s, n);
    l->len += n;
    l->f->text[l->len] = 0;
}

static void puts_(lay *l, const char *s) { put(l, s, strlen(s)); }

static void pad_to(lay *l, size_t col)
{
    while (l->len < col && l->len < sizeof l->f->text - 1)
        put(l, " ", 1);
}

static void span(lay *l, ptv_col c, size_t start) { l->f->span[c][0] = (int)start, l->f->span[c][1] = (int)l->len; }

static void put_loc(lay *l, const ptc_srcloc *loc)
{
    if (!loc->file && !loc->text)
        return;
    char buf[512];
    size_t at = l->len;
    if (loc->file) {
        const char *base = strrchr(loc->file, '/') ? strrchr(loc->file, '/') + 1 : loc->file;
        snprintf(buf, sizeof buf, "%s:%d", base, loc->line);
        puts_(l, buf);
    }
    if (loc->text) {
        snprintf(buf, sizeof buf, "%s\"%s\"", loc->file ? "  " : "", loc->text);
        puts_(l, buf);
    }
    span(l, PTV_COL_LOC, at);
}

static void put_prov(lay *l, const ptv_item *it)
{
    if (it->nprov == 0)
        return;
    puts_(l, "  ");
    size_t at = l->len;
    puts_(l, "<-");
    for (int k = 0; k < it->nprov && l->len < (size_t)l->width + 8; k++) {
        char buf[160];
        snprintf(buf, sizeof buf, "%s %%%s", k ? "," : "", it->prov[k]);
        puts_(l, buf);
    }
    span(l, PTV_COL_PROV, at);
}

static void format_text(lay *l, const ptv_stage *s, const ptv_item *it);

static void format_group(lay *l, const ptv_stage *s, int g)
{
    const ptv_group *gr = &s->groups[g];
    bool folded = ptv_group_collapsed(s, g);
    char buf[256];
    pad_to(l, (size_t)gr->depth * 2);
    puts_(l, folded ? "+ " : "- ");
    if (gr->titled) {
        format_text(l, s, &s->items[gr->first]);
        int count = gr->end - gr->first - 1;
        snprintf(buf, sizeof buf, "  (%d line%s%s)", count, count == 1 ? "" : "s",
                 folded ? ", collapsed" : "");
        size_t at = l->len;
        puts_(l, buf);
        span(l, PTV_COL_PROV, at); /* dim, like the provenance */
        l->f->header = true;
        l->f->collapsed = folded;
        return;
    }
    size_t at = l->len;
    puts_(l, gr->label);
    span(l, s->kind == 'G' ? PTV_COL_MODULE : PTV_COL_OP, at);
    bool inputs = strcmp(gr->path, PTV_INPUTS) == 0;
    const char *unit = inputs ? "input" : s->kind == 'G' ? "op" : s->id == PTV_KERNELS ? "member" : "line";
    int count = inputs || s->kind != 'G' ? gr->end - gr->first - (s->id == PTV_KERNELS) : gr->nops;
    snprintf(buf, sizeof buf, "  (%d %s%s%s)", count, unit, count == 1 ? "" : "s",
             folded ? ", collapsed" : "");
    puts_(l, buf);
    l->f->header = true;
    l->f->collapsed = folded;
}

static void format_node(lay *l, const ptv_item *it)
{
    /* Columns line up when there is room; narrow panes (split view) pack. */
    size_t op_w = l->width >= 100 ? 22 : l->width >= 70 ? 14 : 0;
    size_t type_w = l->width >= 100 ? 20 : l->width >= 70 ? 12 : 0;
    size_t at = l->len;
    char buf[256];
    buf[0] = '%';
    ptv_user_name(it->name ? it->name : "?", buf + 1, sizeof buf - 1);
    puts_(l, buf);
    span(l, PTV_COL_NAME, at);
    puts_(l, it->kind == PTV_ITEM_INPUT ? " : " : " = ");
    at = l->len;
    puts_(l, it->op);
    span(l, PTV_COL_OP, at);
    pad_to(l, at + op_w > l->len + 2 ? at + op_w : l->len + 2);
    at = l->len;
    puts_(l, it->type ? it->type : "");
    span(l, PTV_COL_TYPE, at);
    pad_to(l, at + type_w > l->len + 2 ? at + type_w : l->len + 2);
    if (it->module) {
        at = l->len;
        snprintf(buf, sizeof buf, "[%s]", it->module);
        puts_(l, buf);
        span(l, PTV_COL_MODULE, at);
        puts_(l, "  ");
    }
    put_loc(l, &it->loc);
    put_prov(l, it);
}

static void format_text(lay *l, const ptv_stage *s, const ptv_item *it)
{
    size_t at = l->len;
    puts_(l, it->text);
    span(l, it->kind == PTV_ITEM_KERNEL ? PTV_COL_OP : PTV_COL_NAME, at);
    put_prov(l, it);
    if (it->loc.file && s->kind != 'I' && it->kind != PTV_ITEM_KERNEL) {
        puts_(l, "  ");
        put_loc(l, &it->loc);
    }
}

void ptv_format_line(const ptv_view *v, int line, int width, ptv_linefmt *out)
{
    memset(out, 0, sizeof *out);
    lay l = {out, 0, width};
    const ptv_stage *s = v->stage;
    int value = v->lines[line];
    if (value < 0) {
        format_group(&l, s, -value - 1);
    } else {
        const ptv_item *it = &s->items[value];
        pad_to(&l, (size_t)it->depth * 2);
        if (it->kind == PTV_ITEM_NODE || it->kind == PTV_ITEM_INPUT)
            format_node(&l, it);
        else
            format_text(&l, s, it);
    }
    /* Cut at width display columns (UTF-8 continuation bytes take none). */
    int cols = 0;
    size_t i = 0;
    for (; out->text[i]; i++) {
        if (((unsigned char)out->text[i] & 0xC0) != 0x80 && cols++ == width)
            break;
    }
    out->text[i] = 0;
    for (int c = 0; c < PTV_COL_COUNT; c++)
        for (int e = 0; e < 2; e++)
            if (out->span[c][e] > (int)i)
                out->span[c][e] = (int)i;
}
