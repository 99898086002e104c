/* Basics every module uses: the invariant check, errors, arenas, growable
 * strings, hashing and small file helpers.
 *
 * Arenas are a chain of blocks; big requests get a block of their own, so the
 * waste is bounded by one block's tail. Nothing is freed until the arena is.
 * Running out of memory must not abort the user's process, yet arena memory
 * is never checked by its callers: the process keeps a reserve, and the
 * first block malloc cannot give releases it, marks the arena failed (for
 * good) and carries on. Compiles check ptc_arena_failed at their stage
 * boundaries (and long passes in their loops) and fail with an error; the
 * reserve is taken again by the next arena made.
 */
#include "ir/ir.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

_Noreturn void ptc_assert_fail(const char *file, int line, const char *cond)
{
    fprintf(stderr, "ptc: internal error: %s:%d: assertion failed: %s\n", file, line, cond);
    fflush(stderr);
    abort();
}

/* ---- errors ---------------------------------------------------------------- */

static const char *errclass_names[] = {
#define X(id, name) name,
    PTC_ERRCLASSES(X)
#undef X
};
_Static_assert(sizeof errclass_names / sizeof *errclass_names == PTC_ERR_COUNT,
               "error class table out of step");

const char *ptc_errclass_name(ptc_errclass cls)
{
    return (unsigned)cls < PTC_ERR_COUNT ? errclass_names[cls] : "?";
}

int ptc_verrorf(ptc_error *err, ptc_errclass cls, const char *stage, const char *fmt, va_list ap)
{
    if (!err)
        return -1;
    memset(err, 0, sizeof *err);
    err->cls = cls;
    snprintf(err->stage, sizeof err->stage, "%s", stage ? stage : "");
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    /* Messages are one line. */
    for (char *p = err->msg; *p; p++)
        if (*p == '\n')
            *p = ' ';
    return -1;
}

int ptc_errorf(ptc_error *err, ptc_errclass cls, const char *stage, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ptc_verrorf(err, cls, stage, fmt, ap);
    va_end(ap);
    return -1;
}

void ptc_error_at(ptc_error *err, const char *file, int line, int col)
{
    if (!err)
        return;
    if (file)
        snprintf(err->file, sizeof err->file, "%s", file);
    err->line = line;
    err->col = col;
}

void ptc_error_clear(ptc_error *err)
{
    if (err)
        memset(err, 0, sizeof *err);
}

static bool (*_Atomic interrupt_check)(void);

void ptc_set_interrupt_check(bool (*interrupted)(void))
{
    interrupt_check = interrupted;
}

bool ptc_interrupted(void)
{
    bool (*check)(void) = interrupt_check;
    return check && check();
}

void ptc_error_format(const ptc_error *err, char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = 0;
#define PUT(...) (n += (size_t)snprintf(buf + (n < size ? n : size), n < size ? size - n : 0, __VA_ARGS__))
    if (err->file[0]) {
        PUT("%s:", err->file);
        if (err->line > 0) {
            PUT("%d:", err->line);
            if (err->col > 0)
                PUT("%d:", err->col);
        }
        PUT(" ");
    }
    if (err->stage[0])
        PUT("%s: ", err->stage);
    PUT("%s: %s", ptc_errclass_name(err->cls), err->msg);
#undef PUT
}

/* ---- arenas ---------------------------------------------------------------- */

typedef struct block {
    struct block *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
} block;

struct ptc_arena {
    block *head;
    size_t total;
    bool failed; /* a block was had only by releasing the reserve */
};

/* The reserve is the room a failed compile has to reach its next check: a
 * long pass allocates at most a few block-sized bodies per step. A process
 * short of memory from its start (a tight ulimit) settles for less, halving
 * down to MIN_RESERVE_SIZE, rather than have no reserve at all. */
enum { BLOCK_SIZE = 64 * 1024, RESERVE_SIZE = 64 << 20, MIN_RESERVE_SIZE = 4 << 20 };

static void *reserve; /* malloc'd, never touched: address space, not memory */
static size_t reserve_size;
static pthread_mutex_t reserve_lock = PTHREAD_MUTEX_INITIALIZER;

