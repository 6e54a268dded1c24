/* provenance — views in words and finding paths (see provenance.h). */
#include "provenance.h"

#include <stdlib.h>
#include <string.h>

struct pv_views {
    uint16_t **ids;     /* per distributed computation: word id per instruction (0: none), or NULL */
    uint32_t ncomps;
    char **words;       /* words[id - 1] */
    size_t nwords, capwords;
    strmap pool;        /* words -> id */
};

pv_views *pv_collect(const lift_ctx *c, const mesh *m) {
    pv_views *v = xcalloc(1, sizeof *v);
    v->ncomps = c->dist->ncomps;
    v->ids = xcalloc(v->ncomps ? v->ncomps : 1, sizeof *v->ids);
    strmap_init(&v->pool);
    strbuf b;
    sb_init(&b);
    for (uint32_t k = 0; k < v->ncomps; k++) {
        const hlo_comp *comp = &c->dist->comps[k];
        if (!lift_value_at(c, comp, 0)) continue;
        v->ids[k] = xcalloc(comp->ninstrs ? comp->ninstrs : 1, sizeof **v->ids);
        for (uint32_t i = 0; i < comp->ninstrs; i++) {
            const lval *x = lift_value_at(c, comp, i);
            if (!x || x->kind == LV_UNKNOWN) continue;  /* not reached, or nothing said */
            sb_reset(&b);
            lift_value_words(&b, x, m);
            uint32_t id;
            if (!strmap_get(&v->pool, b.s, b.len, &id)) {
                if (v->nwords == UINT16_MAX) continue;
                XGROW(v->words, v->capwords, v->nwords + 1);
                v->words[v->nwords++] = xstrdup(b.s);
                id = (uint32_t)v->nwords;
                strmap_put(&v->pool, v->words[id - 1], b.len, id);  /* keys are kept, not copied */
            }
            v->ids[k][i] = (uint16_t)id;
        }
    }
    sb_free(&b);
    return v;
}

const char *pv_view(const pv_views *v, const hlo_module *dist, const hlo_comp *comp, const hlo_instr *in) {
    if (!v || comp < dist->comps || comp >= dist->comps + v->ncomps) return NULL;
    const uint16_t *ids = v->ids[comp - dist->comps];
    if (!ids || in < comp->instrs || in >= comp->instrs + comp->ninstrs) return NULL;
    uint16_t id = ids[in - comp->instrs];
    return id ? v->words[id - 1] : NULL;
}

void pv_forget(pv_views *v, const hlo_module *dist, const hlo_comp *comp, const hlo_instr *in) {
    if (!pv_view(v, dist, comp, in)) return;
    v->ids[comp - dist->comps][in - comp->instrs] = 0;
}

void pv_free(pv_views *v) {
    if (!v) return;
    for (uint32_t k = 0; k < v->ncomps; k++) free(v->ids[k]);
    free(v->ids);
    for (size_t i = 0; i < v->nwords; i++) free(v->words[i]);
    free(v->words);
    strmap_free(&v->pool);
    free(v);
}

/* The first operand of instruction i partial over (at least one of) axes,
 * or -1. */
static long partial_operand(const lift_ctx *c, const hlo_comp *comp, uint32_t i, uint32_t axes) {
    const hlo_instr *in = &comp->instrs[i];
    for (uint32_t o = 0; o < in->noperands; o++) {
        const lval *x = lift_value_at(c, comp, in->operands[o]);
        if (x && x->kind == LV_TERM && (x->v.partial & axes)) return (long)in->operands[o];
    }
    return -1;
}

size_t pv_path(const lift_ctx *c, const hlo_comp *comp, uint32_t i, uint32_t path[PV_PATH_MAX], size_t *len) {
    long x = partial_operand(c, comp, i, UINT32_MAX);
    *len = 0;
    if (x < 0) return 0;
    uint32_t axes = lift_value_at(c, comp, (uint32_t)x)->v.partial;
    /* chain[0] is i, each next one an operand of the one before (operands
     * precede their users, so it ends). */
    uint32_t *chain = NULL;
    size_t n = 0, cap = 0;
    XGROW(chain, cap, 1);
    chain[n++] = i;
    for (; x >= 0; x = partial_operand(c, comp, (uint32_t)x, axes)) {
        XGROW(chain, cap, n + 1);
        chain[n++] = (uint32_t)x;
    }
    /* Origin first; a longer chain keeps the origin and the steps nearest
     * the finding. */
    size_t k = n < PV_PATH_MAX ? n : PV_PATH_MAX;
    path[0] = chain[n - 1];
    for (size_t s = 1; s < k; s++) path[s] = chain[k - 1 - s];
    *len = n;
    free(chain);
    return k;
}
