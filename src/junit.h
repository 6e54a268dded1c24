/* junit — junit.xml: a <testsuite> per pair, a <testcase> per segment.
 *
 * verified → pass; mismatch → <failure> listing the segment's findings;
 * unverified → <skipped> with the stop reason; error → <error>. A pair without
 * segments (an input error) gets one testcase named "(pair)". time attributes are
 * the trace's phase timings in seconds, so the file is deterministic. Every string
 * goes through esc_html (valid XML 1.0 text and attributes).
 */
#ifndef SCALIFY_JUNIT_H
#define SCALIFY_JUNIT_H

#include <stddef.h>

#include "trace_read.h"
#include "util.h"

void junit_write(strbuf *out, trace *const *traces, size_t n);

#endif
