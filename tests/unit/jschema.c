/* jschema — recursive JSON Schema checker over jansson values (see jschema.h). */
#include "jschema.h"

#include <math.h>
#include <regex.h>
#include <string.h>

typedef struct {
    json_t *root;
    strbuf *errs;
    int count;
} js;

static void err(js *j, const char *path, const char *msg, const char *detail) {
    j->count++;
    if (j->count <= 20) sb_printf(j->errs, "%s: %s%s%s\n", path[0] ? path : "(root)", msg, detail ? " " : "", detail ? detail : "");
}

static json_t *resolve(js *j, const char *ref) {
    if (strncmp(ref, "#/", 2) != 0) return NULL;
    json_t *cur = j->root;
    char part[256];
    const char *p = ref + 2;
    while (*p && cur) {
        size_t n = strcspn(p, "/");
        if (n >= sizeof part) return NULL;
        memcpy(part, p, n);
        part[n] = 0;
        cur = json_object_get(cur, part);
        p += n;
        if (*p == '/') p++;
    }
    return cur;
}

static bool type_is(json_t *v, const char *t) {
    if (strcmp(t, "object") == 0) return json_is_object(v);
    if (strcmp(t, "array") == 0) return json_is_array(v);
    if (strcmp(t, "string") == 0) return json_is_string(v);
    if (strcmp(t, "integer") == 0) return json_is_integer(v) || (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v));
    if (strcmp(t, "number") == 0) return json_is_number(v);
    if (strcmp(t, "boolean") == 0) return json_is_boolean(v);
    if (strcmp(t, "null") == 0) return json_is_null(v);
    return false;
}

static size_t utf8_chars(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

static void check(js *j, json_t *s, json_t *v, const char *path);

/* Runs a sub-check silently; returns its violation count. */
static int quiet(js *j, json_t *s, json_t *v, const char *path) {
    strbuf tmp;
    sb_init(&tmp);
    js sub = {j->root, &tmp, 0};
    check(&sub, s, v, path);
    sb_free(&tmp);
    return sub.count;
}

static void check(js *j, json_t *s, json_t *v, const char *path) {
    if (json_is_true(s) || !s) return;
    if (json_is_false(s)) {
        err(j, path, "not allowed by schema false", NULL);
        return;
    }
    json_t *ref = json_object_get(s, "$ref");
    if (json_is_string(ref)) {
        json_t *target = resolve(j, json_string_value(ref));
        if (!target) err(j, path, "unresolvable $ref", json_string_value(ref));
        else check(j, target, v, path);
        /* draft-04: $ref siblings are ignored; 2020-12 applies them — ours have none */
        return;
    }
    json_t *t = json_object_get(s, "type");
    if (json_is_string(t) && !type_is(v, json_string_value(t))) {
        err(j, path, "expected type", json_string_value(t));
        return;
    }
    if (json_is_array(t)) {
        bool ok = false;
        size_t i;
        json_t *e;
        json_array_foreach(t, i, e) ok = ok || type_is(v, json_string_value(e));
        if (!ok) {
            err(j, path, "value of none of the allowed types", NULL);
            return;
        }
    }
    json_t *en = json_object_get(s, "enum");
    if (json_is_array(en)) {
        bool ok = false;
        size_t i;
        json_t *e;
        json_array_foreach(en, i, e) ok = ok || json_equal(e, v);
        if (!ok) err(j, path, "not one of the enum values", json_is_string(v) ? json_string_value(v) : NULL);
    }
    json_t *cn = json_object_get(s, "const");
    if (cn && !json_equal(cn, v)) err(j, path, "not the const value", NULL);
    if (json_is_number(v)) {
        json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
        if (json_is_number(mn) && json_number_value(v) < json_number_value(mn)) err(j, path, "below minimum", NULL);
        if (json_is_number(mx) && json_number_value(v) > json_number_value(mx)) err(j, path, "above maximum", NULL);
    }
    if (json_is_string(v)) {
        json_t *ml = json_object_get(s, "minLength");
        if (json_is_integer(ml) && (json_int_t)utf8_chars(json_string_value(v)) < json_integer_value(ml))
            err(j, path, "shorter than minLength", NULL);
        json_t *pat = json_object_get(s, "pattern");
        if (json_is_string(pat)) {
            regex_t re;
            if (regcomp(&re, json_string_value(pat), REG_EXTENDED | REG_NOSUB) != 0)
                err(j, path, "schema pattern does not compile as POSIX ERE", json_string_value(pat));
            else {
                if (regexec(&re, json_string_value(v), 0, NULL, 0) != 0)
                    err(j, path, "does not match pattern", json_string_value(pat));
                regfree(&re);
            }
        }
    }
    if (json_is_array(v)) {
        json_t *mi = json_object_get(s, "minItems");
        if (json_is_integer(mi) && (json_int_t)json_array_size(v) < json_integer_value(mi)) err(j, path, "too few items", NULL);
        if (json_is_true(json_object_get(s, "uniqueItems")))
            for (size_t a = 0; a < json_array_size(v); a++)
                for (size_t b = a + 1; b < json_array_size(v); b++)
                    if (json_equal(json_array_get(v, a), json_array_get(v, b))) err(j, path, "items are not unique", NULL);
        json_t *items = json_object_get(s, "items");
        if (json_is_object(items) || json_is_boolean(items)) {
            size_t i;
            json_t *e;
            json_array_foreach(v, i, e) {
                char p[1024];
                snprintf(p, sizeof p, "%s[%zu]", path, i);
                check(j, items, e, p);
            }
        }
    }
    if (json_is_object(v)) {
        json_t *req = json_object_get(s, "required");
        size_t i;
        json_t *e;
        if (json_is_array(req)) json_array_foreach(req, i, e) if (!json_object_get(v, json_string_value(e)))
            err(j, path, "missing required property", json_string_value(e));
        json_t *props = json_object_get(s, "properties"), *addl = json_object_get(s, "additionalProperties");
        json_t *pn = json_object_get(s, "propertyNames");
        const char *k;
        json_t *pv;
        json_object_foreach(v, k, pv) {
            char p[1024];
            snprintf(p, sizeof p, "%s.%s", path, k);
            json_t *ps = props ? json_object_get(props, k) : NULL;
            if (ps) check(j, ps, pv, p);
            else if (addl) {
                if (json_is_false(addl)) err(j, p, "additional property not allowed", NULL);
                else check(j, addl, pv, p);
            }
            if (pn) {
                json_t *name = json_string(k);
                check(j, pn, name, p);
                json_decref(name);
            }
        }
    }
    json_t *all = json_object_get(s, "allOf"), *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    size_t i;
    json_t *e;
    if (json_is_array(all)) json_array_foreach(all, i, e) check(j, e, v, path);
    if (json_is_array(any)) {
        bool ok = false;
        json_array_foreach(any, i, e) ok = ok || quiet(j, e, v, path) == 0;
        if (!ok) err(j, path, "matches none of anyOf", NULL);
    }
    if (json_is_array(one)) {
        int matches = 0;
        json_array_foreach(one, i, e) matches += quiet(j, e, v, path) == 0;
        if (matches != 1) err(j, path, matches ? "matches more than one of oneOf" : "matches none of oneOf", NULL);
    }
}

int jschema_validate(json_t *schema, json_t *doc, strbuf *errs) {
    js j = {schema, errs, 0};
    check(&j, schema, doc, "");
    return j.count;
}
