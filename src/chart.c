/* chart — stacked bar rasteriser + libpng encoder (see chart.h). */
#include "chart.h"

#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

const unsigned char chart_phase_rgb[CHART_PHASES][3] = {
    {0x60, 0xa5, 0xfa},  /* build: blue 400 */
    {0x34, 0xd3, 0x99},  /* lift: emerald 400 */
    {0xf5, 0x9e, 0x0b},  /* saturate: amber 500 */
    {0xa7, 0x8b, 0xfa},  /* check: violet 400 */
};

/* The chart's colours: the canvas holds an index into this palette (every
 * pixel is one of these, nothing is blended), so the PNG is a palette image,
 * a quarter of the bytes of RGBA to filter and compress. */
enum { PX_CLEAR, PX_AXIS, PX_GRID, PX_PHASE0, PX_HATCH = PX_PHASE0 + CHART_PHASES, PX_COLOURS };

typedef struct {
    unsigned char *px;
    int w, h;
} canvas;

static void fill(canvas *c, int x0, int y0, int x1, int y1, unsigned char colour) {
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > c->w) x1 = c->w;
    if (y1 > c->h) y1 = c->h;
    if (x1 <= x0) return;
    for (int y = y0; y < y1; y++) memset(c->px + (size_t)y * c->w + x0, colour, (size_t)(x1 - x0));
}

/* A phase's time as drawn: negative, non-finite or absurd (over 10^12 ms,
 * some 30 years) values from a hand-edited trace become 0 or the cap, so
 * sums and pixel positions stay finite. */
static double drawn(double v) { return v > 0 ? (v < 1e12 ? v : 1e12) : 0; }

/* A step of 1, 2 or 5 × 10^k giving about 6 intervals up to max. */
static double nice_step(double max) {
    double raw = max / 6, mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

static void png_write_cb(png_structp png, png_bytep data, png_size_t n) {
    sb_put((strbuf *)png_get_io_ptr(png), (const char *)data, n);
}
static void png_flush_cb(png_structp png) { (void)png; }

bool chart_png(strbuf *out, const double (*values)[CHART_PHASES], const bool *hatched, size_t n, chart_axis *axis,
               diag *d) {
    if (n > CHART_MAX_ROWS) {
        diag_plain(d, "chart: %zu rows, more than %d", n, CHART_MAX_ROWS);
        return false;
    }
    double max = 0;
    for (size_t i = 0; i < n; i++) {
        double s = 0;
        for (int p = 0; p < CHART_PHASES; p++) s += drawn(values[i][p]);
        if (s > max) max = s;
    }
    memset(axis, 0, sizeof *axis);
    double step = max > 0 ? nice_step(max) : 1;
    int k = max > 0 ? (int)ceil(max / step - 1e-9) : 1;
    if (k < 1) k = 1;
    while (k + 1 > CHART_MAX_TICKS) step *= 2, k = (int)ceil(max / step - 1e-9);
    axis->max = step * k;
    axis->n_ticks = k + 1;
    for (int i = 0; i <= k; i++) axis->ticks[i] = step * i;

    int scale = n <= CHART_HIDPI_ROWS ? CHART_SCALE : 1, row = CHART_ROW_PX * scale / CHART_SCALE;
    canvas c = {NULL, CHART_WIDTH_PX * scale / CHART_SCALE, (int)(n ? n : 1) * row};
    axis->css_height = c.h / scale;
    axis->width_px = c.w, axis->height_px = c.h;
    c.px = xcalloc((size_t)c.w * c.h, 1);  /* PX_CLEAR */
    for (int i = 0; i <= k; i++) {
        int x = (int)lround((double)i / k * (c.w - 2));
        fill(&c, x, 0, x + scale, c.h, i == 0 ? PX_AXIS : PX_GRID);
    }
    for (size_t i = 0; i < n; i++) {
        int y0 = (int)i * row + row / 5, y1 = (int)(i + 1) * row - row / 5;
        double acc = 0;
        for (int p = 0; p < CHART_PHASES; p++) {
            double v = drawn(values[i][p]);
            int x0 = 2 + (int)lround(acc / axis->max * (c.w - 4));
            acc += v;
            int x1 = 2 + (int)lround(acc / axis->max * (c.w - 4));
            if (v > 0 && x1 == x0) x1 = x0 + 1;  /* a phase that took time stays visible */
            fill(&c, x0, y0, x1, y1, (unsigned char)(PX_PHASE0 + p));
        }
        if (hatched && hatched[i]) {
            /* Memo hit: a short hatched tab right after its bar, so the row
             * reads "reused" even when the bar is too short to see, without
             * looking like a long bar itself. */
            int from = 2 + (int)lround(acc / axis->max * (c.w - 4)), to = from + CHART_MEMO_TAB_PX * scale;
            if (to > c.w) to = c.w;
            for (int y = y0; y < y1; y++)
                for (int x = from; x < to; x++)
                    if (((x + y) % (8 * scale)) < (3 * scale + 1) / 2) {
                        unsigned char *px = c.px + (size_t)y * c.w + x;
                        if (*px == PX_CLEAR) *px = PX_HATCH;
                    }
        }
    }

    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    png_bytep *rows = NULL;
    size_t start = out->len;
    if (!png || !info) {
        diag_plain(d, "libpng: cannot create a writer");
        png_destroy_write_struct(&png, NULL);
        free(c.px);
        return false;
    }
    rows = xcalloc((size_t)c.h, sizeof *rows);
    if (setjmp(png_jmpbuf(png))) {
        diag_plain(d, "libpng: encoding the chart failed");
        png_destroy_write_struct(&png, &info);
        free(rows);
        free(c.px);
        out->len = start;
        if (out->s) out->s[start] = 0;
        return false;
    }
    png_set_write_fn(png, out, png_write_cb, png_flush_cb);
    png_set_IHDR(png, info, (png_uint_32)c.w, (png_uint_32)c.h, 8, PNG_COLOR_TYPE_PALETTE, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    /* Gray grid and hatching over transparency; the phases opaque. */
    png_color plte[PX_COLOURS] = {{0, 0, 0}, {0x80, 0x80, 0x80}, {0x80, 0x80, 0x80}};
    png_byte alpha[PX_COLOURS] = {0, 200, 70};
    for (int p = 0; p < CHART_PHASES; p++) {
        plte[PX_PHASE0 + p] = (png_color){chart_phase_rgb[p][0], chart_phase_rgb[p][1], chart_phase_rgb[p][2]};
        alpha[PX_PHASE0 + p] = 255;
    }
    plte[PX_HATCH] = (png_color){0x80, 0x80, 0x80};
    alpha[PX_HATCH] = 90;
    png_set_PLTE(png, info, plte, PX_COLOURS);
    png_set_tRNS(png, info, alpha, PX_COLOURS, NULL);
    /* Rows repeat (bars are rows of equal pixels): "up" filtering makes a
     * repeated row zeros, at a fraction of the adaptive filter's cost. */
    png_set_filter(png, 0, PNG_FILTER_UP);
    png_set_compression_level(png, 6);
    png_write_info(png, info);
    for (int y = 0; y < c.h; y++) rows[y] = c.px + (size_t)y * c.w;
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(rows);
    free(c.px);
    return true;
}
