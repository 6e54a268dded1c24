/* A small structural mutation fuzzer over HLO texts (make fuzz; not make
 * test). Each round takes one of the given files, applies a few mutations
 * that keep it looking like HLO — an operand dropped or repeated, an
 * attribute removed, a number replaced by a hostile one (0, -1, INT_MIN,
 * 2^31-1, 65536, ...), an opcode or a called computation swapped, a line
 * deleted or repeated — and runs what a user's input meets: the reader,
 * graph_check, the printer and reader again, the interpreter (small budgets)
 * and the checker against the unmutated file with execution on. A mutant must
 * give a diagnostic or a module that survives all of it; sanitizers catch the
 * rest. The mutant under test is written to a file first (-o, default
 * build/mutant.hlo), so a crash leaves its reproducer there; the first mutant
 * whose proof execution contradicts is kept as MUTANT.defect.hlo.
 *
 * With -m MANIFEST (repeatable) it mutates the distributed programs of the
 * manifest's correct pairs instead, the way bugs happen (a small number
 * changed — a dimension, a replica group, an offset —, two operands swapped,
 * one arithmetic opcode for another), and checks each mutant against its
 * pair's baseline and relations: a mutant the rules call verified while
 * execution differs is kept as MUTANT.defect.hlo, one the rules report a
 * bug in while execution agrees as MUTANT.alarm.hlo (a false alarm, or a
 * difference random inputs do not reach: to be looked into). It closes with
 * the tally: of the mutants execution shows different, how many the rules
 * found.
 *
 * It also counts how many mismatches are reported at the instruction the
 * mutation changed. -l LOG lists the mutants execution shows different and
 * the rules leave undecided (the changed line and the rules' reason), and
 * the mismatches reported elsewhere than at the changed instruction.
 *
 * usage: mutate [-n ROUNDS] [-s SEED] [-t SECONDS] [-o MUTANT] [-l LOG] (-m MANIFEST... | FILE...) */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "check.h"
#include "hlo.h"
#include "interp.h"
#include "io.h"

static uint64_t rng_state;
static const char *mutant_path = "build/mutant.hlo";  /* -o */
static bool semantic;                                   /* -m: mutations like bugs */

/* One program to mutate, with what its mutants are checked against. */
typedef struct source {
    char *path, *src;
    char *baseline;   /* the pair's baseline; NULL: the unmutated file itself */
    char *relations;  /* NULL: inferred (--auto-relations) */
} source;

static uint64_t rnd(uint64_t n) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return n ? (rng_state >> 33) % n : 0;
}

/* A line-level view of a text: mutations edit one line at a time. */
typedef struct text {
    char **lines;
    size_t n, cap;
} text;

static void text_push(text *t, const char *s, size_t len) {
    XGROW(t->lines, t->cap, t->n + 1);
    t->lines[t->n++] = xstrndup(s, len);
}

static void text_split(text *t, const char *src) {
    memset(t, 0, sizeof *t);
    for (const char *p = src; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        text_push(t, p, len);
        p += len + (e ? 1 : 0);
    }
}

static char *text_join(const text *t) {
    strbuf b;
    sb_init(&b);
    for (size_t i = 0; i < t->n; i++) {
        sb_puts(&b, t->lines[i]);
        sb_putc(&b, '\n');
    }
    return sb_take(&b);
}

static void text_free(text *t) {
    for (size_t i = 0; i < t->n; i++) free(t->lines[i]);
    free(t->lines);
}

/* Replaces line[from, to) with rep. */
static void splice(char **line, size_t from, size_t to, const char *rep) {
    size_t n = strlen(*line), r = strlen(rep);
    char *s = xmalloc(n - (to - from) + r + 1);
    memcpy(s, *line, from);
    memcpy(s + from, rep, r);
    memcpy(s + from + r, *line + to, n - to + 1);
    free(*line);
    *line = s;
}

/* The k-th (mod count) occurrence of a character from set in s, or -1. */
static long pick_char(const char *s, const char *set) {
    size_t count = 0;
    for (const char *p = s; *p; p++) count += strchr(set, *p) != NULL;
    if (!count) return -1;
    size_t k = rnd(count);
    for (const char *p = s; *p; p++)
        if (strchr(set, *p) && k-- == 0) return p - s;
    return -1;
}

