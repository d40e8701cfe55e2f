// device.cu: the CUDA device: its state (one stream, one cuBLASLt handle),
// device memory, the workspace the ops need, and the Backend table.
//
// Every op and every copy runs on the device's one stream, in the order the
// host issues them, so no op needs a synchronization of its own: the host
// waits only where it reads a result (download, the classifier's loss,
// the norm partials). Memory comes from cudaMalloc, once per buffer: the decoder plans
// all of it before the first step (model_plan), so no step allocates.
#include <string.h>
#include "cuda_impl.cuh"

// ---- memory: cudaMalloc'd (256-byte aligned), zeroed on the stream

static void *cu_alloc(Device *d, size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
    if (err != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        die("%s: cudaMalloc of %zu bytes failed on GPU %d: %s (%.2f of %.2f GiB free)", what, bytes,
            cu_state(d)->ordinal, cudaGetErrorString(err), free_b / 1073741824.0, total_b / 1073741824.0);
    }
    if (bytes) CU_CHECK(cudaMemsetAsync(p, 0, bytes, cu_stream(d)));
    return p;
}

// Waits for the stream first: an op still queued may be reading the buffer.
static void cu_release(Device *d, void *p) {
    if (!p) return;
    CU_CHECK(cudaStreamSynchronize(cu_stream(d)));
    CU_CHECK(cudaFree(p));
}

static void cu_zero(Device *d, void *p, size_t bytes) {
    if (bytes) CU_CHECK(cudaMemsetAsync(p, 0, bytes, cu_stream(d)));
}

// From pageable host memory the copy returns once the bytes are staged, so
// the caller may reuse its buffer at once.
static void cu_upload(Device *d, void *dst, const void *host_src, size_t bytes) {
    if (bytes) CU_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cu_stream(d)));
}

// Waits for everything queued before it, then checks the kernels' error word.
static void cu_download(Device *d, void *host_dst, const void *src, size_t bytes) {
    if (bytes) CU_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cu_stream(d)));
    cu_check_errors(d, "download");
}

static void cu_copy(Device *d, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu_stream(d)));
}

// The largest scratch any one op takes for a decoder of this config at B x T
// (ops release their scratch before returning; the classifier's matmuls nest
// inside its own and are counted in its figure).
static size_t cu_workspace_bytes(const Device *d, const ModelConfig *c, int B, int T, size_t n_params) {
    const int N = B * T, H = c->d_model, F = c->d_ff, Q = c->n_head * c->head_dim, KV = c->n_kv_head * c->head_dim;
    const int shapes[5][2] = {{H, Q}, {H, KV}, {Q, H}, {H, F}, {F, H}};   // the block's matmuls (C, OC)
    size_t most = 0;
    for (int i = 0; i < 5; i++) {
        size_t b = cu_matmul_workspace_bytes(d, N, shapes[i][0], shapes[i][1]);
        most = b > most ? b : most;
    }
    size_t need[6] = {cu_attention_workspace_bytes(B, T, c->n_head),
                      cu_classifier_workspace_bytes(d, N, H, c->vocab_size),
                      cu_rmsnorm_workspace_bytes(N, H),
                      cu_rmsnorm_workspace_bytes(N * c->n_head, c->head_dim),
                      cu_embedding_workspace_bytes(d, N),
                      cu_grad_norm_workspace_bytes(n_params)};
    for (int i = 0; i < 6; i++) most = need[i] > most ? need[i] : most;
    return most;
}

static void cu_destroy(Device *d) {
    CudaState *s = cu_state(d);
    if (!s) return;
    cudaStreamSynchronize(s->stream);
    cu_gemm_plans_free(s);
    if (s->lt) cublasLtDestroy(s->lt);
    if (s->err) cudaFree(s->err);
    if (s->stream) cudaStreamDestroy(s->stream);
}

