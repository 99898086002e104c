/* Tests for ptexplain's report core (tools/explain), without Python: the
 * cost bands, ranking of break sites (band first, then source position, so
 * noise inside a band cannot reorder them; a slow first run moves nothing),
 * grouping of entries into sites,
 * recompiles, deduplicated hints, the kernels.txt reader, and the text and
 * JSON forms. The input is the measurement JSON that ptexplain's embedded
 * bootstrap writes.
 */
#include "logs/logs.h"
#include "tools/explain/explain.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A compile event of function cf, entry id, ending in a break of `code` at
 * `line`, whose break ran `runs` times, taking samples[i] ms on run i. */
static void compile_event_samples(ptc_buf *b, int cf, int id, const char *code, int line, int runs,
                                  const double *samples)
{
    double total = 0;
    for (int i = 0; i < runs; i++)
        total += samples[i];
    ptc_buf_printf(b,
                   "{\"kind\":\"compile\",\"cf\":%d,\"id\":%d,\"recompile\":0,\"frame\":\"f\",\"reason\":\"first call\","
                   "\"end\":\"break\",\"trace\":\"\",\"nodes\":0,\"guard_count\":1,\"compile_ms\":1.0,\"ptir\":null,"
                   "\"stats\":{\"backend\":\"ptc\",\"runs\":%d,\"graph_ms\":0.5,\"breaks\":%d,\"break_ms\":%g,"
                   "\"samples\":[",
                   cf, id, runs, runs, total);
    for (int i = 0; i < runs; i++)
        ptc_buf_printf(b, "%s%g", i ? "," : "", samples[i]);
    ptc_buf_printf(b,
                   "],\"cross\":[]},\"break\":{\"code\":\"%s\",\"name\":\"X\",\"reason\":\"reason %s\","
                   "\"explanation\":\"why\",\"hint\":\"general hint\",\"detail\":\"call to g\",\"stack\":\"\","
                   "\"file\":\"m.py\",\"line\":%d,\"col\":5,\"endcol\":9,\"text\":\"    g(x)\"}}",
                   code, code, line);
}

/* The same with every run taking ms. */
static void compile_event(ptc_buf *b, int cf, int id, const char *code, int line, int runs, double ms)
{
    double samples[64];
    for (int i = 0; i < runs && i < 64; i++)
        samples[i] = ms;
    compile_event_samples(b, cf, id, code, line, runs, samples);
}

static const char *build(xp_report *r, ptc_buf *events)
{
    ptc_buf j = {0};
    ptc_buf_printf(&j, "{\"calls\":3,\"call_ms\":100,\"compile_ms\":20,\"graph_ms\":10,\"eager\":[],"
                       "\"notes\":[],\"versions\":\"test\",\"events\":[%s]}",
                   events->data ? events->data : "");
    ptc_error err;
    memset(r, 0, sizeof *r);
    r->target = "m.py";
    int rc = xp_report_build(r, j.data, j.len, &err);
    ck_assert_int_eq(rc, 0);
    ptc_buf_free(&j);
    ptc_buf out = {0};
    xp_render_text(&out, r, false);
    const char *s = ptc_arena_strdup(r->arena, out.data);
    ptc_buf_free(&out);
    return s;
}

/* The hint names the innermost function of the inlined stack, also when a
 * frame's file is "<string>" (a '>' that is not a separator). */
START_TEST(advice_names_the_innermost_function)
{
    ptc_arena *a = ptc_arena_new();
    xp_site s = {.code = "PTC-B005", .frame = "g", .detail = "print()",
                 .loc = {.file = "<string>", .line = 5, .col = 5, .endcol = 12, .text = "    print(x)"}};
    s.stack = "g (<string>:5)";
    ck_assert_ptr_nonnull(strstr(xp_advice(a, &s), "from g,"));
    s.stack = "Model.forward (<stdin>:40) > stabilize (<string>:16)";
    ck_assert_ptr_nonnull(strstr(xp_advice(a, &s), "from stabilize,"));
    ptc_arena_free(a);
}
END_TEST

START_TEST(median)
{
    double v[] = {5, 1, 100, 2};
    ck_assert(xp_median(v, 4) == 3.5);
    ck_assert(xp_median(v, 3) == 1 + 4);
}
END_TEST

/* The codes of the ranked sites, space-separated. */
static const char *ranked(xp_report *r)
{
    ptc_buf b = {0};
    for (int i = 0; i < r->nsites; i++)
        ptc_buf_printf(&b, "%s%s", i ? " " : "", r->sites[i].code);
    const char *s = ptc_arena_strdup(r->arena, b.data ? b.data : "");
    ptc_buf_free(&b);
    return s;
}

/* A slow first run (an rfft's first call once took 12 ms) moves no site:
 * the fastest run after the first ranks, and a site that ran once is
 * noise, whatever its one run cost. */
