/* scalify check --baseline B --distributed D [--relations R | --auto-relations]
 *               [--source-root DIR] [--name N] [-o trace.json]
 * scalify check --manifest samples/manifest.json --out-dir DIR [--source-root DIR] */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bindex.h"
#include "check.h"
#include "cli.h"
#include "home.h"
#include "io.h"
#include "scalify.h"
#include "trace_write.h"

const char cli_check_usage[] =
    "usage: scalify check --baseline B --distributed D [--relations R | --auto-relations]\n"
    "                     [--source-root DIR] [--rules DIR] [--name N] [--no-witness] [-j N] [--no-memo]\n"
    "                     [-o trace.json]\n"
    "       scalify check --manifest MANIFEST --out-dir DIR [--shard K/N] [--source-root DIR] [--rules DIR]\n"
    "                     [--no-witness] [-j N] [--no-memo]\n"
    "  --baseline B, --distributed D   the two modules (HLO text or protobuf, .gz too)\n"
    "  --relations R  how the distributed inputs and outputs relate to the baseline's (samples/README.md);\n"
    "  --auto-relations  from the modules' sharding annotations instead\n"
    "  --source-root DIR  read source snippets for findings only below DIR\n"
    "  --rules DIR    rewrite rules (default: $SCALIFY_RULES, else the rules installed with scalify;\n"
    "                 scalify --version names them and their digest)\n"
    "  --name N       the pair's name in the trace (default: the distributed file's name)\n"
    "  --no-witness   decide by the rules alone; by default both programs also run on seeded random\n"
    "                 inputs when small enough (a bound on their elements), so that a pair the rules\n"
    "                 leave undecided whose outputs differ is a mismatch confirmed by execution, and a\n"
    "                 finding execution contradicts is withdrawn (--witness: the default, accepted)\n"
    "  --manifest M --out-dir DIR   check every pair of M: DIR/NAME.trace.json and DIR/index.json\n"
    "  --shard K/N    with --manifest: only the pairs i with i mod N = K (0 <= K < N), indexed in\n"
    "                 DIR/index.K-of-N.json; scalify report merges the N indexes\n"
    "  -j N, -jN  parallelism (default: the number of cores): a batch checks up to N pairs at once, each in\n"
    "             its own process (its times then include the others' load: -j 1 for timings); a single\n"
    "             pair reads its two programs on two threads when N >= 2\n"
    "  --no-memo  lift every layer instead of reusing the result of an identical one (for comparison)\n"
    "  -o FILE    a regular file is replaced only once complete (a temporary file beside it, renamed);\n"
    "             a symlink is followed to the file it names; a character device or FIFO is written\n"
    "             through; anything else is refused. Without -o the trace goes to stdout.\n"
    "  a batch exits 2 when --out-dir is not a directory, a pair name cannot name a file, or a trace\n"
    "  or index.json could not be written (that pair is \"error\" in index.json); killing the batch\n"
    "  kills its workers.\n";

static bool write_json(const char *path, json_t *j, diag *d) { return bindex_write_json(path, j, d); }

static int exit_for(int verdict) {
    return verdict == VERDICT_VERIFIED ? EXIT_VERIFIED : verdict == VERDICT_ERROR ? EXIT_INPUT : EXIT_MISMATCH;
}

/* Checks a pair and appends its trace's text to text; returns the verdict
 * (VERDICT_ERROR: no trace, d says why). The trace is written as text, not
 * built as objects first (trace_write_text). */
static int check_text(const check_opts *o, strbuf *text, char **assumptions, diag *d) {
    check_result r;
    int v = check_run(o, &r, d);
    if (v != VERDICT_ERROR && !trace_write_text(o, &r, text)) {
        diag_plain(d, "could not write the trace");
        v = VERDICT_ERROR;
    }
    if (assumptions) *assumptions = v != VERDICT_ERROR && r.assumptions ? xstrdup(r.assumptions) : NULL;
    check_result_free(&r);
    return v;
}

