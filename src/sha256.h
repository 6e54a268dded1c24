/* sha256 — FIPS 180-4 SHA-256 of a buffer (CSP hashes of inline styles and
 * scripts, digests in reports). No state outlives the call. */
#ifndef SCALIFY_SHA256_H
#define SCALIFY_SHA256_H

#include <stddef.h>
#include <stdint.h>

/* Writes the 32-byte digest of data[0..n) to out: with the x86 SHA
 * extensions when the processor has them, else in portable C. */
void sha256(const void *data, size_t n, uint8_t out[32]);
/* The same digest, always in portable C (tests compare the two). */
void sha256_portable(const void *data, size_t n, uint8_t out[32]);

#endif
