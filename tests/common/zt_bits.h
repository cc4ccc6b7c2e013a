/*
 * zt_bits.h — the "bits" lines the engine tests print for the cpu-vs-twin
 * comparison (tests/twin/twin_equal.sh).
 */
#ifndef ZT_BITS_H
#define ZT_BITS_H

/* Writes one "bits ..." line (fmt without the newline). With
 * ZRT_TEST_BITS_DIR set, appends it to <dir>/bits.<pid> with one write()
 * (twin_equal.sh reads those files: mpiexec's forwarding of stdout dropped
 * lines under load, a run then "differed"); otherwise prints it on stdout. */
void zt_bits(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
