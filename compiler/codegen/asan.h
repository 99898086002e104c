/* PTC_ASAN: this ptc is built with AddressSanitizer (PTC_SANITIZE=address).
 * Its compile worker is off by default (worker.c) and its CPU kernels are
 * instrumented too (cpu/jit.c). */
#ifndef PTC_CODEGEN_ASAN_H
#define PTC_CODEGEN_ASAN_H

#if defined(__SANITIZE_ADDRESS__)
#define PTC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PTC_ASAN 1
#endif
#endif

#endif
