// matmul.c: out[N,OC] = inp[N,C] W[OC,C]^T and its backward, as one blocked
// GEMM driver C (+)= A B that all three products map onto:
//   forward   out = inp W^T      (or out^T = W inp^T when OC >> N)
//   backward  dinp += dout W,    dW += dout^T inp
// A (M x K) is the broadcast side of the register tile, B (K x N) the vector
// side; each is read in place when its layout allows and packed into
// contiguous panels otherwise. K is cut into blocks of at most KC_MAX so a
// B block stays in L2 while it is reused by every tile row; within a block the
// loops run tile row (A panel in L1) outside tile column. Threads share out
// tasks along M or N (see gemm()). Packing buffers come from the device
// workspace; matmul_workspace_bytes bounds what any shape takes.
#include <omp.h>
#include <string.h>
#include "ops.h"
#include "matmul_kernels.h"
#include "../../util/util.h"

#define KC_MAX 512   // k block: an 8 x 512 A panel is 16 KiB (half of L1d)
#define KC_MAX_CT 1024   // k block when C is column-major (see gemm())
#define NC_MAX 256   // columns per B block: 512 x 256 floats = 512 KiB (half of L2)
#define MA_MAX 1024  // rows per packed A block: 1024 x 512 floats = 2 MiB (L3)


typedef struct {
    const MatmulKernel *kern;
    int M, N, K;
    MatrixView A, B;               // A: M x K, B: K x N
    float *c;
    ptrdiff_t c_rs, c_cs;    // C(i, j) = c[i*c_rs + j*c_cs]
    int accumulate;
    int kc;                  // k block (K split into equal blocks <= KC_MAX)
    int a_in_place, b_in_place;
    int bf16;                // operands rounded to bf16 in the packs (never read in place)
} Gemm;

// Largest number of cache lines that land in one set when `rows` rows of
// `row_bytes` bytes, `stride_bytes` apart, are cached in a cache with `sets`
// sets of 64-byte lines. Strides near a multiple of the set span (4 KiB for
// L1d) pile every row onto the same sets and thrash an in-place read.
#define MAX_SETS 2048   // L2's sets (see gemm())
static int worst_set_load(ptrdiff_t stride_bytes, int rows, ptrdiff_t row_bytes, int sets) {
    int count[MAX_SETS] = {0};
    int worst = 0;
    for (int r = 0; r < rows; r++) {
        ptrdiff_t first = r * stride_bytes / 64, last = (r * stride_bytes + row_bytes - 1) / 64;
        for (ptrdiff_t line = first; line <= last; line++) {
            int s = (int)(line % sets);
            if (++count[s] > worst) worst = count[s];
        }
    }
    return worst;
}

// In place is worthwhile unless the rows collide in the cache: allow two
// lines per set above an even spread.
static int spread_ok(ptrdiff_t stride_bytes, int rows, ptrdiff_t row_bytes, int sets) {
    ptrdiff_t lines = (ptrdiff_t)rows * ((row_bytes + 63) / 64 + 1);
    int even = (int)((lines + sets - 1) / sets);
    return worst_set_load(stride_bytes, rows, row_bytes, sets) <= even + 2;
}

// x rounded to bf16 and widened back: the bits of matmul_bf16_round,
// branch-free so the loops below vectorise.
static inline float bf16_rounded(float x) {
    uint32_t u, r;
    memcpy(&u, &x, sizeof u);
    r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;                          // to nearest even
    r = (u & 0x7f800000u) == 0 ? u & 0x80000000u : r;                             // zero, subnormal: signed zero
    r = (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u) & 0xffff0000u : r;   // NaN, made quiet
    memcpy(&x, &r, sizeof x);
    return x;
}

// Copies n floats; n is the tile size (a handful of values), so a loop the
// compiler unrolls beats a libc memcpy call.
static inline void copy_small(float *dst, const float *src, int n) {
    for (int i = 0; i < n; i++) dst[i] = src[i];
}

