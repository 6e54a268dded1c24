/* hlo_pb — HLO protobuf → graph IR (placeholder until the reader lands). */
#include "hlo.h"

hlo_module *hlo_parse_pb(const uint8_t *buf, size_t n, const char *path, diag *d) {
    (void)buf;
    diag_binary(d, 0, "", "protobuf input is not supported yet (%zu bytes)", n);
    (void)path;
    return NULL;
}
