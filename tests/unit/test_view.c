/* Tests for ptview's view model (tools/viewer/view.h), without a terminal:
 * opening traces (good, partial, corrupt), the module tree and collapse,
 * search, provenance across stages, linked selection for the split view,
 * the detail pane's content and the user's source lines.
 *
 * Fixtures: tests/data/traces/small (two compiles, every stage) and
 * tests/data/traces/broken (a cut-off prims.ptir, missing files, a missing
 * compile folder), written by tests/data/traces/gen_traces.py.
 */
#define _GNU_SOURCE
#include "logs/logs.h"
#include "tools/viewer/view.h"

#include <check.h>
#include <dirent.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------ */

static char fixture_path[4096];

static const char *fixture(const char *rel)
{
    const char *src = getenv("PTC_SOURCE_DIR");
    snprintf(fixture_path, sizeof fixture_path, "%s/tests/data/traces/%s", src ? src : ".", rel);
    return fixture_path;
}

static ptv_trace *open_ok(const char *path)
{
    ptc_error err;
    ptv_trace *t = ptv_open(path, &err);
    ck_assert_msg(t != NULL, "ptv_open(%s): %s", path, err.msg);
    return t;
}

static ptv_stage *stage(ptv_trace *t, int compile, const char *name)
{
    ck_assert_int_lt(compile, t->ncompiles);
    ptv_stage *s = ptv_compile_stage(t->compiles[compile], name);
    ck_assert_msg(s != NULL, "no stage %s", name);
    return s;
}

static ptv_stage *loaded(ptv_trace *t, int compile, const char *name)
{
    ptv_stage *s = stage(t, compile, name);
    ck_assert_msg(ptv_stage_load(s) == 0, "%s: %s", name, s->error);
    return s;
}

/* The item defining %name in a graph stage. */
static int value(const ptv_stage *s, const char *name)
{
    int i = ptv_find_value(s, name);
    ck_assert_msg(i >= 0, "no value %%%s in %s", name, s->name);
    return i;
}

/* The first item of a text stage whose text starts with prefix. */
static int text_item(const ptv_stage *s, const char *prefix)
{
    for (int i = 0; i < s->nitems; i++) {
        const char *t = s->items[i].text;
        while (*t == ' ')
            t++;
        if (strncmp(t, prefix, strlen(prefix)) == 0)
            return i;
    }
    ck_abort_msg("no line '%s' in %s", prefix, s->name);
    return -1;
}

static int line_of_group(const ptv_view *v, const char *path)
{
    for (int l = 0; l < v->nlines; l++)
        if (ptv_line_is_group(v, l) && strcmp(v->stage->groups[ptv_line_group(v, l)].path, path) == 0)
            return l;
    return -1;
}

static int line_of_item(const ptv_view *v, int item)
{
    for (int l = 0; l < v->nlines; l++)
        if (v->lines[l] == item)
            return l;
    return -1;
}

static bool detail_has(const ptv_detail *d, ptv_dlkind kind, const char *needle)
{
    for (int i = 0; i < d->n; i++)
        if (d->lines[i].kind == kind && strstr(d->lines[i].text, needle))
            return true;
    return false;
}

