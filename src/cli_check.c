/* scalify check --baseline B --distributed D [--relations R | --auto-relations]
 *               [--source-root DIR] [--name N] [-o trace.json]
 * scalify check --manifest samples/manifest.json --out-dir DIR [--source-root DIR] */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "cli.h"
#include "io.h"
#include "scalify.h"

const char cli_check_usage[] =
    "usage: scalify check --baseline B --distributed D [--relations R | --auto-relations]\n"
    "                     [--source-root DIR] [--rules DIR] [--name N] [--witness] [-j N] [--no-memo]\n"
    "                     [-o trace.json]\n"
    "       scalify check --manifest MANIFEST --out-dir DIR [--source-root DIR] [--rules DIR] [--witness]\n"
    "                     [-j N] [--no-memo]\n"
    "  -j N       threads (default: the number of cores); with 2 or more both programs are read at once\n"
    "  --no-memo  lift every layer instead of reusing the result of an identical one (for comparison)\n";

static bool write_json(const char *path, json_t *j, diag *d) {
    char *s = json_dumps(j, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    if (!s) return false;
    strbuf b;
    sb_init(&b);
    sb_puts(&b, s);
    sb_putc(&b, '\n');
    free(s);
    bool ok = io_write_atomic(path, b.s, b.len, d);
    sb_free(&b);
    return ok;
}

static int exit_for(int verdict) {
    return verdict == VERDICT_VERIFIED ? EXIT_VERIFIED : verdict == VERDICT_ERROR ? EXIT_INPUT : EXIT_MISMATCH;
}

static int run_one(const check_opts *o, const char *out) {
    diag d;
    diag_init(&d, "scalify check");
    json_t *trace = NULL;
    int v = check_pair(o, &trace, &d);
    cli_flush_diag(&d);
    if (v == VERDICT_ERROR) return EXIT_INPUT;
    diag_init(&d, out ? out : "-");
    if (out) {
        if (!write_json(out, trace, &d)) v = VERDICT_ERROR;
    } else {
        json_dumpf(trace, stdout, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
        putchar('\n');
    }
    cli_flush_diag(&d);
    fprintf(stderr, "%s: %s\n", o->name ? o->name : o->distributed, verdict_name(v));
    json_t *as = json_object_get(trace, "assumptions");
    for (size_t i = 0; i < json_array_size(as); i++)
        fprintf(stderr, "  assuming %s\n", json_string_value(json_array_get(as, i)));
    json_decref(trace);
    return exit_for(v);
}

/* Batch mode: one trace per manifest pair, plus index.json. */
static int run_manifest(const char *manifest, const char *out_dir, const check_opts *base) {
    json_error_t err;
    json_t *m = json_load_file(manifest, 0, &err);
    if (!m || !json_is_array(json_object_get(m, "pairs"))) {
        fprintf(stderr, "%s:%d:%d: %s\n", manifest, err.line, err.column, m ? "no \"pairs\" array" : err.text);
        json_decref(m);
        return EXIT_INPUT;
    }
    mkdir(out_dir, 0777);
    /* Paths in the manifest are relative to its directory. */
    const char *slash = strrchr(manifest, '/');
    strbuf dirb;
    sb_init(&dirb);
    if (slash) sb_put(&dirb, manifest, (size_t)(slash - manifest));
    else sb_puts(&dirb, ".");
    const char *dir = dirb.s;
    json_t *index = json_array(), *pairs = json_object_get(m, "pairs");
    int worst = EXIT_VERIFIED;
    bool tty = isatty(2);
    for (size_t i = 0; i < json_array_size(pairs); i++) {
        json_t *p = json_array_get(pairs, i);
        const char *name = json_string_value(json_object_get(p, "name"));
        /* The protobuf form when there is one: text dumps elide large constants
         * ({...}), which then cannot be compared. */
        json_t *bj = json_object_get(p, "baseline"), *dj = json_object_get(p, "distributed");
        const char *b = json_string_value(json_object_get(bj, "pb"));
        const char *dd = json_string_value(json_object_get(dj, "pb"));
        if (!b) b = json_string_value(json_object_get(bj, "hlo"));
        if (!dd) dd = json_string_value(json_object_get(dj, "hlo"));
        const char *r = json_string_value(json_object_get(p, "relations"));
        if (!name || !b || !dd || !r) {
            fprintf(stderr, "%s: pair %zu lacks name, a baseline or distributed file, or relations\n", manifest, i);
            worst = EXIT_INPUT;
            continue;
        }
        strbuf bp, dp, rp, out; /* paths of any length: never a truncated name */
        sb_init(&bp), sb_init(&dp), sb_init(&rp), sb_init(&out);
        sb_printf(&bp, "%s/%s", dir, b);
        sb_printf(&dp, "%s/%s", dir, dd);
        sb_printf(&rp, "%s/%s", dir, r);
        sb_printf(&out, "%s/%s.trace.json", out_dir, name);
        check_opts o = *base;
        o.name = name;
        o.baseline = bp.s;
        o.distributed = dp.s;
        if (strcmp(r, "auto") == 0) o.auto_relations = true;
        else o.relations = rp.s;
        if (tty) fprintf(stderr, "[%zu/%zu] %s\n", i + 1, json_array_size(pairs), name);
        diag d;
        diag_init(&d, "scalify check");
        json_t *trace = NULL;
        int v = check_pair(&o, &trace, &d);
        cli_flush_diag(&d);
        json_t *e = json_object();
        json_object_set_new(e, "name", json_string(name));
        json_object_set_new(e, "verdict", json_string(verdict_name(v)));
        json_object_set_new(e, "expected", json_incref(json_object_get(p, "expected")));
        if (trace) {
            diag_init(&d, out.s);
            write_json(out.s, trace, &d);
            cli_flush_diag(&d);
            json_object_set_new(e, "trace", json_string(strrchr(out.s, '/') + 1));
            json_decref(trace);
        }
        sb_free(&bp), sb_free(&dp), sb_free(&rp), sb_free(&out);
        json_array_append_new(index, e);
        int code = exit_for(v);
        if (code > worst) worst = code;
    }
    strbuf ip;
    sb_init(&ip);
    sb_printf(&ip, "%s/index.json", out_dir);
    diag d;
    diag_init(&d, ip.s);
    json_t *idx = json_object();
    json_object_set_new(idx, "pairs", index);
    write_json(ip.s, idx, &d);
    cli_flush_diag(&d);
    json_decref(idx);
    json_decref(m);
    sb_free(&ip);
    sb_free(&dirb);
    return worst;
}

/* The rules shipped with scalify: $SCALIFY_RULES, else a rules/ folder beside or
 * above the binary (build/scalify in a checkout), else none. */
static const char *default_rules_dir(void) {
    static char found[4096];
    const char *env = getenv("SCALIFY_RULES");
    if (env && *env) return env;
    char exe[2048];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = 0;
    for (int up = 0; up < 3; up++) {
        char *slash = strrchr(exe, '/');
        if (!slash) break;
        *slash = 0;
        snprintf(found, sizeof found, "%s/rules", exe);
        struct stat st;
        if (stat(found, &st) == 0 && S_ISDIR(st.st_mode)) return found;
    }
    return NULL;
}

int cli_check(int argc, char **argv) {
    check_opts o = {0};
    o.rules_dir = default_rules_dir();
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o.jobs = ncpu > 0 ? (int)ncpu : 1;
    const char *out = NULL, *manifest = NULL, *out_dir = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = !strcmp(a, "--baseline") ? &o.baseline : !strcmp(a, "--distributed") ? &o.distributed
                            : !strcmp(a, "--relations") ? &o.relations : !strcmp(a, "--source-root") ? &o.source_root
                            : !strcmp(a, "--name") ? &o.name : !strcmp(a, "-o") ? &out
                            : !strcmp(a, "--manifest") ? &manifest : !strcmp(a, "--out-dir") ? &out_dir
                            : !strcmp(a, "--rules") ? &o.rules_dir : NULL;
        if (slot) {
            if (i + 1 >= argc) {
                fprintf(stderr, "scalify check: %s needs a value\n%s", a, cli_check_usage);
                return EXIT_INPUT;
            }
            *slot = argv[++i];
        } else if (!strcmp(a, "--auto-relations")) {
            o.auto_relations = true;
        } else if (!strcmp(a, "--witness")) {
            o.witness = true;
        } else if (!strcmp(a, "--no-memo")) {
            o.no_memo = true;
        } else if (!strcmp(a, "-j")) {
            char *end = NULL;
            long j = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
            if (!end || *end || j < 1 || j > 1024) {
                fprintf(stderr, "scalify check: -j needs a thread count from 1 to 1024\n%s", cli_check_usage);
                return EXIT_INPUT;
            }
            o.jobs = (int)j;
            i++;
        } else {
            fprintf(stderr, "scalify check: unknown argument %s\n%s", a, cli_check_usage);
            return EXIT_INPUT;
        }
    }
    if (!o.rules_dir)
        fprintf(stderr, "scalify check: warning: no rules/ folder beside the binary and none given (--rules DIR or "
                        "SCALIFY_RULES): checking without rewrite rules, so pairs that need them stay unverified\n");
    if (manifest) {
        if (!out_dir) {
            fprintf(stderr, "scalify check: --manifest needs --out-dir\n%s", cli_check_usage);
            return EXIT_INPUT;
        }
        return run_manifest(manifest, out_dir, &o);
    }
    if (!o.baseline || !o.distributed || (!o.relations == !o.auto_relations)) {
        fprintf(stderr, "%s", cli_check_usage);
        return EXIT_INPUT;
    }
    return run_one(&o, out);
}