/* The end of a balanced value starting at s[i] (commas end it at depth 0). */
static size_t value_end(const char *s, size_t i) {
    int depth = 0;
    bool str = false;
    for (; s[i]; i++) {
        char c = s[i];
        if (str) {
            if (c == '\\' && s[i + 1]) i++;
            else if (c == '"') str = false;
            continue;
        }
        if (c == '"') str = true;
        else if (c == '{' || c == '(' || c == '[') depth++;
        else if (c == '}' || c == ')' || c == ']') {
            if (depth == 0) return i;
            depth--;
        } else if (c == ',' && depth == 0) return i;
    }
    return i;
}

static const char *const hostile[] = {"0", "-1", "1", "2", "-2147483648", "2147483647", "65536", "4294967296",
                                      "9223372036854775807", "100000000", "3"};
static const char *const opcodes[] = {"add", "abs", "select", "call", "tuple", "concatenate", "reduce", "sort",
                                      "all-reduce", "while", "conditional", "dynamic-slice", "get-tuple-element",
                                      "custom-call", "negate", "dot", "broadcast", "reshape", "transpose", "slice"};

/* One mutation of line i of t; false when it did not apply. */
static bool mutate_line(text *t, size_t i, char **names, size_t nnames) {
    char **l = &t->lines[i];
    long at;
    switch (semantic ? 8 + rnd(3) : rnd(8)) {
    case 0: { /* drop an operand */
        char *open = strchr(*l, '(');
        if (!open || strchr(open, ')') == open + 1) return false;
        size_t s = (size_t)(open - *l) + 1, e = value_end(*l, s);
        if ((*l)[e] == ',') e++;
        splice(l, s, e, "");
        return true;
    }
    case 1: { /* repeat an operand */
        char *open = strchr(*l, '(');
        if (!open || strstr(*l, "parameter(") || strstr(*l, "constant(")) return false;
        size_t s = (size_t)(open - *l) + 1, e = value_end(*l, s);
        char *op = xstrndup(*l + s, e - s);
        strbuf b;
        sb_init(&b);
        size_t times = rnd(4) == 0 ? 70000 : 1 + rnd(3);
        for (size_t k = 0; k < times; k++) sb_printf(&b, "%s, ", op);
        splice(l, s, s, b.s ? b.s : "");
        sb_free(&b);
        free(op);
        return true;
    }
    case 2: { /* remove an attribute */
        at = pick_char(*l, "=");
        if (at < 0) return false;
        const char *comma = NULL;
        for (const char *p = *l + at; p > *l; p--)
            if (*p == ',') { comma = p; break; }
        if (!comma) return false;
        size_t e = value_end(*l, (size_t)at + 1);
        splice(l, (size_t)(comma - *l), e, "");
        return true;
    }
    case 3: { /* a hostile number */
        at = pick_char(*l, "0123456789");
        if (at < 0) return false;
        size_t e = (size_t)at;
        while ((*l)[e] >= '0' && (*l)[e] <= '9') e++;
        splice(l, (size_t)at, e, hostile[rnd(ARRAY_LEN(hostile))]);
        return true;
    }
    case 4: { /* another opcode */
        char *open = strchr(*l, '(');
        if (!open) return false;
        char *sp = open;
        while (sp > *l && sp[-1] != ' ') sp--;
        splice(l, (size_t)(sp - *l), (size_t)(open - *l), opcodes[rnd(ARRAY_LEN(opcodes))]);
        return true;
    }
    case 5: { /* another called computation */
        char *k = strstr(*l, "to_apply=");
        if (!k) k = strstr(*l, "body=");
        if (!k) k = strstr(*l, "condition=");
        if (!k || !nnames) return false;
        size_t s = (size_t)(strchr(k, '=') - *l) + 1, e = value_end(*l, s);
        splice(l, s, e, names[rnd(nnames)]);
        return true;
    }
    case 6: /* delete the line */
        free(*l);
        memmove(&t->lines[i], &t->lines[i + 1], (t->n - i - 1) * sizeof *t->lines);
        t->n--;
        return true;
    case 8: { /* a small number for another (a dimension, a device, an offset) */
        at = pick_char(*l, "0123456789");
        if (at < 0 || (at > 0 && ((*l)[at - 1] == '.' || (*l)[at - 1] == '%' || isalpha((unsigned char)(*l)[at - 1]))))
            return false;
        size_t e = (size_t)at;
        while ((*l)[e] >= '0' && (*l)[e] <= '9') e++;
        if (e - (size_t)at > 1 || (*l)[e] == '.' || (*l)[e] == 'e') return false;
        char rep[2] = {(char)('0' + ((*l)[at] - '0' + 1 + rnd(7)) % 8), 0};
        splice(l, (size_t)at, e, rep);
        return true;
    }
    case 9: { /* the first two operands swapped */
        char *open = strchr(*l, '(');
        if (!open || strstr(*l, "parameter(") || strstr(*l, "constant(")) return false;
        size_t s1 = (size_t)(open - *l) + 1, e1 = value_end(*l, s1);
        if ((*l)[e1] != ',') return false;
        size_t s2 = e1 + 1;
        while ((*l)[s2] == ' ') s2++;
        size_t e2 = value_end(*l, s2);
        char *a = xstrndup(*l + s1, e1 - s1), *b = xstrndup(*l + s2, e2 - s2);
        if (strcmp(a, b) == 0) {
            free(a);
            free(b);
            return false;
        }
        strbuf r;
        sb_init(&r);
        sb_printf(&r, "%s, %s", b, a);
        splice(l, s1, e2, r.s);
        sb_free(&r);
        free(a);
        free(b);
        return true;
    }
    case 10: { /* one arithmetic opcode for another */
        static const char *const arith[] = {" add(", " subtract(", " multiply(", " maximum(", " minimum(", " divide("};
        for (size_t k = 0; k < ARRAY_LEN(arith); k++) {
            char *p = strstr(*l, arith[k]);
            if (!p) continue;
            const char *to = arith[(k + 1 + rnd(ARRAY_LEN(arith) - 1)) % ARRAY_LEN(arith)];
            size_t from = (size_t)(p - *l);
            splice(l, from, from + strlen(arith[k]), to);
            return true;
        }
        return false;
    }
    default: { /* repeat the line elsewhere */
        char *copy = xstrdup(*l);
        size_t j = rnd(t->n + 1);
        XGROW(t->lines, t->cap, t->n + 1);
        memmove(&t->lines[j + 1], &t->lines[j], (t->n - j) * sizeof *t->lines);
        t->lines[j] = copy;
        t->n++;
        return true;
    }
    }
}

