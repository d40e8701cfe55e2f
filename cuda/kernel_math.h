// kernel_math.h: the per-element arithmetic of the CUDA kernels, written once
// for both sides: nvcc compiles it into the kernels (__host__ __device__),
// and gcc compiles it into the host test tests/test_cuda_math.c, which checks
// it bit for bit against the CPU backend's own functions (util's fp16/bf16
// converters, matmul_bf16_round, int4_grid.h's code rule, adamw.c, quant_adam).
// So a kernel that applies these functions element by element gives the CPU's
// bits by construction, and the host test proves the functions equal.
//
// Plain C (C11) and CUDA C++ alike. The one trap: nvcc contracts a*b + c into
// a fused multiply-add by default, while the CPU build (ISO C) never does. The
// functions that must give the CPU's bits therefore spell every product and
// sum with km_mul / km_add / km_sub / km_div, which are the round-to-nearest
// intrinsics on the device (never contracted) and the plain operators on the host.
#pragma once
#include <math.h>
#include <stdint.h>
#ifndef __CUDACC__
#include <string.h>
#endif

#ifdef __CUDACC__
#define KM_FN static inline __host__ __device__
#else
#define KM_FN static inline
#endif

// ---- bits and uncontracted arithmetic

KM_FN uint32_t km_bits(float x) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

