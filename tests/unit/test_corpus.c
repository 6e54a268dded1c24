/* The checker on the corpora next to samples/manifest.json: samples/train (the
 * shard_map training steps, correct pairs and bug variants), samples/wild
 * (GSPMD programs as Flax and keras-hub models partition them; all correct),
 * samples/torchxla, and samples/probe (small GSPMD and shard_map programs
 * written against the op semantics, each checked under JAX; correct pairs, bug
 * variants and minimal cases of once-reported false alarms), and samples/fresh
 * (programs as users write them, exported with python/scalify_jax: optax
 * optimizers, sharded norms and losses, expert parallelism; correct pairs and
 * bug variants) and samples/fresh2 (a second such batch: attention with rotary
 * embeddings under tensor, context and Ulysses parallelism, ZeRO-2, int8
 * weights, a KV-cache decode step, capacity routing, ...) and samples/fresh3
 * (a third: training steps on a dp x fsdp x tp mesh, MLA and T5 attention,
 * LAMB, Muon, loss scaling, message passing, ...).
 * Every pair the manifests list, in both forms (text and protobuf), is checked
 * as `scalify check --witness --rules rules` would (the corpora also checked
 * by the rules alone: there in both forms, with execution in protobuf form),
 * and asserted:
 *   - never an error (both forms read and relate as far as they do);
 *   - a correct pair is never a mismatch (no false alarm, in either form);
 *   - a bug variant is a mismatch (in either form), and never verified,
 *     with or without execution;
 *   - one verdict per program: both forms give the same verdict and the same
 *     first finding (kind and distributed instruction);
 *   - a mismatch the rules decided (an error finding not "confirmed by
 *     execution") is not contradicted by execution: the witness differs by
 *     more than rounding (max_rel > 1e-5), but for dtype-mismatch findings,
 *     which inputs of magnitude one need not show.
 * samples/probe and samples/fresh, fresh2, ... are checked a second time without --witness (the rules alone,
 * where both forms run and agree; with execution only the protobuf form runs for them), since their false
 * alarms were the rules': a correct pair is never a
 * mismatch there either, but for a pair its manifest marks
 * "known_false_alarm": {"without_witness": "issue ..."}, which is asserted to
 * still be a mismatch (so the mark goes when the alarm does) and printed as an
 * open false alarm, never counted as passing. Likewise a bug variant marked
 * "known_miss": {"with_witness": "why"} (one execution does not show yet) is
 * asserted to stay unverified with --witness and printed as an open miss.
 * And the state, pair by pair, against tests/cases/check/expected-corpus.tsv
 * (its header says what a line holds and how to rewrite it), so that a change
 * of verdict is a one-line diff of that file. The notes printed at the end
 * (verified counts, and why each correct pair that is not verified is not) are
 * what README.md's status quotes. */
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "harness.h"
#include "util.h"

#define CORPUS_EXPECTED "tests/cases/check/expected-corpus.tsv"

/* One pair's check in one form: the verdict and its trace (NULL on error). */
typedef struct corpus_run {
    int verdict;
    json_t *trace;
} corpus_run;

/* Checks pair p of the manifest in folder dir in form ("hlo" or "pb"), with
 * execution (--witness) or by the rules alone. */
static corpus_run corpus_check(const char *dir, json_t *p, const char *form, bool witness) {
    char b[1024], d[1024], r[1024];
    const char *name = json_string_value(json_object_get(p, "name"));
    const char *rel = json_string_value(json_object_get(p, "relations"));
    snprintf(b, sizeof b, "%s/%s", dir, json_string_value(json_object_get(json_object_get(p, "baseline"), form)));
    snprintf(d, sizeof d, "%s/%s", dir, json_string_value(json_object_get(json_object_get(p, "distributed"), form)));
    snprintf(r, sizeof r, "%s/%s", dir, rel ? rel : "");
    check_opts o = {.name = name, .baseline = b, .distributed = d, .witness = witness, .rules_dir = "rules"};
    if (rel && strcmp(rel, "auto") != 0) o.relations = r;
    else o.auto_relations = true;
    diag dg;
    diag_init(&dg, name);
    corpus_run run = {0};
    run.verdict = check_pair(&o, &run.trace, &dg);
    if (run.verdict == VERDICT_ERROR) printf("check %s (%s): %s", name, form, dg.out.s ? dg.out.s : "");
    diag_free(&dg);
    return run;
}