/* Computation names of t (lines "name {" or "ENTRY name"), for swaps. */
static size_t comp_names(const text *t, char ***out) {
    char **v = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < t->n; i++) {
        const char *s = t->lines[i];
        if (!strncmp(s, "ENTRY ", 6)) s += 6;
        if (*s == ' ' || *s == 0 || !strchr(s, '{') || strchr(s, '=')) continue;
        size_t len = strcspn(s, " ({");
        if (!len) continue;
        XGROW(v, cap, n + 1);
        v[n++] = xstrndup(s, len);
    }
    *out = v;
    return n;
}

static void write_file(const char *path, const char *s) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "mutate: cannot write %s\n", path);
        exit(3);
    }
    fputs(s, f);
    fclose(f);
}

/* What the checker said of one mutant, tallied at the end. */
static long n_verified, n_by_rules, n_by_execution, n_unverified, n_defects, n_alarms;
static long n_placed, n_at_mutation; /* mismatches of a mutated instruction; those reported at it */

/* Keeps the first mutant of each contradiction per original (up to 64 in
 * all) beside MUTANT as MUTANT.N.SUFFIX, with the original named, to be
 * looked into. */
static void keep(const char *suffix, const char *what, const char *orig_path, const char *src) {
    static const char *kept[64][2];
    static int nkept;
    for (int k = 0; k < nkept; k++)
        if (kept[k][0] == orig_path && !strcmp(kept[k][1], suffix)) return;
    if (nkept == ARRAY_LEN(kept)) return;
    kept[nkept][0] = orig_path;
    kept[nkept][1] = suffix;
    char path[512];
    snprintf(path, sizeof path, "%s.%d%s", mutant_path, nkept++, suffix);
    write_file(path, src);
    fprintf(stderr, "mutate: %s of %s: kept as %s\n", what, orig_path, path);
}