static int run_one(const check_opts *o, const char *out) {
    diag d;
    diag_init(&d, "scalify check");
    strbuf text;
    sb_init(&text);
    char *assumptions;
    int v = check_text(o, &text, &assumptions, &d);
    cli_flush_diag(&d);
    if (v == VERDICT_ERROR) {
        sb_free(&text);
        return EXIT_INPUT;
    }
    diag_init(&d, out ? out : "-");
    if (out) {
        if (!io_write_atomic(out, text.s, text.len, &d)) v = VERDICT_ERROR;
    } else {
        fwrite(text.s, 1, text.len, stdout);
    }
    sb_free(&text);
    cli_flush_diag(&d);
    fprintf(stderr, "%s: %s\n", o->name ? o->name : o->distributed, verdict_name(v));
    /* The trace's assumptions: its lines, each one jansson takes as a string. */
    for (const char *line = assumptions; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        json_t *s = json_stringn(line, n);
        if (s) fprintf(stderr, "  assuming %s\n", json_string_value(s));
        json_decref(s);
        line = nl ? nl + 1 : NULL;
    }
    free(assumptions);
    return exit_for(v);
}

/* ---- batch mode: one trace per manifest pair, plus index.json ---- */

typedef struct batch_pair {
    const char *name;
    json_t *expected;
    check_opts o;
    strbuf b, d, r, out;          /* paths of any length: never a truncated name */
    int verdict;
    bool wrote;                   /* its trace was written */
    strbuf msgs;                  /* what checking it printed */
    bool finished;
} batch_pair;

/* Checks one pair and writes its trace; sets p->verdict, p->wrote and
 * p->msgs (the checker's and the writer's messages). */
static void batch_check(batch_pair *p) {
    diag d;
    diag_init(&d, "scalify check");
    strbuf text;
    sb_init(&text);
    p->verdict = check_text(&p->o, &text, NULL, &d);
    sb_put(&p->msgs, d.out.s ? d.out.s : "", d.out.len);
    diag_free(&d);
    if (p->verdict != VERDICT_ERROR) {
        diag_init(&d, p->out.s);
        p->wrote = io_write_atomic(p->out.s, text.s, text.len, &d);
        sb_put(&p->msgs, d.out.s ? d.out.s : "", d.out.len);
        diag_free(&d);
    }
    sb_free(&text);
}

/* A pair being checked by a child process: it writes "verdict wrote\n" and its
 * messages to the pipe fd, then exits. */
typedef struct batch_worker {
    pid_t pid;
    int fd;
    size_t pair;
    strbuf got;
} batch_worker;

static bool batch_start(batch_worker *w, batch_pair *p, size_t k, const batch_worker *all, int nall) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return false;
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return false;
    }
    if (pid == 0) {
        /* A worker dies with the batch: killed (or crashed), the parent must
         * not leave workers writing traces nobody will index. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(EXIT_INTERNAL);
        close(fds[0]);
        for (int i = 0; i < nall; i++)
            if (all[i].pid > 0) close(all[i].fd);
        p->o.jobs = 1; /* the pairs share the cores */
        batch_check(p);
        strbuf b;
        sb_init(&b);
        sb_printf(&b, "%d %d\n", p->verdict, p->wrote);
        sb_put(&b, p->msgs.s ? p->msgs.s : "", p->msgs.len);
        for (size_t at = 0; at < b.len;) {
            ssize_t n = write(fds[1], b.s + at, b.len - at);
            if (n <= 0 && errno != EINTR) break;
            if (n > 0) at += (size_t)n;
        }
        _exit(0);
    }
    close(fds[1]);
    w->pid = pid;
    w->fd = fds[0];
    w->pair = k;
    sb_init(&w->got);
    return true;
}

/* The worker's pipe is at its end: reaps it and records the pair's result. */
static void batch_finish(batch_worker *w, batch_pair *p) {
    close(w->fd);
    int st = 0;
    while (waitpid(w->pid, &st, 0) < 0 && errno == EINTR) {}
    int v = VERDICT_ERROR, wrote = 0;
    const char *nl = w->got.s ? memchr(w->got.s, '\n', w->got.len) : NULL;
    bool ok = nl && sscanf(w->got.s, "%d %d", &v, &wrote) == 2 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (ok) {
        p->verdict = v;
        p->wrote = wrote;
        sb_put(&p->msgs, nl + 1, w->got.len - (size_t)(nl + 1 - w->got.s));
    } else {
        p->verdict = VERDICT_ERROR;
        p->wrote = false;
        if (WIFSIGNALED(st))
            sb_printf(&p->msgs, "%s: checking stopped by signal %d; no trace\n", p->name, WTERMSIG(st));
        else
            sb_printf(&p->msgs, "%s: checking ended without a result; no trace\n", p->name);
    }
    sb_free(&w->got);
    w->pid = 0;
}

