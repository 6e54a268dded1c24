/* hlo_read — one entry point for every HLO file form (see hlo.h). */
#include <stdlib.h>
#include <string.h>

#include "hlo.h"
#include "io.h"

trace_format hlo_detect_format(const char *buf, size_t n) {
    /* Protobuf starts with a field tag and binary lengths; HLO text is printable.
     * Look at the first 4 KiB: any control byte other than \t \n \r means binary. */
    size_t k = n < 4096 ? n : 4096;
    for (size_t i = 0; i < k; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') return FORMAT_HLO_PROTO;
    }
    return FORMAT_HLO_TEXT;
}

hlo_module *hlo_read_buffer(const char *buf, size_t n, const char *path, trace_format *fmt, diag *d) {
    trace_format f = hlo_detect_format(buf, n);
    if (fmt) *fmt = f;
    switch (f) {
    case FORMAT_HLO_TEXT: return hlo_parse_text(buf, n, path, d);
    case FORMAT_HLO_PROTO: return hlo_parse_pb((const uint8_t *)buf, n, path, d);
    case FORMAT_COUNT: break;
    }
    return NULL;
}

hlo_module *hlo_read_file(const char *path, diag *d) {
    size_t n;
    bool gz;
    size_t mapped;
    const char *buf = io_map_file_sha256(path, &n, &gz, NULL, &mapped, d);
    if (!buf) return NULL;
    hlo_module *m = hlo_read_buffer(buf, n, path, NULL, d);
    io_unmap(buf, mapped);
    return m;
}
