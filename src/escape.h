/* escape — the one escaping module every HTML, XML/SVG, JSON and URI writer uses
 * (STYLE 3). Every string that came from a trace reaches an output through one
 * of these; raw appends are for markup we wrote ourselves.
 *
 *   esc_dangerous the one judge of which code points never reach an output raw:
 *                 C0 controls but \t \n \r, DEL, C1 controls, and the invisible
 *                 characters that reorder or break displayed text (bidi
 *                 embeddings, overrides and isolates U+202A-U+202E and
 *                 U+2066-U+2069, marks U+200E U+200F U+061C, separators
 *                 U+2028 U+2029), with which a trace string (an op_name) could
 *                 make a finding read differently from what it is.
 *   esc_html      text and attribute values in HTML and XML/SVG: & < > " ' are
 *                 written as entities; a dangerous code point is shown as the
 *                 visible text "[U+202E]"; invalid UTF-8 bytes become U+FFFD, so
 *                 the output is always well-formed UTF-8 (and XML 1.0).
 *   esc_json      a JSON string body (no quotes): \" \\ \b \f \n \r \t, other
 *                 dangerous code points as \uXXXX, and < > & as \u003c \u003e
 *                 \u0026 so the JSON is also safe inside an HTML <script> or a
 *                 viewer that renders strings as markup. Invalid UTF-8 becomes
 *                 \ufffd.
 *   esc_json_harden  rewrites < > & and dangerous code points in an already-
 *                 serialised JSON text (they can only occur inside strings) the
 *                 same way; for jansson output.
 *   esc_slug      a file-name-safe slug: [A-Za-z0-9._-], others → '-', at most
 *                 max bytes, never empty, never starting with '.'.
 *   esc_base64    standard base64 with padding (data: URIs, CSP hashes).
 *   esc_uri       a relative URI reference from a path: bytes outside
 *                 [A-Za-z0-9-._~/] are percent-encoded (SARIF artifact URIs).
 *   esc_md        inline Markdown text (a table cell, a list item): the
 *                 characters that mean something inline in CommonMark or
 *                 GitHub's dialect (\ ` * _ { } [ ] < > | ~ & ! $) are
 *                 backslash-escaped, so no link, emphasis, code span, HTML
 *                 tag, entity, math or table bar comes from a trace string; line breaks and tabs become
 *                 spaces, dangerous code points "[U+202E]", invalid UTF-8
 *                 U+FFFD; at most max bytes of s are shown, cut on a code
 *                 point with "…" (max 0: no limit).
 *
 * All append to a strbuf owned by the caller.
 */
#ifndef SCALIFY_ESCAPE_H
#define SCALIFY_ESCAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

bool esc_dangerous(uint32_t cp);
void esc_html(strbuf *b, const char *s);
void esc_html_n(strbuf *b, const char *s, size_t n);
void esc_json(strbuf *b, const char *s);
void esc_json_harden(strbuf *b, const char *json, size_t n);
void esc_slug(strbuf *b, const char *s, size_t max);
void esc_base64(strbuf *b, const void *data, size_t n);
void esc_uri(strbuf *b, const char *path);
void esc_md(strbuf *b, const char *s, size_t max);

#endif