static int count_in(const ptv_target *tg, int n, const char *stage, bool back)
{
    int c = 0;
    for (int i = 0; i < n; i++)
        c += strcmp(tg[i].stage->name, stage) == 0 && tg[i].back == back;
    return c;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static char *make_tmpdir(void)
{
    char *dir = strdup("/tmp/ptc_test_view_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    return dir;
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[4096];
    ck_assert_int_lt(snprintf(path, sizeof path, "%s/%s", dir, name), (int)sizeof path);
    ck_assert_int_eq(ptc_write_file(path, text, strlen(text), NULL), 0);
}

/* Copies a trace directory (two levels: compile folders of files). */
static void copy_tree(const char *src, const char *dst)
{
    DIR *d = opendir(src);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char from[4096], to[4096];
        snprintf(from, sizeof from, "%s/%s", src, e->d_name);
        snprintf(to, sizeof to, "%s/%s", dst, e->d_name);
        struct stat st;
        ck_assert_int_eq(stat(from, &st), 0);
        if (S_ISDIR(st.st_mode)) {
            ck_assert_int_eq(mkdir(to, 0755), 0);
            copy_tree(from, to);
            continue;
        }
        size_t len;
        char *data = ptc_read_file(from, &len, NULL);
        ck_assert_ptr_nonnull(data);
        ck_assert_int_eq(ptc_write_file(to, data, len, NULL), 0);
        free(data);
    }
    closedir(d);
}

/* Exercises everything a person could look at in a trace. */
static void browse_all(ptv_trace *t)
{
    ptv_detail d = {0};
    ptv_target tg[64];
    for (int i = 0; i < t->ncompiles; i++) {
        ptv_compile *c = t->compiles[i];
        ptv_compile_load(c);
        ptv_detail_compile(&d, c);
        for (int k = 0; k < c->nstages; k++) {
            ptv_stage *s = c->stages[k];
            if (s->state != PTV_LOADED) {
                ck_assert_msg(s->error[0], "%s: not loaded and no reason", s->name);
                continue;
            }
            ptv_view v = {0};
            ptv_view_init(&v, s);
            for (int l = 0; l < v.nlines; l++) {
                ptv_linefmt f;
                ptv_format_line(&v, l, 100, &f);
                if (ptv_line_is_group(&v, l))
                    ptv_detail_group(&d, s, ptv_line_group(&v, l));
            }
            for (int it = 0; it < s->nitems; it++) {
                ptv_detail_item(&d, s, it, 2);
                ptv_provenance(s, it, tg, 64, 8, false);
                for (int o = 0; o < c->nstages; o++)
                    ptv_link(s, it, c->stages[o]);
            }
            ptv_view_search(&v, "add", 1);
            ptv_stage_collapse_all(s, true);
            ptv_view_sync(&v);
            ptv_view_toggle(&v);
            ptv_view_free(&v);
        }
    }
    ptv_detail_free(&d);
}

/* ---- opening ------------------------------------------------------------------- */

START_TEST(open_small_trace)
{
    ptv_trace *t = open_ok(fixture("small"));
    ck_assert_int_eq(t->ncompiles, 2);
    ck_assert_int_eq(t->nwarnings, 0);
    ptv_compile *c = t->compiles[0];
    ck_assert_str_eq(c->id, "forward_0");
    ck_assert_str_eq(c->function, "forward");
    ck_assert_str_eq(c->reason, "first call");
    const char *want[] = {"captured", "prims", "loops", "kernels", "llvm", "info"};
    ck_assert_int_eq(c->nstages, 6);
    for (int i = 0; i < 6; i++)
        ck_assert_str_eq(c->stages[i]->name, want[i]);
    ck_assert_str_eq(t->compiles[1]->reason, "guard failed: x.size(0) == 2 (got 3)");
    ck_assert_int_eq(t->compiles[1]->recompile, 1);
    ck_assert_int_eq(t->compiles[1]->nstages, 3);
    /* Lazy: nothing parsed until asked. */
    ck_assert_int_eq(c->stages[0]->state, PTV_UNLOADED);
    ck_assert_int_eq(ptv_compile_load(c), 0);
    ck_assert_int_eq(stage(t, 0, "captured")->nnodes, 12);
    ck_assert_int_eq(stage(t, 0, "kernels")->nnodes, 10);
    ck_assert_int_eq(stage(t, 0, "llvm")->nnodes, 10);
    ck_assert_int_eq(stage(t, 0, "loops")->nnodes, 20);
    ptv_close(t);
}
END_TEST

START_TEST(open_bare_ptir)
{
    ptv_trace *t = open_ok(fixture("small/forward_0/prims.ptir"));
    ck_assert(t->single_file);
    ck_assert_int_eq(t->ncompiles, 1);
    ck_assert_int_eq(t->compiles[0]->nstages, 1);
    ptv_stage *s = t->compiles[0]->stages[0];
    ck_assert_str_eq(s->name, "prims");
    ck_assert_int_eq(s->state, PTV_LOADED);
    /* Provenance survives without the captured stage: the names are kept. */
    int i = value(s, "17");
    ck_assert_int_eq(s->items[i].nprov, 1);
    ck_assert_str_eq(s->items[i].prov[0], "4");
    ptv_close(t);
}
END_TEST

START_TEST(open_partial_trace)
{
    ptv_trace *t = open_ok(fixture("broken"));
    ck_assert_int_eq(t->ncompiles, 2);
    ptv_compile *c = t->compiles[0];
    ck_assert_int_eq(ptv_stage_load(stage(t, 0, "captured")), 0);
    /* A cut-off .ptir: broken, with file:line:col of the parse error. */
    ptv_stage *prims = stage(t, 0, "prims");
    ck_assert_int_eq(ptv_stage_load(prims), -1);
    ck_assert_int_eq(prims->state, PTV_BROKEN);
    ck_assert_msg(strstr(prims->error, "prims.ptir:9:"), "%s", prims->error);
    /* Listed in index.json, absent on disk. */
    ptv_stage *loops = stage(t, 0, "loops");
    ck_assert_int_eq(ptv_stage_load(loops), -1);
    ck_assert_int_eq(loops->state, PTV_MISSING);
    ck_assert_msg(strstr(loops->error, "loops.txt: missing"), "%s", loops->error);
    /* Code: the readable kernels load, the missing one is a marked line. */
    ptv_stage *llvm = stage(t, 0, "llvm");
    ck_assert_int_eq(ptv_stage_load(llvm), 0);
    ck_assert_int_eq(llvm->nfiles, 6);
    ck_assert_msg(strstr(llvm->error, "kernel_5.ll"), "%s", llvm->error);
    ck_assert_int_ge(ptv_find_kernel(llvm, 4), 0);
    ck_assert_int_eq(ptv_find_kernel(llvm, 5), -1);
    ck_assert_int_eq(ptv_compile_load(c), 2);
    /* A compile whose folder is gone is listed and says so. */
    ck_assert_msg(strstr(t->compiles[1]->error, "compile folder missing"), "%s",
                  t->compiles[1]->error);
    ck_assert_int_eq(ptv_stage_load(stage(t, 1, "captured")), -1);
    ptv_close(t);
}
END_TEST

START_TEST(open_bad_inputs)
{
    ptc_error err;
    ck_assert_ptr_null(ptv_open("/nonexistent/ptview/trace", &err));
    ck_assert_msg(strstr(err.msg, "/nonexistent/ptview/trace"), "%s", err.msg);

    char *dir = make_tmpdir();
    /* Not a trace: an empty directory. */
    ck_assert_ptr_null(ptv_open(dir, &err));
    ck_assert_msg(strstr(err.msg, "index.json"), "%s", err.msg);
    /* A corrupt index and no folders: an error naming the index. */
    write_text(dir, "index.json", "{\"version\": 1, \"compiles\": [");
    ck_assert_ptr_null(ptv_open(dir, &err));
    char msg[2048];
    ptc_error_format(&err, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "index.json"), "%s", msg);
    /* A corrupt index with a compile folder: opens it, with a warning. */
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/forward_0", dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    write_text(sub, "captured.ptir", "# ptc ir v1\ngraph f(%x: f32[2] cpu) {\n  %0 = relu(%x) : f32[2]\n  return (%0)\n}\n");
    ptv_trace *t = open_ok(dir);
    ck_assert_int_eq(t->ncompiles, 1);
    ck_assert_int_eq(t->nwarnings, 1);
    ck_assert_msg(strstr(t->warnings[0], "index.json"), "%s", t->warnings[0]);
    ck_assert_int_eq(ptv_stage_load(stage(t, 0, "captured")), 0);
    ptv_close(t);
    /* A broken bare .ptir: one error naming file and line. */
    write_text(dir, "bad.ptir", "# ptc ir v1\ngraph f(%x: f32[2] cpu) {\n  %0 = relu(%y) : f32[2]\n");
    snprintf(sub, sizeof sub, "%s/bad.ptir", dir);
    ck_assert_ptr_null(ptv_open(sub, &err));
    ck_assert_msg(strstr(err.msg, "bad.ptir:3:"), "%s", err.msg);
    /* Not UTF-8 text at all. */
    write_text(dir, "index.json", "\x01\x02garbage");
    ck_assert_ptr_nonnull(t = ptv_open(dir, &err));
    ptv_close(t);
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}
END_TEST

