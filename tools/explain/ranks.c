/* ptexplain over the processes a script starts: a distributed script's ranks
 * (torch.multiprocessing.spawn, torchrun) run in processes of their own,
 * where ptexplain's bootstrap is not. ptc measures them anyway
 * (ptc._explain, through the start-up hook ptexplain puts on PYTHONPATH),
 * and each one that compiled writes its measurements, with its rank and pid,
 * to measured_<pid>.json in the folder of its compiles: its rank_N folder in
 * a torch.distributed job, else the trace directory itself. Here they are
 * found, a report is built for each, and printed after the script's own
 * report with a line per process first and every line of a process's report
 * marked with its rank, so that two ranks' reports can be told apart and
 * grepped. `ptexplain TRACE_DIR` prints the same from a trace directory a
 * run left behind, without running anything.
 */
#include "explain.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether name is measured_<digits>.json; its pid then. */
static long measured_pid(const char *name)
{
    if (strncmp(name, "measured_", 9) != 0)
        return 0;
    char *end;
    long pid = strtol(name + 9, &end, 10);
    return end != name + 9 && strcmp(end, ".json") == 0 ? pid : 0;
}

static int load_one(const char *path, const char *target, xp_procs *p, ptc_error *err)
{
    size_t len;
    char *json = ptc_read_file(path, &len, err);
    if (!json)
        return -1;
    xp_report *r = &p->reports[p->n];
    *r = (xp_report){0};
    int rc = xp_report_build(r, json, len, err);
    free(json);
    if (rc < 0) {
        xp_report_free(r);
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return ptc_errorf(err, PTC_ERR_PARSE, "explain", "%s: %s", path, msg);
    }
    const char *what = *target ? target : r->argv;
    r->target = r->proc_rank >= 0 ? ptc_arena_printf(r->arena, "%s (rank %d, pid %ld)", what,
                                                     r->proc_rank, r->pid)
                                  : ptc_arena_printf(r->arena, "%s (pid %ld)", what, r->pid);
    p->n++;
    return 0;
}

/* Loads the measured_<pid>.json files of folder; with ranks, also those of
 * its rank_N subfolders. */
static int load_folder(const char *folder, bool ranks, long skip_pid, const char *target,
                       xp_procs *p, int *room, ptc_error *err)
{
    DIR *d = opendir(folder);
    if (!d)
        return 0;
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", folder, e->d_name);
        long pid = measured_pid(e->d_name);
        if (ranks && !strncmp(e->d_name, "rank_", 5)) {
            rc = load_folder(path, false, skip_pid, target, p, room, err);
        } else if (pid > 0 && pid != skip_pid) {
            if (p->n == *room) {
                int more = *room ? 2 * *room : 4;
                xp_report *grown = realloc(p->reports, (size_t)more * sizeof *grown);
                if (!grown) {
                    rc = ptc_errorf(err, PTC_ERR_INTERNAL, "explain", "out of memory reading %s",
                                    path);
                    break;
                }
                p->reports = grown;
                *room = more;
            }
            rc = load_one(path, target, p, err);
        }
    }
    closedir(d);
    return rc;
}

static int by_rank_then_pid(const void *x, const void *y)
{
    const xp_report *a = x, *b = y;
    unsigned ra = (unsigned)a->proc_rank, rb = (unsigned)b->proc_rank; /* no rank (-1) last */
    if (ra != rb)
        return ra < rb ? -1 : 1;
    return (a->pid > b->pid) - (a->pid < b->pid);
}

int xp_procs_load(const char *dir, long skip_pid, const char *target, xp_procs *p, ptc_error *err)
{
    *p = (xp_procs){0};
    int room = 0;
    if (load_folder(dir, true, skip_pid, target ? target : "", p, &room, err) < 0) {
        xp_procs_free(p);
        return -1;
    }
    if (p->n)
        qsort(p->reports, (size_t)p->n, sizeof *p->reports, by_rank_then_pid);
    return 0;
}

void xp_procs_free(xp_procs *p)
{
    for (int i = 0; i < p->n; i++)
        xp_report_free(&p->reports[i]);
    free(p->reports);
    *p = (xp_procs){0};
}

/* ---- printed ---------------------------------------------------------------------------- */

static const char *mark(const xp_report *r, char *buf, size_t size)
{
    if (r->proc_rank >= 0)
        snprintf(buf, size, "[rank %d]", r->proc_rank);
    else
        snprintf(buf, size, "[pid %ld]", r->pid);
    return buf;
}

/* "rank 0  pid 123: 6 graphs, 3 break sites (12 breaks run), 1 recompile, compile 812.4 ms" */
static void process_line(ptc_buf *b, const xp_report *r)
{
    int graphs = 0;
    long breaks = 0;
    for (int i = 0; i < r->ngraphs; i++)
        graphs += r->graphs[i].g != NULL;
    for (int i = 0; i < r->nsites; i++)
        breaks += r->sites[i].runs;
    char m[64];
    ptc_buf_printf(
        b,
        "  %-10s pid %ld: %d graph%s, %d break site%s (%ld break%s run), %d recompile%s, "
        "compile %.1f ms%s\n",
        mark(r, m, sizeof m), r->pid, graphs, graphs == 1 ? "" : "s", r->nsites,
        r->nsites == 1 ? "" : "s", breaks, breaks == 1 ? "" : "s", r->nrecompiles,
        r->nrecompiles == 1 ? "" : "s", r->compile_ms, r->status ? "; it raised" : "");
}

void xp_render_procs_text(ptc_buf *b, const xp_report *top, const xp_procs *p, bool color)
{
    if (top && (top->calls || top->status)) {
        xp_render_text(b, top, color);
        ptc_buf_putc(b, '\n');
    } else if (top) {
        ptc_buf_printf(
            b,
            "ptexplain %s\n  the script's own process compiled nothing; the processes it started "
            "did:\n",
            top->target);
    }
    ptc_buf_printf(b, "%sProcesses%s\n", color ? "\033[1m" : "", color ? "\033[0m" : "");
    for (int i = 0; i < p->n; i++)
        process_line(b, &p->reports[i]);
    for (int i = 0; i < p->n; i++) {
        ptc_buf one = {0};
        xp_render_text(&one, &p->reports[i], color);
        char m[64];
        mark(&p->reports[i], m, sizeof m);
        ptc_buf_putc(b, '\n');
        for (const char *line = one.data; line && *line;) {
            size_t n = strcspn(line, "\n");
            ptc_buf_printf(b, "%s%s%.*s\n", m, n ? " " : "", (int)n, line);
            line += n + (line[n] == '\n');
        }
        ptc_buf_free(&one);
    }
}

void xp_render_procs_json(ptc_buf *b, const xp_report *top, const xp_procs *p)
{
    ptc_jw w;
    ptc_jw_init(&w, b, true);
    ptc_jw_obj_begin(&w);
    xp_report none = {.target = "", .proc_rank = -1};
    xp_render_json_fields(&w, top ? top : &none);
    ptc_jw_key(&w, "processes");
    ptc_jw_arr_begin(&w);
    for (int i = 0; i < p->n; i++) {
        ptc_jw_obj_begin(&w);
        ptc_jw_key(&w, "rank");
        ptc_jw_int(&w, p->reports[i].proc_rank);
        ptc_jw_key(&w, "pid");
        ptc_jw_int(&w, p->reports[i].pid);
        xp_render_json_fields(&w, &p->reports[i]);
        ptc_jw_obj_end(&w);
    }
    ptc_jw_arr_end(&w);
    ptc_jw_obj_end(&w);
    ptc_buf_putc(b, '\n');
}
