/*
 * config_yaml.c — YAML text -> the loaders' document tree, with libyaml's
 * document API (it gives every node's start mark, so every key and value
 * has a line and column).
 *
 * Invariants: one document only; mapping keys must be scalars; aliases are
 * followed but bounded (depth and total node budget) so that recursive
 * anchors or "billion laughs" inputs end in an error, never a hang or a
 * crash. Duplicate keys are kept here and reported by the loader, like JSON.
 *
 * Depth is checked on libyaml's event stream before any document is built:
 * libyaml's scanner rescans its stack of open levels on every token, so a
 * document nested N deep costs O(N^2) to load (64k levels: half a minute).
 * The event pass stops at the first level past YAML_MAX_DEPTH, having read
 * only that far into the text.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "config_impl.h"

#define YAML_MAX_DEPTH 64
#define YAML_MAX_NODES 200000

typedef struct yconv {
  yaml_document_t *doc;
  const char *file;
  zrt_cfg_errs *errs;
  long budget;
  int failed;
} yconv;

static int plain_null(const yaml_node_t *n) {
  if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
  const char *v = (const char *)n->data.scalar.value;
  return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

static zrt_dnode *conv(yconv *c, yaml_node_t *yn, int depth) {
  if (!yn || c->failed) return NULL;
  if (depth > YAML_MAX_DEPTH || --c->budget < 0) {
    zrt_cfg_errs_add(c->errs, "%s:%lu:%lu: YAML nests too deep or expands too many aliases",
                     c->file, (unsigned long)yn->start_mark.line + 1,
                     (unsigned long)yn->start_mark.column + 1);
    c->failed = 1;
    return NULL;
  }
  zrt_dnode *n = NULL;
  switch (yn->type) {
  case YAML_SCALAR_NODE:
    n = zrt_dnode_new(ZRT_DN_SCALAR);
    if (!n) break;
    n->text = malloc(yn->data.scalar.length + 1);
    if (!n->text) break;
    memcpy(n->text, yn->data.scalar.value, yn->data.scalar.length);
    n->text[yn->data.scalar.length] = 0;
    n->quoted = yn->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    n->is_null = plain_null(yn);
    break;
  case YAML_SEQUENCE_NODE:
    n = zrt_dnode_new(ZRT_DN_SEQ);
    if (!n) break;
    for (yaml_node_item_t *it = yn->data.sequence.items.start; it < yn->data.sequence.items.top;
         it++) {
      zrt_dnode *k = conv(c, yaml_document_get_node(c->doc, *it), depth + 1);
      if (!k || zrt_dnode_add(n, k)) {
        zrt_dnode_free(k);
        c->failed = 1;
        break;
      }
    }
    break;
  case YAML_MAPPING_NODE:
    n = zrt_dnode_new(ZRT_DN_MAP);
    if (!n) break;
    for (yaml_node_pair_t *pr = yn->data.mapping.pairs.start; pr < yn->data.mapping.pairs.top;
         pr++) {
      yaml_node_t *kn = yaml_document_get_node(c->doc, pr->key);
      if (!kn) {
        c->failed = 1;
        break;
      }
      if (kn->type != YAML_SCALAR_NODE) {
        zrt_cfg_errs_add(c->errs, "%s:%lu:%lu: a mapping key must be a plain name, not a %s",
                         c->file, (unsigned long)kn->start_mark.line + 1,
                         (unsigned long)kn->start_mark.column + 1,
                         kn->type == YAML_MAPPING_NODE ? "mapping" : "list");
        c->failed = 1;
        break;
      }
      zrt_dnode *k = conv(c, yaml_document_get_node(c->doc, pr->value), depth + 1);
      if (!k) {
        c->failed = 1;
        break;
      }
      k->key = malloc(kn->data.scalar.length + 1);
      if (k->key) {
        memcpy(k->key, kn->data.scalar.value, kn->data.scalar.length);
        k->key[kn->data.scalar.length] = 0;
      }
      k->kline = (int)kn->start_mark.line + 1;
      k->kcol = (int)kn->start_mark.column + 1;
      if (!k->key || zrt_dnode_add(n, k)) {
        zrt_dnode_free(k);
        c->failed = 1;
        break;
      }
    }
    break;
  default: break;
  }
  if (!n) {
    c->failed = 1;
    return NULL;
  }
  n->line = (int)yn->start_mark.line + 1;
  n->col = (int)yn->start_mark.column + 1;
  if (c->failed) {
    zrt_dnode_free(n);
    return NULL;
  }
  return n;
}

static void parser_error(const yaml_parser_t *p, const char *file, zrt_cfg_errs *errs) {
  const yaml_mark_t *m = &p->problem_mark;
  zrt_cfg_errs_add(errs, "%s:%lu:%lu: malformed YAML: %s%s%s", file, (unsigned long)m->line + 1,
                   (unsigned long)m->column + 1, p->problem ? p->problem : "parse error",
                   p->context ? " " : "", p->context ? p->context : "");
}

/* The event pass (see the top): 0 when no collection nests deeper than
 * YAML_MAX_DEPTH, else -1 with the error added. A malformed text passes
 * here; the document load below reports it. */
