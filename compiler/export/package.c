/* Package folders on disk: sealing (kernels + manifest) and verifying.
 *
 * The manifest is the package's root of trust: it names ptc's version, the
 * format, the CPU the cpu kernels were built for, and a digest of every
 * other file. Loading checks all of it before anything in the folder is
 * parsed or linked, so a truncated weight file, a flipped byte in a kernel
 * or a package from another ptc is refused with one line naming the file —
 * never run. Kernels are kernel-cache files (codegen/cache.c), so the
 * compile at load finds them with no LLVM work when the CPU matches.
 *
 * weights.bin is most of a package's bytes and is what keeps loading from
 * being fast, so it is mapped rather than read, and pinned by its size and
 * the XXH64 of each 4 MiB chunk (xxh64.c) instead of a SHA-256 (~4 ms per
 * MB here: 0.4 s of resnet50's load). The chunks are hashed on OpenMP's
 * team, each thread mapping its chunks' pages in as it goes: one pass over
 * the bytes, spread over the cores (one thread mapped BERT-base's 211 MB in
 * and hashed them, most of its 47-53 ms load on the GPU machine's CPU).
 * Verifying hands the mapping it hashed to the loader, whose tensors point
 * into it (the file is a version-2 tensor file, each tensor 64-byte
 * aligned): the bytes checked are the bytes run, read once, with no copy.
 */
#include "export/pkg.h"

#include "codegen/codegen.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *REQUIRED[] = {"graph.ptir", "weights.bin", "spec.json"};

