/* Fuzz target for the .ptir parser (libFuzzer), and a replay driver.
 *
 * Any input must either parse or fail with a located ParseError; a module
 * that parses must print to text that parses again to the same print
 * (print(parse(print(m))) == print(m)) and pass the structural verifier;
 * the op-level checks (meta: shapes, strides, str attributes' words) either
 * pass or fail with an error naming the node's line, as ptc-run reports it.
 * Anything else is a bug, reported by abort() so that libFuzzer keeps the
 * input. Built with -DPTC_FUZZ=ON (clang, -fsanitize=fuzzer,address);
 * without it the same checks run over files named on the command line, which
 * is how CTest replays the seed corpus (tests/golden, tests/malformed) in
 * every build, the sanitizer leg included.
 */
#include "ir/ir.h"
#include "ops/ops.h"

#include <stdlib.h>
#include <string.h>

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_parse: %s\n%s\n", what, detail ? detail : "");
    abort();
}

/* ptc-run locates an op check's failure by its node's line in the file. */
static bool names_its_line(const ptc_graph *g, const ptc_error *err)
{
    if (!err->msg[0] || !err->has_node)
        return false;
    const ptc_node *n = ptc_graph_find_node(g, err->node_id);
    return n && n->text_line >= 1;
}

static void check_input(const char *data, size_t size)
{
    ptc_error err;
    ptc_module *m = ptc_parse_module(data, size, "fuzz", &err);
    if (!m) {
        if (err.cls != PTC_ERR_PARSE || err.line < 1 || !err.msg[0])
            fail("a failed parse must give a located ParseError", err.msg);
        return;
    }
    for (int i = 0; i < m->ngraphs; i++) {
        if (ptc_ir_verify(m->graphs[i], 0, &err))
            fail("a parsed graph fails the verifier", err.msg);
        if (ptc_ops_verify(m->graphs[i], 0, &err) && !names_its_line(m->graphs[i], &err))
            fail("an op check failed without naming its node's line", err.msg);
    }
    ptc_buf first = {0}, second = {0};
    ptc_print_module(&first, m);
    ptc_module *again = ptc_parse_module(first.data, first.len, "reprint", &err);
    if (!again) {
        char where[1400];
        ptc_error_format(&err, where, sizeof where);
        fprintf(stderr, "%s\n", where);
        fail("the printed module does not parse", first.data);
    }
    ptc_print_module(&second, again);
    if (strcmp(first.data, second.data) != 0) {
        fprintf(stderr, "first print:\n%s\nsecond print:\n", first.data);
        fail("print(parse(print(m))) != print(m)", second.data);
    }
    ptc_buf_free(&first);
    ptc_buf_free(&second);
    ptc_module_free(again);
    ptc_module_free(m);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    /* ptc_parse_module's text is NUL-terminated (ir.h); libFuzzer's is not. */
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    check_input(text, size);
    free(text);
    return 0;
}

#ifndef PTC_LIBFUZZER
int main(int argc, char **argv)
{
    int n = 0;
    for (int i = 1; i < argc; i++) {
        size_t len;
        ptc_error err;
        char *text = ptc_read_file(argv[i], &len, &err);
        if (!text) {
            fprintf(stderr, "fuzz_parse: %s\n", err.msg);
            return 2;
        }
        LLVMFuzzerTestOneInput((const unsigned char *)text, len);
        /* Every prefix too: truncated files are the commonest bad input. */
        for (size_t cut = 0; cut < len; cut += 1 + len / 64)
            LLVMFuzzerTestOneInput((const unsigned char *)text, cut);
        free(text);
        n++;
    }
    printf("fuzz_parse: %d inputs replayed, no failures\n", n);
    return 0;
}
#endif