static int depth_check(const char *text, size_t len, const char *file, zrt_cfg_errs *errs) {
  yaml_parser_t parser;
  if (!yaml_parser_initialize(&parser)) return 0; /* the load reports it */
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  int depth = 0, rc = 0;
  for (;;) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&parser, &ev)) break;
    yaml_event_type_t t = ev.type;
    if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) {
      if (++depth > YAML_MAX_DEPTH) {
        zrt_cfg_errs_add(errs,
                         "%s:%lu:%lu: YAML nests too deep (more than %d levels of mappings and "
                         "lists); a config nests a few levels",
                         file, (unsigned long)ev.start_mark.line + 1,
                         (unsigned long)ev.start_mark.column + 1, YAML_MAX_DEPTH);
        rc = -1;
      }
    } else if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) {
      depth--;
    }
    yaml_event_delete(&ev);
    if (rc || t == YAML_STREAM_END_EVENT) break;
  }
  yaml_parser_delete(&parser);
  return rc;
}

zrt_dnode *zrt_config_parse_yaml(const char *text, size_t len, const char *file,
                                 zrt_cfg_errs *errs) {
  yaml_parser_t parser;
  yaml_document_t doc;
  zrt_dnode *tree = NULL;
  if (depth_check(text, len, file, errs)) return NULL;
  if (!yaml_parser_initialize(&parser)) {
    zrt_cfg_errs_add(errs, "%s: cannot initialise the YAML parser (out of memory)", file);
    return NULL;
  }
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  if (!yaml_parser_load(&parser, &doc)) {
    parser_error(&parser, file, errs);
    yaml_parser_delete(&parser);
    return NULL;
  }
  yaml_node_t *root = yaml_document_get_root_node(&doc);
  if (!root) {
    zrt_cfg_errs_add(errs,
                     "%s: the file is empty (no YAML document); expected keys such as "
                     "zero_optimization: or num_processes:",
                     file);
  } else if (root->type != YAML_MAPPING_NODE) {
    zrt_cfg_errs_add(errs, "%s:%lu:%lu: expected a mapping of config keys at the top level, got %s",
                     file, (unsigned long)root->start_mark.line + 1,
                     (unsigned long)root->start_mark.column + 1,
                     root->type == YAML_SCALAR_NODE ? "a scalar" : "a list");
  } else {
    yconv c = {.doc = &doc, .file = file, .errs = errs, .budget = YAML_MAX_NODES};
    tree = conv(&c, root, 0);
    if (!tree && !c.failed) zrt_cfg_errs_add(errs, "%s: out of memory reading YAML", file);
    if (!tree && c.failed && errs->n == 0)
      zrt_cfg_errs_add(errs, "%s: out of memory reading YAML", file);
  }
  yaml_document_delete(&doc);
  if (tree) {
    /* a second document would be silently ignored: say so instead */
    yaml_document_t doc2;
    if (!yaml_parser_load(&parser, &doc2)) {
      parser_error(&parser, file, errs);
      zrt_dnode_free(tree);
      tree = NULL;
    } else {
      yaml_node_t *r2 = yaml_document_get_root_node(&doc2);
      if (r2) {
        zrt_cfg_errs_add(
            errs, "%s:%lu:%lu: a second YAML document ('---'); a config file holds one", file,
            (unsigned long)r2->start_mark.line + 1, (unsigned long)r2->start_mark.column + 1);
        zrt_dnode_free(tree);
        tree = NULL;
      }
      yaml_document_delete(&doc2);
    }
  }
  yaml_parser_delete(&parser);
  return tree;
}
