/* view tests: view strings (parse/print/equality/local dims), relations files
 * (every samples/ relations file, the bad cases under tests/cases/relations/,
 * pathological JSON) and relations inferred from GSPMD/Shardy annotations
 * (every gspmd pair of samples/manifest.json, plus hand-made shardings). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "harness.h"
#include "hlo.h"
#include "lift.h"
#include "view.h"

void suite_view(void);

static mesh mk_mesh(const char *a, int64_t sa, const char *b, int64_t sb) {
    mesh m;
    memset(&m, 0, sizeof m);
    if (a) {
        snprintf(m.names[m.naxes], sizeof m.names[0], "%s", a);
        m.sizes[m.naxes++] = sa;
    }
    if (b) {
        snprintf(m.names[m.naxes], sizeof m.names[0], "%s", b);
        m.sizes[m.naxes++] = sb;
    }
    return m;
}

static shape mk_shape(int64_t *dims, uint32_t rank) {
    shape s;
    memset(&s, 0, sizeof s);
    s.dtype = DT_F32;
    s.rank = rank;
    s.dims = dims;
    return s;
}

/* print(parse(in)) == want, and parse(print) gives the same view back. */
static void round_trip(const char *in, const char *want, const mesh *m, const shape *s) {
    view v, w;
    char why[256];
    if (!CHECK_MSG(view_parse(in, m, s, &v, why, sizeof why), "\"%s\": %s", in, why)) return;
    strbuf b;
    sb_init(&b);
    view_print(&b, &v, m);
    CHECK_STR(b.s, want);
    CHECK_MSG(view_parse(b.s, m, s, &w, why, sizeof why) && view_equal(&v, &w), "reparse of \"%s\"", b.s);
    sb_free(&b);
}

static void parse_fails(const char *in, const char *msg, const mesh *m, const shape *s) {
    view v;
    char why[256] = "";
    CHECK_MSG(!view_parse(in, m, s, &v, why, sizeof why), "\"%s\" parsed", in);
    CHECK_CONTAINS(why, msg);
}

static void views(void) {
    mesh m = mk_mesh("dp", 2, "tp", 4);
    int64_t d3[] = {8, 64, 128};
    shape s = mk_shape(d3, 3);

    t_case("view-1.1 round trips");
    round_trip("dup", "dup", &m, &s);
    round_trip("shard(1,tp)", "shard(1,tp)", &m, &s);
    round_trip("shard(2,tp) shard(0,dp)", "shard(0,dp) shard(2,tp)", &m, &s);
    round_trip("shard(0,(dp,tp))", "shard(0,(dp,tp))", &m, &s);
    round_trip("shard(0,(tp,dp))", "shard(0,(tp,dp))", &m, &s);
    round_trip("shard(0,(tp))", "shard(0,tp)", &m, &s);
    round_trip("partial(tp,sum)", "partial(tp,sum)", &m, &s);
    round_trip("partial(tp,sum) partial(dp,sum)", "partial((dp,tp),sum)", &m, &s);
    round_trip("partial((tp,dp),max)", "partial((dp,tp),max)", &m, &s);
    round_trip("partial(tp,min) shard(0,dp)", "shard(0,dp) partial(tp,min)", &m, &s);
    round_trip("partial(dp,prod)", "partial(dp,prod)", &m, &s);
    round_trip("  shard( 1 , tp )   shard(0, dp) ", "shard(0,dp) shard(1,tp)", &m, &s);

    t_case("view-1.2 parse errors");
    parse_fails("", "empty view", &m, &s);
    parse_fails("   ", "empty view", &m, &s);
    parse_fails("shard(3,tp)", "shard(3,...): the value has 3 dimensions", &m, &s);
    parse_fails("shard(99999999999999999999,tp)", "the value has 3 dimensions", &m, &s);
    parse_fails("shard(0,xp)", "unknown mesh axis 'xp' (the mesh has dp, tp)", &m, &s);
    parse_fails("shard(0,tp) shard(1,tp)", "mesh axis tp is used twice", &m, &s);
    parse_fails("shard(0,tp) partial(tp,sum)", "mesh axis tp is used twice", &m, &s);
    parse_fails("shard(0,dp) shard(0,tp)", "dimension 0 is sharded twice", &m, &s);
    parse_fails("dup shard(0,tp)", "\"dup\" cannot be combined", &m, &s);
    parse_fails("partial(tp,avg)", "unknown reduction 'avg'", &m, &s);
    parse_fails("partial(tp,sum) partial(dp,max)", "different reductions (sum and max)", &m, &s);
    parse_fails("shard(0,tp)shard(1,dp)", "terms must be separated by a space", &m, &s);
    parse_fails("shard(1,tp", "expected ')' to close shard(, found the end", &m, &s);
    parse_fails("shard(,tp)", "expected a dimension number", &m, &s);
    parse_fails("shard(0,())", "expected a mesh axis name", &m, &s);
    parse_fails("replicated", "unknown term 'replicated'", &m, &s);
    parse_fails("shard(0,dp", "expected ')'", &m, &s);
    parse_fails("partial(tp)", "expected ',' before the reduction", &m, &s);

    t_case("view-1.3 divisibility");
    mesh m3 = mk_mesh("tp", 3, NULL, 0);
    int64_t d2[] = {64, 64};
    shape s2 = mk_shape(d2, 2);
    parse_fails("shard(1,tp)", "mesh axis tp of size 3 does not divide dimension 1 (64)", &m3, &s2);
    int64_t d12[] = {12, 6};
    shape s12 = mk_shape(d12, 2);
    parse_fails("shard(1,(dp,tp))", "mesh axes (dp,tp) of size 8 do not divide dimension 1 (6)", &m, &s12);
    round_trip("shard(0,tp)", "shard(0,tp)", &m, &s12);
    int64_t dbig[] = {INT64_MAX, 4};
    shape sbig = mk_shape(dbig, 2);
    parse_fails("shard(0,tp)", "does not divide dimension 0", &m, &sbig);
    shape scalar = mk_shape(NULL, 0);
    round_trip("dup", "dup", &m, &scalar);
    round_trip("partial(tp,sum)", "partial(tp,sum)", &m, &scalar);
    parse_fails("shard(0,tp)", "the value has 0 dimensions", &m, &scalar);

    t_case("view-2.1 equality and predicates");
    view a, b, c;
    char why[256];
    CHECK(view_parse("shard(0,dp) shard(2,tp)", &m, &s, &a, why, sizeof why));
    CHECK(view_parse("shard(2,tp) shard(0,dp)", &m, &s, &b, why, sizeof why));
    CHECK(view_parse("shard(2,(dp,tp))", &m, &s, &c, why, sizeof why));
    CHECK(view_equal(&a, &b));
    CHECK(!view_equal(&a, &c));
    CHECK(!view_is_dup(&a));
    view dup3 = view_dup(3);
    CHECK(view_is_dup(&dup3));
    CHECK(!view_equal(&dup3, &a));
    view dup2 = view_dup(2);
    CHECK(!view_equal(&dup3, &dup2));
    CHECK_EQ(view_axes_used(&a), 3);
    CHECK_EQ(view_axes_used(&dup3), 0);
    CHECK_EQ(view_dim_parts(&a, &m, 0), 2);
    CHECK_EQ(view_dim_parts(&a, &m, 1), 1);
    CHECK_EQ(view_dim_parts(&a, &m, 2), 4);
    CHECK_EQ(view_dim_parts(&c, &m, 2), 8);
    CHECK_EQ(view_dim_parts(&c, &m, 7), 1);
    view p1, p2;
    CHECK(view_parse("partial(tp,sum)", &m, &s, &p1, why, sizeof why));
    CHECK(view_parse("partial(tp,max)", &m, &s, &p2, why, sizeof why));
    CHECK(!view_is_dup(&p1));
    CHECK(!view_equal(&p1, &p2));
    CHECK_EQ(view_axes_used(&p1), 2);
    CHECK_EQ(p1.red, RED_SUM);

    t_case("view-2.1b axes of size 1 name nothing");
    {
        mesh m81 = mk_mesh("dp", 8, "tp", 1);
        int64_t d31[] = {16, 8, 4};
        shape s3 = mk_shape(d31, 3);
        view u, w, pt;
        CHECK(view_parse("partial(tp,sum)", &m81, &s3, &pt, why, sizeof why));
        view_drop_unit_axes(&pt, &m81);
        CHECK(view_is_dup(&pt));
        CHECK(view_parse("shard(0,dp) shard(1,tp)", &m81, &s3, &u, why, sizeof why));
        CHECK(view_parse("shard(0,dp)", &m81, &s3, &w, why, sizeof why));
        CHECK(!view_equal(&u, &w));
        view_drop_unit_axes(&u, &m81);
        CHECK(view_equal(&u, &w));
        view_drop_unit_axes(&w, &m81);
        CHECK(view_equal(&u, &w));
        CHECK(view_parse("shard(0,dp)", &m, &s, &w, why, sizeof why)); /* no unit axes: unchanged */
        view w0 = w;
        view_drop_unit_axes(&w, &m);
        CHECK(view_equal(&w, &w0));
    }

    t_case("view-2.2 local dims");
    int64_t loc[3];
    CHECK(view_local_dims(&a, &m, &s, loc));
    CHECK(loc[0] == 4 && loc[1] == 64 && loc[2] == 32);
    CHECK(view_local_dims(&c, &m, &s, loc));
    CHECK_EQ(loc[2], 16);
    CHECK(view_local_dims(&dup3, &m, &s, loc));
    CHECK_EQ(loc[1], 64);
    int64_t d5[] = {5, 64, 128};
    shape s5 = mk_shape(d5, 3);
    CHECK(!view_local_dims(&a, &m, &s5, loc)); /* 5 rows over dp=2 */
    CHECK(!view_local_dims(&a, &m, &s2, loc)); /* rank differs */

    t_case("view-2.3 mesh helpers");
    CHECK_EQ(mesh_devices(&m), 8);
    CHECK_EQ(mesh_axis(&m, "tp", 2), 1);
    CHECK_EQ(mesh_axis(&m, "dpx", 2), 0);
    CHECK_EQ(mesh_axis(&m, "xx", 2), -1);
    CHECK_EQ(mesh_coord(&m, 6, 0), 1);
    CHECK_EQ(mesh_coord(&m, 6, 1), 2);
    CHECK_EQ(mesh_coord(&m, 3, 0), 0);
    strbuf mb;
    sb_init(&mb);
    mesh_print(&mb, &m);
    CHECK_STR(mb.s, "{dp:2, tp:4}");
    sb_free(&mb);

    t_case("view-2.4 normalize");
    mesh m1 = mk_mesh("dp", 1, "tp", 4);
    view n1, n2, n3;
    CHECK(view_parse("shard(0,(dp,tp))", &m1, &s, &n1, why, sizeof why));
    CHECK(view_parse("shard(0,tp)", &m1, &s, &n2, why, sizeof why));
    CHECK(!view_equal(&n1, &n2));
    view_normalize(&n1, &m1);
    CHECK(view_equal(&n1, &n2));
    CHECK(view_parse("partial(dp,sum)", &m1, &s, &n3, why, sizeof why));
    view_normalize(&n3, &m1);
    CHECK(view_is_dup(&n3));
}

