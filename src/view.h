/* view — how a distributed value relates to its baseline value (DESIGN §5).
 *
 * A mesh has named axes, major to minor; device ids are the row-major index of
 * the device's coordinates ("iota" order), e.g. on {dp:2, tp:4} device = 4*dp+tp.
 *
 * A view V says, for every device r, how the local tensor x'(r) is obtained from
 * the global (baseline) tensor x:
 *   - shard: dimension d of x is cut into prod(size(axes)) equal contiguous
 *     blocks; the device whose combined coordinate on dims[d].axes (major first)
 *     is i holds block i. Mesh axes used by no dimension replicate.
 *   - partial: x = reduce over the devices of the `partial` axes of x'(r), with
 *     reduction `red` (RED_SUM, RED_MAX, ...: graph.h) — the value still needs an
 *     all-reduce. A partial view may also shard dimensions (on other axes).
 * `dup` (replicated) is the view with no sharded dimension and no partial axes.
 * Views are plain values (no pointers); VIEW_MAX_RANK / MESH_MAX_AXES bound them.
 * Layout views (a local tensor whose dims are runs of atomic factors of the
 * global dims, DESIGN §5) are not views: the lifter keeps them as LV_LAYOUT
 * values (lift.h) only between an all-to-all and the reshapes/transposes that
 * make them a plain view again; elsewhere a transfer function that would need
 * one says so instead of guessing.
 */
#ifndef SCALIFY_VIEW_H
#define SCALIFY_VIEW_H

#include <stdbool.h>
#include <stdint.h>

#include "diag.h"
#include "graph.h"
#include "shape.h"
#include "util.h"

#define MESH_MAX_AXES 8
#define VIEW_MAX_RANK 16

typedef struct mesh {
    uint32_t naxes;
    char names[MESH_MAX_AXES][32];
    int64_t sizes[MESH_MAX_AXES];
    /* Axes of size 1 left out of a Shardy mesh with more than MESH_MAX_AXES
     * axes (MaxText names a dozen, most of size 1): they split nothing, so a
     * sharding that names one is unsharded along it. */
    uint32_t nunit;
    char unit[MESH_MAX_AXES * 2][32];
} mesh;

int64_t mesh_devices(const mesh *m);
/* Index of the named axis, or -1. */
int mesh_axis(const mesh *m, const char *name, size_t n);
/* Coordinate of device `dev` on axis `a`. */
int64_t mesh_coord(const mesh *m, int64_t dev, int a);
/* Appends "{dp:2, tp:4}" (major to minor). */
void mesh_print(strbuf *b, const mesh *m);

typedef struct view_dim {
    uint8_t naxes;                   /* 0: not sharded */
    uint8_t axes[MESH_MAX_AXES];     /* mesh axes, major first */
} view_dim;

typedef struct view {
    uint8_t rank;
    view_dim dims[VIEW_MAX_RANK];
    uint8_t partial;                 /* bitmask of mesh axes the value is partial over */
    uint8_t red;                     /* reducer when partial != 0 */
} view;

/* The replicated view of a rank-r tensor. */
view view_dup(uint32_t rank);
bool view_is_dup(const view *v);
bool view_equal(const view *a, const view *b);
/* v without the mesh axes of size 1: sharded or partial over one, a value
 * is whole on every device (a {data:4, model:1} mesh says model only as a
 * name). Views are compared after this on both sides. */
void view_drop_unit_axes(view *v, const mesh *m);
/* Mesh axes used by the view (sharding or partial) as a bitmask. */
uint32_t view_axes_used(const view *v);
/* Mesh axes its dims are sharded over (not the partial ones) as a bitmask. */
uint32_t view_sharded_axes(const view *v);
/* Number of blocks dimension d is cut into (1 when d >= rank, -1 when an axis
 * is not in m). */
int64_t view_dim_parts(const view *v, const mesh *m, uint32_t d);
/* Device d's block of a global array of dims gdims[rank] under v (its
 * sharded dims; partial axes ignored): offsets and sizes per dim. */
void view_block(const view *v, const mesh *m, const int64_t *gdims, uint32_t rank, int64_t d, int64_t *off, int64_t *size);
/* Drops mesh axes of size 1 (they cut nothing), so that views which select
 * the same blocks compare equal with view_equal. */