static const char *const corpus_forms[2] = {"hlo", "pb"};

/* The checks of one pass over a corpus, run on a few threads before they
 * are asserted in order: a check keeps no state beyond its own, so pairs
 * run at once (the suite's time halves on two cores). Run k is pair k / 2
 * in form k % 2; with `both` false only the protobuf form runs (the text
 * form's runs stay empty). A corpus checked by the rules alone too runs
 * both forms there (one reading per program: the forms' agreement) and
 * the protobuf form alone with execution (executing the same program
 * twice shows nothing more); the others run both forms with execution. */
typedef struct corpus_batch {
    const char *dir;
    json_t *pairs;
    bool witness, both;
    corpus_run *runs;
    size_t next, n;
    pthread_mutex_t mu;
} corpus_batch;

static void *batch_worker(void *arg) {
    corpus_batch *b = arg;
    for (;;) {
        pthread_mutex_lock(&b->mu);
        size_t k = b->next++;
        pthread_mutex_unlock(&b->mu);
        if (k >= b->n) return NULL;
        if (!b->both && k % 2 == 0) continue;
        b->runs[k] = corpus_check(b->dir, json_array_get(b->pairs, k / 2), corpus_forms[k % 2], b->witness);
    }
}

static corpus_run *corpus_batch_run(const char *dir, json_t *pairs, bool witness, bool both) {
    enum { MAX_THREADS = 4 };
    corpus_batch b = {.dir = dir, .pairs = pairs, .witness = witness, .both = both, .n = 2 * json_array_size(pairs)};
    b.runs = xcalloc(b.n, sizeof *b.runs);
    pthread_mutex_init(&b.mu, NULL);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = cores < 1 ? 1 : cores > MAX_THREADS ? MAX_THREADS : (int)cores, started = 0;
    pthread_t t[MAX_THREADS];
    for (int k = 1; k < nt; k++) started += pthread_create(&t[started], NULL, batch_worker, &b) == 0;
    batch_worker(&b);
    for (int k = 0; k < started; k++) pthread_join(t[k], NULL);
    pthread_mutex_destroy(&b.mu);
    return b.runs;
}

static json_t *first_finding(const corpus_run *run) {
    return json_array_get(json_object_get(run->trace, "findings"), 0);
}

static const char *str_or(json_t *j, const char *key, const char *dflt) {
    const char *s = json_string_value(json_object_get(j, key));
    return s ? s : dflt;
}

/* Whether some error finding was decided by the rules (its message does not
 * say execution confirmed it). */
static bool decided_by_rules(const corpus_run *run) {
    json_t *fs = json_object_get(run->trace, "findings");
    for (size_t k = 0; k < json_array_size(fs); k++) {
        json_t *f = json_array_get(fs, k);
        if (strcmp(str_or(f, "severity", ""), "error") == 0 && !strstr(str_or(f, "message", ""), "confirmed by execution"))
            return true;
    }
    return false;
}

/* Whether a source site (a finding's distributed side or an instruction it
 * names as involved) is at one of the bug's locations. */
static bool site_at_bug(json_t *site, json_t *locs) {
    const char *file = json_string_value(json_object_get(site, "file"));
    for (size_t k = 0; file && k < json_array_size(locs); k++) {
        json_t *loc = json_array_get(locs, k);
        if (strcmp(file, str_or(loc, "file", "")) == 0 &&
            json_integer_value(json_object_get(site, "line")) == json_integer_value(json_object_get(loc, "line")))
            return true;
    }
    return false;
}