/* ---- relations files ---- */

static char *sample_path(const char *rel) {
    size_t n = strlen("samples/") + strlen(rel) + 1;
    char *p = malloc(n);
    snprintf(p, n, "samples/%s", rel);
    return p;
}

static bool exists(const char *p) { return access(p, R_OK) == 0; }

/* Every view string of a relations file prints back canonically and reparses. */
static void reprint_views(const char *rp, const relations *r) {
    json_error_t je;
    json_t *j = json_load_file(rp, 0, &je);
    json_t *ins = json_object_get(j, "inputs");
    for (size_t i = 0; i < json_array_size(ins); i++) {
        json_t *e = json_array_get(ins, i);
        json_int_t k = json_integer_value(json_object_get(e, "param"));
        if (k < 0 || (uint64_t)k >= r->ninputs) continue;
        strbuf b;
        sb_init(&b);
        view_print(&b, &r->inputs[k], &r->mesh);
        const char *orig = json_string_value(json_object_get(e, "view"));
        /* the sample files are written canonically */
        CHECK_MSG(orig && strcmp(b.s, orig) == 0, "%s param %lld: \"%s\" printed \"%s\"", rp, (long long)k,
                  orig ? orig : "?", b.s);
        sb_free(&b);
    }
    json_decref(j);
}

static hlo_module *read_baseline(const char *path, diag *d) {
    diag_init(d, path);
    return hlo_read_file(path, d);
}

static int64_t manifest_devices(json_t *pair) {
    int64_t n = 1;
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(pair, "mesh"), k, v) n *= json_integer_value(v);
    return n;
}

static void sample_relations(json_t *man) {
    json_t *pairs = json_object_get(man, "pairs");
    int done = 0, skipped = 0;
    for (size_t i = 0; i < json_array_size(pairs); i++) {
        json_t *pair = json_array_get(pairs, i);
        const char *name = json_string_value(json_object_get(pair, "name"));
        const char *rel = json_string_value(json_object_get(pair, "relations"));
        const char *bl = json_string_value(json_object_get(json_object_get(pair, "baseline"), "hlo"));
        if (!name || !rel || !bl || strcmp(rel, "auto") == 0) continue;
        t_case("view-3 %s", name);
        char *rp = sample_path(rel), *bp = sample_path(bl);
        if (!exists(rp) || !exists(bp)) {
            printf("  view: %-52s skipped: files missing (samples being regenerated?)\n", name);
            skipped++;
            free(rp);
            free(bp);
            continue;
        }
        diag d;
        hlo_module *m = read_baseline(bp, &d);
        if (CHECK_MSG(m, "%s", d.out.s ? d.out.s : "")) {
            diag rd;
            diag_init(&rd, "unused");
            relations r;
            bool ok = relations_read(rp, m, &r, &rd);
            CHECK_MSG(ok, "%s", rd.out.s ? rd.out.s : "");
            if (ok) {
                const hlo_comp *c = graph_entry(m);
                CHECK_EQ(r.ninputs, c->nparams);
                CHECK_EQ(r.noutputs, 1);
                CHECK_EQ(mesh_devices(&r.mesh), manifest_devices(pair));
                /* mesh order is the manifest's (major to minor) */
                const char *k;
                json_t *v;
                uint32_t ax = 0;
                json_object_foreach(json_object_get(pair, "mesh"), k, v) {
                    CHECK_MSG(ax < r.mesh.naxes && strcmp(r.mesh.names[ax], k) == 0 &&
                                  r.mesh.sizes[ax] == json_integer_value(v),
                              "mesh axis %u is not %s", ax, k);
                    ax++;
                }
                for (uint32_t p = 0; p < r.ninputs; p++) {
                    int64_t loc[VIEW_MAX_RANK];
                    CHECK(view_local_dims(&r.inputs[p], &r.mesh, &c->instrs[c->params[p]].shape, loc));
                }
                reprint_views(rp, &r);
                relations_free(&r);
                done++;
            }
            diag_free(&rd);
            graph_free(m);
        }
        diag_free(&d);
        free(rp);
        free(bp);
    }
    printf("  view: %d relations files read against their baselines, %d skipped\n", done, skipped);
    CHECK_MSG(done > 10, "only %d relations files read (%d skipped)", done, skipped);
}

