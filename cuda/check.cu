// check.cu: the CUDA backend's error checks, which every op file calls: a
// failed CUDA call, and the error word the kernels report bad input through.
// Apart from device.cu, whose table references every op, so that the ops do
// not call into the table's file.
#include "cuda_impl.cuh"

void cu_fail(cudaError_t err, const char *what, const char *file, int line) {
    die("CUDA error at %s:%d: %s: %s", file, line, what, cudaGetErrorString(err));
}

void cu_check_errors(Device *d, const char *where) {
    CudaState *s = cu_state(d);
    int word[2] = {0, 0};
    CU_CHECK(cudaMemcpyAsync(word, s->err, sizeof word, cudaMemcpyDeviceToHost, s->stream));
    CU_CHECK(cudaStreamSynchronize(s->stream));
    if (word[0] == CU_ERR_ROPE_POSITION)
        die("%s: rope: the position of row %d is outside the RoPE table (max_position_embeddings)", where, word[1]);
    if (word[0] == CU_ERR_TARGET)
        die("%s: classifier: the target at row %d is outside the vocabulary", where, word[1]);
    if (word[0] != CU_ERR_NONE) die("%s: the CUDA kernels reported error %d at %d", where, word[0], word[1]);
}