static void hex_digest(const uint8_t *d, char out[2 * PTC_SHA256_LEN + 1])
{
    for (int i = 0; i < PTC_SHA256_LEN; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* The hex SHA-256 of dir/rel; -1 with err naming rel when unreadable. */
static int file_digest(const char *dir, const char *rel, char out[2 * PTC_SHA256_LEN + 1],
                       ptc_error *err)
{
    char path[PTC_PKG_PATH];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    size_t len;
    ptc_error e2;
    char *data = ptc_read_file(path, &len, &e2);
    if (!data)
        return ptc_errorf(err, PTC_ERR_RUNTIME, "package", "%s: missing or unreadable", rel);
    uint8_t d[PTC_SHA256_LEN];
    ptc_sha256_bytes(data, len, d);
    free(data);
    hex_digest(d, out);
    return 0;
}

int ptc_pkg_kernel_dir(const char *dir, const char *target, char *out, size_t size)
{
    return snprintf(out, size, "%s/kernels/%s", dir, target) < (int)size ? 0 : -1;
}

/* The multiprocessor counts a package's PTX is planned for, per compute
 * capability. A kernel's launch plan (its team of threads per row, fixed in
 * its PTX) depends on the device's count only through a threshold, on which
 * side of it the kernel's rows fall (codegen/cuda/plan.c); so the plans for
 * the data-centre parts of each generation, stored side by side (kernel-cache
 * files keyed by their plan: kernels whose plan is the same share one), serve
 * those GPUs — and most others — without generating PTX at load. The plan is
 * not made at launch instead because the team shapes the code itself (shared
 * memory, the reduction's loop); kernels whose team depends on run-time sizes
 * already carry several forms and pick one per call. */
static const struct {
    int sm, sms[4]; /* 0 ends the list */
} PLANNED_SMS[] = {
    {80, {108, 56}},      /* A100 / A800, A30 */
    {90, {132, 114, 78}}, /* H100 SXM / H200 / GH200, H100 PCIe, H20 */
};

/* Compiles g's kernels for one target into the package: a CUDA target once
 * per planned multiprocessor count (the device default where none is listed),
 * each kernel over symbolic sizes with its 64-bit index variant, which the
 * loaded package takes from there when a call's sizes need it. */
static int seal_target(const char *dir, const ptc_graph *g, const char *target, ptc_error *err)
{
    char kdir[PTC_PKG_PATH];
    ptc_compile_opts co = {.backend = PTC_BACKEND_CPU};
    const int *sms = (const int[]){0, 0};
    if (strcmp(target, "cpu") != 0) {
        long sm = strncmp(target, "sm_", 3) == 0 ? strtol(target + 3, NULL, 10) : 0;
        if (!ptc_cuda_arch_name((int)sm))
            return ptc_errorf(err, PTC_ERR_UNSUPPORTED, "package",
                              "unknown target '%s' (cpu, sm_80, sm_90)", target);
        co.backend = PTC_BACKEND_CUDA;
        co.cuda_sm = (int)sm;
        co.cuda_wide_variants = true; /* a call past 2^30 elements generates nothing */
        for (size_t i = 0; i < sizeof PLANNED_SMS / sizeof *PLANNED_SMS; i++)
            if (PLANNED_SMS[i].sm == sm)
                sms = PLANNED_SMS[i].sms;
    }
    if (ptc_pkg_kernel_dir(dir, target, kdir, sizeof kdir) || ptc_mkdirs(kdir, err))
        return -1;
    co.kernel_dir = kdir;
    int i = 0;
    do {
        co.cuda_sms = sms[i];
        ptc_program *p = ptc_compile(g, &co, err);
        if (!p)
            return -1;
        ptc_program_release(p);
    } while (++i < 4 && sms[i]);
    return 0;
}

/* Every file of the package but the manifest, as paths relative to dir:
 * the top level and kernels/<target>/. */
static int list_files(const char *dir, char ***names, int *n, ptc_error *err)
{
    *names = NULL;
    *n = 0;
    const char *subdirs[16] = {""};
    char sub_names[16][64];
    int nsub = 1;
    char kroot[PTC_PKG_PATH];
    snprintf(kroot, sizeof kroot, "%s/kernels", dir);
    DIR *kd = opendir(kroot);
    for (struct dirent *e; kd && (e = readdir(kd)) && nsub < 16;)
        if (e->d_name[0] != '.' && strlen(e->d_name) < 48) {
            snprintf(sub_names[nsub], sizeof sub_names[nsub], "kernels/%s/", e->d_name);
            subdirs[nsub] = sub_names[nsub];
            nsub++;
        }
    if (kd)
        closedir(kd);
    for (int s = 0; s < nsub; s++) {
        char path[PTC_PKG_PATH];
        snprintf(path, sizeof path, "%s/%s", dir, subdirs[s]);
        DIR *d = opendir(path);
        if (!d)
            return ptc_errorf(err, PTC_ERR_RUNTIME, "package", "%s: cannot list the folder", path);
        for (struct dirent *e; (e = readdir(d));) {
            char rel[PTC_PKG_PATH], full[PTC_PKG_PATH * 2];
            snprintf(rel, sizeof rel, "%s%s", subdirs[s], e->d_name);
            snprintf(full, sizeof full, "%s/%s", dir, rel);
            struct stat st;
            if (e->d_name[0] == '.' || strcmp(rel, "manifest.json") == 0 || stat(full, &st) ||
                !S_ISREG(st.st_mode))
                continue;
            *names = realloc(*names, sizeof **names * (size_t)(*n + 1));
            (*names)[(*n)++] = strdup(rel);
        }
        closedir(d);
    }
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void unmap_file(ptc_storage *s)
{
    munmap(s->data, s->nbytes);
    free(s);
}

void ptc_pkg_unmap(ptc_storage *file)
{
    if (file && --file->refs == 0)
        file->release(file);
}

/* dir/rel mapped read-only (the tensors of a mapped weight file are inputs,
 * which a program never writes; a writable private mapping would copy every
 * page it reads in). Its pages are not read in here, on this thread
 * (MAP_POPULATE): hashing the chunks reads them in, in parallel. NULL with
 * errno set when it cannot be. */
static ptc_storage *map_file(const char *dir, const char *rel)
{
    char path[PTC_PKG_PATH];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0)
        return NULL;
    void *data = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
        data = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    ptc_storage *s = data == MAP_FAILED ? NULL : calloc(1, sizeof *s);
    if (!s) {
        if (data != MAP_FAILED)
            munmap(data, (size_t)st.st_size);
        return NULL;
    }
    *s =
        (ptc_storage){.refs = 1, .data = data, .nbytes = (size_t)st.st_size, .release = unmap_file};
    return s;
}

#ifndef MADV_POPULATE_READ /* Linux 5.14's; the value is the kernel's ABI */
#define MADV_POPULATE_READ 22
#endif

static size_t chunk_count(size_t len, size_t chunk_bytes)
{
    return len / chunk_bytes + (len % chunk_bytes != 0);
}

/* The XXH64 (seed 0) of each chunk_bytes-long chunk of the mapped file (the
 * last one shorter), in order, hashed on OpenMP's team (one thread inside a
 * parallel region), a chunk per task taken in turn: a thread slowed by
 * another process takes fewer. Each thread maps its chunk's pages in with
 * one call before hashing it (MADV_POPULATE_READ): that page-table work
 * cost about as much as the hash on one thread (MAP_POPULATE), and a few
 * percent less than the hash's reads faulting the pages in 16 at a time,
 * which is what happens where the call fails (a kernel before 5.14). */
static void chunk_digests(const ptc_storage *file, size_t chunk_bytes, uint64_t *digests)
{
    const unsigned char *bytes = file->data;
    size_t len = file->nbytes, n = chunk_count(len, chunk_bytes);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    int nt = omp_in_parallel() || n < 2 ? 1 : omp_get_max_threads();
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (size_t i = 0; i < n; i++) {
        size_t at = i * chunk_bytes, size = len - at < chunk_bytes ? len - at : chunk_bytes;
        size_t from = at / page * page;
        madvise((void *)(uintptr_t)(bytes + from), at + size - from, MADV_POPULATE_READ);
        digests[i] = ptc_pkg_xxh64(bytes + at, size, 0);
    }
}

/* weights.bin's chunk. A multiple of 2 MiB, the span of one page of
 * page-table entries, so threads faulting in their own chunks never wait on
 * one page table's lock; BERT-base's 211 MB is 53 chunks, enough for a team
 * of 16 taking them in turn to finish within one chunk (~0.4 ms) of each
 * other; and each adds 20 bytes to the manifest (1 KB for BERT-base). */
enum { WEIGHTS_CHUNK_BYTES = 4 << 20 };

/* The weights' pin, as the manifest holds it:
 *   {"bytes": N, "chunk_bytes": C, "xxh64": ["<16 hex digits>", ...]}
 * the file's size, and the XXH64 of each of its C-byte chunks in order. */
static int write_weights_pin(ptc_jw *jw, const char *dir, ptc_error *err)
{
    ptc_storage *w = map_file(dir, "weights.bin");
    size_t n = w ? chunk_count(w->nbytes, WEIGHTS_CHUNK_BYTES) : 0;
    uint64_t *digests = w ? malloc(sizeof *digests * (n ? n : 1)) : NULL;
    if (!digests) {
        ptc_pkg_unmap(w);
        return ptc_errorf(err, PTC_ERR_RUNTIME, "package", "weights.bin: %s",
                          w ? "out of memory" : "missing or unreadable");
    }
    chunk_digests(w, WEIGHTS_CHUNK_BYTES, digests);
    ptc_jw_obj_begin(jw);
    ptc_jw_key(jw, "bytes");
    ptc_jw_int(jw, (int64_t)w->nbytes);
    ptc_jw_key(jw, "chunk_bytes");
    ptc_jw_int(jw, WEIGHTS_CHUNK_BYTES);
    ptc_jw_key(jw, "xxh64");
    ptc_jw_arr_begin(jw);
    for (size_t i = 0; i < n; i++) {
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)digests[i]);
        ptc_jw_str(jw, hex);
    }
    ptc_jw_arr_end(jw);
    ptc_jw_obj_end(jw);
    free(digests);
    ptc_pkg_unmap(w);
    return 0;
}

