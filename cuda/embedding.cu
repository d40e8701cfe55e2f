// embedding.cu: out[N,C] = E[tokens[n], :] and its backward dE[tokens[n], :] += dout[n, :].
//
// The backward gathers instead of scattering, so it needs no atomics: the
// token ids are sorted with their row numbers (CUB's radix sort is stable, so
// the rows of one token stay in row order), and one block per distinct token
// adds that token's rows into its dE row in row order, starting from the
// value dE holds. That is the CPU's sum in the CPU's order (embedding.c walks
// the tokens in order for every column), so the result is the CPU's, bit for
// bit, and the same on every run.
#include <cub/cub.cuh>
#include "cuda_impl.cuh"

__global__ void embedding_forward_kernel(float *out, const int *tokens, const float *E, int N, int C) {
    const int n = blockIdx.x;
    const float *src = E + (size_t)tokens[n] * C;
    float *dst = out + (size_t)n * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
}

void cu_embedding_forward(Device *d, float *out, const int *tokens, const float *E, int N, int C) {
    if (N <= 0 || C <= 0) return;
    embedding_forward_kernel<<<N, 256, 0, cu_stream(d)>>>(out, tokens, E, N, C);
    CU_LAUNCHED();
}

__global__ void iota_kernel(int *x, int n) { CU_FOR(i, (size_t)n) x[i] = (int)i; }

// Block i: if sorted position i starts a run of one token, add the run's rows
// (in row order) into that token's row of dE; other blocks return at once.
__global__ void embedding_backward_kernel(float *dE, const float *dout, const int *sorted_tokens,
                                          const int *sorted_rows, int N, int C, int skip_id) {
    const int i = blockIdx.x, tok = sorted_tokens[i];
    if ((i > 0 && sorted_tokens[i - 1] == tok) || tok == skip_id) return;
    int end = i + 1;
    while (end < N && sorted_tokens[end] == tok) end++;
    float *row = dE + (size_t)tok * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = row[c];
        for (int j = i; j < end; j++) acc += dout[(size_t)sorted_rows[j] * C + c];
        row[c] = acc;
    }
}

// CUB's scratch for sorting N pairs of ints (a query: nothing runs).
static size_t sort_temp_bytes(int N) {
    size_t bytes = 0;
    CU_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, (const int *)nullptr, (int *)nullptr,
                                             (const int *)nullptr, (int *)nullptr, N, 0, 32));
    return bytes;
}

size_t cu_embedding_workspace_bytes(const Device *d, int N) {
    (void)d;
    return sort_temp_bytes(N) + 3 * ((size_t)N * sizeof(int) + 64) + 256;
}

void cu_embedding_backward(Device *d, float *dE, const float *dout, const int *tokens, int N, int C, int skip_id) {
    if (N <= 0 || C <= 0) return;
    cudaStream_t stream = cu_stream(d);
    const size_t mark = dev_scratch_mark(d), ints = (size_t)N * sizeof(int);
    int *rows = (int *)dev_scratch(d, ints, "embedding rows");
    int *sorted_tokens = (int *)dev_scratch(d, ints, "embedding sorted tokens");
    int *sorted_rows = (int *)dev_scratch(d, ints, "embedding sorted rows");
    size_t temp_bytes = sort_temp_bytes(N);
    void *temp = dev_scratch(d, temp_bytes, "embedding sort scratch");
    iota_kernel<<<cu_blocks((size_t)N, 256), 256, 0, stream>>>(rows, N);
    CU_LAUNCHED();
    // All 32 bits: the op does not know the vocabulary size (ids are trusted, >= 0).
    CU_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, sorted_tokens, rows, sorted_rows, N, 0, 32,
                                             stream));
    embedding_backward_kernel<<<N, 128, 0, stream>>>(dE, dout, sorted_tokens, sorted_rows, N, C, skip_id);
    CU_LAUNCHED();
    dev_scratch_release(d, mark);
}
