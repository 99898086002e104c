/* Opening a trace: which compiles there are and which stage files each has.
 *
 * index.json says what the run compiled (view_index.c reads it); the folders
 * say what is actually on disk. ptview trusts the disk for files and the
 * index for metadata: a stage listed but absent is shown as missing, a file
 * present but unlisted (a compile cut short) is shown anyway, and a trace
 * whose index is missing or damaged still opens from its folders with a
 * warning. Nothing is parsed here: stages load when first shown.
 *
 * The user's source files are read once and kept (ptv_source).
 */
#include "tools/viewer/view_int.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
    const char *name;
    char kind;
} stage_table[] = {
#define X(id, name, kind) {name, kind},
    PTV_STAGES(X)
#undef X
};
_Static_assert(sizeof stage_table / sizeof *stage_table == PTV_STAGE_COUNT,
               "stage table out of step");

const char *ptv_stage_name(ptv_stageid id)
{
    return (unsigned)id < PTV_STAGE_COUNT ? stage_table[id].name : "other";
}

void ptv_user_name(const char *name, char *out, size_t size)
{
    static const char internal[] = "_modules_";
    size_t n = 0;
    for (const char *p = name; *p && n + 1 < size;) {
        bool segment = p == name || p[-1] == '.';
        if (segment && strncmp(p, internal, sizeof internal - 1) == 0) {
            p += sizeof internal - 1;
            continue;
        }
        out[n++] = *p++;
    }
    out[n] = 0;
}

void ptv_elide_middle(const char *s, int width, char *out, size_t size)
{
    int len = (int)strlen(s);
    if (len <= width || width < 6) {
        snprintf(out, size, "%.*s", width > 0 ? width : 0, s);
        return;
    }
    int tail = (width - 2) * 3 / 5, head = width - 2 - tail;
    snprintf(out, size, "%.*s..%s", head, s, s + len - tail);
}