/* Each bad case NAME.json under tests/cases/relations/ is read against the tiny
 * baseline; NAME.expected lists substrings its diagnostics must contain. */
static void bad_relations(void) {
    diag d;
    hlo_module *m = read_baseline("samples/tiny/tiny.baseline.hlo", &d);
    diag_free(&d);
    t_case("view-4 tiny baseline");
    if (!CHECK(m)) return;
    char **files = t_list("tests/cases/relations", ".json");
    int n = 0;
    for (char **f = files; *f; f++, n++) {
        t_case("view-4 %s", *f);
        diag rd;
        diag_init(&rd, "caller.hlo");
        relations r;
        CHECK_MSG(!relations_read(*f, m, &r, &rd), "%s was accepted", *f);
        CHECK(r.inputs == NULL && r.ninputs == 0);
        CHECK(rd.count > 0);
        CHECK_STR(rd.file, "caller.hlo");
        const char *out = rd.out.s ? rd.out.s : "";
        /* every message names the file */
        size_t fl = strlen(*f);
        for (const char *line = out; *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : line + strlen(line))
            CHECK_MSG(strncmp(line, *f, fl) == 0 && line[fl] == ':', "message without the path: %.200s", line);
        char exp[512];
        snprintf(exp, sizeof exp, "%.*s.expected", (int)(fl - 5), *f);
        char *want = t_read(exp, NULL);
        if (CHECK_MSG(want, "%s missing", exp)) {
            for (char *line = strtok(want, "\n"); line; line = strtok(NULL, "\n"))
                if (*line) CHECK_CONTAINS(out, line);
        }
        free(want);
        diag_free(&rd);
    }
    t_free_list(files);
    t_case("view-4 count");
    CHECK(n >= 20);

    /* Pathological JSON: every prefix of a valid file, garbage bytes. None may
     * crash or be accepted (except the whole file). */
    t_case("view-5 truncations");
    size_t len;
    char *good = t_read("samples/tiny/tiny.megatron_tp.tp4.relations.json", &len);
    if (CHECK(good)) {
        char tmp[] = "/tmp/scalify-view-XXXXXX";
        int fd = mkstemp(tmp);
        CHECK(fd >= 0);
        if (fd >= 0) close(fd);
        int accepted = 0;
        for (size_t k = 0; k <= len; k += (k < 64 ? 1 : 7)) {
            FILE *fp = fopen(tmp, "wb");
            fwrite(good, 1, k, fp);
            fclose(fp);
            diag rd;
            diag_init(&rd, NULL);
            relations r;
            if (relations_read(tmp, m, &r, &rd)) {
                accepted++;
                relations_free(&r);
            }
            diag_free(&rd);
        }
        CHECK_EQ(accepted, 0);
        /* flip bytes into garbage */
        int flips_ok = 0;
        for (size_t k = 0; k < len; k += 13) {
            char saved = good[k];
            good[k] = (char)(k % 3 == 0 ? '[' : k % 3 == 1 ? '"' : 0x7f);
            FILE *fp = fopen(tmp, "wb");
            fwrite(good, 1, len, fp);
            fclose(fp);
            good[k] = saved;
            diag rd;
            diag_init(&rd, NULL);
            relations r;
            if (relations_read(tmp, m, &r, &rd)) {
                flips_ok++;
                relations_free(&r);
            } else {
                CHECK(rd.count > 0);
            }
            diag_free(&rd);
        }
        (void)flips_ok;
        /* deep nesting */
        FILE *fp = fopen(tmp, "wb");
        fputs("{\"scalify_relations\": 1, \"mesh\": {\"tp\": 4}, \"inputs\": ", fp);
        for (int k = 0; k < 100000; k++) fputc('[', fp);
        fclose(fp);
        diag rd;
        diag_init(&rd, NULL);
        relations r;
        CHECK(!relations_read(tmp, m, &r, &rd));
        diag_free(&rd);
        diag_init(&rd, NULL);
        CHECK(!relations_read("/nonexistent/x.relations.json", m, &r, &rd));
        CHECK_CONTAINS(rd.out.s, "/nonexistent/x.relations.json: ");
        diag_free(&rd);
        unlink(tmp);
    }
    free(good);

    t_case("view-5 outputs default to dup");
    {
        char tmp[] = "/tmp/scalify-view-XXXXXX";
        int fd = mkstemp(tmp);
        if (fd >= 0) close(fd);
        json_error_t je;
        json_t *j = json_load_file("samples/tiny/tiny.megatron_tp.tp4.relations.json", 0, &je);
        json_object_del(j, "outputs");
        json_object_del(j, "device_order");
        json_dump_file(j, tmp, 0);
        json_decref(j);
        diag rd;
        diag_init(&rd, NULL);
        relations r;
        bool ok = relations_read(tmp, m, &r, &rd);
        CHECK_MSG(ok, "%s", rd.out.s ? rd.out.s : "");
        if (ok) {
            CHECK_EQ(r.noutputs, 1);
            CHECK(view_is_dup(&r.outputs[0]));
            CHECK_EQ(r.outputs[0].rank, 3);
            CHECK_STR(r.input_names[6], "layers.0.w_gate");
            relations_free(&r);
        }
        diag_free(&rd);
        unlink(tmp);
    }
    graph_free(m);
}

/* A relations file reads the same whether its lists are plain (read from
 * the text) or not (jansson's: here, an extra key in every entry): the same
 * verdict, messages and relations. Over the bad cases and the tiny pair's. */
static void read_dumped(json_t *j, const char *tmp, hlo_module *m, bool *ok, strbuf *msgs, relations *r) {
    json_dump_file(j, tmp, 0);
    diag rd;
    diag_init(&rd, "caller.hlo");
    *ok = relations_read(tmp, m, r, &rd);
    sb_reset(msgs);
    if (rd.out.len) sb_put(msgs, rd.out.s, rd.out.len);
    diag_free(&rd);
}

static void plain_lists(void) {
    diag d;
    hlo_module *m = read_baseline("samples/tiny/tiny.baseline.hlo", &d);
    diag_free(&d);
    t_case("view-6 tiny baseline");
    if (!CHECK(m)) return;
    char tmp[] = "/tmp/scalify-view-XXXXXX";
    int fd = mkstemp(tmp);
    if (fd >= 0) close(fd);
    char **files = t_list("tests/cases/relations", ".json");
    int compared = 0;
    strbuf ma, mb;
    sb_init(&ma);
    sb_init(&mb);
    for (char **f = files;; f++) {
        const char *path = *f ? *f : "samples/tiny/tiny.megatron_tp.tp4.relations.json";
        json_error_t je;
        json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
        if (j && json_is_object(j)) {
            t_case("view-6 %s", path);
            relations ra, rb;
            bool oka, okb;
            read_dumped(j, tmp, m, &oka, &ma, &ra);
            static const char *lists[] = {"inputs", "outputs"};
            for (int l = 0; l < 2; l++) {
                json_t *list = json_object_get(j, lists[l]), *e;
                size_t i;
                json_array_foreach(list, i, e) if (json_is_object(e)) json_object_set_new(e, "z", json_integer(0));
            }
            read_dumped(j, tmp, m, &okb, &mb, &rb);
            CHECK_EQ(oka, okb);
            CHECK_STR(ma.s ? ma.s : "", mb.s ? mb.s : "");
            if (oka && okb && CHECK(ra.ninputs == rb.ninputs && ra.noutputs == rb.noutputs)) {
                CHECK(memcmp(&ra.mesh, &rb.mesh, sizeof ra.mesh) == 0);
                CHECK(memcmp(ra.inputs, rb.inputs, ra.ninputs * sizeof *ra.inputs) == 0);
                CHECK(memcmp(ra.outputs, rb.outputs, ra.noutputs * sizeof *ra.outputs) == 0);
                for (uint32_t k = 0; k < ra.ninputs; k++)
                    CHECK_STR(ra.input_names[k] ? ra.input_names[k] : "-", rb.input_names[k] ? rb.input_names[k] : "-");
            }
            if (oka) relations_free(&ra);
            if (okb) relations_free(&rb);
            compared++;
        }
        json_decref(j);
        if (!*f) break;
    }
    t_case("view-6 count");
    CHECK(compared >= 10);
    sb_free(&ma);
    sb_free(&mb);
    t_free_list(files);
    unlink(tmp);
    graph_free(m);
}

