/* Loading one stage of a compile into items and groups.
 *
 * Graph stages (.ptir) are parsed with the IR's own parser and become one
 * item per graph header, input, node and return; nodes are grouped by module
 * path into runs (a module entered, left and entered again makes two runs,
 * collapsed together because they share a key). Runs of a single item are
 * not groups: the line already names its module. Text stages are split into
 * lines whose trailing `  <- %a, %b` is their provenance; kernels.txt's
 * `kernel <n> <name>:` lines open a group that holds the indented lines after
 * them. Code stages are one group per kernel_<n> file. Every later-stage
 * item without its own module path or source location inherits those of its
 * first provenance entry in the captured stage, which is loaded first.
 */
#include "tools/viewer/view_int.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---- small growable vectors (malloc; copied into the arena when done) ------- */

#define VEC(T) struct { T *v; int n, cap; }
#define VEC_PUSH(vec, x)                                                            \
    do {                                                                            \
        if ((vec).n == (vec).cap) {                                                 \
            (vec).cap = (vec).cap ? 2 * (vec).cap : 64;                             \
            void *nv_ = realloc((vec).v, sizeof *(vec).v * (size_t)(vec).cap);      \
            PTC_ASSERT(nv_ != NULL);                                                \
            (vec).v = nv_;                                                          \
        }                                                                           \
        (vec).v[(vec).n++] = (x);                                                   \
    } while (0)

/* ---- name -> items map ------------------------------------------------------- */

struct ptv_strmap {
    int slots;              /* power of two */
    const char **keys;
    int *head, *tail;       /* first / last link of each slot's key */
    int nlinks, cap;
    int *link_item, *link_next;
};

static uint64_t hash_str(const char *s) { return ptc_hash_bytes(PTC_HASH_INIT, s, strlen(s)); }

ptv_strmap *ptv_strmap_new(ptc_arena *a, int npairs)
{
    ptv_strmap *m = PTC_NEW(a, ptv_strmap);
    m->slots = 16;
    while (m->slots < 2 * npairs)
        m->slots *= 2;
    m->keys = PTC_NEWN(a, const char *, m->slots);
    m->head = PTC_NEWN(a, int, m->slots);
    m->tail = PTC_NEWN(a, int, m->slots);
    m->cap = npairs > 0 ? npairs : 1;
    m->link_item = PTC_NEWN(a, int, m->cap);
    m->link_next = PTC_NEWN(a, int, m->cap);
    return m;
}

static int slot_of(const ptv_strmap *m, const char *key)
{
    int mask = m->slots - 1;
    int i = (int)(hash_str(key) & (uint64_t)mask);
    while (m->keys[i] && strcmp(m->keys[i], key) != 0)
        i = (i + 1) & mask;
    return i;
}

void ptv_strmap_add(ptv_strmap *m, const char *key, int item)
{
    PTC_ASSERT(m->nlinks < m->cap);
    int link = m->nlinks++;
    m->link_item[link] = item;
    m->link_next[link] = -1;
    int i = slot_of(m, key);
    if (!m->keys[i]) {
        m->keys[i] = key;
        m->head[i] = m->tail[i] = link;
        return;
    }
    if (m->link_item[m->tail[i]] == item)
        return; /* the same item twice under one key */
    m->link_next[m->tail[i]] = link;
    m->tail[i] = link;
}

int ptv_strmap_get(const ptv_strmap *m, const char *key, int *out, int max)
{
    if (!m || !key)
        return 0;
    int i = slot_of(m, key);
    if (!m->keys[i])
        return 0;
    int n = 0;
    for (int l = m->head[i]; l >= 0; l = m->link_next[l], n++)
        if (n < max)
            out[n] = m->link_item[l];
    return n;
}

