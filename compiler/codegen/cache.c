/* The on-disk kernel cache.
 *
 * One file per kernel, named by two 64-bit hashes of its key (the kernel's
 * loop IR with buffers named by position, the target CPU and features, the
 * ptc and codegen versions). A file holds the full key as well, so a hash
 * collision is a miss, never a wrong kernel:
 *   "PTCK" u32 version, u32 key length, key, u64 object length, object,
 *   SHA-256 of the object, u32 CRC-32 of everything before it.
 * Anything that does not check out (short, bad magic or version, other key,
 * bad CRC, an object whose SHA-256 differs) is logged under `cache`, deleted
 * and reported as a miss, so the kernel is recompiled and the file
 * rewritten. The CRC alone let altered objects through to the linker, where
 * a wrong byte of machine code crashes the process or computes nonsense.
 *
 * What is loaded is trusted like the compiler itself, so as ccache does the
 * cache is used only when nobody else can write it: a directory that is
 * group- or world-writable or owned by another user is refused with one
 * warning (the program compiles without the cache). Files are opened without
 * following links and without blocking (a FIFO in place of a file must not
 * hang the compile); anything but a regular file of ours is a miss. Files are
 * written (mode 0600) to a temporary name and renamed, so readers never see
 * half a file.
 */
#include "codegen/codegen.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { CACHE_VERSION = 2, MAX_FILE = 1 << 30 };

const char *ptc_cache_dir(void)
{
    static char dir[1024];
    const char *env = getenv("PTC_CACHE_DIR");
    if (env && *env) {
        snprintf(dir, sizeof dir, "%s", env);
    } else {
        const char *home = getenv("HOME");
        snprintf(dir, sizeof dir, "%s/.cache/ptc", home && *home ? home : "/tmp");
    }
    return dir;
}

void ptc_cache_path(const char *key, size_t keylen, char *path, size_t size)
{
    ptc_cache_path_in(NULL, key, keylen, path, size);
}

void ptc_cache_path_in(const char *dir, const char *key, size_t keylen, char *path, size_t size)
{
    uint64_t h1 = ptc_hash_bytes(PTC_HASH_INIT, key, keylen);
    uint64_t h2 = ptc_hash_bytes(0x84222325cbf29ce4ULL, key, keylen);
    snprintf(path, size, "%s/k%016llx%016llx.o", dir ? dir : ptc_cache_dir(), (unsigned long long)h1,
             (unsigned long long)h2);
}

/* ---- trust ------------------------------------------------------------------------------ */

/* Why st (a cache directory or file) may have been written by someone else;
 * NULL when it is ours alone. */
static const char *untrusted(const struct stat *st)
{
    if (st->st_uid != geteuid())
        return "is owned by another user";
    if (st->st_mode & (S_IWGRP | S_IWOTH))
        return "is writable by other users";
    return NULL;
}

/* One warning per process and path: the same refusal on every compile would
 * bury the program's own output. */
static void warn_once(const char *path, const char *why, const char *consequence)
{
    static pthread_mutex_t warn_lock = PTHREAD_MUTEX_INITIALIZER;
    static char warned[1200];
    pthread_mutex_lock(&warn_lock);
    if (strcmp(warned, path) != 0) {
        snprintf(warned, sizeof warned, "%s", path);
        fprintf(stderr, "ptc: warning: kernel cache %s %s: %s\n", path, why, consequence);
    }
    pthread_mutex_unlock(&warn_lock);
    ptc_log(PTC_LOG_CACHE, PTC_LOG_INFO, "%s %s: %s", path, why, consequence);
}

/* Whether the cache directory may be used; with create, makes it (0700)
 * when it does not exist. A missing directory is not an error: a miss. */
static bool dir_usable(const char *dir, bool create)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (!create)
            return false;
        ptc_error err = {0};
        if (ptc_mkdirs(dir, &err) || chmod(dir, 0700) || stat(dir, &st)) {
            ptc_log(PTC_LOG_CACHE, PTC_LOG_INFO, "cannot create %s: %s", dir,
                    err.msg[0] ? err.msg : strerror(errno));
            return false;
        }
    }
    if (!S_ISDIR(st.st_mode)) {
        warn_once(dir, "is not a directory", "compiling without the cache");
        return false;
    }
    const char *why = untrusted(&st);
    if (why) {
        warn_once(dir, why,
                  "not used, compiling without the cache (chmod go-w it, or set PTC_CACHE_DIR "
                  "to a directory of your own)");
        return false;
    }
    return true;
}

/* ---- loading ------------------------------------------------------------------------------ */

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static int reject(const char *path, const char *why)
{
    ptc_log(PTC_LOG_CACHE, PTC_LOG_INFO, "reject %s: %s (recompiling)", path, why);
    unlink(path);
    return 0;
}

/* Reads a cache file that is a regular file of ours, never blocking. NULL
 * with *why set when it is not one (or unreadable); NULL with *why NULL
 * when there is no file. */
