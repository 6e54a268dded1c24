/* scalify eval FILE [--devices N] [--seed S] [--inputs F] [--outputs F]
 *
 * Runs a module on N simulated devices with the reference interpreter
 * (interp.h) and prints, per output and device, its type, sum, largest
 * magnitude, a checksum and the first values (of a complex output: sum,
 * magnitude and values of the real parts; the checksum covers both).
 *
 * Inputs. --inputs F reads a tensor file (stf.h; the samples' *.io.stf): the
 * tensor "in.<k>[.<name>]" feeds parameter k. A tensor with the parameter's
 * shape goes to every device as is; a global tensor (the parameter's shape
 * times its sharding's tile counts) is cut into each device's tile. Without
 * --inputs, parameter k is drawn from a splitmix64 stream seeded with
 * S ^ (0x9e3779b97f4a7c15 · (k + 1)) (S = --seed, default 0): floats uniform
 * in [-1, 1) rounded to their type, integers uniform in [0, 16), preds fair
 * coins. On several devices a parameter with a tiled sharding is drawn as the
 * global array and cut into tiles (so replicated parameters agree across
 * devices and shards are pieces of one array); on one device the parameter's
 * own shape is drawn.
 *
 * Outputs. --outputs F writes a tensor file with "out.<k>" (one device) or
 * "out.<k>.dev.<d>" (several), k indexing the root tuple's elements (0 for
 * an array root).
 *
 * Exit: 0 ran; 2 usage, unreadable input, an op the interpreter has no rule
 * for, or a budget exceeded (interp.h); 3 internal error.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hlo.h"
#include "interp.h"
#include "io.h"
#include "scalify.h"
#include "stf.h"

const char cli_eval_usage[] =
    "usage: scalify eval FILE [--devices N] [--seed S] [--inputs F] [--outputs F]\n"
    "  runs a module in the reference interpreter and prints, per output and device, its type, sum,\n"
    "  largest magnitude, a checksum and the first values.\n"
    "  --devices N  simulated devices, 1..4096 (default: the module's device count)\n"
    "  --seed S     seed of the random inputs (default 0): floats in [-1, 1), integers in [0, 16)\n"
    "  --inputs F   a tensor file (the samples' *.io.stf): tensor in.<k> feeds parameter k\n"
    "  --outputs F  write the outputs to a tensor file (out.<k>, or out.<k>.dev.<d> on several devices)\n"
    "  exit 0 ran; 2 bad input, an op the interpreter cannot run, or a budget exceeded\n";

static uint64_t val_checksum(const interp_val *v) {
    uint64_t h = 1469598103934665603ull;
    for (int64_t k = 0; k < v->n; k++) {
        uint64_t u;
        if (v->f) {
            double x = v->f[k] == 0 ? 0.0 : v->f[k];  /* -0 and +0 hash alike */
            memcpy(&u, &x, sizeof u);
        } else u = (uint64_t)v->i[k];
        h = (h ^ u) * 1099511628211ull;
    }
    for (int64_t k = 0; v->im && k < v->n; k++) {  /* a complex value's imaginary parts after */
        uint64_t u;
        double x = v->im[k] == 0 ? 0.0 : v->im[k];
        memcpy(&u, &x, sizeof u);
        h = (h ^ u) * 1099511628211ull;
    }
    return h;
}

static void summarise(strbuf *b, const char *name, int64_t dev, int64_t ndev, const interp_val *v) {
    sb_puts(b, name);
    if (ndev > 1) sb_printf(b, " device %lld", (long long)dev);
    sb_puts(b, ": ");
    interp_val_print_type(b, v);
    double sum = 0, amax = 0;
    for (int64_t k = 0; k < v->n; k++) {
        double x = interp_val_get(v, k);
        sum += x;
        if (fabs(x) > amax || x != x) amax = fabs(x);
    }
    sb_printf(b, " sum=%.9g max|x|=%.9g checksum=%016" PRIx64 " [", sum, amax, val_checksum(v));
    for (int64_t k = 0; k < v->n && k < 6; k++) sb_printf(b, "%s%.7g", k ? " " : "", interp_val_get(v, k));
    sb_puts(b, v->n > 6 ? " ...]\n" : "]\n");
}

static bool parse_i64(const char *s, int64_t *out) {
    char *end;
    long long v = strtoll(s, &end, 0);
    if (!*s || *end) return false;
    *out = v;
    return true;
}