int ptv_strmap_first(const ptv_strmap *m, const char *key)
{
    int item;
    return ptv_strmap_get(m, key, &item, 1) > 0 ? item : -1;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* ---- shared finishing steps --------------------------------------------------- */

static ptv_stage *captured_of(ptv_stage *s)
{
    ptv_stage *cap = ptv_compile_stage(s->compile, "captured");
    if (!cap || cap == s || ptv_stage_load(cap) != 0)
        return NULL;
    return cap;
}

/* Module path and source location from the item's first stage-1 origin. */
static void inherit(ptv_item *it, const ptv_stage *cap)
{
    if (!cap || it->nprov == 0 || (it->module && it->loc.file))
        return;
    int j = ptv_find_value(cap, it->prov[0]);
    if (j < 0)
        return;
    const ptv_item *src = &cap->items[j];
    if (!it->module && src->module) {
        it->module = src->module;
        it->inherited_from = j;
    }
    if (!it->loc.file && !it->loc.text && (src->loc.file || src->loc.text)) {
        it->loc = src->loc;
        it->inherited_from = j;
    }
}

/* Origin index (every item under each of its origins) and, for graphs, the
 * value-name index. */
static void build_indexes(ptv_stage *s)
{
    int npairs = 0;
    for (int i = 0; i < s->nitems; i++) {
        const char *const *names;
        npairs += ptv_item_origins(s, i, &names);
    }
    s->by_origin = ptv_strmap_new(s->arena, npairs);
    for (int i = 0; i < s->nitems; i++) {
        const char *const *names;
        int n = ptv_item_origins(s, i, &names);
        for (int k = 0; k < n; k++)
            ptv_strmap_add(s->by_origin, names[k], i);
    }
}

/* Drops single-item groups, renumbers the rest, sets depths, and builds the
 * collapse keys (one per distinct path). */
static void finish_groups(ptv_stage *s, ptv_group *groups, int ngroups)
{
    int *renum = malloc(sizeof(int) * (size_t)(ngroups > 0 ? ngroups : 1));
    PTC_ASSERT(renum);
    int kept = 0;
    for (int g = 0; g < ngroups; g++)
        renum[g] = groups[g].end - groups[g].first > 1 ? kept++ : -1;
    /* Nearest kept ancestor, in place of a dropped group (parents come first). */
    for (int g = 0; g < ngroups; g++) {
        if (renum[g] >= 0)
            continue;
        int p = groups[g].parent;
        renum[g] = p >= 0 ? renum[p] : -1;
        groups[g].first = -1; /* mark dropped */
    }
    s->groups = PTC_NEWN(s->arena, ptv_group, kept > 0 ? kept : 1);
    s->ngroups = 0;
    for (int g = 0; g < ngroups; g++) {
        if (groups[g].first < 0)
            continue;
        ptv_group ng = groups[g];
        ng.parent = groups[g].parent >= 0 ? renum[groups[g].parent] : -1;
        ng.depth = ng.parent >= 0 ? s->groups[ng.parent].depth + 1 : 0;
        s->groups[s->ngroups++] = ng;
    }
    for (int i = 0; i < s->nitems; i++) {
        ptv_item *it = &s->items[i];
        it->group = it->group >= 0 ? renum[it->group] : -1;
        it->depth = (int16_t)(it->group >= 0 ? s->groups[it->group].depth + 1 : 0);
    }
    free(renum);
    ptv_strmap *keys = ptv_strmap_new(s->arena, s->ngroups);
    s->keys = PTC_NEWN(s->arena, const char *, s->ngroups > 0 ? s->ngroups : 1);
    for (int g = 0; g < s->ngroups; g++) {
        ptv_group *gr = &s->groups[g];
        int k = ptv_strmap_first(keys, gr->path);
        if (k < 0) {
            k = s->nkeys++;
            s->keys[k] = gr->path;
            ptv_strmap_add(keys, gr->path, k);
        }
        gr->key = k;
        gr->nops = 0;
        for (int i = gr->first; i < gr->end; i++)
            gr->nops += s->items[i].kind == PTV_ITEM_NODE || s->items[i].kind == PTV_ITEM_KERNEL ||
                        s->items[i].nprov > 0;
    }
    s->collapsed = PTC_NEWN(s->arena, bool, s->nkeys > 0 ? s->nkeys : 1);
}

/* ---- graph stages ------------------------------------------------------------- */

/* Does `prefix` name `path` or one of its ancestors ("layer1" of "layer1.0")? */
static bool module_prefix(const char *prefix, const char *path)
{
    size_t n = strlen(prefix);
    return strncmp(prefix, path, n) == 0 && (path[n] == 0 || path[n] == '.');
}

/* Groups consecutive nodes by module path: a stack of open runs. */
static void group_by_module(ptv_stage *s)
{
    VEC(ptv_group) groups = {0};
    int stack[64], depth = 0;
    for (int i = 0; i <= s->nitems; i++) {
        ptv_item *it = i < s->nitems ? &s->items[i] : NULL;
        const char *path = !it                           ? NULL
                           : it->kind == PTV_ITEM_NODE  ? it->module
                           : it->kind == PTV_ITEM_INPUT ? PTV_INPUTS
                                                        : NULL;
        while (depth > 0 && (!path || !module_prefix(groups.v[stack[depth - 1]].path, path)))
            groups.v[stack[--depth]].end = i;
        if (!it)
            break;
        /* Open the components of path below the innermost open group. */
        while (path && depth < 64) {
            size_t have = depth > 0 ? strlen(groups.v[stack[depth - 1]].path) : 0;
            if (have == strlen(path))
                break;
            const char *dot = strchr(path + have + (have > 0), '.');
            size_t len = dot ? (size_t)(dot - path) : strlen(path);
            ptv_group g = {0};
            g.path = len == strlen(path) ? path : ptc_arena_strndup(s->arena, path, len);
            g.label = strcmp(g.path, PTV_INPUTS) == 0 ? "inputs" : g.path;
            g.parent = depth > 0 ? stack[depth - 1] : -1;
            g.first = i;
            VEC_PUSH(groups, g);
            stack[depth++] = groups.n - 1;
        }
        it->group = depth > 0 ? stack[depth - 1] : -1;
    }
    finish_groups(s, groups.v, groups.n);
    free(groups.v);
}

static const char *types_text(ptc_arena *a, ptc_value **outs, int n, bool full)
{
    ptc_buf b = {0};
    for (int i = 0; i < n; i++) {
        if (i)
            ptc_buf_puts(&b, ", ");
        ptc_ttype_print(&b, &outs[i]->type, full);
    }
    const char *s = b.data ? ptc_arena_strdup(a, b.data) : "";
    ptc_buf_free(&b);
    return s;
}

static ptv_item *new_item(ptv_stage *s, ptv_itemkind kind, const char *file)
{
    ptv_item *it = &s->items[s->nitems++];
    it->kind = (uint8_t)kind;
    it->file = file;
    it->group = -1;
    it->kernel = -1;
    it->inherited_from = -1;
    return it;
}

/* Appends the items defining the tensors of one argument (deduplicated). */
static void add_arg_inputs(int *inputs, int *n, int max, const ptc_arg *a, const int *value_item)
{
    ptc_value *const *vals = a->kind == PTC_ARG_VALUE ? &a->v : a->vs.v;
    int count = a->kind == PTC_ARG_VALUE ? 1 : a->kind == PTC_ARG_VALUES ? a->vs.n : 0;
    for (int k = 0; k < count; k++) {
        if (!vals[k] || *n >= max)
            continue;
        int src = value_item[vals[k]->id];
        bool seen = src < 0;
        for (int j = 0; j < *n && !seen; j++)
            seen = inputs[j] == src;
        if (!seen)
            inputs[(*n)++] = src;
    }
}

/* Users of items [first, end): the reverse of their inputs. */
static void link_users(ptv_stage *s, int first, int end)
{
    for (int i = first; i < end; i++)
        for (int k = 0; k < s->items[i].ninputs; k++)
            s->items[s->items[i].inputs[k]].nusers++;
    for (int i = first; i < end; i++) {
        s->items[i].users = PTC_NEWN(s->arena, int, s->items[i].nusers + 1);
        s->items[i].nusers = 0;
    }
    for (int i = first; i < end; i++)
        for (int k = 0; k < s->items[i].ninputs; k++) {
            ptv_item *src = &s->items[s->items[i].inputs[k]];
            src->users[src->nusers++] = i;
        }
}

static void graph_header(ptv_stage *s, const ptc_graph *g, const char *file)
{
    ptc_buf b = {0};
    ptv_item *it = new_item(s, PTV_ITEM_GRAPH, file);
    it->op = "graph";
    it->name = g->name;
    ptc_buf_printf(&b, "graph %s(", g->name);
    for (int i = 0; i < g->ninputs; i++) {
        ptc_buf_printf(&b, "%s%%%s: ", i ? ", " : "", g->inputs[i]->name);
        ptc_ttype_print(&b, &g->inputs[i]->type, true);
    }
    ptc_buf_puts(&b, ")");
    it->text = ptc_arena_strdup(s->arena, b.data);
    ptc_buf_free(&b);
}

/* Items of one graph, appended at s->nitems, with inputs and users. */
static void add_graph(ptv_stage *s, const ptc_graph *g, const ptv_stage *cap, const char *file)
{
    ptc_arena *a = s->arena;
    int first = s->nitems;
    int *value_item = malloc(sizeof(int) * (size_t)(g->nvalues + 1));
    int tmp[256];
    PTC_ASSERT(value_item);
    for (int v = 0; v < g->nvalues; v++)
        value_item[v] = -1;
    graph_header(s, g, file);
    for (int i = 0; i < g->ninputs; i++) {
        value_item[g->inputs[i]->id] = s->nitems;
        ptv_item *it = new_item(s, PTV_ITEM_INPUT, file);
        it->op = "input";
        it->name = g->inputs[i]->name;
        it->type = types_text(a, &g->inputs[i], 1, true);
        char shown[400];
        ptv_user_name(it->name, shown, sizeof shown);
        it->text = ptc_arena_printf(a, "%%%s: %s", shown, it->type);
    }
    ptc_buf b = {0};
    for (int i = 0; i < g->nnodes; i++) {
        const ptc_node *n = g->nodes[i];
        int index = s->nitems;
        ptv_item *it = new_item(s, PTV_ITEM_NODE, file);
        it->node = n;
        it->op = ptc_op_name(n->op);
        it->name = n->outs[0]->name;
        it->line = n->text_line;
        it->type = types_text(a, n->outs, n->nout, false);
        it->module = n->module_path;
        it->loc = n->loc;
        it->nprov = n->nprov;
        it->prov = n->prov;
        /* it->text stays NULL: printing every node is a third of the load
         * time of a big graph, and only the detail pane shows it. */
        inherit(it, cap);
        for (int k = 0; k < n->nargs; k++)
            add_arg_inputs(tmp, &it->ninputs, 256, &n->args[k], value_item);
        it->inputs = ptc_arena_dup(a, tmp, sizeof(int) * (size_t)(it->ninputs + 1));
        for (int k = 0; k < n->nout; k++)
            value_item[n->outs[k]->id] = index;
    }
    ptv_item *it = new_item(s, PTV_ITEM_RETURN, file);
    it->op = "return";
    b.len = 0;
    ptc_buf_puts(&b, "return (");
    for (int i = 0; i < g->noutputs; i++) {
        ptc_buf_printf(&b, "%s%%%s", i ? ", " : "", g->outputs[i]->name);
        ptc_arg out = ptc_arg_value(g->outputs[i]);
        add_arg_inputs(tmp, &it->ninputs, 256, &out, value_item);
    }
    ptc_buf_puts(&b, ")");
    it->text = ptc_arena_strdup(a, b.data);
    it->inputs = ptc_arena_dup(a, tmp, sizeof(int) * (size_t)(it->ninputs + 1));
    ptc_buf_free(&b);
    free(value_item);
    link_users(s, first, s->nitems);
}

int ptv_load_graph(ptv_stage *s)
{
    ptc_error err;
    ptc_module *m = ptc_parse_file(s->files[0], &err);
    if (!m) {
        ptc_error_format(&err, s->error, sizeof s->error);
        s->state = PTV_BROKEN;
        return -1;
    }
    s->module = m;
    const ptv_stage *cap = s->id == PTV_CAPTURED ? NULL : captured_of(s);
    int total = 0;
    for (int i = 0; i < m->ngraphs; i++)
        total += 2 + m->graphs[i]->ninputs + m->graphs[i]->nnodes;
    s->items = PTC_NEWN(s->arena, ptv_item, total > 0 ? total : 1);
    const char *file = base_name(s->files[0]);
    for (int i = 0; i < m->ngraphs; i++) {
        add_graph(s, m->graphs[i], cap, file);
        s->nnodes += m->graphs[i]->nnodes;
    }
    group_by_module(s);
    /* A long list of inputs (parameters, mostly) starts folded. */
    for (int g = 0; g < s->ngroups; g++)
        if (strcmp(s->groups[g].path, PTV_INPUTS) == 0 && s->groups[g].end - s->groups[g].first > 8)
            s->collapsed[s->groups[g].key] = true;
    int npairs = 0;
    for (int i = 0; i < m->ngraphs; i++) {
        npairs += m->graphs[i]->ninputs;
        for (int k = 0; k < m->graphs[i]->nnodes; k++)
            npairs += m->graphs[i]->nodes[k]->nout;
    }
    s->by_name = ptv_strmap_new(s->arena, npairs);
    for (int i = 0; i < s->nitems; i++) {
        const ptv_item *it = &s->items[i];
        if (it->kind == PTV_ITEM_INPUT)
            ptv_strmap_add(s->by_name, it->name, i);
        else if (it->kind == PTV_ITEM_NODE)
            for (int k = 0; k < it->node->nout; k++)
                ptv_strmap_add(s->by_name, it->node->outs[k]->name, i);
    }
    build_indexes(s);
    s->state = PTV_LOADED;
    return 0;
}

/* ---- text stages ---------------------------------------------------------------- */

static bool is_name_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '.'; }