START_TEST(index_lists_unfinished_compile)
{
    char *dir = make_tmpdir();
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/f_0", dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    write_text(sub, "captured.ptir", "# ptc ir v1\ngraph f(%x: f32[2] cpu) {\n  return (%x)\n}\n");
    snprintf(sub, sizeof sub, "%s/f_1", dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    write_text(sub, "captured.ptir", "# ptc ir v1\ngraph f(%x: f32[2] cpu) {\n  return (%x)\n}\n");
    write_text(dir, "index.json",
               "{\"version\":1,\"compiles\":[{\"id\":\"f_0\",\"frame\":\"f\",\"recompile\":0,"
               "\"complete\":false,\"stages\":[\"captured\",\"prims\"],\"files\":[\"captured.ptir\"]},"
               "{\"id\":\"../etc\"}]}");
    ptv_trace *t = open_ok(dir);
    ck_assert_int_eq(t->ncompiles, 2); /* f_0 from the index, f_1 found on disk */
    ck_assert(t->compiles[0]->incomplete);
    ck_assert_str_eq(t->compiles[1]->id, "f_1");
    ck_assert_int_eq(t->nwarnings, 2); /* the bad id, the unlisted folder */
    ptv_stage *prims = stage(t, 0, "prims");
    ck_assert_int_eq(ptv_stage_load(prims), -1);
    ck_assert_int_eq(prims->state, PTV_MISSING);
    ptv_close(t);
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}
END_TEST

/* Each file of the small trace cut short at several points, or with a byte
 * replaced by garbage or a NUL: opening and browsing never crash, and every
 * stage either loads or says why not. */
START_TEST(survives_damaged_files)
{
    static const char *files[] = {"index.json", "forward_0/captured.ptir", "forward_0/prims.ptir",
                                  "forward_0/loops.txt", "forward_0/kernels.txt",
                                  "forward_0/kernel_3.ll", "forward_0/metrics.json"};
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        char src[4200];
        snprintf(src, sizeof src, "%.4000s/%s", fixture("small"), files[f]);
        size_t len;
        char *orig = ptc_read_file(src, &len, NULL);
        ck_assert_ptr_nonnull(orig);
        size_t cuts[] = {0, 1, len / 7, len / 3, len / 2, len - 1};
        for (int variant = 0; variant < 8; variant++) {
            char *dir = make_tmpdir();
            copy_tree(fixture("small"), dir);
            char *data = malloc(len + 1);
            memcpy(data, orig, len);
            size_t n = len;
            if (variant < 6)
                n = cuts[variant];
            else
                data[len / 2] = variant == 6 ? (char)0xff : 0;
            char path[4200];
            snprintf(path, sizeof path, "%s/%s", dir, files[f]);
            ck_assert_int_eq(ptc_write_file(path, data, n, NULL), 0);
            ptc_error err;
            ptv_trace *t = ptv_open(dir, &err);
            if (t) {
                browse_all(t);
                ptv_close(t);
            } else {
                ck_assert_msg(err.msg[0], "%s variant %d: no trace and no error", files[f], variant);
            }
            free(data);
            nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
            free(dir);
        }
        free(orig);
    }
}
END_TEST

START_TEST(browse_everything)
{
    ptv_trace *t = open_ok(fixture("small"));
    browse_all(t);
    ptv_close(t);
    t = open_ok(fixture("broken"));
    browse_all(t);
    ptv_close(t);
}
END_TEST

/* A trace written by the real writer (logs/trace.c), including a compile
 * that never finished. */
START_TEST(reads_trace_writer_output)
{
    char *dir = make_tmpdir();
    ptc_error err;
    ptc_trace *tr = ptc_trace_open(dir, &err);
    ck_assert_msg(tr != NULL, "%s", err.msg);
    const char *text = "# ptc ir v1\ngraph forward(%x: f32[4] cpu) {\n"
                       "  %0 = relu(%x) : f32[4]  @ \"m.py\":3:12 \"F.relu(x)\" [act]\n"
                       "  %1 = neg(%0) : f32[4]  @ \"m.py\":4:12 \"-y\"\n  return (%1)\n}\n";
    ptc_module *m = ptc_parse_module(text, strlen(text), "g.ptir", &err);
    ck_assert_msg(m != NULL, "%s", err.msg);
    ptc_trace_compile *c = ptc_trace_begin(tr, "forward", 0, "forward", "m.py", 2, "first call", &err);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(ptc_trace_graph(c, "captured", m->graphs[0], &err), 0);
    const char *loops = "buf0: f32[4] = Pointwise [4] -max(load(x, i0), 0)  <- %0, %1\n";
    const char *kernels = "kernel 0 fused_relu_neg:\n  buf0 = neg(relu(x))  f32[4]  <- %0, %1\n";
    const char *code = "; ptc kernel 0 fused_relu_neg  <- %0, %1\ndefine void @k() {\n  ret void\n}\n";
    ck_assert_int_eq(ptc_trace_write(c, "loops", "loops.txt", loops, strlen(loops), &err), 0);
    ck_assert_int_eq(ptc_trace_write(c, "kernels", "kernels.txt", kernels, strlen(kernels), &err), 0);
    ck_assert_int_eq(ptc_trace_write(c, "llvm", "kernel_0.ll", code, strlen(code), &err), 0);
    ck_assert_int_eq(ptc_trace_write(c, NULL, "guards.txt", "x: f32[4]\n", 10, &err), 0);
    ck_assert_int_eq(ptc_trace_end(c, &err), 0);
    c = ptc_trace_begin(tr, "forward", 1, "forward", "m.py", 2, "guard failed: x.size(0) == 4", &err);
    ck_assert_int_eq(ptc_trace_graph(c, "captured", m->graphs[0], &err), 0);
    ptc_trace_close(tr); /* without ptc_trace_end: a compile cut short */
    ptc_module_free(m);

    ptv_trace *t = open_ok(dir);
    ck_assert_int_eq(t->ncompiles, 2);
    ck_assert_int_eq(t->nwarnings, 0);
    ptv_compile *c0 = t->compiles[0], *c1 = t->compiles[1];
    ck_assert_str_eq(c0->id, "forward_0");
    ck_assert_str_eq(c0->reason, "first call");
    ck_assert(!c0->incomplete);
    ck_assert(c1->incomplete);
    ck_assert_str_eq(c1->reason, "guard failed: x.size(0) == 4");
    ck_assert_int_eq(ptv_compile_load(c0), 0);
    ck_assert_int_eq(ptv_compile_load(c1), 0);
    ck_assert_int_eq(c0->nstages, 5); /* captured, loops, kernels, llvm, info */
    ptv_stage *cap = stage(t, 0, "captured");
    ptv_target tg[16];
    int n = ptv_provenance(cap, value(cap, "1"), tg, 16, 8, true);
    ck_assert_int_eq(n, 4); /* the buffer, the kernel header and member, the code */
    ptv_stage *info = stage(t, 0, "info");
    ck_assert_int_ge(text_item(info, "metrics.json:"), 0);
    ck_assert_int_ge(text_item(info, "guards.txt:"), 0);
    browse_all(t);
    ptv_close(t);
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}
END_TEST

