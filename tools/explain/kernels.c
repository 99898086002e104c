/* Reading a compile's trace folder: which buffers its graph's inputs and
 * outputs are (loops.txt), which kernels write and read them and which of
 * their members are reductions (kernels.txt), and its per-stage compile times
 * (metrics.json).
 *
 * Both text files are line-oriented (compiler/lower's kprint.c): a buffer
 * line "bufN: TYPE input|output K|temp  <- %v"; in kernels.txt a kernel opens
 * with "kernel K NAME:" or "extern K NAME:", members write "-> bufN[...]"
 * (a reduction member names its kind before "of"), loads read "load bufN[",
 * and an extern's call line reads the buffers between its parentheses. The
 * memory plan after "memory:" is not needed. Unknown lines are skipped, so a
 * newer format degrades to fewer facts, never to an error.
 */
#include "explain.h"

#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    ptc_buf b = {0};
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        ptc_buf_putn(&b, chunk, n);
    fclose(f);
    if (!b.data)
        ptc_buf_puts(&b, "");
    if (len)
        *len = b.len;
    return b.data;
}

/* Appends n to a growable int list kept in the arena (dedup). */
static void add_int(ptc_arena *a, int **v, int *n, int x)
{
    for (int i = 0; i < *n; i++)
        if ((*v)[i] == x)
            return;
    int *w = PTC_NEWN(a, int, *n + 1);
    if (*n)
        memcpy(w, *v, sizeof *w * (size_t)*n);
    w[(*n)++] = x;
    *v = w;
}

static void add_str(ptc_arena *a, const char ***v, int *n, const char *s, size_t len)
{
    for (int i = 0; i < *n; i++)
        if (strlen((*v)[i]) == len && !strncmp((*v)[i], s, len))
            return;
    const char **w = PTC_NEWN(a, const char *, *n + 1);
    if (*n)
        memcpy(w, *v, sizeof *w * (size_t)*n);
    w[(*n)++] = ptc_arena_strndup(a, s, len);
    *v = w;
}

/* The buffer number after "buf" at p, or -1. */
static int bufnum(const char *p)
{
    if (strncmp(p, "buf", 3) || p[3] < '0' || p[3] > '9')
        return -1;
    return atoi(p + 3);
}

/* Every "bufN" in [p, end) into a list. */
static void scan_bufs(ptc_arena *a, const char *p, const char *end, int **v, int *n)
{
    for (const char *q = p; q && q < end; q++) {
        q = strstr(q, "buf");
        if (!q || q >= end)
            break;
        if ((q == p || q[-1] == ' ' || q[-1] == '(' || q[-1] == ',') && bufnum(q) >= 0)
            add_int(a, v, n, bufnum(q));
    }
}

/* The "%a, %b" provenance after "<-" of a line, into a list. */
static void scan_prov(ptc_arena *a, const char *line, const char ***v, int *n)
{
    const char *p = strstr(line, "<- ");
    while (p && (p = strchr(p, '%'))) {
        size_t len = strcspn(p, ", \n");
        add_str(a, v, n, p, len);
        p += len;
    }
}

static void parse_loops(ptc_arena *a, const char *text, xp_kernels *kn)
{
    int cap = 0;
    for (const char *p = text; (p = strstr(p, "\nbuf")); p++)
        cap++;
    kn->bufs = PTC_NEWN(a, xp_buf, cap + 2);
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        int num = bufnum(line);
        const char *colon = strchr(line, ':');
        const char *eol = strchr(line, '\n');
        if (num < 0 || !colon || (eol && colon > eol) || kn->nbufs >= cap + 2)
            continue;
        xp_buf *b = &kn->bufs[kn->nbufs];
        const char *type = colon + 2, *sp = strchr(type, ' ');
        if (!sp || (eol && sp > eol))
            continue;
        b->num = num;
        b->type = ptc_arena_strndup(a, type, (size_t)(sp - type));
        const char *kind = sp + 1;
        if (!strncmp(kind, "input ", 6)) {
            b->kind = XP_BUF_INPUT;
            b->index = atoi(kind + 6);
        } else if (!strncmp(kind, "output ", 7)) {
            b->kind = XP_BUF_OUTPUT;
            b->index = atoi(kind + 7);
        } else {
            b->kind = XP_BUF_TEMP;
            b->index = -1;
        }
        const char *prov = strstr(kind, "<- %");
        b->prov = prov && (!eol || prov < eol) ? ptc_arena_strndup(a, prov + 3, strcspn(prov + 3, ", \n")) : "";
        kn->nbufs++;
    }
}

static const char *reduction_kinds[] = {"sum", "prod", "max", "min", "argmax", "argmin", "welford", "mean",
                                        "any", "all"};

/* "member nX KIND ... of" -> is KIND a reduction? */
static bool reduction_member(const char *p)
{
    p = strchr(p, ' ');        /* after "member" */
    p = p ? strchr(p + 1, ' ') : NULL; /* after "nX" */
    if (!p)
        return false;
    p++;
    for (size_t i = 0; i < sizeof reduction_kinds / sizeof *reduction_kinds; i++) {
        size_t n = strlen(reduction_kinds[i]);
        if (!strncmp(p, reduction_kinds[i], n) && p[n] == ' ')
            return true;
    }
    return false;
}