/* Splits "text  <- %a, %b" into the text's length and the names. Lines
 * without a well-formed trailing list have no provenance. */
static void split_prov(ptc_arena *a, const char *line, size_t len, size_t *text_len, int *nprov,
                       const char ***prov)
{
    *text_len = len;
    *nprov = 0;
    const char *arrow = NULL;
    for (const char *p = line; p + 1 < line + len; p++)
        if (p[0] == '<' && p[1] == '-' && (p == line || p[-1] == ' ' || p[-1] == '\t'))
            arrow = p;
    if (!arrow)
        return;
    VEC(const char *) names = {0};
    const char *p = arrow + 2, *end = line + len;
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p >= end || *p != '%')
            goto malformed;
        const char *start = ++p;
        while (p < end && is_name_char(*p))
            p++;
        if (p == start)
            goto malformed;
        VEC_PUSH(names, ptc_arena_strndup(a, start, (size_t)(p - start)));
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p == end)
            break;
        if (*p++ != ',')
            goto malformed;
    }
    while (arrow > line && (arrow[-1] == ' ' || arrow[-1] == '\t'))
        arrow--;
    *text_len = (size_t)(arrow - line);
    *nprov = names.n;
    *prov = ptc_arena_dup(a, names.v, sizeof(char *) * (size_t)names.n);