/* ---- module tree and collapse ------------------------------------------------------- */

START_TEST(module_groups)
{
    ptv_trace *t = open_ok(fixture("small"));
    ptv_stage *s = loaded(t, 0, "captured");
    ck_assert_int_eq(s->nitems, 1 + 15 + 12 + 1);
    /* Groups: inputs, blocks, blocks.0, blocks.1 (single-node runs such as
     * blocks.0.fc1 or head are not groups). */
    ck_assert_int_eq(s->ngroups, 4);
    ck_assert_str_eq(s->groups[0].path, PTV_INPUTS);
    ck_assert_str_eq(s->groups[1].path, "blocks");
    ck_assert_str_eq(s->groups[2].path, "blocks.0");
    ck_assert_int_eq(s->groups[2].parent, 1);
    ck_assert_int_eq(s->groups[2].nops, 5);
    ck_assert_int_eq(s->groups[1].nops, 10);
    int ln = value(s, "4");
    ck_assert_str_eq(s->items[ln].module, "blocks.0.norm");
    ck_assert_int_eq(s->items[ln].group, 2);
    ck_assert_int_eq(s->items[ln].depth, 2);
    ck_assert_int_eq(s->items[value(s, "11")].depth, 0);

    ptv_view v = {0};
    ptv_view_init(&v, s);
    /* More than a few inputs start folded. */
    ck_assert(ptv_group_collapsed(s, 0));
    ck_assert_int_eq(v.nlines, s->nitems - 15 + 4);
    ptv_stage_collapse_all(s, false);
    ptv_view_sync(&v);
    ck_assert_int_eq(v.nlines, s->nitems + 4);
    ptv_linefmt f;
    int l = line_of_group(&v, "blocks.0");
    ptv_format_line(&v, l, 120, &f);
    ck_assert_msg(strstr(f.text, "- blocks.0  (5 ops)"), "%s", f.text);
    ck_assert(f.header);
    ptv_format_line(&v, line_of_item(&v, ln), 200, &f);
    ck_assert_msg(strstr(f.text, "%4 = layer_norm"), "%s", f.text);
    ck_assert_msg(strstr(f.text, "f32[2,8]"), "%s", f.text);
    ck_assert_msg(strstr(f.text, "[blocks.0.norm]"), "%s", f.text);
    ck_assert_msg(strstr(f.text, "small_model.py:17"), "%s", f.text);
    ck_assert_int_eq(strncmp(f.text, "    %4", 6), 0); /* indented by nesting */
    ck_assert_int_eq(f.span[PTV_COL_OP][1] - f.span[PTV_COL_OP][0], 10);
    /* Cut to a width. */
    ptv_format_line(&v, line_of_item(&v, ln), 12, &f);
    ck_assert_int_eq(strlen(f.text), 12);
    ptv_view_free(&v);
    ptv_close(t);
}
END_TEST

START_TEST(collapse_and_expand)
{
    ptv_trace *t = open_ok(fixture("small"));
    ptv_stage *s = loaded(t, 0, "captured");
    ptv_view v = {0};
    ptv_stage_collapse_all(s, false);
    ptv_view_init(&v, s);
    int full = v.nlines;
    /* 'c' on an item folds its innermost module and selects the header. */
    int ln = value(s, "3");
    v.sel = line_of_item(&v, ln);
    ck_assert(ptv_view_toggle(&v));
    ck_assert_int_eq(v.nlines, full - 5);
    ck_assert(ptv_line_is_group(&v, v.sel));
    ck_assert_str_eq(s->groups[ptv_line_group(&v, v.sel)].path, "blocks.0");
    ptv_linefmt f;
    ptv_format_line(&v, v.sel, 120, &f);
    ck_assert_msg(strstr(f.text, "+ blocks.0  (5 ops, collapsed)"), "%s", f.text);
    ck_assert_int_eq(line_of_item(&v, ln), -1);
    /* 'c' on the header unfolds it. */
    ck_assert(ptv_view_toggle(&v));
    ck_assert_int_eq(v.nlines, full);
    /* Folding the parent hides the children's headers too. */
    v.sel = line_of_group(&v, "blocks");
    ck_assert(ptv_view_toggle(&v));
    ck_assert_int_eq(v.nlines, full - 10 - 2);
    /* Selecting an item inside unfolds what hides it. */
    ck_assert_int_ge(ptv_view_select_item(&v, value(s, "7")), 0);
    ck_assert_int_eq(v.nlines, full);
    ck_assert_int_eq(ptv_view_item(&v), value(s, "7"));
    /* Items outside any module have nothing to fold. */
    ptv_view_select_item(&v, value(s, "11"));
    ck_assert(!ptv_view_toggle(&v));
    /* Collapse all / expand all. */
    ptv_stage_collapse_all(s, true);
    ptv_view_sync(&v);
    ck_assert_int_eq(v.nlines, 1 + 1 + 1 + 2 + 1); /* graph, inputs, blocks, head, softmax, return */
    ck_assert_int_eq(ptv_view_item(&v), value(s, "11")); /* selection kept */
    ptv_stage_collapse_all(s, false);
    ptv_view_sync(&v);
    ck_assert_int_eq(v.nlines, full);
    ptv_view_free(&v);
    ptv_close(t);
}
END_TEST

