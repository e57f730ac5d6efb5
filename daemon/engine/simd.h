/* simd.h - how the CPU engine asks the compiler for vector code, in plain C.
 *
 * M40_CLONES marks a hot function for GCC/Clang function multiversioning: the compiler
 * emits an x86-64-v4 (AVX-512), an x86-64-v3 (AVX2+FMA) and a baseline clone and the
 * loader picks the best for the running CPU, so one binary is portable and fast. Elsewhere,
 * and under ThreadSanitizer (below), it is empty. M40_INLINE forces inlining into those
 * clones. M40_HAVE_FLOAT16 says the compiler has _Float16 (F16C conversions). */
#ifndef M40_ENGINE_SIMD_H
#define M40_ENGINE_SIMD_H

/* Under ThreadSanitizer M40_CLONES is empty: the compiler instruments the ifunc resolver
 * that target_clones makes, and the dynamic loader runs that resolver before the TSan
 * runtime is set up, so every program linking the engine died at start. A TSan build
 * (meson -Db_sanitize=thread) thus checks the baseline code of these functions; other
 * builds keep the clones. */
#if defined(__SANITIZE_THREAD__)
#define M40_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define M40_TSAN 1
#endif
#endif

#if defined(M40_TSAN)
#define M40_CLONES
#elif defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define M40_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#elif defined(__x86_64__) && defined(__clang__) && __clang_major__ >= 16
#define M40_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define M40_CLONES
#endif

/* M40_INLINE: a helper that must be inlined into each clone of its caller, so that it is
 * compiled for that clone's instruction set. */
#if defined(__GNUC__)
#define M40_INLINE static inline __attribute__((always_inline))
#else
#define M40_INLINE static inline
#endif

#if defined(__FLT16_MAX__)
#define M40_HAVE_FLOAT16 1
#endif

#endif