malformed:
    free(names.v);
}

/* "kernel <n> <name>:" (kernels.txt) or "; ptc kernel <n> <name>" (code). */
static bool kernel_header(const char *text, bool code, int *num, const char **name_at)
{
    const char *p = text;
    while (*p == ' ' || *p == '\t')
        p++;
    if (code) {
        if (strncmp(p, ";", 1) == 0)
            p++;
        else if (strncmp(p, "//", 2) == 0)
            p += 2;
        else
            return false;
        while (*p == ' ')
            p++;
        if (strncmp(p, "ptc ", 4) != 0)
            return false;
        p += 4;
    }
    if (strncmp(p, "kernel ", 7) != 0 || !isdigit((unsigned char)p[7]))
        return false;
    char *end;
    long n = strtol(p + 7, &end, 10);
    if (n < 0 || n > 1000000)
        return false;
    *num = (int)n;
    while (*end == ' ')
        end++;
    *name_at = end;
    return code || strchr(end, ':') != NULL;
}

typedef struct textfile {
    char *data;
    int nlines;
    char **lines;       /* NUL-terminated in data */
} textfile;

static int read_lines(ptv_stage *s, const char *path, textfile *tf)
{
    ptc_error err;
    size_t len;
    memset(tf, 0, sizeof *tf);
    tf->data = ptc_read_file(path, &len, &err);
    if (!tf->data) {
        snprintf(s->error, sizeof s->error, "%.500s", err.msg);
        s->state = PTV_BROKEN;
        return -1;
    }
    if (memchr(tf->data, 0, len)) {
        snprintf(s->error, sizeof s->error, "%s: binary data (a NUL byte) in a text stage", path);
        s->state = PTV_BROKEN;
        free(tf->data);
        tf->data = NULL;
        return -1;
    }
    tf->nlines = 0;
    for (size_t i = 0; i < len; i++)
        tf->nlines += tf->data[i] == '\n';
    if (len > 0 && tf->data[len - 1] != '\n')
        tf->nlines++;
    tf->lines = malloc(sizeof(char *) * (size_t)(tf->nlines + 1));
    PTC_ASSERT(tf->lines);
    int n = 0;
    for (char *p = tf->data; n < tf->nlines; n++) {
        tf->lines[n] = p;
        char *nl = strchr(p, '\n');
        if (!nl)
            break;
        *nl = 0;
        if (nl > p && nl[-1] == '\r')
            nl[-1] = 0;
        p = nl + 1;
    }
    return 0;
}