START_TEST(kernel_groups)
{
    ptv_trace *t = open_ok(fixture("small"));
    ptv_stage *k = loaded(t, 0, "kernels");
    int h = ptv_find_kernel(k, 3);
    ck_assert_int_ge(h, 0);
    ck_assert_str_eq(k->items[h].text, "kernel 3 fused_add_add_layer_norm_3:");
    /* The header's provenance is its members'. */
    ck_assert_int_eq(k->items[h].nprov, 3);
    int g = k->items[h].group;
    ck_assert_int_ge(g, 0);
    ck_assert_int_eq(k->groups[g].end - k->groups[g].first, 5);
    /* The memory plan line after the last kernel is not part of it. */
    int plan = text_item(k, "memory plan");
    ck_assert_int_eq(k->items[plan].group, -1);
    /* Member lines inherit the module path and source of their origin. */
    int m = text_item(k, "buf6 = welford");
    ck_assert_str_eq(k->items[m].module, "blocks.0.norm");
    ck_assert_int_eq(k->items[m].loc.line, 17);
    ck_assert_int_eq(k->items[m].kernel, 3);
    ptv_view v = {0};
    ptv_view_init(&v, k);
    ptv_linefmt f;
    ptv_format_line(&v, line_of_item(&v, m), 200, &f);
    ck_assert_msg(strstr(f.text, "<- %4"), "%s", f.text);
    ck_assert_msg(strstr(f.text, "small_model.py:17"), "%s", f.text);
    /* The kernel line is its block's header line, not a line of its own. */
    ck_assert_int_eq(line_of_item(&v, h), -1);
    int hl = ptv_view_select_item(&v, h);
    ck_assert(ptv_line_is_group(&v, hl));
    ck_assert_int_eq(ptv_view_item(&v), h);
    ptv_format_line(&v, hl, 200, &f);
    ck_assert_msg(strstr(f.text, "- kernel 3 fused_add_add_layer_norm_3:  <- %2, %3, %4  (4 lines)"),
                  "%s", f.text);
    ck_assert(ptv_view_toggle(&v));
    ptv_format_line(&v, v.sel, 200, &f);
    ck_assert_msg(strstr(f.text, "+ kernel 3 fused_add_add_layer_norm_3:"), "%s", f.text);
    ck_assert_msg(strstr(f.text, "(4 lines, collapsed)"), "%s", f.text);
    /* Selecting the title keeps the block folded; selecting a member unfolds it. */
    ptv_view_select_item(&v, h);
    ck_assert(ptv_group_collapsed(k, g));
    ptv_view_select_item(&v, m);
    ck_assert(!ptv_group_collapsed(k, g));
    /* The header's detail is the kernel line's, with the block's size. */
    ptv_detail d = {0};
    ptv_detail_group(&d, k, g);
    ck_assert_str_eq(d.lines[0].text, "kernel 3 fused_add_add_layer_norm_3:");
    ck_assert_msg(strstr(d.lines[2].text, "block     4 more lines"), "%s", d.lines[2].text);
    ptv_detail_free(&d);
    /* Searching from the header finds the next match, not the title again. */
    ptv_view_select_item(&v, h);
    ck_assert_int_eq(ptv_view_search(&v, "kernel 3", 1), ptv_find_kernel(k, 3));
    ck_assert_int_eq(ptv_view_search(&v, "fused_add", 1), ptv_find_kernel(k, 5));
    ptv_view_free(&v);
    ptv_close(t);
}
END_TEST

/* The block structure of loops.txt and kernels.txt as the lowering writes
 * them: a loop node and its body, kernels with their members, externs, the
 * memory plan. */
START_TEST(text_blocks)
{
    char *dir = make_tmpdir();
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/f_0", dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    write_text(sub, "captured.ptir",
               "# ptc ir v1\ngraph f(%x: f32[4] cpu, %w: f32[4,4] cpu) {\n"
               "  %0 = mm(%x, %w) : f32[4,4]\n  %1 = relu(%0) : f32[4,4]\n  return (%1)\n}\n");
    write_text(sub, "loops.txt",
               "# ptc loops v1\n"
               "buf0: f32[4,4] temp  <- %0\n"
               "n0 = extern mm(x[4]{1}, w[4,4]{4,1}) -> buf0  <- %0\n"
               "n1 = pointwise [x0 < 4, x1 < 4] of t2 -> buf1  <- %1\n"
               "    t0 = load buf0[4*x0 + x1]\n"
               "    t1 = const 0.0\n"
               "    t2 = max t0, t1\n"
               "return (buf1)\n");
    write_text(sub, "kernels.txt",
               "# ptc kernels v1\n# 1 kernels, 2 steps\n"
               "extern 0 mm:\n  n0 mm(x[4]{1}, w[4,4]{4,1}) -> buf0  <- %0\n"
               "kernel 0 relu_0:\n  args buf0 buf1\n  outer [o0 < 4] parallel 1\n"
               "    n1 -> buf1[o0]:f32  <- %1\n"
               "memory: arena 64 bytes, 1 buffers\n  buf0: f32[4,4] 64 bytes at 0, live steps 0..1  <- %0\n");
    ptv_trace *t = open_ok(dir);
    ptv_stage *lp = loaded(t, 0, "loops");
    ck_assert_int_eq(lp->nnodes, 3);
    ck_assert_int_eq(lp->ngroups, 1);
    ck_assert_str_eq(lp->groups[0].path, "n1");
    ck_assert(lp->groups[0].titled);
    ck_assert_int_eq(lp->groups[0].end - lp->groups[0].first, 4);
    ptv_view v = {0};
    ptv_view_init(&v, lp);
    ck_assert_int_eq(v.nlines, 8); /* the title is on the header line */
    ptv_stage *ks = loaded(t, 0, "kernels");
    ck_assert_int_eq(ks->nnodes, 1);
    ck_assert_int_eq(ks->ngroups, 3);
    ck_assert_str_eq(ks->groups[0].path, "extern 0 mm");
    ck_assert_str_eq(ks->groups[1].path, "kernel 0");
    ck_assert_str_eq(ks->groups[2].path, "memory");
    /* Only kernel headers take their members' provenance. */
    ck_assert_int_eq(ks->items[ks->groups[1].first].nprov, 1);
    ck_assert_int_eq(ks->items[ks->groups[0].first].nprov, 0);
    ck_assert_int_eq(ks->items[ks->groups[2].first].nprov, 0);
    /* The captured mm became the loop node, its buffer, the extern and the
     * arena slot; relu became the loop node and the kernel (header, member). */
    ptv_stage *cap = loaded(t, 0, "captured");
    ptv_target tg[16];
    int n = ptv_provenance(cap, value(cap, "0"), tg, 16, 8, true);
    ck_assert_int_eq(count_in(tg, n, "loops", false), 2);
    ck_assert_int_eq(count_in(tg, n, "kernels", false), 2);
    n = ptv_provenance(cap, value(cap, "1"), tg, 16, 8, true);
    ck_assert_int_eq(count_in(tg, n, "kernels", false), 2);
    ptv_view_free(&v);
    ptv_close(t);
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}
END_TEST