// Rounds n packed floats to bf16 in place, after a pack that did not (one
// vectorised pass over the panels, still in L1 or L2 from the pack, is
// cheaper than rounding the pack's few-float pieces one by one).
static void round_to_bf16(float *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = bf16_rounded(p[i]);
}

// Transposing copies run over k in chunks of KT so the destination chunk
// (KT x tile width floats) stays in L1 while the source rows stream.
#define KT 64
#define PF_ROWS 8    // rows ahead that a strided copy prefetches

// Packs rows [i0, i0+mc) x k [k0, k0+kc) of A as consecutive panels of MR
// rows, each laid out p[k*MR + r]; rows past mc in the last panel are zero.
// Returns 1 when it rounded to bf16 on the way (if asked: the kernel's
// vectorised transposing pack does), 0 when the caller still has to.
static int pack_a_copy(float *p, const MatmulKernel *kern, MatrixView A, int i0, int mc, int k0, int kc, int bf16) {
    const int MR = kern->mr;
    const int panels = (mc + MR - 1) / MR;
    if (A.rs == 1) {
        // Columns of A are contiguous: copy MR-row pieces of each k column.
        for (int k = 0; k < kc; k++) {
            const float *src = A.p + (ptrdiff_t)(k0 + k) * A.cs + i0;
            // The k rows are far apart; fetch a few rows ahead so the copy
            // does not wait on each row's first line.
            if (k + PF_ROWS < kc)
                for (int i = 0; i < mc; i += 16) __builtin_prefetch(src + PF_ROWS * A.cs + i);
            for (int q = 0; q < panels; q++) {
                const int mr = mc - q * MR < MR ? mc - q * MR : MR;
                float *dst = p + (ptrdiff_t)q * kc * MR + (ptrdiff_t)k * MR;
                if (mr == 8) copy_small(dst, src + q * MR, 8);
                else copy_small(dst, src + q * MR, mr);
                for (int r = mr; r < MR; r++) dst[r] = 0.0f;
            }
        }
        return 0;
    }
    for (int q = 0; q < panels; q++) {
        const int mr = mc - q * MR < MR ? mc - q * MR : MR;
        float *panel = p + (ptrdiff_t)q * kc * MR;
        if (A.cs == 1 && kern->pack_t) {
            kern->pack_t(panel, MR, A.p + (ptrdiff_t)(i0 + q * MR) * A.rs + k0, A.rs, mr, kc, bf16);
            continue;
        }
        for (int kt = 0; kt < kc; kt += KT) {
            const int kn = kc - kt < KT ? kc - kt : KT;
            for (int r = 0; r < mr; r++) {
                const float *src = A.p + (ptrdiff_t)(i0 + q * MR + r) * A.rs + (ptrdiff_t)(k0 + kt) * A.cs;
                float *dst = panel + (ptrdiff_t)kt * MR + r;
                if (A.cs == 1)
                    for (int k = 0; k < kn; k++) dst[(ptrdiff_t)k * MR] = src[k];
                else
                    for (int k = 0; k < kn; k++) dst[(ptrdiff_t)k * MR] = src[(ptrdiff_t)k * A.cs];
            }
        }
        for (int r = mr; r < MR; r++)
            for (int k = 0; k < kc; k++) panel[(ptrdiff_t)k * MR + r] = 0.0f;
    }
    return A.cs == 1 && kern->pack_t;
}

static void pack_a_block(float *p, const Gemm *g, int i0, int mc, int k0, int kc) {
    if (!pack_a_copy(p, g->kern, g->A, i0, mc, k0, kc, g->bf16) && g->bf16)
        round_to_bf16(p, (size_t)(mc + g->kern->mr - 1) / g->kern->mr * g->kern->mr * kc);
}