/* Tallies what the rules alone said (RULES) and what the checker said with
 * execution (V, TRACE); a mutant the rules relate to the original while
 * execution shows they differ is a checker defect, not a crash, and one the
 * rules find a bug in while execution agrees a possible false alarm (check.c's
 * words for both). */
static void judge(int rules, int v, json_t *trace, const char *orig_path, const char *src) {
    static const char related[] = "unverified: the transfer functions relate every output";
    static const char reported[] = "unverified: the transfer functions report";
    json_t *f0 = json_array_get(json_object_get(trace, "findings"), 0);
    const char *msg = json_string_value(json_object_get(f0, "message"));
    if (msg && !strncmp(msg, related, sizeof related - 1)) {
        n_defects++;
        keep(".defect.hlo", "the rules relate this mutant, execution does not", orig_path, src);
    } else if (msg && !strncmp(msg, reported, sizeof reported - 1)) {
        n_alarms++;
        keep(".alarm.hlo", "the rules report a bug in this mutant, execution agrees", orig_path, src);
    } else if (rules == VERDICT_VERIFIED) n_verified++;
    else if (rules == VERDICT_MISMATCH) n_by_rules++;
    else if (v == VERDICT_MISMATCH) n_by_execution++;
    else n_unverified++;
}

/* -l LOG: each mutant execution shows different and the rules leave
 * undecided, as its changed lines and the rules' reason (what to model next). */
static FILE *missed_log;
static strbuf missed_why;

/* The first line where src departs from so's text (into *was and *now,
 * owned by the caller's texts a and b). */
static void first_change(const source *so, const char *src, text *a, text *b, const char **was, const char **now) {
    text_split(a, so->src);
    text_split(b, src);
    size_t i = 0;
    while (i < a->n && i < b->n && !strcmp(a->lines[i], b->lines[i])) i++;
    *was = i < a->n ? a->lines[i] : "";
    *now = i < b->n ? b->lines[i] : "";
}

static void log_missed(const source *so, const char *src, const char *placed) {
    text a, b;
    const char *was, *now;
    first_change(so, src, &a, &b, &was, &now);
    fprintf(missed_log, "%s\n  was: %.300s\n  now: %.300s\n  %s: %.400s\n", so->path, was, now, placed ? "placed at" : "why",
            placed ? placed : missed_why.s ? missed_why.s : "");
    text_free(&a);
    text_free(&b);
}

/* The instruction a mutation changed: the name its first changed line
 * defines ("  ROOT %mul.3 = ..."), empty when that is no instruction. */
static void changed_instruction(const source *so, const char *src, char *out, size_t n) {
    text a, b;
    const char *was, *now;
    first_change(so, src, &a, &b, &was, &now);
    const char *p = now;
    while (*p == ' ') p++;
    if (!strncmp(p, "ROOT ", 5)) p += 5;
    if (*p == '%') p++;
    size_t len = strcspn(p, " =");
    const char *eq = strstr(p, " = ");
    if (!eq || (size_t)(eq - p) != len || len >= n) len = 0;
    memcpy(out, p, len);
    out[len] = 0;
    text_free(&a);
    text_free(&b);
}

