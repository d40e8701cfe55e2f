// gguf_names.c: tensor-table rows to GGUF names, llama q/k row permutation,
// the architecture of a config; see gguf_names.h.
#include "gguf_names.h"
#include <string.h>

void gguf_tensor_name(const TensorInfo *ti, char out[GGUF_MAX_NAME]) {
    static const char *const BLOCK_NAMES[T_KIND_COUNT] = {
        [T_LN1] = "attn_norm", [T_WQ] = "attn_q", [T_WK] = "attn_k", [T_WV] = "attn_v", [T_WO] = "attn_output",
        [T_QNORM] = "attn_q_norm", [T_KNORM] = "attn_k_norm", [T_LN2] = "ffn_norm", [T_WGATE] = "ffn_gate",
        [T_WUP] = "ffn_up", [T_WDOWN] = "ffn_down"};
    switch (ti->kind) {
    case T_EMBED: snprintf(out, GGUF_MAX_NAME, "token_embd.weight"); break;
    case T_LNF: snprintf(out, GGUF_MAX_NAME, "output_norm.weight"); break;
    case T_LMHEAD: snprintf(out, GGUF_MAX_NAME, "output.weight"); break;
    default: snprintf(out, GGUF_MAX_NAME, "blk.%d.%s.weight", ti->layer, BLOCK_NAMES[ti->kind]); break;
    }
}

void gguf_llama_permute(const float *src, float *dst, int n_heads, int head_dim, int64_t cols, int to_gguf) {
    int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < half; i++)
            for (int j = 0; j < 2; j++) {
                size_t gguf_row = (size_t)h * head_dim + 2 * i + j, hf_row = (size_t)h * head_dim + j * half + i;
                size_t to = to_gguf ? gguf_row : hf_row, from = to_gguf ? hf_row : gguf_row;
                memcpy(dst + to * cols, src + from * cols, (size_t)cols * sizeof(float));
            }
}

int gguf_arch(const ModelConfig *c, const char **arch, PtError *e) {
    int llama = strcmp(c->model_type, "llama") == 0;
    if (!llama && strcmp(c->model_type, "qwen3") != 0)
        return pt_fail(e, "model_type \"%s\" has no GGUF architecture here (qwen3, llama)", c->model_type);
    if (llama && c->qk_norm) return pt_fail(e, "a llama model with q/k norms has no llama.cpp architecture");
    if (!llama && !c->qk_norm) return pt_fail(e, "a qwen3 model without q/k norms has no llama.cpp architecture");
    *arch = llama ? "llama" : "qwen3";
    return 0;
}