// Packs k [k0, k0+kc) x columns [j0, j0+nr) of B as one panel p[k*NR + j],
// columns beyond nr zero.
// Returns 1 when it rounded to bf16 on the way, as pack_a_copy.
static int pack_b_copy(float *p, const MatmulKernel *kern, MatrixView B, int k0, int kc, int j0, int nr, int bf16) {
    const int NR = kern->nr;
    if (B.cs == 1) {
        for (int k = 0; k < kc; k++) {
            float *dst = p + (ptrdiff_t)k * NR;
            const float *src = B.p + (ptrdiff_t)(k0 + k) * B.rs + j0;
            if (nr == 32) copy_small(dst, src, 32);
            else if (nr == 16) copy_small(dst, src, 16);
            else copy_small(dst, src, nr);
            for (int j = nr; j < NR; j++) dst[j] = 0.0f;
        }
        return 0;
    }
    if (B.rs == 1 && kern->pack_t) {
        kern->pack_t(p, NR, B.p + (ptrdiff_t)j0 * B.cs + k0, B.cs, nr, kc, bf16);
        return 1;
    }
    // Column j of B is a strided (usually contiguous) row in memory.
    for (int kt = 0; kt < kc; kt += KT) {
        const int kn = kc - kt < KT ? kc - kt : KT;
        for (int j = 0; j < nr; j++) {
            const float *src = B.p + (ptrdiff_t)(k0 + kt) * B.rs + (ptrdiff_t)(j0 + j) * B.cs;
            float *dst = p + (ptrdiff_t)kt * NR + j;
            if (B.rs == 1)
                for (int k = 0; k < kn; k++) dst[(ptrdiff_t)k * NR] = src[k];
            else
                for (int k = 0; k < kn; k++) dst[(ptrdiff_t)k * NR] = src[(ptrdiff_t)k * B.rs];
        }
    }
    if (nr < NR)
        for (int k = 0; k < kc; k++)
            for (int j = nr; j < NR; j++) p[(ptrdiff_t)k * NR + j] = 0.0f;
    return 0;
}

static void pack_b_panel(float *p, const Gemm *g, int k0, int kc, int j0, int nr) {
    if (!pack_b_copy(p, g->kern, g->B, k0, kc, j0, nr, g->bf16) && g->bf16) round_to_bf16(p, (size_t)g->kern->nr * kc);
}

// Where the tiles find A and B for one k block. The operand that is not
// split between tasks ("shared") may have been packed once for everyone.
typedef struct {
    int pc, kc, accumulate;
    int i0, j0;                  // first row / column of the shared chunk
    const float *a_shared;       // packed A rows from i0 (split over N), or NULL
    const float *b_shared;       // packed B columns from j0 (split over M), or NULL
} KBlock;

// Per-thread packing space.
typedef struct {
    float *a;               // packed A block, up to MA_MAX rows
    float *a_edge;          // a short last panel of an in-place A
    float *b;               // packed B block, up to NC_MAX columns
    const float **bpanel;   // where each B panel of the current block lives
    ptrdiff_t *bstride;     // and its row stride (NR if packed)
} Scratch;

static size_t line_up(size_t bytes) { return (bytes + 63) / 64 * 64; }

// One thread's packing space for M rows and k blocks of kc, carved from
// `base` when given; returns its size. Every float a tile reads is written by
// a pack first (padding included), so the buffers need no initialisation.
static size_t thread_scratch(Scratch *s, unsigned char *base, const MatmulKernel *kern, int M, int kc,
                             int a_packed_by_tasks) {
    const int MR = kern->mr, NR = kern->nr, nc = NC_MAX / NR * NR;
    const int ma = M < MA_MAX ? (M + MR - 1) / MR * MR : MA_MAX / MR * MR;
    const size_t sizes[5] = {a_packed_by_tasks ? (size_t)ma * kc * sizeof(float) : 0, (size_t)MR * kc * sizeof(float),
                             (size_t)nc * kc * sizeof(float), (size_t)(nc / NR) * sizeof(*s->bpanel),
                             (size_t)(nc / NR) * sizeof(*s->bstride)};
    void **parts[5] = {(void **)&s->a, (void **)&s->a_edge, (void **)&s->b, (void **)&s->bpanel, (void **)&s->bstride};
    size_t used = 0;
    for (int i = 0; i < 5; i++) {
        if (base) *parts[i] = sizes[i] ? base + used : NULL;
        used += line_up(sizes[i]);
    }
    return used;
}