void ptv_appendf(char *buf, size_t size, size_t *len, const char *fmt, ...)
{
    if (*len >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, size - *len, fmt, ap);
    va_end(ap);
    *len = n < 0 ? *len : *len + (size_t)n > size - 1 ? size - 1 : *len + (size_t)n;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* ---- stages -------------------------------------------------------------------- */

ptv_stage *ptv_stage_new(ptv_compile *c, ptv_stageid id, const char *name)
{
    PTC_ASSERT(c->nstages < (int)(sizeof c->stages / sizeof *c->stages));
    ptc_arena *ta = c->trace->arena;
    ptv_stage *s = PTC_NEW(ta, ptv_stage);
    s->id = id;
    s->name = ptc_arena_strdup(ta, name ? name : ptv_stage_name(id));
    s->kind = id < PTV_STAGE_COUNT ? stage_table[id].kind : 'G';
    s->compile = c;
    s->arena = ptc_arena_new();
    /* Keep stages in table order, other .ptir files after them by name. */
    int at = c->nstages;
    while (at > 0 && (c->stages[at - 1]->id > id ||
                      (id == PTV_OTHER && c->stages[at - 1]->id == PTV_OTHER &&
                       strcmp(c->stages[at - 1]->name, s->name) > 0)))
        at--;
    memmove(&c->stages[at + 1], &c->stages[at], sizeof(ptv_stage *) * (size_t)(c->nstages - at));
    c->stages[at] = s;
    c->nstages++;
    return s;
}

void ptv_stage_add_file(ptv_stage *s, const char *path)
{
    ptc_arena *ta = s->compile->trace->arena;
    if (s->nfiles == s->cap_files) {
        /* Doubling: a code stage can have thousands of kernel files. */
        s->cap_files = s->cap_files ? 2 * s->cap_files : 4;
        const char **files = PTC_NEWN(ta, const char *, s->cap_files);
        if (s->nfiles > 0)
            memcpy(files, s->files, sizeof(char *) * (size_t)s->nfiles);
        s->files = files;
    }
    s->files[s->nfiles++] = ptc_arena_strdup(ta, path);
}

ptv_stage *ptv_compile_stage(const ptv_compile *c, const char *name)
{
    for (int i = 0; c && i < c->nstages; i++)
        if (strcmp(c->stages[i]->name, name) == 0)
            return c->stages[i];
    return NULL;
}

int ptv_stage_index(const ptv_compile *c, const ptv_stage *s)
{
    for (int i = 0; i < c->nstages; i++)
        if (c->stages[i] == s)
            return i;
    return -1;
}

ptv_stage *ptv_stage_for(ptv_compile *c, ptv_stageid id, const char *name)
{
    ptv_stage *s = ptv_compile_stage(c, name ? name : ptv_stage_name(id));
    return s ? s : ptv_stage_new(c, id, name);
}

int ptv_stage_load(ptv_stage *s)
{
    if (s->state == PTV_LOADED)
        return 0;
    if (s->state != PTV_UNLOADED)
        return -1;
    if (s->nfiles == 0 && s->kind != 'I') {
        snprintf(s->error, sizeof s->error, "%s: no file for this stage", s->name);
        s->state = PTV_MISSING;
        return -1;
    }
    for (int i = 0; i < s->nfiles && (s->kind == 'G' || s->kind == 'T'); i++)
        if (!is_file(s->files[i])) {
            snprintf(s->error, sizeof s->error, "%s: missing", s->files[i]);
            s->state = PTV_MISSING;
            return -1;
        }
    switch (s->kind) {
    case 'G': return ptv_load_graph(s);
    case 'T': return ptv_load_text(s);
    case 'C': return ptv_load_code(s);
    default: return ptv_load_info(s);
    }
}

int ptv_compile_load(ptv_compile *c)
{
    int failed = 0;
    for (int i = 0; i < c->nstages; i++)
        failed += ptv_stage_load(c->stages[i]) != 0;
    return failed;
}

/* ---- compile folders ---------------------------------------------------------------- */

static int kernel_file_cmp(const void *a, const void *b)
{
    const char *x = strrchr(*(const char *const *)a, '/'), *y = strrchr(*(const char *const *)b, '/');
    int nx = atoi(x + 8), ny = atoi(y + 8); /* "/kernel_" */
    return nx != ny ? (nx < ny ? -1 : 1) : strcmp(x, y);
}

static int path_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void ptv_sort_files(ptv_stage *s)
{
    if (s->kind == 'C')
        qsort(s->files, (size_t)s->nfiles, sizeof(char *), kernel_file_cmp);
    else if (s->kind == 'I')
        qsort(s->files, (size_t)s->nfiles, sizeof(char *), path_cmp);
}

/* Which stage a file of a compile folder belongs to; false if none. */
bool ptv_classify(const char *name, ptv_stageid *id, char *other, size_t size)
{
    if (ends_with(name, ".ptir")) {
        size_t stem = strlen(name) - 5;
        for (int i = 0; i < PTV_STAGE_COUNT; i++)
            if (stage_table[i].kind == 'G' && strlen(stage_table[i].name) == stem &&
                strncmp(name, stage_table[i].name, stem) == 0) {
                *id = (ptv_stageid)i;
                return true;
            }
        *id = PTV_OTHER;
        snprintf(other, size, "%.*s", (int)stem, name);
        return true;
    }
    if (strcmp(name, "loops.txt") == 0)
        *id = PTV_LOOPS;
    else if (strcmp(name, "kernels.txt") == 0)
        *id = PTV_KERNELS;
    else if (strncmp(name, "kernel_", 7) == 0 && ends_with(name, ".ll"))
        *id = PTV_LLVM;
    else if (strncmp(name, "kernel_", 7) == 0 && ends_with(name, ".ptx"))
        *id = PTV_PTX;
    else if (!strcmp(name, "guards.txt") || !strcmp(name, "breaks.json") ||
             !strcmp(name, "metrics.json"))
        *id = PTV_INFO;
    else
        return false;
    return true;
}

/* Adds the stage files found in c->dir. Returns how many files were used. */
int ptv_scan_compile(ptv_compile *c)
{
    DIR *d = opendir(c->dir);
    if (!d)
        return 0;
    int used = 0;
    struct dirent *e;
    char path[4096], other[256];
    while ((e = readdir(d))) {
        ptv_stageid id;
        if (e->d_name[0] == '.' || !ptv_classify(e->d_name, &id, other, sizeof other))
            continue;
        snprintf(path, sizeof path, "%s/%s", c->dir, e->d_name);
        if (!is_file(path))
            continue;
        ptv_stage *s = ptv_stage_for(c, id, id == PTV_OTHER ? other : NULL);
        ptv_stage_add_file(s, path);
        used++;
    }
    closedir(d);
    for (int i = 0; i < c->nstages; i++)
        ptv_sort_files(c->stages[i]);
    return used;
}

ptv_compile *ptv_compile_new(ptv_trace *t, const char *id, const char *dir)
{
    ptv_compile *c = PTC_NEW(t->arena, ptv_compile);
    c->trace = t;
    c->id = ptc_arena_strdup(t->arena, id);
    c->dir = ptc_arena_strdup(t->arena, dir);
    c->line = 0;
    /* "<frame>_<recompile>": the defaults until the index says better. */
    const char *us = strrchr(id, '_');
    c->frame = us ? ptc_arena_strndup(t->arena, id, (size_t)(us - id)) : c->id;
    c->recompile = us ? atoi(us + 1) : 0;
    ptv_compile **list = PTC_NEWN(t->arena, ptv_compile *, t->ncompiles + 1);
    if (t->ncompiles > 0)
        memcpy(list, t->compiles, sizeof(void *) * (size_t)t->ncompiles);
    list[t->ncompiles++] = c;
    t->compiles = list;
    return c;
}

void ptv_warn(ptv_trace *t, const char *fmt, ...)
{
    if (t->nwarnings >= (int)(sizeof t->warnings / sizeof *t->warnings))
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    t->warnings[t->nwarnings++] = ptc_arena_strdup(t->arena, buf);
}

static int compile_name_cmp(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    const char *ux = strrchr(x, '_'), *uy = strrchr(y, '_');
    if (ux && uy && ux - x == uy - y && strncmp(x, y, (size_t)(ux - x)) == 0)
        return atoi(ux + 1) - atoi(uy + 1);
    return strcmp(x, y);
}

/* Compile folders of t->dir not already known (from the index); returns how
 * many were added. */
int ptv_scan_trace(ptv_trace *t, bool from_index)
{
    DIR *d = opendir(t->dir);
    if (!d)
        return 0;
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", t->dir, e->d_name);
        if (!is_dir(path))
            continue;
        bool known = false;
        for (int i = 0; i < t->ncompiles && !known; i++)
            known = strcmp(t->compiles[i]->id, e->d_name) == 0;
        if (known)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            names = realloc(names, sizeof(char *) * (size_t)cap);
            PTC_ASSERT(names);
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n > 1)
        qsort(names, (size_t)n, sizeof(char *), compile_name_cmp);
    int added = 0;
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", t->dir, names[i]);
        ptv_compile *c = ptv_compile_new(t, names[i], path);
        if (ptv_scan_compile(c) == 0) {
            t->ncompiles--; /* not a compile folder */
        } else {
            added++;
            if (from_index)
                ptv_warn(t, "%s: compile folder not in index.json (the compile did not finish?)",
                         path);
        }
        free(names[i]);
    }
    free(names);
    return added;
}

