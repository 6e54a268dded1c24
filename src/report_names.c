/* report_names — stable page names and finding keys (see report_names.h). */
#include "report_names.h"

#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "sha256.h"

#define PAIR_SLUG_MAX 60

static void field(strbuf *b, const char *s) {
    sb_puts(b, s ? s : "");
    sb_putc(b, '\x1f');
}

void rn_identity(strbuf *b, const trace *t, const trace_finding *f) {
    field(b, "scalify-finding/1");
    field(b, t->name);
    field(b, trace_kind_name(f->kind));
    field(b, f->segment);
    field(b, f->dist.opcode);
    field(b, f->dist.op_name);
    field(b, f->dist.file);
    sb_printf(b, "%lld:%lld\x1f", (long long)f->dist.line, (long long)f->dist.column);
    for (size_t i = 0; i < t->n_mesh; i++) field(b, t->mesh[i].axis);
}

static void hex(strbuf *b, const uint8_t *h, size_t n) {
    for (size_t i = 0; i < n; i++) sb_printf(b, "%02x", h[i]);
}

static char *pair_slug(const char *name) {
    strbuf s;
    sb_init(&s);
    esc_slug(&s, name, PAIR_SLUG_MAX);
    if (strcmp(s.s, name) != 0) {
        uint8_t h[32];
        sha256(name, strlen(name), h);
        sb_putc(&s, '-');
        hex(&s, h, 4);
    }
    return sb_take(&s);
}

struct ident {
    char *s;
    size_t i, k;  /* position in the trace; 1 + equal identities before it */
};

static int ident_cmp(const void *a, const void *b) {
    const struct ident *x = a, *y = b;
    int c = strcmp(x->s, y->s);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

void rn_build(rnames *r, trace *const *t, size_t n) {
    memset(r, 0, sizeof *r);
    r->n = n;
    r->pair = xcalloc(n + 1, sizeof *r->pair);
    r->n_findings = xcalloc(n + 1, sizeof *r->n_findings);
    r->finding = xcalloc(n + 1, sizeof *r->finding);
    r->key = xcalloc(n + 1, sizeof *r->key);
    strbuf id;
    sb_init(&id);
    for (size_t p = 0; p < n; p++) {
        size_t dup = 1;  /* this pair's name, how many times so far */
        for (size_t q = 0; q < p; q++) dup += strcmp(t[q]->name, t[p]->name) == 0;
        char *slug = pair_slug(t[p]->name);
        if (dup > 1) {
            strbuf s;
            sb_init(&s);
            sb_printf(&s, "%s-%zu", slug, dup);
            free(slug);
            slug = sb_take(&s);
        }
        r->pair[p] = slug;
        size_t nf = t[p]->n_findings;
        r->n_findings[p] = nf;
        r->finding[p] = xcalloc(nf + 1, sizeof **r->finding);
        r->key[p] = xcalloc(nf + 1, sizeof **r->key);
        /* identities sorted (ties by position) number equal ones in trace order */
        struct ident *ids = xcalloc(nf + 1, sizeof *ids);
        for (size_t i = 0; i < nf; i++) {
            sb_reset(&id);
            rn_identity(&id, t[p], &t[p]->findings[i]);
            ids[i] = (struct ident){xstrdup(id.s), i, 1};
        }
        if (nf) qsort(ids, nf, sizeof *ids, ident_cmp);
        for (size_t i = 1; i < nf; i++)
            if (strcmp(ids[i].s, ids[i - 1].s) == 0) ids[i].k = ids[i - 1].k + 1;
        for (size_t j = 0; j < nf; j++) {
            size_t i = ids[j].i;
            sb_reset(&id);
            sb_puts(&id, ids[j].s);
            if (ids[j].k > 1) sb_printf(&id, "#%zu", ids[j].k);
            if (dup > 1) sb_printf(&id, "@%zu", dup);
            uint8_t h[32];
            sha256(id.s, id.len, h);
            strbuf s;
            sb_init(&s);
            sb_printf(&s, "%s-", trace_kind_name(t[p]->findings[i].kind));
            hex(&s, h, 6);
            r->finding[p][i] = sb_take(&s);
            hex(&s, h, 16);
            r->key[p][i] = sb_take(&s);
            free(ids[j].s);
        }
        free(ids);
    }
    sb_free(&id);
}

void rn_free(rnames *r) {
    for (size_t p = 0; p < r->n; p++) {
        for (size_t i = 0; i < r->n_findings[p]; i++) free(r->finding[p][i]), free(r->key[p][i]);
        free(r->finding[p]);
        free(r->key[p]);
        free(r->pair[p]);
    }
    free(r->pair);
    free(r->finding);
    free(r->key);
    free(r->n_findings);
    memset(r, 0, sizeof *r);
}
