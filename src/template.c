/* template — {{slot}} expansion and resource lookup (see template.h). */
#include "template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "home.h"
#include "io.h"

void tpl_vars_init(tpl_vars *vs) { memset(vs, 0, sizeof *vs); }
void tpl_vars_free(tpl_vars *vs) { free(vs->v); memset(vs, 0, sizeof *vs); }

void tpl_set(tpl_vars *vs, const char *key, const char *val) {
    for (size_t i = 0; i < vs->n; i++)
        if (strcmp(vs->v[i].key, key) == 0) {
            vs->v[i].val = val;
            return;
        }
    XGROW(vs->v, vs->cap, vs->n + 1);
    vs->v[vs->n++] = (tpl_var){key, val};
}

static const tpl_var *lookup(const tpl_vars *vs, const char *k, size_t n) {
    for (size_t i = 0; i < vs->n; i++)
        if (strlen(vs->v[i].key) == n && memcmp(vs->v[i].key, k, n) == 0) return &vs->v[i];
    return NULL;
}

/* Finds the {{/name}} closing the section opened just before p, honouring nesting
 * of sections with the same name. Returns its offset or (size_t)-1. */
static size_t find_close(const char *t, size_t p, size_t n, const char *k, size_t kn) {
    int depth = 0;
    while (p + 4 <= n) {
        const char *o = memmem(t + p, n - p, "{{", 2);
        if (!o) break;
        size_t at = (size_t)(o - t);
        char c = at + 2 < n ? t[at + 2] : 0;
        if ((c == '#' || c == '^' || c == '/') && at + 3 + kn + 2 <= n && memcmp(t + at + 3, k, kn) == 0 &&
            memcmp(t + at + 3 + kn, "}}", 2) == 0) {
            if (c == '/') {
                if (depth == 0) return at;
                depth--;
            } else depth++;
        }
        p = at + 2;
    }
    return (size_t)-1;
}

static bool render(strbuf *out, const char *name, const char *t, size_t n, const tpl_vars *vs, diag *d) {
    size_t p = 0;
    while (p < n) {
        const char *o = memmem(t + p, n - p, "{{", 2);
        if (!o) {
            sb_put(out, t + p, n - p);
            break;
        }
        size_t at = (size_t)(o - t);
        sb_put(out, t + p, at - p);
        bool raw = at + 2 < n && t[at + 2] == '{';
        char sect = at + 2 < n && (t[at + 2] == '#' || t[at + 2] == '^') ? t[at + 2] : 0;
        size_t ks = at + 2 + (raw || sect ? 1 : 0);
        const char *close = memmem(t + ks, n - ks, raw ? "}}}" : "}}", raw ? 3 : 2);
        if (!close) {
            diag_plain(d, "template %s: unclosed slot at byte %zu", name, at);
            return false;
        }
        size_t ke = (size_t)(close - t), kn = ke - ks;
        const tpl_var *v = lookup(vs, t + ks, kn);
        if (!v) {
            diag_plain(d, "template %s: unknown slot '%.*s'", name, (int)kn, t + ks);
            return false;
        }
        size_t after = ke + (raw ? 3 : 2);
        if (sect) {
            size_t end = find_close(t, after, n, t + ks, kn);
            if (end == (size_t)-1) {
                diag_plain(d, "template %s: section '%.*s' is not closed", name, (int)kn, t + ks);
                return false;
            }
            bool set = v->val && v->val[0];
            if ((sect == '#') == set && !render(out, name, t + after, end - after, vs, d)) return false;
            p = end + 3 + kn + 2;
            continue;
        }
        if (raw) sb_puts(out, v->val ? v->val : "");
        else esc_html(out, v->val);
        p = after;
    }
    return true;
}

bool tpl_render(strbuf *out, const char *name, const char *tpl, size_t n, const tpl_vars *vs, diag *d) {
    return render(out, name, tpl, n, vs, d);
}

static char *root_override;

void tpl_set_root(const char *dir) {
    free(root_override);
    root_override = dir ? xstrdup(dir) : NULL;
}

const char *tpl_root(void) {
    if (root_override) return root_override;
    const char *env = getenv("SCALIFY_HOME");
    if (env && *env) return env;
    const char *home = home_root();
    return home ? home : ".";
}

char *tpl_load(const char *rel, size_t *len, diag *d) {
    strbuf p;
    sb_init(&p);
    sb_printf(&p, "%s/%s", tpl_root(), rel);
    diag sub;
    diag_init(&sub, p.s);
    size_t n = 0;
    char *buf = io_read_file(p.s, &n, NULL, &sub);
    if (!buf) diag_plain(d, "cannot read resource %s (set SCALIFY_HOME or --templates to the scalify source tree)", p.s);
    diag_free(&sub);
    sb_free(&p);
    if (len) *len = n;
    return buf;
}
