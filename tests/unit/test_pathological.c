/* Pathological inputs (STYLE 13): every one gives a clean error or a valid module,
 * never a crash or a hang. Run under `make asan` too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "hlo.h"

/* Parses src; true when the outcome is clean: a module that passes graph_check,
 * or no module and a "file:line:col: " diagnostic. *msg gets the diagnostics. */
static bool clean(const char *src, size_t n, bool *parsed, char **msg) {
    diag d;
    diag_init(&d, "p.hlo");
    hlo_module *m = hlo_parse_text(src, n, "p.hlo", &d);
    bool ok;
    if (m) {
        ok = graph_check(m, NULL) == 0;
    } else {
        int line, col;
        ok = d.count > 0 && d.out.s && sscanf(d.out.s, "p.hlo:%d:%d: ", &line, &col) == 2 && line > 0 && col > 0;
    }
    if (parsed) *parsed = m != NULL;
    if (msg) *msg = xstrdup(d.out.s ? d.out.s : "");
    graph_free(m);
    diag_free(&d);
    return ok;
}

static void expect_error(const char *name, const char *src, const char *needle) {
    t_case("pathological %s", name);
    bool parsed;
    char *msg;
    CHECK(clean(src, strlen(src), &parsed, &msg));
    CHECK_MSG(!parsed, "should have been refused");
    CHECK_CONTAINS(msg, needle);
    free(msg);
}

static void truncations(const char *path) {
    size_t n;
    char *src = t_read(path, &n);
    if (!src) return;
    t_case("truncated %s at every line", path);
    int bad = 0, cuts = 0, modules = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && src[i] != '\n') continue;
        char saved = src[i];
        src[i] = 0;
        bool parsed;
        if (!clean(src, i, &parsed, NULL)) bad++;
        modules += parsed;
        src[i] = saved;
        cuts++;
    }
    CHECK_MSG(bad == 0, "%d of %d truncations were not clean", bad, cuts);
    CHECK(cuts > 10);
    printf("note: %s: %d truncations, %d still a valid module\n", path, cuts, modules);
    free(src);
}

static char *repeat(const char *pre, const char *unit, size_t times, const char *post) {
    strbuf b;
    sb_init(&b);
    sb_puts(&b, pre);
    for (size_t i = 0; i < times; i++) sb_puts(&b, unit);
    sb_puts(&b, post);
    return sb_take(&b);
}

