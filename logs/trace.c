/* The trace directory (PTC_TRACE_DIR): one folder per compile, a file per
 * stage, and index.json listing the compiles.
 *
 * index.json is the table of contents that ptview opens, so it must always
 * be whole: it is written to a temporary file and renamed over the old one
 * (rename is atomic on POSIX), each time a compile begins, writes a file or
 * a batch of files, or ends. A process killed mid-compile therefore leaves a
 * trace that opens, with that compile marked "complete": false. A program's
 * kernel files are one batch: a rewrite per file, each longer as the index
 * grows, made writing resnet50's 211 kernel files 3-4 times as costly as the
 * files themselves. Compiles recorded by an earlier run (an existing
 * index.json) are kept verbatim and new ones appended; a folder name already
 * taken gets a "-2", "-3", ... suffix rather than overwriting an earlier
 * run's files.
 *
 * Everything lives in the trace's arena under one mutex: compiles may begin
 * and end on several threads.
 */
#include "logs/logs.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct ptc_trace_compile {
    ptc_trace *trace;
    const char *id, *dir;
    const char *frame, *function, *file, *reason;
    int recompile, line;
    int nstages, cap_stages, nfiles, cap_files;
    const char **stages, **files;
    ptc_metrics metrics;
    double started;
    bool complete;
};

struct ptc_trace {
    char *dir;
    pthread_mutex_t lock;
    ptc_arena *arena;
    ptc_arena *old_arena; /* holds old, parsed anew before each index write */
    const ptc_json *old;  /* "compiles" of index.json as last read, or NULL */
    int ncompiles, cap;
    ptc_trace_compile **compiles;
};

static const char *xstrdup(ptc_arena *a, const char *s) { return s ? ptc_arena_strdup(a, s) : NULL; }

/* ---- opening: reading an existing index ------------------------------------ */

static int load_index(ptc_trace *t, ptc_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/index.json", t->dir);
    if (access(path, F_OK) != 0)
        return 0;
    size_t len;
    char *text = ptc_read_file(path, &len, err);
    if (!text)
        return -1;
    ptc_arena *a = ptc_arena_new();
    ptc_json *root = ptc_json_parse(a, text, len, path, err);
    free(text);
    const ptc_json *compiles = root ? ptc_json_get(root, "compiles") : NULL;
    bool ok = root != NULL;
    if (ok && (root->kind != PTC_JOBJ || !compiles || compiles->kind != PTC_JARR)) {
        ptc_errorf(err, PTC_ERR_PARSE, "trace", "not a ptc trace index (no \"compiles\" list)");
        ptc_error_at(err, path, 0, 0);
        ok = false;
    } else if (ok && ptc_json_num(root, "version", 1) != 1) {
        ptc_errorf(err, PTC_ERR_PARSE, "trace", "trace index version %g; this ptc writes 1",
                   ptc_json_num(root, "version", 1));
        ptc_error_at(err, path, 0, 0);
        ok = false;
    }
    if (!ok) {
        ptc_arena_free(a);
        return -1;
    }
    ptc_arena_free(t->old_arena);
    t->old_arena = a;
    t->old = compiles;
    return 0;
}

ptc_trace *ptc_trace_open(const char *dir, ptc_error *err)
{
    ptc_error_clear(err);
    if (!dir) {
        dir = getenv("PTC_TRACE_DIR");
        if (!dir || !*dir)
            return NULL;
    }
    if (!*dir) {
        ptc_errorf(err, PTC_ERR_IO, "trace", "empty trace directory name");
        return NULL;
    }
    if (ptc_mkdirs(dir, err))
        return NULL;
    ptc_trace *t = calloc(1, sizeof *t);
    PTC_ASSERT(t);
    t->dir = strdup(dir);
    PTC_ASSERT(t->dir);
    pthread_mutex_init(&t->lock, NULL);
    t->arena = ptc_arena_new();
    if (load_index(t, err)) {
        pthread_mutex_destroy(&t->lock);
        ptc_arena_free(t->arena);
        ptc_arena_free(t->old_arena);
        free(t->dir);
        free(t);
        return NULL;
    }
    return t;
}

const char *ptc_trace_dir(const ptc_trace *t) { return t->dir; }