static void textfile_free(textfile *tf)
{
    free(tf->data);
    free(tf->lines);
}

static ptv_item *add_line(ptv_stage *s, const char *file, int line, const char *text,
                          const ptv_stage *cap)
{
    ptv_item *it = new_item(s, PTV_ITEM_LINE, file);
    size_t text_len;
    it->line = line;
    split_prov(s->arena, text, strlen(text), &text_len, &it->nprov, &it->prov);
    it->text = ptc_arena_strndup(s->arena, text, text_len);
    inherit(it, cap);
    return it;
}

/* Union of the members' provenance, for a header that has none of its own. */
static void header_prov(ptv_stage *s, ptv_item *h, int first, int end)
{
    if (h->nprov > 0)
        return;
    VEC(const char *) names = {0};
    for (int i = first; i < end; i++)
        for (int k = 0; k < s->items[i].nprov; k++) {
            bool seen = false;
            for (int j = 0; j < names.n && !seen; j++)
                seen = strcmp(names.v[j], s->items[i].prov[k]) == 0;
            if (!seen)
                VEC_PUSH(names, s->items[i].prov[k]);
        }
    h->nprov = names.n;
    h->prov = names.n ? ptc_arena_dup(s->arena, names.v, sizeof(char *) * (size_t)names.n) : NULL;
    free(names.v);
}

