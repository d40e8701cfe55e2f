// matmul_bf16.c: the MATMUL_BF16 products. Same three products as matmul.c
// (forward out = inp W^T, dinp += dout W, dW += dout^T inp), all mapped onto
// one GEMM C (+)= A B with a row-major C, but both operands are always packed:
// the packing rounds them to bf16 and lays k out in pairs for the kernel
// (matmul_kernels.h), so no operand is ever read in place and no transposed
// forward is needed (the packed W panels of the classifier are private to
// the task that reads them).
//
// Blocking: K in blocks of at most KC_MAX (at T <= 1024 one block, so C is
// written once, for every product but the down projection's forward, K =
// 2560, and the classifier's dX, K = 65536); the longer of M and N is split
// into tasks (TASKS_PER_THREAD per thread, handed out dynamically), each of
// which packs its own part of that operand ("private", in blocks that stay in
// L2); the other operand ("shared") is packed once by the whole team, a chunk
// of at most SHARED_MAX rows or columns over a span of k blocks at a time.
#include <omp.h>
#include <string.h>
#include "ops.h"
#include "matmul_kernels.h"
#include "../../util/util.h"

// Sizes for 48 KiB L1d and 1 MiB L2 per core (Zen 4/5; similar elsewhere).
#define KC_MAX 1024              // k block: an 8 x 1024 bf16 A panel is 16 KiB
#define PRIV_ROWS 128            // private A block (split over M): 128 x 1024 bf16 = 256 KiB
#define PRIV_COLS 256            // private B block (split over N): 256 x 1024 bf16 = 512 KiB
#define SHARED_COLS_L2 256       // shared B columns swept per A block (split over M): 512 KiB
#define SHARED_MAX 1024
#define SHARED_GROUP 8           // shared panels one thread packs in one call (long source runs)
#define SHARED_SPAN_BLOCKS 8
#define SHARED_SPAN_BYTES (4 << 20)
#define TASKS_PER_THREAD 4


typedef struct {
    const MatmulBf16Kernel *kern;
    int M, N, K, kc;          // kc: the k block, even
    MatrixView A, B;                // A: M x K, B: K x N
    float *c;
    ptrdiff_t ldc;            // C(i, j) = c[i*ldc + j]
    int accumulate;
} Gemm;

static int round_even(int k) { return k + (k & 1); }

// A panels for rows [i0, i0+m) x k [k0, k0+kc), g->kc * MR apart.
static void pack_a(const Gemm *g, uint16_t *dst, int i0, int m, int k0, int kc) {
    g->kern->pack(dst, g->kern->mr, (ptrdiff_t)g->kc * g->kern->mr,
                  g->A.p + (ptrdiff_t)i0 * g->A.rs + (ptrdiff_t)k0 * g->A.cs, g->A.rs, g->A.cs, m, kc);
}

// B panels for k [k0, k0+kc) x columns [j0, j0+n), g->kc * NR apart.
static void pack_b(const Gemm *g, uint16_t *dst, int k0, int kc, int j0, int n) {
    g->kern->pack(dst, g->kern->nr, (ptrdiff_t)g->kc * g->kern->nr,
                  g->B.p + (ptrdiff_t)k0 * g->B.rs + (ptrdiff_t)j0 * g->B.cs, g->B.cs, g->B.rs, n, kc);
}

// Tiles for rows [i0, i1) x columns [j0, j1) of one k block of kc values,
// with the A panel of row i at a_panels + (i - i0)*g->kc and the B panel of
// column j at b_panels + (j - j0)*g->kc (panels are g->kc long; a short last
// block fills the start of each).
static void tiles(const Gemm *g, const uint16_t *a_panels, int i0, int i1, const uint16_t *b_panels, int j0,
                  int j1, int kc, int accumulate) {
    const int MR = g->kern->mr, NR = g->kern->nr;
    MatmulBf16Tile t = {.kc = round_even(kc), .c_rs = g->ldc, .accumulate = accumulate};
    for (int i = i0; i < i1; i += MR) {
        t.mr = i1 - i < MR ? i1 - i : MR;
        t.a = a_panels + (ptrdiff_t)(i - i0) * g->kc;
        for (int j = j0; j < j1; j += NR) {
            t.nr = j1 - j < NR ? j1 - j : NR;
            t.b = b_panels + (ptrdiff_t)(j - j0) * g->kc;
            t.c = g->c + (ptrdiff_t)i * g->ldc + j;
            g->kern->tile(&t);
        }
    }
}

