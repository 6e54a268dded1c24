/* hlo_read — one entry point for every HLO file form (see hlo.h). */
#include <stdlib.h>
#include <string.h>

#include "hlo.h"
#include "io.h"

bool hlo_looks_like_text(const char *buf, size_t n) {
    /* Protobuf starts with a field tag and binary lengths; HLO text is printable.
     * Look at the first 4 KiB: any control byte other than \t \n \r means binary. */
    size_t k = n < 4096 ? n : 4096;
    if (k == 0) return true;
    for (size_t i = 0; i < k; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') return false;
    }
    return true;
}

hlo_module *hlo_read_file(const char *path, diag *d) {
    size_t n;
    bool gz;
    char *buf = io_read_file(path, &n, &gz, d);
    if (!buf) return NULL;
    hlo_module *m = hlo_looks_like_text(buf, n) ? hlo_parse_text(buf, n, path, d)
                                                : hlo_parse_pb((const uint8_t *)buf, n, path, d);
    free(buf);
    return m;
}
