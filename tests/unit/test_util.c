#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag.h"
#include "harness.h"
#include "hlo.h"
#include "pwidx.h"
#include "sha256.h"
#include "shape.h"
#include "util.h"

/* pw_wrap_unsigned, against the value computed in uint32_t arithmetic for
 * every t in [0, 600) (and a few near 2^32 - 1): t - 300, 7 - t, the
 * constants -5 and 2^32 + 3, and a piecewise clamp(t, 10, 20) - 15. */
static void pw_wrap(void) {
    t_case("util-pw wrapping as u32");
    pw_fn f[5], w;
    pw_shift(&f[0], -300);
    f[1].n = 0;
    pw_push(&f[1], PW_NEG_INF, PW_POS_INF, -1, 7);
    pw_const(&f[2], -5);
    pw_const(&f[3], ((int64_t)1 << 32) + 3);
    f[4].n = 0;
    pw_push(&f[4], PW_NEG_INF, 10, 0, -5);
    pw_push(&f[4], 10, 20, 1, -15);
    pw_push(&f[4], 20, PW_POS_INF, 0, 5);
    for (int k = 0; k < 5; k++) {
        if (!CHECK_MSG(pw_wrap_unsigned(&f[k], 32, &w), "function %d", k)) continue;
        int64_t ts[605];
        int nt = 0;
        for (int64_t t = 0; t < 600; t++) ts[nt++] = t;
        for (int64_t t = 0; t < 5; t++) ts[nt++] = ((int64_t)1 << 32) - 1 - t;
        for (int q = 0; q < nt; q++) {
            int64_t t = ts[q], v = 0, got = 0;
            uint32_t u = 0;
            switch (k) {
            case 0: u = (uint32_t)t - 300u; break;
            case 1: u = 7u - (uint32_t)t; break;
            case 2: u = (uint32_t)-5; break;
            case 3: u = 3u; break;
            default: u = (uint32_t)(t < 10 ? -5 : t < 20 ? t - 15 : 5); break;
            }
            v = u;
            for (uint32_t i = 0; i < w.n; i++)
                if (w.p[i].lo <= t && t < w.p[i].hi) got = w.p[i].a * t + w.p[i].b;
            if (!CHECK_MSG(got == v, "function %d at t=%lld: %lld, want %lld", k, (long long)t, (long long)got, (long long)v))
                break;
        }
    }
    pw_fn g;
    pw_fn h;
    h.n = 0;
    pw_push(&h, PW_NEG_INF, PW_POS_INF, 2, 0);
    CHECK_MSG(!pw_wrap_unsigned(&h, 32, &g), "slope 2 is refused");
}

/* Rounding to the narrow float formats (shape.c, dtype_round): every code
 * decoded rounds to itself, ties go to the even code, and beyond the
 * largest finite value a format without infinity gives NaN. */
static void narrow_rounding(void) {
    t_case("util-0 fp8 rounding");
    static const int fmts[] = {DT_F8E4M3FN, DT_F8E5M2, DT_F8E4M3FNUZ, DT_F8E5M2FNUZ, DT_F8E4M3B11FNUZ};
    for (size_t k = 0; k < sizeof fmts / sizeof *fmts; k++)
        for (uint32_t c = 0; c < 256; c++) {
            double v = hlo_float_decode(fmts[k], c);
            if (isnan(v)) continue;
            CHECK_MSG(dtype_round(fmts[k], v) == v, "%s code %u (%g) does not round to itself", dtype_name(fmts[k]), c, v);
        }
    CHECK(dtype_round(DT_F8E4M3FN, 460) == 448);   /* quantum 32 at 256..448 */
    CHECK(dtype_round(DT_F8E4M3FN, 464) == 448);   /* a tie: 448 is the even code */
    CHECK(isnan(dtype_round(DT_F8E4M3FN, 465)));   /* no infinity: NaN */
    CHECK(dtype_round(DT_F8E4M3FN, 0.3) == 0.3125); /* 0.25 + 2·2^-5 */
    CHECK(dtype_round(DT_F8E4M3FN, 0x1p-10) == 0); /* half the smallest subnormal 2^-9: ties to zero */
    CHECK(dtype_round(DT_F8E5M2, 1e6) == INFINITY);
    CHECK(dtype_round(DT_F8E5M2, -61440) == -INFINITY); /* past 57344 + half a quantum */
    CHECK(!signbit(dtype_round(DT_F8E4M3FNUZ, -0.0)));  /* no negative zero */
}

/* Widening converts (shape.c, dtype_widens): every value of the source type
 * is one of the target's; a narrower, equally wide other, integer or
 * complex-to-real target is not. */
