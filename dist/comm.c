// comm.c: the ring collectives of comm.h over MPI point-to-point messages,
// polled so that a wait can time out naming the rank it waits for.
#include "comm.h"
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef POCKET_MPI
#include <mpi.h>
#endif

// Floats per ring message: big enough to stream at network speed, small
// enough that the receive buffer costs nothing next to the model.
#define PIECE_FLOATS ((size_t)1 << 22)

int comm_has_mpi(void) {
#ifdef POCKET_MPI
    return 1;
#else
    return 0;
#endif
}

void comm_shards(const Comm *c, size_t n, size_t align, size_t *lo, size_t *hi) {
    size_t blocks = (n + align - 1) / align;
    for (int r = 0; r < c->world; r++) {
        lo[r] = blocks * r / c->world * align;
        hi[r] = blocks * (r + 1) / c->world * align;
        if (lo[r] > n) lo[r] = n;
        if (hi[r] > n) hi[r] = n;
    }
}

#ifndef POCKET_MPI

int comm_init(Comm *c, int *argc, char ***argv, PtError *e) {
    (void)argc, (void)argv;
    *c = (Comm){.rank = 0, .world = 1, .timeout_s = 600};
    const char *size = getenv("OMPI_COMM_WORLD_SIZE");
    if (size && atoi(size) > 1)
        return pt_fail(e, "started as one of %s MPI ranks, but this pocket was built without MPI (make MPI=1)", size);
    return 0;
}
void comm_finalize(Comm *c) { (void)c; }
void comm_reduce_scatter(Comm *c, float *buf, const size_t *lo, const size_t *hi, const char *what) {
    (void)c, (void)buf, (void)lo, (void)hi, (void)what;
}
void comm_allgather(Comm *c, void *buf, size_t size, const size_t *lo, const size_t *hi, const char *what) {
    (void)c, (void)buf, (void)size, (void)lo, (void)hi, (void)what;
}
void comm_sum_doubles(Comm *c, double *v, int n, const char *what) { (void)c, (void)v, (void)n, (void)what; }
void comm_broadcast(Comm *c, void *bytes, size_t n, int root, const char *what) {
    (void)c, (void)bytes, (void)n, (void)root, (void)what;
}
void comm_gather_range(Comm *c, const float *shard, const size_t *lo, const size_t *hi, size_t first, size_t n,
                       float *out, const char *what) {
    (void)c, (void)hi, (void)what;
    memmove(out, shard + (first - lo[0]), n * sizeof(float));
}

#else

int comm_init(Comm *c, int *argc, char ***argv, PtError *e) {
    *c = (Comm){.timeout_s = 600};
    int provided;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return pt_fail(e, "MPI_Init failed");
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->world);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &c->local_rank);
    MPI_Comm_free(&node);
    if (c->world > 1) {
        c->piece_floats = PIECE_FLOATS;
        c->piece = xmalloc(c->piece_floats * sizeof(float), "ring receive buffer");
    }
    return 0;
}