START_TEST(text_provenance_syntax)
{
    char *dir = make_tmpdir();
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/f_0", dir);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    write_text(sub, "captured.ptir",
               "# ptc ir v1\ngraph f(%x: f32[2] cpu) {\n  %a = relu(%x) : f32[2]\n"
               "  %b = neg(%a) : f32[2]\n  return (%b)\n}\n");
    char long_line[4096] = "buf9 = wide()  <- %a";
    for (int k = 0; k < 99; k++)
        strcat(long_line, k % 2 ? ", %a" : ", %b");
    strcat(long_line, "\n");
    write_text(sub, "kernels.txt", long_line);
    write_text(sub, "loops.txt",
               "buf0 = relu(x)  <- %a\n"
               "buf1 = neg(buf0)  <-   %a ,%b\n"
               "x <- y is not provenance\n"
               "buf2 = f(x)  <- %a, junk\n"
               "kernel 0 not_a_header_here:  <- %b\n");
    ptv_trace *t = open_ok(dir);
    ptv_stage *s = loaded(t, 0, "loops");
    ck_assert_int_eq(s->nitems, 5);
    ck_assert_int_eq(s->items[0].nprov, 1);
    ck_assert_str_eq(s->items[0].text, "buf0 = relu(x)");
    ck_assert_int_eq(s->items[1].nprov, 2);
    ck_assert_str_eq(s->items[1].prov[1], "b");
    ck_assert_int_eq(s->items[2].nprov, 0);
    ck_assert_int_eq(s->items[3].nprov, 0);
    ck_assert_str_eq(s->items[3].text, "buf2 = f(x)  <- %a, junk");
    ck_assert_int_eq(s->items[4].kind, PTV_ITEM_LINE); /* headers belong to kernels.txt */
    ck_assert_int_eq(s->nnodes, 3);
    /* No limit on the length of a provenance list. */
    ptv_stage *k = loaded(t, 0, "kernels");
    ck_assert_int_eq(k->items[0].nprov, 100);
    ck_assert_str_eq(k->items[0].text, "buf9 = wide()");
    ptv_close(t);
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}
END_TEST

/* ---- search -------------------------------------------------------------------------- */

START_TEST(search_ops_modules_source)
{
    ptv_trace *t = open_ok(fixture("small"));
    ptv_stage *s = loaded(t, 0, "captured");
    ptv_view v = {0};
    ptv_view_init(&v, s);
    /* Op names, forward with n and back with N, wrapping. */
    ck_assert_int_eq(ptv_view_search(&v, "layer_norm", 1), value(s, "4"));
    ck_assert_int_eq(ptv_view_search(&v, "layer_norm", 1), value(s, "9"));
    ck_assert_int_eq(ptv_view_search(&v, "layer_norm", 1), value(s, "4"));
    ck_assert_int_eq(ptv_view_search(&v, "layer_norm", -1), value(s, "9"));
    /* Case-insensitive; module paths; source text; file names. */
    ck_assert_int_eq(ptv_view_search(&v, "SOFTMAX", 1), value(s, "11"));
    ck_assert_int_eq(ptv_view_search(&v, "blocks.1.fc2", 1), value(s, "7"));
    ptv_view_select_item(&v, 0);
    ck_assert_int_eq(ptv_view_search(&v, "x + h", 1), value(s, "3"));
    ck_assert_int_eq(ptv_view_search(&v, "small_model", 1), value(s, "4"));
    /* %name finds the value itself, not its users. */
    ck_assert_int_eq(ptv_view_search(&v, "%2", 1), value(s, "2"));
    ck_assert_int_eq(ptv_view_search(&v, "%2", 1), value(s, "2"));
    ck_assert_int_eq(ptv_view_search(&v, "no such thing", 1), -1);
    ck_assert_int_eq(ptv_view_item(&v), value(s, "2")); /* selection unchanged */
    /* A match inside a folded module unfolds it. */
    ptv_stage_collapse_all(s, true);
    ptv_view_sync(&v);
    ck_assert_int_eq(ptv_view_search(&v, "gelu", 1), value(s, "1"));
    ck_assert_int_eq(ptv_view_item(&v), value(s, "1"));
    ck_assert(!ptv_line_is_group(&v, v.sel));
    /* From a header, its own first item is the next match. */
    ptv_stage_collapse_all(s, false);
    ptv_view_sync(&v);
    v.sel = line_of_group(&v, "blocks.1");
    ck_assert_int_eq(ptv_view_search(&v, "linear", 1), value(s, "5"));
    /* Text stages search their lines. */
    ptv_stage *k = loaded(t, 0, "kernels");
    ptv_view kv = {0};
    ptv_view_init(&kv, k);
    ck_assert_int_eq(ptv_view_search(&kv, "welford", 1), text_item(k, "buf6 = welford"));
    ck_assert_int_eq(ptv_view_search(&kv, "blocks.1.norm", 1), text_item(k, "buf14 = welford"));
    ptv_view_free(&kv);
    ptv_view_free(&v);
    ptv_close(t);
}
END_TEST

