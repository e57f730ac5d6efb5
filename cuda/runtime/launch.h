/* cuda/runtime/launch.h - what went wrong with the last failed kernel launch.
 *
 * Owns the per-thread record of the CUDA runtime error behind the last M40_ECUDA
 * that a kernel launcher (m40_cuda_<op>(..., stream)) returned. Launchers run on
 * the hot path and take no message buffer; they return M40_ECUDA and keep the
 * runtime's words here, so the program can log them once where it decides what
 * to do: log("matmul: %s", m40_cuda_last_error()).
 *
 * Plain C11; includes no CUDA header. */
#ifndef M40_CUDA_LAUNCH_H
#define M40_CUDA_LAUNCH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* m40_cuda_last_error - "what: cudaErrorName: description" of the last launch that
 * failed on this thread, or "" when none has. Borrowed: valid until the next failed
 * launch on this thread. Never NULL. */
const char *m40_cuda_last_error(void);

/* m40_cuda_launch_status - for launchers: read and clear the runtime's last error;
 * 0 when there is none, else record it under `what` and return M40_ECUDA (a sticky
 * error stays sticky: the context is then unusable, and later calls fail too). */
int m40_cuda_launch_status(const char *what);

/* m40_cuda_status - for setup code: e is a cudaError_t of a runtime call; 0 for
 * cudaSuccess, else M40_ECUDA with "what: cudaErrorName: description" in err (when err
 * is not NULL). */
int m40_cuda_status(int e, const char *what, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