/* A batch: its pairs, how many have finished and how many have had their
 * messages printed (in manifest order, whatever order they finish in). */
typedef struct batch {
    batch_pair *ps;
    size_t n, done, printed;
} batch;

/* Pair k has finished: progress on a terminal, messages in manifest order. */
static void batch_report(batch *bt, size_t k) {
    bt->ps[k].finished = true;
    bt->done++;
    if (isatty(2)) fprintf(stderr, "[%zu/%zu] %s\n", bt->done, bt->n, bt->ps[k].name);
    for (; bt->printed < bt->n && bt->ps[bt->printed].finished; bt->printed++)
        if (bt->ps[bt->printed].msgs.len) fputs(bt->ps[bt->printed].msgs.s, stderr);
}

/* Checks every pair, up to `jobs` at once, each in a child process (one
 * failing cannot take the others down); the results and messages come back
 * through pipes. With one job, or when a process cannot be made, a pair is
 * checked here. */
#define BATCH_MAX_WORKERS 64
static void batch_run(batch *bt, int jobs) {
    size_t n = bt->n;
    int nw = jobs < 2 || n < 2 ? 0 : (size_t)jobs < n ? jobs : (int)n;
    if (nw > BATCH_MAX_WORKERS) nw = BATCH_MAX_WORKERS;
    batch_worker *ws = xcalloc((size_t)nw + 1, sizeof *ws);
    batch_pair *ps = bt->ps;
    size_t next = 0;
    for (;;) {
        int active = 0;
        for (int i = 0; i < nw; i++) {
            if (!ws[i].pid && next < n && batch_start(&ws[i], &ps[next], next, ws, nw)) next++;
            active += ws[i].pid > 0;
        }
        if (!active) {
            if (next == n) break;
            batch_check(&ps[next]); /* no child process: here */
            batch_report(bt, next++);
            continue;
        }
        struct pollfd pf[BATCH_MAX_WORKERS];
        int map[BATCH_MAX_WORKERS], np = 0;
        for (int i = 0; i < nw; i++)
            if (ws[i].pid > 0) pf[np] = (struct pollfd){.fd = ws[i].fd, .events = POLLIN}, map[np++] = i;
        if (poll(pf, (nfds_t)np, -1) < 0) {
            if (errno == EINTR) continue;
            /* Cannot wait for them: stop them; their pairs end as errors. */
            for (int k = 0; k < np; k++) {
                kill(ws[map[k]].pid, SIGKILL);
                batch_finish(&ws[map[k]], &ps[ws[map[k]].pair]);
                batch_report(bt, ws[map[k]].pair);
            }
            nw = 0;
            continue;
        }
        for (int k = 0; k < np; k++) {
            if (!(pf[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            batch_worker *w = &ws[map[k]];
            char buf[4096];
            ssize_t got = read(w->fd, buf, sizeof buf);
            if (got > 0) {
                sb_put(&w->got, buf, (size_t)got);
            } else if (got == 0 || errno != EINTR) {
                size_t pair = w->pair;
                batch_finish(w, &ps[pair]);
                batch_report(bt, pair);
            }
        }
    }
    free(ws);
}

#define TRACE_SUFFIX ".trace.json"

/* --shard K/N: this run checks the manifest's pairs i with i mod N = K
 * (0 <= K < N) and writes DIR/index.K-of-N.json (bindex.h); n = 0: all. */
typedef struct shard {
    unsigned k, n;
} shard;

static int run_manifest(const char *manifest, const char *out_dir, const check_opts *base, shard sh) {
    json_error_t err;
    json_t *m = json_load_file(manifest, 0, &err);
    if (!m || !json_is_array(json_object_get(m, "pairs"))) {
        fprintf(stderr, "%s:%d:%d: %s\n", manifest, err.line, err.column, m ? "no \"pairs\" array" : err.text);
        json_decref(m);
        return EXIT_INPUT;
    }
    /* The folder must be there (or be made) before any pair is checked: a
     * batch that cannot write its traces says so up front. */
    struct stat ost;
    int merr = mkdir(out_dir, 0777) == 0 ? 0 : errno;
    const char *why = merr && merr != EEXIST    ? strerror(merr)
                      : stat(out_dir, &ost) != 0 ? strerror(errno)
                      : !S_ISDIR(ost.st_mode)    ? "not a directory"
                                                 : NULL;
    if (why) {
        fprintf(stderr, "scalify check: --out-dir %s: %s\n", out_dir, why);
        json_decref(m);
        return EXIT_INPUT;
    }
    long name_max = pathconf(out_dir, _PC_NAME_MAX);
    if (name_max <= 0) name_max = 255;
    /* Paths in the manifest are relative to its directory. */
    const char *slash = strrchr(manifest, '/');
    strbuf dirb;
    sb_init(&dirb);
    if (slash) sb_put(&dirb, manifest, (size_t)(slash - manifest));
    else sb_puts(&dirb, ".");
    const char *dir = dirb.s;
    json_t *pairs = json_object_get(m, "pairs");
    size_t total = json_array_size(pairs), n = 0;
    batch_pair *ps = xcalloc(total + 1, sizeof *ps);
    const char **names = xcalloc(total + 1, sizeof *names); /* every valid pair's, all shards */
    size_t *pos = xcalloc(total + 1, sizeof *pos);          /* ps[k] is the manifest's pair pos[k] */
    size_t nnames = 0;
    int worst = EXIT_VERIFIED;
    for (size_t i = 0; i < total; i++) {
        json_t *p = json_array_get(pairs, i);
        bool mine = !sh.n || i % sh.n == sh.k;
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
            if (!mine) continue;
            fprintf(stderr, "%s: pair %zu lacks name, a baseline or distributed file, or relations\n", manifest, i);
            worst = EXIT_INPUT;
            continue;
        }
        /* The name names the trace file: one file name, one pair. */
        size_t same = 0;
        while (same < nnames && strcmp(names[same], name) != 0) same++;
        bool too_long = strlen(name) + strlen(TRACE_SUFFIX) > (size_t)name_max;
        if (!*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..") || same < nnames || too_long) {
            if (!mine) continue;
            fprintf(stderr, "%s: pair %zu: the name \"%s\" %s\n", manifest, i, name,
                    same < nnames ? "is another pair's too (names name the trace files)"
                    : too_long ? "is too long to name a trace file"
                               : "cannot name a trace file");
            worst = EXIT_INPUT;
            continue;
        }
        names[nnames++] = name;
        if (!mine) continue;
        pos[n] = i;
        batch_pair *q = &ps[n++];
        q->name = name;
        q->verdict = VERDICT_ERROR; /* until it is checked */
        q->expected = json_object_get(p, "expected");
        sb_init(&q->b), sb_init(&q->d), sb_init(&q->r), sb_init(&q->out), sb_init(&q->msgs);
        sb_printf(&q->b, "%s/%s", dir, b);
        sb_printf(&q->d, "%s/%s", dir, dd);
        sb_printf(&q->r, "%s/%s", dir, r);
        sb_printf(&q->out, "%s/%s" TRACE_SUFFIX, out_dir, name);
        q->o = *base;
        q->o.name = name;
        q->o.baseline = q->b.s;
        q->o.distributed = q->d.s;
        if (strcmp(r, "auto") == 0) q->o.auto_relations = true;
        else q->o.relations = q->r.s;
    }
    batch bt = {ps, n, 0, 0};
    batch_run(&bt, base->jobs);
    json_t *index = json_array();
    for (size_t i = 0; i < n; i++) {
        batch_pair *q = &ps[i];
        json_t *e = json_object();
        json_object_set_new(e, "name", json_string(q->name));
        if (sh.n) json_object_set_new(e, "position", json_integer((json_int_t)pos[i]));
        /* A pair checked but whose trace is missing was not checked as far as
         * anyone reading the traces can tell: an error, never its verdict. */
        if (!q->wrote) q->verdict = VERDICT_ERROR;
        json_object_set_new(e, "verdict", json_string(verdict_name(q->verdict)));
        json_object_set_new(e, "expected", json_incref(q->expected));
        if (q->wrote) json_object_set_new(e, "trace", json_string(strrchr(q->out.s, '/') + 1));
        json_array_append_new(index, e);
        int code = exit_for(q->verdict);
        if (code > worst) worst = code;
        sb_free(&q->b), sb_free(&q->d), sb_free(&q->r), sb_free(&q->out), sb_free(&q->msgs);
    }
    free(ps);
    free(names);
    free(pos);
    strbuf ip;
    sb_init(&ip);
    if (sh.n) sb_printf(&ip, "%s/index.%u-of-%u.json", out_dir, sh.k, sh.n);
    else sb_printf(&ip, "%s/index.json", out_dir);
    diag d;
    diag_init(&d, ip.s);
    json_t *idx = json_object();
    if (sh.n) {
        json_t *sj = json_object();
        json_object_set_new(sj, "index", json_integer(sh.k));
        json_object_set_new(sj, "count", json_integer(sh.n));
        json_object_set_new(sj, "manifest_pairs", json_integer((json_int_t)total));
        json_object_set_new(idx, "shard", sj);
    }
    json_object_set_new(idx, "pairs", index);
    if (!write_json(ip.s, idx, &d) && worst < EXIT_INPUT) worst = EXIT_INPUT;
    cli_flush_diag(&d);
    json_decref(idx);
    json_decref(m);
    sb_free(&ip);
    sb_free(&dirb);
    return worst;
}

int cli_check(int argc, char **argv) {
    check_opts o = {0};
    o.rules_dir = home_rules_dir();
    o.witness = true;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o.jobs = ncpu > 0 ? (int)ncpu : 1;
    const char *out = NULL, *manifest = NULL, *out_dir = NULL;
    shard sh = {0, 0};
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
            o.rules_given |= slot == &o.rules_dir;
        } else if (!strcmp(a, "--auto-relations")) {
            o.auto_relations = true;
        } else if (!strcmp(a, "--witness") || !strcmp(a, "--no-witness")) {
            o.witness = a[2] == 'w';
        } else if (!strcmp(a, "--no-memo")) {
            o.no_memo = true;
        } else if (!strcmp(a, "--shard")) {
            char *end = NULL, *slash = NULL;
            const char *v = i + 1 < argc ? argv[++i] : "";
            unsigned long k = strtoul(v, &slash, 10), nn = 0;
            if (slash != v && *slash == '/') nn = strtoul(slash + 1, &end, 10);
            if (!end || end == slash + 1 || *end || *v == '-' || slash[1] == '-' || nn < 1 || nn > 100000 || k >= nn) {
                fprintf(stderr, "scalify check: --shard needs K/N with 0 <= K < N (e.g. 0/3)\n%s", cli_check_usage);
                return EXIT_INPUT;
            }
            sh = (shard){(unsigned)k, (unsigned)nn};
        } else if (!strncmp(a, "-j", 2)) { /* -j N or -jN */
            const char *v = a[2] ? a + 2 : i + 1 < argc ? argv[++i] : "";
            char *end = NULL;
            long j = strtol(v, &end, 10);
            if (end == v || *end || j < 1 || j > 1024) {
                fprintf(stderr, "scalify check: -j needs a thread count from 1 to 1024\n%s", cli_check_usage);
                return EXIT_INPUT;
            }
            o.jobs = (int)j;
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
        return run_manifest(manifest, out_dir, &o, sh);
    }
    if (sh.n) {
        fprintf(stderr, "scalify check: --shard needs --manifest\n%s", cli_check_usage);
        return EXIT_INPUT;
    }
    if (!o.baseline || !o.distributed || (!o.relations == !o.auto_relations)) {
        fprintf(stderr, "%s", cli_check_usage);
        return EXIT_INPUT;
    }
    return run_one(&o, out);
}