static void kernel_line(ptc_arena *a, xp_kernel *k, const char *line, const char *eol)
{
    const char *s = line + strspn(line, " ");
    if (!strncmp(s, "member ", 7)) {
        const char *arrow = strstr(s, "-> ");
        const char *prov = strstr(s, "<- ");
        if (arrow && arrow < eol)
            scan_bufs(a, arrow + 3, prov && prov < eol ? prov : eol, &k->writes, &k->nwrites);
        if (prov && prov < eol)
            scan_prov(a, prov, &k->prov, &k->nprov);
        if (reduction_member(s)) {
            /* Fused producers come first in the provenance; the reduction's
               own value is the last one ("<- %5, %6": abs, then mean). */
            const char *own = NULL;
            for (const char *p = prov && prov < eol ? strchr(prov, '%') : NULL; p && p < eol; p = strchr(p + 1, '%'))
                own = p;
            add_str(a, &k->reduce_prov, &k->nreduce, own ? own : "?", own ? strcspn(own, ", \n") : 1);
        }
    } else if (strstr(s, " = load buf") && strstr(s, " = load buf") < eol) {
        add_int(a, &k->reads, &k->nreads, bufnum(strstr(s, "load buf") + 5));
    } else if (k->is_extern && s[0] == 'n' && strchr(s, '(') && strchr(s, '(') < eol) {
        const char *open = strchr(s, '('), *arrow = strstr(s, ") -> ");
        const char *prov = strstr(s, "<- ");
        if (arrow && arrow < eol) {
            scan_bufs(a, open + 1, arrow, &k->reads, &k->nreads);
            scan_bufs(a, arrow + 5, prov && prov < eol ? prov : eol, &k->writes, &k->nwrites);
        }
        if (prov && prov < eol)
            scan_prov(a, prov, &k->prov, &k->nprov);
    }
}

static void parse_kernels(ptc_arena *a, const char *text, xp_kernels *kn)
{
    int cap = 1; /* the first line may be a kernel: no newline before it */
    for (const char *p = text; (p = strstr(p, "\nkernel ")); p++)
        cap++;
    for (const char *p = text; (p = strstr(p, "\nextern ")); p++)
        cap++;
    kn->kernels = PTC_NEWN(a, xp_kernel, cap + 1);
    const char *hdr = strstr(text, " refused (recompute)");
    if (hdr) {
        const char *q = hdr;
        while (q > text && q[-1] >= '0' && q[-1] <= '9')
            q--;
        kn->refused_recompute = atoi(q);
        const char *m = strstr(hdr, "refused (memory)");
        const char *c = strstr(hdr, ", ");
        if (m && c && c < m)
            kn->refused_memory = atoi(c + 2);
    }
    xp_kernel *k = NULL;
    for (const char *line = text; line && *line;) {
        const char *eol = strchr(line, '\n');
        if (!eol)
            eol = line + strlen(line);
        bool kern = !strncmp(line, "kernel ", 7), ext = !strncmp(line, "extern ", 7);
        if ((kern || ext) && kn->nkernels < cap) {
            k = &kn->kernels[kn->nkernels++];
            k->is_extern = ext;
            k->index = atoi(line + 7);
            const char *name = strchr(line + 7, ' ');
            const char *colon = name ? strchr(name, ':') : NULL;
            k->name = name && colon && colon < eol ? ptc_arena_strndup(a, name + 1, (size_t)(colon - name - 1)) : "?";
        } else if (!strncmp(line, "memory:", 7)) {
            break;
        } else if (k && line[0] == ' ') {
            kernel_line(a, k, line, eol);
        }
        line = *eol ? eol + 1 : NULL;
    }
}

int xp_kernels_parse(ptc_arena *a, const char *loops, const char *kernels, xp_kernels *kn)
{
    memset(kn, 0, sizeof *kn);
    if (!loops || !kernels)
        return 0;
    parse_loops(a, loops, kn);
    parse_kernels(a, kernels, kn);
    kn->present = true;
    return 0;
}

int xp_kernels_load(ptc_arena *a, const char *dir, xp_kernels *kn, ptc_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/loops.txt", dir);
    char *loops = slurp(path, NULL);
    snprintf(path, sizeof path, "%s/kernels.txt", dir);
    char *kernels = slurp(path, NULL);
    int rc = xp_kernels_parse(a, loops, kernels, kn);
    free(loops);
    free(kernels);
    (void)err;
    return rc;
}

const xp_kernel *xp_kernel_writing(const xp_kernels *kn, int buf)
{
    for (int i = 0; i < kn->nkernels; i++)
        for (int j = 0; j < kn->kernels[i].nwrites; j++)
            if (kn->kernels[i].writes[j] == buf)
                return &kn->kernels[i];
    return NULL;
}

const xp_buf *xp_buf_find(const xp_kernels *kn, xp_buf_kind kind, int index)
{
    for (int i = 0; i < kn->nbufs; i++)
        if (kn->bufs[i].kind == kind && kn->bufs[i].index == index)
            return &kn->bufs[i];
    return NULL;
}

void xp_metrics_load(const char *dir, ptc_metrics *m)
{
    memset(m, 0, sizeof *m);
    char path[4096];
    size_t len;
    snprintf(path, sizeof path, "%s/metrics.json", dir);
    char *text = slurp(path, &len);
    if (!text)
        return;
    ptc_arena *a = ptc_arena_new();
    ptc_error err;
    ptc_json *root = ptc_json_parse(a, text, len, path, &err);
    const ptc_json *t = root ? ptc_json_get(root, "times_ms") : NULL;
    for (int i = 0; t && t->kind == PTC_JOBJ && i < t->n; i++)
        if (t->items[i]->kind == PTC_JNUM)
            ptc_metrics_add(m, t->keys[i], t->items[i]->num, true);
    ptc_arena_free(a);
    free(text);
}