/* Every compile shows its metadata and auxiliary files as an "info" stage. */
static void add_info_stages(ptv_trace *t)
{
    for (int i = 0; i < t->ncompiles; i++)
        if (!ptv_compile_stage(t->compiles[i], "info"))
            ptv_stage_new(t->compiles[i], PTV_INFO, NULL);
}

/* ---- opening ------------------------------------------------------------------------ */

static ptv_trace *trace_new(const char *path)
{
    ptc_arena *a = ptc_arena_new();
    ptv_trace *t = PTC_NEW(a, ptv_trace);
    t->arena = a;
    t->path = ptc_arena_strdup(a, path);
    return t;
}

/* A bare .ptir file: one compile with one stage, loaded now so a broken file
 * is reported at once. */
static ptv_trace *open_file(const char *path, ptc_error *err)
{
    ptv_trace *t = trace_new(path);
    const char *slash = strrchr(path, '/');
    t->dir = slash ? ptc_arena_strndup(t->arena, path, (size_t)(slash - path)) : ".";
    t->single_file = true;
    const char *base = slash ? slash + 1 : path;
    ptv_compile *c = ptv_compile_new(t, base, t->dir);
    c->frame = c->id;
    c->recompile = 0;
    ptv_stageid id;
    char other[256];
    if (!ptv_classify(base, &id, other, sizeof other) || (id != PTV_OTHER && stage_table[id].kind != 'G')) {
        id = PTV_OTHER;
        snprintf(other, sizeof other, "%s", base);
    }
    ptv_stage *s = ptv_stage_new(c, id, id == PTV_OTHER ? other : NULL);
    ptv_stage_add_file(s, path);
    if (ptv_stage_load(s) != 0) {
        ptc_errorf(err, PTC_ERR_PARSE, "", "%s", s->error);
        ptv_close(t);
        return NULL;
    }
    return t;
}

