/* Repro dumps (PTC_REPRO): a folder that lets ptminify replay a failure
 * without the program that produced it: the failing graph as .ptir, its
 * inputs as a tensor file, and repro.json saying what went wrong.
 *
 * repro.json is written last, through a temporary file and rename, so a
 * folder whose repro.json exists is complete; a process that dies while
 * dumping leaves a folder that tools ignore. Fresh folder names come from a
 * per-process counter and mkdir's EEXIST, so concurrent dumps from several
 * threads or processes never share a folder. A planted bug (PTC_INJECT) in
 * effect is recorded too: without it the folder would not reproduce.
 *
 * One folder per distinct failure: a process that fails the same way on the
 * same graph again (a model's identical blocks, one graph run by several
 * compiles) gets the folder it wrote first. "The same graph" ignores source
 * locations and module paths, which differ between identical blocks.
 */
#include "logs/logs.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static _Atomic unsigned repro_counter;

/* Creates a new folder base/repro_<pid>_<n> and copies its path to out. */
/* Where fresh folders go: $PTC_REPRO, else $TMPDIR, else /tmp. */
static const char *repro_base(void)
{
    const char *base = getenv("PTC_REPRO");
    return base && *base ? base : ptc_temp_dir();
}

const char *ptc_temp_dir(void)
{
    const char *tmp = getenv("TMPDIR");
    return tmp && *tmp ? tmp : "/tmp";
}

static int fresh_folder(char *out, size_t size, ptc_error *err)
{
    const char *base = repro_base();
    if (ptc_mkdirs(base, err))
        return -1;
    for (int tries = 0; tries < 10000; tries++) {
        unsigned n = atomic_fetch_add(&repro_counter, 1);
        if (snprintf(out, size, "%s/repro_%ld_%u", base, (long)getpid(), n) >= (int)size)
            return ptc_errorf(err, PTC_ERR_IO, "repro", "repro path under '%s' is too long", base);
        if (mkdir(out, 0777) == 0)
            return 0;
        if (errno != EEXIST)
            return ptc_errorf(err, PTC_ERR_IO, "repro", "cannot create '%s': %s", out,
                              strerror(errno));
    }
    return ptc_errorf(err, PTC_ERR_IO, "repro", "no free repro folder name under '%s'", base);
}

/* ---- one folder per distinct failure ------------------------------------------- */

static pthread_mutex_t written_lock = PTHREAD_MUTEX_INITIALIZER;
static struct written {
    uint64_t key;
    char *folder;
} *written;
static int nwritten, written_cap;

static uint64_t hash_str(uint64_t h, const char *s)
{
    return ptc_hash_bytes(h, s ? s : "", s ? strlen(s) + 1 : 1);
}

/* What makes two failures the same: the graph's text with values renamed by
 * position and without provenance (each line up to its ` @ "file"` or
 * ` <- %id` tail), the kind, stage, error class, backend, base directory and
 * planted bug. */
static uint64_t failure_key(const ptc_graph *g, const ptc_repro_info *info)
{
    ptc_graph *canon = ptc_graph_clone(g, NULL);
    for (int i = 0; i < canon->nvalues; i++)
        canon->values[i]->name = ptc_arena_printf(canon->arena, "v%d", i);
    ptc_buf text = {0};
    ptc_print_graph(&text, canon);
    ptc_graph_free(canon);
    uint64_t h = 14695981039346656037ull;
    for (const char *line = text.data ? text.data : ""; *line;) {
        const char *end = strchr(line, '\n'), *at = strstr(line, " @ \""),
                   *from = strstr(line, " <- %");
        if (!end)
            end = line + strlen(line);
        const char *cut = at && at < end ? at : end;
        if (from && from < cut)
            cut = from;
        h = ptc_hash_bytes(h, line, (size_t)(cut - line));
        line = *end ? end + 1 : end;
    }
    ptc_buf_free(&text);
    h = hash_str(h, info ? info->kind : "");
    h = hash_str(h, info ? info->stage : "");
    h = hash_str(h, info ? info->error_class : "");
    h = hash_str(h, info ? info->backend : "");
    h = hash_str(h, repro_base()); /* a new base directory gets its own folders */
    return hash_str(h, ptc_inject_spec());
}

/* The folder written for key, copied to out, if it is still complete. */
static bool written_before(uint64_t key, char *out, size_t size)
{
    bool found = false;
    pthread_mutex_lock(&written_lock);
    for (int i = 0; i < nwritten && !found; i++)
        if (written[i].key == key) {
            char json[4200];
            struct stat st;
            snprintf(json, sizeof json, "%s/repro.json", written[i].folder);
            found = stat(json, &st) == 0 && snprintf(out, size, "%s", written[i].folder) < (int)size;
        }
    pthread_mutex_unlock(&written_lock);
    return found;
}

static void remember(uint64_t key, const char *folder)
{
    pthread_mutex_lock(&written_lock);
    if (nwritten == written_cap) {
        int cap = written_cap ? 2 * written_cap : 16;
        struct written *w = realloc(written, sizeof *w * (size_t)cap);
        if (w)
            written = w, written_cap = cap;
    }
    char *copy = nwritten < written_cap ? strdup(folder) : NULL;
    if (copy)
        written[nwritten++] = (struct written){key, copy};
    pthread_mutex_unlock(&written_lock);
}

