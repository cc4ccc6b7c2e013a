/*
 * zt_child.h — run a test function in a forked child (tests/common/zt_child.c).
 */
#ifndef ZT_CHILD_H
#define ZT_CHILD_H
#include <stddef.h>

/* Runs fn(arg) in a child with stderr captured into buf (len bytes, NUL
 * terminated); returns the child's exit code, or 100 when it did not exit
 * normally (killed by a signal). */
int zt_in_child(int (*fn)(void *), void *arg, char *buf, size_t len);

#endif