/* ---- index.json ------------------------------------------------------------ */

/* Re-emits a parsed value (an earlier run's entry) through the writer. */
static void emit_list(ptc_jw *w, const char *key, const char **items, int n)
{
    ptc_jw_key(w, key);
    ptc_jw_arr_begin(w);
    for (int i = 0; i < n; i++)
        ptc_jw_str(w, items[i]);
    ptc_jw_arr_end(w);
}

static void emit_compile(ptc_jw *w, const ptc_trace_compile *c)
{
    ptc_jw_obj_begin(w);
    ptc_jw_key(w, "id");
    ptc_jw_str(w, c->id);
    ptc_jw_key(w, "frame");
    ptc_jw_str(w, c->frame);
    ptc_jw_key(w, "recompile");
    ptc_jw_int(w, c->recompile);
    ptc_jw_key(w, "function");
    ptc_jw_str(w, c->function);
    ptc_jw_key(w, "file");
    ptc_jw_str(w, c->file);
    ptc_jw_key(w, "line");
    ptc_jw_int(w, c->line);
    ptc_jw_key(w, "reason");
    ptc_jw_str(w, c->reason);
    ptc_jw_key(w, "complete");
    ptc_jw_bool(w, c->complete);
    emit_list(w, "stages", c->stages, c->nstages);
    emit_list(w, "files", c->files, c->nfiles);
    ptc_jw_obj_end(w);
}

static bool is_ours(const ptc_trace *t, const char *id)
{
    for (int i = 0; id && i < t->ncompiles; i++)
        if (strcmp(t->compiles[i]->id, id) == 0)
            return true;
    return false;
}

/* Writes index.json through a temporary file and rename: the compiles it
 * lists now that are not this trace's (an earlier run's; another trace's of
 * this process, as each compiled function keeps its own: the last to write
 * used to drop the other's), then this trace's. An index that cannot be
 * read again keeps what was read before. Caller holds the lock. */
static int write_index(ptc_trace *t, ptc_error *err)
{
    ptc_error reread;
    load_index(t, &reread);
    ptc_buf b = {0};
    ptc_jw w;
    ptc_jw_init(&w, &b, true);
    ptc_jw_obj_begin(&w);
    ptc_jw_key(&w, "version");
    ptc_jw_int(&w, 1);
    ptc_jw_key(&w, "ptc_version");
    ptc_jw_str(&w, PTC_VERSION);
    ptc_jw_key(&w, "compiles");
    ptc_jw_arr_begin(&w);
    for (int i = 0; t->old && i < t->old->n; i++)
        if (!is_ours(t, ptc_json_str(t->old->items[i], "id", NULL)))
            ptc_jw_value(&w, t->old->items[i], 49); /* deeper than any index we write: null */
    for (int i = 0; i < t->ncompiles; i++)
        emit_compile(&w, t->compiles[i]);
    ptc_jw_arr_end(&w);
    ptc_jw_obj_end(&w);
    ptc_buf_putc(&b, '\n');
    char tmp[4200], path[4200];
    snprintf(path, sizeof path, "%s/index.json", t->dir);
    snprintf(tmp, sizeof tmp, "%s/.index.json.%ld.tmp", t->dir, (long)getpid());
    int rc = ptc_write_file(tmp, b.data, b.len, err);
    ptc_buf_free(&b);
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = ptc_errorf(err, PTC_ERR_IO, "trace", "cannot rename '%s' to '%s': %s", tmp, path,
                        strerror(errno));
        unlink(tmp);
    }
    return rc;
}

/* ---- compiles -------------------------------------------------------------- */

/* A plain file name: no separators, no "." or "..", printable. */
static bool file_name_ok(const char *s)
{
    if (!s || !*s || strcmp(s, ".") == 0 || strcmp(s, "..") == 0 || strlen(s) > 200)
        return false;
    for (; *s; s++)
        if (*s == '/' || (unsigned char)*s < 0x20 || *s == 0x7f)
            return false;
    return true;
}