static void json_field(ptc_jw *w, const char *key, const char *value)
{
    ptc_jw_key(w, key);
    ptc_jw_str(w, value);
}

static char *repro_json(const ptc_repro_info *info, bool has_inputs)
{
    ptc_repro_info none = {0};
    if (!info)
        info = &none;
    ptc_buf b = {0};
    ptc_jw w;
    ptc_jw_init(&w, &b, true);
    ptc_jw_obj_begin(&w);
    ptc_jw_key(&w, "version");
    ptc_jw_int(&w, 1);
    json_field(&w, "ptc_version", PTC_VERSION);
    json_field(&w, "kind", info->kind);
    json_field(&w, "stage", info->stage);
    json_field(&w, "error_class", info->error_class);
    json_field(&w, "message", info->message);
    json_field(&w, "backend", info->backend);
    ptc_jw_key(&w, "rtol");
    ptc_jw_num(&w, info->rtol);
    ptc_jw_key(&w, "atol");
    ptc_jw_num(&w, info->atol);
    json_field(&w, "graph", "graph.ptir");
    json_field(&w, "inputs", has_inputs ? "inputs.bin" : NULL);
    if (*ptc_inject_spec())
        json_field(&w, "inject", ptc_inject_spec());
    ptc_jw_obj_end(&w);
    ptc_buf_putc(&b, '\n');
    return b.data;
}

static int check_args(const ptc_graph *g, const ptc_tensor *inputs, int ninputs,
                      const ptc_repro_info *info, ptc_error *err)
{
    if (!g)
        return ptc_errorf(err, PTC_ERR_INTERNAL, "repro", "no graph to dump");
    if (info && info->kind && strcmp(info->kind, "crash") != 0 &&
        strcmp(info->kind, "error") != 0 && strcmp(info->kind, "accuracy") != 0 &&
        strcmp(info->kind, "hang") != 0)
        return ptc_errorf(err, PTC_ERR_INTERNAL, "repro",
                          "repro kind '%s' is not crash, error, accuracy or hang", info->kind);
    if (!inputs)
        return 0;
    if (ninputs != g->ninputs)
        return ptc_errorf(err, PTC_ERR_INTERNAL, "repro", "%d input tensors for graph '%s' of %d inputs",
                          ninputs, g->name, g->ninputs);
    for (int i = 0; i < ninputs; i++)
        if (inputs[i].device.kind != PTC_DEV_CPU)
            return ptc_errorf(err, PTC_ERR_UNSUPPORTED, "repro",
                              "input %%%s is not on the cpu: copy it there before dumping",
                              g->inputs[i]->name);
    return 0;
}

/* Writes graph.ptir, inputs.bin (with inputs) and, last, repro.json into folder. */
static int write_files(const char *folder, const ptc_graph *g, const ptc_tensor *inputs,
                       int ninputs, const ptc_repro_info *info, ptc_error *err)
{
    char path[4200], tmp[4200];
    ptc_buf text = {0};
    ptc_print_graph(&text, g);
    snprintf(path, sizeof path, "%s/graph.ptir", folder);
    int rc = ptc_write_file(path, text.data, text.len, err);
    ptc_buf_free(&text);
    if (rc)
        return -1;
    if (inputs) {
        const char **names = calloc((size_t)ninputs + 1, sizeof *names);
        PTC_ASSERT(names);
        for (int i = 0; i < ninputs; i++)
            names[i] = g->inputs[i]->name;
        snprintf(path, sizeof path, "%s/inputs.bin", folder);
        rc = ptc_tensorfile_write(path, inputs, names, ninputs, err);
        free(names);
        if (rc)
            return -1;
    }
    char *json = repro_json(info, inputs != NULL);
    snprintf(path, sizeof path, "%s/repro.json", folder);
    snprintf(tmp, sizeof tmp, "%s/.repro.json.%ld.tmp", folder, (long)getpid());
    rc = ptc_write_file(tmp, json, strlen(json), err);
    free(json);
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = ptc_errorf(err, PTC_ERR_IO, "repro", "cannot rename '%s' to '%s': %s", tmp, path,
                        strerror(errno));
        unlink(tmp);
    }
    return rc ? -1 : 0;
}

int ptc_repro_write(const char *dir, const ptc_graph *g, const ptc_tensor *inputs, int ninputs,
                    const ptc_repro_info *info, char *path_out, size_t path_size, ptc_error *err)
{
    if (check_args(g, inputs, ninputs, info, err))
        return -1;
    char folder[4096];
    uint64_t key = dir ? 0 : failure_key(g, info);
    if (dir) {
        if (snprintf(folder, sizeof folder, "%s", dir) >= (int)sizeof folder)
            return ptc_errorf(err, PTC_ERR_IO, "repro", "repro path too long");
        if (ptc_mkdirs(folder, err) || write_files(folder, g, inputs, ninputs, info, err))
            return -1;
    } else if (!written_before(key, folder, sizeof folder)) {
        if (fresh_folder(folder, sizeof folder, err) ||
            write_files(folder, g, inputs, ninputs, info, err))
            return -1;
        remember(key, folder);
    }
    if (path_out && path_size) {
        if (snprintf(path_out, path_size, "%s", folder) >= (int)path_size)
            return ptc_errorf(err, PTC_ERR_IO, "repro", "repro folder path does not fit (%zu bytes)",
                              path_size);
    }
    return 0;
}
