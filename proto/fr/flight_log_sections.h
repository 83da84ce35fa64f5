/*
 * The byte offsets of a flight log's sections and its total size, for given capacities, in the
 * current version's layout (the order proto/fr/flight_log.h draws). Whatever writes a log (the
 * agent, snapshots, converted torch dumps) places its sections with these; readers follow the
 * offsets stored in the header instead, since older and newer writers place them elsewhere.
 * Included by fr/flight_log.h, which defines the structures these sizes come from.
 */
#ifndef FR_FLIGHT_LOG_SECTIONS_H_
#define FR_FLIGHT_LOG_SECTIONS_H_

#ifndef FR_FLIGHT_LOG_H_
#error "include fr/flight_log.h, which includes this header"
#endif

/* Byte offsets and size of a log with the given capacities (current version). */
static inline uint64_t fr_log_comm_offset(void) { return sizeof(fr_log_header); }
static inline uint64_t fr_log_ring_offset(uint32_t comm_capacity) {
  return sizeof(fr_log_header) + (uint64_t)comm_capacity * sizeof(fr_comm_entry);
}
static inline uint64_t fr_log_graph_offset(uint32_t comm_capacity, uint32_t ring_capacity) {
  return fr_log_ring_offset(comm_capacity) + (uint64_t)ring_capacity * sizeof(fr_record);
}
static inline uint64_t fr_log_capture_offset(uint32_t comm_capacity, uint32_t ring_capacity,
                                             uint32_t graph_capacity) {
  return fr_log_graph_offset(comm_capacity, ring_capacity) +
         (uint64_t)graph_capacity * sizeof(fr_graph_entry);
}
static inline uint64_t fr_log_file_size(uint32_t comm_capacity, uint32_t ring_capacity,
                                        uint32_t graph_capacity, uint32_t capture_capacity) {
  return fr_log_capture_offset(comm_capacity, ring_capacity, graph_capacity) +
         (uint64_t)capture_capacity * sizeof(fr_record);
}
/* The channel table (version 5) follows the sections before it: it starts where a log of the
 * same capacities without it would end. */
static inline uint64_t fr_log_chan_offset(uint32_t comm_capacity, uint32_t ring_capacity,
                                          uint32_t graph_capacity, uint32_t capture_capacity) {
  return fr_log_file_size(comm_capacity, ring_capacity, graph_capacity, capture_capacity);
}
static inline uint64_t fr_log_file_size_chan(uint32_t comm_capacity, uint32_t ring_capacity,
                                             uint32_t graph_capacity, uint32_t capture_capacity,
                                             uint32_t chan_capacity) {
  return fr_log_chan_offset(comm_capacity, ring_capacity, graph_capacity, capture_capacity) +
         (uint64_t)chan_capacity * sizeof(fr_chan_entry);
}

/* The transfer table (version 4) follows the channel table: the writer chose that order because
 * the channel table landed first; readers find both through their offsets. */
static inline uint64_t fr_log_xfer_offset(uint32_t comm_capacity, uint32_t ring_capacity,
                                          uint32_t graph_capacity, uint32_t capture_capacity,
                                          uint32_t chan_capacity) {
  return fr_log_file_size_chan(comm_capacity, ring_capacity, graph_capacity, capture_capacity,
                               chan_capacity);
}
static inline uint64_t fr_log_file_size_all(uint32_t comm_capacity, uint32_t ring_capacity,
                                            uint32_t graph_capacity, uint32_t capture_capacity,
                                            uint32_t chan_capacity, uint32_t xfer_capacity) {
  return fr_log_xfer_offset(comm_capacity, ring_capacity, graph_capacity, capture_capacity,
                            chan_capacity) +
         (uint64_t)xfer_capacity * sizeof(fr_xfer_entry);
}

#endif /* FR_FLIGHT_LOG_SECTIONS_H_ */