/* ---- provenance and linked selection ------------------------------------------------- */

START_TEST(provenance_forward_and_back)
{
    ptv_trace *t = open_ok(fixture("small"));
    ptv_stage *cap = loaded(t, 0, "captured");
    ptv_target tg[256];
    /* Without loading, only loaded stages are consulted. */
    ck_assert_int_eq(ptv_provenance(cap, value(cap, "4"), tg, 256, 64, false), 0);
    ck_assert_int_eq(stage(t, 0, "prims")->state, PTV_UNLOADED);
    /* The captured layer_norm %4 became: 12 prims nodes (13 values, one
     * two-output var_mean), 2 buffers, kernel 3's header and 2 members, and
     * the code of kernel 3. */
    int n = ptv_provenance(cap, value(cap, "4"), tg, 256, 64, true);
    ck_assert_int_eq(count_in(tg, n, "prims", false), 12);
    ck_assert_int_eq(count_in(tg, n, "loops", false), 2);
    ck_assert_int_eq(count_in(tg, n, "kernels", false), 3);
    ck_assert_int_eq(count_in(tg, n, "llvm", false), 1);
    ck_assert_int_eq(count_in(tg, n, "captured", false) + count_in(tg, n, "captured", true), 0);
    for (int i = 0; i < n; i++)
        if (strcmp(tg[i].stage->name, "llvm") == 0) {
            ck_assert_int_eq(tg[i].stage->items[tg[i].item].kind, PTV_ITEM_KERNEL);
            ck_assert_int_eq(tg[i].stage->items[tg[i].item].kernel, 3);
        }
    /* And back: a prims node came from the captured node, and also relates
     * forward to the loops/kernels/code of that node. */
    ptv_stage *prims = loaded(t, 0, "prims");
    n = ptv_provenance(prims, value(prims, "17"), tg, 256, 64, true);
    ck_assert_int_eq(count_in(tg, n, "captured", true), 1);
    ck_assert_int_eq(tg[0].item, value(cap, "4"));
    ck_assert_int_eq(count_in(tg, n, "kernels", false), 3);
    /* Same names, different values: prims %4 is part of gelu (<- %1), not
     * captured %4. */
    n = ptv_provenance(prims, value(prims, "4"), tg, 256, 64, true);
    ck_assert_int_eq(count_in(tg, n, "captured", true), 1);
    ck_assert_int_eq(tg[0].item, value(cap, "1"));
    /* Code lines reach their kernel through the kernel number. */
    ptv_stage *llvm = loaded(t, 0, "llvm");
    ptv_stage *ks = loaded(t, 0, "kernels");
    int code_line = ptv_find_kernel(llvm, 9) + 3;
    n = ptv_provenance(llvm, code_line, tg, 256, 64, true);
    ck_assert_int_eq(count_in(tg, n, "kernels", true), 1);
    ck_assert_int_eq(ks->items[tg[n - 1].item].kernel, 9);
    /* Capped per stage. */
    n = ptv_provenance(ks, ptv_find_kernel(ks, 3), tg, 256, 2, true);
    ck_assert_int_eq(count_in(tg, n, "prims", true), 2);
    ptv_close(t);
}
END_TEST

START_TEST(split_linked_selection)
{
    ptv_trace *t = open_ok(fixture("small"));
    ptv_stage *cap = loaded(t, 0, "captured");
    ptv_stage *prims = loaded(t, 0, "prims");
    ptv_stage *ks = loaded(t, 0, "kernels");
    ptv_stage *llvm = loaded(t, 0, "llvm");
    ptv_view left = {0}, right = {0};
    ptv_view_init(&left, cap);
    ptv_view_init(&right, prims);
    /* Selecting left selects the first related item right. */
    ptv_view_select_item(&left, value(cap, "4"));
    int r = ptv_link(cap, ptv_view_item(&left), prims);
    ck_assert_int_eq(r, value(prims, "17"));
    ck_assert_int_ge(ptv_view_select_item(&right, r), 0);
    ck_assert_int_eq(ptv_view_item(&right), value(prims, "17"));
    /* And the other way. */
    ck_assert_int_eq(ptv_link(prims, value(prims, "13"), cap), value(cap, "2"));
    /* Across kernels and code: by origin, then by kernel number. */
    int member = text_item(ks, "buf10 = gelu");
    int code = ptv_link(ks, member, llvm);
    ck_assert_int_eq(llvm->items[code].kernel, 5);
    ck_assert_int_eq(ptv_link(llvm, code + 4, ks), ptv_find_kernel(ks, 5));
    /* Inputs have no counterpart in prims' provenance: no link. */
    ck_assert_int_eq(ptv_link(cap, value(cap, "x"), prims), -1);
    /* The right side folded: the linked item unfolds. */
    ptv_stage_collapse_all(prims, true);
    ptv_view_sync(&right);
    ck_assert_int_ge(ptv_view_select_item(&right, ptv_link(cap, value(cap, "9"), prims)), 0);
    ck_assert(!ptv_line_is_group(&right, right.sel));
    ptv_view_free(&left);
    ptv_view_free(&right);
    ptv_close(t);
}
END_TEST

/* ---- detail and source ------------------------------------------------------------------ */