static bool id_taken(const ptc_trace *t, const char *id)
{
    for (int i = 0; t->old && i < t->old->n; i++) {
        const char *old = ptc_json_str(t->old->items[i], "id", NULL);
        if (old && strcmp(old, id) == 0)
            return true;
    }
    for (int i = 0; i < t->ncompiles; i++)
        if (strcmp(t->compiles[i]->id, id) == 0)
            return true;
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", t->dir, id);
    return stat(path, &st) == 0;
}

/* base, else base-2, base-3, ...: the first name no compile has taken. */
static const char *unique_id(ptc_trace *t, const char *base)
{
    const char *id = base;
    for (int k = 2; id_taken(t, id); k++)
        id = ptc_arena_printf(t->arena, "%s-%d", base, k);
    return id;
}

/* "<frame>_<recompile>" with frame reduced to [A-Za-z0-9_.-], made unique. */
static const char *folder_id(ptc_trace *t, const char *frame, int recompile)
{
    char clean[101];
    size_t n = 0;
    for (const char *p = frame && *frame ? frame : "graph"; *p && n < sizeof clean - 1; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';
        clean[n++] = ok ? c : '_';
    }
    clean[n] = 0;
    if (clean[0] == '.' || clean[0] == '-') /* no hidden folders, no option-like names */
        clean[0] = '_';
    return unique_id(t, ptc_arena_printf(t->arena, "%s_%d", clean, recompile));
}

/* A compile in folder id (unique_id or folder_id's, under the lock). */
static ptc_trace_compile *begin(ptc_trace *t, const char *id, const char *frame, int recompile,
                                const char *function, const char *file, int line,
                                const char *reason, ptc_error *err)
{
    ptc_trace_compile *c = PTC_NEW(t->arena, ptc_trace_compile);
    c->trace = t;
    c->id = id;
    c->dir = ptc_arena_printf(t->arena, "%s/%s", t->dir, c->id);
    c->frame = xstrdup(t->arena, frame ? frame : "graph");
    c->recompile = recompile;
    c->function = xstrdup(t->arena, function);
    c->file = xstrdup(t->arena, file);
    c->line = line;
    c->reason = xstrdup(t->arena, reason);
    c->started = ptc_now_ms();
    if (ptc_mkdirs(c->dir, err))
        return NULL;
    if (t->ncompiles == t->cap) {
        int ncap = t->cap ? t->cap * 2 : 8;
        ptc_trace_compile **bigger = PTC_NEWN(t->arena, ptc_trace_compile *, ncap);
        if (t->compiles)
            memcpy(bigger, t->compiles, sizeof *bigger * (size_t)t->ncompiles);
        t->compiles = bigger;
        t->cap = ncap;
    }
    t->compiles[t->ncompiles++] = c;
    return write_index(t, err) ? NULL : c;
}

ptc_trace_compile *ptc_trace_begin(ptc_trace *t, const char *frame, int recompile,
                                   const char *function, const char *file, int line,
                                   const char *reason, ptc_error *err)
{
    pthread_mutex_lock(&t->lock);
    ptc_trace_compile *c = begin(t, folder_id(t, frame, recompile), frame, recompile, function,
                                 file, line, reason, err);
    pthread_mutex_unlock(&t->lock);
    return c;
}

ptc_trace_compile *ptc_trace_begin_part(ptc_trace_compile *whole, const char *part,
                                        const char *reason, ptc_error *err)
{
    if (!file_name_ok(part)) {
        ptc_errorf(err, PTC_ERR_IO, "trace", "bad trace part name '%s'", part ? part : "");
        return NULL;
    }
    ptc_trace *t = whole->trace;
    pthread_mutex_lock(&t->lock);
    const char *id = unique_id(t, ptc_arena_printf(t->arena, "%s.%s", whole->id, part));
    ptc_trace_compile *c = begin(t, id, whole->frame, whole->recompile, whole->function,
                                 whole->file, whole->line, reason, err);
    pthread_mutex_unlock(&t->lock);
    return c;
}

