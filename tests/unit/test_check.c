/* The checker on the sample corpus (the tiny configs; full-size pairs run in
 * `make bench`). Acceptance properties asserted for every pair:
 *   - no false alarm: a correct pair is never "mismatch";
 *   - no bug verified: a bug variant is never "verified";
 *   - every trace validates against docs/trace.schema.json.
 * And the current state, pair by pair, against tests/cases/check/expected.tsv
 * (verdict and, for mismatches, the first finding kind), so progress and
 * regressions both show. Mutations of a verified pair must not stay verified.
 * Checks run with witnesses: a pair the rules leave undecided becomes a
 * mismatch when execution shows different outputs; a mismatch found only that
 * way must carry its witness. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hlo.h"
#include "harness.h"
#include "jschema.h"

static char *expected_line(const char *tsv, const char *name) {
    size_t n = strlen(name);
    for (const char *p = tsv; p && *p;) {
        const char *e = strchr(p, '\n');
        if (!e) e = p + strlen(p);
        if ((size_t)(e - p) > n && strncmp(p, name, n) == 0 && p[n] == '\t') return xstrndup(p + n + 1, (size_t)(e - p - n - 1));
        p = *e ? e + 1 : e;
    }
    return NULL;
}

static int run_with(const char *name, const char *b, const char *d, const char *r, bool witness, bool no_memo, json_t **trace) {
    check_opts o = {.name = name, .baseline = b, .distributed = d, .witness = witness, .no_memo = no_memo};
    if (r && strcmp(r, "auto") != 0) o.relations = r;
    else o.auto_relations = true;
    diag dg;
    diag_init(&dg, name);
    int v = check_pair(&o, trace, &dg);
    if (v == VERDICT_ERROR) printf("check %s: %s", name, dg.out.s ? dg.out.s : "");
    diag_free(&dg);
    return v;
}

/* The paths of a manifest pair in one form ("hlo" or "pb"); r gets NULL for
 * automatic relations. */
static void pair_paths(json_t *p, const char *form, char b[1024], char d[1024], char r[1024], const char **rel) {
    snprintf(b, 1024, "samples/%s", json_string_value(json_object_get(json_object_get(p, "baseline"), form)));
    snprintf(d, 1024, "samples/%s", json_string_value(json_object_get(json_object_get(p, "distributed"), form)));
    const char *rv = json_string_value(json_object_get(p, "relations"));
    snprintf(r, 1024, "samples/%s", rv);
    *rel = strcmp(rv, "auto") ? r : NULL;
}

static int run(const char *name, const char *b, const char *d, const char *r, bool no_memo, json_t **trace) {
    return run_with(name, b, d, r, true, no_memo, trace);
}

/* Memoisation changes nothing but time: checked again without the segment
 * memo, a pair has the same verdict, findings and segment verdicts as v and
 * memo (its result and trace with the memo). Returns the memo hits. */
static json_int_t same_without_memo(const char *name, const char *b, const char *d, const char *r, bool witness, int v,
                                    json_t *memo) {
    t_case("check %s: the same without the segment memo", name);
    json_t *plain = NULL;
    int pv = run_with(name, b, d, r, witness, true, &plain);
    CHECK_MSG(pv == v, "verdict %s with the memo, %s without", verdict_name(v), verdict_name(pv));
    json_int_t hits = 0;
    if (memo && plain) {
        CHECK_MSG(json_equal(json_object_get(memo, "findings"), json_object_get(plain, "findings")), "findings differ");
        json_t *sa = json_object_get(memo, "segments"), *sb = json_object_get(plain, "segments");
        bool same = json_array_size(sa) == json_array_size(sb);
        for (size_t k = 0; same && k < json_array_size(sa); k++)
            same = json_equal(json_object_get(json_array_get(sa, k), "verdict"), json_object_get(json_array_get(sb, k), "verdict")) &&
                   json_equal(json_object_get(json_array_get(sa, k), "name"), json_object_get(json_array_get(sb, k), "name"));
        CHECK_MSG(same, "segment verdicts differ");
        hits = json_integer_value(json_object_get(json_object_get(memo, "summary"), "memo_hits"));
        CHECK(json_integer_value(json_object_get(json_object_get(plain, "summary"), "memo_hits")) == 0);
    }
    json_decref(plain);
    return hits;
}