// Rows [i_begin, i_end) x columns [j_begin, j_end) of C for one k block.
// Loops: A block (packed here unless shared or in place) > B block of NC_MAX
// columns (likewise) > tile row (A panel in L1) > tile column (B in L2).
static void gemm_block(const Gemm *g, const KBlock *kb, const Scratch *s, int i_begin, int i_end,
                       int j_begin, int j_end) {
    const int MR = g->kern->mr, NR = g->kern->nr, kc = kb->kc, pc = kb->pc;
    const int a_packed_here = !g->a_in_place && !kb->a_shared;
    const int ma_max = a_packed_here ? MA_MAX / MR * MR : i_end - i_begin, nc_max = NC_MAX / NR * NR;
    for (int ia = i_begin; ia < i_end; ia += ma_max) {
        const int ma = i_end - ia < ma_max ? i_end - ia : ma_max;
        if (a_packed_here) pack_a_block(s->a, g, ia, ma, pc, kc);
        for (int jc = j_begin; jc < j_end; jc += nc_max) {
            const int nc = j_end - jc < nc_max ? j_end - jc : nc_max;
            for (int jr = 0; jr < nc; jr += NR) {
                const int nr = nc - jr < NR ? nc - jr : NR, q = jr / NR;
                if (kb->b_shared) {
                    s->bpanel[q] = kb->b_shared + (ptrdiff_t)(jc + jr - kb->j0) * kc;
                    s->bstride[q] = NR;
                } else if (g->b_in_place && nr == NR) {
                    s->bpanel[q] = g->B.p + (ptrdiff_t)pc * g->B.rs + (jc + jr);
                    s->bstride[q] = g->B.rs;
                } else {
                    float *p = s->b + (ptrdiff_t)jr * kc;
                    pack_b_panel(p, g, pc, kc, jc + jr, nr);
                    s->bpanel[q] = p;
                    s->bstride[q] = NR;
                }
            }
            for (int ir = 0; ir < ma; ir += MR) {
                const int mr = ma - ir < MR ? ma - ir : MR;
                MatmulTile t = {.kc = kc, .c_rs = g->c_rs, .c_cs = g->c_cs, .mr = mr,
                                .accumulate = kb->accumulate, .a_rs = 1, .a_ks = MR};
                if (kb->a_shared) {
                    t.a = kb->a_shared + (ptrdiff_t)(ia + ir - kb->i0) * kc;
                } else if (a_packed_here) {
                    t.a = s->a + (ptrdiff_t)ir * kc;
                } else if (mr == MR) {
                    t.a = g->A.p + (ptrdiff_t)(ia + ir) * g->A.rs + pc;
                    t.a_rs = g->A.rs;
                    t.a_ks = 1;
                } else {
                    // Short last panel of an in-place A: copied and zero-padded
                    // so no row past M is read.
                    pack_a_block(s->a_edge, g, ia + ir, mr, pc, kc);
                    t.a = s->a_edge;
                }
                for (int jr = 0; jr < nc; jr += NR) {
                    t.nr = nc - jr < NR ? nc - jr : NR;
                    t.b = s->bpanel[jr / NR];
                    t.b_ks = s->bstride[jr / NR];
                    t.c = g->c + (ptrdiff_t)(ia + ir) * g->c_rs + (ptrdiff_t)(jc + jr) * g->c_cs;
                    g->kern->tile(&t);
                }
            }
        }
    }
}

// C (+)= A B over OpenMP threads. One dimension (M or N) is split into tasks
// of whole tiles, TASKS_PER_THREAD per thread (few, because each task reads
// all of the other operand), handed out dynamically: on a quiet machine each
// thread ends up with an even share, and when another process takes part of
// a core the other thread picks up the slack instead of waiting at the
// barrier. The other ("shared") operand is read in place, or packed by all
// threads together, in chunks of at most SHARED_MAX rows/columns by
// SHARED_SPAN_BLOCKS k blocks and SHARED_SPAN_BYTES, so the shared buffer
// stays in L3.
#define TASKS_PER_THREAD 4
#define SHARED_MAX 1024
#define SHARED_SPAN_BLOCKS 8
#define SHARED_SPAN_BYTES (4 << 20)