/* ---- relations_auto ---- */

/* What samples/README.md says GSPMD pairs shard (by parameter name). */
static const char *expected_gspmd_view(const char *name, const shape *s, bool dp) {
    const char *leaf = strrchr(name, '.');
    leaf = leaf ? leaf + 1 : name;
    bool moe = s->rank == 3;
    if (strcmp(name, "tokens") == 0) return dp ? "shard(0,dp)" : "dup";
    if (strcmp(name, "embed") == 0) return "shard(0,tp)";
    if (strcmp(name, "lm_head") == 0) return "shard(1,tp)";
    if (strstr(leaf, "norm") || strcmp(leaf, "router") == 0) return "dup";
    if (strcmp(leaf, "wq") == 0 || strcmp(leaf, "wk") == 0 || strcmp(leaf, "wv") == 0) return "shard(1,tp)";
    if (strcmp(leaf, "w_gate") == 0 || strcmp(leaf, "w_up") == 0) return moe ? "shard(2,tp)" : "shard(1,tp)";
    if (strcmp(leaf, "wo") == 0) return "shard(0,tp)";
    if (strcmp(leaf, "w_down") == 0) return moe ? "shard(1,tp)" : "shard(0,tp)";
    return NULL;
}

static void gspmd_pairs(json_t *man) {
    json_t *pairs = json_object_get(man, "pairs");
    int done = 0;
    for (size_t i = 0; i < json_array_size(pairs); i++) {
        json_t *pair = json_array_get(pairs, i);
        const char *name = json_string_value(json_object_get(pair, "name"));
        const char *kind = json_string_value(json_object_get(pair, "kind"));
        const char *bl = json_string_value(json_object_get(json_object_get(pair, "baseline"), "hlo"));
        const char *bpb = json_string_value(json_object_get(json_object_get(pair, "baseline"), "pb"));
        if (!name || !kind || !bl || strcmp(kind, "gspmd") != 0) continue;
        t_case("view-6 %s", name);
        char *bp = sample_path(bl);
        if (!exists(bp)) {
            printf("  view: %-52s skipped: samples/%s missing\n", name, bl);
            free(bp);
            continue;
        }
        diag d;
        hlo_module *m = read_baseline(bp, &d);
        if (!CHECK_MSG(m, "%s", d.out.s ? d.out.s : "")) {
            diag_free(&d);
            free(bp);
            continue;
        }
        int64_t devices = manifest_devices(pair);
        relations r;
        diag rd;
        diag_init(&rd, NULL);
        bool ok = relations_auto(m, devices, &r, &rd);
        CHECK_MSG(ok, "%s", rd.out.s ? rd.out.s : "");
        bool dp = json_object_get(json_object_get(pair, "mesh"), "dp") != NULL;
        if (ok) {
            done++;
            const hlo_comp *c = graph_entry(m);
            /* the Shardy mesh is the manifest's mesh, names and order */
            const char *k;
            json_t *v;
            uint32_t ax = 0;
            json_object_foreach(json_object_get(pair, "mesh"), k, v) {
                CHECK_MSG(ax < r.mesh.naxes && strcmp(r.mesh.names[ax], k) == 0 &&
                              r.mesh.sizes[ax] == json_integer_value(v),
                          "mesh axis %u is not %s", ax, k);
                ax++;
            }
            CHECK_EQ(r.mesh.naxes, ax);
            int named = 0;
            for (uint32_t p = 0; p < r.ninputs; p++) {
                const char *pn = r.input_names[p];
                const shape *s = &c->instrs[c->params[p]].shape;
                const char *want = pn ? expected_gspmd_view(pn, s, dp) : NULL;
                if (!CHECK_MSG(want, "parameter %u '%s' has no expected view", p, pn ? pn : "?")) continue;
                strbuf b;
                sb_init(&b);
                view_print(&b, &r.inputs[p], &r.mesh);
                CHECK_MSG(strcmp(b.s, want) == 0, "parameter %u '%s': %s, expected %s", p, pn, b.s, want);
                sb_free(&b);
                named++;
            }
            CHECK_EQ(named, c->nparams);
            CHECK_EQ(r.noutputs, 1);
            strbuf b;
            sb_init(&b);
            view_print(&b, &r.outputs[0], &r.mesh);
            CHECK_STR(b.s, dp ? "shard(0,dp)" : "dup");
            sb_free(&b);

            /* The protobuf baseline has no header attributes: the mesh is
             * derived from the tile assignments, with the same sizes, names
             * and views. */
            char *pp = bpb ? sample_path(bpb) : NULL;
            if (pp && exists(pp)) {
                diag pd;
                hlo_module *pm = read_baseline(pp, &pd);
                if (CHECK_MSG(pm, "%s", pd.out.s ? pd.out.s : "")) {
                    relations pr;
                    diag prd;
                    diag_init(&prd, NULL);
                    bool pok = relations_auto(pm, devices, &pr, &prd);
                    CHECK_MSG(pok, "%s", prd.out.s ? prd.out.s : "");
                    if (pok) {
                        CHECK_EQ(pr.mesh.naxes, r.mesh.naxes);
                        /* names recovered from the parameters' xla.sdy.sharding */
                        for (uint32_t a = 0; a < pr.mesh.naxes && a < r.mesh.naxes; a++) {
                            CHECK_EQ(pr.mesh.sizes[a], r.mesh.sizes[a]);
                            CHECK_STR(pr.mesh.names[a], r.mesh.names[a]);
                        }
                        for (uint32_t p = 0; p < pr.ninputs && p < r.ninputs; p++)
                            CHECK_MSG(view_equal(&pr.inputs[p], &r.inputs[p]), "pb parameter %u differs", p);
                        CHECK(pr.noutputs == 1 && view_equal(&pr.outputs[0], &r.outputs[0]));
                        relations_free(&pr);
                    }
                    diag_free(&prd);
                    graph_free(pm);
                }
                diag_free(&pd);
            }
            free(pp);
            relations_free(&r);
        }
        diag_free(&rd);
        graph_free(m);
        diag_free(&d);
        free(bp);
    }
    printf("  view: %d gspmd baselines explained by their Shardy mesh\n", done);
    t_case("view-6 count");
    CHECK_MSG(done >= 4, "only %d gspmd pairs checked", done);
}

/* relations_auto on small hand-written modules. */
static bool auto_text(const char *src, int64_t devices, relations *r, diag *rd) {
    diag d;
    diag_init(&d, "case.hlo");
    hlo_module *m = hlo_parse_text(src, strlen(src), "case.hlo", &d);
    bool ok = false;
    if (CHECK_MSG(m, "%s", d.out.s ? d.out.s : "")) {
        diag_init(rd, NULL);
        ok = relations_auto(m, devices, r, rd);
        graph_free(m);
    } else {
        diag_init(rd, NULL);
    }
    diag_free(&d);
    return ok;
}

