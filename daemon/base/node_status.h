// The node daemon's connection, said to the fr-runs of the node: `frd node` keeps
// LOG_DIR/frd-node.state up to date (written whole, by rename, whenever it changes) with its pid,
// the coordinator it follows and how that goes: `connected`, `refused` (the coordinator turned
// it away: a wrong or missing token, another job), or `unreachable` (nothing answers there, or
// the connection was lost). fr-run reads it to say a refusal on its first line instead of
// running unwatched in silence, and to tell a daemon whose coordinator is gone (which it may
// replace) from one that serves another live job (which it leaves alone). A reader trusts only a
// regular file of root or its own user, read without following a link or waiting; a file
// another user planted is ignored. Plain POSIX: fr-run links this alone.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace fr::daemon {

inline constexpr const char* kNodeStatusName = "frd-node.state";

struct NodeStatus {
  pid_t pid = 0;
  std::string coordinator;  // the address it follows
  std::string state;        // connected, refused, unreachable
  std::string message;      // the last error, one line ("UNAUTHENTICATED: wrong token (file ...)")
  int64_t since_real_ns = 0;  // when `state` began (CLOCK_REALTIME)
};

// LOG_DIR/frd-node.state.
std::string node_status_path(const std::string& log_dir);

// The file's text ("pid N\ncoordinator A\nstate S\nsince NS\nmessage M\n") and back. Parsing is
// lenient about order and strict about values: false when pid or state is missing or odd.
std::string format_node_status(const NodeStatus& s);
bool parse_node_status(const std::string& text, NodeStatus* out);

// Reads LOG_DIR/frd-node.state as described above; false when absent, untrusted or unreadable.
bool read_node_status(const std::string& log_dir, NodeStatus* out);

}  // namespace fr::daemon