// The shared panels take at most a span of SHARED_SPAN_BYTES or one k block
// of SHARED_MAX rows (plus a tile of rounding), whichever is larger.
size_t matmul_fp32_workspace_bytes(const MatmulKernel *kern, int threads) {
    Scratch s;
    const size_t block = line_up((size_t)(SHARED_MAX + 64) * KC_MAX_CT * sizeof(float));
    return (block > SHARED_SPAN_BYTES ? block : SHARED_SPAN_BYTES) +
           (size_t)threads * thread_scratch(&s, NULL, kern, MA_MAX, KC_MAX_CT, 1);
}

// K is cut into equal blocks of at most KC_MAX floats, KC_MAX_CT when C is
// column-major: such a C is written through a transpose, and every extra k
// block reads it back, so K is taken in one block when it is not too long.
int matmul_k_blocks(int K, int c_col_major, int *kc) {
    const int kc_max = c_col_major && K <= KC_MAX_CT ? KC_MAX_CT : KC_MAX;
    const int kblocks = (K + kc_max - 1) / kc_max;
    *kc = (K + kblocks - 1) / kblocks;
    return kblocks;
}

static void gemm(Device *d, const MatmulKernel *kern, int M, int N, int K, MatrixView A, MatrixView B, float *c,
                 ptrdiff_t c_rs, ptrdiff_t c_cs, int accumulate, int bf16) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!accumulate)
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) c[(ptrdiff_t)i * c_rs + (ptrdiff_t)j * c_cs] = 0.0f;
        return;
    }
    const int MR = kern->mr, NR = kern->nr;
    Gemm g = {.kern = kern, .M = M, .N = N, .K = K, .A = A, .B = B, .c = c, .c_rs = c_rs,
              .c_cs = c_cs, .accumulate = accumulate, .bf16 = bf16};
    const int kblocks = matmul_k_blocks(K, c_cs != 1, &g.kc);
    // L1d: 32 KiB of 64 sets; L2: 1 MiB of 2048 sets (Zen 4; similar elsewhere).
    g.a_in_place = !bf16 && A.cs == 1 && spread_ok(A.rs * 4, MR, (ptrdiff_t)g.kc * 4, 64);
    g.b_in_place = !bf16 && B.cs == 1 && spread_ok(B.rs * 4, g.kc, (ptrdiff_t)NC_MAX * 4, 2048);

    // Every task reads all of the operand that is not split (all of B when
    // M is split, all of A when N is), so split the longer of M and N: the
    // operand read again and again is then the smaller one. (The classifier's
    // dX, M = 256 rows against W's N = 896 columns, would otherwise stream
    // the whole 65536 x 896 W from memory once per task.) Fall back to the
    // other dimension when this one has too few tiles for the threads.
    const int m_panels = (M + MR - 1) / MR, n_panels = (N + NR - 1) / NR;
    int threads = omp_in_parallel() ? 1 : d->threads;
    if (2.0 * M * N * K < 1e6) threads = 1;   // a fork costs more than it saves
    int split_n = N > M;
    if (split_n && n_panels < threads && m_panels > n_panels) split_n = 0;
    if (!split_n && m_panels < threads && n_panels > m_panels) split_n = 1;
    // A small tile reuses each B row for few A rows, so B streams from L2 at
    // a high rate: such kernels read it from contiguous packed panels when
    // all tasks share it (packed once for all; measured on the AVX2 6 x 16:
    // dX and dW of the wide projections 76-81% -> 86-88% of the peak). Split
    // over N, each task would pack its own columns for few rows: not worth it.
    if (!split_n && kern->pack_shared_b) g.b_in_place = 0;
    const int parts = split_n ? n_panels : m_panels;
    if (threads > parts) threads = parts;
    int tasks = threads > 1 ? threads * TASKS_PER_THREAD : 1;
    if (tasks > parts) tasks = parts;
    const int base = parts / tasks, extra = parts % tasks;   // larger runs first

    // The shared operand, packed by everyone when it cannot be read in place:
    // a chunk of it for a run of k blocks (a "k span") at a time, so that the
    // team meets at a barrier once per span rather than once per k block.
    const int shared_packed = split_n ? !g.a_in_place : !g.b_in_place;
    const int shared_len = split_n ? M : N, shared_tile = split_n ? MR : NR;
    const int chunk = !shared_packed || shared_len < SHARED_MAX ? shared_len : SHARED_MAX / shared_tile * shared_tile;
    const size_t block_floats = (size_t)((chunk + shared_tile - 1) / shared_tile) * shared_tile * g.kc;
    int span_blocks = kblocks;
    if (shared_packed) {
        span_blocks = (int)(SHARED_SPAN_BYTES / (block_floats * sizeof(float)));
        if (span_blocks < 1) span_blocks = 1;
        if (span_blocks > SHARED_SPAN_BLOCKS) span_blocks = SHARED_SPAN_BLOCKS;
        if (span_blocks > kblocks) span_blocks = kblocks;
    }
    const size_t mark = dev_scratch_mark(d);
    float *shared = shared_packed ? dev_scratch(d, block_floats * span_blocks * sizeof(float), "matmul shared panels")
                                  : NULL;
    const int a_packed_by_tasks = !g.a_in_place && !(shared_packed && split_n);
    Scratch sizing;
    const size_t per_thread = thread_scratch(&sizing, NULL, kern, M, g.kc, a_packed_by_tasks);
    unsigned char *thread_area = dev_scratch(d, per_thread * threads, "matmul packing");

    // if(threads > 1): a team of one still binds the worksharing loops below
    // to this region, never to a caller's.
    #pragma omp parallel num_threads(threads) if (threads > 1)
    {
        Scratch s;
        thread_scratch(&s, thread_area + per_thread * omp_get_thread_num(), kern, M, g.kc, a_packed_by_tasks);
        for (int span = 0; span < kblocks; span += span_blocks) {
            const int span_end = span + span_blocks < kblocks ? span + span_blocks : kblocks;
            for (int s0 = 0; s0 < shared_len; s0 += chunk) {
                const int len = shared_len - s0 < chunk ? shared_len - s0 : chunk;
                const int tiles = (len + shared_tile - 1) / shared_tile;
                if (shared_packed) {
                    #pragma omp for schedule(static) collapse(2)
                    for (int kb = span; kb < span_end; kb++)
                        for (int q = 0; q < tiles; q++) {
                            const int pc = kb * g.kc, kc = K - pc < g.kc ? K - pc : g.kc;
                            const int first = s0 + q * shared_tile;
                            const int n = len - q * shared_tile < shared_tile ? len - q * shared_tile : shared_tile;
                            float *p = shared + (size_t)(kb - span) * block_floats + (size_t)q * shared_tile * kc;
                            if (split_n) pack_a_block(p, &g, first, n, pc, kc);
                            else pack_b_panel(p, &g, pc, kc, first, n);
                        }   // implicit barrier: the shared panels are complete
                }
                #pragma omp for schedule(dynamic, 1)
                for (int task = 0; task < tasks; task++) {
                    const int p0 = task * base + (task < extra ? task : extra);
                    const int p1 = p0 + base + (task < extra);
                    for (int kb = span; kb < span_end; kb++) {
                        const int pc = kb * g.kc;
                        KBlock blk = {.pc = pc, .kc = K - pc < g.kc ? K - pc : g.kc,
                                      .accumulate = accumulate || pc > 0,
                                      .i0 = split_n ? s0 : 0, .j0 = split_n ? 0 : s0};
                        const float *mine = shared ? shared + (size_t)(kb - span) * block_floats : NULL;
                        if (split_n) {
                            blk.a_shared = mine;
                            gemm_block(&g, &blk, &s, s0, s0 + len, p0 * NR, p1 * NR < N ? p1 * NR : N);
                        } else {
                            blk.b_shared = mine;
                            gemm_block(&g, &blk, &s, p0 * MR, p1 * MR < M ? p1 * MR : M, s0, s0 + len);
                        }
                    }
                }   // implicit barrier: the shared buffer may be refilled
            }
        }
    }
    dev_scratch_release(d, mark);
}

