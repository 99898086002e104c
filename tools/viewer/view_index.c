/* Reading a trace's index.json (format in logs/logs.h) with the shared JSON
 * reader. The index gives each compile its metadata (function, file, line,
 * the break or recompile reason) and the stages it recorded; the folder on
 * disk gives the files. An entry that cannot be used is skipped with a
 * warning rather than failing the whole trace.
 */
#include "logs/logs.h"
#include "tools/viewer/view_int.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *jstr(ptc_arena *a, const ptc_json *o, const char *key)
{
    const ptc_json *v = ptc_json_get(o, key);
    return v && v->kind == PTC_JSTR ? ptc_arena_strdup(a, v->str) : NULL;
}

static ptv_stageid stage_id(const char *name)
{
    for (int i = 0; i < PTV_STAGE_COUNT; i++)
        if (strcmp(name, ptv_stage_name((ptv_stageid)i)) == 0)
            return (ptv_stageid)i;
    return PTV_OTHER;
}

/* The file a stage is stored in by convention, NULL for many-file stages. */
static const char *conventional_file(ptv_stageid id, const char *name, char *buf, size_t size)
{
    switch (id) {
    case PTV_LOOPS: return "loops.txt";
    case PTV_KERNELS: return "kernels.txt";
    case PTV_LLVM: case PTV_PTX: case PTV_INFO: return NULL;
    default: snprintf(buf, size, "%s.ptir", name); return buf;
    }
}

static bool has_file(const ptv_stage *s, const char *path)
{
    for (int i = 0; i < s->nfiles; i++)
        if (strcmp(s->files[i], path) == 0)
            return true;
    return false;
}

/* Stages the index lists that the folder lacks: shown, marked missing. */
static void add_listed_stages(ptv_compile *c, const ptc_json *stages)
{
    for (int k = 0; stages && stages->kind == PTC_JARR && k < stages->n; k++) {
        const ptc_json *v = stages->items[k];
        if (v->kind != PTC_JSTR || !v->str[0] || ptv_compile_stage(c, v->str))
            continue;
        ptv_stageid id = stage_id(v->str);
        /* A name ptview does not know has no conventional file to miss (any
         * .ptir of that name was found by the folder scan). */
        if (id == PTV_OTHER)
            continue;
        if (c->nstages >= (int)(sizeof c->stages / sizeof *c->stages) - 1)
            break;
        ptv_stage *s = ptv_stage_new(c, id, NULL);
        char buf[300], path[4096];
        const char *file = conventional_file(id, s->name, buf, sizeof buf);
        if (file) {
            snprintf(path, sizeof path, "%s/%s", c->dir, file);
            if (!has_file(s, path))
                ptv_stage_add_file(s, path);
        } else {
            snprintf(s->error, sizeof s->error, "%s: listed in index.json but no files in %s",
                     s->name, c->dir);
            s->state = PTV_MISSING;
        }
    }
}

/* Files the index lists that the folder lacks: added to their stage, which
 * then shows them as missing. */
static void add_listed_files(ptv_compile *c, const ptc_json *files)
{
    for (int k = 0; files && files->kind == PTC_JARR && k < files->n; k++) {
        const ptc_json *v = files->items[k];
        ptv_stageid id;
        char other[256], path[4096];
        if (v->kind != PTC_JSTR || strchr(v->str, '/') || !ptv_classify(v->str, &id, other, sizeof other))
            continue;
        snprintf(path, sizeof path, "%s/%s", c->dir, v->str);
        struct stat st;
        if (stat(path, &st) == 0)
            continue; /* on disk: the folder scan has it */
        ptv_stage *s = ptv_compile_stage(c, id == PTV_OTHER ? other : ptv_stage_name(id));
        if (s && has_file(s, path))
            continue;
        if (!s && c->nstages >= (int)(sizeof c->stages / sizeof *c->stages) - 1)
            break;
        s = ptv_stage_for(c, id, id == PTV_OTHER ? other : NULL);
        ptv_stage_add_file(s, path);
        ptv_sort_files(s);
    }
}

static void read_entry(ptv_trace *t, const ptc_json *e, int index, const char *path)
{
    const char *id = e->kind == PTC_JOBJ ? ptc_json_str(e, "id", NULL) : NULL;
    if (!id || !id[0] || strchr(id, '/') || strcmp(id, "..") == 0 || strcmp(id, ".") == 0) {
        ptv_warn(t, "%s: compiles[%d] has no usable \"id\"; skipped", path, index);
        return;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/%s", t->dir, id);
    ptv_compile *c = ptv_compile_new(t, id, dir);
    ptc_arena *a = t->arena;
    const char *frame = jstr(a, e, "frame");
    c->frame = frame ? frame : c->frame;
    c->recompile = (int)ptc_json_num(e, "recompile", c->recompile);
    c->function = jstr(a, e, "function");
    c->file = jstr(a, e, "file");
    c->line = (int)ptc_json_num(e, "line", 0);
    c->reason = jstr(a, e, "reason");
    const ptc_json *complete = ptc_json_get(e, "complete");
    c->incomplete = complete && complete->kind == PTC_JBOOL && !complete->b;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        snprintf(c->error, sizeof c->error, "%.450s: compile folder missing", dir);
    else
        ptv_scan_compile(c);
    add_listed_files(c, ptc_json_get(e, "files"));
    add_listed_stages(c, ptc_json_get(e, "stages"));
}

int ptv_read_index(ptv_trace *t, const char *path, ptc_error *err)
{
    size_t len;
    char *text = ptc_read_file(path, &len, NULL);
    if (!text)
        return ptc_errorf(err, PTC_ERR_IO, "", "%s: missing or unreadable", path);
    ptc_arena *a = ptc_arena_new();
    ptc_json *root = ptc_json_parse(a, text, len, path, err);
    free(text);
    int rc = -1;
    if (!root)
        goto done;
    const ptc_json *compiles = ptc_json_get(root, "compiles");
    if (root->kind != PTC_JOBJ || !compiles || compiles->kind != PTC_JARR) {
        ptc_errorf(err, PTC_ERR_PARSE, "", "%s: expected an object with a \"compiles\" array", path);
        goto done;
    }
    double version = ptc_json_num(root, "version", 1);
    if (version != 1) {
        ptc_errorf(err, PTC_ERR_PARSE, "", "%s: index version %g (this ptview reads version 1)",
                   path, version);
        goto done;
    }
    for (int i = 0; i < compiles->n; i++)
        read_entry(t, compiles->items[i], i, path);
    rc = 0;
done:
    ptc_arena_free(a);
    return rc;
}
