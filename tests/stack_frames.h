// Reading a stack of the dump set (fr-stacks/1 frames, innermost first) in tests: its functions as
// one line for messages, and where a function appears in it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace fr::test {

// "hang_forever <- run_step <- main <- ...", for messages.
inline std::string frames_text(const nlohmann::json& frames) {
  std::string s;
  for (const auto& f : frames) s += f.value("function", std::string("?")) + " <- ";
  return s;
}

// Where `name` first appears among the frames' functions (the frames' count when it does not).
inline size_t frame_index(const nlohmann::json& frames, const std::string& name) {
  for (size_t i = 0; i < frames.size(); ++i)
    if (frames[i].value("function", std::string()).find(name) != std::string::npos) return i;
  return frames.size();
}

}  // namespace fr::test