// ---------------------------------------------------------------- public ops

void matmul_forward_fp32(Device *d, const MatmulKernel *k, float *out, const float *inp, const float *W, int N, int C,
                         int OC, int bf16_operands) {
    if (OC >= 4 * N) {
        // Few rows against many outputs (the classifier chunks): compute
        // out^T = W inp^T so the big W is read in place and only the small
        // inp is transposed into panels; out is written through the tile's
        // strided store.
        MatrixView A = {W, C, 1}, B = {inp, 1, C};
        gemm(d, k, OC, N, C, A, B, out, 1, OC, 0, bf16_operands);
    } else {
        MatrixView A = {inp, C, 1}, B = {W, 1, C};
        gemm(d, k, N, OC, C, A, B, out, OC, 1, 0, bf16_operands);
    }
}

void matmul_backward_fp32(Device *d, const MatmulKernel *k, float *dinp, float *dW, const float *dout,
                          const float *inp, const float *W, int N, int C, int OC, int bf16_operands) {
    if (dinp) {
        MatrixView A = {dout, OC, 1}, B = {W, C, 1};
        gemm(d, k, N, C, OC, A, B, dinp, C, 1, 1, bf16_operands);
    }
    if (dW) {
        MatrixView A = {dout, 1, OC}, B = {inp, C, 1};
        gemm(d, k, OC, C, N, A, B, dW, C, 1, 1, bf16_operands);
    }
}

