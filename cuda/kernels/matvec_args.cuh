/* cuda/kernels/matvec_args.cuh - the kernel arguments of matvec.h's fused decode launches,
 * checked and filled without launching (matvec.cu), for a caller that runs k_matvec's work
 * itself: the persistent step kernel (persist_step.cu), which turns them into a launch
 * plan (matvec_launch.cuh, mv_plan_of()) and calls matvec.cuh's mv_block(). The launchers
 * of matvec.h are these followed by the launch, so both run the same kernels on the same
 * arguments. Host code; C++ linkage (struct mv_args is matvec.cuh's). */
#ifndef M40_CUDA_MATVEC_ARGS_CUH
#define M40_CUDA_MATVEC_ARGS_CUH

#include <stddef.h>
#include <stdint.h>

#include "cuda/kernels/matvec.cuh"
#include "cuda/kernels/matvec.h"
#include "cuda/kernels/ops.h"

/* Each fills a[] (3 matrices, 2, 1) for the launch that m40_cuda_matmul_qkv_rope(),
 * m40_cuda_matmul_swiglu_rms() and m40_cuda_matvec_add_rms() (matvec.h) make with the
 * same arguments: 0, or the -EINVAL of those checks, or -ENOTSUP where the launcher would
 * not take the fused kernel (neox RoPE, rows not in pairs) and runs separate ones. */
int m40_mv_args_qkv_rope(const struct m40_cuda_matrix *w, const float *xg, size_t ldx,
                         const struct m40_cuda_rms *rms, const struct m40_cuda_rope *rope,
                         const struct m40_cuda_kv *kv, uint32_t head_dim, float *const *y,
                         const size_t *ldy, uint32_t batch, struct mv_args a[MV_MAX_MATS]);
int m40_mv_args_swiglu_rms(const struct m40_cuda_matrix *gate, const struct m40_cuda_matrix *up,
                           const float *xg, size_t ldx, const struct m40_cuda_rms *rms, float *y,
                           float *y_up, size_t ldy, uint32_t batch, struct mv_args a[MV_MAX_MATS]);
int m40_mv_args_add_rms(const struct m40_cuda_matrix *w, const float *x, size_t ldx, float *y,
                        size_t ldy, uint32_t batch, const struct m40_cuda_rms *rms,
                        struct mv_args *a);

#endif
