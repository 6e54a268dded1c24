/* chart — the per-segment timing chart: horizontal stacked bars (one row per
 * segment, one colour per phase: build, lift, saturate, check) drawn with our own
 * rasteriser into a buffer of palette indices (a handful of colours, nothing
 * blended) and encoded as a palette PNG with libpng, in memory.
 *
 * The PNG holds no text: the report writes segment names, tick labels and the
 * legend in HTML next to it, using the geometry returned in chart_axis (rows of
 * CHART_ROW_PX device pixels, CHART_SCALE device pixels per CSS pixel, ticks at
 * fractions of the width). A memo-hit row has a short hatched tab after its
 * bar (CHART_MEMO_TAB_PX wide). Same input, same bytes.
 */
#ifndef SCALIFY_CHART_H
#define SCALIFY_CHART_H

#include <stdbool.h>
#include <stddef.h>

#include "diag.h"
#include "util.h"

#define CHART_PHASES 4
#define CHART_SCALE 2      /* device pixels per CSS pixel (crisp on HiDPI) */
#define CHART_ROW_PX 48    /* device pixels per row: 24 CSS px */
#define CHART_MEMO_TAB_PX 16  /* CSS pixels of the hatched tab that marks a memo hit */
#define CHART_WIDTH_PX 1400
#define CHART_HIDPI_ROWS 80
#define CHART_MAX_TICKS 12
/* Rows a chart may have: CHART_MAX_ROWS x 24 device pixels stays far below
 * libpng's default height limit (10^6 rows) and what browsers decode; callers
 * with more segments sum consecutive ones into a row. */
#define CHART_MAX_ROWS 500

typedef struct {
    double max;                      /* value at the right edge (ms) */
    int n_ticks;                     /* ticks at 0, step, 2·step … max */
    double ticks[CHART_MAX_TICKS];
    int width_px, height_px;         /* of the PNG */
    int css_height;                  /* CSS pixels the image must be shown at (rows × 24) */
} chart_axis;

/* Phase colours (RGB), shared with the HTML legend. */
extern const unsigned char chart_phase_rgb[CHART_PHASES][3];

/* values[i][p] is row i's time in phase p (ms, negative or not finite treated
 * as 0, more than 10^12 as 10^12);
 * hatched[i] marks memo hits. Appends the PNG bytes to png; false + diag on a
 * libpng failure or more than CHART_MAX_ROWS rows. */
bool chart_png(strbuf *png, const double (*values)[CHART_PHASES], const bool *hatched, size_t n, chart_axis *axis,
               diag *d);

#endif
