/* empty.c — keeps zrt_testcommon a valid library when tests/common has no
 * other sources. */
typedef int zrt_testcommon_empty_unit;