/* The rank_N folders of a torch.distributed job's PTC_TRACE_DIR, listed in
 * names (", "-separated); how many there are. */
static int rank_folders(const char *path, char *names, size_t size)
{
    DIR *d = opendir(path);
    int n = 0;
    size_t used = 0;
    names[0] = 0;
    for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d)) {
        char index[4096];
        snprintf(index, sizeof index, "%s/%s/index.json", path, e->d_name);
        if (strncmp(e->d_name, "rank_", 5) != 0 || access(index, R_OK) != 0)
            continue;
        int w = snprintf(names + used, size - used, "%s%s", n ? ", " : "", e->d_name);
        if (w > 0 && used + (size_t)w < size)
            used += (size_t)w;
        n++;
    }
    if (d)
        closedir(d);
    return n;
}

ptv_trace *ptv_open(const char *path, ptc_error *err)
{
    ptc_error_clear(err);
    struct stat st;
    if (stat(path, &st) != 0)
        return ptc_errorf(err, PTC_ERR_IO, "", "%s: %s", path, strerror(errno)), NULL;
    if (!S_ISDIR(st.st_mode))
        return open_file(path, err);
    ptv_trace *t = trace_new(path);
    t->dir = t->path;
    char index[4096];
    snprintf(index, sizeof index, "%s/index.json", path);
    ptc_error ierr;
    int indexed = ptv_read_index(t, index, &ierr);
    int found = ptv_scan_trace(t, indexed == 0);
    if (indexed != 0) {
        char msg[1024];
        ptc_error_format(&ierr, msg, sizeof msg);
        char ranks[1024];
        if (found == 0 && rank_folders(path, ranks, sizeof ranks) > 0) {
            ptc_errorf(err, PTC_ERR_IO, "",
                       "%s holds one trace per rank (%s): open one, e.g. %s/rank_0", path, ranks,
                       path);
            ptv_close(t);
            return NULL;
        }
        if (found == 0) {
            /* A compile folder given directly. */
            ptv_compile *c = ptv_compile_new(t, strrchr(path, '/') ? strrchr(path, '/') + 1 : path, path);
            if (ptv_scan_compile(c) == 0) {
                ptc_errorf(err, PTC_ERR_IO, "", "%s (and no compile folders or stage files in %s)",
                           msg, path);
                ptv_close(t);
                return NULL;
            }
        } else {
            ptv_warn(t, "%s; opened the %d compile folder%s found instead", msg, found,
                     found == 1 ? "" : "s");
        }
    }
    add_info_stages(t);
    return t;
}