/* Everything a mutant meets; returns 1 when it was read as a module. */
static int run_one(const source *so, const char *src) {
    const char *orig_path = so->path;
    write_file(mutant_path, src);
    diag d;
    diag_init(&d, "mutant.hlo");
    hlo_module *m = hlo_parse_text(src, strlen(src), "mutant.hlo", &d);
    if (!m) {
        if (d.count == 0) {
            fprintf(stderr, "mutate: refused without a diagnostic (%s)\n", mutant_path);
            abort();
        }
        diag_free(&d);
        return 0;
    }
    if (graph_check(m, NULL) != 0) abort();
    strbuf b;
    sb_init(&b);
    hlo_print(&b, m);
    hlo_module *again = hlo_parse_text(b.s, b.len, "printed", &d);
    if (!again || !graph_equal(m, again, 0, NULL)) {
        fprintf(stderr, "mutate: printed text does not read back (%s)\n", mutant_path);
        abort();
    }
    graph_free(again);
    sb_free(&b);
    interp_config cfg = {.max_elements = 1 << 16, .max_steps = 1 << 22, .max_iterations = 1 << 12};
    strbuf err;
    sb_init(&err);
    if (interp_check(m, &cfg, &err) == INTERP_OK) {
        int64_t R, P;
        interp_devices(m, &R, &P);
        const hlo_comp *e = graph_entry(m);
        interp_val ***args = xcalloc((size_t)(R * P), sizeof *args);
        interp_val **out = xcalloc((size_t)(R * P), sizeof *out);
        interp_rng rng;
        interp_rng_seed(&rng, 7);
        bool ok = true;
        for (int64_t dv = 0; dv < R * P; dv++) {
            args[dv] = xcalloc(e->nparams + 1, sizeof **args);
            for (uint32_t k = 0; k < e->nparams; k++) {
                const shape *s = &e->instrs[e->params[k]].shape;
                args[dv][k] = s->dtype == DT_TUPLE ? NULL : interp_val_new(s->dtype, s->rank, s->dims);
                if (args[dv][k]) interp_val_fill_random(args[dv][k], &rng);
                else ok = false;
            }
        }
        if (ok && interp_run(m, &cfg, (interp_val **const *)args, out, &err) == INTERP_OK)
            for (int64_t dv = 0; dv < R * P; dv++) interp_val_free(out[dv]);
        for (int64_t dv = 0; dv < R * P; dv++) {
            for (uint32_t k = 0; k < e->nparams; k++) interp_val_free(args[dv][k]);
            free(args[dv]);
        }
        free(args);
        free(out);
    }
    sb_free(&err);
    graph_free(m);
    check_opts o = {.name = "mutant", .baseline = so->baseline ? so->baseline : orig_path, .distributed = mutant_path,
                    .relations = so->relations, .auto_relations = !so->relations, .witness = false, .jobs = 1};
    json_t *trace = NULL;
    int rules = check_pair(&o, &trace, &d);
    if (missed_log && rules == VERDICT_UNVERIFIED) {
        json_t *f0 = json_array_get(json_object_get(trace, "findings"), 0);
        const char *msg = json_string_value(json_object_get(f0, "message"));
        sb_reset(&missed_why);
        sb_puts(&missed_why, msg ? msg : "(no reason)");
    }
    json_decref(trace);
    diag_free(&d);
    diag_init(&d, "mutant.hlo");
    trace = NULL;
    o.witness = true;
    int v = check_pair(&o, &trace, &d);
    bool known = v == VERDICT_VERIFIED || v == VERDICT_MISMATCH || v == VERDICT_UNVERIFIED || v == VERDICT_ERROR;
    if (!known || (v != VERDICT_ERROR && !trace)) {
        fprintf(stderr, "mutate: check gave verdict %d %s a trace (%s)\n", v, trace ? "with" : "without", mutant_path);
        abort();
    }
    judge(rules, v, trace, orig_path, src);
    if (missed_log && rules == VERDICT_UNVERIFIED && v == VERDICT_MISMATCH) log_missed(so, src, NULL);
    if (v == VERDICT_MISMATCH) {
        /* Where the finding points, against where the mutation is. */
        char at[256];
        changed_instruction(so, src, at, sizeof at);
        json_t *f0 = json_array_get(json_object_get(trace, "findings"), 0);
        const char *placed = json_string_value(json_object_get(json_object_get(f0, "distributed"), "instruction"));
        if (at[0] && placed) {
            n_placed++;
            if (!strcmp(at, placed)) n_at_mutation++;
            else if (missed_log) log_missed(so, src, placed);
        }
    }
    json_decref(trace);
    diag_free(&d);
    return 1;
}

static char *read_all(const char *path) {
    diag d;
    diag_init(&d, path);
    size_t len;
    char *src = io_read_file(path, &len, NULL, &d);
    if (!src) {
        fprintf(stderr, "%s", d.out.s ? d.out.s : "mutate: cannot read a file\n");
        exit(2);
    }
    diag_free(&d);
    return src;
}

static char *beside(const char *manifest, const char *name) {
    const char *slash = strrchr(manifest, '/');
    strbuf b;
    sb_init(&b);
    sb_printf(&b, "%.*s%s", slash ? (int)(slash - manifest + 1) : 0, manifest, name);
    return sb_take(&b);
}