static void mutations(void) {
    const char *base = "samples/tiny-moe/tiny-moe-router-step.baseline.hlo";
    const char *dist = "samples/tiny-moe/tiny-moe.router_grad_sp.tp4.dist.hlo";
    const char *rel = "samples/tiny-moe/tiny-moe.router_grad_sp.tp4.relations.json";
    size_t n;
    char *src = t_read(dist, &n);
    if (!src) return;
    static const struct { const char *what, *from, *to; } muts[] = {
        {"smaller replica groups", "replica_groups={{0,1,2,3}}", "replica_groups={{0,1},{2,3}}"},
        {"reduction max instead of sum", "to_apply=%region_8.9", "to_apply=%region_8.9.max"},
        {"all-reduce deleted", "all-reduce(%transpose.8), channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true, to_apply=%region_8.9", "copy(%transpose.8)"},
    };
    for (size_t k = 0; k < ARRAY_LEN(muts); k++) {
        t_case("check mutation: %s", muts[k].what);
        char *hit = strstr(src, muts[k].from);
        if (!CHECK_MSG(hit != NULL, "pattern not in %s", dist)) continue;
        strbuf b;
        sb_init(&b);
        sb_put(&b, src, (size_t)(hit - src));
        sb_puts(&b, muts[k].to);
        sb_puts(&b, hit + strlen(muts[k].from));
        if (strstr(muts[k].to, ".max")) {
            /* A max reducer beside the sum one. */
            sb_puts(&b, "\n%region_8.9.max {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
                        "  ROOT %m = f32[] maximum(%a, %b)\n}\n");
        }
        FILE *f = fopen("build/check-mutant.hlo", "w");
        fwrite(b.s, 1, b.len, f);
        fclose(f);
        sb_free(&b);
        json_t *trace = NULL;
        int v = run("mutant", base, "build/check-mutant.hlo", rel, false, &trace);
        CHECK_MSG(v != VERDICT_VERIFIED && v != VERDICT_ERROR, "verdict %s", verdict_name(v));
        json_decref(trace);
    }
    free(src);
}