void comm_finalize(Comm *c) {
    free(c->piece);
    MPI_Finalize();
    *c = (Comm){0};
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Waits for n requests; peers[i] is the rank request i talks to. Past the
// timeout this rank ends the run (mpirun then ends the others), naming the
// rank it still waits for. Polls, so the wait is a loop this process owns.
static void wait_all(Comm *c, MPI_Request *req, const int *peers, int n, const char *what) {
    double start = seconds();
    for (long spins = 0;; spins++) {
        int done;
        MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (done) {
            c->seconds += seconds() - start;
            return;
        }
        if (spins > 1000) {   // past the first microseconds, do not hog the core
            struct timespec nap = {0, 50000};
            nanosleep(&nap, NULL);
        }
        if (seconds() - start > c->timeout_s) {
            int lost = -1;
            for (int i = 0; i < n && lost < 0; i++) {
                int flag;
                MPI_Test(&req[i], &flag, MPI_STATUS_IGNORE);
                if (!flag) lost = peers[i];
            }
            fprintf(stderr, "pocket: rank %d: %s has waited %.0f s for rank %d, which is lost or hung; ending the run "
                            "(the next start resumes from the last checkpoint)\n", c->rank, what, c->timeout_s, lost);
            fflush(stderr);
            _exit(3);
        }
    }
}

// One exchange of the ring: n_send floats to the next rank, n_recv from the
// previous one into recv. Every rank makes the same number of exchanges (a
// count of 0 is a message too), so messages pair up in order.
static void ring_step(Comm *c, const void *send, size_t n_send, void *recv, size_t n_recv, MPI_Datatype type,
                      const char *what) {
    const int next = (c->rank + 1) % c->world, prev = (c->rank + c->world - 1) % c->world;
    MPI_Request req[2];
    const int peers[2] = {next, prev};
    int size;
    MPI_Type_size(type, &size);
    c->bytes += (double)n_send * size;
    MPI_Isend(send, (int)n_send, type, next, 1, MPI_COMM_WORLD, &req[0]);
    MPI_Irecv(recv, (int)n_recv, type, prev, 1, MPI_COMM_WORLD, &req[1]);
    wait_all(c, req, peers, 2, what);
}

static size_t largest_shard(const Comm *c, const size_t *lo, const size_t *hi) {
    size_t most = 0;
    for (int r = 0; r < c->world; r++) most = hi[r] - lo[r] > most ? hi[r] - lo[r] : most;
    return most;
}

// The part of a shard of n floats that the piece at `off` covers.
static size_t piece_len(size_t n, size_t off, size_t piece) { return off >= n ? 0 : n - off < piece ? n - off : piece; }

static int mod(int a, int w) { return (a % w + w) % w; }

// In step k rank r passes shard (r - k - 1) on and adds what it receives into
// shard (r - k - 2); after world - 1 steps it holds the sum of shard r, begun
// by rank r + 1 and finished by r itself. A shard goes in pieces.
void comm_reduce_scatter(Comm *c, float *buf, const size_t *lo, const size_t *hi, const char *what) {
    const int W = c->world;
    const size_t most = largest_shard(c, lo, hi), P = c->piece_floats;
    for (int k = 0; k < W - 1; k++) {
        const int s = mod(c->rank - k - 1, W), r = mod(c->rank - k - 2, W);
        for (size_t off = 0; off < most; off += P) {
            const size_t n_send = piece_len(hi[s] - lo[s], off, P), n_recv = piece_len(hi[r] - lo[r], off, P);
            ring_step(c, buf + lo[s] + off, n_send, c->piece, n_recv, MPI_FLOAT, what);
            float *dst = buf + lo[r] + off;
            const double t0 = seconds();
            for (size_t i = 0; i < n_recv; i++) dst[i] = c->piece[i] + dst[i];
            c->seconds += seconds() - t0;
        }
    }
}

// In step k rank r passes on shard (r - k), which it owns or received in the
// step before, and receives shard (r - k - 1) in place, in pieces of 2^30
// bytes (MPI counts are ints).
void comm_allgather(Comm *c, void *buf, size_t size, const size_t *lo, const size_t *hi, const char *what) {
    const int W = c->world;
    unsigned char *bytes = buf;
    const size_t most = largest_shard(c, lo, hi) * size, P = (size_t)1 << 30;
    for (int k = 0; k < W - 1; k++) {
        const int s = mod(c->rank - k, W), r = mod(c->rank - k - 1, W);
        for (size_t off = 0; off < most; off += P)
            ring_step(c, bytes + lo[s] * size + off, piece_len((hi[s] - lo[s]) * size, off, P),
                      bytes + lo[r] * size + off, piece_len((hi[r] - lo[r]) * size, off, P), MPI_BYTE, what);
    }
}

void comm_sum_doubles(Comm *c, double *v, int n, const char *what) {
    if (c->world == 1) return;
    enum { W = COMM_SUM_MAX };
    if (n > W) die("comm_sum_doubles: %d values, at most %d", n, W);
    // Everyone's values go round the ring; each rank then adds them in rank order.
    double *all = xcalloc((size_t)c->world * W, sizeof(double), "rank values");
    memcpy(all + (size_t)c->rank * W, v, (size_t)n * sizeof(double));
    for (int k = 0; k < c->world - 1; k++) {
        const int s = mod(c->rank - k, c->world), r = mod(c->rank - k - 1, c->world);
        ring_step(c, all + (size_t)s * W, W, all + (size_t)r * W, W, MPI_DOUBLE, what);
    }
    for (int i = 0; i < n; i++) {
        double sum = 0;
        for (int r = 0; r < c->world; r++) sum += all[(size_t)r * W + i];
        v[i] = sum;
    }
    free(all);
}

void comm_broadcast(Comm *c, void *bytes, size_t n, int root, const char *what) {
    if (c->world == 1) return;
    if (c->rank == root) {
        MPI_Request *req = xmalloc((size_t)c->world * sizeof *req, "broadcast requests");
        int *peers = xmalloc((size_t)c->world * sizeof *peers, "broadcast peers"), m = 0;
        for (int r = 0; r < c->world; r++)
            if (r != root) {
                peers[m] = r;
                MPI_Isend(bytes, (int)n, MPI_BYTE, r, 4, MPI_COMM_WORLD, &req[m++]);
            }
        wait_all(c, req, peers, m, what);
        free(req);
        free(peers);
    } else {
        MPI_Request req;
        MPI_Irecv(bytes, (int)n, MPI_BYTE, root, 4, MPI_COMM_WORLD, &req);
        wait_all(c, &req, &root, 1, what);
    }
}

void comm_gather_range(Comm *c, const float *shard, const size_t *lo, const size_t *hi, size_t first, size_t n,
                       float *out, const char *what) {
    const size_t last = first + n;
    if (c->rank == 0) {
        MPI_Request *req = xmalloc((size_t)c->world * sizeof *req, "gather requests");
        int *peers = xmalloc((size_t)c->world * sizeof *peers, "gather peers"), m = 0;
        for (int r = 0; r < c->world; r++) {
            size_t a = lo[r] > first ? lo[r] : first, b = hi[r] < last ? hi[r] : last;
            if (a >= b) continue;
            if (r == 0) {   // (may be the same floats: memmove)
                memmove(out + (a - first), shard + (a - lo[0]), (b - a) * sizeof(float));
                continue;
            }
            peers[m] = r;
            MPI_Irecv(out + (a - first), (int)(b - a), MPI_FLOAT, r, 5, MPI_COMM_WORLD, &req[m++]);
        }
        wait_all(c, req, peers, m, what);
        free(req);
        free(peers);
    } else {
        size_t a = lo[c->rank] > first ? lo[c->rank] : first, b = hi[c->rank] < last ? hi[c->rank] : last;
        if (a >= b) return;
        MPI_Request req;
        const int root = 0;
        MPI_Isend(shard + (a - lo[c->rank]), (int)(b - a), MPI_FLOAT, 0, 5, MPI_COMM_WORLD, &req);
        wait_all(c, &req, &root, 1, what);
    }
}

#endif