void ptv_close(ptv_trace *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->ncompiles; i++)
        for (int k = 0; k < t->compiles[i]->nstages; k++) {
            ptv_stage *s = t->compiles[i]->stages[k];
            ptc_module_free(s->module);
            ptc_arena_free(s->arena);
        }
    ptv_sources_free(t);
    ptc_arena_free(t->arena);
}

/* ---- the user's source files ---------------------------------------------------------- */

struct ptv_srcfile {
    struct ptv_srcfile *next;
    const char *name;       /* as recorded */
    char *data;             /* NULL when not found */
    int nlines;
    const char **lines;
    char why[512];
};

void ptv_sources_free(ptv_trace *t)
{
    for (ptv_srcfile *f = t->sources, *next; f; f = next) {
        next = f->next;
        free(f->data);
        free(f->lines);
        free(f);
    }
    t->sources = NULL;
}

static void load_source(ptv_trace *t, ptv_srcfile *f)
{
    char tried[3][4096];
    int ntried = 0;
    if (f->name[0] == '/') {
        snprintf(tried[ntried++], sizeof tried[0], "%s", f->name);
    } else {
        snprintf(tried[ntried++], sizeof tried[0], "%s", f->name);
        snprintf(tried[ntried++], sizeof tried[0], "%s/%s", t->dir, f->name);
        snprintf(tried[ntried++], sizeof tried[0], "%s/../%s", t->dir, f->name);
    }
    for (int i = 0; i < ntried; i++) {
        size_t len;
        if (!is_file(tried[i]) || !(f->data = ptc_read_file(tried[i], &len, NULL)))
            continue;
        int cap = 1;
        for (size_t k = 0; k < len; k++)
            cap += f->data[k] == '\n';
        f->lines = malloc(sizeof(char *) * (size_t)cap);
        PTC_ASSERT(f->lines);
        for (char *p = f->data; p && *p;) {
            f->lines[f->nlines++] = p;
            p = strchr(p, '\n');
            if (p)
                *p++ = 0;
        }
        return;
    }
    size_t n = 0;
    ptv_appendf(f->why, sizeof f->why, &n, "source file %s not found (looked for", f->name);
    for (int i = 0; i < ntried; i++)
        ptv_appendf(f->why, sizeof f->why, &n, "%s %s", i ? "," : "", tried[i]);
    ptv_appendf(f->why, sizeof f->why, &n, ")");
}

int ptv_source(ptv_trace *t, const char *file, int line, int context, int *first,
               const char **lines, int max, char *why, size_t why_size)
{
    ptv_srcfile *f = t->sources;
    while (f && strcmp(f->name, file) != 0)
        f = f->next;
    if (!f) {
        f = calloc(1, sizeof *f);
        PTC_ASSERT(f);
        f->name = ptc_arena_strdup(t->arena, file);
        load_source(t, f);
        f->next = t->sources;
        t->sources = f;
    }
    if (!f->data) {
        snprintf(why, why_size, "%s", f->why);
        return -1;
    }
    if (line < 1 || line > f->nlines) {
        snprintf(why, why_size, "%s has %d lines; line %d is not in it (the file changed?)", file,
                 f->nlines, line);
        return -1;
    }
    int lo = line - context < 1 ? 1 : line - context;
    int hi = line + context > f->nlines ? f->nlines : line + context;
    int n = 0;
    for (int l = lo; l <= hi && n < max; l++)
        lines[n++] = f->lines[l - 1];
    *first = lo;
    return n;
}