static void auto_view_is(const relations *r, bool input, uint32_t k, const char *want) {
    strbuf b;
    sb_init(&b);
    if (input ? k < r->ninputs : k < r->noutputs) view_print(&b, input ? &r->inputs[k] : &r->outputs[k], &r->mesh);
    CHECK_MSG(b.s && strcmp(b.s, want) == 0, "%s %u: %s, expected %s", input ? "parameter" : "output", k,
              b.s ? b.s : "(none)", want);
    sb_free(&b);
}

static void auto_cases(void) {
    relations r;
    diag rd;

    t_case("view-7.1 derived mesh named from xla.sdy.sharding, explicit device lists, tuple ROOT");
    const char *m1 =
        "HloModule m\n\n"
        "ENTRY e {\n"
        "  a = f32[8,16]{1,0} parameter(0), sharding={devices=[2,1,4]0,1,2,3,4,5,6,7 last_tile_dim_replicate}\n"
        "  b = f32[16,32]{1,0} parameter(1), sharding={devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}\n"
        "  c = f32[16]{0} parameter(2), sharding={replicated}\n"
        "  d = f32[8,32]{1,0} parameter(3), sharding={devices=[8,1]<=[8]}, "
        "frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, [{\\\"x\\\", \\\"y\\\"}, {}]>\"}\n"
        "  e = f32[8,32]{1,0} parameter(4)\n"
        "  x = f32[8,32]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
        "  ROOT t = (f32[8,32]{1,0}, f32[16]{0}) tuple(x, c), sharding={{devices=[2,4]<=[8]}, {replicated}}\n"
        "}\n";
    if (CHECK_MSG(auto_text(m1, 8, &r, &rd), "%s", rd.out.s ? rd.out.s : "")) {
        CHECK_EQ(r.mesh.naxes, 2);
        CHECK_STR(r.mesh.names[0], "x"); /* from parameter 3's xla.sdy.sharding */
        CHECK_STR(r.mesh.names[1], "y");
        CHECK(r.mesh.sizes[0] == 2 && r.mesh.sizes[1] == 4);
        auto_view_is(&r, true, 0, "shard(0,x)");
        auto_view_is(&r, true, 1, "shard(1,y)");
        auto_view_is(&r, true, 2, "dup");
        auto_view_is(&r, true, 3, "shard(0,(x,y))");
        auto_view_is(&r, true, 4, "dup");
        CHECK_EQ(r.noutputs, 2);
        auto_view_is(&r, false, 0, "shard(0,x) shard(1,y)");
        auto_view_is(&r, false, 1, "dup");
        relations_free(&r);
    }
    diag_free(&rd);

    t_case("view-7.2 Shardy mesh, minor axis on the major dim, FuncResultSharding");
    const char *m2 =
        "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"x\"=2, \"y\"=2]>}}\n\n"
        "ENTRY e {\n"
        "  a = f32[4,4]{1,0} parameter(0), sharding={devices=[2,2]<=[2,2]T(1,0)}\n"
        "  b = f32[4,4]{1,0} parameter(1), sharding={devices=[4,1]0,2,1,3}\n"
        "  c = f32[4,4]{1,0} parameter(2), frontend_attributes={xla.sdy.sharding=\"#sdy.sharding<@mesh, [{\\\"y\\\"}, {}]>\"}\n"
        "  s = f32[4,4]{1,0} add(a, b)\n"
        "  r = f32[4,4]{1,0} custom-call(s), custom_call_target=\"xla.sdy.FuncResultSharding\", "
        "frontend_attributes={xla.sdy.sharding=\"#sdy.sharding_per_value<[<@mesh, [{}, {\\\"x\\\", \\\"y\\\"}]>]>\"}\n"
        "  t = (f32[4,4]{1,0}) tuple(r)\n"
        "  ROOT g = f32[4,4]{1,0} get-tuple-element(t), index=0\n"
        "}\n";
    if (CHECK_MSG(auto_text(m2, 4, &r, &rd), "%s", rd.out.s ? rd.out.s : "")) {
        CHECK_STR(r.mesh.names[0], "x");
        CHECK_STR(r.mesh.names[1], "y");
        auto_view_is(&r, true, 0, "shard(0,y) shard(1,x)");
        auto_view_is(&r, true, 1, "shard(0,(y,x))");
        auto_view_is(&r, true, 2, "shard(0,y)");
        auto_view_is(&r, false, 0, "shard(1,(x,y))");
        relations_free(&r);
    }
    diag_free(&rd);

    t_case("view-7.3 tile assignment the mesh cannot explain");
    const char *m3 =
        "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"tp\"=4]>}}\n\n"
        "ENTRY e {\n"
        "  a = f32[8]{0} parameter(0), sharding={devices=[4]0,2,1,3}, metadata={op_name=\"params['w']\"}\n"
        "  ROOT n = f32[8]{0} negate(a)\n"
        "}\n";
    CHECK(!auto_text(m3, 4, &r, &rd));
    CHECK_CONTAINS(rd.out.s, "case.hlo: parameter 0 'w': sharding cannot be explained by the mesh {tp:4}");
    diag_free(&rd);

    t_case("view-7.4 wrong device count, maximal, non-dividing tiles");
    const char *m4 =
        "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"tp\"=4]>}}\n\n"
        "ENTRY e {\n"
        "  a = f32[8]{0} parameter(0), sharding={maximal device=1}\n"
        "  b = f32[6]{0} parameter(1), sharding={devices=[4]<=[4]}\n"
        "  c = f32[8]{0} parameter(2), sharding={devices=[2]<=[2]}\n"
        "  ROOT n = f32[8]{0} negate(a)\n"
        "}\n";
    CHECK(!auto_text(m4, 8, &r, &rd));
    CHECK_CONTAINS(rd.out.s, "the Shardy mesh {tp:4} has 4 devices, the distributed program runs on 8");
    diag_free(&rd);
    CHECK(!auto_text(m4, 4, &r, &rd));
    CHECK_CONTAINS(rd.out.s, "parameter 0: sharding cannot be explained by the mesh {tp:4}: maximal sharding");
    CHECK_CONTAINS(rd.out.s, "parameter 1: sharding cannot be explained by the mesh {tp:4}: dimension 0 (6)");
    CHECK_CONTAINS(rd.out.s, "parameter 2: sharding cannot be explained by the mesh {tp:4}: its tile assignment covers 2 devices");
    diag_free(&rd);

    t_case("view-7.5 derived mesh that does not nest");
    const char *m5 =
        "HloModule m\n\n"
        "ENTRY e {\n"
        "  a = f32[6]{0} parameter(0), sharding={devices=[3,2]<=[6] last_tile_dim_replicate}\n"
        "  b = f32[6]{0} parameter(1), sharding={devices=[2,3]<=[6] last_tile_dim_replicate}\n"
        "  ROOT n = f32[6]{0} add(a, b)\n"
        "}\n";
    CHECK(!auto_text(m5, 6, &r, &rd));
    CHECK_CONTAINS(rd.out.s, "cannot infer a mesh from the sharding annotations");
    diag_free(&rd);

    t_case("view-7.6 Shardy meshes: empty ones ignored, device_ids and two meshes refused");
    const char *body =
        "\n\nENTRY e {\n"
        "  a = f32[8]{0} parameter(0), sharding={devices=[4]<=[4]}\n"
        "  ROOT n = f32[8]{0} negate(a), sharding={devices=[2,2]<=[4] last_tile_dim_replicate}\n"
        "}\n";
    char src[1024];
    snprintf(src, sizeof src, "HloModule m, frontend_attributes={xla.sdy.meshes={empty_mesh = #sdy.mesh<[]>, "
             "maximal_mesh_0 = #sdy.mesh<[], device_ids=[0]>, mesh = #sdy.mesh<[\"a\"=2, \"b\"=2]>}}%s", body);
    if (CHECK_MSG(auto_text(src, 4, &r, &rd), "%s", rd.out.s ? rd.out.s : "")) {
        CHECK(r.mesh.naxes == 2 && strcmp(r.mesh.names[1], "b") == 0);
        auto_view_is(&r, true, 0, "shard(0,(a,b))");
        auto_view_is(&r, false, 0, "shard(0,a)");
        relations_free(&r);
    }
    diag_free(&rd);
    snprintf(src, sizeof src, "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"a\"=4], "
             "device_ids=[3,2,1,0]>}}%s", body);
    CHECK(!auto_text(src, 4, &r, &rd));
    CHECK_CONTAINS(rd.out.s, "case.hlo: the Shardy mesh has an explicit device order");
    diag_free(&rd);
    snprintf(src, sizeof src, "HloModule m, frontend_attributes={xla.sdy.meshes={m1 = #sdy.mesh<[\"a\"=4]>, "
             "m2 = #sdy.mesh<[\"b\"=4]>}}%s", body);
    CHECK(!auto_text(src, 4, &r, &rd));
    CHECK_CONTAINS(rd.out.s, "several Shardy meshes");
    diag_free(&rd);
    snprintf(src, sizeof src, "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"a\"=4x]>}}%s",
             body);
    CHECK(!auto_text(src, 4, &r, &rd));
    CHECK_CONTAINS(rd.out.s, "unreadable Shardy mesh");
    diag_free(&rd);

    t_case("view-7.7 subgroup dims: unreduced is partial(sum), manual is refused");
    const char *m8 =
        "HloModule m, frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<[\"dp\"=2, \"tp\"=2]>}}\n\n"
        "ENTRY e {\n"
        "  a = f32[8]{0} parameter(0), sharding={devices=[2,2]<=[4] last_tile_dims={unreduced}}\n"
        "  b = f32[8]{0} parameter(1), sharding={devices=[1,2,2]<=[2,2]T(1,0) last_tile_dims={replicated, unreduced}}\n"
        "  ROOT n = f32[8]{0} add(a, b)\n"
        "}\n";
    if (CHECK_MSG(auto_text(m8, 4, &r, &rd), "%s", rd.out.s ? rd.out.s : "")) {
        auto_view_is(&r, true, 0, "shard(0,dp) partial(tp,sum)");
        auto_view_is(&r, true, 1, "partial(dp,sum)");
        relations_free(&r);
    }
    diag_free(&rd);
    const char *m9 =
        "HloModule m\n\nENTRY e {\n"
        "  a = f32[8]{0} parameter(0), sharding={devices=[2,2]<=[4] last_tile_dims={manual}}\n"
        "  ROOT n = f32[8]{0} negate(a)\n}\n";
    CHECK(!auto_text(m9, 4, &r, &rd));
    CHECK_CONTAINS(rd.out.s, "is not a view");
    diag_free(&rd);

    t_case("view-7.8 no annotations at all");
    const char *m6 =
        "HloModule m\n\nENTRY e {\n  a = f32[6]{0} parameter(0)\n  ROOT n = f32[6]{0} negate(a)\n}\n";
    if (CHECK_MSG(auto_text(m6, 4, &r, &rd), "%s", rd.out.s ? rd.out.s : "")) {
        CHECK_EQ(mesh_devices(&r.mesh), 4);
        CHECK_STR(r.mesh.names[0], "axis_0");
        auto_view_is(&r, true, 0, "dup");
        auto_view_is(&r, false, 0, "dup");
        relations_free(&r);
    }
    diag_free(&rd);
}

