/*
 * coord_policy.h — the stage-3 decisions, once: which position of the
 * recorded fetch order (the trace) a fetch is, which retained copy to evict
 * before a gather, which modules to prefetch after a fetch, whether a
 * released copy is kept for its reuse, and what an optimizer boundary
 * frees. Pure: no memory but its own counters, no comms, no timing. The
 * coordinator (coordinator.c) executes these decisions with copies and
 * all-gathers; the replay (coordinator_sim.c) executes them with counters
 * only, so the memory model counts exactly what the coordinator does.
 *
 * The policy's state is counters per module (a copy allocated, current,
 * uses, retained, trace position) and in total (live non-persistent
 * elements); the executor reports each change through the zrt_cpol_on_*
 * functions right after it made it, and asks the zrt_cpol_* queries
 * before acting. Everything depends only on the program's fetch/release
 * sequence and the settings, so every rank decides the same.
 */
#ifndef ZRT_COORD_POLICY_H
#define ZRT_COORD_POLICY_H

#include <stdint.h>

typedef struct zrt_cpol_settings {
  int64_t prefetch_elems;    /* stage3_prefetch_bucket_size (0 = no prefetch) */
  int64_t max_live_elems;    /* stage3_max_live_parameters */
  int64_t reuse_distance;    /* effective stage3_max_reuse_distance (0 = no reuse) */
  int64_t persist_threshold; /* stage3_param_persistence_threshold */
} zrt_cpol_settings;

typedef struct zrt_cpol_mod {
  int64_t numel, padded;
  int persistent; /* numel <= persist_threshold: stays gathered, not counted live */
  int copy;       /* a gathered copy is allocated */
  int valid;      /* the copy holds the current weights, or a gather (or a
                   * read) in flight or queued will give them */
  int in_use;     /* fetches not yet released (fetches nest) */
  int retained;   /* released but kept gathered for a reuse */
  int trace_at;   /* trace position of its latest fetch (-1: none) */
} zrt_cpol_mod;

typedef struct zrt_cpol {
  zrt_cpol_settings s;
  int nmodules;
  zrt_cpol_mod *mods;
  int *trace; /* module per fetch of the first step */
  int ntrace, cap_trace;
  int trace_done; /* 1 after the first boundary: the trace is frozen */
  int trace_pos;  /* position of the last fetch in the trace (-1: none this step) */
  int live_modules;
  int64_t live_elems; /* copies allocated of non-persistent modules */
} zrt_cpol;

/* A cursor over the prefetch candidates after one fetch. */
typedef struct zrt_cpol_cursor {
  int at;         /* trace position last returned (starts at the fetch's) */
  int64_t budget; /* prefetch elements left */
} zrt_cpol_cursor;

/* 0, or -1 when host memory runs out (p is then empty; fini accepts it). */
int zrt_cpol_init(zrt_cpol *p, const zrt_cpol_settings *s, int nmodules, const int64_t *numel,
                  const int64_t *padded);
void zrt_cpol_fini(zrt_cpol *p);

/* A fetch of m: appended to the trace while it is recorded, else located
 * at or after the expected position (the trace repeats every step).
 * *pos: its trace position, -1 while recording or when m is not in the
 * trace. 0, or -1 when host memory runs out (nothing changed). */
int zrt_cpol_fetch(zrt_cpol *p, int m, int *pos);
/* The first optimizer boundary: the trace recorded so far is frozen. */
void zrt_cpol_freeze(zrt_cpol *p);
/* New prefetch budget and reuse distance (elements). */
void zrt_cpol_set_window(zrt_cpol *p, int64_t prefetch_elems, int64_t reuse_distance);

/* Before allocating m's copy (blocking = 0 for a prefetch, which never
 * evicts): the retained module to free first (farthest next use) so that
 * the copy fits in max_live, or -1 when none is needed or left. */
int zrt_cpol_evict_for(const zrt_cpol *p, int m, int blocking);
/* The prefetch after a fetch at trace position pos (-1: none). */
zrt_cpol_cursor zrt_cpol_prefetch_begin(const zrt_cpol *p, int pos);
/* The next trace position to prefetch (its module not current, within the
 * budget and max_live, not across the optimizer step), or -1 to stop.
 * Counts it against the budget: the executor stops when it fails to start. */
int zrt_cpol_prefetch_next(const zrt_cpol *p, zrt_cpol_cursor *cur);
/* At the outermost release of m with a current copy: 1 to keep it
 * gathered (its next use within the reuse distance, max_live not
 * exceeded), with *between the non-persistent elements fetched before it. */
int zrt_cpol_keep(const zrt_cpol *p, int m, int64_t *between);
/* At an optimizer boundary: m's copy is stale and nobody holds it. */
int zrt_cpol_stale(const zrt_cpol *p, int m);

/* What the executor did. */
void zrt_cpol_on_alloc(zrt_cpol *p, int m); /* m's copy allocated */
void zrt_cpol_on_free(zrt_cpol *p, int m);  /* m's copy freed (no longer current) */
void zrt_cpol_set_valid(zrt_cpol *p, int m, int valid);
void zrt_cpol_on_use(zrt_cpol *p, int m); /* the fetch of m returns */
/* The release of m: 1 when it was the outermost of a non-persistent module
 * (the copy is then kept or freed), 0 when nothing more is to be done. */
int zrt_cpol_on_release(zrt_cpol *p, int m);
void zrt_cpol_on_keep(zrt_cpol *p, int m);
/* The boundary after the stale copies were freed: no copy is current. */
void zrt_cpol_on_boundary(zrt_cpol *p);

#endif