void matmul_forward(Device *d, float *out, const float *inp, const float *W, int N, int C, int OC, MatmulPrecision p) {
    const CpuKernels *k = cpu_kernels(d);
    if (p != MATMUL_BF16) matmul_forward_fp32(d, k->f32, out, inp, W, N, C, OC, 0);
    else if (k->bf16->on_fp32) matmul_forward_fp32(d, k->bf16->on_fp32, out, inp, W, N, C, OC, 1);
    else matmul_forward_bf16(d, k->bf16, out, inp, W, N, C, OC);
}

void matmul_backward(Device *d, float *dinp, float *dW, const float *dout, const float *inp, const float *W, int N,
                     int C, int OC, MatmulPrecision p) {
    const CpuKernels *k = cpu_kernels(d);
    if (p != MATMUL_BF16) matmul_backward_fp32(d, k->f32, dinp, dW, dout, inp, W, N, C, OC, 0);
    else if (k->bf16->on_fp32) matmul_backward_fp32(d, k->bf16->on_fp32, dinp, dW, dout, inp, W, N, C, OC, 1);
    else matmul_backward_bf16(d, k->bf16, dinp, dW, dout, inp, W, N, C, OC);
}

size_t matmul_workspace_bytes(const Device *d) {
    const CpuKernels *k = cpu_kernels(d);
    size_t f32 = matmul_fp32_workspace_bytes(k->f32, d->threads), bf16 = matmul_bf16_workspace_bytes(k->bf16, d->threads);
    return f32 > bf16 ? f32 : bf16;
}

// ---------------------------------------------------------------- reference

void matmul_forward_ref(double *out, const double *inp, const double *W, int N, int C, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double acc = 0.0;
            for (int c = 0; c < C; c++) acc += inp[(size_t)n * C + c] * W[(size_t)o * C + c];
            out[(size_t)n * OC + o] = acc;
        }
}

void matmul_backward_ref(double *dinp, double *dW, const double *dout, const double *inp, const double *W,
                         int N, int C, int OC) {
    if (dinp)
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                double acc = 0.0;
                for (int o = 0; o < OC; o++) acc += dout[(size_t)n * OC + o] * W[(size_t)o * C + c];
                dinp[(size_t)n * C + c] += acc;
            }
    if (dW)
        for (int o = 0; o < OC; o++)
            for (int c = 0; c < C; c++) {
                double acc = 0.0;
                for (int n = 0; n < N; n++) acc += dout[(size_t)n * OC + o] * inp[(size_t)n * C + c];
                dW[(size_t)o * C + c] += acc;
            }
}