static void take_reserve(void)
{
    if (__atomic_load_n(&reserve, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&reserve_lock);
    for (size_t size = RESERVE_SIZE; !reserve && size >= MIN_RESERVE_SIZE; size /= 2) {
        void *r = malloc(size);
        if (r) {
            reserve_size = size;
            __atomic_store_n(&reserve, r, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&reserve_lock);
}

bool ptc_memory_reserve_full(void)
{
    take_reserve();
    pthread_mutex_lock(&reserve_lock);
    bool full = reserve && reserve_size == RESERVE_SIZE;
    pthread_mutex_unlock(&reserve_lock);
    return full;
}

/* true if there was a reserve to give back to malloc */
static bool release_reserve(void)
{
    pthread_mutex_lock(&reserve_lock);
    void *r = reserve;
    __atomic_store_n(&reserve, NULL, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&reserve_lock);
    free(r);
    return r != NULL;
}

ptc_arena *ptc_arena_new(void)
{
    take_reserve();
    ptc_arena *a = calloc(1, sizeof *a);
    if (!a) {
        fprintf(stderr, "ptc: out of memory\n");
        abort();
    }
    return a;
}

bool ptc_arena_failed(const ptc_arena *a)
{
    return a && a->failed;
}

static block *new_block(ptc_arena *a, size_t bsize)
{
    block *b = malloc(sizeof *b + bsize);
    if (!b && release_reserve()) {
        a->failed = true;
        b = malloc(sizeof *b + bsize);
    }
    if (!b) {
        fprintf(stderr, "ptc: out of memory (arena block of %zu bytes)\n", bsize);
        abort();
    }
    b->size = bsize;
    b->used = 0;
    return b;
}

void ptc_arena_free(ptc_arena *a)
{
    if (!a)
        return;
    for (block *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(a);
}

void *ptc_arena_alloc(ptc_arena *a, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    if (size == 0)
        size = 16;
    block *b = a->head;
    if (!b || b->size - b->used < size) {
        size_t bsize = size > BLOCK_SIZE / 4 ? size : BLOCK_SIZE;
        block *nb = new_block(a, bsize);
        /* A dedicated big block goes behind the current one so the current
         * block's free tail stays usable. */
        if (b && bsize == size) {
            nb->next = b->next;
            b->next = nb;
        } else {
            nb->next = b;
            a->head = nb;
        }
        b = nb;
    }
    void *p = b->data + b->used;
    b->used += size;
    a->total += size;
    memset(p, 0, size);
    return p;
}

void *ptc_arena_dup(ptc_arena *a, const void *p, size_t size)
{
    void *q = ptc_arena_alloc(a, size);
    if (size)
        memcpy(q, p, size);
    return q;
}

char *ptc_arena_strndup(ptc_arena *a, const char *s, size_t n)
{
    if (!s)
        return NULL;
    char *q = ptc_arena_alloc(a, n + 1);
    memcpy(q, s, n);
    q[n] = 0;
    return q;
}

char *ptc_arena_strdup(ptc_arena *a, const char *s)
{
    return s ? ptc_arena_strndup(a, s, strlen(s)) : NULL;
}

char *ptc_arena_printf(ptc_arena *a, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = ptc_arena_alloc(a, (size_t)n + 1);
    vsnprintf(s, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return s;
}

size_t ptc_arena_bytes(const ptc_arena *a) { return a->total; }

/* ---- growable strings ------------------------------------------------------ */

/* false: no room for extra more bytes (b failed, the write is dropped) */
static bool buf_reserve(ptc_buf *b, size_t extra)
{
    if (b->truncated)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d && release_reserve()) {
        b->failed = true;
        d = realloc(b->data, cap);
    }
    if (!d) {
        b->failed = b->truncated = true;
        return false;
    }
    b->data = d;
    b->cap = cap;
    return true;
}

bool ptc_buf_failed(const ptc_buf *b) { return b->failed; }

void ptc_buf_vprintf(ptc_buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    if (n < 0 || !buf_reserve(b, (size_t)n)) {
        va_end(ap2);
        return;
    }
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    b->len += (size_t)n;
}

void ptc_buf_printf(ptc_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ptc_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

void ptc_buf_putn(ptc_buf *b, const char *s, size_t n)
{
    if (!buf_reserve(b, n))
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

void ptc_buf_puts(ptc_buf *b, const char *s) { ptc_buf_putn(b, s, strlen(s)); }

void ptc_buf_putc(ptc_buf *b, char c) { ptc_buf_putn(b, &c, 1); }

void ptc_buf_free(ptc_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

void ptc_buf_put_quoted(ptc_buf *b, const char *s)
{
    ptc_buf_putc(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': ptc_buf_puts(b, "\\\""); break;
        case '\\': ptc_buf_puts(b, "\\\\"); break;
        case '\n': ptc_buf_puts(b, "\\n"); break;
        case '\t': ptc_buf_puts(b, "\\t"); break;
        case '\r': ptc_buf_puts(b, "\\r"); break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                ptc_buf_printf(b, "\\x%02x", *p);
            else
                ptc_buf_putc(b, (char)*p);
        }
    }
    ptc_buf_putc(b, '"');
}

/* ---- hashing and files ----------------------------------------------------- */

uint64_t ptc_hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* CRC-32 tables for slicing by 8 (eight bytes per step instead of one: the
 * weights of an exported model are checked on every load). */
static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_tables(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t ptc_crc32(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&crc_once, crc_tables);
    const unsigned char *s = p;
    crc = ~crc;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint32_t(*T)[256] = (const uint32_t(*)[256])crc_table;
    for (; n >= 8; n -= 8, s += 8) {
        uint32_t lo, hi;
        memcpy(&lo, s, 4);
        memcpy(&hi, s + 4, 4);
        lo ^= crc;
        crc = T[7][lo & 0xff] ^ T[6][(lo >> 8) & 0xff] ^ T[5][(lo >> 16) & 0xff] ^ T[4][lo >> 24] ^
              T[3][hi & 0xff] ^ T[2][(hi >> 8) & 0xff] ^ T[1][(hi >> 16) & 0xff] ^ T[0][hi >> 24];
    }
#endif
    for (size_t i = 0; i < n; i++)
        crc = crc_table[0][(crc ^ s[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

char *ptc_read_file(const char *path, size_t *len, ptc_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        ptc_errorf(err, PTC_ERR_IO, "io", "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *data = malloc(cap);
    for (;;) {
        if (!data)
            break;
        size_t got = fread(data + n, 1, cap - n - 1, f);
        n += got;
        if (n + 1 < cap)
            break;
        cap *= 2;
        char *d = realloc(data, cap);
        if (!d) {
            free(data);
            data = NULL;
        } else {
            data = d;
        }
    }
    int failed = ferror(f);
    fclose(f);
    if (!data || failed) {
        free(data);
        ptc_errorf(err, PTC_ERR_IO, "io", "cannot read '%s'", path);
        return NULL;
    }
    data[n] = 0;
    if (len)
        *len = n;
    return data;
}

int ptc_write_file(const char *path, const void *data, size_t len, ptc_error *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return ptc_errorf(err, PTC_ERR_IO, "io", "cannot create '%s': %s", path, strerror(errno));
    size_t put = len ? fwrite(data, 1, len, f) : 0;
    if (fclose(f) != 0 || put != len)
        return ptc_errorf(err, PTC_ERR_IO, "io", "cannot write '%s'", path);
    return 0;
}

int ptc_mkdirs(const char *path, ptc_error *err)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp)
        return ptc_errorf(err, PTC_ERR_IO, "io", "path too long: '%s'", path);
    for (char *p = tmp + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
                return ptc_errorf(err, PTC_ERR_IO, "io", "cannot create directory '%s': %s", tmp,
                                  strerror(errno));
            *p = c;
            if (!c)
                break;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return ptc_errorf(err, PTC_ERR_IO, "io", "'%s' is not a directory", path);
    return 0;
}
