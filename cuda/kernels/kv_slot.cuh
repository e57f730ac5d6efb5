/* cuda/kernels/kv_slot.cuh - where a position's K and V sit in the paged f16 KV cache (struct
 * m40_cuda_kv, ops.h), for every kernel that writes or reads them: the RoPE/KV-store and
 * attention kernels (attention.cuh) and the q/k/v epilogue (matvec_epilogue.cuh). */
#ifndef M40_CUDA_KV_SLOT_CUH
#define M40_CUDA_KV_SLOT_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "cuda/kernels/ops.h"

/* The element offset of position p's K (V: + v_off) in the layer's slab of its page. */
static __device__ __forceinline__ size_t slot_in(const struct m40_cuda_kv &kv, uint32_t page,
                                                 uint32_t p)
{
        return (size_t)page * kv.page_elems +
               ((size_t)kv.layer * kv.page_tokens + p % kv.page_tokens) * kv.kv_dim;
}

#endif