/* The bug columns of a variant's line: whether a finding sits at one of the
 * manifest's bug lines, and whether one has a kind the manifest lists. */
static void bug_columns(const corpus_run *run, json_t *bug, strbuf *line) {
    json_t *fs = json_object_get(run->trace, "findings"), *locs = json_object_get(bug, "locations");
    json_t *kinds = json_object_get(bug, "kinds");
    bool hit = false, kind = false;
    for (size_t k = 0; k < json_array_size(fs); k++) {
        json_t *f = json_array_get(fs, k), *inv = json_object_get(f, "involved");
        hit |= site_at_bug(json_object_get(f, "distributed"), locs);
        for (size_t i = 0; i < json_array_size(inv); i++) hit |= site_at_bug(json_array_get(inv, i), locs);
        for (size_t i = 0; i < json_array_size(kinds); i++)
            kind |= strcmp(str_or(f, "kind", ""), json_string_value(json_array_get(kinds, i))) == 0;
    }
    json_t *loc = json_array_get(locs, 0);
    sb_printf(line, "\tline %s %s:%lld\t%s", hit ? "hit" : "missed", str_or(loc, "file", "?"),
              (long long)json_integer_value(json_object_get(loc, "line")), kind ? "kind listed" : "kind not listed");
}

/* The expected-corpus.tsv line of a pair (without its name): verdict and first
 * finding kind; for a mismatch who decided it; for a bug variant the bug
 * columns. */
static void expected_columns(const corpus_run *run, json_t *bug, strbuf *line) {
    json_t *f0 = first_finding(run);
    sb_puts(line, verdict_name(run->verdict));
    if (f0) sb_printf(line, " %s", str_or(f0, "kind", "?"));
    if (run->verdict == VERDICT_MISMATCH) sb_puts(line, decided_by_rules(run) ? "\tby rules" : "\tby execution");
    if (bug && run->trace) bug_columns(run, bug, line);
}

/* A rule-decided mismatch is not contradicted by execution: the finding that
 * carries the witness shows more than rounding. */
static void witness_disagrees(const corpus_run *run, const char *form) {
    json_t *fs = json_object_get(run->trace, "findings"), *w = NULL, *wf = NULL;
    for (size_t k = 0; !w && k < json_array_size(fs); k++) w = json_object_get(wf = json_array_get(fs, k), "witness");
    /* (execution that could not run says so in the first finding: an op the interpreter lacks) */
    const char *m0 = str_or(json_array_get(fs, 0), "message", "");
    if (!w && strstr(m0, "(not checked by execution: not run: ")) return;
    if (!CHECK_MSG(w != NULL, "%s: a rule-decided mismatch without a witness", form)) return;
    if (strcmp(str_or(wf, "kind", ""), "dtype-mismatch") == 0) return;
    json_t *rel = json_object_get(w, "max_rel");
    bool differs = json_is_string(rel) ? strcmp(json_string_value(rel), "inf") == 0 : json_number_value(rel) > 1e-5;
    CHECK_MSG(differs, "%s: a rule-decided %s finding whose execution agrees (max_rel %g)", form, str_or(wf, "kind", "?"),
              json_number_value(rel));
}

/* The tsv's line for key (its columns after the name), or NULL; caller frees. */
static char *tsv_lookup(const char *tsv, const char *key) {
    size_t n = strlen(key);
    for (const char *p = tsv; p && *p;) {
        const char *e = strchr(p, '\n');
        if (!e) e = p + strlen(p);
        if (*p != '#' && (size_t)(e - p) > n && p[n] == '\t' && strncmp(p, key, n) == 0)
            return xstrndup(p + n + 1, (size_t)(e - p - n - 1));
        p = *e ? e + 1 : e;
    }
    return NULL;
}