void suite_check(void);
void suite_check(void) {
    json_error_t err;
    json_t *manifest = json_load_file("samples/manifest.json", 0, &err);
    json_t *schema = json_load_file("docs/trace.schema.json", 0, &err);
    char *tsv = t_read("tests/cases/check/expected.tsv", NULL);
    t_case("check inputs present");
    if (!CHECK(manifest && schema && tsv)) return;
    json_t *pairs = json_object_get(manifest, "pairs");
    system("rm -rf build/check-traces && mkdir -p build/check-traces");

    /* Every sample of the manifest reads, in both forms. */
    for (size_t i = 0; i < json_array_size(pairs); i++) {
        json_t *p = json_array_get(pairs, i);
        const char *sides[2] = {"baseline", "distributed"}, *forms[2] = {"hlo", "pb"};
        for (int sd = 0; sd < 2; sd++)
            for (int f = 0; f < 2; f++) {
                const char *rel = json_string_value(json_object_get(json_object_get(p, sides[sd]), forms[f]));
                t_case("check manifest %s %s.%s", json_string_value(json_object_get(p, "name")), sides[sd], forms[f]);
                if (!CHECK(rel != NULL)) continue;
                char path[1024];
                snprintf(path, sizeof path, "samples/%s", rel);
                diag dg;
                diag_init(&dg, path);
                hlo_module *m = hlo_read_file(path, &dg);
                CHECK_MSG(m != NULL, "%s", dg.out.s ? dg.out.s : "");
                graph_free(m);
                diag_free(&dg);
            }
    }
    int counts[4] = {0};
    json_int_t memo_hits = 0;
    strbuf now;
    sb_init(&now);
    for (size_t i = 0; i < json_array_size(pairs); i++) {
        json_t *p = json_array_get(pairs, i);
        const char *name = json_string_value(json_object_get(p, "name"));
        if (strncmp(name, "tiny", 4) != 0) continue;
        char b[1024], d[1024], r[1024];
        const char *relf;
        pair_paths(p, "hlo", b, d, r, &relf);
        bool bug = strcmp(json_string_value(json_object_get(p, "expected")), "mismatch") == 0;
        json_t *trace = NULL;
        int v = run(name, b, d, relf, false, &trace);
        counts[v]++;
        t_case("check %s", name);
        CHECK_MSG(v != VERDICT_ERROR, "bad input");
        if (bug) CHECK_MSG(v != VERDICT_VERIFIED, "a bug variant was verified");
        else CHECK_MSG(v != VERDICT_MISMATCH, "false alarm on a correct pair");
        const char *kind = "";
        if (trace) {
            strbuf errs;
            sb_init(&errs);
            CHECK_MSG(jschema_validate(schema, trace, &errs) == 0, "trace violates the schema: %s", errs.s ? errs.s : "");
            sb_free(&errs);
            json_t *f0 = json_array_get(json_object_get(trace, "findings"), 0);
            if (v == VERDICT_MISMATCH && f0) kind = json_string_value(json_object_get(f0, "kind"));
            json_t *fs = json_object_get(trace, "findings");
            bool by_rules = false;
            for (size_t f = 0; f < json_array_size(fs); f++) {
                const char *msg = json_string_value(json_object_get(json_array_get(fs, f), "message"));
                const char *sev = json_string_value(json_object_get(json_array_get(fs, f), "severity"));
                by_rules |= strcmp(sev, "error") == 0 && !strstr(msg, "confirmed by execution");
            }
            if (bug && v == VERDICT_MISMATCH && by_rules) {
                /* A finding from the transfer functions names a kind the catalogue expects. */
                json_t *kinds = json_object_get(json_object_get(p, "bug"), "kinds");
                bool any = false;
                for (size_t k = 0; k < json_array_size(kinds); k++)
                    for (size_t f = 0; f < json_array_size(fs); f++)
                        any |= strcmp(json_string_value(json_array_get(kinds, k)),
                                      json_string_value(json_object_get(json_array_get(fs, f), "kind"))) == 0;
                CHECK_MSG(any, "no finding of the expected kinds");
            } else if (v == VERDICT_MISMATCH) {
                /* Confirmed by execution only: the witness shows a real difference. */
                json_t *wj = json_object_get(json_array_get(fs, json_array_size(fs) - 1), "witness");
                json_t *rel = json_object_get(wj, "max_rel");
                CHECK_MSG(wj && (json_is_string(rel) || json_number_value(rel) > 0.01), "a mismatch by execution needs a witness");
            }
        }
        memo_hits += same_without_memo(name, b, d, relf, true, v, trace);
        char got[128];
        snprintf(got, sizeof got, "%s%s%s", verdict_name(v), *kind ? " " : "", kind);
        /* The first finding says whether rules or execution decided. */
        sb_printf(&now, "%s\t%s\n", name, got);
        char *want = expected_line(tsv, name);
        CHECK_MSG(want && strcmp(want, got) == 0, "now \"%s\", tests/cases/check/expected.tsv says \"%s\"", got, want ? want : "(missing)");
        free(want);
        if (trace) {
            /* Kept for the report test below: real traces of the samples. */
            char path[1024];
            snprintf(path, sizeof path, "build/check-traces/%s.trace.json", name);
            json_dump_file(trace, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        }
        json_decref(trace);
    }
    printf("note: tiny pairs: %d verified, %d mismatch, %d unverified, %d error\n", counts[0], counts[1], counts[2], counts[3]);
    /* The tiny configs have two layers, the first holding what XLA shares
     * between layers: too few for a hit. The 8B Megatron pairs (32 layers) show
     * the memo at work, on the correct program and on both bug variants. */
    for (size_t i = 0; i < json_array_size(pairs); i++) {
        json_t *p = json_array_get(pairs, i);
        const char *name = json_string_value(json_object_get(p, "name"));
        if (strncmp(name, "llama3.1-8b.megatron_tp.", 24) != 0) continue;
        char b[1024], d[1024], r[1024];
        const char *relf;
        pair_paths(p, "pb", b, d, r, &relf);
        json_t *trace = NULL;
        int v = run_with(name, b, d, relf, false, false, &trace);
        json_int_t h = same_without_memo(name, b, d, relf, false, v, trace);
        json_decref(trace);
        bool bug = strcmp(json_string_value(json_object_get(p, "expected")), "mismatch") == 0;
        CHECK_MSG(bug ? v != VERDICT_VERIFIED : v == VERDICT_VERIFIED, "verdict %s", verdict_name(v));
        printf("note: %s: %s, %lld segments from the memo\n", name, verdict_name(v), (long long)h);
        memo_hits += h;
    }
    t_case("check: the segment memo is used");
    CHECK_MSG(memo_hits > 0, "no segment was a memo hit");

    t_case("check traces render as a report");
    int st;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf build/check-site && %s report build/check-traces/*.trace.json -o build/check-site "
                              "&& ls build/check-site | grep -c html", t_scalify());
    char *out = t_run(cmd, &st);
    CHECK_MSG(st == 0 && atoi(out) > 40, "status %d: %.300s", st, out);
    free(out);
    if (getenv("SCALIFY_UPDATE_GOLDEN")) {
        FILE *f = fopen("tests/cases/check/expected.tsv", "w");
        fputs(now.s ? now.s : "", f);
        fclose(f);
    }
    sb_free(&now);
    free(tsv);
    json_decref(manifest);
    json_decref(schema);
    mutations();
}
