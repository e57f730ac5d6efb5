/* cuda/kernels/warp.cuh - sums over the 32 lanes of a warp, shared by the matrix kernels
 * (matvec.cuh and its epilogues) and attention (attention.cu). Maxwell-clean: shuffles
 * (sm_30) only. Every lane of the warp must call them (full-mask shuffles), so callers
 * keep them out of branches that differ between lanes. */
#ifndef M40_CUDA_WARP_CUH
#define M40_CUDA_WARP_CUH

#include <cuda_runtime.h>

/* Sum v over the 32 lanes of a warp; every lane gets the total. */
template <int N> static __device__ __forceinline__ void warp_sum(float *v)
{
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
#pragma unroll
                for (int i = 0; i < N; i++)
                        v[i] += __shfl_xor_sync(0xffffffffu, v[i], off);
}

/* Sum each of v[0 .. N) over the 32 lanes of a warp (N a power of 2, at most 32) and
 * scatter the totals: the lane returns the total of value lane >> (5 - log2 N), so
 * value i is in lanes i << (5 - log2 N) ... Every total is bit for bit warp_sum()'s
 * (the same pairs are added at each of the five steps: own + partner, and FP32 adds
 * commute), at N + 4 - log2 N shuffles instead of 5 N: at each step while more than
 * one value is left, a lane keeps half and sends its partner the other half. Leaves v
 * overwritten. */
template <int N> static __device__ __forceinline__ float warp_sum_scatter(float *v)
{
        static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "a power of 2, at most 32");
        const int lane = threadIdx.x & 31;

#pragma unroll
        for (int s = 0; s < 5; s++) {
                const int off = 16 >> s, n = N >> s; /* values left before this step */

                if (n >= 2) {
                        const bool hi = (lane & off) != 0;

#pragma unroll
                        for (int i = 0; i < n / 2; i++) {
                                const float keep = hi ? v[i + n / 2] : v[i];
                                const float send = hi ? v[i] : v[i + n / 2];

                                v[i] = keep + __shfl_xor_sync(0xffffffffu, send, off);
                        }
                } else {
                        v[0] += __shfl_xor_sync(0xffffffffu, v[0], off);
                }
        }
        return v[0];
}

/* log2 of N (a power of 2, 1 .. 32), for warp_sum_scatter()'s lane of value i */
template <int N> struct warp_log2 {
        enum { V = N <= 1 ? 0 : N <= 2 ? 1 : N <= 4 ? 2 : N <= 8 ? 3 : N <= 16 ? 4 : 5 };
};

#endif