static Backend make_table(void) {
    Backend b;
    memset(&b, 0, sizeof b);
    b.name = "cuda";
    b.host_memory = 0;
    b.alloc = cu_alloc;
    b.release = cu_release;
    b.zero = cu_zero;
    b.upload = cu_upload;
    b.download = cu_download;
    b.copy = cu_copy;
    b.workspace_bytes = cu_workspace_bytes;
    b.embedding_forward = cu_embedding_forward;
    b.embedding_backward = cu_embedding_backward;
    b.rmsnorm_forward = cu_rmsnorm_forward;
    b.rmsnorm_backward = cu_rmsnorm_backward;
    b.matmul_forward = cu_matmul_forward;
    b.matmul_backward = cu_matmul_backward;
    b.rope_forward = cu_rope_forward;
    b.rope_backward = cu_rope_backward;
    b.attention_forward = cu_attention_forward;
    b.attention_backward = cu_attention_backward;
    b.attention_cached = cu_attention_cached;
    b.swiglu_forward = cu_swiglu_forward;
    b.swiglu_backward = cu_swiglu_backward;
    b.dropout_forward = cu_dropout_forward;
    b.dropout_backward = cu_dropout_backward;
    b.residual_forward = cu_residual_forward;
    b.classifier = cu_classifier;
    b.classifier_scaled = cu_classifier_scaled;
    b.classifier_distill = cu_classifier_distill;
    b.a16_round = cu_a16_round;
    b.adamw_step = cu_adamw_step;
    b.grad_sumsq = cu_grad_sumsq;
    b.grad_scale = cu_grad_scale;
    b.quant_fake = cu_quant_fake;
    b.quant_dequant = cu_quant_dequant;
    b.quant_backward = cu_quant_backward;
    b.quant_backward_frozen = cu_quant_backward_frozen;
    b.quant_adam = cu_quant_adam;
    b.destroy = cu_destroy;
    return b;
}

static const Backend CUDA_TABLE = make_table();

extern "C" const Backend *backend_cuda(void) { return &CUDA_TABLE; }

extern "C" int cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();   // clear the sticky "no device" status
        return 0;
    }
    return n;
}

extern "C" int cuda_device_init(Device *d, int ordinal, PtError *e) {
    memset(d, 0, sizeof *d);
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
        cudaGetLastError();
        return pt_fail(e, "cuda: no CUDA GPU present (%s)", err != cudaSuccess ? cudaGetErrorString(err)
                                                                               : "the CUDA runtime sees none");
    }
    if (ordinal < 0 || ordinal >= n)
        return pt_fail(e, "cuda: GPU %d does not exist (%d present, numbered from 0)", ordinal, n);
    CudaState *s = (CudaState *)xcalloc(1, sizeof *s, "cuda device state");
    s->ordinal = ordinal;
    CU_CHECK(cudaSetDevice(ordinal));
    CU_CHECK(cudaGetDeviceProperties(&s->prop, ordinal));
    if (s->prop.major < 9) {
        pt_fail(e, "cuda: GPU %d (%s) has compute capability %d.%d; this build targets sm_90 (Hopper) and later",
                ordinal, s->prop.name, s->prop.major, s->prop.minor);
        free(s);
        return -1;
    }
    CU_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
    if (cublasLtCreate(&s->lt) != CUBLAS_STATUS_SUCCESS) die("cuda: cublasLtCreate failed");
    CU_CHECK(cudaMalloc((void **)&s->err, 2 * sizeof(int)));
    CU_CHECK(cudaMemsetAsync(s->err, 0, 2 * sizeof(int), s->stream));
    d->be = &CUDA_TABLE;
    d->threads = 1;
    d->impl = s;
    return 0;
}

extern "C" void cuda_synchronize(Device *d) { cu_check_errors(d, "cuda_synchronize"); }

extern "C" void cuda_memory(Device *d, size_t *free_bytes, size_t *total_bytes) {
    CU_CHECK(cudaSetDevice(cu_state(d)->ordinal));
    CU_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

extern "C" void cuda_describe(Device *d, char *buf, size_t len) {
    const cudaDeviceProp *p = &cu_state(d)->prop;
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    snprintf(buf, len, "%s (sm_%d%d, %.1f GiB, %d SMs, driver %d.%d, runtime %d.%d)", p->name, p->major, p->minor,
             p->totalGlobalMem / 1073741824.0, p->multiProcessorCount, driver / 1000, driver % 1000 / 10,
             runtime / 1000, runtime % 1000 / 10);
}