/* Counts for the summary notes of one corpus. */
typedef struct corpus_counts {
    int correct, verified[2], bugs, mismatch[2], by_rules;
    int known_false_alarms; /* without --witness: correct pairs marked (and still) a mismatch */
} corpus_counts;


/* Appends pair name's expected line (from run) to now, and unless updating
 * asserts the expected file has that line under corpus/name. */
static void expected_line(const char *corpus, const char *name, const corpus_run *run, json_t *bug, const char *tsv,
                          bool update, strbuf *now) {
    strbuf got;
    sb_init(&got);
    expected_columns(run, bug, &got);
    char key[512];
    snprintf(key, sizeof key, "%s/%s", corpus, name);
    sb_printf(now, "%s\t%s\n", key, got.s);
    char *want = tsv_lookup(tsv, key);
    bool same = want && strcmp(want, got.s) == 0;
    if (update && !same) printf("note: %s: now \"%s\", was \"%s\"\n", key, got.s, want ? want : "(no line)");
    else if (!update)
        CHECK_MSG(same, "%s says \"%s\", now \"%s\" (a deliberate change: SCALIFY_UPDATE_EXPECTED=1)", CORPUS_EXPECTED,
                  want ? want : "(no line)", got.s);
    free(want);
    sb_free(&got);
}

/* Asserts one pair's checks in both forms (runs), with execution (--witness) or by the rules
 * alone (lines under "CORPUS.rules/"); appends its expected line to now
 * (checked against tsv unless updating) and its reason to reasons when a
 * correct pair is not verified. Without execution a bug variant need not be a
 * mismatch (its line records what it is), and a correct pair the manifest marks
 * a known false alarm must still be one (see the top of this file). */
/* Every finding names a segment of the trace (the one its instruction was
 * counted to), and a mismatch's segments include one judged mismatch. */
static void segments_hold_findings(const corpus_run *r, const char *form) {
    json_t *fs = json_object_get(r->trace, "findings"), *segs = json_object_get(r->trace, "segments");
    if (!r->trace || !json_array_size(segs)) return;
    bool any_mismatch = false;
    for (size_t i = 0; i < json_array_size(segs); i++)
        any_mismatch |= strcmp(str_or(json_array_get(segs, i), "verdict", ""), "mismatch") == 0;
    for (size_t k = 0; k < json_array_size(fs); k++) {
        const char *seg = str_or(json_array_get(fs, k), "segment", NULL);
        bool found = !seg;
        for (size_t i = 0; !found && i < json_array_size(segs); i++)
            found = strcmp(str_or(json_array_get(segs, i), "name", ""), seg) == 0;
        CHECK_MSG(found, "%s: finding %zu names segment '%s', which the trace does not list", form, k, seg);
    }
    if (r->verdict == VERDICT_MISMATCH) CHECK_MSG(any_mismatch, "%s: a mismatch with no segment judged mismatch", form);
}

