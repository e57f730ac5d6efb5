/* cuda/kernels/persist.cuh - how the blocks of a persistent kernel wait for each other: the
 * counters a block arrives at and the waits on them (DESIGN.md section 4), with the sm_52
 * primitives only (atomicAdd, __threadfence, volatile loads, clock64; no cooperative
 * groups, no __nanosleep, no acquire/release loads).
 *
 * A counter is an unsigned word in global memory that only grows (modulo 2^32): a block
 * arrives at it (ps_arrive(): its writes so far are made visible, then the counter is
 * incremented once), and a block waits until it reaches a target (ps_wait()). Counters
 * are never reset: a wait compares in generation order (ps_reached(): v - target as a
 * signed difference), so a kernel that is launched again, or a step that runs again,
 * moves its targets on instead of clearing counters, and there is no reset to race with.
 * Targets must stay within 2^31 of the counter's value.
 *   - A grid barrier is one counter all G blocks arrive at; the n-th barrier waits for
 *     n G arrivals (ps_grid_sync()).
 *   - A dataflow counter counts the producers of one piece of data (a tile); a consumer
 *     waits only for the pieces it reads, so blocks drift apart as far as their inputs
 *     allow instead of meeting at every stage.
 * Every spin has a limit in clock cycles: a wait that runs out returns false, so a bug (or
 * a block that is not resident) gives an error and not a hung GPU. A persistent kernel's
 * grid must be at most the blocks the GPU holds at once (occupancy API): a block that
 * waits on one that never starts waits forever.
 *
 * Memory: after ps_wait() returns true, every write the counted blocks made before they
 * arrived is visible to every thread of the waiting block, read with plain or L2 loads
 * (__ldcg). Data written inside the kernel must not be read through the read-only path
 * (__ldg, ld.global.nc): that cache is not kept coherent within a kernel.
 *
 * Every thread of the block calls ps_arrive(), ps_wait() and ps_grid_sync() (they hold
 * __syncthreads); thread 0 does the atomics and the spinning. */
#ifndef M40_CUDA_PERSIST_CUH
#define M40_CUDA_PERSIST_CUH

/* Whether counter value v has reached target, in generation order (modulo 2^32). */
__device__ __forceinline__ bool ps_reached(unsigned v, unsigned target)
{
        return (int)(v - target) >= 0;
}

/* ps_arrive - the block's writes so far become visible to the GPU, then *c counts the
 * block once. */
__device__ __forceinline__ void ps_arrive(unsigned *c)
{
        __syncthreads(); /* every thread's writes are done */
        if (threadIdx.x == 0) {
                __threadfence();
                atomicAdd(c, 1u);
        }
}

/* ps_wait - until *c reaches target, at most `limit` clock cycles of thread 0's spinning;
 * false when it ran out (the counter did not reach the target). */
__device__ __forceinline__ bool ps_wait(const unsigned *c, unsigned target, long long limit)
{
        int ok = 1;

        if (threadIdx.x == 0) {
                const long long t0 = clock64();

                while (!ps_reached(*(const volatile unsigned *)c, target)) {
                        if (clock64() - t0 > limit) {
                                ok = 0;
                                break;
                        }
                }
                __threadfence(); /* the counted blocks' writes are read after the count */
        }
        return __syncthreads_and(ok);
}

/* ps_grid_sync - barrier number n (1, 2, ..; a launch that starts at counter value base
 * passes base + n G) of all gridDim.x blocks on counter c: false when it ran out. */
__device__ __forceinline__ bool ps_grid_sync(unsigned *c, unsigned target, long long limit)
{
        ps_arrive(c);
        return ps_wait(c, target, limit);
}

#endif