START_TEST(first_run_outlier_moves_nothing)
{
    ptc_buf ev = {0};
    double once[] = {12.0}, warm[] = {250.0, 0.01, 0.02, 0.01};
    compile_event(&ev, 1, 0, "PTC-B001", 10, 4, 0.2);
    ptc_buf_puts(&ev, ",");
    compile_event_samples(&ev, 1, 1, "PTC-B026", 20, 1, once);
    ptc_buf_puts(&ev, ",");
    compile_event_samples(&ev, 1, 2, "PTC-B007", 30, 4, warm);
    xp_report r;
    build(&r, &ev);
    ck_assert_str_eq(ranked(&r), "PTC-B001 PTC-B026 PTC-B007");
    ck_assert(r.sites[1].steady_ms == 0 && r.sites[1].total_ms == 12.0);
    ck_assert(r.sites[2].steady_ms == 0.01 && fabs(r.sites[2].rank_ms - 0.04) < 1e-12);
    xp_report_free(&r);
    ptc_buf_free(&ev);
}
END_TEST

/* Near-equal costs share a band wherever they fall (9.9 and 10.1 ms
 * straddle a fixed decade); ten times less starts a new band. */
START_TEST(near_equal_costs_share_a_band)
{
    ptc_buf ev = {0};
    compile_event(&ev, 1, 0, "PTC-B005", 30, 3, 3.3); /* 9.9 ms */
    ptc_buf_puts(&ev, ",");
    compile_event(&ev, 1, 1, "PTC-B002", 20, 3, 3.4); /* 10.2 ms */
    ptc_buf_puts(&ev, ",");
    compile_event(&ev, 1, 3, "PTC-B003", 40, 3, 100); /* 300 ms */
    xp_report r;
    build(&r, &ev);
    ck_assert_str_eq(ranked(&r), "PTC-B003 PTC-B002 PTC-B005");
    ck_assert_int_eq(r.sites[0].band, 1);
    ck_assert_int_eq(r.sites[1].band, 2);
    ck_assert_int_eq(r.sites[2].band, 2);
    xp_report_free(&r);
    ptc_buf_free(&ev);
}
END_TEST

/* Cheap sites keep source order whatever their small costs; a site ten
 * times costlier comes first. */
START_TEST(ranking_is_band_then_position)
{
    ptc_buf ev = {0};
    compile_event(&ev, 1, 0, "PTC-B005", 30, 3, 0.9); /* 2.7 ms */
    ptc_buf_puts(&ev, ",");
    compile_event(&ev, 1, 1, "PTC-B002", 20, 3, 0.1); /* 0.3 ms: still before line 30 */
    ptc_buf_puts(&ev, ",");
    compile_event(&ev, 1, 2, "PTC-B006", 40, 3, 20); /* 60 ms: band 1, first */
    xp_report r;
    const char *text = build(&r, &ev);
    ck_assert_int_eq(r.nsites, 3);
    ck_assert_str_eq(r.sites[0].code, "PTC-B006");
    ck_assert_str_eq(r.sites[1].code, "PTC-B002");
    ck_assert_str_eq(r.sites[2].code, "PTC-B005");
    ck_assert_int_eq(r.sites[0].runs, 3);
    ck_assert(r.sites[0].median_ms == 20);
    const char *a = strstr(text, "#1 PTC-B006"), *b = strstr(text, "#2 PTC-B002"), *c = strstr(text, "#3 PTC-B005");
    ck_assert(a && b && c && a < b && b < c);
    ck_assert_ptr_nonnull(strstr(text, "    g(x)\n"));
    ck_assert_ptr_nonnull(strstr(text, " |     ^^^^\n"));
    /* the concrete hint names the expression under the caret */
    ck_assert_ptr_nonnull(strstr(text, "`g(x)` calls g"));
    xp_report_free(&r);
    ptc_buf_free(&ev);
}
END_TEST

/* Entries that end at the same place are one site; its cost sums them. */
START_TEST(entries_group_into_sites)
{
    ptc_buf ev = {0};
    compile_event(&ev, 1, 0, "PTC-B001", 12, 2, 1.0);
    ptc_buf_puts(&ev, ",");
    compile_event(&ev, 1, 3, "PTC-B001", 12, 4, 1.0);
    xp_report r;
    const char *text = build(&r, &ev);
    ck_assert_int_eq(r.nsites, 1);
    ck_assert_int_eq(r.sites[0].runs, 6);
    ck_assert(r.sites[0].rank_ms == 6.0);
    ck_assert_ptr_nonnull(strstr(text, "1 site, 6 breaks run"));
    xp_report_free(&r);
    ptc_buf_free(&ev);
}
END_TEST