/* Sub-axes: a GSPMD program on 4 devices (mesh inferred as one axis of 4)
 * all-reduces a partial dot in two stages, over neighbour pairs and then over
 * the pairs' partners: groups over parts of the axis. */
static const char *sub_base =
    "HloModule base\n\n%add {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n  ROOT %s = f32[] add(%a, %b)\n}\n\n"
    "ENTRY %main {\n  %x = f32[2,8]{1,0} parameter(0), sharding={devices=[1,4]<=[4]}\n"
    "  %w = f32[8,3]{1,0} parameter(1), sharding={devices=[4,1]<=[4]}\n"
    "  ROOT %o = f32[2,3]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, sharding={replicated}\n}\n";

static char *sub_dist(bool second_stage) {
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "HloModule dist, num_partitions=4\n\n%add {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n"
                "  ROOT %s = f32[] add(%a, %b)\n}\n\nENTRY %main {\n  %x = f32[2,2]{1,0} parameter(0)\n"
                "  %w = f32[2,3]{1,0} parameter(1)\n"
                "  %d = f32[2,3]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n");
    sb_printf(&b, "  %s%%p = f32[2,3]{1,0} all-reduce(%%d), channel_id=1, replica_groups={{0,1},{2,3}}, "
                  "use_global_device_ids=true, to_apply=%%add\n", second_stage ? "" : "ROOT ");
    if (second_stage)
        sb_puts(&b, "  ROOT %q = f32[2,3]{1,0} all-reduce(%p), channel_id=2, replica_groups={{0,2},{1,3}}, "
                    "use_global_device_ids=true, to_apply=%add\n");
    sb_puts(&b, "}\n");
    return sb_take(&b);
}

static void sub_axes(void) {
    t_case("view-8.1 a mesh axis split where groups use part of it");
    relations r;
    diag rd;
    char *dist = sub_dist(true);
    diag d;
    diag_init(&d, "dist.hlo");
    hlo_module *dm = hlo_parse_text(dist, strlen(dist), "dist.hlo", &d);
    if (CHECK_MSG(dm, "%s", d.out.s ? d.out.s : "") && CHECK_MSG(auto_text(sub_base, 4, &r, &rd), "%s", rd.out.s ? rd.out.s : "")) {
        CHECK_EQ(r.mesh.naxes, 1);
        r.inputs[0].partial = 1, r.inputs[0].red = RED_SUM;  /* partial terms follow the split too */
        CHECK(lift_refine_mesh(&r, dm));
        CHECK_EQ(r.mesh.naxes, 2);
        CHECK(r.mesh.sizes[0] == 2 && r.mesh.sizes[1] == 2);
        strbuf b;
        sb_init(&b);
        view_print(&b, &r.inputs[0], &r.mesh);
        char want[160];
        snprintf(want, sizeof want, "shard(1,(%s,%s)) partial((%s,%s),sum)", r.mesh.names[0], r.mesh.names[1], r.mesh.names[0],
                 r.mesh.names[1]);
        CHECK_MSG(strcmp(b.s, want) == 0, "%s, expected %s", b.s, want);
        CHECK(!lift_refine_mesh(&r, dm));  /* every group maps now */
        sb_free(&b);
        relations_free(&r);
    }
    diag_free(&rd);
    diag_free(&d);
    graph_free(dm);
    free(dist);

    t_case("view-8.2 two-stage all-reduce over sub-axes: verified; one stage: not");
    char dir[] = "/tmp/scalify-subaxes-XXXXXX";
    if (!CHECK(mkdtemp(dir) != NULL)) return;
    char bp[64], dp[64];
    snprintf(bp, sizeof bp, "%s/base.hlo", dir);
    snprintf(dp, sizeof dp, "%s/dist.hlo", dir);
    for (int stages = 2; stages >= 1; stages--) {
        char *dt = sub_dist(stages == 2);
        FILE *f = fopen(bp, "w"), *g = fopen(dp, "w");
        if (!CHECK(f && g)) return;
        fputs(sub_base, f);
        fputs(dt, g);
        fclose(f);
        fclose(g);
        free(dt);
        check_opts o = {.name = "subaxes", .baseline = bp, .distributed = dp, .auto_relations = true, .witness = true};
        json_t *trace = NULL;
        diag cd;
        diag_init(&cd, "subaxes");
        int v = check_pair(&o, &trace, &cd);
        if (stages == 2) CHECK_MSG(v == VERDICT_VERIFIED, "verdict %d: %s", v, cd.out.s ? cd.out.s : "");
        else CHECK_MSG(v == VERDICT_MISMATCH, "verdict %d", v);
        json_decref(trace);
        diag_free(&cd);
    }
    unlink(bp);
    unlink(dp);
    rmdir(dir);
}

