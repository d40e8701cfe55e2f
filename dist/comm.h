// comm.h: the processes of a data-parallel run and what they exchange.
//
// Built with `make MPI=1` the ranks are MPI processes (`mpirun -np N pocket
// train ...`); without it there is one rank and every call below returns at
// once. The collectives are written with point-to-point messages in a ring,
// so that:
// - sums have a fixed order: a reduce-scatter adds each shard's partials
//   around the ring starting at the rank after its owner, so the result
//   depends only on the world size (two ranks: a + b, which is also what
//   one rank gets from b + a); small sums of doubles are added in rank order;
// - a rank that waits knows for whom: a wait that outlasts the timeout ends
//   this process with a message naming the rank it was waiting for, and
//   mpirun then ends the others (it also ends them at once, naming the rank,
//   when one dies).
// Buffers are host memory.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "../util/util.h"

typedef struct {
    int rank, world;
    int local_rank;      // this rank's number among the ranks on its machine (which GPU it takes)
    double timeout_s;    // the longest a rank waits for another before ending the run
    float *piece;        // receive buffer of the ring collectives
    size_t piece_floats;
    double seconds;      // spent in the calls below so far, waiting for other ranks included
    double bytes;        // sent so far
} Comm;

// MPI_Init when built with MPI (argc/argv may be rewritten), else one rank.
// Fails when more than one rank is started without MPI support.
int comm_init(Comm *c, int *argc, char ***argv, PtError *e);
void comm_finalize(Comm *c);
// 1 when this binary was built with MPI.
int comm_has_mpi(void);

// A contiguous split of n elements into world shards, each starting on a
// multiple of `align`: rank r owns [lo[r], hi[r]).
void comm_shards(const Comm *c, size_t n, size_t align, size_t *lo, size_t *hi);

// buf[lo[r], hi[r]) of every rank r becomes the sum over ranks of that range
// (the rest of buf is left as scratch).
void comm_reduce_scatter(Comm *c, float *buf, const size_t *lo, const size_t *hi, const char *what);
// Every rank's elements [lo[r], hi[r]) of buf (elements of `size` bytes) are
// copied into every other rank's buf.
void comm_allgather(Comm *c, void *buf, size_t size, const size_t *lo, const size_t *hi, const char *what);
// v[0, n) (n <= COMM_SUM_MAX) becomes the sum over ranks, added in rank order.
enum { COMM_SUM_MAX = 72 };   // an objective's metrics (OBJECTIVE_MAX_METRICS) in one call
void comm_sum_doubles(Comm *c, double *v, int n, const char *what);
// Root's bytes to every rank.
void comm_broadcast(Comm *c, void *bytes, size_t n, int root, const char *what);
// out[0, n) on rank 0 receives the floats [first, first + n) of the global
// array that rank r holds as shard[0, hi[r] - lo[r]) = global [lo[r], hi[r]).
// Every rank calls it with the same first and n.
void comm_gather_range(Comm *c, const float *shard, const size_t *lo, const size_t *hi, size_t first, size_t n,
                       float *out, const char *what);