KM_FN float km_float(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

#ifdef __CUDA_ARCH__
KM_FN float km_mul(float a, float b) { return __fmul_rn(a, b); }
KM_FN float km_add(float a, float b) { return __fadd_rn(a, b); }
KM_FN float km_sub(float a, float b) { return __fsub_rn(a, b); }
KM_FN float km_div(float a, float b) { return __fdiv_rn(a, b); }
KM_FN float km_sqrt(float a) { return __fsqrt_rn(a); }
#else
KM_FN float km_mul(float a, float b) { return a * b; }
KM_FN float km_add(float a, float b) { return a + b; }
KM_FN float km_sub(float a, float b) { return a - b; }
KM_FN float km_div(float a, float b) { return a / b; }
KM_FN float km_sqrt(float a) { return sqrtf(a); }
#endif

// ---- 16-bit floats

// fp32 -> bf16 as util's f32_to_bf16 (torch's .to(bfloat16)): round to
// nearest even, subnormals rounded like any value, NaN made quiet.
KM_FN uint16_t km_bf16_bits(float f) {
    uint32_t u = km_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// fp32 -> bf16 as the MATMUL_BF16 operands (matmul_bf16_round, vcvtneps2bf16):
// the same rounding, but zeros and subnormals go to a signed zero.
KM_FN uint16_t km_bf16_bits_matmul(float f) {
    uint32_t u = km_bits(f);
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

KM_FN float km_bf16_value(uint16_t h) { return km_float((uint32_t)h << 16); }

// fp32 -> fp16 as util's f32_to_f16: round to nearest even, subnormals
// rounded at the fp16 subnormal unit, overflow to inf, NaN kept (quiet).
KM_FN uint16_t km_f16_bits(float f) {
    uint32_t u = km_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u, absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (absu < 0x38800000u) {
        if (absu < 0x33000000u) return (uint16_t)sign;
        uint32_t e = absu >> 23, m = (absu & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = absu - 0x38000000u;
    uint32_t out = r >> 13, rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (out & 1u))) out++;
    return (uint16_t)(sign | out);
}

// fp16 -> fp32, exact (util's f16_to_f32).
KM_FN float km_f16_value(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else {
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    return km_float(u);
}

KM_FN float km_round_f16(float x) { return km_f16_value(km_f16_bits(x)); }
KM_FN float km_round_bf16(float x) { return km_bf16_value(km_bf16_bits(x)); }

// A16 rounding of one activation (ops/quant.c's a16_round): mode 1 bf16, 2 fp16, else unchanged.
KM_FN float km_a16(float x, int mode) {
    return mode == 1 ? km_round_bf16(x) : mode == 2 ? km_round_f16(x) : x;
}

// ---- RoPE: one rotate-half pair (rope.c): y0 = a c - b s, y1 = b c + a s,
// with s negated for the backward (the transpose rotation).
KM_FN void km_rope_pair(float a, float b, float c, float s, float *y0, float *y1) {
    *y0 = km_sub(km_mul(a, c), km_mul(b, s));
    *y1 = km_add(km_mul(b, c), km_mul(a, s));
}

// ---- AdamW, one element, op for op as adamw.c's adamw_range (torch's
// single-tensor AdamW: lerp for m, addcmul for v, both fused as there).
typedef struct {
    float decay_mul;       // 1 - lr * wd (1 without decay)
    float m_weight;        // 1 - beta1
    float m_keep_weight;   // 1 - m_weight
    int lerp_small;        // |m_weight| < 0.5: lerp's small-weight form
    float v_keep, v_weight;
    float neg_step_size;   // -lr / (1 - beta1^step)
    float bias2_sqrt;      // sqrt(1 - beta2^step)
    float eps;
} KmAdamW;

// The scalars of one update, formed in double and rounded as adamw.c does (host only).
static inline KmAdamW km_adamw_scalars(float lr, float weight_decay, float beta1, float beta2, float eps, long step,
                                       int decay) {
    const double b1 = beta1, b2 = beta2;
    KmAdamW k;
    k.decay_mul = decay ? (float)(1.0 - (double)lr * weight_decay) : 1.0f;
    k.m_weight = (float)(1.0 - b1);
    k.m_keep_weight = 1.0f - k.m_weight;
    k.lerp_small = fabsf(k.m_weight) < 0.5f;
    k.v_keep = beta2;
    k.v_weight = (float)(1.0 - b2);
    k.neg_step_size = (float)(-(double)lr / (1.0 - pow(b1, (double)step)));
    k.bias2_sqrt = (float)sqrt(1.0 - pow(b2, (double)step));
    k.eps = eps;
    return k;
}

KM_FN void km_adamw(float *p, float g, float *m, float *v, const KmAdamW *k) {
    float pi = km_mul(*p, k->decay_mul), mi = *m, vi = *v;
    mi = k->lerp_small ? fmaf(k->m_weight, km_sub(g, mi), mi) : fmaf(-km_sub(g, mi), k->m_keep_weight, g);
    vi = fmaf(km_mul(k->v_weight, g), g, km_mul(vi, k->v_keep));
    float denom = km_add(km_div(km_sqrt(vi), k->bias2_sqrt), k->eps);
    *p = km_add(pi, km_div(km_mul(k->neg_step_size, mi), denom));
    *m = mi;
    *v = vi;
}

// ---- the int4 grid (model/int4_grid.h): the code rule, fake-quant, dequant, STE test

KM_FN float km_quant_rounded(float x, float scale, float zero) {
    return km_add(rintf(km_div(km_sub(x, zero), scale)), 8.0f);
}

KM_FN float km_quant_clamp(float r, int lo) {
    float c = r > 15.0f ? 15.0f : r;
    return c >= (float)lo ? c : (float)lo;
}

KM_FN int km_quant_inside(float r, int lo) { return r >= (float)lo && r <= 15.0f; }

// quant_fake of one weight: its grid point ((clamped code - 8) * scale (+ zero)).
KM_FN float km_quant_fake(float x, float scale, float zero, int lo, int sym) {
    if (scale == 0.0f) return zero;
    const float prod = km_mul(km_sub(km_quant_clamp(km_quant_rounded(x, scale, zero), lo), 8.0f), scale);
    return sym ? prod : km_add(prod, zero);
}

KM_FN float km_quant_dequant(unsigned code, float scale, float zero, int sym) {
    const float prod = km_mul(km_sub((float)code, 8.0f), scale);
    return sym ? prod : km_add(prod, zero);
}

// One Adam step of an fp16 scale or zero (quant_adam), re-rounded to fp16 after
// the clamp; step_size = lr / (1 - beta1^step) and bc2_sqrt = sqrt(1 - beta2^step)
// are formed on the host as ops/quant.c forms them.
KM_FN void km_quant_adam(float *p, float g, float *m, float *v, float beta1, float beta2, float eps, float step_size,
                         float bc2_sqrt, float lo, float hi) {
    const float mi = km_add(km_mul(beta1, *m), km_mul(km_sub(1.0f, beta1), g));
    const float vi = km_add(km_mul(beta2, *v), km_mul(km_mul(km_sub(1.0f, beta2), g), g));
    const float upd = km_sub(*p, km_div(km_mul(step_size, mi), km_add(km_div(km_sqrt(vi), bc2_sqrt), eps)));
    *m = mi;
    *v = vi;
    *p = km_round_f16(fminf(fmaxf(upd, lo), hi));
}
