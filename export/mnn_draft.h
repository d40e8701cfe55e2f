// mnn_draft.h: a DFlash speculative draft (model/draft.h) in the MNN package,
// as MNN 3.6.1's DFlash generation loads and runs it
// (transformers/llm/engine/src/speculative_decoding/dflash.cpp; later MNN
// versions changed the format):
//
//   llm.mnn            one more output, "hidden_states" [1, S, n_target*H]:
//                      the outputs of the draft's target layers (after the
//                      MLP residual) at every fed row, concatenated in the
//                      draft's layer order
//   dflash_fc.mnn      "target_hidden" [1, S, n_target*H] -> "context_hidden"
//                      [1, S, H] = hidden_norm(fc(target_hidden)); fp32
//                      weights inline (the runtime runs it in fp32 on the CPU)
//   dflash.mnn         "noise_embedding" [1, B, H] (the block's tokens, which
//                      the runtime embeds with the target's embedding),
//                      "context_hidden" [1, C, H], "attention_mask" [1, 1, B,
//                      C+B] (added to the scores), "q_position_ids" [1, B] and
//                      "k_position_ids" [1, C+B] (int32) -> "logits" [1, B,
//                      V]: the draft's layers (fp32 weights inline, attention
//                      over all C+B keys), its final norm, and the target's
//                      int4 lm_head
//   dflash.mnn.weight  the draft's norms and the target's lm_head blob, the
//                      same bytes as in llm.mnn.weight (the runtime reads a
//                      graph's weights from GRAPH.weight)
//   config.json        speculative_type "dflash", hidden_states true,
//                      dflash_model, dflash_fc, dflash_block_size,
//                      dflash_mask_token_id, dflash_target_layer_ids and
//                      draft_predict_length = block - 1 (the verify pass's
//                      length, so its module is made at load)
#pragma once
#include <jansson.h>
#include "../util/out_dir.h"
#include "mnn_writer.h"

// The draft runs on this target: its config (draft_config_check) and the
// sizes its table was built with. Errors name "the draft".
int mnn_draft_check(const ModelBundle *b, const Draft *d, PtError *e);
// (llm.mnn's "hidden_states" output is the decoder's graph's: mw_decoder
// with MnnWriter.draft set.)
// The config.json keys above, into j.
void mnn_draft_config(json_t *j, const Draft *d);
// The sizes of the draft's files.
typedef struct {
    int ops;                // ops of dflash.mnn
    int64_t graph_bytes, weight_bytes, fc_bytes;
} MnnDraftStats;
// dflash.mnn, dflash.mnn.weight and dflash_fc.mnn into the package being
// written (the target's int4 state q gives the lm_head); their sizes in st.
int mnn_draft_write(const ModelBundle *b, const QatState *q, const Draft *d, const OutDir *dir, MnnDraftStats *st,
                    PtError *e);
