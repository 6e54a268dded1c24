/* tfcheck — see tfcheck.h for the contract. */
#include "tfcheck.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "hlo.h"
#include "interp.h"
#include "io.h"
#include "util.h"
#include "view.h"
#include "witness.h"

/* Uniform in [lo, hi]. */
static int rint_in(interp_rng *r, int lo, int hi) { return lo + (int)(interp_rng_next(r) % (uint64_t)(hi - lo + 1)); }

typedef struct smesh {
    int naxes;
    const char *names[2];
    int sizes[2];
    int ndev;
} smesh;

typedef struct inst {
    char name[96];
    strbuf base, dist, rel;
    bool correct;    /* built to compute the baseline's outputs */
    bool value_bug;  /* built so that execution must show a difference */
} inst;

/* Names the instance and records what it was built to be; every bug built
 * here changes values. */
static void set_case(inst *t, bool correct, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_case(inst *t, bool correct, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->correct = correct;
    t->value_bug = !correct;
}

/* A dim size in 2..8 that `parts` divides. */
static int dim_for(interp_rng *r, int parts) {
    if (parts <= 1) return rint_in(r, 2, 8);
    return parts * rint_in(r, 1, 8 / parts);
}

static void shp(strbuf *b, const int *dims, int rank) {
    sb_puts(b, "f32[");
    for (int k = 0; k < rank; k++) sb_printf(b, "%s%d", k ? "," : "", dims[k]);
    sb_puts(b, "]");
}

/* Both reducers, in every module (unused computations are harmless). */
static void header(strbuf *b, const char *name, int ndev) {
    if (ndev > 1) sb_printf(b, "HloModule %s, num_partitions=%d\n\n", name, ndev);
    else sb_printf(b, "HloModule %s\n\n", name);
    sb_puts(b, "%add {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n  ROOT %s = f32[] add(%a, %b)\n}\n\n");
    sb_puts(b, "%max {\n  %a = f32[] parameter(0)\n  %b = f32[] parameter(1)\n  ROOT %m = f32[] maximum(%a, %b)\n}\n\n");
    sb_puts(b, "ENTRY %main {\n");
}

static void param(strbuf *b, const char *nm, int k, const int *dims, int rank) {
    sb_printf(b, "  %%%s = ", nm);
    shp(b, dims, rank);
    sb_printf(b, " parameter(%d)\n", k);
}

/* Replica groups of the devices that differ only in the axes of `mask`, iota
 * order; `halves` splits every group in two (a wrong grouping). */
static void groups(strbuf *b, const smesh *m, unsigned mask, bool halves) {
    int coord[4][2];
    for (int d = 0; d < m->ndev; d++) {
        int rest = d;
        for (int a = m->naxes - 1; a >= 0; a--) {
            coord[d][a] = rest % m->sizes[a];
            rest /= m->sizes[a];
        }
    }
    bool used[4] = {false};
    sb_puts(b, "{");
    bool first_group = true;
    for (int d = 0; d < m->ndev; d++) {
        if (used[d]) continue;
        int members[4], n = 0;
        for (int e = 0; e < m->ndev; e++) {
            bool same = true;
            for (int a = 0; a < m->naxes; a++)
                if (!(mask & (1u << a)) && coord[e][a] != coord[d][a]) same = false;
            if (same) {
                members[n++] = e;
                used[e] = true;
            }
        }
        int chunk = halves && n > 1 ? n / 2 : n;
        for (int s = 0; s < n; s += chunk) {
            sb_printf(b, "%s{", first_group ? "" : ",");
            first_group = false;
            for (int k = s; k < s + chunk; k++) sb_printf(b, "%s%d", k > s ? "," : "", members[k]);
            sb_puts(b, "}");
        }
    }
    sb_puts(b, "}");
}

/* A view string from a per-dimension axis assignment (-1: not sharded). */
static void view_str(char *out, size_t n, const smesh *m, const int *axis_of, int rank) {
    size_t len = 0;
    out[0] = 0;
    for (int d = 0; d < rank; d++)
        if (axis_of[d] >= 0) len += (size_t)snprintf(out + len, n - len, "%sshard(%d,%s)", len ? " " : "", d, m->names[axis_of[d]]);
    if (!len) snprintf(out, n, "dup");
}

/* The relations file: the mesh, one view per parameter, the output's view. */
static void rel_write(inst *t, const smesh *m, const char *const *inputs, int n, const char *out) {
    sb_puts(&t->rel, "{\"scalify_relations\": 1, \"mesh\": {");
    for (int a = 0; a < m->naxes; a++) sb_printf(&t->rel, "%s\"%s\": %d", a ? ", " : "", m->names[a], m->sizes[a]);
    sb_puts(&t->rel, "}, \"device_order\": \"iota\",\n \"inputs\": [");
    for (int k = 0; k < n; k++) sb_printf(&t->rel, "%s{\"param\": %d, \"view\": \"%s\"}", k ? ", " : "", k, inputs[k]);
    sb_printf(&t->rel, "],\n \"outputs\": [{\"output\": 0, \"view\": \"%s\"}]}\n", out);
}

/* Relations of a one-parameter pair from the axis assignments of x and the output. */
static void rel_unary(inst *t, const smesh *m, const int *xa, int xrank, const int *oa, int orank) {
    char xv[96], ov[96];
    view_str(xv, sizeof xv, m, xa, xrank);
    view_str(ov, sizeof ov, m, oa, orank);
    const char *iv[1] = {xv};
    rel_write(t, m, iv, 1, ov);
}

/* Relations of a two-parameter pair from the axis assignments of x, w and the output. */
static void rel_binary(inst *t, const smesh *m, const int *xa, int xrank, const int *wa, int wrank, const int *oa, int orank) {
    char xv[64], wv[64], ov[64];
    view_str(xv, sizeof xv, m, xa, xrank);
    view_str(wv, sizeof wv, m, wa, wrank);
    view_str(ov, sizeof ov, m, oa, orank);
    const char *iv[2] = {xv, wv};
    rel_write(t, m, iv, 2, ov);
}

/* Relations of a dot(x, w) pair. */
static void rel_dot(inst *t, const smesh *m, const int *xa, const int *wa, const int *oa) { rel_binary(t, m, xa, 2, wa, 2, oa, 2); }

static void local_dims(const smesh *m, const int *g, const int *axis_of, int rank, int *l) {
    for (int d = 0; d < rank; d++) l[d] = axis_of[d] >= 0 ? g[d] / m->sizes[axis_of[d]] : g[d];
}

/* Opens the entry of one side of a dot(x, w) pair: parameters x, w (global
 * dims xg, wg cut by the axis assignments xa, wa on the distributed side) and
 * %d = dot(x, w) of dims od, the ROOT when root. */
static void dot_entry(strbuf *b, bool dist, const smesh *m, const int *xg, const int *xa, const int *wg, const int *wa,
                      const int *od, bool root) {
    int xl[2], wl[2];
    local_dims(m, xg, xa, 2, xl);
    local_dims(m, wg, wa, 2, wl);
    header(b, dist ? "dist" : "base", dist ? m->ndev : 1);
    param(b, "x", 0, dist ? xl : xg, 2);
    param(b, "w", 1, dist ? wl : wg, 2);
    sb_puts(b, root ? "  ROOT %d = " : "  %d = ");
    shp(b, od, 2);
    sb_puts(b, " dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n");
}

/* Opens the entry of one side (0 baseline, 1 distributed) with parameter x
 * and, when binary, y: global dims g on the baseline, local l on the other. */
static strbuf *open_side(inst *t, int side, const smesh *m, const int *g, const int *l, int rank, bool binary) {
    strbuf *b = side ? &t->dist : &t->base;
    header(b, side ? "dist" : "base", side ? m->ndev : 1);
    param(b, "x", 0, side ? l : g, rank);
    if (binary) param(b, "y", 1, side ? l : g, rank);
    return b;
}

static void pick_mesh(interp_rng *r, smesh *m) {
    switch (rint_in(r, 0, 2)) {
    case 0: *m = (smesh){1, {"x", NULL}, {2, 1}, 2}; break;
    case 1: *m = (smesh){1, {"x", NULL}, {4, 1}, 4}; break;
    default: *m = (smesh){2, {"dp", "tp"}, {2, 2}, 4}; break;
    }
}

/* Appends an all-reduce of %src named %dst with reducer red over the axes of mask. */
static void all_reduce(strbuf *b, bool root, const char *dst, const char *src, const int *dims, int rank,
                       const smesh *m, unsigned mask, bool halves, const char *red, int channel) {
    sb_printf(b, "  %s%%%s = ", root ? "ROOT " : "", dst);
    shp(b, dims, rank);
    sb_printf(b, " all-reduce(%%%s), channel_id=%d, replica_groups=", src, channel);
    groups(b, m, mask, halves);
    sb_printf(b, ", use_global_device_ids=true, to_apply=%%%s\n", red);
}

/* The wrong groups for a collective over axis ax: halves of the right ones or,
 * on the 2-D mesh, the other axis. */
static unsigned wrong_groups(interp_rng *r, const smesh *m, int ax, bool *halves) {
    *halves = true;
    if (m->naxes == 2 && rint_in(r, 0, 1)) {
        *halves = false;
        return 1u << (1 - ax);
    }
    return 1u << ax;
}

/* ---------------------------------------------------------------- kinds */

/* out = op(x[, y]); x, y share a view (correct) or, on the 2-D mesh, are
 * sharded over different axes; or the output's view is claimed wrong. */
static void gen_eltwise(interp_rng *r, const smesh *m, inst *t) {
    static const char *ops[] = {"add", "multiply", "exponential"};
    const char *op = ops[rint_in(r, 0, 2)];
    bool binary = strcmp(op, "exponential") != 0;
    int ax_of[2] = {-1, -1};
    int sd = rint_in(r, -1, 1);  /* sharded dim, -1: dup */
    int ax = rint_in(r, 0, m->naxes - 1);
    if (sd >= 0) ax_of[sd] = ax;
    if (m->naxes == 2 && rint_in(r, 0, 2) == 0) {  /* both dims, one axis each */
        ax_of[0] = ax;
        ax_of[1] = 1 - ax;
        sd = 0;
    }
    int g[2], l[2];
    for (int d = 0; d < 2; d++) g[d] = dim_for(r, ax_of[d] >= 0 ? m->sizes[ax_of[d]] : 1);
    local_dims(m, g, ax_of, 2, l);
    int variant = rint_in(r, 0, 2);  /* 0 correct, 1 mismatched axes (binary, 2-D, one sharded dim), 2 wrong output view */
    if (variant == 1 && !(binary && m->naxes == 2 && sd >= 0 && ax_of[1 - sd] < 0)) variant = 0;
    int yax[2] = {ax_of[0], ax_of[1]};
    if (variant == 1) yax[sd] = 1 - ax_of[sd];
    /* Wrong output view: shard a dup result, or move/drop the sharding. */
    int oax[2] = {ax_of[0], ax_of[1]};
    if (variant == 2) {
        if (sd < 0) oax[rint_in(r, 0, 1)] = rint_in(r, 0, m->naxes - 1);
        else if (ax_of[0] >= 0 && ax_of[1] >= 0) oax[0] = ax_of[1], oax[1] = ax_of[0];
        else if (rint_in(r, 0, 1)) oax[sd] = -1;
        else oax[sd] = -1, oax[1 - sd] = ax_of[sd];
        if (oax[0] >= 0 && g[0] % m->sizes[oax[0]]) oax[0] = -1;  /* keep the view well-formed */
        if (oax[1] >= 0 && g[1] % m->sizes[oax[1]]) oax[1] = -1;
        if (oax[0] == ax_of[0] && oax[1] == ax_of[1]) variant = 0;
    }
    set_case(t, variant == 0, "eltwise-%s-%s", op, variant == 0 ? "ok" : variant == 1 ? "bug-axes" : "bug-outview");
    char xv[64], yv[64], ov[64];
    view_str(xv, sizeof xv, m, ax_of, 2);
    view_str(yv, sizeof yv, m, yax, 2);
    view_str(ov, sizeof ov, m, oax, 2);
    for (int side = 0; side < 2; side++) {
        strbuf *b = open_side(t, side, m, g, l, 2, binary);
        const int *dims = side ? l : g;
        sb_puts(b, "  ROOT %o = ");
        shp(b, dims, 2);
        if (binary) sb_printf(b, " %s(%%x, %%y)\n}\n", op);
        else sb_printf(b, " %s(%%x)\n}\n", op);
    }
    const char *iv[2] = {xv, yv};
    rel_write(t, m, iv, binary ? 2 : 1, ov);
}

/* dot(x[m,k], w[k,n]) with k sharded on ax: partial sums, all-reduce(sum) over
 * ax. On the 2-D mesh x's m may be sharded on the other axis too. Optionally an
 * exponential of the result. Bugs: no all-reduce, max reducer, wrong groups. */
static void gen_dot_k(interp_rng *r, const smesh *m, inst *t) {
    int ax = rint_in(r, 0, m->naxes - 1);
    int mx = m->naxes == 2 && rint_in(r, 0, 1) ? 1 - ax : -1;
    int M = dim_for(r, mx >= 0 ? m->sizes[mx] : 1), K = dim_for(r, m->sizes[ax]), N = dim_for(r, 1);
    int variant = rint_in(r, 0, 3);  /* 0 correct, 1 no all-reduce, 2 max, 3 wrong groups */
    bool post = rint_in(r, 0, 1);
    static const char *vn[] = {"ok", "bug-no-allreduce", "bug-max", "bug-groups"};
    set_case(t, variant == 0, "dot-k-%s%s", vn[variant], post ? "-exp" : "");
    int xg[2] = {M, K}, wg[2] = {K, N}, og[2] = {M, N};
    int xa[2] = {mx, ax}, wa[2] = {ax, -1}, oa[2] = {mx, -1};
    int ol[2];
    local_dims(m, og, oa, 2, ol);
    for (int side = 0; side < 2; side++) {
        strbuf *b = side ? &t->dist : &t->base;
        const int *od = side ? ol : og;
        const char *last = "d";
        dot_entry(b, side, m, xg, xa, wg, wa, od, false);
        if (side && variant != 1) {
            bool halves = false;
            unsigned mask = variant == 3 ? wrong_groups(r, m, ax, &halves) : 1u << ax;
            all_reduce(b, false, "ar", "d", od, 2, m, mask, halves, variant == 2 ? "max" : "add", 1);
            last = "ar";
        }
        if (post) {
            sb_puts(b, "  %e = ");
            shp(b, od, 2);
            sb_printf(b, " exponential(%%%s)\n", last);
            last = "e";
        }
        sb_printf(b, "  ROOT %%o = ");
        shp(b, od, 2);
        sb_printf(b, " copy(%%%s)\n}\n", last);
    }
    rel_dot(t, m, xa, wa, oa);
}

/* dot(x[m,k], w[k,n]) with m and/or n sharded: no collective. Bugs: a
 * spurious all-reduce, a wrong output view. */
static void gen_dot_n(interp_rng *r, const smesh *m, inst *t) {
    int which = rint_in(r, 0, m->naxes == 2 ? 2 : 1);  /* 0: m sharded, 1: n, 2: both (2-D) */
    int ax = rint_in(r, 0, m->naxes - 1);
    int xa[2] = {-1, -1}, wa[2] = {-1, -1}, oa[2] = {-1, -1};
    if (which == 0 || which == 2) xa[0] = oa[0] = ax;
    if (which == 1) wa[1] = oa[1] = ax;
    if (which == 2) wa[1] = oa[1] = 1 - ax;
    int M = dim_for(r, oa[0] >= 0 ? m->sizes[oa[0]] : 1), K = dim_for(r, 1), N = dim_for(r, oa[1] >= 0 ? m->sizes[oa[1]] : 1);
    int variant = rint_in(r, 0, 2);  /* 0 correct, 1 spurious all-reduce, 2 wrong output view */
    int claim[2] = {oa[0], oa[1]};
    int og[2] = {M, N};
    if (variant == 2) {
        if (which == 2) claim[0] = oa[1], claim[1] = oa[0];
        else if (which == 0) claim[0] = -1, claim[1] = N % m->sizes[ax] ? -1 : ax;
        else claim[1] = -1, claim[0] = M % m->sizes[ax] ? -1 : ax;
    }
    set_case(t, variant == 0, "dot-n%d-%s", which, variant == 0 ? "ok" : variant == 1 ? "bug-spurious-allreduce" : "bug-outview");
    int xg[2] = {M, K}, wg[2] = {K, N};
    int ol[2];
    local_dims(m, og, oa, 2, ol);
    for (int side = 0; side < 2; side++) {
        strbuf *b = side ? &t->dist : &t->base;
        const int *od = side ? ol : og;
        dot_entry(b, side, m, xg, xa, wg, wa, od, !(variant == 1 && side));
        if (variant == 1 && side) {
            all_reduce(b, true, "ar", "d", od, 2, m, 1u << ax, false, "add", 1);
        }
        sb_puts(b, "}\n");
    }
    rel_dot(t, m, xa, wa, claim);
}

/* reduce(x[a,b]) over dim rd with add or max; x sharded on dim sd. Over the
 * sharded dim an all-reduce with the same reducer completes it; bugs: none, the
 * other reducer. Over the other dim: no collective; bug: a spurious one. */
static void gen_reduce(interp_rng *r, const smesh *m, inst *t) {
    int ax = rint_in(r, 0, m->naxes - 1);
    int sd = rint_in(r, 0, 1), rd = rint_in(r, 0, 1);
    bool mx = rint_in(r, 0, 1);
    const char *red = mx ? "max" : "add", *other = mx ? "add" : "max";
    int xa[2] = {-1, -1};
    xa[sd] = ax;
    int g[2], l[2];
    for (int d = 0; d < 2; d++) g[d] = dim_for(r, xa[d] >= 0 ? m->sizes[ax] : 1);
    local_dims(m, g, xa, 2, l);
    int og[1] = {g[1 - rd]}, ol[1] = {l[1 - rd]};
    int oa[1] = {sd == rd ? -1 : ax};
    int variant = rint_in(r, 0, sd == rd ? 2 : 1);
    /* sd == rd: 0 ok (all-reduce red), 1 no all-reduce, 2 other reducer.
     * sd != rd: 0 ok (none), 1 spurious all-reduce red. */
    bool ar = sd == rd ? variant != 1 : variant == 1;
    const char *arred = sd == rd && variant == 2 ? other : red;
    set_case(t, variant == 0, "reduce-%s-%s-%s", red, sd == rd ? "sharded-dim" : "other-dim",
             variant == 0 ? "ok" : sd == rd ? (variant == 1 ? "bug-no-allreduce" : "bug-reducer") : "bug-spurious-allreduce");
    for (int side = 0; side < 2; side++) {
        strbuf *b = open_side(t, side, m, g, l, 2, false);
        sb_printf(b, "  %%z = f32[] constant(%s)\n", mx ? "-inf" : "0");
        const int *od = side ? ol : og;
        sb_puts(b, side && ar ? "  %r = " : "  ROOT %r = ");
        shp(b, od, 1);
        sb_printf(b, " reduce(%%x, %%z), dimensions={%d}, to_apply=%%%s\n", rd, red);
        if (side && ar) {
            all_reduce(b, true, "ar", "r", od, 1, m, 1u << ax, false, arred, 1);
        }
        sb_puts(b, "}\n");
    }
    rel_unary(t, m, xa, 2, oa, 1);
}

/* all-gather(x) along the sharded dim over its axis gives the whole tensor;
 * optionally an exponential after. Bugs: the other dim, wrong groups. */
static void gen_gather(interp_rng *r, const smesh *m, inst *t) {
    int ax = rint_in(r, 0, m->naxes - 1);
    int sd = rint_in(r, 0, 1);
    int xa[2] = {-1, -1}, oa[2] = {-1, -1};
    xa[sd] = ax;
    int g[2], l[2];
    for (int d = 0; d < 2; d++) g[d] = dim_for(r, xa[d] >= 0 ? m->sizes[ax] : 1);
    local_dims(m, g, xa, 2, l);
    int variant = rint_in(r, 0, 2);  /* 0 ok, 1 wrong dim, 2 wrong groups */
    bool post = rint_in(r, 0, 1);
    set_case(t, variant == 0, "gather-%s%s", variant == 0 ? "ok" : variant == 1 ? "bug-dim" : "bug-groups",
             post ? "-exp" : "");
    bool halves = false;
    unsigned mask = variant == 2 ? wrong_groups(r, m, ax, &halves) : 1u << ax;
    int gsize = m->ndev;
    if (m->naxes == 2) gsize = 2;
    else if (halves) gsize = m->ndev / 2;
    if (halves && m->naxes == 2) gsize = 1;
    int gd = variant == 1 ? 1 - sd : sd;
    int dl[2] = {l[0], l[1]};
    dl[gd] *= gsize;
    for (int side = 0; side < 2; side++) {
        strbuf *b = open_side(t, side, m, g, l, 2, false);
        const int *od = side ? dl : g;
        const char *last = "x";
        if (side) {
            sb_puts(b, "  %ag = ");
            shp(b, od, 2);
            sb_puts(b, " all-gather(%x), channel_id=1, replica_groups=");
            groups(b, m, mask, halves);
            sb_printf(b, ", dimensions={%d}, use_global_device_ids=true\n", gd);
            last = "ag";
        }
        sb_puts(b, "  ROOT %o = ");
        shp(b, od, 2);
        sb_printf(b, " %s(%%%s)\n}\n", post ? "exponential" : "copy", last);
    }
    rel_unary(t, m, xa, 2, oa, 2);
}

/* transpose(x[a,b,c]) by a non-identity permutation, x sharded on one dim (two
 * on the 2-D mesh). The output view follows the sharded dims through the
 * permutation; bug: the input's view claimed unpermuted. */
static void gen_transpose(interp_rng *r, const smesh *m, inst *t) {
    static const int perms[5][3] = {{0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    const int *p = perms[rint_in(r, 0, 4)];
    int xa[3] = {-1, -1, -1};
    int sd = rint_in(r, 0, 2), ax = rint_in(r, 0, m->naxes - 1);
    xa[sd] = ax;
    if (m->naxes == 2 && rint_in(r, 0, 1)) xa[(sd + 1 + rint_in(r, 0, 1)) % 3] = 1 - ax;
    int g[3], l[3];
    for (int d = 0; d < 3; d++) g[d] = dim_for(r, xa[d] >= 0 ? m->sizes[xa[d]] : 1);
    local_dims(m, g, xa, 3, l);
    int og[3], ol[3], oa[3];
    for (int i = 0; i < 3; i++) og[i] = g[p[i]], ol[i] = l[p[i]], oa[i] = xa[p[i]];
    bool moved = false;
    for (int i = 0; i < 3; i++) moved |= oa[i] != xa[i];
    int variant = moved ? rint_in(r, 0, 1) : 0;  /* 1: output claimed with the input's view */
    bool wellformed = true;
    for (int i = 0; i < 3 && variant; i++) wellformed &= xa[i] < 0 || og[i] % m->sizes[xa[i]] == 0;
    if (!wellformed) variant = 0;
    set_case(t, variant == 0, "transpose-%d%d%d-%s", p[0], p[1], p[2], variant ? "bug-unpermuted-view" : "ok");
    for (int side = 0; side < 2; side++) {
        strbuf *b = open_side(t, side, m, g, l, 3, false);
        sb_puts(b, "  ROOT %o = ");
        shp(b, side ? ol : og, 3);
        sb_printf(b, " transpose(%%x), dimensions={%d,%d,%d}\n}\n", p[0], p[1], p[2]);
    }
    rel_unary(t, m, xa, 3, variant ? xa : oa, 3);
}

/* An elementwise op or a reduce applied to the partial sums of dot(x, w) (k
 * sharded on ax) before the all-reduce(sum). Linear ops commute with the sum
 * (multiply or divide by a duplicated tensor, negate, reduce-add): correct.
 * The others do not (add/subtract a duplicated tensor: added once per device;
 * exponential; reduce-max; divide a duplicated tensor by it): bugs. */
static void gen_partial(interp_rng *r, const smesh *m, inst *t) {
    static const struct { const char *name; bool linear; } ops[] = {
        {"multiply", true},  {"multiply-swapped", true}, {"divide", true},       {"negate", true},
        {"reduce-add", true}, {"add", false},            {"subtract", false},   {"exponential", false},
        {"reduce-max", false}, {"divide-swapped", false},
    };
    int op = rint_in(r, 0, (int)ARRAY_LEN(ops) - 1);
    const char *on = ops[op].name;
    int ax = rint_in(r, 0, m->naxes - 1);
    int M = dim_for(r, 1), K = dim_for(r, m->sizes[ax]), N = dim_for(r, 1);
    int rd = rint_in(r, 0, 1);
    bool is_reduce = strncmp(on, "reduce", 6) == 0;
    if (is_reduce) M = N = 8;  /* a max of partial sums then matches the sum's max only by a rare chance */
    set_case(t, ops[op].linear, "partial-%s%s", on, ops[op].linear ? "-ok" : "-bug");
    int xg[2] = {M, K}, wg[2] = {K, N}, og[2] = {M, N};
    int xa[2] = {-1, ax}, wa[2] = {ax, -1};
    int rg[1] = {og[1 - rd]};
    bool binary = !is_reduce && strcmp(on, "negate") && strcmp(on, "exponential");
    for (int side = 0; side < 2; side++) {
        strbuf *b = side ? &t->dist : &t->base;
        dot_entry(b, side, m, xg, xa, wg, wa, og, false);
        if (binary) param(b, "y", 2, og, 2);
        const int *od = is_reduce ? rg : og;
        int orank = is_reduce ? 1 : 2;
        if (is_reduce) sb_printf(b, "  %%z = f32[] constant(%s)\n", strcmp(on, "reduce-max") ? "0" : "-inf");
        sb_puts(b, side ? "  %e = " : "  ROOT %e = ");
        shp(b, od, orank);
        if (is_reduce) sb_printf(b, " reduce(%%d, %%z), dimensions={%d}, to_apply=%%%s\n", rd, strcmp(on, "reduce-max") ? "add" : "max");
        else if (!binary) sb_printf(b, " %s(%%d)\n", on);
        else if (strstr(on, "-swapped")) sb_printf(b, " %.*s(%%y, %%d)\n", (int)(strchr(on, '-') - on), on);
        else sb_printf(b, " %s(%%d, %%y)\n", on);
        if (side) all_reduce(b, true, "ar", "e", od, orank, m, 1u << ax, false, "add", 1);
        sb_puts(b, "}\n");
    }
    char xv[64], wv[64];
    view_str(xv, sizeof xv, m, xa, 2);
    view_str(wv, sizeof wv, m, wa, 2);
    const char *iv[3] = {xv, wv, "dup"};
    rel_write(t, m, iv, binary ? 3 : 2, "dup");
}

/* Two partial sums (dots with k sharded on ax) combined before one
 * all-reduce(sum): add/subtract commute with the sum (correct); multiply and
 * maximum do not (bugs). Also an all-reduce(sum) of a duplicated value (bug:
 * scaled by the group size). */
static void gen_partial2(interp_rng *r, const smesh *m, inst *t) {
    static const char *ops[] = {"add", "subtract", "multiply", "maximum", "dup-allreduce"};
    int op = rint_in(r, 0, 4);
    bool correct = op < 2;
    int ax = rint_in(r, 0, m->naxes - 1);
    int M = dim_for(r, 1), K = dim_for(r, m->sizes[ax]), K2 = dim_for(r, m->sizes[ax]), N = dim_for(r, 1);
    set_case(t, correct, "partial2-%s-%s", ops[op], correct ? "ok" : "bug");
    int og[2] = {M, N};
    int x1g[2] = {M, K}, w1g[2] = {K, N}, x2g[2] = {M, K2}, w2g[2] = {K2, N};
    int xa[2] = {-1, ax}, wa[2] = {ax, -1};
    int x1l[2], w1l[2], x2l[2], w2l[2];
    local_dims(m, x1g, xa, 2, x1l);
    local_dims(m, w1g, wa, 2, w1l);
    local_dims(m, x2g, xa, 2, x2l);
    local_dims(m, w2g, wa, 2, w2l);
    char xv[64], wv[64];
    view_str(xv, sizeof xv, m, xa, 2);
    view_str(wv, sizeof wv, m, wa, 2);
    for (int side = 0; side < 2; side++) {
        strbuf *b = side ? &t->dist : &t->base;
        header(b, side ? "dist" : "base", side ? m->ndev : 1);
        if (op == 4) {
            param(b, "y", 0, og, 2);
            sb_puts(b, side ? "  %e = " : "  ROOT %e = ");
            shp(b, og, 2);
            sb_puts(b, " exponential(%y)\n");
        } else {
            param(b, "x1", 0, side ? x1l : x1g, 2);
            param(b, "w1", 1, side ? w1l : w1g, 2);
            param(b, "x2", 2, side ? x2l : x2g, 2);
            param(b, "w2", 3, side ? w2l : w2g, 2);
            for (int k = 1; k <= 2; k++) {
                sb_printf(b, "  %%d%d = ", k);
                shp(b, og, 2);
                sb_printf(b, " dot(%%x%d, %%w%d), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n", k, k);
            }
            sb_puts(b, side ? "  %e = " : "  ROOT %e = ");
            shp(b, og, 2);
            sb_printf(b, " %s(%%d1, %%d2)\n", ops[op]);
        }
        if (side) all_reduce(b, true, "ar", "e", og, 2, m, 1u << ax, false, "add", 1);
        sb_puts(b, "}\n");
    }
    const char *iv[4] = {xv, wv, xv, wv};
    if (op == 4) iv[0] = "dup";
    rel_write(t, m, iv, op == 4 ? 1 : 4, "dup");
}

/* Declares %coord = s32[] this device's coordinate on mesh axis ax, computed
 * from partition-id (iota order: the last axis varies fastest). */
static void axis_coord(strbuf *b, const smesh *m, int ax) {
    sb_puts(b, "  %pid = u32[] partition-id()\n");
    if (m->naxes == 1) {
        sb_puts(b, "  %coord = s32[] convert(%pid)\n");
        return;
    }
    sb_printf(b, "  %%p = s32[] convert(%%pid)\n  %%inner = s32[] constant(%d)\n  %%coord = s32[] %s(%%p, %%inner)\n",
              m->sizes[1], ax == 0 ? "divide" : "remainder");
}

/* A duplicated x sliced per device by dynamic-slice at offset coord(ax)·chunk
 * on dim sd (0 on the other): the shard(sd, ax) view of x; or, windowed, at
 * base + coord(ax)·chunk in an x with extra rows/columns around the blocks:
 * the shard(sd, ax) view of the baseline's slice of that window (a fused
 * weight split per device). Bugs: multiplier chunk/2, the coordinate of the
 * other axis (2-D mesh), the window shifted by one. */
/* dynamic-update-slice(x, y, offsets) with x and y sharded alike along dim
 * sd over ax, y whole along it, and a constant offset along the other dim:
 * x's view of the baseline's update (a scan stacking values into a buffer).
 * Bug: the distributed offset one further. */
static void gen_dus(interp_rng *r, const smesh *m, inst *t, int ax, int sd) {
    int od = 1 - sd, xa[2] = {-1, -1};
    xa[sd] = ax;
    int g[2], yg[2], l[2], yl[2];
    g[sd] = dim_for(r, m->sizes[ax]);
    g[od] = rint_in(r, 3, 8);
    yg[sd] = g[sd];
    yg[od] = rint_in(r, 1, g[od] - 1);
    int at = rint_in(r, 0, g[od] - yg[od] - 1);  /* room for one more: the bug moves the values */
    bool bug = rint_in(r, 0, 1);
    set_case(t, !bug, "dus-%s", bug ? "bug-offset" : "ok");
    local_dims(m, g, xa, 2, l);
    local_dims(m, yg, xa, 2, yl);
    for (int side = 0; side < 2; side++) {
        strbuf *b = side ? &t->dist : &t->base;
        header(b, side ? "dist" : "base", side ? m->ndev : 1);
        param(b, "x", 0, side ? l : g, 2);
        param(b, "y", 1, side ? yl : yg, 2);
        sb_printf(b, "  %%z = s32[] constant(0)\n  %%at = s32[] constant(%d)\n  ROOT %%o = ", at + (side && bug));
        shp(b, side ? l : g, 2);
        sb_printf(b, " dynamic-update-slice(%%x, %%y, %s, %s)\n}\n", sd ? "%at" : "%z", sd ? "%z" : "%at");
    }
    char xv[64];
    view_str(xv, sizeof xv, m, xa, 2);
    const char *iv[2] = {xv, xv};
    rel_write(t, m, iv, 2, xv);
}

static void gen_dslice(interp_rng *r, const smesh *m, inst *t) {
    int ax = rint_in(r, 0, m->naxes - 1), sd = rint_in(r, 0, 1);
    if (rint_in(r, 0, 3) == 0) {
        gen_dus(r, m, t, ax, sd);
        return;
    }
    int xa[2] = {-1, -1}, oa[2] = {-1, -1};
    oa[sd] = ax;
    int g[2], l[2];
    for (int d = 0; d < 2; d++) g[d] = dim_for(r, oa[d] >= 0 ? m->sizes[ax] : 1);
    local_dims(m, g, oa, 2, l);
    int variant = rint_in(r, 0, m->naxes == 2 ? 4 : 3);  /* 0 ok, 1 half multiplier, 2 window ok, 3 window shifted, 4 other axis */
    static const char *vn[] = {"ok", "bug-multiplier", "window-ok", "window-bug-shift", "bug-axis"};
    set_case(t, variant == 0 || variant == 2, "dslice-%s", vn[variant]);
    bool window = variant == 2 || variant == 3;
    int base = window ? rint_in(r, 1, 3) : 0, xg[2] = {g[0], g[1]};
    if (window) xg[sd] += base + rint_in(r, 0, 2);
    for (int side = 0; side < 2; side++) {
        strbuf *b = open_side(t, side, m, xg, xg, 2, false);
        if (side) {
            axis_coord(b, m, variant == 4 ? 1 - ax : ax);
            sb_printf(b, "  %%c = s32[] constant(%d)\n  %%off0 = s32[] multiply(%%coord, %%c)\n  %%z = s32[] constant(0)\n",
                      variant == 1 ? l[sd] / 2 : l[sd]);
            sb_printf(b, "  %%base = s32[] constant(%d)\n  %%off = s32[] add(%%off0, %%base)\n", variant == 3 ? base + 1 : base);
        }
        sb_puts(b, "  ROOT %o = ");
        shp(b, side ? l : g, 2);
        if (side) sb_printf(b, " dynamic-slice(%%x, %s, %s), dynamic_slice_sizes={%d,%d}\n}\n", sd ? "%z" : "%off", sd ? "%off" : "%z", l[0], l[1]);
        else if (window) sb_printf(b, " slice(%%x), slice={[%d:%d], [%d:%d]}\n}\n", sd ? 0 : base, sd ? g[0] : base + g[0],
                                   sd ? base : 0, sd ? base + g[1] : g[1]);
        else sb_puts(b, " copy(%x)\n}\n");
    }
    rel_unary(t, m, xa, 2, oa, 2);
}

/* dot(x[m,k], w[k,n]) with k sharded on ax, then reduce-scatter(sum) over ax
 * on dim d: the shard(d, ax) view of the product. Bugs: max reducer, the
 * other axis's groups (2-D mesh). */
static void gen_rscatter(interp_rng *r, const smesh *m, inst *t) {
    int ax = rint_in(r, 0, m->naxes - 1), d = rint_in(r, 0, 1), n = m->sizes[ax];
    int M = dim_for(r, d == 0 ? n : 1), K = dim_for(r, n), N = dim_for(r, d == 1 ? n : 1);
    int variant = rint_in(r, 0, m->naxes == 2 ? 2 : 1);  /* 0 ok, 1 max, 2 other axis */
    set_case(t, variant == 0, "rscatter-d%d-%s", d, variant == 0 ? "ok" : variant == 1 ? "bug-max" : "bug-groups");
    int xg[2] = {M, K}, wg[2] = {K, N}, og[2] = {M, N};
    int xa[2] = {-1, ax}, wa[2] = {ax, -1}, oa[2] = {-1, -1};
    oa[d] = ax;
    int ol[2];
    local_dims(m, og, oa, 2, ol);
    for (int side = 0; side < 2; side++) {
        strbuf *b = side ? &t->dist : &t->base;
        dot_entry(b, side, m, xg, xa, wg, wa, og, !side);
        if (side) {
            sb_puts(b, "  ROOT %o = ");
            shp(b, ol, 2);
            sb_puts(b, " reduce-scatter(%d), channel_id=1, replica_groups=");
            groups(b, m, 1u << (variant == 2 ? 1 - ax : ax), false);
            sb_printf(b, ", use_global_device_ids=true, dimensions={%d}, to_apply=%%%s\n", d, variant == 1 ? "max" : "add");
        }
        sb_puts(b, "}\n");
    }
    rel_dot(t, m, xa, wa, oa);
}

/* x[A,B] sharded on dim 1 over ax (on the 2-D mesh x[A,B,C], C sharded over
 * the other axis and kept bound through the exchange), split locally into
 * [n, A/n, B/n(, C)], all-to-all over ax on dim 0, transpose {1,0,..},
 * reshaped back and negated: the shard(0, ax) view of -x. The all-to-all's
 * result is a plain view only of x reshaped (GSPMD's tp8 RoPE tables), read
 * so where the negate meets it. Bug: the transpose left out. */
static void gen_a2a_split(interp_rng *r, const smesh *m, inst *t) {
    int ax = rint_in(r, 0, m->naxes - 1), n = m->sizes[ax];
    bool bound = m->naxes == 2;
    int rank = bound ? 3 : 2;
    int g[3] = {n * rint_in(r, 2, 3), n * rint_in(r, 1, 2), 1}, l[3], ol[3];
    int xa[3] = {-1, ax, -1}, oa[3] = {ax, -1, -1};
    if (bound) {
        g[2] = m->sizes[1 - ax] * rint_in(r, 1, 2);
        xa[2] = oa[2] = 1 - ax;
    }
    local_dims(m, g, xa, rank, l);
    local_dims(m, g, oa, rank, ol);
    int variant = rint_in(r, 0, 1);  /* 0 ok, 1 no transpose */
    set_case(t, variant == 0, "a2a-split%s-%s", bound ? "-bound" : "", variant ? "bug-no-transpose" : "ok");
    int s4[4] = {n, l[0] / n, l[1], l[2]}, t4[4] = {l[0] / n, n, l[1], l[2]};
    for (int side = 0; side < 2; side++) {
        strbuf *b = open_side(t, side, m, g, l, rank, false);
        const char *last = "x";
        if (side) {
            sb_puts(b, "  %s = ");
            shp(b, s4, rank + 1);
            sb_puts(b, " reshape(%x)\n  %a = ");
            shp(b, s4, rank + 1);
            sb_puts(b, " all-to-all(%s), channel_id=1, replica_groups=");
            groups(b, m, 1u << ax, false);
            sb_puts(b, ", dimensions={0}\n");
            last = "a";
            if (!variant) {
                sb_puts(b, "  %t = ");
                shp(b, t4, rank + 1);
                sb_printf(b, " transpose(%%a), dimensions={1,0,2%s}\n", bound ? ",3" : "");
                last = "t";
            }
            sb_puts(b, "  %r = ");
            shp(b, ol, rank);
            sb_printf(b, " reshape(%%%s)\n", last);
            last = "r";
        }
        sb_puts(b, "  ROOT %o = ");
        shp(b, side ? ol : g, rank);
        sb_printf(b, " negate(%%%s)\n}\n", last);
    }
    rel_unary(t, m, xa, rank, oa, rank);
}

/* The distributed side's exchange of x[l] over the axes of mask on dim d,
 * reshaped to r3 and (when transposed) transposed {1,0,2} to t3, then the
 * ROOT reshape to ol; the baseline's ROOT copy of x to g. */
static void a2a_swap_tail(strbuf *b, int side, const smesh *m, unsigned mask, int d, const int *l, const int *r3,
                          const int *t3, bool transposed, const int *g, const int *ol) {
    const char *last = "x";
    if (side) {
        sb_puts(b, "  %a2a = ");
        shp(b, l, 2);
        sb_puts(b, " all-to-all(%x), channel_id=1, replica_groups=");
        groups(b, m, mask, false);
        sb_printf(b, ", dimensions={%d}\n  %%r3 = ", d);
        shp(b, r3, 3);
        sb_puts(b, " reshape(%a2a)\n");
        last = "r3";
        if (transposed) {
            sb_puts(b, "  %t3 = ");
            shp(b, t3, 3);
            sb_puts(b, " transpose(%r3), dimensions={1,0,2}\n");
            last = "t3";
        }
    }
    sb_puts(b, "  ROOT %o = ");
    shp(b, side ? ol : g, 2);
    sb_printf(b, " %s(%%%s)\n}\n", side ? "reshape" : "copy", last);
}

/* On the 2-D mesh: x[A,B] with dim 0 sharded over both axes, the outer one
 * major; an all-to-all over the other (minor) axis on dim 1, reshape,
 * transpose {1,0,2}, reshape: dim 0 stays sharded over the outer axis, dim 1
 * is sharded over the exchanged one (GSPMD's reshards on 2-D meshes). Bugs:
 * the transpose left out; dim 0 sharded with the exchanged axis major (its
 * blocks are then no contiguous run of the outer axis's block). */
static void gen_a2a_within(interp_rng *r, const smesh *m, inst *t) {
    int ex = rint_in(r, 0, 1), ou = 1 - ex, n = m->sizes[ex], P = m->sizes[0] * m->sizes[1];
    int variant = rint_in(r, 0, 2);  /* 0 ok, 1 no transpose, 2 exchanged axis major */
    static const char *vn[] = {"ok", "bug-no-transpose", "bug-axis-order"};
    set_case(t, variant == 0, "a2a-within-%s", vn[variant]);
    int g[2] = {P * rint_in(r, 2, 3), n * rint_in(r, 2, 3)}, l[2] = {g[0] / P, g[1]};
    int ol[2] = {g[0] / m->sizes[ou], g[1] / n}, r3[3] = {l[0], n, g[1] / n}, t3[3] = {n, l[0], g[1] / n};
    for (int side = 0; side < 2; side++)
        a2a_swap_tail(open_side(t, side, m, g, l, 2, false), side, m, 1u << ex, 1, l, r3, t3, variant != 1, g, ol);
    char xv[64], ov[64];
    int major = variant == 2 ? ex : ou;
    snprintf(xv, sizeof xv, "shard(0,(%s,%s))", m->names[major], m->names[1 - major]);
    snprintf(ov, sizeof ov, "shard(0,%s) shard(1,%s)", m->names[ou], m->names[ex]);
    const char *iv[1] = {xv};
    rel_write(t, m, iv, 1, ov);
}

/* x[a,b] sharded on dim e over ax; all-to-all (dimensions={1-e}) over ax,
 * then reshape, transpose {1,0,2}, reshape: the shard(1-e, ax) view of x.
 * Bugs: the transpose left out, the other axis's groups (2-D mesh). */
static void gen_a2a(interp_rng *r, const smesh *m, inst *t) {
    if (rint_in(r, 0, 2) == 0) {
        gen_a2a_split(r, m, t);
        return;
    }
    if (m->naxes == 2 && rint_in(r, 0, 2) == 0) {
        gen_a2a_within(r, m, t);
        return;
    }
    int ax = rint_in(r, 0, m->naxes - 1), e = rint_in(r, 0, 1), n = m->sizes[ax];
    int xa[2] = {-1, -1}, oa[2] = {-1, -1};
    xa[e] = ax;
    oa[1 - e] = ax;
    int g[2], l[2], ol[2];
    for (int d = 0; d < 2; d++) g[d] = n * rint_in(r, 2, 8 / n);  /* blocks of >= 2, so a missing transpose shows */
    local_dims(m, g, xa, 2, l);
    local_dims(m, g, oa, 2, ol);
    int variant = rint_in(r, 0, m->naxes == 2 ? 2 : 1);  /* 0 ok, 1 no transpose, 2 other axis */
    set_case(t, variant == 0, "a2a-e%d-%s", e, variant == 0 ? "ok" : variant == 1 ? "bug-no-transpose" : "bug-groups");
    int r3[3] = {l[0], n, l[1] / n}, t3[3];  /* e == 0: [a/n, n, b/n] */
    if (e == 1) r3[0] = n, r3[1] = l[0] / n, r3[2] = l[1];
    t3[0] = r3[1], t3[1] = r3[0], t3[2] = r3[2];
    for (int side = 0; side < 2; side++)
        a2a_swap_tail(open_side(t, side, m, g, l, 2, false), side, m, 1u << (variant == 2 ? 1 - ax : ax), 1 - e, l, r3, t3,
                      variant != 1, g, ol);
    rel_unary(t, m, xa, 2, oa, 2);
}

/* Appends slice={[lo:hi], ...} for a rank-2 slice. */
static void slice_attr(strbuf *b, const int *lo, const int *hi) {
    sb_printf(b, " slice(%%x), slice={[%d:%d], [%d:%d]}\n", lo[0], hi[0], lo[1], hi[1]);
}

/* x sharded on dim sd over ax. A slice of the other dim (its range alike on
 * both sides) or concatenate(x, y) along it: correct. Bugs: a shifted slice
 * range, the operands swapped, the first half of the sharded dim taken from
 * each device's shard (the checker assumes sharded-dim slices). */
static void gen_slice_concat(interp_rng *r, const smesh *m, inst *t) {
    int ax = rint_in(r, 0, m->naxes - 1), sd = rint_in(r, 0, 1), od = 1 - sd, n = m->sizes[ax];
    int xa[2] = {-1, -1};
    xa[sd] = ax;
    int g[2], l[2];
    g[sd] = 2 * n * rint_in(r, 1, 4 / n);
    g[od] = rint_in(r, 3, 8);
    local_dims(m, g, xa, 2, l);
    int variant = rint_in(r, 0, 4);  /* 0 slice ok, 1 slice shifted, 2 concat ok, 3 concat swapped, 4 sharded-dim slice */
    static const char *vn[] = {"slice-ok", "slice-bug-range", "concat-ok", "concat-bug-swapped", "slice-bug-sharded-dim"};
    set_case(t, variant == 0 || variant == 2, "%s", vn[variant]);
    bool concat = variant == 2 || variant == 3;
    int lo[2] = {0, 0}, hi[2];
    lo[od] = rint_in(r, 0, g[od] - 2);
    hi[od] = rint_in(r, lo[od] + 1, g[od] - 1);
    for (int side = 0; side < 2; side++) {
        strbuf *b = open_side(t, side, m, g, l, 2, concat);
        const int *dims = side ? l : g;
        int od2[2] = {dims[0], dims[1]}, slo[2] = {lo[0], lo[1]}, shi[2] = {hi[0], hi[1]};
        shi[sd] = dims[sd];
        if (concat) od2[od] *= 2;
        else od2[od] = hi[od] - lo[od];
        if (variant == 4) od2[od] = dims[od], slo[od] = 0, shi[od] = dims[od], shi[sd] = od2[sd] = g[sd] / 2 / (side ? n : 1);
        if (side && variant == 1) slo[od]++, shi[od]++;
        sb_puts(b, "  ROOT %o = ");
        shp(b, od2, 2);
        if (concat) sb_printf(b, " concatenate(%s), dimensions={%d}\n", side && variant == 3 ? "%y, %x" : "%x, %y", od);
        else slice_attr(b, slo, shi);
        sb_puts(b, "}\n");
    }
    char xv[64];
    view_str(xv, sizeof xv, m, xa, 2);
    const char *iv[2] = {xv, xv};
    rel_write(t, m, iv, concat ? 2 : 1, xv);
}

/* x[a,b] (sharded on dim 0 or dup) times a table t[b] broadcast along dim 0.
 * The baseline holds t as a folded constant f32[1,b] (reshaped); the
 * distributed side computes it from constants: concatenate(op(c·K), op(c·K))
 * with op cosine or negate. Bugs: another K, sine for cosine (the values
 * differ; constant folding must not make them meet). */
static void gen_fold(interp_rng *r, const smesh *m, inst *t) {
    int ax = rint_in(r, 0, m->naxes - 1), n = m->sizes[ax];
    bool sharded = rint_in(r, 0, 2) > 0, cosine = rint_in(r, 0, 1);
    int xa[2] = {sharded ? ax : -1, -1};
    int g[2] = {sharded ? n * rint_in(r, 1, 8 / n) : rint_in(r, 2, 8), 2 * rint_in(r, 1, 4)}, l[2];
    local_dims(m, g, xa, 2, l);
    int h = g[1] / 2, K = rint_in(r, 1, 8);
    double c[4];
    for (int k = 0; k < h; k++) c[k] = rint_in(r, 1, 64) / 64.0;
    int variant = rint_in(r, 0, cosine ? 2 : 1);  /* 0 ok, 1 other K, 2 sine for cosine */
    set_case(t, variant == 0, "fold-%s-%s", cosine ? "cos" : "neg", variant == 0 ? "ok" : variant == 1 ? "bug-k" : "bug-sine");
    for (int side = 0; side < 2; side++) {
        strbuf *b = open_side(t, side, m, g, l, 2, false);
        const int *dims = side ? l : g;
        if (!side) {
            /* The folded table, as XLA prints it: f32 values, 9 digits. */
            int kb = variant == 1 ? K + 1 : K;
            sb_printf(b, "  %%t = f32[1,%d] constant({ {", g[1]);
            for (int k = 0; k < g[1]; k++) {
                double v = c[k % h] * kb;
                v = cosine ? (double)(float)cos(v) : -v;
                sb_printf(b, "%s%.9g", k ? ", " : "", v);
            }
            sb_printf(b, "} })\n  %%tr = f32[%d] reshape(%%t)\n", g[1]);
        } else {
            sb_printf(b, "  %%c = f32[%d] constant({", h);
            for (int k = 0; k < h; k++) sb_printf(b, "%s%.9g", k ? ", " : "", c[k]);
            sb_printf(b, "})\n  %%k = f32[] constant(%d)\n  %%kb = f32[%d] broadcast(%%k), dimensions={}\n", K, h);
            sb_printf(b, "  %%m = f32[%d] multiply(%%c, %%kb)\n", h);
            sb_printf(b, "  %%f = f32[%d] %s(%%m)\n", h, !cosine ? "negate" : variant == 2 ? "sine" : "cosine");
            sb_printf(b, "  %%tr = f32[%d] concatenate(%%f, %%f), dimensions={0}\n", g[1]);
        }
        sb_puts(b, "  %tb = ");
        shp(b, dims, 2);
        sb_puts(b, " broadcast(%tr), dimensions={1}\n  ROOT %o = ");
        shp(b, dims, 2);
        sb_puts(b, " multiply(%x, %tb)\n}\n");
    }
    rel_unary(t, m, xa, 2, xa, 2);
}

/* Grouped-query heads on the 2-D mesh: k[B,2,D] (kv heads over dp), q[B,4,D]
 * (heads over (dp,tp)); k repeated per head pair by broadcast [B,2,2,D] and
 * reshape [B,4,D], times q. Locally both k's head dim and the repeat dim are
 * units: the repeat dim is read as sharded over tp (the broadcast the
 * baseline has) and merged with the kv heads (the reshape the baseline has).
 * Bug: k's relation over tp instead of dp (each device pairs q with another
 * kv head). */
static void gen_gqa_repeat(interp_rng *r, const smesh *m, inst *t) {
    int B = rint_in(r, 1, 3), D = rint_in(r, 2, 4);
    int variant = rint_in(r, 0, 1);  /* 0 ok, 1 k over tp */
    set_case(t, variant == 0, "gqa-repeat-%s", variant ? "bug-k-axis" : "ok");
    for (int side = 0; side < 2; side++) {
        strbuf *b = side ? &t->dist : &t->base;
        int hk = side ? 1 : 2, hq = side ? 1 : 4, rp = side ? 1 : 2;
        header(b, side ? "dist" : "base", side ? m->ndev : 1);
        sb_printf(b, "  %%k = f32[%d,%d,%d] parameter(0)\n  %%q = f32[%d,%d,%d] parameter(1)\n", B, hk, D, B, hq, D);
        sb_printf(b, "  %%bc = f32[%d,%d,%d,%d] broadcast(%%k), dimensions={0,1,3}\n", B, hk, rp, D);
        sb_printf(b, "  %%rs = f32[%d,%d,%d] reshape(%%bc)\n", B, hq, D);
        sb_printf(b, "  ROOT %%o = f32[%d,%d,%d] multiply(%%q, %%rs)\n}\n", B, hq, D);
    }
    const char *iv[2] = {variant ? "shard(1,tp)" : "shard(1,dp)", "shard(1,(dp,tp))"};
    rel_write(t, m, iv, 2, "shard(1,(dp,tp))");
}

/* x, y[a,b] sharded on dim sd over ax; both reshaped with a unit dim inserted
 * just before sd ([a,1,b] or [1,a,b]: the sharding may belong to the unit
 * dim or to the next one, two true readings), subtracted, and either kept
 * (output shard(sd+1)) or reshaped back (shard(sd)). On the 2-D mesh, split:
 * sd sharded over (dp,tp) and the baseline's reshape cuts it into
 * [2, b/2] — dp on the new dim, tp on the rest (a head split over two axes).
 * Bug: the operands swapped. */
static void gen_unit_reshape(interp_rng *r, const smesh *m, inst *t) {
    if (m->naxes == 2 && rint_in(r, 0, 2) == 0) {
        gen_gqa_repeat(r, m, t);
        return;
    }
    int ax = rint_in(r, 0, m->naxes - 1), sd = rint_in(r, 0, 1), n = m->sizes[ax];
    bool split = m->naxes == 2 && rint_in(r, 0, 1);
    int xa[2] = {-1, -1};
    xa[sd] = ax;
    int g[2], l[2];
    g[sd] = split ? 8 : n * rint_in(r, 2, 8 / n);  /* blocks of >= 2: with 1 the local grouping is another one */
    g[1 - sd] = rint_in(r, 2, 6);
    local_dims(m, g, xa, 2, l);
    if (split) l[sd] = g[sd] / 4;
    bool keep3 = rint_in(r, 0, 1);
    int variant = rint_in(r, 0, 1);  /* 0 ok, 1 operands swapped */
    set_case(t, variant == 0, "unit-reshape-d%d-%s%s-%s", sd, split ? "split-" : "", keep3 ? "kept" : "back",
             variant == 0 ? "ok" : "bug-swapped");
    for (int side = 0; side < 2; side++) {
        strbuf *b = open_side(t, side, m, g, l, 2, true);
        const int *dims = side ? l : g;
        int d3[3], k3 = 0;
        for (int d = 0; d < 2; d++) {
            if (d == sd) d3[k3++] = split && !side ? 2 : 1;
            d3[k3++] = split && !side && d == sd ? dims[d] / 2 : dims[d];
        }
        const char *nm[2] = {"x", "y"};
        for (int k = 0; k < 2; k++) {
            sb_printf(b, "  %%%sr = ", nm[k]);
            shp(b, d3, 3);
            sb_printf(b, " reshape(%%%s)\n", nm[k]);
        }
        sb_puts(b, "  %s = ");
        shp(b, d3, 3);
        sb_puts(b, side && variant == 1 ? " subtract(%yr, %xr)\n" : " subtract(%xr, %yr)\n");
        sb_puts(b, "  ROOT %o = ");
        shp(b, keep3 ? d3 : dims, keep3 ? 3 : 2);
        sb_puts(b, keep3 ? " copy(%s)\n}\n" : " reshape(%s)\n}\n");
    }
    int oa[3] = {-1, -1, -1};
    oa[sd + 1] = ax;
    char xv[64], ov[64];
    view_str(xv, sizeof xv, m, xa, 2);
    view_str(ov, sizeof ov, m, keep3 ? oa : xa, keep3 ? 3 : 2);
    if (split) {
        snprintf(xv, sizeof xv, "shard(%d,(dp,tp))", sd);
        if (keep3) snprintf(ov, sizeof ov, "shard(%d,dp) shard(%d,tp)", sd, sd + 1);
        else snprintf(ov, sizeof ov, "%s", xv);
    }
    const char *iv[2] = {xv, xv};
    rel_write(t, m, iv, 2, ov);
}

/* A positional table p[R,H] sharded by rows over ax (k rows per device) read
 * at positions iota[S] (S <= R) the vocab-parallel way: index iota - coord·k,
 * in range on one device, gathered there and zero elsewhere, all-reduced,
 * added to x. The baseline slices p[0:S] (p is %tab in the text). Bugs: no all-reduce, the offset
 * shifted by one, the all-reduce over the other axis (2-D mesh). */
static void gen_posemb(interp_rng *r, const smesh *m, inst *t) {
    int ax = rint_in(r, 0, m->naxes - 1), n = m->sizes[ax], k = rint_in(r, 2, 3), R = n * k;
    int S = rint_in(r, 2, R), H = rint_in(r, 2, 4);
    int variant = rint_in(r, 0, m->naxes == 2 ? 3 : 2);  /* 0 ok, 1 no all-reduce, 2 offset + 1, 3 other axis */
    static const char *vn[] = {"ok", "bug-no-allreduce", "bug-offset", "bug-axis"};
    set_case(t, variant == 0, "posemb-%s", vn[variant]);
    for (int side = 0; side < 2; side++) {
        strbuf *b = side ? &t->dist : &t->base;
        header(b, side ? "dist" : "base", side ? m->ndev : 1);
        sb_printf(b, "  %%x = f32[%d,%d] parameter(0)\n  %%tab = f32[%d,%d] parameter(1)\n", S, H, side ? k : R, H);
        if (!side) {
            sb_printf(b, "  %%ps = f32[%d,%d] slice(%%tab), slice={[0:%d], [0:%d]}\n", S, H, S, H);
            sb_printf(b, "  ROOT %%o = f32[%d,%d] add(%%x, %%ps)\n}\n", S, H);
            continue;
        }
        axis_coord(b, m, ax);
        sb_printf(b, "  %%k = s32[] constant(%d)\n  %%off0 = s32[] multiply(%%coord, %%k)\n", k);
        sb_printf(b, "  %%one = s32[] constant(%d)\n  %%off = s32[] add(%%off0, %%one)\n", variant == 2 ? 1 : 0);
        sb_printf(b, "  %%io = s32[%d] iota(), iota_dimension=0\n  %%offb = s32[%d] broadcast(%%off), dimensions={}\n", S, S);
        sb_printf(b, "  %%idx = s32[%d] subtract(%%io, %%offb)\n  %%z = s32[] constant(0)\n", S);
        sb_printf(b, "  %%zb = s32[%d] broadcast(%%z), dimensions={}\n  %%kb = s32[%d] broadcast(%%k), dimensions={}\n", S, S);
        sb_printf(b, "  %%ge = pred[%d] compare(%%idx, %%zb), direction=GE\n", S);
        sb_printf(b, "  %%lt = pred[%d] compare(%%idx, %%kb), direction=LT\n  %%in = pred[%d] and(%%ge, %%lt)\n", S, S);
        sb_printf(b, "  %%ci = s32[%d] select(%%in, %%idx, %%zb)\n  %%ci2 = s32[%d,1] reshape(%%ci)\n", S, S);
        sb_printf(b, "  %%g = f32[%d,%d] gather(%%tab, %%ci2), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, "
                     "index_vector_dim=1, slice_sizes={1,%d}\n", S, H, H);
        sb_printf(b, "  %%inb = pred[%d,%d] broadcast(%%in), dimensions={0}\n  %%fz = f32[] constant(0)\n", S, H);
        sb_printf(b, "  %%fzb = f32[%d,%d] broadcast(%%fz), dimensions={}\n", S, H);
        sb_printf(b, "  %%msk = f32[%d,%d] select(%%inb, %%g, %%fzb)\n", S, H);
        const char *sum = "msk";
        if (variant != 1) {
            int sdims[2] = {S, H};
            all_reduce(b, false, "ar", "msk", sdims, 2, m, 1u << (variant == 3 ? 1 - ax : ax), false, "add", 1);
            sum = "ar";
        }
        sb_printf(b, "  ROOT %%o = f32[%d,%d] add(%%x, %%%s)\n}\n", S, H, sum);
    }
    char pv[64];
    int pa[2] = {ax, -1};
    view_str(pv, sizeof pv, m, pa, 2);
    const char *iv[2] = {"dup", pv};
    rel_write(t, m, iv, 2, "dup");
}

/* A dense expert dispatch (lift_zmask.c) over axis ax of n devices:
 * E = n·El experts, T = n·Tl tokens. The baseline mixes every expert's
 * tanh(x·wg[e]) by w = max(logits + bias, 0); the distributed side sends row (e, t)
 * to expert e's device as x[t] where w[t,e] > 0 and as zeros elsewhere, and
 * weights the rows that come back by w. Bugs: the mask inverted, the combine
 * weighted by w² (non-negative too, but not the mask's source), the experts
 * reversed or renumbered round-robin before the dispatch, the dispatch
 * all-to-all's transpose missing; correct too: reversed twice, swapped and
 * swapped back. */
static void gen_zmask(interp_rng *r, const smesh *m, inst *t) {
    int ax = rint_in(r, 0, m->naxes - 1), n = m->sizes[ax];
    /* 0 ok, 1 mask w < 0, 2 combine by w², 3 experts reversed, 4 no transpose, 5 experts round-robin,
     * 6 ok: experts reversed twice, 7 ok: split, swapped and swapped back */
    int variant = rint_in(r, 0, 1) ? (rint_in(r, 0, 2) ? 0 : rint_in(r, 6, 7)) : rint_in(r, 1, 5);
    int El = variant == 4 || variant == 5 || variant == 7 ? 2 : rint_in(r, 1, 2), Tl = rint_in(r, 1, 3), H = rint_in(r, 2, 4),
        F = rint_in(r, 2, 4);
    int E = n * El, T = n * Tl;
    static const char *const names[] = {"ok", "bug-mask", "bug-combine", "bug-reversed", "bug-no-transpose", "bug-round-robin",
                                        "ok-reversed-twice", "ok-swapped-back"};
    set_case(t, variant == 0 || variant >= 6, "zmask-%s", names[variant]);
    for (int side = 0; side < 2; side++) {
        strbuf *b = side ? &t->dist : &t->base;
        int tk = side ? Tl : T, ex = side ? El : E;
        header(b, side ? "dist" : "base", side ? m->ndev : 1);
        param(b, "x", 0, (int[]){tk, H}, 2);
        param(b, "lg", 1, (int[]){tk, E}, 2);
        param(b, "wg", 2, (int[]){ex, H, F}, 3);
        sb_printf(b, "  %%z = f32[] constant(0)\n  %%zb = f32[%d,%d] broadcast(%%z), dimensions={}\n", tk, E);
        /* a bias of +1 on even and -1 on odd experts routes them differently,
         * so experts exchanged between parities change the values */
        sb_printf(b, "  %%bias = f32[%d] constant({", E);
        for (int e = 0; e < E; e++) sb_printf(b, "%s%d", e ? ", " : "", e % 2 ? -1 : 1);
        sb_printf(b, "})\n  %%bb = f32[%d,%d] broadcast(%%bias), dimensions={1}\n", tk, E);
        sb_printf(b, "  %%lb = f32[%d,%d] add(%%lg, %%bb)\n", tk, E);
        sb_printf(b, "  %%w = f32[%d,%d] maximum(%%lb, %%zb)\n", tk, E);
        const char *combine = side && variant == 2 ? "w2" : "w";
        if (side && variant == 2) sb_printf(b, "  %%w2 = f32[%d,%d] multiply(%%w, %%w)\n", tk, E);
        if (!side) {
            sb_printf(b, "  %%d = f32[%d,%d,%d] dot(%%wg, %%x), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n", E, F, T);
            sb_printf(b, "  %%y = f32[%d,%d,%d] transpose(%%d), dimensions={0,2,1}\n", E, T, F);
            sb_printf(b, "  %%yb = f32[%d,%d,%d] tanh(%%y)\n", E, T, F);
        } else {
            sb_printf(b, "  %%wt = f32[%d,%d] transpose(%%w), dimensions={1,0}\n", E, Tl);
            sb_printf(b, "  %%zt = f32[%d,%d] broadcast(%%z), dimensions={}\n", E, Tl);
            sb_printf(b, "  %%m = pred[%d,%d] compare(%%wt, %%zt), direction=%s\n", E, Tl, variant == 1 ? "LT" : "GT");
            sb_printf(b, "  %%mb = pred[%d,%d,%d] broadcast(%%m), dimensions={0,1}\n", E, Tl, H);
            sb_printf(b, "  %%xb = f32[%d,%d,%d] broadcast(%%x), dimensions={1,2}\n", E, Tl, H);
            sb_printf(b, "  %%z3 = f32[%d,%d,%d] broadcast(%%z), dimensions={}\n", E, Tl, H);
            sb_printf(b, "  %%disp = f32[%d,%d,%d] select(%%mb, %%xb, %%z3)\n", E, Tl, H);
            const char *sent = "disp";
            if (variant == 3 || variant == 6) {
                sb_printf(b, "  %%rev = f32[%d,%d,%d] reverse(%%disp), dimensions={0}\n", E, Tl, H);
                sent = "rev";
            }
            if (variant == 6) {
                sb_printf(b, "  %%rev2 = f32[%d,%d,%d] reverse(%%rev), dimensions={0}\n", E, Tl, H);
                sent = "rev2";
            }
            if (variant == 5 || variant == 7) {
                /* experts e = j·n + r: [El, n] swapped to [n, El] (and, when 7, back) */
                sb_printf(b, "  %%rr1 = f32[%d,%d,%d,%d] reshape(%%disp)\n", El, n, Tl, H);
                sb_printf(b, "  %%rr2 = f32[%d,%d,%d,%d] transpose(%%rr1), dimensions={1,0,2,3}\n", n, El, Tl, H);
                if (variant == 7) sb_printf(b, "  %%rr3 = f32[%d,%d,%d,%d] transpose(%%rr2), dimensions={1,0,2,3}\n", El, n, Tl, H);
                sb_printf(b, "  %%rr = f32[%d,%d,%d] reshape(%%%s)\n", E, Tl, H, variant == 7 ? "rr3" : "rr2");
                sent = "rr";
            }
            sb_printf(b, "  %%a1 = f32[%d,%d,%d] all-to-all(%%%s), channel_id=1, replica_groups=", E, Tl, H, sent);
            groups(b, m, 1u << ax, false);
            sb_printf(b, ", dimensions={0}\n  %%a2 = f32[%d,%d,%d,%d] reshape(%%a1)\n", n, El, Tl, H);
            if (variant != 4) sb_printf(b, "  %%a3 = f32[%d,%d,%d,%d] transpose(%%a2), dimensions={1,0,2,3}\n", El, n, Tl, H);
            sb_printf(b, "  %%xin = f32[%d,%d,%d] reshape(%%%s)\n", El, T, H, variant == 4 ? "a2" : "a3");
            sb_printf(b, "  %%g = f32[%d,%d,%d] dot(%%xin, %%wg), lhs_batch_dims={0}, lhs_contracting_dims={2}, "
                      "rhs_batch_dims={0}, rhs_contracting_dims={1}\n", El, T, F);
            sb_printf(b, "  %%h = f32[%d,%d,%d] tanh(%%g)\n", El, T, F);
            sb_printf(b, "  %%b1 = f32[%d,%d,%d] all-to-all(%%h), channel_id=2, replica_groups=", El, T, F);
            groups(b, m, 1u << ax, false);
            sb_printf(b, ", dimensions={1}\n  %%b2 = f32[%d,%d,%d,%d] reshape(%%b1)\n", El, n, Tl, F);
            sb_printf(b, "  %%b3 = f32[%d,%d,%d,%d] transpose(%%b2), dimensions={1,0,2,3}\n", n, El, Tl, F);
            sb_printf(b, "  %%yb = f32[%d,%d,%d] reshape(%%b3)\n", E, Tl, F);
        }
        sb_printf(b, "  ROOT %%o = f32[%d,%d] dot(%%%s, %%yb), lhs_batch_dims={0}, lhs_contracting_dims={1}, "
                  "rhs_batch_dims={1}, rhs_contracting_dims={0}\n}\n", tk, F, combine);
    }
    char v[32];
    snprintf(v, sizeof v, "shard(0,%s)", m->names[ax]);
    const char *iv[3] = {v, v, v};
    rel_write(t, m, iv, 3, v);
}

/* Appends source_target_pairs={...} of a collective-permute along axis ax:
 * every device sends to the one whose coordinate on ax is `shift` higher
 * (modulo the axis size when cyclic; otherwise devices past the end send
 * nothing), the other coordinates alike; `drop` leaves the first pair out. */
static void perm_pairs(strbuf *b, const smesh *m, int ax, int shift, bool cyclic, bool drop) {
    sb_puts(b, "source_target_pairs={");
    bool first = true;
    int stride = ax == m->naxes - 1 ? 1 : m->sizes[1];
    for (int d = 0; d < m->ndev; d++) {
        int c = d / stride % m->sizes[ax], to = c + shift;
        if (cyclic) to = ((to % m->sizes[ax]) + m->sizes[ax]) % m->sizes[ax];
        else if (to < 0 || to >= m->sizes[ax]) continue;
        if (drop) {
            drop = false;
            continue;
        }
        sb_printf(b, "%s{%d,%d}", first ? "" : ",", d, d + (to - c) * stride);
        first = false;
    }
    sb_puts(b, "}");
}

/* collective-permute. x[a,b] sharded on dim sd over ax. On an axis of two
 * devices, GSPMD's slice of a sharded dim resharded over it: the upper (or
 * lower) half of x along sd, each device its half of that half, from local
 * slices, a permute between the two, a concatenate and a dynamic-slice at
 * (1 - coord)·h (RoPE's rotate-half at tp8). On any axis: a cyclic shift of
 * the blocks and its inverse (x again); x replicated permuted along the axis
 * in a full cycle (x again). Bugs: the pairs reversed, the offset coord·h,
 * the inverse shift left out, one pair of the cycle dropped (that device
 * gets zeros). */
static void gen_cpermute(interp_rng *r, const smesh *m, inst *t) {
    int ax = rint_in(r, 0, m->naxes - 1), sd = rint_in(r, 0, 1), n = m->sizes[ax];
    int form = rint_in(r, 0, n == 2 ? 3 : 1);  /* 0 round trip, 1 replicated cycle, 2 upper half, 3 lower half */
    int variant = rint_in(r, 0, 1);              /* 0 ok, 1 bug */
    static const char *sn[] = {"round-trip", "dup-cycle", "upper-half", "lower-half"};
    static const char *bn[] = {"bug-one-way", "bug-dropped-pair", "bug-pairs", "bug-offset"};
    const char *bug = form >= 2 && variant && rint_in(r, 0, 1) ? bn[3] : bn[form];
    set_case(t, variant == 0, "cpermute-%s-%s", sn[form], variant ? bug : "ok");
    int xa[2] = {-1, -1};
    if (form != 1) xa[sd] = ax;
    int g[2], l[2], o[2];
    g[sd] = form >= 2 ? 4 * rint_in(r, 1, 2) : dim_for(r, n);
    g[1 - sd] = rint_in(r, 2, 5);
    local_dims(m, g, xa, 2, l);
    int h = l[sd] / 2;
    for (int side = 0; side < 2; side++) {
        strbuf *b = open_side(t, side, m, g, l, 2, false);
        const int *dims = side ? l : g;
        memcpy(o, dims, sizeof o);
        if (form >= 2) o[sd] = dims[sd] / 2;
        if (!side) {
            sb_puts(b, "  ROOT %o = ");
            shp(b, o, 2);
            if (form < 2) {
                sb_puts(b, " copy(%x)\n}\n");
            } else {
                int lo[2] = {0, 0}, hi[2] = {g[0], g[1]};
                lo[sd] = form == 2 ? g[sd] / 2 : 0;
                hi[sd] = lo[sd] + g[sd] / 2;
                slice_attr(b, lo, hi);
                sb_puts(b, "}\n");
            }
            continue;
        }
        if (form < 2) {
            /* round trip: shift by k then by -k (bug: only the first); dup-cycle: shift by 1 cyclic (bug: a pair dropped). */
            int k = rint_in(r, 1, n - 1);
            sb_puts(b, "  %p1 = ");
            shp(b, l, 2);
            sb_puts(b, " collective-permute(%x), channel_id=1, ");
            perm_pairs(b, m, ax, k, true, form == 1 && variant);
            sb_puts(b, "\n  ROOT %o = ");
            shp(b, l, 2);
            if (form == 1 || variant) {
                sb_puts(b, " copy(%p1)\n}\n");
            } else {
                sb_puts(b, " collective-permute(%p1), channel_id=2, ");
                perm_pairs(b, m, ax, -k, true, false);
                sb_puts(b, "\n}\n");
            }
            continue;
        }
        /* a = upper half of the local block, c = lower; the upper half of x
         * comes from device 1 (its c goes to device 0), the lower from 0. */
        int hs[2] = {l[0], l[1]}, alo[2] = {0, 0}, ahi[2] = {l[0], l[1]}, clo[2] = {0, 0}, chi[2] = {l[0], l[1]};
        hs[sd] = h;
        alo[sd] = h;
        chi[sd] = h;
        sb_puts(b, "  %a = ");
        shp(b, hs, 2);
        sb_printf(b, " slice(%%x), slice={[%d:%d], [%d:%d]}\n  %%c = ", alo[0], ahi[0], alo[1], ahi[1]);
        shp(b, hs, 2);
        sb_printf(b, " slice(%%x), slice={[%d:%d], [%d:%d]}\n  %%pm = ", clo[0], chi[0], clo[1], chi[1]);
        shp(b, hs, 2);
        bool upper = form == 2, bad_pairs = variant && bug == bn[2];
        sb_printf(b, " collective-permute(%%%s), channel_id=1, ", upper ? "c" : "a");
        perm_pairs(b, m, ax, upper != bad_pairs ? -1 : 1, false, false);
        sb_puts(b, "\n  %cat = ");
        shp(b, l, 2);
        sb_printf(b, " concatenate(%s), dimensions={%d}\n", upper ? "%a, %pm" : "%pm, %c", sd);
        axis_coord(b, m, ax);
        bool bad_off = variant && bug == bn[3];
        /* offset (1 - coord)·h; the bug: coord·h */
        sb_printf(b, "  %%hk = s32[] constant(%d)\n  %%one = s32[] constant(1)\n  %%nc = s32[] subtract(%%one, %%coord)\n", h);
        sb_printf(b, "  %%off = s32[] multiply(%s, %%hk)\n  %%z = s32[] constant(0)\n", bad_off ? "%coord" : "%nc");
        sb_puts(b, "  ROOT %o = ");
        shp(b, o, 2);
        sb_printf(b, " dynamic-slice(%%cat, %s, %s), dynamic_slice_sizes={%d,%d}\n}\n", sd ? "%z" : "%off", sd ? "%off" : "%z",
                  o[0], o[1]);
    }
    rel_unary(t, m, xa, 2, xa, 2);
}

/* Pairs to the device whose coordinate on ax is this one's xor k. */
static void xor_pairs(strbuf *b, const smesh *m, int ax, int k, bool drop) {
    sb_puts(b, "source_target_pairs={");
    int stride = ax == m->naxes - 1 ? 1 : m->sizes[1];
    for (int d = 0, first = 1; d < m->ndev; d++) {
        int c = d / stride % m->sizes[ax];
        if (drop && d == 0) continue;
        sb_printf(b, "%s{%d,%d}", first ? "" : ",", d, d + ((c ^ k) - c) * stride);
        first = 0;
    }
    sb_puts(b, "}");
}

/* An all-reduce written by hand over a partial sum d = dot(x, w) with k
 * sharded on ax (n devices): a ring (d moved one step n-1 times, each move
 * added), a butterfly (d plus its move to the partner xor 2^s, stage by
 * stage), or a psum of d moved one step. Bugs: a ring or butterfly one step
 * short, a pair dropped (that device gets zeros), a ring step sent back or a
 * butterfly partner used twice (shares counted twice), a psum of d plus its
 * move (twice the sum). Also the other collectives written so (gen_ring_ag,
 * gen_ring_rs). */
static void gen_ring_ag(interp_rng *r, const smesh *m, inst *t, int ax, int variant);
static void gen_ring_rs(interp_rng *r, const smesh *m, inst *t, int ax, int variant);
static void gen_ring(interp_rng *r, const smesh *m, inst *t) {
    int ax = rint_in(r, 0, m->naxes - 1), n = m->sizes[ax], form = rint_in(r, 0, 4), variant = rint_in(r, 0, 1);
    if (form == 3) return gen_ring_ag(r, m, t, ax, variant);
    if (form == 4) return gen_ring_rs(r, m, t, ax, variant);
    static const char *fn[] = {"ring", "butterfly", "psum-moved"};
    int bug = variant ? rint_in(r, 0, n > 2 ? 2 : 1) : -1; /* 0 short, 1 dropped pair, 2 back / partner twice */
    if (form == 2 && variant) bug = 3;
    static const char *bn[] = {"bug-short", "bug-dropped-pair", "bug-twice", "bug-sum-twice"};
    set_case(t, !variant, "%s-%s", fn[form], variant ? bn[bug] : "ok");
    int M = dim_for(r, 1), K = dim_for(r, n), N = dim_for(r, 1);
    int xg[2] = {M, K}, wg[2] = {K, N}, og[2] = {M, N}, xa[2] = {-1, ax}, wa[2] = {ax, -1};
    int steps = form == 0 ? n - 1 : n == 4 ? 2 : 1;
    if (bug == 0) steps--;
    dot_entry(&t->base, false, m, xg, xa, wg, wa, og, true);
    sb_puts(&t->base, "}\n");
    strbuf *b = &t->dist;
    dot_entry(b, true, m, xg, xa, wg, wa, og, false);
    sb_puts(b, "  %a0 = ");
    shp(b, og, 2);
    sb_puts(b, " copy(%d)\n");
    if (form == 2) {
        sb_puts(b, "  %m = ");
        shp(b, og, 2);
        sb_puts(b, " collective-permute(%d), channel_id=1, ");
        perm_pairs(b, m, ax, 1, true, false);
        sb_puts(b, "\n  %s = ");
        shp(b, og, 2);
        sb_puts(b, variant ? " add(%d, %m)\n" : " copy(%m)\n");
        all_reduce(b, true, "o", "s", og, 2, m, 1u << ax, false, "add", 2);
        sb_puts(b, "}\n");
    } else {
        for (int k = 1; k <= steps; k++) {
            /* ring: the last move moved again; butterfly: the sum so far */
            sb_printf(b, "  %%m%d = ", k);
            shp(b, og, 2);
            if (form == 0) sb_printf(b, " collective-permute(%%%s%d), channel_id=%d, ", k == 1 ? "a" : "m", k - 1, k);
            else sb_printf(b, " collective-permute(%%a%d), channel_id=%d, ", k - 1, k);
            bool drop = bug == 1 && k == 1;
            if (form == 0) perm_pairs(b, m, ax, bug == 2 && k == 2 ? -1 : 1, true, drop);
            else xor_pairs(b, m, ax, bug == 2 ? 1 : 1 << (k - 1), drop);
            sb_printf(b, "\n  %%a%d = ", k);
            shp(b, og, 2);
            sb_printf(b, " add(%%a%d, %%m%d)\n", k - 1, k);
        }
        sb_puts(b, "  ROOT %o = ");
        shp(b, og, 2);
        sb_printf(b, " copy(%%a%d)\n}\n", steps);
    }
    char xv[64], wv[64];
    view_str(xv, sizeof xv, m, xa, 2);
    view_str(wv, sizeof wv, m, wa, 2);
    const char *iv[2] = {xv, wv};
    rel_write(t, m, iv, 2, "dup");
}

/* (coord + n·2 - k) rem n, times len, as %<name>: the block k steps back. */
static void block_back(strbuf *b, const char *name, int n, int k, int len) {
    sb_printf(b, "  %%%s.k = s32[] constant(%d)\n  %%%s.n = s32[] constant(%d)\n  %%%s.l = s32[] constant(%d)\n", name,
              2 * n - k, name, n, name, len);
    sb_printf(b, "  %%%s.a = s32[] add(%%coord, %%%s.k)\n  %%%s.r = s32[] remainder(%%%s.a, %%%s.n)\n", name, name, name,
              name, name);
    sb_printf(b, "  %%%s = s32[] multiply(%%%s.r, %%%s.l)\n", name, name, name);
}

/* A ring all-gather: x sharded on dim 0 over ax, each device's block put
 * into zeros at its place, then moved one step n-1 times, each arrival
 * written at the place of the block it is (k steps back). Bugs: one step
 * short, a pair dropped, arrivals written k steps ahead (n > 2). */
static void gen_ring_ag(interp_rng *r, const smesh *m, inst *t, int ax, int variant) {
    int n = m->sizes[ax], bug = variant ? rint_in(r, 0, n > 2 ? 2 : 1) : -1;
    static const char *bn[] = {"bug-short", "bug-dropped-pair", "bug-ahead"};
    set_case(t, !variant, "ring-all-gather-%s", variant ? bn[bug] : "ok");
    int g[2] = {dim_for(r, n), rint_in(r, 2, 5)}, xa[2] = {ax, -1}, l[2];
    local_dims(m, g, xa, 2, l);
    header(&t->base, "base", 1);
    param(&t->base, "x", 0, g, 2);
    sb_puts(&t->base, "  ROOT %o = ");
    shp(&t->base, g, 2);
    sb_puts(&t->base, " copy(%x)\n}\n");
    strbuf *b = &t->dist;
    header(b, "dist", m->ndev);
    param(b, "x", 0, l, 2);
    axis_coord(b, m, ax);
    sb_puts(b, "  %zero = f32[] constant(0)\n  %zeros = ");
    shp(b, g, 2);
    sb_puts(b, " broadcast(%zero), dimensions={}\n  %z = s32[] constant(0)\n");
    block_back(b, "off0", n, 0, l[0]);
    sb_puts(b, "  %acc0 = ");
    shp(b, g, 2);
    sb_puts(b, " dynamic-update-slice(%zeros, %x, %off0, %z)\n  %cur0 = ");
    shp(b, l, 2);
    sb_puts(b, " copy(%x)\n");
    int steps = bug == 0 ? n - 2 : n - 1;
    for (int k = 1; k <= steps; k++) {
        sb_printf(b, "  %%cur%d = ", k);
        shp(b, l, 2);
        sb_printf(b, " collective-permute(%%cur%d), channel_id=%d, ", k - 1, k);
        perm_pairs(b, m, ax, 1, true, bug == 1 && k == 1);
        sb_puts(b, "\n");
        char nm[16];
        snprintf(nm, sizeof nm, "off%d", k);
        block_back(b, nm, n, bug == 2 && k == 1 ? -k : k, l[0]);
        sb_printf(b, "  %%acc%d = ", k);
        shp(b, g, 2);
        sb_printf(b, " dynamic-update-slice(%%acc%d, %%cur%d, %%off%d, %%z)\n", k - 1, k, k);
    }
    sb_puts(b, "  ROOT %o = ");
    shp(b, g, 2);
    sb_printf(b, " copy(%%acc%d)\n}\n", steps);
    rel_unary(t, m, xa, 2, (const int[2]){-1, -1}, 2);
}

/* A ring reduce-scatter of the partial sum d = dot(x, w) (k sharded on ax)
 * in n chunks of its columns: each device's chunk one step back taken, then
 * n-1 times moved one step and the next chunk back added, so that device c
 * ends with chunk c whole (d sharded on dim 1 over ax). Bugs: one step
 * short (another chunk, one share missing), a step adding the chunk of the
 * step before. */
static void gen_ring_rs(interp_rng *r, const smesh *m, inst *t, int ax, int variant) {
    int n = m->sizes[ax], bug = variant ? rint_in(r, 0, 1) : -1;
    static const char *bn[] = {"bug-short", "bug-chunk"};
    set_case(t, !variant, "ring-reduce-scatter-%s", variant ? bn[bug] : "ok");
    int L = rint_in(r, 1, 3), M = dim_for(r, 1), K = dim_for(r, n), N = n * L;
    int xg[2] = {M, K}, wg[2] = {K, N}, og[2] = {M, N}, xa[2] = {-1, ax}, wa[2] = {ax, -1}, cl[2] = {M, L};
    dot_entry(&t->base, false, m, xg, xa, wg, wa, og, true);
    sb_puts(&t->base, "}\n");
    strbuf *b = &t->dist;
    dot_entry(b, true, m, xg, xa, wg, wa, og, false);
    axis_coord(b, m, ax);
    sb_puts(b, "  %z = s32[] constant(0)\n");
    block_back(b, "o0", n, 1, L);
    sb_puts(b, "  %a0 = ");
    shp(b, cl, 2);
    sb_printf(b, " dynamic-slice(%%d, %%z, %%o0), dynamic_slice_sizes={%d,%d}\n", M, L);
    int steps = bug == 0 ? n - 2 : n - 1;
    for (int i = 1; i <= steps; i++) {
        sb_printf(b, "  %%m%d = ", i);
        shp(b, cl, 2);
        sb_printf(b, " collective-permute(%%a%d), channel_id=%d, ", i - 1, i);
        perm_pairs(b, m, ax, 1, true, false);
        sb_puts(b, "\n");
        char nm[16];
        snprintf(nm, sizeof nm, "o%d", i);
        block_back(b, nm, n, bug == 1 && i == 1 ? 1 : 1 + i, L);
        sb_printf(b, "  %%c%d = ", i);
        shp(b, cl, 2);
        sb_printf(b, " dynamic-slice(%%d, %%z, %%o%d), dynamic_slice_sizes={%d,%d}\n  %%a%d = ", i, M, L, i);
        shp(b, cl, 2);
        sb_printf(b, " add(%%m%d, %%c%d)\n", i, i);
    }
    sb_puts(b, "  ROOT %o = ");
    shp(b, cl, 2);
    sb_printf(b, " copy(%%a%d)\n}\n", steps);
    char xv[64], wv[64], ov[64];
    int oa[2] = {-1, ax};
    view_str(xv, sizeof xv, m, xa, 2);
    view_str(wv, sizeof wv, m, wa, 2);
    view_str(ov, sizeof ov, m, oa, 2);
    const char *iv[2] = {xv, wv};
    rel_write(t, m, iv, 2, ov);
}

/* A mean over a sharded contraction (a data-parallel gradient): the
 * baseline scales dot(x, w) by 1/K, K the contracted length; the distributed
 * program contracts its K/n rows (a partial sum), scales and all-reduces:
 * by n/K then 1/n (local mean, then pmean), by n/K on x before the dot, or by
 * 1/K before the sum (global normalisation) are correct; n/K without the
 * 1/n (psum for pmean) or 1/K then 1/n again are bugs. Half the instances end
 * in tanh, so the factor must be put back into the term before it. K and n
 * are powers of two (the factors are exact). */
static void gen_scaled(interp_rng *r, const smesh *m, inst *t) {
    static const struct { const char *name; bool ok; } v[] = {
        {"local-mean-pmean", true}, {"prescaled-pmean", true}, {"global-psum", true},
        {"bug-psum", false}, {"bug-double-mean", false},
    };
    int k = rint_in(r, 0, (int)ARRAY_LEN(v) - 1);
    int ax = rint_in(r, 0, m->naxes - 1), n = m->sizes[ax];
    int M = dim_for(r, 1), N = dim_for(r, 1), K = n << rint_in(r, 0, 2);
    bool nonlin = rint_in(r, 0, 1);
    set_case(t, v[k].ok, "scaled-%s%s", v[k].name, nonlin ? "-tanh" : "");
    int xg[2] = {M, K}, wg[2] = {K, N}, og[2] = {M, N};
    int xa[2] = {-1, ax}, wa[2] = {ax, -1};
    double local = (double)n / K, global = 1.0 / K, mean = 1.0 / n;
    for (int side = 0; side < 2; side++) {
        strbuf *b = side ? &t->dist : &t->base;
        bool pre = side && k == 1;
        if (pre) {
            /* x scaled before the dot */
            int xl[2], wl[2];
            local_dims(m, xg, xa, 2, xl);
            local_dims(m, wg, wa, 2, wl);
            header(b, "dist", m->ndev);
            param(b, "x", 0, xl, 2);
            param(b, "w", 1, wl, 2);
            sb_printf(b, "  %%c = f32[] constant(%.9g)\n  %%cb = ", local);
            shp(b, xl, 2);
            sb_puts(b, " broadcast(%c), dimensions={}\n  %xs = ");
            shp(b, xl, 2);
            sb_puts(b, " multiply(%x, %cb)\n  %d = ");
            shp(b, og, 2);
            sb_puts(b, " dot(%xs, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n");
        } else {
            dot_entry(b, side, m, xg, xa, wg, wa, og, false);
        }
        double f = !side || k == 2 || k == 4 ? global : pre ? 1 : local;
        sb_printf(b, "  %%f = f32[] constant(%.9g)\n  %%fb = ", f);
        shp(b, og, 2);
        sb_puts(b, " broadcast(%f), dimensions={}\n  %s = ");
        shp(b, og, 2);
        sb_puts(b, " multiply(%d, %fb)\n");
        const char *last = "s";
        if (side) {
            all_reduce(b, false, "ar", "s", og, 2, m, 1u << ax, false, "add", 1);
            last = "ar";
            if (k == 0 || k == 1 || k == 4) {
                sb_printf(b, "  %%g = f32[] constant(%.9g)\n  %%gb = ", mean);
                shp(b, og, 2);
                sb_puts(b, " broadcast(%g), dimensions={}\n  %p = ");
                shp(b, og, 2);
                sb_puts(b, " multiply(%ar, %gb)\n");
                last = "p";
            }
        }
        sb_puts(b, "  ROOT %out = ");
        shp(b, og, 2);
        sb_printf(b, " %s(%%%s)\n}\n", nonlin ? "tanh" : "copy", last);
    }
    char xv[64], wv[64];
    view_str(xv, sizeof xv, m, xa, 2);
    view_str(wv, sizeof wv, m, wa, 2);
    const char *iv[2] = {xv, wv};
    rel_write(t, m, iv, 2, "dup");
}

/* A scatter-add of rows into a table of V = 16 rows (every generated index
 * is a row) split over axis av by rows, k per device, the vocab-parallel way:
 * the indices offset by coord(av)·k, rows outside the device's block
 * dropped; on the 2-D mesh the tokens split over the other axis and the
 * blocks all-reduced over it. Or split by columns: the updates split alike.
 * Bugs: the offset shifted by one, a max combiner, no all-reduce or one over
 * the table's axis (2-D mesh), the columns summed over their axis. */
static void gen_scatter(interp_rng *r, const smesh *m, inst *t) {
    int av = rint_in(r, 0, m->naxes - 1), n = m->sizes[av], k = 16 / n, V = 16;
    int ab = m->naxes == 2 ? 1 - av : -1, nb = ab >= 0 ? m->sizes[ab] : 1;
    int T = nb * rint_in(r, 2, 4), E = n * rint_in(r, 1, 2);
    /* 0 ok, 1 offset + 1, 2 max, 3 no all-reduce, 4 all-reduce over av, 5 columns ok, 6 columns summed */
    static const int one_d[] = {0, 1, 2, 5, 6};
    int variant = ab >= 0 ? rint_in(r, 0, 6) : one_d[rint_in(r, 0, 4)];
    static const char *vn[] = {"ok", "bug-offset", "bug-max", "bug-no-allreduce", "bug-axis", "cols-ok", "cols-bug-summed"};
    bool cols = variant >= 5;
    set_case(t, variant == 0 || variant == 5, "scatter-%s", vn[variant]);
    int Tl = cols ? T : T / nb, rows = cols ? V : k, El = cols ? E / n : E;
    for (int side = 0; side < 2; side++) {
        strbuf *b = side ? &t->dist : &t->base;
        header(b, side ? "dist" : "base", side ? m->ndev : 1);
        int tl = side ? Tl : T, rl = side ? rows : V, el = side ? El : E;
        sb_printf(b, "  %%ids = s32[%d] parameter(0)\n  %%upd = f32[%d,%d] parameter(1)\n", tl, tl, el);
        sb_printf(b, "  %%z = f32[] constant(0)\n  %%zeros = f32[%d,%d] broadcast(%%z), dimensions={}\n", rl, el);
        const char *ix = "ids";
        if (side && !cols) {
            axis_coord(b, m, av);
            sb_printf(b, "  %%k = s32[] constant(%d)\n  %%off0 = s32[] multiply(%%coord, %%k)\n", k);
            sb_printf(b, "  %%sh = s32[] constant(%d)\n  %%off = s32[] add(%%off0, %%sh)\n", variant == 1 ? 1 : 0);
            sb_printf(b, "  %%offb = s32[%d] broadcast(%%off), dimensions={}\n  %%li = s32[%d] subtract(%%ids, %%offb)\n", tl, tl);
            ix = "li";
        }
        sb_printf(b, "  %%i2 = s32[%d,1] reshape(%%%s)\n", tl, ix);
        bool last = !side || (cols ? variant == 5 : ab < 0);
        sb_printf(b, "  %s%%g = f32[%d,%d] scatter(%%zeros, %%i2, %%upd), update_window_dims={1}, inserted_window_dims={0}, "
                     "scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%%%s\n",
                  last ? "ROOT " : "", rl, el, side && variant == 2 ? "max" : "add");
        if (!last) {
            int od[2] = {rl, el};
            if (variant == 3) {
                sb_printf(b, "  ROOT %%o = f32[%d,%d] copy(%%g)\n", rl, el);
            } else {
                all_reduce(b, true, "o", "g", od, 2, m, 1u << (variant == 4 || variant == 6 ? av : ab), false, "add", 1);
            }
        }
        sb_puts(b, "}\n");
    }
    int ia[1] = {cols ? -1 : ab}, ua[2] = {cols ? -1 : ab, cols ? av : -1}, oa[2] = {cols ? -1 : av, cols ? av : -1};
    rel_binary(t, m, ia, 1, ua, 2, oa, 2);
}

/* argmax(x) along dim rd (a variadic reduce of values and positions with
 * JAX's selecting reducer), x sharded along sd. Rows (sd != rd): each device
 * selects in its own rows. Along the sharded dim: GSPMD's form (positions
 * the global iota, by the block's offset, before the local reduce) or
 * shard_map's (a local argmax, the offset added after), then both elements
 * gathered and the stack selected among again. Bugs: argmin's order in the
 * rows; the offset left out; the stack selected by argmin's order. */
static void pick_comp(strbuf *b, const char *name, const char *dir) {
    sb_printf(b, "%%%s {\n  %%a = f32[] parameter(0)\n  %%b = f32[] parameter(2)\n", name);
    sb_printf(b, "  %%gt = pred[] compare(%%a, %%b), direction=%s\n  %%nan = pred[] compare(%%a, %%a), direction=NE\n", dir);
    sb_puts(b, "  %tv = pred[] or(%gt, %nan)\n  %v = f32[] select(%tv, %a, %b)\n  %eq = pred[] compare(%a, %b), direction=EQ\n");
    sb_puts(b, "  %ai = s32[] parameter(1)\n  %bi = s32[] parameter(3)\n  %lt = pred[] compare(%ai, %bi), direction=LT\n");
    sb_puts(b, "  %tie = pred[] and(%eq, %lt)\n  %ti = pred[] or(%tv, %tie)\n  %i = s32[] select(%ti, %ai, %bi)\n");
    sb_puts(b, "  ROOT %r = (f32[], s32[]) tuple(%v, %i)\n}\n\n");
}

static void ishp(strbuf *b, const char *dt, const int *dims, int rank) {
    sb_printf(b, "%s[", dt);
    for (int k = 0; k < rank; k++) sb_printf(b, "%s%d", k ? "," : "", dims[k]);
    sb_puts(b, "]");
}

/* %dst: the stack over axis ax of %src (rows values of type dt), gathered
 * along a unit dim added after them. */
static void stack_of(strbuf *b, const smesh *m, int ax, const char *dt, int rows, const char *src, const char *dst, int channel) {
    int one[2] = {rows, 1}, st[2] = {rows, m->sizes[ax]};
    sb_printf(b, "  %%%s1 = ", src);
    ishp(b, dt, one, 2);
    sb_printf(b, " reshape(%%%s)\n  %%%s = ", src, dst);
    ishp(b, dt, st, 2);
    sb_printf(b, " all-gather(%%%s1), channel_id=%d, replica_groups=", src, channel);
    groups(b, m, 1u << ax, false);
    sb_puts(b, ", dimensions={1}, use_global_device_ids=true\n");
}

static void gen_argmax(interp_rng *r, const smesh *m, inst *t) {
    int ax = rint_in(r, 0, m->naxes - 1), sd = rint_in(r, 0, 1), rd = rint_in(r, 0, 1);
    int xa[2] = {-1, -1};
    xa[sd] = ax;
    int g[2], l[2];
    for (int d = 0; d < 2; d++) g[d] = dim_for(r, xa[d] >= 0 ? m->sizes[ax] : 1);
    local_dims(m, g, xa, 2, l);
    bool along = sd == rd;
    /* along: 0 GSPMD, 1 shard_map, 2 no offset, 3 argmin stack; rows: 0 ok, 1 argmin */
    int variant = rint_in(r, 0, along ? 3 : 1);
    static const char *const names[2][4] = {{"rows-ok", "rows-bug-argmin"},
                                            {"gspmd-ok", "smap-ok", "bug-no-offset", "bug-argmin-stack"}};
    set_case(t, along ? variant < 2 : variant == 0, "argmax-%s", names[along][variant]);
    /* a bug that may agree on some inputs (every row's winner in block 0) */
    if (along && variant == 2) t->value_bug = false;
    int og[1] = {g[1 - rd]}, ol[1] = {l[1 - rd]}, oa[1] = {along ? -1 : ax};
    /* the block start of every device along axis ax */
    int stride = 1;
    for (int a = ax + 1; a < m->naxes; a++) stride *= m->sizes[a];
    for (int side = 0; side < 2; side++) {
        strbuf *b = side ? &t->dist : &t->base;
        const int *xd = side ? l : g, *od = side ? ol : og;
        if (side && m->ndev > 1) sb_printf(b, "HloModule dist, num_partitions=%d\n\n", m->ndev);
        else sb_printf(b, "HloModule %s\n\n", side ? "dist" : "base");
        pick_comp(b, "pick", "GT");
        pick_comp(b, "pickmin", "LT");
        sb_puts(b, "ENTRY %main {\n");
        param(b, "x", 0, xd, 2);
        sb_printf(b, "  %%io = s32[%d] iota(), iota_dimension=0\n", xd[rd]);
        sb_puts(b, "  %ninf = f32[] constant(-inf)\n  %zero = s32[] constant(0)\n");
        const char *pos = "io";
        if (side && along) {
            sb_puts(b, "  %starts = s32[");
            sb_printf(b, "%d] constant({", m->ndev);
            for (int d = 0; d < m->ndev; d++) sb_printf(b, "%s%d", d ? ", " : "", (d / stride) % m->sizes[ax] * l[rd]);
            sb_puts(b, "})\n  %pid = u32[] partition-id()\n");
            sb_puts(b, "  %mine = s32[1] dynamic-slice(%starts, %pid), dynamic_slice_sizes={1}\n  %off = s32[] reshape(%mine)\n");
            sb_printf(b, "  %%offb = s32[%d] broadcast(%%off), dimensions={}\n", l[rd]);
            sb_printf(b, "  %%offo = s32[%d] broadcast(%%off), dimensions={}\n", ol[0]);
            if (variant == 0) {
                sb_printf(b, "  %%gio = s32[%d] add(%%io, %%offb)\n", l[rd]);
                pos = "gio";
            }
        }
        sb_puts(b, "  %pos = ");
        ishp(b, "s32", xd, 2);
        sb_printf(b, " broadcast(%%%s), dimensions={%d}\n", pos, rd);
        bool local_only = !side || !along;
        const char *pick1 = side && !along && variant == 1 ? "pickmin" : "pick";
        sb_puts(b, "  %am = (");
        ishp(b, "f32", od, 1);
        sb_puts(b, ", ");
        ishp(b, "s32", od, 1);
        sb_printf(b, ") reduce(%%x, %%pos, %%ninf, %%zero), dimensions={%d}, to_apply=%%%s\n", rd, pick1);
        if (local_only) {
            sb_puts(b, "  ROOT %k = ");
            ishp(b, "s32", od, 1);
            sb_puts(b, " get-tuple-element(%am), index=1\n}\n");
            continue;
        }
        sb_puts(b, "  %lv = ");
        ishp(b, "f32", od, 1);
        sb_puts(b, " get-tuple-element(%am), index=0\n");
        sb_puts(b, "  %lil = ");
        ishp(b, "s32", od, 1);
        sb_puts(b, " get-tuple-element(%am), index=1\n  %li = ");
        ishp(b, "s32", od, 1);
        sb_puts(b, variant == 1 ? " add(%lil, %offo)\n" : " copy(%lil)\n");
        stack_of(b, m, ax, "f32", od[0], "lv", "gv", 1);
        stack_of(b, m, ax, "s32", od[0], "li", "gi", 2);
        sb_puts(b, "  %all = (");
        ishp(b, "f32", od, 1);
        sb_puts(b, ", ");
        ishp(b, "s32", od, 1);
        sb_printf(b, ") reduce(%%gv, %%gi, %%ninf, %%zero), dimensions={1}, to_apply=%%%s\n", variant == 3 ? "pickmin" : "pick");
        sb_puts(b, "  ROOT %k = ");
        ishp(b, "s32", od, 1);
        sb_puts(b, " get-tuple-element(%all), index=1\n}\n");
    }
    rel_unary(t, m, xa, 2, oa, 1);
}

static void (*const gens[TF_FAMILIES])(interp_rng *, const smesh *, inst *) = {
    gen_eltwise, gen_dot_k,   gen_dot_n,    gen_reduce,  gen_gather,  gen_transpose,
    gen_partial, gen_partial2, gen_dslice, gen_rscatter, gen_a2a, gen_slice_concat,
    gen_fold,    gen_unit_reshape, gen_posemb, gen_zmask, gen_cpermute, gen_scaled, gen_scatter, gen_argmax,
    gen_ring};

/* In step with gens. */
static const char *const family_names[TF_FAMILIES] = {
    "eltwise", "dot-k", "dot-n", "reduce", "all-gather", "transpose",
    "partial-op", "partial-sum2", "dynamic-slice", "reduce-scatter", "all-to-all", "slice-concat",
    "constant-fold", "unit-reshape", "row-table", "zero-mask", "collective-permute", "scaled-mean", "scatter-add",
    "argmax", "partial-ring"};

const char *tf_family_name(uint32_t f) { return f < TF_FAMILIES ? family_names[f] : "?"; }

/* Checks and executes instance i; records it in its family. */
static void run_instance(uint32_t i, const char *dir, const char *rules_dir, bool keep, tf_report *out) {
    interp_rng r;
    interp_rng_seed(&r, 0x50a7d5eedull * (uint64_t)(i + 1));
    smesh m;
    pick_mesh(&r, &m);
    inst t;
    memset(&t, 0, sizeof t);
    sb_init(&t.base);
    sb_init(&t.dist);
    sb_init(&t.rel);
    tf_family *fam = &out->fam[i % TF_FAMILIES];
    gens[i % TF_FAMILIES](&r, &m, &t);
    char id[160], bp[4200], dp[4200], rp[4200];
    snprintf(id, sizeof id, "soundness-%03u %s mesh%s%d", i, t.name, m.naxes == 2 ? "2x" : "", m.naxes == 2 ? 2 : m.ndev);
    snprintf(bp, sizeof bp, "%s/%03u.base.hlo", dir, i);
    snprintf(dp, sizeof dp, "%s/%03u.dist.hlo", dir, i);
    snprintf(rp, sizeof rp, "%s/%03u.relations.json", dir, i);
    size_t size = t.dist.len;
    diag dg;
    diag_init(&dg, id);
    bool written = io_write_atomic(bp, t.base.s, t.base.len, &dg) && io_write_atomic(dp, t.dist.s, t.dist.len, &dg) &&
                   io_write_atomic(rp, t.rel.s, t.rel.len, &dg);
    sb_free(&t.base);
    sb_free(&t.dist);
    sb_free(&t.rel);

    /* Execution, independent of the verdict. */
    witness w;
    memset(&w, 0, sizeof w);
    hlo_module *bm = written ? hlo_read_file(bp, &dg) : NULL, *dm = written ? hlo_read_file(dp, &dg) : NULL;
    relations rel;
    memset(&rel, 0, sizeof rel);
    bool rel_ok = bm && dm && relations_read(rp, bm, &rel, &dg);
    if (rel_ok) {
        witness_run(bm, dm, &rel, 1, 0, false, &w);
        relations_free(&rel);
    } else {
        snprintf(w.why, sizeof w.why, "the pair does not read: %s", dg.out.s ? dg.out.s : "");
    }
    graph_free(bm);
    graph_free(dm);
    diag_free(&dg);

    int v = VERDICT_ERROR;
    strbuf err;
    sb_init(&err);
    if (written) {
        check_opts o = {.name = id, .baseline = bp, .distributed = dp, .relations = rp, .witness = true,
                        .rules_dir = rules_dir};
        json_t *trace = NULL;
        diag_init(&dg, id);
        v = check_pair(&o, &trace, &dg);
        if (v == VERDICT_ERROR && dg.out.s) sb_puts(&err, dg.out.s);
        diag_free(&dg);
        if (v == VERDICT_MISMATCH) {
            json_t *f0 = json_array_get(json_object_get(trace, "findings"), 0);
            const char *msg = json_string_value(json_object_get(f0, "message"));
            fam->by_execution += msg && strstr(msg, "confirmed by execution") != NULL;
        }
        json_decref(trace);
    }
    fam->instances++;
    fam->correct += t.correct;
    fam->verified += v == VERDICT_VERIFIED;
    fam->correct_verified += t.correct && v == VERDICT_VERIFIED;
    fam->mismatch += v == VERDICT_MISMATCH;
    fam->unverified += v == VERDICT_UNVERIFIED;
    fam->errors += v == VERDICT_ERROR;

    /* The properties of tfcheck.h, the first broken one named. */
    strbuf why;
    sb_init(&why);
    bool unsound = v == VERDICT_VERIFIED && (!w.ran || w.differs);
    if (unsound) sb_printf(&why, "UNSOUND: verified, but execution %s (max abs %g)", w.ran ? "differs" : "did not run", w.max_abs);
    else if (v == VERDICT_ERROR) sb_printf(&why, "verdict error: %s", err.s ? err.s : "");
    else if (!w.ran) sb_printf(&why, "the witness did not run: %s", w.why);
    else if (t.correct && w.differs) sb_printf(&why, "built correct, but execution differs (max abs %g)", w.max_abs);
    else if (t.correct && v == VERDICT_MISMATCH) sb_puts(&why, "FALSE ALARM: built correct, reported a mismatch");
    else if (t.value_bug && !w.differs) sb_puts(&why, "built buggy, but execution agrees");
    sb_free(&err);
    if (why.len) {
        fam->failures++;
        fam->unsound += unsound;
        if (!fam->counterexample || size < fam->cex_size) {
            free(fam->counterexample);
            strbuf c;
            sb_init(&c);
            sb_printf(&c, "%s (verdict %s): %s; files %s/%03u.*", id, verdict_name(v), why.s, dir, i);
            fam->counterexample = sb_take(&c);
            fam->cex_size = size;
        }
    } else if (!keep) {
        unlink(bp);
        unlink(dp);
        unlink(rp);
    }
    sb_free(&why);
}

int tf_run(uint32_t n, const char *rules_dir, bool keep, tf_report *out, diag *d) {
    memset(out, 0, sizeof *out);
    const char *tmp = getenv("TMPDIR");
    strbuf dir;
    sb_init(&dir);
    sb_printf(&dir, "%s/scalify-tfcheck-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir.s)) {
        diag_plain(d, "cannot make a temporary directory %s", dir.s);
        sb_free(&dir);
        return 2;
    }
    for (uint32_t i = 0; i < n; i++) run_instance(i, dir.s, rules_dir, keep, out);
    for (uint32_t f = 0; f < TF_FAMILIES; f++) {
        out->instances += out->fam[f].instances;
        out->failures += out->fam[f].failures;
        out->unsound += out->fam[f].unsound;
    }
    if (out->failures || keep) out->dir = sb_take(&dir);
    else rmdir(dir.s);
    sb_free(&dir);
    return 0;
}

int tf_print(FILE *f, const tf_report *r) {
    fprintf(f, "%-32s %9s %8s  %s\n", "transfer-function family", "instances", "failures", "result");
    for (uint32_t k = 0; k < TF_FAMILIES; k++) {
        const tf_family *x = &r->fam[k];
        if (!x->instances) continue;
        fprintf(f, "%-32s %9u %8u  ", tf_family_name(k), x->instances, x->failures);
        if (!x->failures)
            fprintf(f, "ok: %u verified (of %u built correct), %u mismatch, %u unverified\n", x->verified, x->correct,
                    x->mismatch, x->unverified);
        else fprintf(f, "FAIL%s\n    counterexample: %s\n", x->unsound ? " (unsound)" : "", x->counterexample);
    }
    fprintf(f, "%u transfer-function instances in %d families: %u failed, %u unsound\n", r->instances, TF_FAMILIES,
            r->failures, r->unsound);
    return r->failures ? 1 : 0;
}

void tf_report_free(tf_report *r) {
    for (uint32_t f = 0; f < TF_FAMILIES; f++) free(r->fam[f].counterexample);
    free(r->dir);
    memset(r, 0, sizeof *r);
}
