/* trace_enums — names, titles and look-ups of the trace's vocabularies (see
 * trace_enums.h), each table expanded from its one list. */
#include "trace_enums.h"

#include <stdbool.h>
#include <string.h>

#define NAME2(ID, name) name,
#define KIND_NAME(ID, name, title, level, brief) name,
#define KIND_TITLE(ID, name, title, level, brief) title,
#define KIND_LEVEL(ID, name, title, level, brief) level,
#define KIND_SHORT(ID, name, title, level, brief) brief,

const char *const trace_verdict_names[VERDICT_COUNT] = {TRACE_VERDICTS(NAME2)};
const char *const trace_kind_names[KIND_COUNT] = {TRACE_KINDS(KIND_NAME)};
const char *const trace_stop_names[STOP_COUNT] = {TRACE_STOPS(NAME2)};
const char *const trace_format_names[FORMAT_COUNT] = {TRACE_FORMATS(NAME2)};
const char *const trace_severity_names[SEV_COUNT] = {TRACE_SEVERITIES(NAME2)};
static const char *const kind_titles[KIND_COUNT] = {TRACE_KINDS(KIND_TITLE)};
static const char *const kind_levels[KIND_COUNT] = {TRACE_KINDS(KIND_LEVEL)};
static const char *const kind_shorts[KIND_COUNT] = {TRACE_KINDS(KIND_SHORT)};

static const char *pick(const char *const *t, unsigned n, unsigned i) { return i < n ? t[i] : "?"; }

const char *trace_verdict_name(trace_verdict v) { return pick(trace_verdict_names, VERDICT_COUNT, v); }
const char *trace_kind_name(trace_kind k) { return pick(trace_kind_names, KIND_COUNT, k); }
const char *trace_kind_title(trace_kind k) { return pick(kind_titles, KIND_COUNT, k); }
const char *trace_kind_level(trace_kind k) { return pick(kind_levels, KIND_COUNT, k); }
const char *trace_kind_short(trace_kind k) { return pick(kind_shorts, KIND_COUNT, k); }
const char *trace_stop_name(trace_stop s) { return pick(trace_stop_names, STOP_COUNT, s); }
const char *trace_format_name(trace_format f) { return pick(trace_format_names, FORMAT_COUNT, f); }
const char *trace_severity_name(trace_severity s) { return pick(trace_severity_names, SEV_COUNT, s); }

static int find(const char *const *t, int n, const char *name) {
    for (int i = 0; name && i < n; i++)
        if (strcmp(t[i], name) == 0) return i;
    return -1;
}

int trace_verdict_of(const char *name) { return find(trace_verdict_names, VERDICT_COUNT, name); }
int trace_kind_of(const char *name) { return find(trace_kind_names, KIND_COUNT, name); }
int trace_stop_of(const char *name) { return find(trace_stop_names, STOP_COUNT, name); }
int trace_format_of(const char *name) { return find(trace_format_names, FORMAT_COUNT, name); }

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

const char *trace_next_instr_name(const char *msg, const char **p, size_t *len) {
    for (const char *s = *p; *s;) {
        bool start = s == msg || !(name_char(s[-1]) || s[-1] == '.');
        const char *q = s + (*s == '%');
        if (!start || !((*q >= 'a' && *q <= 'z') || *q == '_')) {
            s++;
            continue;
        }
        const char *e = q;
        while (name_char(*e) || (*e == '.' && e[1] >= '0' && e[1] <= '9') || (*e == '.' && strncmp(e, ".clone", 6) == 0))
            e++;
        const char *dot = memchr(q, '.', (size_t)(e - q));
        if (dot && dot[1] >= '0' && dot[1] <= '9') {
            *p = e;
            *len = (size_t)(e - q);
            return q;
        }
        s = e > s ? e : s + 1;
    }
    *p += strlen(*p);
    return NULL;
}
