/* dotgraph — the SVG picture of a finding's subgraph, laid out in-process with
 * Graphviz (cgraph + gvc).
 *
 * Baseline and distributed nodes sit in two clusters side by side; data edges
 * are solid, relation links (baseline ↔ distributed) dashed, their views
 * written in the distributed node they reach (with, for an unproved
 * counterpart, how check located it: "by same op_name scope"); every node
 * shows its type (f16[2,16]: the node's own, else the HLO the finding holds
 * for it); the divergence is highlighted; an edge that folds a longer path
 * is dotted and says how many steps. Context further than DOTG_MAX_HOPS from
 * the divergence is folded into one "N more" node per side, except the
 * instructions the message names and their neighbours, and at most
 * max_nodes nodes are drawn (divergence first, then what the message names,
 * then by distance) — when the cap cuts, *cut_note says so (caller frees,
 * NULL when nothing was cut).
 *
 * Every label reaches Graphviz as an HTML-like label whose text went through
 * esc_html, so trace strings cannot become markup in the SVG. Each picture gets a
 * fresh graph, freed before returning (the Graphviz context is shared). Elements carry
 * classes (role-divergence, side-baseline, link …) so the page's CSS can restyle
 * them (dark mode); the colours written as attributes are the light theme.
 */
#ifndef SCALIFY_DOTGRAPH_H
#define SCALIFY_DOTGRAPH_H

#include <stdbool.h>
#include <stddef.h>

#include "diag.h"
#include "trace_read.h"
#include "util.h"

#define DOTG_MAX_HOPS 3
#define DOTG_MAX_NODES 40

/* Appends an <svg>…</svg> element (no XML prolog or doctype) to out. Returns
 * false with a diag when Graphviz fails; out is then unchanged. */
bool dotg_svg(strbuf *out, const trace_finding *f, size_t max_nodes, char **cut_note, diag *d);

#endif
