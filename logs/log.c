/* Log components: a level per component, set from a spec string (PTC_LOGS).
 *
 * The levels live in a small array of atomics so that ptc_log_on() is a load
 * on every hot path and never takes a lock; writing a line takes a mutex so
 * that lines from several threads do not interleave. A spec is parsed into a
 * scratch copy first and applied only when it is entirely valid, so a bad
 * PTC_LOGS leaves logging off rather than half on. The first ptc_log_level()
 * reads PTC_LOGS lazily, so library users that never call ptc_log_init still
 * get their logs; an explicit ptc_log_configure() wins over the environment.
 */
#include "logs/logs.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    const char *help;
} components[] = {
#define X(id, name, help) {name, help},
    PTC_LOG_COMPONENTS(X)
#undef X
};
_Static_assert(sizeof components / sizeof *components == PTC_LOG_COUNT,
               "log component table out of step");

static _Atomic int levels[PTC_LOG_COUNT];
static _Atomic int configured; /* PTC_LOGS read, or configured explicitly */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_stream; /* NULL: stderr */

const char *ptc_log_name(ptc_logc c)
{
    return (unsigned)c < PTC_LOG_COUNT ? components[c].name : "?";
}

bool ptc_env_switch(const char *name, bool dflt, int *warned, const char *as_by_default)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0)
        return v[0] == '1';
    if (!__atomic_exchange_n(warned, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "ptc: warning: %s=%s is neither 0 nor 1; %s\n", name, v, as_by_default);
    return dflt;
}

/* "all, graph_breaks, guards, ..." for error messages. */
static void valid_names(char *buf, size_t size)
{
    size_t n = (size_t)snprintf(buf, size, "all");
    for (int i = 0; i < PTC_LOG_COUNT && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, ", %s", components[i].name);
}

/* Applies one entry ("name", "+name", "-name", "all", ...) to lv. */
static int apply_entry(const char *entry, size_t len, int *lv, ptc_error *err)
{
    int level = PTC_LOG_INFO;
    if (len > 0 && (entry[0] == '+' || entry[0] == '-')) {
        level = entry[0] == '+' ? PTC_LOG_DEBUG : PTC_LOG_OFF;
        entry++;
        len--;
    }
    if (len == 3 && memcmp(entry, "all", 3) == 0) {
        for (int i = 0; i < PTC_LOG_COUNT; i++)
            lv[i] = level;
        return 0;
    }
    for (int i = 0; i < PTC_LOG_COUNT; i++)
        if (strlen(components[i].name) == len && memcmp(components[i].name, entry, len) == 0) {
            lv[i] = level;
            return 0;
        }
    char valid[512];
    valid_names(valid, sizeof valid);
    return ptc_errorf(err, PTC_ERR_PARSE, "logs",
                      "PTC_LOGS: unknown log component '%.*s' (valid: %s; '+name' for debug, "
                      "'-name' to turn off)",
                      (int)(len < 64 ? len : 64), entry, valid);
}

int ptc_log_configure(const char *spec, ptc_error *err)
{
    int lv[PTC_LOG_COUNT] = {0};
    const char *p = spec ? spec : "";
    while (*p) {
        while (*p == ',' || *p == ' ' || *p == '\t')
            p++;
        const char *start = p;
        while (*p && *p != ',' && *p != ' ' && *p != '\t')
            p++;
        if (p > start && apply_entry(start, (size_t)(p - start), lv, err))
            return -1;
    }
    for (int i = 0; i < PTC_LOG_COUNT; i++)
        atomic_store(&levels[i], lv[i]);
    atomic_store(&configured, 1);
    return 0;
}

void ptc_log_init(void)
{
    pthread_mutex_lock(&log_lock);
    if (!atomic_load(&configured)) {
        ptc_error err;
        if (ptc_log_configure(getenv("PTC_LOGS"), &err)) {
            fprintf(log_stream ? log_stream : stderr, "ptc: %s\n", err.msg);
            atomic_store(&configured, 1); /* report once; leave logging off */
        }
    }
    pthread_mutex_unlock(&log_lock);
}

int ptc_log_level(ptc_logc c)
{
    if (!atomic_load_explicit(&configured, memory_order_acquire))
        ptc_log_init();
    return (unsigned)c < PTC_LOG_COUNT ? atomic_load_explicit(&levels[c], memory_order_relaxed)
                                       : PTC_LOG_OFF;
}

void ptc_log_set_stream(FILE *f)
{
    pthread_mutex_lock(&log_lock);
    log_stream = f;
    pthread_mutex_unlock(&log_lock);
}

void ptc_log(ptc_logc c, int level, const char *fmt, ...)
{
    if (!ptc_log_on(c, level))
        return;
    ptc_buf b = {0};
    ptc_buf_printf(&b, "[ptc:%s] ", ptc_log_name(c));
    va_list ap;
    va_start(ap, fmt);
    ptc_buf_vprintf(&b, fmt, ap);
    va_end(ap);
    if (b.len == 0 || b.data[b.len - 1] != '\n')
        ptc_buf_putc(&b, '\n');
    pthread_mutex_lock(&log_lock);
    FILE *f = log_stream ? log_stream : stderr;
    fwrite(b.data, 1, b.len, f);
    fflush(f);
    pthread_mutex_unlock(&log_lock);
    ptc_buf_free(&b);
}

void ptc_log_block(ptc_logc c, int level, const char *title, const char *text)
{
    if (!ptc_log_on(c, level))
        return;
    const char *name = ptc_log_name(c);
    ptc_buf b = {0};
    if (title)
        ptc_buf_printf(&b, "[ptc:%s] %s\n", name, title);
    for (const char *p = text ? text : ""; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        ptc_buf_printf(&b, "[ptc:%s]   ", name);
        ptc_buf_putn(&b, p, n);
        ptc_buf_putc(&b, '\n');
        p += n + (nl ? 1 : 0);
    }
    if (b.len == 0)
        return;
    pthread_mutex_lock(&log_lock);
    FILE *f = log_stream ? log_stream : stderr;
    fwrite(b.data, 1, b.len, f);
    fflush(f);
    pthread_mutex_unlock(&log_lock);
    ptc_buf_free(&b);
}
