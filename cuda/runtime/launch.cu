/* cuda/runtime/launch.cu - the per-thread record of the last failed kernel launch (see
 * launch.h). Host code only. */
#include <stdio.h>

#include <cuda_runtime.h>

#include "m40/error.h"
#include "cuda/runtime/launch.h"

static __thread char last_error[256];

extern "C" const char *m40_cuda_last_error(void)
{
        return last_error;
}

extern "C" int m40_cuda_launch_status(const char *what)
{
        cudaError_t e = cudaGetLastError();

        if (e == cudaSuccess)
                return 0;
        snprintf(last_error, sizeof(last_error), "%s: %s: %s", what ? what : "kernel launch",
                 cudaGetErrorName(e), cudaGetErrorString(e));
        return M40_ECUDA;
}

extern "C" int m40_cuda_status(int e, const char *what, char *err, size_t errlen)
{
        if (e == cudaSuccess)
                return 0;
        if (err)
                snprintf(err, errlen, "%s: %s: %s", what, cudaGetErrorName((cudaError_t)e),
                         cudaGetErrorString((cudaError_t)e));
        return M40_ECUDA;
}