static bool is_indented(const char *line) { return line[0] == ' ' || line[0] == '\t'; }

static bool is_blank(const char *line)
{
    while (*line == ' ' || *line == '\t')
        line++;
    return *line == 0;
}

/* The collapse key of a block: its header up to the first ':' or " =". */
static const char *block_path(ptc_arena *a, const char *header)
{
    size_t n = 0;
    while (header[n] && header[n] != ':' && strncmp(header + n, " =", 2) != 0 && n < 60)
        n++;
    return ptc_arena_strndup(a, header, n);
}

/* Opens a titled group at the item just added. */
static int open_block(ptv_stage *s, void *vec, const char *path)
{
    VEC(ptv_group) *groups = vec;
    ptv_group g = {0};
    g.path = path;
    g.label = s->items[s->nitems - 1].text;
    g.parent = -1;
    g.first = s->nitems - 1;
    g.titled = true;
    VEC_PUSH(*groups, g);
    return groups->n - 1;
}

/* loops.txt and kernels.txt: lines, and blocks. A block is a line at the
 * left margin followed by indented lines (a loop node and its body, a
 * kernel and its members, an extern, the memory plan); it is a group titled
 * by that line. In kernels.txt, "kernel <n> <name>:" lines are kernel
 * headers, whose provenance is their members' when they carry none. */
