#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "harness.h"
#include "util.h"

void suite_util(void);
void suite_util(void) {
    t_case("util-1 strbuf");
    strbuf b;
    sb_init(&b);
    sb_printf(&b, "%d-%s", 7, "x");
    sb_put_escaped(&b, "a\"b\\\n", 5);
    CHECK_STR(b.s, "7-xa\\\"b\\\\\\n");
    sb_free(&b);

    t_case("util-2 strmap");
    strmap m;
    strmap_init(&m);
    char keys[1000][16];
    for (int i = 0; i < 1000; i++) {
        snprintf(keys[i], sizeof keys[i], "k%d", i);
        strmap_put(&m, keys[i], strlen(keys[i]), (uint32_t)i * 3);
    }
    uint32_t v = 0;
    CHECK(strmap_get(&m, "k777", 4, &v));
    CHECK_EQ(v, 2331);
    CHECK(!strmap_get(&m, "k1000", 5, &v));
    CHECK(strmap_key(&m, "k5", 2) == keys[5]);
    strmap_free(&m);

    t_case("util-3 arena");
    arena a;
    arena_init(&a);
    char *big = arena_alloc(&a, 1 << 20);
    char *small = arena_strdup(&a, "hello");
    big[(1 << 20) - 1] = 1;
    CHECK_STR(small, "hello");
    CHECK(((uintptr_t)arena_alloc(&a, 3) & 7) == 0);
    /* reset: one block holds a second round as large as the first, zeroed */
    arena_reset(&a);
    size_t total = a.total;
    char *again = arena_alloc(&a, 1 << 20);
    CHECK(again[0] == 0 && again[(1 << 20) - 1] == 0);
    CHECK(arena_alloc(&a, 100) != NULL);
    CHECK_EQ(a.total, total);
    arena_free(&a);

    t_case("util-4 diag caret");
    diag d;
    diag_init(&d, "f.hlo");
    const char *src = "line one\n  bad token here\n";
    diag_text(&d, src, strlen(src), 11, "unexpected '%s'", "bad");
    CHECK_STR(d.out.s, "f.hlo:2:3: unexpected 'bad'\n    bad token here\n    ^\n");
    CHECK_EQ(d.count, 1);
    diag_free(&d);

    t_case("util-5 diag long line is windowed");
    diag_init(&d, "f.hlo");
    size_t n = 1000000;
    char *line = malloc(n + 1);
    memset(line, 'x', n);
    line[n] = 0;
    diag_text(&d, line, n, 500000, "here");
    CHECK(d.out.len < 400);
    CHECK_CONTAINS(d.out.s, "f.hlo:1:500001: here");
    free(line);
    diag_free(&d);
}
