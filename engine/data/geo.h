/* geo: CaloChallenge binning geometry (the binning_dataset_*.xml files).
 *
 * A <Bin pid name> holds one <Layer id r_edges n_bin_alpha> per readout
 * layer.  Voxels are ordered layer, then angular bin, then radial bin
 * (radial fastest), exactly like the CaloChallenge XMLHandler.  A layer with
 * r_edges="0" has no voxels but keeps its place (its id still counts for
 * depth).  Angular bins are uniform over [-pi, pi); the voxel centre is
 * (eta, phi) = (r_mid cos(alpha_mid), r_mid sin(alpha_mid)), r in mm. */
#ifndef GEO_H
#define GEO_H

#include "gt_error.h"

#define GEO_MAX_LAYERS 256
#define GEO_MAX_R_BINS 1024
#define GEO_MAX_ALPHA_BINS 4096
/* Voxels of a whole geometry: 26 times CaloChallenge's largest (dataset 3,
 * 40 500).  An imported model's geometry.xml is parsed before anything
 * else bounds it, and 100 KB of XML can declare 10^8 voxels: 2.4 GB of
 * per-voxel arrays filled with a cos and a sin each. */
#define GEO_MAX_VOXELS (1 << 20)

typedef struct geo_layer {
    int id;           /* the XML id                                       */
    int n_r;          /* radial bins (0 for an empty layer)               */
    int n_alpha;      /* angular bins                                     */
    int n_voxels;     /* n_r * n_alpha                                    */
    int offset;       /* index of the layer's first voxel in a shower     */
    double *r_edges;  /* n_r + 1 edges in mm (NULL for an empty layer)    */
    int uniform_r;    /* 1 when the radial bins all have the same width   */
} geo_layer;

typedef struct geo_geometry {
    int pid;                 /* PDG id from <Bin pid>                       */
    char particle[32];       /* <Bin name>: "electron", "photon", "pion"    */
    int n_layers;            /* all layers, with or without voxels          */
    int n_active;            /* layers with voxels                          */
    int n_voxels;            /* total voxels per shower                     */
    int regular;             /* 1 when every layer has the same binning     */
    geo_layer *layers;       /* n_layers                                    */
    int *active;             /* n_active indices into layers                */
    /* Per voxel (n_voxels): centre and size. */
    float *eta, *phi, *r;    /* centre in mm                                */
    float *dr, *dalpha;      /* radial width (mm), angular width (rad)      */
    int *voxel_layer;        /* index into layers                           */
} geo_geometry;

/* Parses a binning file; on failure g is left empty (safe to geo_free). */
int geo_load_file(geo_geometry *g, const char *path, gt_error *err);
int geo_load_memory(geo_geometry *g, const char *xml, int len, gt_error *err);
void geo_free(geo_geometry *g);

/* Voxel index for a point at radius r (mm) and angle alpha in [-pi, pi) in
 * layer index `layer`, or -1 when the point lies outside the layer's bins. */
int geo_find_voxel(const geo_geometry *g, int layer, double r, double alpha);

/* Radial bin of r in a layer, -1 when outside [r_edges[0], r_edges[n_r]). */
int geo_find_r_bin(const geo_layer *l, double r);

/* The symmetry of the binning about the beam axis.  Angular bins are
 * uniform over [-pi, pi) in every layer, so turning a shower by 2 pi / G,
 * G the gcd of the layers' angular bin counts (ignoring layers with one),
 * moves every layer's bins onto bins, and so does the mirror alpha -> -alpha
 * (bin a -> n_alpha - 1 - a).  A shower of a particle along the axis is as
 * likely as its turned and mirrored copies: the sampler uses this to spread
 * a model's small angular biases evenly (engine/model/README.md).
 *
 * geo_rotation_count: G (1 when no layer has two angular bins or more).
 * geo_turn_shower: out = in turned by k rotations of 2 pi / G (any k; taken
 * mod G), then mirrored when `mirror`: within each layer and radial bin, a
 * permutation of the angular bins.  in and out must not overlap. */
int geo_rotation_count(const geo_geometry *g);
void geo_turn_shower(const geo_geometry *g, const float *in, float *out, int k, int mirror);

#endif
