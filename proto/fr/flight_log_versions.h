/*
 * What each version of the flight-log format defines of each structure (fr/flight_log.h, whose
 * structures this checks against): the reader (log/reader.cpp) refuses a structure stored
 * smaller than its version defines and reads what the version did not define as zero. Included by
 * flight_log.h after the structures; not meant to be included alone.
 */
#ifndef FR_FLIGHT_LOG_VERSIONS_H_
#define FR_FLIGHT_LOG_VERSIONS_H_

/* The bytes of each structure that each version defines: up to the end of its last field,
 * trailing reserved bytes excluded. A new version adds its own set here and to the reader. */
#define FR_V1_HEADER_BYTES 336u /* up to exe: no graph fields */
#define FR_V1_COMM_BYTES 208u   /* up to gpu_completed: no graph position */
#define FR_V1_RECORD_BYTES 128u
#define FR_V1_GRAPH_BYTES 0u    /* no graph table */
#define FR_V2_HEADER_BYTES 376u /* up to capture_count */
#define FR_V2_COMM_BYTES 224u   /* up to graph_completed */
#define FR_V2_RECORD_BYTES 128u
#define FR_V2_GRAPH_BYTES 64u /* up to last_launch_ns */
#define FR_V3_HEADER_BYTES 376u
#define FR_V3_COMM_BYTES 224u
#define FR_V3_RECORD_BYTES 128u
#define FR_V3_GRAPH_BYTES 72u   /* up to gpu_replays */
#define FR_V4_HEADER_BYTES 400u /* up to xfer_dropped */
#define FR_V4_COMM_BYTES 224u
#define FR_V4_RECORD_BYTES 128u
#define FR_V4_GRAPH_BYTES 72u
#define FR_V4_XFER_BYTES 304u   /* up to gpu_done */
#define FR_V5_HEADER_BYTES 424u /* up to chan_dropped */
#define FR_V5_COMM_BYTES 224u
#define FR_V5_RECORD_BYTES 128u
#define FR_V5_GRAPH_BYTES 72u
#define FR_V5_CHAN_BYTES 120u /* up to op_start_ns */
#define FR_V5_XFER_BYTES 304u
#define FR_V6_HEADER_BYTES 436u /* up to gpu_event_streams */
#define FR_V6_COMM_BYTES 224u
#define FR_V6_RECORD_BYTES 128u
#define FR_V6_GRAPH_BYTES 72u
#define FR_V6_CHAN_BYTES 120u
#define FR_V6_XFER_BYTES 304u
#define FR_V7_HEADER_BYTES 452u /* up to section_size: the directory's place */
#define FR_V7_SECTION_BYTES 40u /* a whole fr_log_section row */
#define FR_V7_COMM_BYTES 224u
#define FR_V7_RECORD_BYTES 128u
#define FR_V7_GRAPH_BYTES 72u
#define FR_V7_CHAN_BYTES 120u
#define FR_V7_XFER_BYTES 304u
FR_STATIC_ASSERT(FR_V4_HEADER_BYTES == offsetof(fr_log_header, chan_offset), "v4 header");
FR_STATIC_ASSERT(FR_V5_HEADER_BYTES == offsetof(fr_log_header, gpu_error), "v5 header");
FR_STATIC_ASSERT(FR_V6_HEADER_BYTES == offsetof(fr_log_header, section_count), "v6 header");
FR_STATIC_ASSERT(FR_V7_HEADER_BYTES == offsetof(fr_log_header, reserved), "v7 header");
FR_STATIC_ASSERT(FR_V7_SECTION_BYTES == sizeof(fr_log_section), "v7 section row");
FR_STATIC_ASSERT(FR_V5_CHAN_BYTES == offsetof(fr_chan_entry, reserved), "v5 chan entry");
FR_STATIC_ASSERT(FR_V1_HEADER_BYTES == offsetof(fr_log_header, graph_offset), "v1 header");
FR_STATIC_ASSERT(FR_V1_COMM_BYTES == offsetof(fr_comm_entry, graph_started), "v1 comm entry");
FR_STATIC_ASSERT(FR_V2_GRAPH_BYTES == offsetof(fr_graph_entry, gpu_replays), "v2 graph entry");
FR_STATIC_ASSERT(FR_V3_HEADER_BYTES == offsetof(fr_log_header, xfer_offset), "v3 header");
FR_STATIC_ASSERT(FR_V4_XFER_BYTES == offsetof(fr_xfer_entry, reserved), "v4 xfer entry");
FR_STATIC_ASSERT(FR_V3_COMM_BYTES == offsetof(fr_comm_entry, reserved), "v3 comm entry");
FR_STATIC_ASSERT(FR_V3_RECORD_BYTES == sizeof(fr_record), "v3 record");
FR_STATIC_ASSERT(FR_V3_GRAPH_BYTES == offsetof(fr_graph_entry, reserved), "v3 graph entry");

#endif /* FR_FLIGHT_LOG_VERSIONS_H_ */