static void widening(void) {
    t_case("util-0 widening converts");
    static const int yes[][2] = {{DT_BF16, DT_F32}, {DT_F16, DT_F32}, {DT_F32, DT_F64}, {DT_BF16, DT_F64},
                                 {DT_F8E4M3FN, DT_F32}, {DT_F32, DT_C64}, {DT_BF16, DT_C64}, {DT_F64, DT_C128},
                                 {DT_C64, DT_C128}, {DT_F32, DT_F32}};
    static const int no[][2] = {{DT_F32, DT_BF16}, {DT_F64, DT_F32}, {DT_F16, DT_BF16}, {DT_BF16, DT_F16},
                                {DT_F64, DT_C64}, {DT_C64, DT_F32}, {DT_S32, DT_F32}, {DT_F32, DT_S32}, {DT_S32, DT_S32}};
    for (size_t k = 0; k < sizeof yes / sizeof *yes; k++)
        CHECK_MSG(dtype_widens(yes[k][0], yes[k][1]), "%s -> %s", dtype_name(yes[k][0]), dtype_name(yes[k][1]));
    for (size_t k = 0; k < sizeof no / sizeof *no; k++)
        CHECK_MSG(!dtype_widens(no[k][0], no[k][1]), "%s -> %s", dtype_name(no[k][0]), dtype_name(no[k][1]));
}

void suite_util(void);
void suite_util(void) {
    narrow_rounding();
    widening();
    pw_wrap();
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

    t_case("util-2 u32map");
    {
        u32map im = {0};
        uint32_t got = 0;
        CHECK(!u32map_get(&im, 7, &got));
        for (uint32_t k = 0; k < 5000; k++) u32map_put(&im, k * 7919u, k);
        u32map_put(&im, 0, 99); /* overwrite */
        CHECK(u32map_get(&im, 4999u * 7919u, &got) && got == 4999);
        CHECK(u32map_get(&im, 0, &got) && got == 99);
        CHECK(!u32map_get(&im, 3, &got));
        CHECK_EQ(im.len, 5000);
        u32map_free(&im);
        CHECK(!u32map_get(&im, 0, &got));
    }

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

    t_case("util-3.1 large arena: mapped blocks, zeroed, reset and reused");
    /* About 40 MB in small pieces and a few big ones: past the size where blocks
     * are mapped (and handed out without a memset); every piece reads zero,
     * also after a reset reuses the memory the first round dirtied. */
    for (int round = 0; round < 2; round++) {
        bool zero = true, aligned = true;
        size_t asked = 0;
        for (int i = 0; i < 200000; i++) {
            size_t sz = i % 20000 == 19999 ? (size_t)3 << 20 >> (i % 3) : 1 + (size_t)(i * 37 % 200);
            unsigned char *q = arena_alloc(&a, sz);
            asked += sz;
            aligned &= ((uintptr_t)q & 7) == 0;
            zero &= q[0] == 0 && q[sz - 1] == 0 && q[sz / 2] == 0;
            memset(q, 0xa5, sz);
        }
        CHECK(zero);
        CHECK(aligned);
        CHECK(arena_used(&a) >= asked && arena_used(&a) <= a.total);
        if (round == 0) arena_reset(&a);
    }
    arena_free(&a);
    CHECK(a.head == NULL && a.total == 0);

    t_case("util-3.15 arena_expect: one first block as large as announced");
    arena_expect(&a, (size_t)10 << 20);
    size_t first = a.total;
    CHECK(first >= (size_t)10 << 20);
    bool zero = true;
    for (int i = 0; i < 100000; i++) {
        unsigned char *q = arena_alloc(&a, 96);
        zero &= q[0] == 0 && q[95] == 0;
        q[0] = q[95] = 1;
    }
    CHECK(zero);
    CHECK_EQ(a.total, first); /* 9.6 MB fit in the first block */
    arena_expect(&a, (size_t)20 << 20); /* not empty: no effect */
    CHECK_EQ(a.total, first);
    arena_free(&a);

    t_case("util-3.2 sha256: FIPS 180-4 examples, and the portable and hardware paths agree");
    {
        static const struct {
            const char *in;
            const char *hex;
        } known[] = {
            {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
            {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
            {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
             "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        };
        for (size_t k = 0; k < ARRAY_LEN(known); k++)
            for (int hw = 0; hw < 2; hw++) {
                uint8_t h[32];
                char hex[65];
                (hw ? sha256 : sha256_portable)(known[k].in, strlen(known[k].in), h);
                for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", h[i]);
                CHECK_STR(hex, known[k].hex);
            }
        /* a million 'a's, and every length around the block and padding edges */
        size_t million = 1000000;
        unsigned char *buf = malloc(million);
        memset(buf, 'a', million);
        uint8_t h1[32], h2[32];
        sha256(buf, million, h1);
        char hex[65];
        for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", h1[i]);
        CHECK_STR(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
        uint32_t x = 12345;
        for (size_t i = 0; i < 1000; i++) buf[i] = (unsigned char)((x = x * 1103515245 + 12345) >> 16);
        bool same = true;
        for (size_t len = 0; len <= 1000; len++) {
            sha256(buf, len, h1);
            sha256_portable(buf, len, h2);
            same &= memcmp(h1, h2, 32) == 0;
        }
        CHECK(same);
        free(buf);
    }

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
