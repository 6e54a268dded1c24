/* libFuzzer target for the HLO text reader (make fuzz). Every input must give a
 * valid module or a diagnostic; sanitizers catch the rest. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hlo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *src = malloc(size + 1);
    memcpy(src, data, size);
    src[size] = 0;
    diag d;
    diag_init(&d, "fuzz.hlo");
    hlo_module *m = hlo_parse_text(src, size, "fuzz.hlo", &d);
    if (m) {
        if (graph_check(m, NULL) != 0) abort();
        strbuf b;
        sb_init(&b);
        hlo_print(&b, m);
        hlo_module *again = hlo_parse_text(b.s, b.len, "printed", &d);
        if (!again || !graph_equal(m, again, 0, NULL)) abort();
        graph_free(again);
        sb_free(&b);
    } else if (d.count == 0) {
        abort();
    }
    graph_free(m);
    diag_free(&d);
    free(src);
    return 0;
}