/* The manifest's entry for rel: the weights' pin or a SHA-256. */
static int write_checksum(ptc_jw *jw, const char *dir, const char *rel, ptc_error *err)
{
    char hex[2 * PTC_SHA256_LEN + 1];
    ptc_jw_key(jw, rel);
    if (strcmp(rel, "weights.bin") == 0)
        return write_weights_pin(jw, dir, err);
    if (file_digest(dir, rel, hex, err))
        return -1;
    ptc_jw_str(jw, hex);
    return 0;
}

static int write_manifest(const char *dir, const char *const *targets, int ntargets, ptc_error *err)
{
    char **names;
    int n, rc = list_files(dir, &names, &n, err);
    if (rc)
        return rc;
    qsort(names, (size_t)n, sizeof *names, by_name);
    ptc_buf b = {0};
    ptc_jw w;
    ptc_jw_init(&w, &b, true);
    ptc_jw_obj_begin(&w);
    ptc_jw_key(&w, "format");
    ptc_jw_str(&w, "ptc-package");
    ptc_jw_key(&w, "format_version");
    ptc_jw_int(&w, PTC_PACKAGE_FORMAT);
    ptc_jw_key(&w, "ptc_version");
    ptc_jw_str(&w, PTC_VERSION);
    ptc_jw_key(&w, "cpu_target");
    ptc_jw_str(&w, ptc_cpu_target());
    ptc_jw_key(&w, "targets");
    ptc_jw_arr_begin(&w);
    for (int t = 0; t < ntargets; t++)
        ptc_jw_str(&w, targets[t]);
    ptc_jw_arr_end(&w);
    ptc_jw_key(&w, "files");
    ptc_jw_obj_begin(&w);
    for (int i = 0; i < n && rc == 0; i++)
        rc = write_checksum(&w, dir, names[i], err);
    ptc_jw_obj_end(&w);
    ptc_jw_obj_end(&w);
    ptc_buf_putc(&b, '\n');
    char path[PTC_PKG_PATH];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if (rc == 0)
        rc = ptc_write_file(path, b.data, b.len, err);
    ptc_buf_free(&b);
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

int ptc_package_seal(const char *dir, const char *const *targets, int ntargets, ptc_error *err)
{
    char path[PTC_PKG_PATH];
    snprintf(path, sizeof path, "%s/graph.ptir", dir);
    ptc_module *m = ptc_parse_file(path, err);
    if (!m)
        return -1;
    int rc = m->ngraphs == 1
                 ? ptc_ops_verify(m->graphs[0], 0, err)
                 : ptc_errorf(err, PTC_ERR_PARSE, "package",
                              "%s: holds %d graphs, a package has one", path, m->ngraphs);
    for (int t = 0; t < ntargets && rc == 0; t++)
        rc = seal_target(dir, m->graphs[0], targets[t], err);
    ptc_module_free(m);
    return rc ? rc : write_manifest(dir, targets, ntargets, err);
}

/* ---- verifying ------------------------------------------------------------------- */

/* A refusal names the file at fault (dir/file). */
static int refuse(ptc_error *err, const char *dir, const char *file, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(ptc_error *err, const char *dir, const char *file, const char *fmt, ...)
{
    char msg[sizeof err->msg], where[sizeof err->file];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(where, sizeof where, "%s/%s", dir, file);
    ptc_errorf(err, PTC_ERR_RUNTIME, "package", "%s", msg);
    ptc_error_at(err, where, 0, 0);
    return -1;
}

/* What each package format added to the one before: a package of an
 * older format lacks it, which its refusal names. */
static const char *const FORMAT_ADDED[PTC_PACKAGE_FORMAT + 1] = {
    [2] = "weights.bin as a version-2 tensor file pinned by its XXH64",
    [3] = "the 64-bit index variant of each CUDA kernel over symbolic sizes (for calls past 2^30 "
          "elements)",
    [4] = "weights.bin pinned by the XXH64 of each 4 MiB chunk, checked in parallel",
    [5] = "CUDA kernels that read their random-number offset from a device cell too (so CUDA "
          "graphs draw anew at each replay)",
};

/* Refuses a manifest of format version fv, naming what this ptc expected. */
static int refuse_format(ptc_error *err, const char *dir, int fv)
{
    if (fv < 1 || fv > PTC_PACKAGE_FORMAT)
        return refuse(err, dir, "manifest.json",
                      "package format version %d, this ptc reads version %d: %s", fv,
                      PTC_PACKAGE_FORMAT,
                      fv > PTC_PACKAGE_FORMAT ? "load it with the ptc that sealed it"
                                              : "not a package ptc sealed");
    ptc_buf added = {0};
    for (int v = fv + 1; v <= PTC_PACKAGE_FORMAT; v++)
        if (FORMAT_ADDED[v])
            ptc_buf_printf(&added, "%s%s", added.len ? "; " : "", FORMAT_ADDED[v]);
    refuse(err, dir, "manifest.json",
           "package format version %d, sealed by an older ptc: this ptc reads version %d, whose "
           "packages also carry %s: export the model again",
           fv, PTC_PACKAGE_FORMAT, added.data ? added.data : "nothing more");
    ptc_buf_free(&added);
    return -1;
}

static int mismatch(ptc_error *err, const char *dir, const char *rel)
{
    return refuse(err, dir, rel,
                  "checksum mismatch: not the file the package was sealed with (corrupt, "
                  "truncated or altered)");
}

/* A whole number in [lo, 2^53] (exact in the JSON reader's double), or -1. */
static int64_t whole_number(const ptc_json *obj, const char *key, int64_t lo)
{
    double v = ptc_json_num(obj, key, -1);
    return v >= (double)lo && v <= 9007199254740992.0 && v == (double)(int64_t)v ? (int64_t)v : -1;
}

/* The weights' pin read back: the file's size, the chunk size, and the
 * digest of each of the n chunks (malloc'd). */
typedef struct weights_pin {
    size_t bytes, chunk_bytes, n;
    uint64_t *digests;
} weights_pin;

/* Reads the weights' pin (write_weights_pin): its size, chunk size and
 * number of digests agree, each digest 16 hex digits; -1 refusing the
 * manifest otherwise. */
static int read_weights_pin(const char *dir, const ptc_json *json, weights_pin *pin, ptc_error *err)
{
    const ptc_json *digests = ptc_json_get(json, "xxh64");
    int64_t size = whole_number(json, "bytes", 1), chunk = whole_number(json, "chunk_bytes", 1);
    if (!digests || digests->kind != PTC_JARR || size < 0 || chunk < 0)
        return refuse(err, dir, "manifest.json",
                      "weights.bin's pin is not {\"bytes\", \"chunk_bytes\", \"xxh64\": [...]}");
    pin->bytes = (size_t)size;
    pin->chunk_bytes = (size_t)chunk;
    pin->n = chunk_count(pin->bytes, pin->chunk_bytes);
    if ((size_t)digests->n != pin->n)
        return refuse(err, dir, "manifest.json",
                      "weights.bin's pin has %d chunk digests, its %zu bytes in chunks of %zu "
                      "are %zu",
                      digests->n, pin->bytes, pin->chunk_bytes, pin->n);
    if (!(pin->digests = malloc(sizeof *pin->digests * pin->n)))
        return refuse(err, dir, "manifest.json", "out of memory");
    for (size_t i = 0; i < pin->n; i++) {
        const ptc_json *d = digests->items[i];
        char *end = NULL;
        if (d->kind == PTC_JSTR && strlen(d->str) == 16 && d->str[0] != '-' && d->str[0] != '+')
            pin->digests[i] = strtoull(d->str, &end, 16);
        if (!end || *end)
            return refuse(err, dir, "manifest.json",
                          "weights.bin's chunk digest %zu is not 16 hex digits", i);
    }
    return 0;
}

/* The first chunk of the mapped file whose digest is not the pin's (pin->n
 * when all agree); -1 when out of memory. */
static ptrdiff_t first_changed_chunk(const ptc_storage *w, const weights_pin *pin)
{
    uint64_t *got = malloc(sizeof *got * pin->n);
    if (!got)
        return -1;
    chunk_digests(w, pin->chunk_bytes, got);
    size_t i = 0;
    while (i < pin->n && got[i] == pin->digests[i])
        i++;
    free(got);
    return (ptrdiff_t)i;
}

/* weights.bin, mapped, against its pin: its size, then each chunk's digest
 * (the first that differs is named); the mapping is kept in *weights. */
static int verify_weights(const char *dir, const ptc_json *json, ptc_storage **weights,
                          ptc_error *err)
{
    weights_pin pin = {0};
    ptc_storage *w = NULL;
    int rc = read_weights_pin(dir, json, &pin, err);
    ptrdiff_t bad = 0;
    if (rc == 0 && !(w = map_file(dir, "weights.bin")))
        rc = refuse(err, dir, "weights.bin", "missing or unreadable (the manifest lists it): %s",
                    strerror(errno));
    else if (rc == 0 && w->nbytes != pin.bytes)
        rc = refuse(err, dir, "weights.bin",
                    "size mismatch: %zu bytes, the package was sealed with %zu (truncated or "
                    "altered)",
                    w->nbytes, pin.bytes);
    else if (rc == 0 && (bad = first_changed_chunk(w, &pin)) < 0)
        rc = refuse(err, dir, "weights.bin", "out of memory");
    else if (rc == 0 && (size_t)bad < pin.n)
        rc = refuse(err, dir, "weights.bin",
                    "checksum mismatch in chunk %td of %zu (bytes %zu to %zu): not the file the "
                    "package was sealed with (corrupt or altered)",
                    bad + 1, pin.n, (size_t)bad * pin.chunk_bytes,
                    (size_t)bad + 1 == pin.n ? pin.bytes : ((size_t)bad + 1) * pin.chunk_bytes);
    free(pin.digests);
    if (rc)
        ptc_pkg_unmap(w);
    else
        *weights = w;
    return rc;
}

/* Checks one listed file's digest; weights.bin against its pin, the
 * mapping kept in *weights. */
static int verify_file(const char *dir, const char *rel, const ptc_json *want,
                       ptc_storage **weights, ptc_error *err)
{
    char hex[2 * PTC_SHA256_LEN + 1];
    if (strstr(rel, "..") || rel[0] == '/')
        return refuse(err, dir, "manifest.json", "file name '%s' leaves the package", rel);
    if (want && strcmp(rel, "weights.bin") == 0)
        return verify_weights(dir, want, weights, err);
    if (!want || want->kind != PTC_JSTR)
        return refuse(err, dir, "manifest.json", "no checksum for %s", rel);
    if (file_digest(dir, rel, hex, err))
        return refuse(err, dir, rel, "missing or unreadable (the manifest lists it)");
    return strcmp(hex, want->str) == 0 ? 0 : mismatch(err, dir, rel);
}

int ptc_pkg_verify(const char *dir, ptc_arena *a, ptc_pkg_manifest *out, ptc_error *err)
{
    char path[PTC_PKG_PATH];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    size_t len;
    ptc_error e2;
    char *text = ptc_read_file(path, &len, &e2);
    if (!text)
        return refuse(err, dir, "manifest.json", "missing or unreadable: not a ptc package");
    ptc_json *j = ptc_json_parse(a, text, len, "manifest.json", err);
    free(text);
    if (!j)
        return refuse(err, dir, "manifest.json", "not valid JSON: %s", err->msg);
    if (j->kind != PTC_JOBJ || strcmp(ptc_json_str(j, "format", ""), "ptc-package") != 0)
        return refuse(err, dir, "manifest.json", "not a ptc package manifest");
    int fv = (int)ptc_json_num(j, "format_version", 0);
    if (fv != PTC_PACKAGE_FORMAT)
        return refuse_format(err, dir, fv);
    const char *ver = ptc_json_str(j, "ptc_version", "?");
    if (strcmp(ver, PTC_VERSION) != 0)
        return refuse(err, dir, "manifest.json",
                      "made by ptc %.60s, this is ptc %s: export the model again", ver,
                      PTC_VERSION);
    const ptc_json *files = ptc_json_get(j, "files");
    if (!files || files->kind != PTC_JOBJ)
        return refuse(err, dir, "manifest.json", "no file list");
    for (size_t r = 0; r < sizeof REQUIRED / sizeof *REQUIRED; r++)
        if (!ptc_json_get(files, REQUIRED[r]))
            return refuse(err, dir, "manifest.json", "does not list %s", REQUIRED[r]);
    out->weights = NULL;
    for (int i = 0; i < files->n; i++)
        if (verify_file(dir, files->keys[i], files->items[i], &out->weights, err)) {
            ptc_pkg_unmap(out->weights);
            return -1;
        }
    out->cpu_target = ptc_json_str(j, "cpu_target", "");
    out->targets = ptc_json_get(j, "targets");
    return 0;
}

/* The kernels of the package for this machine, or NULL (compile them) with
 * the reason logged: another CPU, or a target the package lacks. */
const char *ptc_pkg_kernels_for(const char *dir, const ptc_pkg_manifest *man, ptc_device dev,
                                char *buf, size_t size)
{
    char target[16] = "cpu";
    if (dev.kind == PTC_DEV_CUDA) {
        int sm = ptc_cuda_device_arch(NULL);
        snprintf(target, sizeof target, "sm_%d", sm);
    } else if (strcmp(man->cpu_target, ptc_cpu_target()) != 0) {
        ptc_log(PTC_LOG_CACHE, PTC_LOG_INFO,
                "%s: kernels were built for %s, this CPU is %s: compiling them", dir,
                man->cpu_target, ptc_cpu_target());
        return NULL;
    }
    if (!ptc_pkg_has_target(man, target)) {
        ptc_log(PTC_LOG_CACHE, PTC_LOG_INFO, "%s: no kernels for %s: compiling them", dir, target);
        return NULL;
    }
    return ptc_pkg_kernel_dir(dir, target, buf, size) ? NULL : buf;
}

int ptc_package_kernels(const char *dir, const char *target, char *out, size_t size, ptc_error *err)
{
    ptc_device dev = PTC_CPU;
    if (strcmp(target, "cuda") == 0) {
        dev = (ptc_device){PTC_DEV_CUDA, -1};
        if (ptc_cuda_device_arch(err) < 0)
            return -1;
    } else if (strcmp(target, "cpu") != 0) {
        return ptc_errorf(err, PTC_ERR_UNSUPPORTED, "package", "unknown target '%s' (cpu, cuda)",
                          target);
    }
    ptc_arena *a = ptc_arena_new();
    ptc_pkg_manifest man;
    int rc = ptc_pkg_verify(dir, a, &man, err);
    if (rc == 0) {
        ptc_pkg_unmap(man.weights);
        if (!ptc_pkg_kernels_for(dir, &man, dev, out, size))
            out[0] = 0;
    }
    ptc_arena_free(a);
    return rc;
}

int ptc_package_verify(const char *dir, ptc_error *err)
{
    ptc_arena *a = ptc_arena_new();
    ptc_pkg_manifest man;
    int rc = ptc_pkg_verify(dir, a, &man, err);
    if (rc == 0)
        ptc_pkg_unmap(man.weights);
    ptc_arena_free(a);
    return rc;
}

bool ptc_pkg_has_target(const ptc_pkg_manifest *m, const char *target)
{
    for (int i = 0; m->targets && m->targets->kind == PTC_JARR && i < m->targets->n; i++)
        if (m->targets->items[i]->kind == PTC_JSTR &&
            strcmp(m->targets->items[i]->str, target) == 0)
            return true;
    return false;
}
