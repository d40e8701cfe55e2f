// h5_chunk_grid.h: the places of a chunked dataset's chunk grid, in order,
// and the most a chunk may be stored in (util/ internal: the probe and the
// chunk reader walk the same grid and hold chunks to the same bound).
#pragma once
#include <hdf5.h>
#include <string.h>

typedef struct {
    int rank;
    hsize_t cells[H5S_MAX_RANK];   // chunks along each dimension
    hsize_t chunk[H5S_MAX_RANK];
    hsize_t at[H5S_MAX_RANK];      // the current cell
    int done;
} ChunkGrid;

// dims and chunk of `rank` dimensions, no chunk dimension 0; an empty
// dataset has no cells.
static inline void chunk_grid_start(ChunkGrid *g, int rank, const hsize_t *dims, const hsize_t *chunk) {
    memset(g, 0, sizeof *g);
    g->rank = rank;
    for (int d = 0; d < rank; d++) {
        g->chunk[d] = chunk[d];
        g->cells[d] = (dims[d] + chunk[d] - 1) / chunk[d];
        if (g->cells[d] == 0) g->done = 1;
    }
}

// The element offset of the next cell's chunk; 0 once every cell was given.
static inline int chunk_grid_next(ChunkGrid *g, hsize_t offset[H5S_MAX_RANK]) {
    if (g->done) return 0;
    for (int d = 0; d < g->rank; d++) offset[d] = g->at[d] * g->chunk[d];
    int d = g->rank - 1;
    while (d >= 0 && ++g->at[d] == g->cells[d]) g->at[d--] = 0;
    if (d < 0) g->done = 1;
    return 1;
}

// The most bytes a chunk of chunk_bytes may be stored in: deflate grows
// incompressible data by about 0.03%, plus its header.
static inline double chunk_stored_max(double chunk_bytes) { return chunk_bytes * 1.01 + 1024; }