static void corpus_pair(const char *corpus, json_t *p, corpus_run *runs, bool witness, bool both, const char *tsv,
                        bool update, strbuf *now, strbuf *reasons, corpus_counts *c) {
    const char *name = str_or(p, "name", "?");
    json_t *bug = json_object_get(p, "bug");
    bool is_bug = bug || strcmp(str_or(p, "expected", ""), "mismatch") == 0;
    const char *known = witness ? NULL : str_or(json_object_get(p, "known_false_alarm"), "without_witness", NULL);
    const char *missed = witness && is_bug ? str_or(json_object_get(p, "known_miss"), "with_witness", NULL) : NULL;
    t_case("corpus %s/%s%s", corpus, name, witness ? "" : " without --witness");
    for (int f = both ? 0 : 1; f < 2; f++) {
        corpus_run *r = &runs[f];
        CHECK_MSG(r->verdict != VERDICT_ERROR, "%s: bad input", corpus_forms[f]);
        if (is_bug) {
            /* never a proof of a program that computes another function */
            CHECK_MSG(r->verdict != VERDICT_VERIFIED, "%s: bug variant verified%s", corpus_forms[f],
                      witness ? "" : " without --witness");
            if (missed)
                CHECK_MSG(r->verdict == VERDICT_UNVERIFIED, "%s: marked a known miss (%s) but now %s: drop the mark",
                          corpus_forms[f], missed, verdict_name(r->verdict));
            else if (witness)
                CHECK_MSG(r->verdict == VERDICT_MISMATCH, "%s: bug variant %s", corpus_forms[f], verdict_name(r->verdict));
            c->mismatch[f] += r->verdict == VERDICT_MISMATCH;
        } else if (known) {
            CHECK_MSG(r->verdict == VERDICT_MISMATCH, "%s: marked a known false alarm (%s) but now %s: drop the mark",
                      corpus_forms[f], known, verdict_name(r->verdict));
        } else {
            CHECK_MSG(r->verdict != VERDICT_MISMATCH, "%s: false alarm on a correct pair%s: %s", corpus_forms[f],
                      witness ? "" : " without --witness", str_or(first_finding(r), "message", ""));
            c->verified[f] += r->verdict == VERDICT_VERIFIED;
        }
        if (witness && r->verdict == VERDICT_MISMATCH && decided_by_rules(r)) witness_disagrees(r, corpus_forms[f]);
        segments_hold_findings(r, corpus_forms[f]);
    }
    c->correct += !is_bug;
    c->known_false_alarms += known != NULL && !is_bug;
    c->bugs += is_bug;
    c->by_rules += is_bug && runs[1].verdict == VERDICT_MISMATCH && decided_by_rules(&runs[1]);
    /* One verdict per program: the two forms of a dump are one program. */
    json_t *ft = first_finding(&runs[0]), *fp = first_finding(&runs[1]);
    const char *kt = str_or(ft, "kind", "-"), *kp = str_or(fp, "kind", "-");
    const char *it = str_or(json_object_get(ft, "distributed"), "instruction", "-");
    const char *ip = str_or(json_object_get(fp, "distributed"), "instruction", "-");
    if (both)
        CHECK_MSG(runs[0].verdict == runs[1].verdict && strcmp(kt, kp) == 0 && strcmp(it, ip) == 0,
                  "text: %s %s at %s; protobuf: %s %s at %s", verdict_name(runs[0].verdict), kt, it,
                  verdict_name(runs[1].verdict), kp, ip);
    if (missed) sb_printf(reasons, "note:   %s/%s: bug variant missed, open (%s)\n", corpus, name, missed);
    if (!is_bug && runs[1].verdict != VERDICT_VERIFIED)
        sb_printf(reasons, "note:   %s/%s: %s%s%s%s\n", corpus, name, known ? "known false alarm, open (" : "", known ? known : "",
                  known ? "): " : "", str_or(fp, "message", "(no finding)"));
    /* The expected line: the protobuf form's (the text form's agrees, above). */
    char key[256];
    snprintf(key, sizeof key, "%s%s", corpus, witness ? "" : ".rules");
    expected_line(key, name, &runs[1], bug, tsv, update, now);
    for (int f = 0; f < 2; f++) json_decref(runs[f].trace);
}

/* Every line of tsv names a pair some manifest still lists (now holds this
 * run's lines). */
static void no_stale_lines(const char *tsv, const char *now) {
    t_case("corpus %s: no line for a pair no manifest lists", CORPUS_EXPECTED);
    for (const char *p = tsv; p && *p;) {
        const char *e = strchr(p, '\n');
        if (!e) e = p + strlen(p);
        const char *tab = memchr(p, '\t', (size_t)(e - p));
        if (*p != '#' && tab) {
            char *key = xstrndup(p, (size_t)(tab - p));
            char *line = tsv_lookup(now, key);
            CHECK_MSG(line != NULL, "%s: no manifest lists it", key);
            free(line);
            free(key);
        }
        p = *e ? e + 1 : e;
    }
}