/* Adds s to a list unless present. Caller holds the lock. */
static void note(ptc_arena *a, const char ***list, int *n, int *cap, const char *s)
{
    for (int i = 0; i < *n; i++)
        if (strcmp((*list)[i], s) == 0)
            return;
    if (*n == *cap) {
        int ncap = *cap ? *cap * 2 : 8;
        const char **bigger = PTC_NEWN(a, const char *, ncap);
        if (*list)
            memcpy(bigger, *list, sizeof *bigger * (size_t)*n);
        *list = bigger;
        *cap = ncap;
    }
    (*list)[(*n)++] = ptc_arena_strdup(a, s);
}

/* Writes <folder>/<file>; not yet listed in the index. */
static int write_file(ptc_trace_compile *c, const char *file, const char *data, size_t len,
                      ptc_error *err)
{
    if (!file_name_ok(file))
        return ptc_errorf(err, PTC_ERR_IO, "trace", "bad trace file name '%s'", file ? file : "");
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", c->dir, file);
    return ptc_write_file(path, data, len, err);
}

/* Lists files[0..n), written, stage with the first, and rewrites the index. */
static int list_files(ptc_trace_compile *c, const char *stage, const char *const *files, int n,
                      ptc_error *err)
{
    ptc_trace *t = c->trace;
    pthread_mutex_lock(&t->lock);
    if (stage && n > 0)
        note(t->arena, &c->stages, &c->nstages, &c->cap_stages, stage);
    for (int i = 0; i < n; i++)
        note(t->arena, &c->files, &c->nfiles, &c->cap_files, files[i]);
    int rc = write_index(t, err);
    pthread_mutex_unlock(&t->lock);
    return rc;
}

int ptc_trace_write(ptc_trace_compile *c, const char *stage, const char *file, const char *data,
                    size_t len, ptc_error *err)
{
    if (write_file(c, file, data, len, err))
        return -1;
    return list_files(c, stage, &file, 1, err);
}

int ptc_trace_write_texts(ptc_trace_compile *c, const char *stage, const char *const *files,
                          const char *const *texts, int n, ptc_error *err)
{
    if (n == 0)
        return 0;
    int written = 0;
    while (written < n &&
           write_file(c, files[written], texts[written], strlen(texts[written]), err) == 0)
        written++;
    ptc_error index_err;
    if (list_files(c, stage, files, written, written < n ? &index_err : err))
        return -1;
    return written < n ? -1 : 0;
}

int ptc_trace_graph(ptc_trace_compile *c, const char *stage, const ptc_graph *g, ptc_error *err)
{
    char file[256];
    if (!file_name_ok(stage) || snprintf(file, sizeof file, "%s.ptir", stage) >= (int)sizeof file)
        return ptc_errorf(err, PTC_ERR_IO, "trace", "bad stage name '%s'", stage ? stage : "");
    ptc_buf b = {0};
    ptc_print_graph(&b, g);
    int rc = ptc_trace_write(c, stage, file, b.data, b.len, err);
    ptc_buf_free(&b);
    return rc;
}

ptc_metrics *ptc_trace_metrics(ptc_trace_compile *c) { return &c->metrics; }

const char *ptc_trace_compile_dir(const ptc_trace_compile *c) { return c->dir; }

int ptc_trace_end(ptc_trace_compile *c, ptc_error *err)
{
    ptc_trace *t = c->trace;
    pthread_mutex_lock(&t->lock);
    bool first = !c->complete;
    c->complete = true;
    pthread_mutex_unlock(&t->lock);
    if (first)
        ptc_metrics_add(&c->metrics, "total", ptc_now_ms() - c->started, true);
    ptc_buf b = {0};
    ptc_jw w;
    ptc_jw_init(&w, &b, true);
    ptc_metrics_json(&c->metrics, &w);
    ptc_buf_putc(&b, '\n');
    int rc = ptc_trace_write(c, NULL, "metrics.json", b.data, b.len, err);
    ptc_buf_free(&b);
    return rc;
}

void ptc_trace_close(ptc_trace *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    ptc_error err;
    if (write_index(t, &err)) {
        char msg[1400];
        ptc_error_format(&err, msg, sizeof msg);
        fprintf(stderr, "ptc: trace: %s\n", msg);
    }
    pthread_mutex_unlock(&t->lock);
    pthread_mutex_destroy(&t->lock);
    ptc_arena_free(t->arena);
    ptc_arena_free(t->old_arena);
    free(t->dir);
    free(t);
}