void view_normalize(view *v, const mesh *m);

/* "dup", "shard(1,tp)", "shard(0,(dp,tp)) partial(tp,sum)": terms separated by
 * one space, as in samples/README.md. Canonical form: shard terms by dimension,
 * then one partial term (several axes as partial((A,B),sum), mesh order);
 * "dup" when there is neither. Appends to b. */
void view_print(strbuf *b, const view *v, const mesh *m);
/* Parses a view string for a tensor of the given global shape; checks that every
 * sharded dimension divides evenly. Terms in any order, separated by spaces:
 * dup | shard(D,AXIS) | shard(D,(A,B)) | partial(AXIS,RED) | partial((A,B),RED),
 * RED a reducer_name() (sum, max, min, prod, ...); several partial terms must
 * use one reduction; every mesh axis is used at most once. Returns false with
 * a reason in why (e.g. "mesh axis tp of size 3 does not divide dimension 1
 * (64)"); *out is untouched then. */
bool view_parse(const char *s, const mesh *m, const shape *global, view *out, char *why, size_t whylen);
/* The local (per-device) dims of a global shape under v; false when a sharded
 * dimension does not divide. */
bool view_local_dims(const view *v, const mesh *m, const shape *global, int64_t *local);

/* A relations file (samples/README.md "Relations files"), read with its views
 * checked against the baseline's entry parameters and outputs. */
typedef struct relations {
    mesh mesh;
    uint32_t ninputs, noutputs;
    view *inputs;                    /* by parameter number */
    char **input_names;              /* may hold NULL */
    view *outputs;                   /* by output index (tuple element) */
    bool *output_free;               /* an output no annotation constrains (GSPMD, no out_shardings):
                                      * any complete view the program leaves it in is the answer */
} relations;

/* Reads path; the views are checked against baseline (its entry parameters and
 * root): every parameter exactly once, outputs (default dup) one per element of
 * a tuple ROOT, else one. Errors go to d as "path: message" (d->file is set to
 * path while reading; exit-2 input errors); on failure *out is freed/zeroed.
 * On success the caller frees with relations_free. */
bool relations_read(const char *path, const hlo_module *baseline, relations *out, diag *d);
/* Relations from the sharding annotations of a GSPMD/Shardy baseline. The mesh
 * is the module's Shardy mesh (header frontend attribute xla.sdy.meshes, names
 * kept) when there is one; otherwise it is inferred from the tile assignments
 * and the device count (one axis per distinct device stride, major first),
 * named from the parameters' xla.sdy.sharding attributes when they agree
 * (protobuf baselines), else axis_0, axis_1, ... Parameter views come from their sharding= (or
 * their xla.sdy.sharding when that is all there is; unannotated parameters
 * are dup), output views from the ROOT's sharding (tuple element i), else from
 * the xla.sdy.FuncResultSharding custom-call feeding the ROOT, else dup.
 * `devices` is the distributed program's device count (<= 0: unknown). A tile
 * assignment the mesh cannot explain is an error "file: parameter K 'name':
 * ...". input_names holds the pytree names from op_name metadata. */
bool relations_auto(const hlo_module *baseline, int64_t devices, relations *out, diag *d);
/* Relations for a pair, from the programs themselves. A baseline with
 * sharding annotations (GSPMD/Shardy) gives them as relations_auto does. A
 * plain baseline (a shard_map pair's single-device program) says nothing, so
 * they come from the distributed program's record of its interface: the
 * partitioner's parameter and result shardings (HloModuleProto
 * spmd_parameters_shardings / spmd_output_sharding; a text dump prints the
 * parameters' sharding= at most), which say how each global parameter and
 * the global result are split over the devices, with global shapes from the
 * baseline. The mesh is the one the shardings name (XLA's mesh['dp'=2,...]
 * form), else the module's Shardy mesh, else derived from the tile
 * assignments (axis_0, ...). A parameter or output with no recorded sharding
 * is an error that says so: nothing is assumed. When neither program records
 * any sharding, values whose per-device shape is the global shape are dup
 * (relations_auto's answer; split nowhere) and any other is an error. Errors go to d as "file:
 * message"; the caller frees *out with relations_free on success. */
bool relations_auto_pair(const hlo_module *baseline, const hlo_module *distributed, relations *out, diag *d);
void relations_free(relations *r);

#endif