int ptv_load_text(ptv_stage *s)
{
    textfile tf;
    if (read_lines(s, s->files[0], &tf))
        return -1;
    const ptv_stage *cap = captured_of(s);
    const char *file = base_name(s->files[0]);
    s->items = PTC_NEWN(s->arena, ptv_item, tf.nlines + 1);
    VEC(ptv_group) groups = {0};
    int open = -1; /* the block being filled */
    for (int i = 0; i < tf.nlines; i++) {
        const char *line = tf.lines[i];
        int num;
        const char *name_at;
        bool kernel = s->id == PTV_KERNELS && kernel_header(line, false, &num, &name_at);
        bool margin = !is_indented(line) && !is_blank(line);
        bool block = margin && line[0] != '#' && i + 1 < tf.nlines && is_indented(tf.lines[i + 1]) &&
                     !is_blank(tf.lines[i + 1]);
        if (open >= 0 && (kernel || margin)) {
            groups.v[open].end = s->nitems;
            open = -1;
        }
        ptv_item *it = add_line(s, file, i + 1, line, cap);
        if (kernel) {
            it->kind = PTV_ITEM_KERNEL;
            it->op = "kernel";
            it->kernel = num;
            open = open_block(s, &groups, ptc_arena_printf(s->arena, "kernel %d", num));
            s->nnodes++;
        } else if (block) {
            open = open_block(s, &groups, block_path(s->arena, it->text));
        } else if (open >= 0) {
            it->kernel = s->items[groups.v[open].first].kernel;
        }
        if (s->id != PTV_KERNELS)
            s->nnodes += it->nprov > 0;
        it->group = open;
    }
    if (open >= 0)
        groups.v[open].end = s->nitems;
    /* Trailing blank lines of a block belong to no one. */
    for (int g = 0; g < groups.n; g++) {
        while (groups.v[g].end > groups.v[g].first + 1 && !s->items[groups.v[g].end - 1].text[0])
            s->items[--groups.v[g].end].group = -1;
        ptv_item *title = &s->items[groups.v[g].first];
        if (title->kind == PTV_ITEM_KERNEL)
            header_prov(s, title, groups.v[g].first + 1, groups.v[g].end);
    }
    textfile_free(&tf);
    finish_groups(s, groups.v, groups.n);
    free(groups.v);
    build_indexes(s);
    s->state = PTV_LOADED;
    return 0;
}

/* ---- code stages: kernel_<n>.ll / kernel_<n>.ptx ---------------------------------- */

static int kernel_number(const char *path)
{
    const char *b = base_name(path);
    return strncmp(b, "kernel_", 7) == 0 ? atoi(b + 7) : -1;
}

/* One kernel file: its lines as a group, the first line its header. A file
 * that cannot be read becomes one line saying so, and the stage keeps the
 * first such error (it loads, marked). */
static void add_code_file(ptv_stage *s, int f, ptv_group *g, const ptv_stage *cap)
{
    const char *file = base_name(s->files[f]);
    int num = kernel_number(s->files[f]);
    textfile tf;
    char saved[sizeof s->error];
    memcpy(saved, s->error, sizeof saved);
    g->path = file;
    g->label = file;
    g->parent = -1;
    g->first = s->nitems;
    if (read_lines(s, s->files[f], &tf)) {
        ptv_item *it = add_line(s, file, 0, ptc_arena_printf(s->arena, "(%s)", s->error), NULL);
        it->kernel = num;
        it->group = f;
        if (saved[0])
            memcpy(s->error, saved, sizeof saved);
        s->state = PTV_UNLOADED;
        g->end = s->nitems;
        return;
    }
    for (int i = 0; i < tf.nlines; i++) {
        ptv_item *it = add_line(s, file, i + 1, tf.lines[i], cap);
        int hn;
        const char *name_at;
        if (i == 0 && kernel_header(it->text, true, &hn, &name_at)) {
            it->kind = PTV_ITEM_KERNEL;
            it->op = "kernel";
            num = hn;
            g->label = ptc_arena_printf(s->arena, "%s  %s", file, name_at);
        }
        it->group = f;
    }
    for (int i = g->first; i < s->nitems; i++)
        s->items[i].kernel = num;
    g->end = s->nitems;
    textfile_free(&tf);
}