static size_t line_up(size_t bytes) { return (bytes + 63) / 64 * 64; }

// The shared panels take at most a span of SHARED_SPAN_BYTES or one k block
// of SHARED_MAX rows (plus a tile of rounding); each thread a private block.
size_t matmul_bf16_workspace_bytes(const MatmulBf16Kernel *kern, int threads) {
    if (kern->on_fp32) return matmul_fp32_workspace_bytes(kern->on_fp32, threads);
    const size_t block = line_up((size_t)(SHARED_MAX + 64) * KC_MAX * sizeof(uint16_t));
    const int priv = PRIV_COLS > PRIV_ROWS ? PRIV_COLS : PRIV_ROWS;
    return (block > SHARED_SPAN_BYTES ? block : SHARED_SPAN_BYTES) +
           (size_t)threads * line_up((size_t)priv * KC_MAX * sizeof(uint16_t));
}

static void gemm(Device *d, const MatmulBf16Kernel *kern, int M, int N, int K, MatrixView A, MatrixView B, float *c,
                 ptrdiff_t ldc, int accumulate) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!accumulate)
            for (int i = 0; i < M; i++) memset(c + (ptrdiff_t)i * ldc, 0, (size_t)N * sizeof(float));
        return;
    }
    const int MR = kern->mr, NR = kern->nr;
    const int kblocks = (K + KC_MAX - 1) / KC_MAX;
    Gemm g = {.kern = kern, .M = M, .N = N, .K = K, .kc = round_even((K + kblocks - 1) / kblocks), .A = A, .B = B,
              .c = c, .ldc = ldc, .accumulate = accumulate};
    const int kc2 = g.kc;

    // Split the longer dimension (the shorter operand is the one every task
    // reads), unless it has too few tiles for the threads.
    const int m_panels = (M + MR - 1) / MR, n_panels = (N + NR - 1) / NR;
    int threads = omp_in_parallel() ? 1 : d->threads;
    if (2.0 * M * N * K < 1e6) threads = 1;
    int split_n = N > M;
    if (split_n && n_panels < threads && m_panels > n_panels) split_n = 0;
    if (!split_n && m_panels < threads && n_panels > m_panels) split_n = 1;
    const int parts = split_n ? n_panels : m_panels;
    if (threads > parts) threads = parts;
    int tasks = threads > 1 ? threads * TASKS_PER_THREAD : 1;
    if (tasks > parts) tasks = parts;
    const int base = parts / tasks, extra = parts % tasks;

    const int shared_len = split_n ? M : N, shared_tile = split_n ? MR : NR;
    const int chunk = shared_len <= SHARED_MAX ? shared_len : SHARED_MAX / shared_tile * shared_tile;
    const size_t block_elems = (size_t)((chunk + shared_tile - 1) / shared_tile) * shared_tile * kc2;
    int span_blocks = (int)(SHARED_SPAN_BYTES / (block_elems * sizeof(uint16_t)));
    if (span_blocks < 1) span_blocks = 1;
    if (span_blocks > SHARED_SPAN_BLOCKS) span_blocks = SHARED_SPAN_BLOCKS;
    if (span_blocks > kblocks) span_blocks = kblocks;
    const size_t mark = dev_scratch_mark(d);
    uint16_t *shared = dev_scratch(d, block_elems * span_blocks * sizeof(uint16_t), "bf16 matmul shared panels");
    const int priv_len = split_n ? PRIV_COLS / NR * NR : PRIV_ROWS / MR * MR;
    const size_t priv_bytes = line_up((size_t)priv_len * kc2 * sizeof(uint16_t));
    unsigned char *priv_area = dev_scratch(d, priv_bytes * threads, "bf16 matmul private panels");

    #pragma omp parallel num_threads(threads) if (threads > 1)
    {
        uint16_t *priv = (uint16_t *)(priv_area + priv_bytes * omp_get_thread_num());
        for (int span = 0; span < kblocks; span += span_blocks) {
            const int span_end = span + span_blocks < kblocks ? span + span_blocks : kblocks;
            for (int s0 = 0; s0 < shared_len; s0 += chunk) {
                const int len = shared_len - s0 < chunk ? shared_len - s0 : chunk;
                const int panels = (len + shared_tile - 1) / shared_tile;
                const int groups = (panels + SHARED_GROUP - 1) / SHARED_GROUP;
                #pragma omp for schedule(static) collapse(2)
                for (int kb = span; kb < span_end; kb++)
                    for (int q = 0; q < groups; q++) {
                        const int k0 = kb * g.kc, kc = K - k0 < g.kc ? K - k0 : g.kc;
                        const int first = s0 + q * SHARED_GROUP * shared_tile;
                        const int n = s0 + len - first < SHARED_GROUP * shared_tile ? s0 + len - first
                                                                                     : SHARED_GROUP * shared_tile;
                        uint16_t *p = shared + (size_t)(kb - span) * block_elems +
                                      (size_t)q * SHARED_GROUP * shared_tile * kc2;
                        if (split_n) pack_a(&g, p, first, n, k0, kc);
                        else pack_b(&g, p, k0, kc, first, n);
                    }   // implicit barrier: the shared panels are complete
                #pragma omp for schedule(dynamic, 1)
                for (int task = 0; task < tasks; task++) {
                    const int p0 = task * base + (task < extra ? task : extra), p1 = p0 + base + (task < extra);
                    const int lo = p0 * (split_n ? NR : MR), hi_raw = p1 * (split_n ? NR : MR);
                    const int hi = hi_raw < (split_n ? N : M) ? hi_raw : (split_n ? N : M);
                    for (int kb = span; kb < span_end; kb++) {
                        const int k0 = kb * g.kc, kc = K - k0 < g.kc ? K - k0 : g.kc;
                        const int acc = accumulate || k0 > 0;
                        const uint16_t *sh = shared + (size_t)(kb - span) * block_elems;
                        for (int b0 = lo; b0 < hi; b0 += priv_len) {
                            const int b1 = hi - b0 < priv_len ? hi : b0 + priv_len;
                            if (split_n) {
                                // Private B block in L2; the shared A panels stream past it.
                                pack_b(&g, priv, k0, kc, b0, b1 - b0);
                                tiles(&g, sh, s0, s0 + len, priv, b0, b1, kc, acc);
                            } else {
                                // Private A block; the shared B panels in L2-sized column blocks.
                                pack_a(&g, priv, b0, b1 - b0, k0, kc);
                                const int cols = SHARED_COLS_L2 / NR * NR;
                                for (int j = s0; j < s0 + len; j += cols)
                                    tiles(&g, priv, b0, b1, sh + (size_t)(j - s0) * kc2, j,
                                          s0 + len - j < cols ? s0 + len : j + cols, kc, acc);
                            }
                        }
                    }
                }   // implicit barrier: the shared buffer may be refilled
            }
        }
    }
    dev_scratch_release(d, mark);
}

void matmul_forward_bf16(Device *d, const MatmulBf16Kernel *k, float *out, const float *inp, const float *W, int N,
                         int C, int OC) {
    MatrixView A = {inp, C, 1}, B = {W, 1, C};   // B(c, o) = W[o, c]
    gemm(d, k, N, OC, C, A, B, out, OC, 0);
}

void matmul_backward_bf16(Device *d, const MatmulBf16Kernel *k, float *dinp, float *dW, const float *dout,
                          const float *inp, const float *W, int N, int C, int OC) {
    if (dinp) {
        MatrixView A = {dout, OC, 1}, B = {W, C, 1};
        gemm(d, k, N, C, OC, A, B, dinp, C, 1);
    }
    if (dW) {
        MatrixView A = {dout, 1, OC}, B = {inp, C, 1};   // A(o, n) = dout[n, o]
        gemm(d, k, OC, C, N, A, B, dW, C, 1);
    }
}
