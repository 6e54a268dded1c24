/* escape — the one escaping module every HTML, XML/SVG, JSON and URI writer uses
 * (STYLE 3). Every string that came from a trace reaches an output through one
 * of these; raw appends are for markup we wrote ourselves.
 *
 *   esc_html      text and attribute values in HTML and XML/SVG: & < > " ' are
 *                 written as entities; NUL and other C0 controls except \t \n \r
 *                 (not allowed in XML 1.0) become U+FFFD; invalid UTF-8 bytes
 *                 become U+FFFD, so the output is always well-formed UTF-8.
 *   esc_json      a JSON string body (no quotes): \" \\ \b \f \n \r \t, other
 *                 controls as \u00XX, and < > & as \u003c \u003e \u0026 so the
 *                 JSON is also safe inside an HTML <script> or a viewer that
 *                 renders strings as markup. Invalid UTF-8 becomes \ufffd.
 *   esc_json_harden  rewrites < > & in an already-serialised JSON text (they can
 *                 only occur inside strings) the same way; for jansson output.
 *   esc_slug      a file-name-safe slug: [A-Za-z0-9._-], others → '-', at most
 *                 max bytes, never empty, never starting with '.'.
 *   esc_base64    standard base64 with padding (data: URIs, CSP hashes).
 *   esc_uri       a relative URI reference from a path: bytes outside
 *                 [A-Za-z0-9-._~/] are percent-encoded (SARIF artifact URIs).
 *
 * All append to a strbuf owned by the caller.
 */
#ifndef SCALIFY_ESCAPE_H
#define SCALIFY_ESCAPE_H

#include <stddef.h>

#include "util.h"

void esc_html(strbuf *b, const char *s);
void esc_html_n(strbuf *b, const char *s, size_t n);
void esc_json(strbuf *b, const char *s);
void esc_json_harden(strbuf *b, const char *json, size_t n);
void esc_slug(strbuf *b, const char *s, size_t max);
void esc_base64(strbuf *b, const void *data, size_t n);
void esc_uri(strbuf *b, const char *path);

#endif
