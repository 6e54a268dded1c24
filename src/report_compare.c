/* report_compare — matching a report with an earlier one (see report_compare.h). */
#include "report_compare.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"

static const char *jstr(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

static json_t *old_pair(json_t *pairs, const char *name, bool *used) {
    for (size_t i = 0; i < json_array_size(pairs); i++) {
        const char *nm = jstr(json_array_get(pairs, i), "name");
        if (!used[i] && nm && strcmp(nm, name) == 0) {
            used[i] = true;
            return json_array_get(pairs, i);
        }
    }
    return NULL;
}

/* Matches one pair's findings: keys of old (finding_details) against ours. */
static void match(rc_pair *rp, json_t *op, const trace *t, char *const *keys) {
    json_t *det = json_object_get(op, "finding_details");
    size_t no = json_array_size(det);
    bool *seen = xcalloc(no + 1, 1);
    rp->new_f = xcalloc(t->n_findings + 1, sizeof *rp->new_f);
    for (size_t i = 0; i < t->n_findings; i++) {
        size_t j = 0;
        while (j < no && (seen[j] || !jstr(json_array_get(det, j), "key") ||
                          strcmp(jstr(json_array_get(det, j), "key"), keys[i]) != 0))
            j++;
        if (j < no) seen[j] = true, rp->n_unchanged++;
        else rp->new_f[rp->n_new++] = i;
    }
    rp->fixed = xcalloc(no + 1, sizeof *rp->fixed);
    for (size_t j = 0; j < no; j++) {
        if (seen[j]) continue;
        json_t *f = json_array_get(det, j);
        rp->fixed[rp->n_fixed++] = (rc_old_finding){jstr(f, "id"), jstr(f, "kind"), jstr(f, "page"), jstr(f, "message")};
    }
    free(seen);
}

bool rc_build(rc_diff *r, const char *text, size_t len, const char *label, trace *const *t, size_t n,
              const rnames *names, diag *d) {
    memset(r, 0, sizeof *r);
    json_error_t e;
    json_t *root = json_loadb(text, len, 0, &e);
    if (!root || json_integer_value(json_object_get(root, "scalify_summary")) != 1 ||
        !json_is_array(json_object_get(root, "pairs"))) {
        if (root) diag_plain(d, "not a scalify summary.json (no scalify_summary 1 and pairs)");
        else diag_pos(d, e.line, e.column, "%s", e.text);
        json_decref(root);
        return false;
    }
    r->json = root;
    r->label = label;
    json_t *pairs = json_object_get(root, "pairs");
    size_t no = json_array_size(pairs);
    bool *used = xcalloc(no + 1, 1);
    r->pairs = xcalloc(n + no + 1, sizeof *r->pairs);
    r->has_keys = no > 0;
    for (size_t i = 0; i < no; i++)
        if (!json_is_array(json_object_get(json_array_get(pairs, i), "finding_details"))) r->has_keys = false;
    for (size_t p = 0; p < n; p++) {
        rc_pair *rp = &r->pairs[r->n++];
        json_t *op = old_pair(pairs, t[p]->name, used);
        rp->name = t[p]->name;
        rp->p = p;
        rp->new_wall = t[p]->wall_ms;
        rp->new_total = trace_count_findings(t[p], NULL);
        if (!op) {
            rp->status = RC_NEW_PAIR;
            r->pairs_new++;
            continue;
        }
        rp->status = RC_BOTH;
        rp->old_verdict = jstr(op, "verdict");
        rp->old_wall = json_number_value(json_object_get(op, "wall_ms"));
        rp->old_total = json_integer_value(json_object_get(op, "findings"));
        if (!rp->old_verdict || strcmp(rp->old_verdict, trace_verdict_name(t[p]->verdict)) != 0) r->verdicts_changed++;
        if (r->has_keys) match(rp, op, t[p], names->key[p]);
        r->tot_new += rp->n_new, r->tot_fixed += rp->n_fixed, r->tot_unchanged += rp->n_unchanged;
    }
    for (size_t i = 0; i < no; i++) {
        if (used[i]) continue;
        json_t *op = json_array_get(pairs, i);
        rc_pair *rp = &r->pairs[r->n++];
        rp->name = jstr(op, "name") ? jstr(op, "name") : "(unnamed)";
        rp->status = RC_GONE_PAIR;
        rp->old_verdict = jstr(op, "verdict");
        rp->old_wall = json_number_value(json_object_get(op, "wall_ms"));
        rp->old_total = json_integer_value(json_object_get(op, "findings"));
        r->pairs_gone++;
    }
    free(used);
    return true;
}

void rc_free(rc_diff *r) {
    for (size_t i = 0; i < r->n; i++) free(r->pairs[i].new_f), free(r->pairs[i].fixed);
    free(r->pairs);
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

static void jfield(strbuf *b, const char *k, const char *v) {
    sb_printf(b, "\"%s\": ", k);
    if (!v) {
        sb_puts(b, "null");
        return;
    }
    sb_putc(b, '"');
    esc_json(b, v);
    sb_putc(b, '"');
}

void rc_json(strbuf *b, const rc_diff *r, trace *const *t, const rnames *names) {
    static const char *const st[] = {"both", "new", "gone"};
    sb_puts(b, "{\n  \"scalify_compare\": 1,\n  ");
    jfield(b, "old", r->label);
    sb_printf(b, ",\n  \"matched_by_key\": %s,\n", r->has_keys ? "true" : "false");
    sb_printf(b, "  \"totals\": {\"new\": %zu, \"fixed\": %zu, \"unchanged\": %zu, \"pairs_new\": %zu, \"pairs_gone\": %zu, "
                 "\"verdicts_changed\": %zu},\n  \"pairs\": [",
              r->tot_new, r->tot_fixed, r->tot_unchanged, r->pairs_new, r->pairs_gone, r->verdicts_changed);
    for (size_t i = 0; i < r->n; i++) {
        const rc_pair *rp = &r->pairs[i];
        sb_puts(b, i ? ",\n    {" : "\n    {");
        jfield(b, "name", rp->name);
        sb_printf(b, ", \"status\": \"%s\", \"verdict\": {", st[rp->status]);
        jfield(b, "old", rp->old_verdict);
        sb_puts(b, ", ");
        jfield(b, "new", rp->status == RC_GONE_PAIR ? NULL : trace_verdict_name(t[rp->p]->verdict));
        sb_puts(b, "}, \"wall_ms\": {\"old\": ");
        if (rp->status == RC_NEW_PAIR) sb_puts(b, "null");
        else sb_printf(b, "%.3f", rp->old_wall);
        sb_puts(b, ", \"new\": ");
        if (rp->status == RC_GONE_PAIR) sb_puts(b, "null");
        else sb_printf(b, "%.3f", rp->new_wall);
        sb_printf(b, "}, \"findings\": {\"old\": %lld, \"new\": %lld, \"unchanged\": %zu,\n     \"new_pages\": [",
                  rp->old_total, rp->new_total, rp->n_unchanged);
        for (size_t k = 0; k < rp->n_new; k++)
            sb_printf(b, "%s\"finding-%s.html\"", k ? ", " : "", names->finding[rp->p][rp->new_f[k]]);
        sb_puts(b, "], \"fixed\": [");
        for (size_t k = 0; k < rp->n_fixed; k++) {
            sb_puts(b, k ? ", {" : "{");
            jfield(b, "id", rp->fixed[k].id);
            sb_puts(b, ", ");
            jfield(b, "kind", rp->fixed[k].kind);
            sb_puts(b, ", ");
            jfield(b, "page", rp->fixed[k].page);
            sb_putc(b, '}');
        }
        sb_puts(b, "]}}");
    }
    sb_puts(b, r->n ? "\n  ]\n}\n" : "]\n}\n");
}