static uint8_t *read_entry(const char *path, size_t *len, const char **why)
{
    *why = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return NULL;
        *why = errno == ELOOP ? "a symbolic link, not a cache file" : "unreadable";
        return NULL;
    }
    struct stat st;
    uint8_t *data = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        *why = "not a regular file";
    } else if ((*why = untrusted(&st)) != NULL) {
        warn_once(path, *why, "not loaded (recompiling)");
    } else if (st.st_size > MAX_FILE) {
        *why = "larger than any kernel";
    } else {
        size_t n = (size_t)st.st_size, got = 0;
        data = malloc(n ? n : 1);
        while (got < n) {
            ssize_t r = read(fd, data + got, n - got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        if (got != n) {
            *why = "unreadable or shrank while read";
            free(data);
            data = NULL;
        }
        *len = n;
    }
    close(fd);
    return data;
}

/* Checks a cache file's layout, key and digests; NULL when it is good (the
 * object is at *obj_at, *objlen bytes). */
static const char *check_entry(const uint8_t *data, size_t len, const char *key, size_t keylen,
                               size_t *obj_at, uint64_t *objlen)
{
    if (len < 24 + PTC_SHA256_LEN || memcmp(data, "PTCK", 4) != 0)
        return "not a kernel cache file or truncated";
    if (rd32(data + 4) != CACHE_VERSION)
        return "cache format version differs";
    if (rd32(data + len - 4) != ptc_crc32(0, data, len - 4))
        return "checksum mismatch (corrupt or truncated)";
    size_t kl = rd32(data + 8);
    if (kl > len || 12 + kl + 8 + PTC_SHA256_LEN + 4 > len || kl != keylen ||
        memcmp(data + 12, key, keylen) != 0)
        return "key mismatch";
    uint64_t ol = rd64(data + 12 + kl);
    if (ol != len - (12 + kl + 8 + PTC_SHA256_LEN + 4))
        return "object length disagrees with the file size";
    uint8_t digest[PTC_SHA256_LEN];
    ptc_sha256_bytes(data + 12 + kl + 8, ol, digest);
    if (memcmp(digest, data + 12 + kl + 8 + ol, PTC_SHA256_LEN) != 0)
        return "the object's SHA-256 differs from the one stored with it (altered)";
    *obj_at = 12 + kl + 8;
    *objlen = ol;
    return NULL;
}

int ptc_cache_load(const char *key, size_t keylen, uint8_t **obj, size_t *objlen)
{
    return ptc_cache_load_in(NULL, key, keylen, obj, objlen);
}

int ptc_cache_load_in(const char *dir, const char *key, size_t keylen, uint8_t **obj,
                      size_t *objlen)
{
    if (!dir_usable(dir ? dir : ptc_cache_dir(), false))
        return 0;
    char path[1200];
    ptc_cache_path_in(dir, key, keylen, path, sizeof path);
    size_t len = 0;
    const char *why;
    uint8_t *data = read_entry(path, &len, &why);
    if (!data)
        return why ? reject(path, why) : 0;
    size_t at = 0;
    uint64_t ol = 0;
    why = check_entry(data, len, key, keylen, &at, &ol);
    if (!why) {
        *obj = malloc(ol ? ol : 1);
        memcpy(*obj, data + at, ol);
        *objlen = ol;
    }
    free(data);
    return why ? reject(path, why) : 1;
}

/* ---- storing ------------------------------------------------------------------------------ */

static int write_all(const char *path, const uint8_t *buf, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, buf + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    bool ok = done == len;
    if (close(fd) != 0)
        ok = false;
    return ok ? 0 : -1;
}

void ptc_cache_store(const char *key, size_t keylen, const uint8_t *obj, size_t objlen)
{
    ptc_cache_store_in(NULL, key, keylen, obj, objlen);
}

void ptc_cache_store_in(const char *dir, const char *key, size_t keylen, const uint8_t *obj,
                        size_t objlen)
{
    if (!dir_usable(dir ? dir : ptc_cache_dir(), true))
        return;
    char path[1200], tmp[1300];
    ptc_cache_path_in(dir, key, keylen, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    size_t len = 12 + keylen + 8 + objlen + PTC_SHA256_LEN + 4;
    uint8_t *buf = malloc(len);
    memcpy(buf, "PTCK", 4);
    uint32_t v = CACHE_VERSION, kl = (uint32_t)keylen;
    uint64_t ol = objlen;
    memcpy(buf + 4, &v, 4);
    memcpy(buf + 8, &kl, 4);
    memcpy(buf + 12, key, keylen);
    memcpy(buf + 12 + keylen, &ol, 8);
    memcpy(buf + 20 + keylen, obj, objlen);
    ptc_sha256_bytes(obj, objlen, buf + 20 + keylen + objlen);
    uint32_t crc = ptc_crc32(0, buf, len - 4);
    memcpy(buf + len - 4, &crc, 4);
    unlink(tmp); /* a stale one from a killed process with our pid */
    if (write_all(tmp, buf, len) || rename(tmp, path) != 0) {
        ptc_log(PTC_LOG_CACHE, PTC_LOG_INFO, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
    }
    free(buf);
}
