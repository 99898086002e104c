/* The on-disk kernel cache.
 *
 * One file per kernel, named by two 64-bit hashes of its key (the kernel's
 * loop IR with buffers named by position, the target CPU and features, the
 * ptc and codegen versions). A file holds the full key as well, so a hash
 * collision is a miss, never a wrong kernel:
 *   "PTCK" u32 version, u32 key length, key, u64 object length, object,
 *   u32 CRC-32 of everything before it.
 * Anything that does not check out (short, bad magic or version, other key,
 * bad CRC) is logged under `cache`, deleted and reported as a miss, so the
 * kernel is recompiled and the file rewritten. Files are written to a
 * temporary name and renamed, so readers never see half a file.
 */
#include "codegen/codegen.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { CACHE_VERSION = 1 };

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
    uint64_t h1 = ptc_hash_bytes(PTC_HASH_INIT, key, keylen);
    uint64_t h2 = ptc_hash_bytes(0x84222325cbf29ce4ULL, key, keylen);
    snprintf(path, size, "%s/k%016llx%016llx.o", ptc_cache_dir(), (unsigned long long)h1,
             (unsigned long long)h2);
}

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

int ptc_cache_load(const char *key, size_t keylen, uint8_t **obj, size_t *objlen)
{
    char path[1200];
    ptc_cache_path(key, keylen, path, sizeof path);
    size_t len;
    ptc_error err;
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    fclose(f);
    uint8_t *data = (uint8_t *)ptc_read_file(path, &len, &err);
    if (!data)
        return reject(path, "unreadable");
    int rc = 0;
    const char *why = NULL;
    if (len < 24 || memcmp(data, "PTCK", 4) != 0) {
        why = "not a kernel cache file or truncated";
    } else if (rd32(data + 4) != CACHE_VERSION) {
        why = "cache format version differs";
    } else if (rd32(data + len - 4) != ptc_crc32(0, data, len - 4)) {
        why = "checksum mismatch (corrupt or truncated)";
    } else {
        size_t kl = rd32(data + 8);
        if (12 + kl + 8 + 4 > len || kl != keylen || memcmp(data + 12, key, keylen) != 0) {
            why = "key mismatch";
        } else {
            uint64_t ol = rd64(data + 12 + kl);
            if (12 + kl + 8 + ol + 4 != len) {
                why = "object length disagrees with the file size";
            } else {
                *obj = malloc(ol ? ol : 1);
                memcpy(*obj, data + 12 + kl + 8, ol);
                *objlen = ol;
                rc = 1;
            }
        }
    }
    free(data);
    if (why)
        return reject(path, why);
    return rc;
}

void ptc_cache_store(const char *key, size_t keylen, const uint8_t *obj, size_t objlen)
{
    char path[1200], tmp[1300];
    ptc_error err = {0};
    if (ptc_mkdirs(ptc_cache_dir(), &err)) {
        ptc_log(PTC_LOG_CACHE, PTC_LOG_INFO, "cannot create %s: %s", ptc_cache_dir(), err.msg);
        return;
    }
    ptc_cache_path(key, keylen, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    size_t len = 12 + keylen + 8 + objlen + 4;
    uint8_t *buf = malloc(len);
    memcpy(buf, "PTCK", 4);
    uint32_t v = CACHE_VERSION, kl = (uint32_t)keylen;
    uint64_t ol = objlen;
    memcpy(buf + 4, &v, 4);
    memcpy(buf + 8, &kl, 4);
    memcpy(buf + 12, key, keylen);
    memcpy(buf + 12 + keylen, &ol, 8);
    memcpy(buf + 20 + keylen, obj, objlen);
    uint32_t crc = ptc_crc32(0, buf, len - 4);
    memcpy(buf + len - 4, &crc, 4);
    if (ptc_write_file(tmp, buf, len, &err) || rename(tmp, path) != 0) {
        ptc_log(PTC_LOG_CACHE, PTC_LOG_INFO, "cannot write %s: %s", path,
                err.msg[0] ? err.msg : strerror(errno));
        unlink(tmp);
    }
    free(buf);
}