START_TEST(detail_of_node)
{
    ptv_trace *t = open_ok(fixture("small"));
    ptv_stage *cap = loaded(t, 0, "captured");
    ptv_detail d = {0};
    /* Provenance covers the stages loaded so far, and says which are not. */
    ptv_detail_item(&d, cap, value(cap, "4"), 2);
    ck_assert(detail_has(&d, PTV_DL_NOTE, "provenance in prims, loops, kernels, llvm: not loaded yet"));
    ck_assert(!detail_has(&d, PTV_DL_FIELD, "became"));
    ck_assert_int_eq(ptv_compile_unloaded(t->compiles[0]), 4);
    ck_assert_int_eq(ptv_compile_load(t->compiles[0]), 0);
    ptv_detail_item(&d, cap, value(cap, "4"), 2);
    ck_assert(!detail_has(&d, PTV_DL_NOTE, "not loaded yet"));
    ck_assert_int_eq(d.lines[0].kind, PTV_DL_TITLE);
    ck_assert_msg(strstr(d.lines[0].text, "%4 = layer_norm(%3, normalized_shape=[8]"), "%s", d.lines[0].text);
    ck_assert(detail_has(&d, PTV_DL_FIELD, "module    blocks.0.norm"));
    ck_assert(detail_has(&d, PTV_DL_FIELD, "source    small_model.py:17:16  self.norm(x + h)"));
    ck_assert(detail_has(&d, PTV_DL_FIELD, "stage     captured of forward_0  (captured.ptir:7)"));
    ck_assert(detail_has(&d, PTV_DL_FIELD, "attrs     normalized_shape=[8]"));
    /* Inputs and users are links into the same stage. */
    bool input3 = false, user5 = false;
    for (int i = 0; i < d.n; i++)
        if (d.lines[i].kind == PTV_DL_LINK && d.lines[i].stage == cap) {
            input3 |= d.lines[i].item == value(cap, "3");
            user5 |= d.lines[i].item == value(cap, "5");
        }
    ck_assert(input3 && user5);
    ck_assert(detail_has(&d, PTV_DL_FIELD, "became"));
    ck_assert(detail_has(&d, PTV_DL_LINK, "llvm"));
    /* The user's line with two lines of context and a caret under the call. */
    ck_assert(detail_has(&d, PTV_DL_SOURCE_HERE, ">   17 |         return self.norm(x + h)"));
    ck_assert(detail_has(&d, PTV_DL_SOURCE, "   15 |         h = F.gelu(self.fc1(x))"));
    ck_assert(detail_has(&d, PTV_DL_SOURCE, "   19 | "));
    ck_assert(detail_has(&d, PTV_DL_CARET, "                       ^~~~~~~~~~~~~~~"));
    /* A derived item shows where its module and source came from. */
    ptv_stage *ks = loaded(t, 0, "kernels");
    ptv_detail_item(&d, ks, text_item(ks, "buf7 = layer_norm"), 1);
    ck_assert(detail_has(&d, PTV_DL_FIELD, "module    blocks.0.norm  (from %4 in captured)"));
    ck_assert(detail_has(&d, PTV_DL_FIELD, "came from"));
    ck_assert(detail_has(&d, PTV_DL_SOURCE_HERE, "self.norm(x + h)"));
    ck_assert(detail_has(&d, PTV_DL_FIELD, "kernel    3"));
    /* Groups and compiles. */
    ptv_detail_group(&d, cap, 2);
    ck_assert(detail_has(&d, PTV_DL_FIELD, "path      blocks.0"));
    ck_assert(detail_has(&d, PTV_DL_FIELD, "contains  5 items, 5 ops"));
    ptv_detail_compile(&d, t->compiles[1]);
    ck_assert(detail_has(&d, PTV_DL_FIELD, "reason    guard failed: x.size(0) == 2 (got 3)"));
    ptv_detail_free(&d);
    ptv_close(t);
}
END_TEST

START_TEST(source_missing_is_said)
{
    char *dir = make_tmpdir();
    write_text(dir, "g.ptir",
               "# ptc ir v1\ngraph f(%x: f32[2] cpu) {\n"
               "  %0 = relu(%x) : f32[2]  @ \"/nonexistent/model.py\":3:5 \"F.relu(x)\" [act]\n"
               "  %1 = neg(%0) : f32[2]  @ \"here.py\":2:1 \"-y\"\n"
               "  return (%1)\n}\n");
    write_text(dir, "here.py", "def f(y):\n    return -y\n");
    char path[4200];
    snprintf(path, sizeof path, "%s/g.ptir", dir);
    ptv_trace *t = open_ok(path);
    ptv_stage *s = t->compiles[0]->stages[0];
    ck_assert_str_eq(s->name, "g");
    ptv_detail d = {0};
    ptv_detail_item(&d, s, value(s, "0"), 3);
    ck_assert(detail_has(&d, PTV_DL_NOTE, "source file /nonexistent/model.py not found"));
    /* Relative names are found next to the .ptir. */
    ptv_detail_item(&d, s, value(s, "1"), 3);
    ck_assert(detail_has(&d, PTV_DL_SOURCE_HERE, ">    2 |     return -y"));
    /* A line past the end of the file: said, not shown. */
    const char *lines[8];
    int first;
    char why[600];
    ck_assert_int_eq(ptv_source(t, "here.py", 40, 1, &first, lines, 8, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "here.py has 2 lines"), "%s", why);
    ptv_detail_free(&d);
    ptv_close(t);
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("view");
    TCase *tc = tcase_create("open");
    tcase_add_test(tc, open_small_trace);
    tcase_add_test(tc, open_bare_ptir);
    tcase_add_test(tc, open_partial_trace);
    tcase_add_test(tc, open_bad_inputs);
    tcase_add_test(tc, index_lists_unfinished_compile);
    tcase_add_test(tc, survives_damaged_files);
    tcase_add_test(tc, browse_everything);
    tcase_add_test(tc, reads_trace_writer_output);
    suite_add_tcase(s, tc);
    tc = tcase_create("tree");
    tcase_add_test(tc, module_groups);
    tcase_add_test(tc, collapse_and_expand);
    tcase_add_test(tc, kernel_groups);
    tcase_add_test(tc, text_blocks);
    tcase_add_test(tc, text_provenance_syntax);
    suite_add_tcase(s, tc);
    tc = tcase_create("navigate");
    tcase_add_test(tc, search_ops_modules_source);
    tcase_add_test(tc, provenance_forward_and_back);
    tcase_add_test(tc, split_linked_selection);
    suite_add_tcase(s, tc);
    tc = tcase_create("detail");
    tcase_add_test(tc, detail_of_node);
    tcase_add_test(tc, source_missing_is_said);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
