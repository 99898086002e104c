/* The meta corpus generated from PyTorch (tests/data/meta, written by
 * tests/python/gen_meta_cases.py): every graph of tests/data/meta/<op>.ptir
 * holds one node whose printed output types are what eager torch produced,
 * and must pass ptc_ops_verify; every file of tests/data/meta/errors/ is a
 * case where torch raised, whose header says "# expect: MetaError <op>", and
 * must fail ptc_ops_verify with a MetaError from that op's meta function.
 *
 * All files are checked and every disagreement is listed before the test
 * fails. PTC_META_CORPUS overrides the directory (to check a fresh corpus).
 */
#define _GNU_SOURCE
#include "ops/ops.h"

#include <check.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

typedef struct tally {
    int files, graphs, failures;
    ptc_buf report;
} tally;

static const char *corpus_dir(char *buf, size_t size)
{
    const char *env = getenv("PTC_META_CORPUS");
    if (env && *env)
        return env;
    const char *src = getenv("PTC_SOURCE_DIR");
    snprintf(buf, size, "%s/tests/data/meta", src && *src ? src : ".");
    return buf;
}

__attribute__((format(printf, 3, 4))) static void failure(tally *t, const char *path,
                                                          const char *fmt, ...)
{
    t->failures++;
    if (t->failures > 400)
        return;
    va_list ap;
    va_start(ap, fmt);
    ptc_buf_printf(&t->report, "%s: ", path);
    ptc_buf_vprintf(&t->report, fmt, ap);
    ptc_buf_putc(&t->report, '\n');
    va_end(ap);
}

/* Sorted *.ptir names of a directory (malloc'd; *n entries). */
static char **list_ptir(const char *dir, int *n)
{
    struct dirent **ents;
    int k = scandir(dir, &ents, NULL, alphasort);
    ck_assert_msg(k >= 0, "cannot read %s", dir);
    char **names = calloc((size_t)k + 1, sizeof *names);
    *n = 0;
    for (int i = 0; i < k; i++) {
        size_t len = strlen(ents[i]->d_name);
        if (len > 5 && strcmp(ents[i]->d_name + len - 5, ".ptir") == 0)
            names[(*n)++] = strdup(ents[i]->d_name);
        free(ents[i]);
    }
    free(ents);
    return names;
}

static void check_valid(tally *t, const char *path)
{
    ptc_error err;
    ptc_module *m = ptc_parse_file(path, &err);
    t->files++;
    if (!m) {
        failure(t, path, "does not parse: %s (line %d)", err.msg, err.line);
        return;
    }
    for (int i = 0; i < m->ngraphs; i++) {
        t->graphs++;
        if (ptc_ops_verify(m->graphs[i], 0, &err)) {
            const ptc_node *n =
                err.has_node ? ptc_graph_find_node(m->graphs[i], err.node_id) : NULL;
            failure(t, path, "graph %s (line %d): %s: %s", m->graphs[i]->name, n ? n->text_line : 0,
                    ptc_errclass_name(err.cls), err.msg);
        }
    }
    ptc_module_free(m);
}

static void check_error(tally *t, const char *path)
{
    ptc_error err;
    size_t len;
    char *text = ptc_read_file(path, &len, &err);
    ck_assert_msg(text, "%s", err.msg);
    const char *tag = strstr(text, "# expect: MetaError ");
    char op[64] = "";
    if (tag)
        sscanf(tag + strlen("# expect: MetaError "), "%63s", op);
    free(text);
    t->files++;
    t->graphs++;
    if (!*op) {
        failure(t, path, "no '# expect: MetaError <op>' header");
        return;
    }
    ptc_module *m = ptc_parse_file(path, &err);
    if (!m) {
        failure(t, path, "does not parse: %s (line %d)", err.msg, err.line);
        return;
    }
    /* The meta message follows the node ("%r0 = add(...): add: ..."). */
    char want[80];
    snprintf(want, sizeof want, "): %s: ", op);
    if (ptc_ops_verify(m->graphs[0], 0, &err) == 0)
        failure(t, path, "verifies, but torch raised (expected a MetaError from %s)", op);
    else if (err.cls != PTC_ERR_META || !strstr(err.msg, want))
        failure(t, path, "expected a MetaError from %s, got %s: %s", op, ptc_errclass_name(err.cls),
                err.msg);
    ptc_module_free(m);
}

START_TEST(corpus)
{
    char buf[1024], path[2048];
    const char *dir = corpus_dir(buf, sizeof buf);
    tally t = {0};
    int n;
    char **names = list_ptir(dir, &n);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        check_valid(&t, path);
        free(names[i]);
    }
    free(names);
    snprintf(path, sizeof path, "%s/errors", dir);
    int nerr;
    names = list_ptir(path, &nerr);
    for (int i = 0; i < nerr; i++) {
        snprintf(path, sizeof path, "%s/errors/%s", dir, names[i]);
        check_error(&t, path);
        free(names[i]);
    }
    free(names);
    /* The corpus covers every op (one file per op with valid cases). */
    ck_assert_msg(n >= 150 && nerr >= 100,
                  "corpus in %s is incomplete (%d op files, %d error files)", dir, n, nerr);
    if (t.failures)
        fprintf(stderr, "%s", t.report.data);
    ck_assert_msg(t.failures == 0, "%d of %d corpus graphs disagree with torch:\n%s", t.failures,
                  t.graphs, t.report.data);
    ptc_buf_free(&t.report);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("meta_corpus");
    TCase *tc = tcase_create("corpus");
    tcase_add_test(tc, corpus);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
