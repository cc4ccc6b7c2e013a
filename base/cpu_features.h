/*
 * cpu_features.h — the vector ISA paths of the CPU kernels and the run-time
 * choice among them (see cpu_features.c).
 */
#ifndef ZRT_CPU_FEATURES_H
#define ZRT_CPU_FEATURES_H

#include "internal.h"

typedef enum zrt_isa { ZRT_ISA_SCALAR = 0, ZRT_ISA_AVX2, ZRT_ISA_AVX512 } zrt_isa;

/* The best path this CPU runs, or the one $ZRT_CPU_ISA (alias $ZRT_ISA)
 * forces (cached). */
zrt_isa zrt_isa_best(void);
const char *zrt_isa_name(zrt_isa isa);
/* 1 when this CPU can run isa. */
int zrt_isa_supported(zrt_isa isa);
/* 1 when the CPU has the AVX512_BF16 conversion instructions. */
int zrt_isa_has_avx512bf16(void);
/* Bytes of the last-level cache this process sees (sysfs, as lscpu reads
 * it: in a VM the guest's share, where sysconf may report the host's), 0
 * when unknown (cached). */
size_t zrt_cpu_llc_bytes(void);

#endif