/* The correct pairs of a manifest (text forms), appended to srcs. */
static void add_manifest(const char *manifest, source **srcs, size_t *n, size_t *cap) {
    json_error_t err;
    json_t *m = json_load_file(manifest, 0, &err);
    if (!m) {
        fprintf(stderr, "%s:%d:%d: %s\n", manifest, err.line, err.column, err.text);
        exit(2);
    }
    json_t *pairs = json_object_get(m, "pairs"), *p;
    size_t k;
    json_array_foreach(pairs, k, p) {
        const char *exp = json_string_value(json_object_get(p, "expected"));
        const char *b = json_string_value(json_object_get(json_object_get(p, "baseline"), "hlo"));
        const char *d = json_string_value(json_object_get(json_object_get(p, "distributed"), "hlo"));
        const char *r = json_string_value(json_object_get(p, "relations"));
        if (!exp || strcmp(exp, "verified") || !b || !d || !r) continue;
        XGROW(*srcs, *cap, *n + 1);
        source *so = &(*srcs)[(*n)++];
        so->path = beside(manifest, d);
        so->src = read_all(so->path);
        so->baseline = beside(manifest, b);
        so->relations = strcmp(r, "auto") ? beside(manifest, r) : NULL;
    }
    json_decref(m);
}

int main(int argc, char **argv) {
    long rounds = 200, seconds = 0;
    uint64_t seed = 1;
    int a = 1;
    for (; a + 1 < argc && argv[a][0] == '-'; a += 2) {
        if (!strcmp(argv[a], "-n")) rounds = atol(argv[a + 1]);
        else if (!strcmp(argv[a], "-s")) seed = strtoull(argv[a + 1], NULL, 10);
        else if (!strcmp(argv[a], "-t")) seconds = atol(argv[a + 1]);
        else if (!strcmp(argv[a], "-o")) mutant_path = argv[a + 1];
        else if (!strcmp(argv[a], "-l")) {
            if (!(missed_log = fopen(argv[a + 1], "w"))) {
                fprintf(stderr, "mutate: cannot write %s\n", argv[a + 1]);
                return 2;
            }
        }
        else break;
    }
    source *srcs = NULL;
    size_t nfiles = 0, cap = 0;
    for (; a + 1 < argc && !strcmp(argv[a], "-m"); a += 2) {
        semantic = true;
        add_manifest(argv[a + 1], &srcs, &nfiles, &cap);
    }
    for (; !semantic && a < argc; a++) {
        XGROW(srcs, cap, nfiles + 1);
        srcs[nfiles++] = (source){.path = xstrdup(argv[a]), .src = read_all(argv[a])};
    }
    if (nfiles == 0) {
        fprintf(stderr, "usage: mutate [-n ROUNDS] [-s SEED] [-t SECONDS] [-o MUTANT] [-l LOG] (-m MANIFEST... | FILE...)\n");
        return 2;
    }
    rng_state = seed;
    double t0 = now_ms();
    long read = 0, r = 0;
    for (; r < rounds || (seconds && now_ms() - t0 < seconds * 1000.0); r++) {
        if (seconds && now_ms() - t0 >= seconds * 1000.0) break;
        size_t k = rnd(nfiles);
        text t;
        text_split(&t, srcs[k].src);
        char **names;
        size_t nnames = comp_names(&t, &names);
        int want = 1 + (int)rnd(3);
        for (int tries = 0; want > 0 && tries < 50 && t.n; tries++)
            if (mutate_line(&t, rnd(t.n), names, nnames)) want--;
        char *src = text_join(&t);
        read += run_one(&srcs[k], src);
        free(src);
        for (size_t i = 0; i < nnames; i++) free(names[i]);
        free(names);
        text_free(&t);
    }
    printf("mutate: %ld mutants (seed %llu), %ld read as modules, none crashed\n", r, (unsigned long long)seed, read);
    printf("mutate: checked: %ld verified, %ld mismatch by the rules, %ld by execution only, %ld unverified; "
           "%ld verified while execution differs (defects), %ld bugs reported while execution agrees\n",
           n_verified, n_by_rules, n_by_execution, n_unverified, n_defects, n_alarms);
    printf("mutate: of %ld mismatches where an instruction was changed, %ld reported at that instruction\n", n_placed,
           n_at_mutation);
    if (missed_log) fclose(missed_log);
    sb_free(&missed_why);
    for (size_t k = 0; k < nfiles; k++) {
        free(srcs[k].path);
        free(srcs[k].src);
        free(srcs[k].baseline);
        free(srcs[k].relations);
    }
    free(srcs);
    return 0;
}