/* ---- relations read from the distributed program (shard_map pairs) ---- */

/* The block of dimension d that device dev holds under v: its index among
 * the dimension's parts, and the number of parts. */
static void held_block(const view *v, const mesh *m, uint32_t d, int64_t dev, int64_t *index, int64_t *parts) {
    *index = 0;
    *parts = 1;
    if (d >= v->rank) return;
    for (uint32_t j = 0; j < v->dims[d].naxes; j++) {
        int a = v->dims[d].axes[j];
        *index = *index * m->sizes[a] + mesh_coord(m, dev, a);
        *parts *= m->sizes[a];
    }
}

/* Whether two views on two meshes of the same devices (iota order) give every
 * device the same block of every dimension and the same partial groups: the
 * same relation whatever the axes are called or how the mesh is cut. */
static bool same_relation(const view *a, const mesh *ma, const view *b, const mesh *mb, uint32_t rank) {
    int64_t n = mesh_devices(ma);
    if (n != mesh_devices(mb)) return false;
    if ((a->partial != 0) != (b->partial != 0) || (a->partial && a->red != b->red)) return false;
    for (int64_t dev = 0; dev < n; dev++)
        for (uint32_t d = 0; d < rank; d++) {
            int64_t ia, pa, ib, pb;
            held_block(a, ma, d, dev, &ia, &pa);
            held_block(b, mb, d, dev, &ib, &pb);
            if (ia != ib || pa != pb) return false;
        }
    /* partial: devices r and s sum together when they differ only on partial axes */
    for (int64_t r = 0; a->partial && r < n; r++)
        for (int64_t t = 0; t < n; t++) {
            bool ga = true, gb = true;
            for (uint32_t x = 0; x < ma->naxes; x++)
                if (!(a->partial & (1u << x)) && mesh_coord(ma, r, (int)x) != mesh_coord(ma, t, (int)x)) ga = false;
            for (uint32_t x = 0; x < mb->naxes; x++)
                if (!(b->partial & (1u << x)) && mesh_coord(mb, r, (int)x) != mesh_coord(mb, t, (int)x)) gb = false;
            if (ga != gb) return false;
        }
    return true;
}

static char *joined(const char *dir, const char *rel) {
    size_t n = strlen(dir) + strlen(rel) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, rel);
    return p;
}

/* Every shard_map pair of a manifest: the relations read from its
 * distributed program (the protobuf forms check --manifest reads) are the
 * committed relations file, view by view, device by device. */
static int smap_auto_pairs(const char *dir, int *expected) {
    char *mp = joined(dir, "manifest.json");
    json_error_t je;
    json_t *man = json_load_file(mp, 0, &je);
    int done = 0;
    t_case("view-8 %s", mp);
    if (!CHECK_MSG(man, "%s: %s", mp, je.text)) {
        free(mp);
        return 0;
    }
    json_t *pairs = json_object_get(man, "pairs");
    for (size_t i = 0; i < json_array_size(pairs); i++) {
        json_t *pair = json_array_get(pairs, i);
        const char *name = json_string_value(json_object_get(pair, "name"));
        const char *kind = json_string_value(json_object_get(pair, "kind"));
        const char *rel = json_string_value(json_object_get(pair, "relations"));
        const char *bpb = json_string_value(json_object_get(json_object_get(pair, "baseline"), "pb"));
        const char *dpb = json_string_value(json_object_get(json_object_get(pair, "distributed"), "pb"));
        if (!name || !kind || strcmp(kind, "shard_map") != 0) continue;
        (*expected)++;
        t_case("view-8 %s", name);
        if (!CHECK_MSG(rel && bpb && dpb, "lacks a relations file or protobuf forms")) continue;
        char *bp = joined(dir, bpb), *dp = joined(dir, dpb), *rp = joined(dir, rel);
        diag bd, dd, rd, ad;
        hlo_module *bm = read_baseline(bp, &bd), *dm = read_baseline(dp, &dd);
        diag_init(&rd, NULL);
        diag_init(&ad, NULL);
        relations fr, ar;
        memset(&fr, 0, sizeof fr);
        memset(&ar, 0, sizeof ar);
        if (CHECK_MSG(bm && dm, "%s%s", bd.out.s ? bd.out.s : "", dd.out.s ? dd.out.s : "") &&
            CHECK_MSG(relations_read(rp, bm, &fr, &rd), "%s", rd.out.s ? rd.out.s : "") &&
            CHECK_MSG(relations_auto_pair(bm, dm, &ar, &ad), "%s", ad.out.s ? ad.out.s : "")) {
            const hlo_comp *c = graph_entry(bm);
            bool all = CHECK_MSG(ar.ninputs == fr.ninputs && ar.noutputs == fr.noutputs, "%u/%u inputs, %u/%u outputs",
                                 ar.ninputs, fr.ninputs, ar.noutputs, fr.noutputs);
            for (uint32_t k = 0; all && k < fr.ninputs; k++) {
                const shape *s = &c->instrs[c->params[k]].shape;
                all = CHECK_MSG(same_relation(&ar.inputs[k], &ar.mesh, &fr.inputs[k], &fr.mesh, s->rank),
                                "parameter %u '%s' differs from %s", k, fr.input_names[k] ? fr.input_names[k] : "?",
                                rel);
            }
            const shape *rs = &c->instrs[c->root].shape;
            for (uint32_t o = 0; all && o < fr.noutputs; o++) {
                uint32_t rank = rs->dtype == DT_TUPLE ? rs->tuple[o].rank : rs->rank;
                all = CHECK_MSG(same_relation(&ar.outputs[o], &ar.mesh, &fr.outputs[o], &fr.mesh, rank) &&
                                    !ar.output_free[o],
                                "output %u differs from %s", o, rel);
            }
            if (all) done++;
        }
        relations_free(&fr);
        relations_free(&ar);
        diag_free(&bd), diag_free(&dd), diag_free(&rd), diag_free(&ad);
        graph_free(bm);
        graph_free(dm);
        free(bp), free(dp), free(rp);
    }
    json_decref(man);
    free(mp);
    return done;
}

/* Text dumps keep less: the messages say what is missing instead of
 * assuming replicated. */
