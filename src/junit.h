/* junit — junit.xml: a <testsuite> per pair, a <testcase> per segment.
 *
 * A suite fails exactly when `scalify check` exits non-zero on its pair: for a
 * mismatch or unverified pair some testcase has a <failure>, for an error an
 * <error>; a verified pair's cases all pass. Every finding lands in a testcase:
 * its segment's, or a case named after a segment the trace does not list (such
 * as "entry"), or "(pair)" for a finding of no segment. In a pair that fails, a
 * segment case fails when its verdict is not verified (an unverified segment
 * is a failure with its reason, never <skipped>) or a finding lands in it; a
 * pair whose failure no case shows gets a "(pair)" case with the verdict and
 * its reason. time attributes are the trace's phase timings in seconds, so the
 * file is deterministic. Every string goes through esc_html (valid XML 1.0
 * text and attributes).
 */
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
