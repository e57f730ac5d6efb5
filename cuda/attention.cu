/* cuda/attention.cu - RoPE with the KV-cache append, and attention over the paged f16 KV
 * cache, on the GPU (contracts in ops.h).
 *
 * Computes:
 *   k_rope_store  for token t at position pos[t]: rotate each pair of q (n_heads, hd) and
 *                 k (n_kv_heads, hd) by the host-built cos/sin table row pos[t] (the
 *                 values of m40_cpu_rope(), so exact), llama (2i, 2i+1) or NEOX (i,
 *                 i + n_rot/2) pairs; then write k and v as f16 (round to nearest even)
 *                 into the token's page slot. Grid n_tok, 128 threads.
 *   k_attention   for token t and query head h: scores[p] = (q . K[p]) * scale for
 *                 p <= pos[t], softmax (max, expf, sum in double as the CPU), out =
 *                 sum_p w[p] V[p]. Grid (n_heads, n_tok), 128 threads; dynamic shared
 *                 memory (max_pos + 1 + hd) floats. Decode and causal prefill are the
 *                 same kernel: a prefill token sees the K/V its chunk wrote before it.
 * Tolerance against m40_cpu_attention_head(): FP32 dot products in another order and
 * expf's ulps: relative 1e-5 of the output's scale. Maxwell-clean: f16 only converted
 * (cvt), FP32/FP64 math, warp shuffles, shared memory. */
#include <errno.h>
#include <stdint.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "m40/error.h"
#include "cuda/ops.h"

#define ATTN_THREADS 128

__device__ __forceinline__ size_t slot_off(const struct m40_cuda_kv &kv, uint32_t tbl, uint32_t p)
{
        const uint32_t page = kv.pages[tbl + p / kv.page_tokens];

        return (size_t)page * kv.page_elems +
               ((size_t)kv.layer * kv.page_tokens + p % kv.page_tokens) * kv.kv_dim;
}

__device__ __forceinline__ void rotate(float *x, int n_heads, int hd, const float *cs, int n_rot,
                                       int neox)
{
        const int half = n_rot / 2;

        for (int e = threadIdx.x; e < n_heads * half; e += blockDim.x) {
                const int h = e / half, i = e % half;
                const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
                float *v = x + (size_t)h * hd;
                const float c = cs[2 * i], s = cs[2 * i + 1], x0 = v[a], x1 = v[b];

                v[a] = x0 * c - x1 * s;
                v[b] = x0 * s + x1 * c;
        }
}

__global__ void k_rope_store(struct m40_cuda_rope r, struct m40_cuda_kv kv, float *q, size_t ldq,
                             float *k, const float *__restrict__ v, size_t ldk, int n_heads,
                             int n_kv_heads, int hd)
{
        const int t = blockIdx.x;
        const uint32_t pos = kv.pos[t];
        const float *cs = r.cs + (size_t)pos * r.n_rot;
        float *kt = k + (size_t)t * ldk;
        const float *vt = v + (size_t)t * ldk;

        rotate(q + (size_t)t * ldq, n_heads, hd, cs, (int)r.n_rot, r.neox);
        rotate(kt, n_kv_heads, hd, cs, (int)r.n_rot, r.neox);
        __syncthreads();

        const size_t off = slot_off(kv, kv.tbl[t], pos);
        __half *kc = (__half *)kv.base + off, *vc = (__half *)kv.base + kv.v_off + off;

        for (int i = threadIdx.x; i < n_kv_heads * hd; i += blockDim.x) {
                kc[i] = __float2half_rn(kt[i]);
                vc[i] = __float2half_rn(vt[i]);
        }
}

extern "C" int m40_cuda_rope_store(const struct m40_cuda_rope *r, const struct m40_cuda_kv *kv,
                                   float *q, size_t ldq, float *k, const float *v, size_t ldk,
                                   uint32_t n_heads, uint32_t n_kv_heads, uint32_t head_dim,
                                   uint32_t n_tok, struct CUstream_st *stream)
{
        if (!r || !kv || !q || !k || !v || r->n_rot > head_dim || (r->n_rot & 1) ||
            ldq < (size_t)n_heads * head_dim || ldk < (size_t)n_kv_heads * head_dim ||
            !kv->page_tokens)
                return -EINVAL;
        if (!n_tok)
                return 0;
        k_rope_store<<<n_tok, 128, 0, stream>>>(*r, *kv, q, ldq, k, v, ldk, (int)n_heads,
                                                (int)n_kv_heads, (int)head_dim);
        return m40_cuda_launch_status("rope_store");
}