/* Line count of a file without keeping it (for sizing the item array). */
static int count_lines(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return 1;
    int n = 1, c;
    while ((c = getc(fp)) != EOF)
        n += c == '\n';
    fclose(fp);
    return n;
}

int ptv_load_code(ptv_stage *s)
{
    int total = 1;
    for (int f = 0; f < s->nfiles; f++)
        total += count_lines(s->files[f]);
    const ptv_stage *cap = captured_of(s);
    s->items = PTC_NEWN(s->arena, ptv_item, total);
    ptv_group *groups = PTC_NEWN(s->arena, ptv_group, s->nfiles);
    for (int f = 0; f < s->nfiles; f++)
        add_code_file(s, f, &groups[f], cap);
    s->nnodes = s->nfiles;
    finish_groups(s, groups, s->nfiles);
    build_indexes(s);
    s->state = PTV_LOADED;
    return 0;
}

/* ---- info: the compile's metadata and auxiliary files ----------------------------- */

int ptv_load_info(ptv_stage *s)
{
    ptv_compile *c = s->compile;
    textfile *tfs = calloc((size_t)s->nfiles + 1, sizeof *tfs);
    PTC_ASSERT(tfs);
    int total = 8;
    for (int f = 0; f < s->nfiles; f++) {
        if (read_lines(s, s->files[f], &tfs[f]) == 0)
            total += tfs[f].nlines + 1;
        else
            total += 1;
    }
    s->state = PTV_UNLOADED;
    s->error[0] = 0;
    s->items = PTC_NEWN(s->arena, ptv_item, total);
    ptv_group *groups = PTC_NEWN(s->arena, ptv_group, s->nfiles + 1);
    char buf[1024];
    snprintf(buf, sizeof buf, "compile %s: %s() at %s:%d", c->id, c->function ? c->function : "?",
             c->file ? c->file : "?", c->line);
    add_line(s, "", 0, buf, NULL);
    snprintf(buf, sizeof buf, "frame %s, recompile %d: %s", c->frame ? c->frame : "?",
             c->recompile, c->reason ? c->reason : "(no reason recorded)");
    add_line(s, "", 0, buf, NULL);
    if (c->error[0])
        add_line(s, "", 0, c->error, NULL);
    for (int f = 0; f < s->nfiles; f++) {
        const char *file = base_name(s->files[f]);
        ptv_group *g = &groups[s->ngroups];
        g->path = file;
        g->label = file;
        g->parent = -1;
        g->first = s->nitems;
        if (!tfs[f].lines) {
            add_line(s, file, 0, ptc_arena_printf(s->arena, "(%s could not be read)", file), NULL);
        } else {
            add_line(s, file, 0, ptc_arena_printf(s->arena, "%s:", file), NULL);
            for (int i = 0; i < tfs[f].nlines; i++) {
                ptv_item *it = add_line(s, file, i + 1, tfs[f].lines[i], NULL);
                it->nprov = 0; /* guards and JSON are not provenance */
                it->text = ptc_arena_printf(s->arena, "  %s", tfs[f].lines[i]);
            }
        }
        for (int i = g->first; i < s->nitems; i++)
            s->items[i].group = f;
        g->end = s->nitems;
        textfile_free(&tfs[f]);
        s->ngroups++;
    }
    free(tfs);
    int n = s->ngroups;
    s->ngroups = 0;
    finish_groups(s, groups, n);
    s->nnodes = s->nitems;
    build_indexes(s);
    s->state = PTV_LOADED;
    return 0;
}
