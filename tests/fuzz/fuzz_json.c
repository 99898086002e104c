/* Fuzz target for the JSON reader (libFuzzer), and a replay driver.
 *
 * Any input must either parse or fail with a located ParseError; a value that
 * parses must survive the writer and read back to the same text. The reader
 * takes (text, len) and must never read past len, so inputs are passed in
 * an exactly-sized buffer. See fuzz_parse.c for how the two builds differ.
 */
#include "logs/logs.h"

#include <stdlib.h>
#include <string.h>

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_json: %s\n%s\n", what, detail ? detail : "");
    abort();
}

static int depth_of(const ptc_json *j)
{
    int d = 0;
    if (j->kind == PTC_JARR || j->kind == PTC_JOBJ)
        for (int i = 0; i < j->n; i++) {
            int k = depth_of(j->items[i]);
            d = k > d ? k : d;
        }
    return d + 1;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    char *text = malloc(size ? size : 1); /* exactly sized: ASan sees any overread */
    if (!text)
        return 0;
    memcpy(text, data, size);
    ptc_arena *a = ptc_arena_new();
    ptc_error err;
    ptc_json *j = ptc_json_parse(a, text, size, "fuzz", &err);
    if (!j) {
        if (err.cls != PTC_ERR_PARSE || err.line < 1 || err.col < 1 || !err.msg[0])
            fail("a failed parse must give a located ParseError", err.msg);
    } else if (depth_of(j) < 60) { /* the writer nests at most 63 levels */
        ptc_buf first = {0}, second = {0};
        ptc_jw w;
        ptc_jw_init(&w, &first, size % 2);
        ptc_jw_value(&w, j, 64);
        ptc_json *back = ptc_json_parse(a, first.data, first.len, "written", &err);
        if (!back)
            fail("the writer's output does not parse", first.data);
        ptc_jw_init(&w, &second, size % 2);
        ptc_jw_value(&w, back, 64);
        if (strcmp(first.data, second.data) != 0)
            fail("write(parse(write(v))) != write(v)", first.data);
        ptc_buf_free(&first);
        ptc_buf_free(&second);
    }
    ptc_arena_free(a);
    free(text);
    return 0;
}

#ifndef PTC_LIBFUZZER
int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        size_t len;
        ptc_error err;
        char *text = ptc_read_file(argv[i], &len, &err);
        if (!text) {
            fprintf(stderr, "fuzz_json: %s\n", err.msg);
            return 2;
        }
        for (size_t cut = 0; cut <= len; cut++) /* the file and every prefix */
            LLVMFuzzerTestOneInput((const unsigned char *)text, cut);
        free(text);
    }
    printf("fuzz_json: %d inputs replayed, no failures\n", argc - 1);
    return 0;
}
#endif
