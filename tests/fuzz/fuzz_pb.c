/* libFuzzer target for the HLO protobuf reader (make fuzz). Every input must
 * give a valid module or a diagnostic with a byte offset; a module must survive
 * the writer and read back equal; the careful path (walker, protobuf-c) must
 * give the same module or the same diagnostic. Sanitizers catch the rest. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hlo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    diag d;
    diag_init(&d, "fuzz.pb");
    hlo_module *m = hlo_parse_pb(data, size, "fuzz.pb", &d);
    diag cd;
    diag_init(&cd, "fuzz.pb");
    hlo_module *c = hlo_parse_pb_careful(data, size, "fuzz.pb", &cd);
    if ((m != NULL) != (c != NULL)) abort();
    if (m && (!graph_equal(m, c, 0, NULL) || strcmp(m->format, c->format) != 0)) abort();
    if (!m && (d.count != cd.count || strcmp(d.out.s ? d.out.s : "", cd.out.s ? cd.out.s : "") != 0)) abort();
    graph_free(c);
    diag_free(&cd);
    if (m) {
        if (graph_check(m, NULL) != 0) abort();
        strbuf b;
        sb_init(&b);
        hlo_write_pb(m, &b);
        hlo_module *again = hlo_parse_pb((const uint8_t *)b.s, b.len, "written", &d);
        if (!again || !graph_equal(m, again, GEQ_IGNORE_HEADER, NULL)) abort();
        graph_free(again);
        sb_free(&b);
    } else if (d.count == 0 || !d.out.s || !strstr(d.out.s, "byte ")) {
        abort();
    }
    graph_free(m);
    diag_free(&d);
    return 0;
}