void suite_pathological(void);
void suite_pathological(void) {
    truncations("tests/cases/variants.hlo");
    /* A real JAX dump when the samples are present. */
    char **list = t_list("samples/tiny", ".dist.hlo");
    if (list[0]) truncations(list[0]);
    t_free_list(list);

    expect_error("undefined operand", "ENTRY e {\n p = f32[] parameter(0)\n ROOT n = f32[] negate(q)\n}\n",
                 "p.hlo:3:24: operand 'q' is not defined before its use");
    expect_error("later operand", "ENTRY e {\n p = f32[] parameter(0)\n a = f32[] negate(b)\n ROOT b = f32[] negate(p)\n}\n",
                 "operand 'b' is not defined before its use");
    expect_error("self operand", "ENTRY e {\n ROOT a = f32[] negate(a)\n}\n", "operand 'a' is not defined");
    expect_error("call cycle",
                 "a {\n p = f32[] parameter(0)\n ROOT c = f32[] call(p), to_apply=b\n}\n"
                 "b {\n p = f32[] parameter(0)\n ROOT c = f32[] call(p), to_apply=a\n}\n"
                 "ENTRY e {\n p = f32[] parameter(0)\n ROOT c = f32[] call(p), to_apply=a\n}\n",
                 "cycle");
    expect_error("dot dimension out of range",
                 "ENTRY e {\n x = f32[4,3] parameter(0)\n w = f32[3,4] parameter(1)\n"
                 " ROOT d = f32[4,4] dot(x, w), lhs_contracting_dims={9}, rhs_contracting_dims={0}\n}\n",
                 "lhs_contracting_dims names dimension 9, out of range");
    expect_error("transpose dimension out of range",
                 "ENTRY e {\n x = f32[4,3] parameter(0)\n ROOT t = f32[3,4] transpose(x), dimensions={1,2}\n}\n",
                 "dimensions names dimension 2, out of range");
    expect_error("transpose not a permutation",
                 "ENTRY e {\n x = f32[4,4] parameter(0)\n ROOT t = f32[4,4] transpose(x), dimensions={1,1}\n}\n",
                 "dimensions is not a permutation");
    expect_error("broadcast dimension negative",
                 "ENTRY e {\n x = f32[4] parameter(0)\n ROOT b = f32[4,3] broadcast(x), dimensions={-1}\n}\n",
                 "dimensions names dimension -1, out of range");
    expect_error("scatter window dimension out of range",
                 "add {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n ROOT s = f32[] add(x, y)\n}\n"
                 "ENTRY e {\n o = f32[4,3] parameter(0)\n i = s32[2,1] parameter(1)\n u = f32[2,3] parameter(2)\n"
                 " ROOT r = f32[4,3] scatter(o, i, u), update_window_dims={7}, inserted_window_dims={0}, "
                 "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add\n}\n",
                 "p.hlo:10:2: e: r: update_window_dims names dimension 7, out of range");
    expect_error("gather index_vector_dim out of range",
                 "ENTRY e {\n t = f32[8,4] parameter(0)\n i = s32[3,1] parameter(1)\n"
                 " ROOT r = f32[3,4] gather(t, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
                 "index_vector_dim=5, slice_sizes={1,4}\n}\n",
                 "index_vector_dim names dimension 5, out of range");
    expect_error("gather start_index_map out of range",
                 "ENTRY e {\n t = f32[8,4] parameter(0)\n i = s32[3,1] parameter(1)\n"
                 " ROOT r = f32[3,4] gather(t, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={2}, "
                 "index_vector_dim=1, slice_sizes={1,4}\n}\n",
                 "start_index_map names dimension 2, out of range");
    expect_error("dynamic_slice_sizes disagree with the shape",  /* was a checker mutation test; now refused on reading */
                 "ENTRY e {\n a = f32[8,4] parameter(0)\n i = s32[] parameter(1)\n"
                 " ROOT r = f32[2,4] dynamic-slice(a, i, i), dynamic_slice_sizes={2,7}\n}\n",
                 "p.hlo:4:2: e: r: dynamic_slice_sizes differ from the result's dims");
    expect_error("self call", "ENTRY e {\n p = f32[] parameter(0)\n ROOT c = f32[] call(p), to_apply=e\n}\n", "cycle");
    expect_error("unknown computation", "ENTRY e {\n p = f32[] parameter(0)\n ROOT c = f32[] call(p), to_apply=nope\n}\n",
                 "p.hlo:3:35: unknown computation 'nope'");
    expect_error("dimension 2^62", "ENTRY e {\n ROOT p = f32[4611686018427387904] parameter(0)\n}\n", "invalid shape");
    expect_error("element count overflow", "ENTRY e {\n ROOT p = f32[4294967296,4294967296] parameter(0)\n}\n",
                 "element count overflows");
    expect_error("dimension beyond int64", "ENTRY e {\n ROOT p = f32[99999999999999999999] parameter(0)\n}\n",
                 "does not fit in 64 bits");
    expect_error("negative dimension", "ENTRY e {\n ROOT p = f32[-3] parameter(0)\n}\n", "negative");
    expect_error("empty input", "", "no computations");
    expect_error("only comments", "// nothing\n/* here */\n", "no computations");
    expect_error("unknown element type", "ENTRY e {\n ROOT p = q17[2] parameter(0)\n}\n", "unknown element type 'q17'");
    expect_error("two roots", "ENTRY e {\n ROOT p = f32[] parameter(0)\n ROOT n = f32[] negate(p)\n}\n", "second ROOT");
    expect_error("two entries", "ENTRY a {\n ROOT p = f32[] parameter(0)\n}\nENTRY b {\n ROOT p = f32[] parameter(0)\n}\n",
                 "second ENTRY");
    expect_error("duplicate name", "ENTRY e {\n p = f32[] parameter(0)\n p = f32[] negate(p)\n}\n", "defined twice");
    expect_error("missing parameter", "ENTRY e {\n p = f32[] parameter(1)\n}\n", "has no parameter 0");
    expect_error("duplicate parameter", "ENTRY e {\n p = f32[] parameter(0)\n q = f32[] parameter(0)\n}\n", "used twice");
    expect_error("unterminated computation", "ENTRY e {\n p = f32[] parameter(0)\n", "found end of input");
    expect_error("unterminated string", "ENTRY e {\n p = f32[] parameter(0), metadata={op_name=\"abc\n}\n", "expected a string");
    expect_error("unterminated comment", "ENTRY e {\n p = f32[] parameter(0) /* never closed\n}\n", "end of input");
    expect_error("literal too short", "ENTRY e {\n ROOT c = f32[3] constant({1, 2})\n}\n", "has 2 values but its shape holds 3");
    expect_error("literal too long", "ENTRY e {\n ROOT c = f32[1] constant({1, 2})\n}\n", "more than the 1 values");
    expect_error("bad literal", "ENTRY e {\n ROOT c = s32[] constant(12abc)\n}\n", "invalid s32 value");
    expect_error("NUL byte", "ENTRY e {\n ROOT p = f32[] parameter(0)\0\n}\n", "");
    expect_error("bad iota groups",
                 "r {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
                 "ENTRY e {\n p = f32[] parameter(0)\n ROOT x = f32[] all-reduce(p), replica_groups=[2,4]<=[6], to_apply=r\n}\n",
                 "do not cover");
    expect_error("bad stack frame", "FileNames\n1 \"a.py\"\nFileLocations\n1 {file_name_id=3 function_name_id=0 line=1}\n"
                 "ENTRY e {\n ROOT p = f32[] parameter(0)\n}\n", "names a missing file");

    /* 10,000 nested braces: kept as raw text when balanced, refused when not. */
    t_case("pathological 10000 nested braces, balanced");
    char *s = repeat("ENTRY e {\n ROOT p = f32[] parameter(0), deep=", "{", 10000, "");
    char *s2 = repeat(s, "}", 10000, "\n}\n");
    bool parsed;
    CHECK(clean(s2, strlen(s2), &parsed, NULL) && parsed);
    free(s);
    free(s2);
    s = repeat("ENTRY e {\n ROOT p = f32[] parameter(0), deep=", "{", 10000, "\n}\n");
    expect_error("10000 nested braces, unbalanced", s, "unbalanced");
    free(s);
    s = repeat("ENTRY e {\n ROOT p = ", "(", 10000, "f32[]) parameter(0)\n}\n");
    expect_error("10000 nested tuple shapes", s, "nesting deeper than");
    free(s);
    s = repeat("ENTRY e {\n ROOT c = f32[] constant(", "{", 10000, "1");
    s2 = repeat(s, "}", 10000, ")\n}\n");
    t_case("pathological 10000 nested literal braces");
    CHECK(clean(s2, strlen(s2), &parsed, NULL));
    free(s);
    free(s2);
    s = repeat("ENTRY e {\n ROOT p = (f32[]) parameter(0), sharding=", "{", 5000, "replicated");
    s2 = repeat(s, "}", 5000, "\n}\n");
    expect_error("5000 nested tuple shardings", s2, "nesting deeper than");
    free(s);
    free(s2);

    /* A 100 MB single line: a huge unknown attribute, then an error at its end. */
    t_case("pathological 100 MB line");
    size_t big = 100u << 20;
    char *line = xmalloc(big + 200);
    strcpy(line, "ENTRY e {\n ROOT p = f32[] parameter(0), blob=\"");
    size_t k = strlen(line);
    memset(line + k, 'x', big);
    k += big;
    strcpy(line + k, "\", oops=\n}\n");
    double t0 = now_ms();
    char *msg;
    CHECK(clean(line, strlen(line), &parsed, &msg));
    CHECK(!parsed);
    CHECK(strlen(msg) < 1000);
    printf("note: 100 MB line refused in %.0f ms\n", now_ms() - t0);
    free(msg);
    free(line);
}
