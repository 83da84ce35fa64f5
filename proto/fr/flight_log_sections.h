/*
 * The sections of a flight log (version 7 on) and where a writer of this version places them: one
 * list of the kinds, one layout function for every writer (the agent, snapshots, converted torch
 * dumps), so adding a table is one row in FR_SECTION_LIST, its entry structure, and the reader's
 * handling of its entries. Readers follow the directory stored in the file instead, since older
 * and newer writers place sections elsewhere. Included by fr/flight_log.h, which defines the
 * structures these sizes come from.
 */
#ifndef FR_FLIGHT_LOG_SECTIONS_H_
#define FR_FLIGHT_LOG_SECTIONS_H_

#ifndef FR_FLIGHT_LOG_H_
#error "include fr/flight_log.h, which includes this header"
#endif

/* clang-format off */
/* One row of the section directory (version 7 on): one table of the log. A row whose capacity is
 * 0 describes no table. Rows follow each other at section_size bytes; a reader takes the rows by
 * kind, never by position, and refuses a kind it does not know, a kind twice, and rows whose
 * tables overlap, leave the file or hold entries smaller than their version defines. */
typedef struct fr_log_section {
  uint32_t kind;            /*   0 fr_section_kind (FR_SECTION_LIST) */
  uint32_t entry_size;      /*   4 sizeof the entry of the writer */
  uint64_t offset;          /*   8 byte offset of the first entry */
  uint32_t capacity;        /*  16 entries */
  uint32_t reserved0;       /*  20 zero */
  uint64_t count;           /*  24 entries in use: never above capacity (atomic); ring: 0 */
  uint64_t dropped;         /*  32 entries that found no room (atomic); ring: 0 */
} fr_log_section;           /*  40 */
/* clang-format on */
FR_STATIC_ASSERT(sizeof(fr_log_section) == 40, "fr_log_section is 40 bytes");
FR_STATIC_ASSERT(offsetof(fr_log_section, count) == 24, "section layout");

/* X(ENUM_SUFFIX, value, "name", entry type, maximum capacity), in the order a writer of this
 * version lays the sections out. Values are part of the format: append only, never renumber. */
#define FR_SECTION_LIST(X)                                          \
  X(COMMS, 0, "communicators", fr_comm_entry, FR_MAX_COMM_CAPACITY) \
  X(RING, 1, "ring", fr_record, FR_MAX_RING_CAPACITY)               \
  X(GRAPHS, 2, "graphs", fr_graph_entry, FR_MAX_GRAPH_CAPACITY)     \
  X(CAPTURES, 3, "captures", fr_record, FR_MAX_CAPTURE_CAPACITY)    \
  X(CHANS, 4, "channels", fr_chan_entry, FR_MAX_CHAN_CAPACITY)      \
  X(XFERS, 5, "transfers", fr_xfer_entry, FR_MAX_XFER_CAPACITY)

typedef enum fr_section_kind {
#define FR_X_SECTION_ENUM(e, v, s, t, m) FR_SECTION_##e = v,
  FR_SECTION_LIST(FR_X_SECTION_ENUM)
#undef FR_X_SECTION_ENUM
      FR_SECTION_KINDS /* kinds this version knows; rows of the directory a writer of it writes */
} fr_section_kind;

/* The size of one entry of a section of this version, 0 for an unknown kind. */
static inline uint32_t fr_section_entry_size(uint32_t kind) {
  switch (kind) {
#define FR_X_SECTION_SIZE(e, v, s, t, m) \
  case v: return (uint32_t)sizeof(t);
    FR_SECTION_LIST(FR_X_SECTION_SIZE)
#undef FR_X_SECTION_SIZE
  }
  return 0;
}

/* The most entries a section of the kind may hold, 0 for an unknown kind. */
static inline uint32_t fr_section_max_capacity(uint32_t kind) {
  switch (kind) {
#define FR_X_SECTION_MAX(e, v, s, t, m) \
  case v: return (uint32_t)(m);
    FR_SECTION_LIST(FR_X_SECTION_MAX)
#undef FR_X_SECTION_MAX
  }
  return 0;
}

/* Where the first section starts: after the header and a directory of every kind, rounded up to a
 * cache line, so that every table (all entry sizes are multiples of 64) keeps whole lines. */
static inline uint64_t fr_log_sections_start(void) {
  return (sizeof(fr_log_header) + FR_SECTION_KINDS * sizeof(fr_log_section) + 63u) & ~(uint64_t)63u;
}

/* Lays out a log of this version holding capacity[kind] entries of each kind: fills dir[kind]
 * (kind, entry size, offset, capacity; counts zero), the sections in kind order after the
 * directory, and returns the file's size. The one computation of a log's geometry. */
static inline uint64_t fr_log_layout(const uint32_t capacity[FR_SECTION_KINDS],
                                     fr_log_section dir[FR_SECTION_KINDS]) {
  uint64_t at = fr_log_sections_start();
  for (uint32_t k = 0; k < FR_SECTION_KINDS; ++k) {
    fr_log_section* s = &dir[k];
    s->kind = k;
    s->entry_size = fr_section_entry_size(k);
    s->offset = at;
    s->capacity = capacity[k];
    s->reserved0 = 0;
    s->count = 0;
    s->dropped = 0;
    at += (uint64_t)capacity[k] * s->entry_size;
  }
  return at;
}

/* Writer: the directory fields of a new log's header (the rows themselves are the caller's, at
 * header->section_offset). */
static inline void fr_log_header_set_directory(fr_log_header* h) {
  h->section_count = FR_SECTION_KINDS;
  h->section_offset = sizeof(fr_log_header);
  h->section_size = sizeof(fr_log_section);
}

/* The row of `kind` in a log this version's writer laid out (rows in kind order), or NULL. For
 * tools and tests that look into a log they trust; everything else reads through log/reader.h. */
static inline fr_log_section* fr_log_section_of(const fr_log_header* h, uint32_t kind) {
  if (h->version < 7 || kind >= h->section_count || kind >= FR_SECTION_KINDS) return NULL;
  fr_log_section* row = (fr_log_section*)((const uint8_t*)h + h->section_offset) + kind;
  return row->kind == kind ? row : NULL;
}

#endif /* FR_FLIGHT_LOG_SECTIONS_H_ */