START_TEST(recompiles_with_old_and_new)
{
    ptc_buf ev = {0};
    for (int i = 1; i <= 3; i++)
        ptc_buf_printf(&ev,
                       "%s{\"kind\":\"%s\",\"cf\":1,\"frame\":\"f\",\"guard\":\"L['x']\",\"guard_kind\":\"tensor\","
                       "\"source\":\"L['x']\",\"expected\":\"L['x']: tensor f32[%d]\",\"old\":\"f32[%d]\",\"new\":\"f32[%d]\","
                       "\"file\":\"m.py\",\"line\":3,\"col\":12,\"endcol\":13,\"text\":\"    return x * 2\",\"limit\":2}",
                       i > 1 ? "," : "", i == 3 ? "recompile_limit" : "recompile", i, i, i + 1);
    xp_report r;
    const char *text = build(&r, &ev);
    ck_assert_int_eq(r.nrecompiles, 3);
    ck_assert_ptr_nonnull(strstr(text, "the guard on L['x'] (tensor) failed 2 times"));
    ck_assert_ptr_nonnull(strstr(text, "f32[1] -> f32[2]\n"));
    ck_assert_ptr_nonnull(strstr(text, "f32[3] -> f32[4]: the recompile limit (2) was hit"));
    ck_assert_ptr_nonnull(strstr(text, "Pad or bucket inputs"));
    ck_assert_ptr_nonnull(strstr(text, "recompiles            2 (1 position hit the recompile limit)"));
    xp_report_free(&r);
    ptc_buf_free(&ev);
}
END_TEST

static const char loops_txt[] = "buf0: f32[4,8] input 0\n"
                                "buf1: f32[4,8] temp  <- %1\n"
                                "buf2: f32[] output 0  <- %3\n";
static const char kernels_txt[] = "kernel 0 k0_exp:\n"
                                  "  group 0 pointwise [4, 8]\n"
                                  "    member n1 of t1 -> buf1[i0, i1]:f32  <- %1\n"
                                  "      t0 = load buf0[i0, i1] : f32\n"
                                  "kernel 1 k1_abs_sum:\n"
                                  "  group 0 reduction [] over [r0 < 32]\n"
                                  "    member n3 sum of t1 -> buf2[0]:f32  <- %2, %3\n"
                                  "      t0 = load buf1[r0] : f32\n";

START_TEST(kernels_reader)
{
    ptc_arena *a = ptc_arena_new();
    xp_kernels kn = {0};
    ck_assert_int_eq(xp_kernels_parse(a, loops_txt, kernels_txt, &kn), 0);
    ck_assert(kn.present);
    ck_assert_int_eq(kn.nkernels, 2);
    ck_assert_str_eq(kn.kernels[1].name, "k1_abs_sum");
    ck_assert_int_eq(kn.kernels[1].nreduce, 1);
    ck_assert_str_eq(kn.kernels[1].reduce_prov[0], "%3"); /* the reduction, not its fused producer */
    const xp_kernel *w = xp_kernel_writing(&kn, 1);
    ck_assert_ptr_nonnull(w);
    ck_assert_str_eq(w->name, "k0_exp");
    const xp_buf *out = xp_buf_find(&kn, XP_BUF_OUTPUT, 0);
    ck_assert_ptr_nonnull(out);
    ck_assert_int_eq(out->num, 2);
    ptc_arena_free(a);
}
END_TEST

START_TEST(json_form_and_bad_input)
{
    ptc_buf ev = {0};
    compile_event(&ev, 1, 0, "PTC-B004", 7, 1, 0.5);
    xp_report r;
    build(&r, &ev);
    ptc_buf j = {0};
    xp_render_json(&j, &r);
    ptc_arena *a = ptc_arena_new();
    ptc_error err;
    ptc_json *root = ptc_json_parse(a, j.data, j.len, "report", &err);
    ck_assert_ptr_nonnull(root);
    const ptc_json *breaks = ptc_json_get(root, "breaks");
    ck_assert(breaks && breaks->kind == PTC_JARR && breaks->n == 1);
    ck_assert_str_eq(ptc_json_str(breaks->items[0], "code", ""), "PTC-B004");
    ck_assert_str_eq(ptc_json_str(root, "status", ""), "ran");
    ptc_arena_free(a);
    ptc_buf_free(&j);
    xp_report_free(&r);
    ptc_buf_free(&ev);

    xp_report bad = {0};
    ck_assert_int_eq(xp_report_build(&bad, "[1,2]", 5, &err), -1);
    xp_report_free(&bad);
    xp_report bad2 = {0};
    ck_assert_int_eq(xp_report_build(&bad2, "{\"events\":", 10, &err), -1);
    xp_report_free(&bad2);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("explain");
    TCase *tc = tcase_create("report");
    tcase_add_test(tc, advice_names_the_innermost_function);
    tcase_add_test(tc, median);
    tcase_add_test(tc, first_run_outlier_moves_nothing);
    tcase_add_test(tc, near_equal_costs_share_a_band);
    tcase_add_test(tc, ranking_is_band_then_position);
    tcase_add_test(tc, entries_group_into_sites);
    tcase_add_test(tc, recompiles_with_old_and_new);
    tcase_add_test(tc, kernels_reader);
    tcase_add_test(tc, json_form_and_bad_input);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
