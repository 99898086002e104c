/* Timers and metrics: a small fixed table of named numbers per compile.
 *
 * Metrics are few (a handful of passes, some counts), so a linear table with
 * no allocation is the simplest thing that works; the last slot is kept for
 * "metrics_dropped", which counts additions that found the table full, so an
 * overflow is visible in metrics.json instead of silently lost. Times come
 * from the monotonic clock, in milliseconds.
 */
#include "logs/logs.h"

#include <string.h>
#include <time.h>

static const char dropped_name[] = "metrics_dropped";

double ptc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int find(const ptc_metrics *m, const char *name)
{
    for (int i = 0; i < m->n; i++)
        if (strncmp(m->items[i].name, name, sizeof m->items[i].name - 1) == 0)
            return i;
    return -1;
}

void ptc_metrics_add(ptc_metrics *m, const char *name, double value, bool is_time)
{
    int i = find(m, name);
    if (i < 0) {
        if (m->n >= PTC_MAX_METRICS - 1) {
            i = find(m, dropped_name);
            if (i < 0) {
                i = m->n++;
                snprintf(m->items[i].name, sizeof m->items[i].name, "%s", dropped_name);
                m->items[i].value = 0;
                m->items[i].is_time = false;
            }
            m->items[i].value += 1;
            return;
        }
        i = m->n++;
        snprintf(m->items[i].name, sizeof m->items[i].name, "%s", name);
        m->items[i].value = 0;
        m->items[i].is_time = is_time;
    }
    m->items[i].value += value;
}

double ptc_metrics_get(const ptc_metrics *m, const char *name)
{
    int i = find(m, name);
    return i < 0 ? 0.0 : m->items[i].value;
}

/* {"times_ms": {"prims": 1.25, ...}, "counts": {"nodes": 12, ...}} */
void ptc_metrics_json(const ptc_metrics *m, ptc_jw *w)
{
    ptc_jw_obj_begin(w);
    for (int pass = 0; pass < 2; pass++) {
        bool times = pass == 0;
        ptc_jw_key(w, times ? "times_ms" : "counts");
        ptc_jw_obj_begin(w);
        for (int i = 0; i < m->n; i++) {
            if (m->items[i].is_time != times)
                continue;
            ptc_jw_key(w, m->items[i].name);
            ptc_jw_num(w, m->items[i].value);
        }
        ptc_jw_obj_end(w);
    }
    ptc_jw_obj_end(w);
}

void ptc_metrics_add_all(ptc_metrics *dst, const ptc_metrics *src, const char *prefix)
{
    for (int i = 0; i < src->n; i++) {
        char name[sizeof src->items[i].name];
        snprintf(name, sizeof name, "%s%s", prefix ? prefix : "", src->items[i].name);
        ptc_metrics_add(dst, name, src->items[i].value, src->items[i].is_time);
    }
}

void ptc_timer_stop(ptc_metrics *m, const char *pass, double started)
{
    ptc_metrics_add(m, pass, ptc_now_ms() - started, true);
}