static void smap_auto_text(void) {
    struct {
        const char *base, *dist, *msg;
    } cases[] = {
        {"samples/tiny/tiny.baseline.hlo", "samples/tiny/tiny.megatron_tp.tp4.dist.hlo",
         "records no sharding for output 0 (a text dump does not print the result's sharding"},
        {"samples/train/lm.dp_tp.baseline.hlo", "samples/train/lm.dp_tp.dp2xtp4.dist.hlo",
         "parameter 5 is f32[64,32]{1,0} in the baseline and f32[16,32]{1,0} on each device, and neither program "
         "records how it is split"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        t_case("view-9.%zu %s", i + 1, cases[i].dist);
        diag bd, dd, ad;
        hlo_module *bm = read_baseline(cases[i].base, &bd), *dm = read_baseline(cases[i].dist, &dd);
        diag_init(&ad, NULL);
        relations r;
        if (CHECK(bm && dm)) {
            CHECK(!relations_auto_pair(bm, dm, &r, &ad));
            CHECK_MSG(ad.out.s && strstr(ad.out.s, cases[i].msg), "message: %s", ad.out.s ? ad.out.s : "(none)");
            CHECK(r.ninputs == 0 && r.inputs == NULL);
        }
        diag_free(&bd), diag_free(&dd), diag_free(&ad);
        graph_free(bm);
        graph_free(dm);
    }
}

/* Hand-made distributed modules: what the partitioner's shardings say, and
 * what they do not. */
static bool auto_pair_text(const char *base, const char *dist, relations *r, diag *rd) {
    diag d1, d2;
    diag_init(&d1, "base.hlo");
    diag_init(&d2, "dist.hlo");
    hlo_module *bm = hlo_parse_text(base, strlen(base), "base.hlo", &d1);
    hlo_module *dm = hlo_parse_text(dist, strlen(dist), "dist.hlo", &d2);
    diag_init(rd, NULL);
    bool ok = false;
    if (CHECK_MSG(bm && dm, "%s%s", d1.out.s ? d1.out.s : "", d2.out.s ? d2.out.s : ""))
        ok = relations_auto_pair(bm, dm, r, rd);
    graph_free(bm);
    graph_free(dm);
    diag_free(&d1);
    diag_free(&d2);
    return ok;
}

static void smap_auto_cases(void) {
    const char *base = "HloModule b\n\nENTRY e {\n"
                       "  x = f32[8,16]{1,0} parameter(0)\n"
                       "  w = f32[16,32]{1,0} parameter(1)\n"
                       "  ROOT d = f32[8,32]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n";
    relations r;
    diag rd;

    t_case("view-10.1 tile shardings on parameters and ROOT, 2-D mesh derived");
    const char *d1 = "HloModule d, num_partitions=8\n\nENTRY e {\n"
                     "  x = f32[4,16]{1,0} parameter(0), sharding={devices=[2,1,4]<=[8] last_tile_dim_replicate}\n"
                     "  w = f32[16,8]{1,0} parameter(1), sharding={devices=[1,4,2]<=[2,4]T(1,0) "
                     "last_tile_dim_replicate}\n"
                     "  ROOT d = f32[4,8]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
                     "sharding={devices=[2,4]<=[8]}\n}\n";
    if (CHECK_MSG(auto_pair_text(base, d1, &r, &rd), "%s", rd.out.s ? rd.out.s : "")) {
        CHECK_EQ(r.mesh.naxes, 2);
        auto_view_is(&r, true, 0, "shard(0,axis_0)");
        auto_view_is(&r, true, 1, "shard(1,axis_1)");
        auto_view_is(&r, false, 0, "shard(0,axis_0) shard(1,axis_1)");
        CHECK(!r.output_free[0]);
        relations_free(&r);
    }
    diag_free(&rd);

    t_case("view-10.2 shardings by mesh axes name the mesh");
    const char *d2 = "HloModule d, num_partitions=8\n\nENTRY e {\n"
                     "  x = f32[4,16]{1,0} parameter(0), sharding={mesh['dp'=2,'tp'=4], [{'dp'}, {}]}\n"
                     "  w = f32[16,8]{1,0} parameter(1), sharding={mesh['dp'=2,'tp'=4], [{}, {'tp'}]}\n"
                     "  ROOT d = f32[4,8]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
                     "sharding={mesh['dp'=2,'tp'=4], [{'dp'}, {'tp'}]}\n}\n";
    if (CHECK_MSG(auto_pair_text(base, d2, &r, &rd), "%s", rd.out.s ? rd.out.s : "")) {
        CHECK_STR(r.mesh.names[0], "dp");
        CHECK_STR(r.mesh.names[1], "tp");
        auto_view_is(&r, true, 0, "shard(0,dp)");
        auto_view_is(&r, true, 1, "shard(1,tp)");
        auto_view_is(&r, false, 0, "shard(0,dp) shard(1,tp)");
        relations_free(&r);
    }
    diag_free(&rd);

    struct {
        const char *name, *px, *root, *msg;
    } bad[] = {
        {"view-10.3 an unannotated parameter is not taken as replicated", "",
         ", sharding={replicated}", "records no sharding for parameter 0"},
        {"view-10.4 no result sharding", ", sharding={replicated}", "", "records no sharding for output 0"},
        {"view-10.5 manual sharding", ", sharding={manual}", ", sharding={replicated}", "manual sharding is not a view"},
        {"view-10.6 an open dimension", ", sharding={mesh['dp'=2,'tp'=4], [{'dp', ?}, {}]}",
         ", sharding={replicated}", "an open dimension (?)"},
        {"view-10.7 a sub-axis", ", sharding={mesh['dp'=2,'tp'=4], [{'tp':(1)2}, {}]}", ", sharding={replicated}",
         "sub-axis shardings are not supported"},
        {"view-10.8 unreduced axes", ", sharding={mesh['dp'=2,'tp'=4], [{}, {}], unreduced={'tp'}}",
         ", sharding={replicated}", "unreduced or manual axes"},
        {"view-10.9 two meshes", ", sharding={mesh['dp'=2,'tp'=4], [{'dp'}, {}]}",
         ", sharding={mesh['a'=8], [{'a'}, {}]}", "more than one mesh"},
        {"view-10.10 a mesh of another size", ", sharding={mesh['dp'=4], [{'dp'}, {}]}", ", sharding={replicated}",
         "has 4 devices, the distributed program runs on 8"},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        t_case("%s", bad[i].name);
        char src[1024];
        snprintf(src, sizeof src,
                 "HloModule d, num_partitions=8\n\nENTRY e {\n"
                 "  x = f32[4,16]{1,0} parameter(0)%s\n"
                 "  w = f32[16,32]{1,0} parameter(1), sharding={replicated}\n"
                 "  ROOT d = f32[4,32]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}%s\n}\n",
                 bad[i].px, bad[i].root);
        bool ok = auto_pair_text(base, src, &r, &rd);
        CHECK(!ok);
        CHECK_MSG(rd.out.s && strstr(rd.out.s, bad[i].msg), "message: %s", rd.out.s ? rd.out.s : "(none)");
        if (ok) relations_free(&r);
        diag_free(&rd);
    }
}

void suite_view(void) {
    views();
    json_error_t je;
    json_t *man = json_load_file("samples/manifest.json", 0, &je);
    t_case("view-3 manifest");
    if (CHECK_MSG(man, "samples/manifest.json: %s", je.text)) {
        sample_relations(man);
        gspmd_pairs(man);
    }
    json_decref(man);
    bad_relations();
    plain_lists();
    auto_cases();
    sub_axes();
    int expected = 0;
    int done = smap_auto_pairs("samples", &expected) + smap_auto_pairs("samples/train", &expected);
    printf("  view: %d of %d shard_map pairs: relations read from the distributed program equal the files\n", done,
           expected);
    t_case("view-8 count");
    CHECK_MSG(done == expected && expected >= 84, "%d of %d", done, expected);
    smap_auto_text();
    smap_auto_cases();
}
