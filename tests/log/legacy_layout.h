// A generator of version 1 to 6 flight logs' geometry, for tests of the reader's compatibility:
// those versions kept each table's offset and capacity in fixed header fields and placed the
// tables in this order (a version without a table, or a log whose table has capacity 0, takes
// none of its bytes): header, communicators, ring, graphs, captures, channels, transfers. The
// writers of this version lay logs out with fr_log_layout (fr/flight_log_sections.h) instead.
#pragma once

#include <cstdint>

#include "fr/flight_log.h"

namespace fr::test::v6 {

constexpr uint32_t kVersion = 6;  // the last version with the tables' rows in the header

inline uint64_t comm_offset() { return sizeof(fr_log_header); }
inline uint64_t ring_offset(uint32_t comms) {
  return comm_offset() + uint64_t{comms} * sizeof(fr_comm_entry);
}
inline uint64_t graph_offset(uint32_t comms, uint32_t ring) {
  return ring_offset(comms) + uint64_t{ring} * sizeof(fr_record);
}
inline uint64_t capture_offset(uint32_t comms, uint32_t ring, uint32_t graphs) {
  return graph_offset(comms, ring) + uint64_t{graphs} * sizeof(fr_graph_entry);
}
inline uint64_t chan_offset(uint32_t comms, uint32_t ring, uint32_t graphs, uint32_t captures) {
  return capture_offset(comms, ring, graphs) + uint64_t{captures} * sizeof(fr_record);
}
inline uint64_t xfer_offset(uint32_t comms, uint32_t ring, uint32_t graphs, uint32_t captures,
                            uint32_t chans) {
  return chan_offset(comms, ring, graphs, captures) + uint64_t{chans} * sizeof(fr_chan_entry);
}
inline uint64_t file_size(uint32_t comms, uint32_t ring, uint32_t graphs, uint32_t captures,
                          uint32_t chans = 0, uint32_t xfers = 0) {
  return xfer_offset(comms, ring, graphs, captures, chans) +
         uint64_t{xfers} * sizeof(fr_xfer_entry);
}

}  // namespace fr::test::v6