int cli_eval(int argc, char **argv) {
    const char *file = NULL, *inputs = NULL, *outputs = NULL;
    int64_t ndev = 0, seed = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (strcmp(a, "--devices") == 0 && has) {
            if (!parse_i64(argv[++i], &ndev) || ndev < 1 || ndev > 4096) {
                fprintf(stderr, "scalify eval: --devices wants 1..4096\n");
                return EXIT_INPUT;
            }
        } else if (strcmp(a, "--seed") == 0 && has) {
            if (!parse_i64(argv[++i], &seed)) {
                fprintf(stderr, "scalify eval: --seed wants an integer\n");
                return EXIT_INPUT;
            }
        } else if (strcmp(a, "--inputs") == 0 && has) inputs = argv[++i];
        else if (strcmp(a, "--outputs") == 0 && has) outputs = argv[++i];
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "scalify eval: unknown option or missing value: %s\n%s", a, cli_eval_usage);
            return EXIT_INPUT;
        } else if (file) {
            fprintf(stderr, "scalify eval: one FILE only\n");
            return EXIT_INPUT;
        } else file = a;
    }
    if (!file) {
        fputs(cli_eval_usage, stderr);
        return EXIT_INPUT;
    }
    hlo_module *m = cli_read_module(file);
    if (!m) return EXIT_INPUT;
    int64_t R, P;
    interp_devices(m, &R, &P);
    if (ndev) {
        if (ndev % R) {
            fprintf(stderr, "scalify eval: %lld devices do not divide into %lld replicas\n", (long long)ndev, (long long)R);
            graph_free(m);
            return EXIT_INPUT;
        }
        P = ndev / R;
    }
    int64_t D = R * P;
    {
        strbuf err;
        sb_init(&err);
        interp_config cfg = {.replicas = R, .partitions = P};
        int st = interp_check(m, &cfg, &err);
        if (st != INTERP_OK) {
            fprintf(stderr, "%s: %s\n", file, err.s ? err.s : "cannot be interpreted");
            sb_free(&err);
            graph_free(m);
            return EXIT_INPUT;
        }
        sb_free(&err);
    }
    const hlo_comp *entry = graph_entry(m);
    uint32_t np = entry->nparams;
    interp_val ***args = xcalloc((size_t)D, sizeof *args);
    for (int64_t dv = 0; dv < D; dv++) args[dv] = xcalloc(np ? np : 1, sizeof **args);
    int rc = EXIT_VERIFIED;
    stf_file in = {0};
    if (inputs) {
        diag di;
        diag_init(&di, inputs);
        if (!stf_read(inputs, &in, &di)) {
            cli_flush_diag(&di);
            rc = EXIT_INPUT;
            goto done;
        }
        cli_flush_diag(&di);
    }
    for (uint32_t k = 0; k < np && rc == EXIT_VERIFIED; k++) {
        const hlo_instr *p = &entry->instrs[entry->params[k]];
        interp_val *src = NULL;
        if (inputs) {
            src = interp_val_ref(stf_find_input(&in, k));
            if (!src) {
                fprintf(stderr, "scalify eval: %s has no tensor in.%u for parameter %u (%s)\n", inputs, k, k, p->name);
                rc = EXIT_INPUT;
                break;
            }
        } else {
            strbuf why;
            sb_init(&why);
            src = interp_param_random(p, k, D, (uint64_t)seed, &why);
            if (!src) {
                fprintf(stderr, "scalify eval: parameter %u (%s) %s\n", k, p->name, why.s ? why.s : "cannot be drawn");
                sb_free(&why);
                rc = EXIT_INPUT;
                break;
            }
            sb_free(&why);
        }
        for (int64_t dv = 0; dv < D && rc == EXIT_VERIFIED; dv++) {
            args[dv][k] = interp_param_input(p, src, dv);
            if (!args[dv][k]) {
                strbuf t;
                sb_init(&t);
                interp_val_print_type(&t, src);
                fprintf(stderr, "scalify eval: parameter %u (%s) wants ", k, p->name);
                strbuf s;
                sb_init(&s);
                shape_print(&s, &p->shape);
                fprintf(stderr, "%s per device; the input is %s and not its global form\n", s.s, t.s);
                sb_free(&s);
                sb_free(&t);
                rc = EXIT_INPUT;
            }
        }
        interp_val_free(src);
    }
    if (rc != EXIT_VERIFIED) goto done;
    interp_val **out = xcalloc((size_t)D, sizeof *out);
    strbuf err;
    sb_init(&err);
    interp_config cfg = {.replicas = R, .partitions = P};
    int st = interp_run(m, &cfg, (interp_val **const *)args, out, &err);
    if (st != INTERP_OK) {
        fprintf(stderr, "%s: %s\n", file, err.s ? err.s : "interpreter error");
        rc = EXIT_INPUT;
    } else {
        strbuf b;
        sb_init(&b);
        const char **names = NULL;
        interp_val **vals = NULL;
        size_t nv = 0, cap = 0, ncap = 0;
        bool tuple = out[0]->dtype == DT_TUPLE;
        uint32_t nout = tuple ? out[0]->nelems : 1;
        for (uint32_t k = 0; k < nout; k++)
            for (int64_t dv = 0; dv < D; dv++) {
                interp_val *v = tuple ? out[dv]->elems[k] : out[dv];
                char name[64];
                if (D == 1) snprintf(name, sizeof name, "out.%u", k);
                else snprintf(name, sizeof name, "out.%u.dev.%lld", k, (long long)dv);
                if (v->dtype == DT_TUPLE) {
                    sb_printf(&b, "out.%u: a nested tuple (not summarised)\n", k);
                    continue;
                }
                char label[32];
                snprintf(label, sizeof label, "out.%u", k);
                summarise(&b, label, dv, D, v);
                XGROW(names, ncap, nv + 1);
                XGROW(vals, cap, nv + 1);
                names[nv] = xstrdup(name);
                vals[nv++] = v;
            }
        fwrite(b.s, 1, b.len, stdout);
        sb_free(&b);
        if (outputs) {
            strbuf f;
            sb_init(&f);
            diag dw;
            diag_init(&dw, outputs);
            if (!stf_write(&f, names, vals, (uint32_t)nv) || !io_write_atomic(outputs, f.s, f.len, &dw)) {
                if (dw.count == 0) diag_plain(&dw, "could not write the outputs");
                rc = EXIT_INPUT;
            }
            cli_flush_diag(&dw);
            sb_free(&f);
        }
        for (size_t k = 0; k < nv; k++) free((char *)names[k]);
        free(names);
        free(vals);
    }
    for (int64_t dv = 0; dv < D; dv++) interp_val_free(out[dv]);
    free(out);
    sb_free(&err);
done:
    for (int64_t dv = 0; dv < D; dv++) {
        for (uint32_t k = 0; k < np; k++) interp_val_free(args[dv][k]);
        free(args[dv]);
    }
    free(args);
    stf_free(&in);
    graph_free(m);
    if (fflush(stdout) != 0) rc = EXIT_INPUT;
    return rc;
}