/* Rewrites the expected file: its comment header as it is, then now. */
static void rewrite_expected(const char *tsv, const char *now) {
    FILE *f = fopen(CORPUS_EXPECTED, "w");
    CHECK_MSG(f != NULL, "cannot write %s", CORPUS_EXPECTED);
    if (!f) return;
    for (const char *p = tsv; p && *p == '#';) {
        const char *e = strchr(p, '\n');
        if (!e) e = p + strlen(p);
        fwrite(p, 1, (size_t)(e - p), f);
        fputc('\n', f);
        p = *e ? e + 1 : e;
    }
    fputs(now, f);
    fclose(f);
    printf("note: rewrote %s\n", CORPUS_EXPECTED);
}

void suite_corpus(void);
void suite_corpus(void) {
    static const struct {
        const char *name;
        bool rules_only_too; /* also checked without --witness */
    } corpora[] = {{"train", false}, {"wild", false}, {"torchxla", false}, {"probe", true}, {"fresh", true},
                   {"fresh2", true}, {"fresh3", true}, {"fresh4", true},
                   {"fresh5", true}, {"fresh6", true}, {"fresh7", true}, {"fresh8", true}, {"fresh9", true}, {"fresh10", true},
                   {"fresh11", true}, {"fresh12", true}, {"fresh13", true}, {"fresh14", true}, {"fresh15", true}, {"fresh16", true},
                   {"fresh17", true}, {"fresh18", true}, {"fresh19", true},
                   {"fresh20", true}, {"fresh21", true}, {"fresh22", true},
                   {"fresh23", true}, {"fresh24", true}, {"fresh25", true},
                   {"fresh26", true}, {"fresh27", true}, {"fresh28", true}, {"fresh29", true},
                   {"fresh30", true}, {"fresh31", true}, {"fresh32", true}, {"fresh33", true},
                   {"fresh34", true}, {"fresh35", true}, {"fresh36", true}, {"fresh37", true}, {"fresh38", true}, {"fresh39", true}, {"fresh40", true},
                   {"fresh41", true}, {"fresh42", true}, {"fresh43", true}, {"fresh44", true},
                   {"fresh45", true}, {"fresh46", true}, {"fresh47", true}, {"fresh48", true},
                   {"fresh49", true}, {"fresh50", true}, {"fresh51", true}, {"fresh52", true}, {"fresh53", true}, {"fresh54", true},
                   {"fresh55", true}, {"fresh56", true}, {"fresh57", true}, {"fresh58", true},
                   {"fresh59", true}, {"fresh60", true}, {"fresh61", true},
                   {"fresh62", true}, {"fresh63", true}, {"fresh64", true}, {"fresh65", true},
                   {"fresh66", true}, {"fresh67", true}, {"fresh68", true},
                   {"fresh69", true}, {"fresh70", true}, {"fresh71", true}, {"fresh72", true},
                   {"fresh73", true}, {"fresh74", true}, {"fresh75", true}, {"fresh76", true},
                   {"fresh77", true}, {"fresh78", true}, {"fresh79", true}, {"fresh80", true}, {"fresh81", true}, {"fresh82", true},
                   {"fresh83", true}, {"fresh84", true}, {"fresh85", true}, {"fresh86", true}, {"fresh87", true}, {"fresh88", true},
                   {"fresh89", true}, {"fresh90", true}, {"fresh91", true}, {"fresh92", true}, {"fresh93", true}, {"fresh94", true},
                   {"fresh95", true}, {"fresh96", true}, {"fresh97", true}, {"fresh98", true}, {"fresh99", true},
                   {"fresh100", true}, {"fresh101", true}, {"fresh102", true}, {"fresh103", true},
                   {"fresh104", true}, {"fresh105", true}, {"fresh106", true}, {"fresh107", true},
                   {"fresh108", true}, {"fresh109", true}, {"fresh110", true}, {"fresh111", true}, {"fresh112", true},
                   {"fresh113", true}, {"fresh114", true}, {"fresh115", true}, {"fresh116", true},
                   {"fresh117", true}, {"fresh118", true}, {"fresh119", true}, {"fresh120", true}, {"fresh121", true},
                   {"fresh122", true}, {"fresh123", true}, {"fresh124", true},
                   {"fresh125", true}, {"fresh126", true}, {"fresh127", true}, {"fresh128", true}, {"fresh129", true}, {"fresh130", true},
                   {"fresh131", true}, {"fresh132", true}, {"fresh133", true}, {"fresh134", true},
                   {"fresh135", true}, {"fresh136", true}, {"fresh137", true}, {"fresh138", true},
                   {"fresh139", true}, {"fresh140", true}, {"fresh141", true}, {"fresh142", true},
                   {"fresh143", true}, {"fresh144", true}, {"fresh145", true}, {"fresh146", true}};
    bool update = getenv("SCALIFY_UPDATE_EXPECTED") != NULL;
    char *tsv = t_read(CORPUS_EXPECTED, NULL);
    t_case("corpus %s present", CORPUS_EXPECTED);
    if (!update && !CHECK(tsv != NULL)) return;
    strbuf now, reasons;
    sb_init(&now);
    for (size_t k = 0; k < ARRAY_LEN(corpora); k++) {
        char dir[256], path[512];
        snprintf(dir, sizeof dir, "samples/%s", corpora[k].name);
        snprintf(path, sizeof path, "%s/manifest.json", dir);
        json_error_t err;
        json_t *manifest = json_load_file(path, 0, &err);
        json_t *pairs = json_object_get(manifest, "pairs");
        t_case("corpus %s", path);
        if (!CHECK_MSG(json_array_size(pairs) > 0, "%s: %s", path, manifest ? "no pairs" : err.text)) {
            json_decref(manifest);
            continue;
        }
        for (int pass = 0; pass < 1 + corpora[k].rules_only_too; pass++) {
            bool witness = pass == 0;
            char label[64];
            snprintf(label, sizeof label, "%s%s", corpora[k].name, witness ? "" : " without --witness");
            corpus_counts c = {0};
            sb_init(&reasons);
            bool both = !witness || !corpora[k].rules_only_too;
            corpus_run *runs = corpus_batch_run(dir, pairs, witness, both);
            for (size_t i = 0; i < json_array_size(pairs); i++)
                corpus_pair(corpora[k].name, json_array_get(pairs, i), &runs[2 * i], witness, both, tsv, update, &now, &reasons,
                            &c);
            free(runs);
            if (both)
                printf("note: %s: correct pairs verified %d of %d (text), %d of %d (protobuf)", label, c.verified[0], c.correct,
                       c.verified[1], c.correct);
            else
                printf("note: %s: correct pairs verified %d of %d (protobuf)", label, c.verified[1], c.correct);
            if (c.known_false_alarms) printf("; known false alarms (mismatch) %d", c.known_false_alarms);
            printf("\n");
            if (c.bugs && both)
                printf("note: %s: bug variants mismatch %d of %d (text), %d of %d (protobuf); by rules %d of %d\n", label,
                       c.mismatch[0], c.bugs, c.mismatch[1], c.bugs, c.by_rules, c.bugs);
            else if (c.bugs)
                printf("note: %s: bug variants mismatch %d of %d (protobuf)\n", label, c.mismatch[1], c.bugs);
            if (reasons.s) printf("note: %s: correct pairs not verified (protobuf form), first finding:\n%s", label, reasons.s);
            sb_free(&reasons);
        }
        json_decref(manifest);
    }
    if (update) rewrite_expected(tsv, now.s ? now.s : "");
    else no_stale_lines(tsv, now.s);
    sb_free(&now);
    free(tsv);
}