__global__ void k_attention(struct m40_cuda_kv kv, const float *__restrict__ q, size_t ldq,
                            float *out, size_t ldo, int group, int hd, float scale)
{
        extern __shared__ float sh[]; /* q (hd), then scores (pos + 1) */
        __shared__ double dsum[ATTN_THREADS / 32];
        __shared__ float fmax[ATTN_THREADS / 32];
        const int t = blockIdx.y, h = blockIdx.x, kvh = h / group;
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
        const uint32_t pos = kv.pos[t], tbl = kv.tbl[t];
        const __half *kb = (const __half *)kv.base + (size_t)kvh * hd;
        const __half *vb = kb + kv.v_off;
        float *qs = sh, *sc = sh + hd;

        for (int i = threadIdx.x; i < hd; i += blockDim.x)
                qs[i] = q[(size_t)t * ldq + (size_t)h * hd + i];
        __syncthreads();

        /* scores: one warp per position */
        for (uint32_t p = warp; p <= pos; p += nw) {
                const __half *kp = kb + slot_off(kv, tbl, p);
                float s = 0.0f;

                for (int i = lane; i < hd; i += 32)
                        s += qs[i] * __half2float(kp[i]);
                for (int off = 16; off; off >>= 1)
                        s += __shfl_xor_sync(0xffffffffu, s, off);
                if (lane == 0)
                        sc[p] = s * scale;
        }
        __syncthreads();

        /* softmax */
        float m = -INFINITY;
        for (uint32_t p = threadIdx.x; p <= pos; p += blockDim.x)
                m = fmaxf(m, sc[p]);
        for (int off = 16; off; off >>= 1)
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
        if (lane == 0)
                fmax[warp] = m;
        __syncthreads();
        m = fmax[0];
        for (int w = 1; w < nw; w++)
                m = fmaxf(m, fmax[w]);
        double sum = 0.0;
        for (uint32_t p = threadIdx.x; p <= pos; p += blockDim.x) {
                const float e = expf(sc[p] - m);

                sc[p] = e;
                sum += (double)e;
        }
        for (int off = 16; off; off >>= 1)
                sum += __shfl_xor_sync(0xffffffffu, sum, off);
        if (lane == 0)
                dsum[warp] = sum;
        __syncthreads();
        sum = 0.0;
        for (int w = 0; w < nw; w++)
                sum += dsum[w];
        const float inv = (float)(1.0 / sum);

        /* out = sum_p w[p] V[p]: one thread per output element */
        for (int i = threadIdx.x; i < hd; i += blockDim.x) {
                float acc = 0.0f;

                for (uint32_t p = 0; p <= pos; p++)
                        acc += sc[p] * inv * __half2float(vb[slot_off(kv, tbl, p) + i]);
                out[(size_t)t * ldo + (size_t)h * hd + i] = acc;
        }
}

extern "C" int m40_cuda_attention(const struct m40_cuda_kv *kv, const float *q, size_t ldq,
                                  float *out, size_t ldo, uint32_t n_heads, uint32_t n_kv_heads,
                                  uint32_t head_dim, float scale, uint32_t n_tok, uint32_t max_pos,
                                  struct CUstream_st *stream)
{
        const size_t shmem = ((size_t)max_pos + 1 + head_dim) * sizeof(float);

        if (!kv || !q || !out || !n_kv_heads || n_heads % n_kv_heads || !head_dim ||
            head_dim > M40_CUDA_MAX_HEAD_DIM || max_pos >= M40_CUDA_ATTN_MAX_CTX ||
            ldq < (size_t)n_heads * head_dim || ldo < (size_t)n_heads * head_dim ||
            !kv->page_tokens)
                return -EINVAL;
        if (!n_tok)
                return 0;
        k_attention<<<dim3(n_heads, n_tok), ATTN_THREADS, shmem, stream>>>(
                *kv, q, ldq, out, ldo, (int)(n_heads / n_kv_heads), (int)head_dim, scale);
        return m40_cuda_launch_status("attention");
}
