// write_json: the document is cut into parts (literal text, and values whose text nlohmann's
// serializer makes at their indentation), parts are grouped into tasks, worker threads render
// the tasks, and the calling thread writes each task's text as soon as it and those before it
// are done.
#include "analyzer/json_text.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/parallel.h"

namespace fr::analyzer {
namespace {

using nlohmann::json;

// Containers at most this deep are cut into their members (document, findings, a finding, its
// evidence): deeper values are rendered whole.
constexpr int kMaxDepth = 3;
// Bytes that are not UTF-8 (a damaged or hostile dump's host or communicator name) are written as
// U+FFFD rather than failing the whole document.
constexpr auto kInvalidUtf8 = json::error_handler_t::replace;

// A container with at least this many members is worth cutting.
constexpr size_t kWideMembers = 64;
// Values rendered per task.
constexpr size_t kValuesPerTask = 64;

struct Part {
  const json* value = nullptr;  // null: `text` is literal
  unsigned indent = 0;          // of the value's first line's container
  std::string text;
};

bool worth_cutting(const json& v, int depth) {
  if (!v.is_structured() || v.empty() || depth > kMaxDepth) return false;
  if (v.size() >= kWideMembers) return true;
  for (const auto& child : v)
    if (worth_cutting(child, depth + 1)) return true;
  return false;
}

class Parts {
 public:
  explicit Parts(unsigned step) : step_(step) {}

  void add(const json& v, unsigned indent, int depth) {
    if (!worth_cutting(v, depth)) {
      parts_.push_back(Part{&v, indent, {}});
      return;
    }
    const bool object = v.is_object();
    literal(object ? "{\n" : "[\n");
    size_t i = 0;
    for (auto it = v.begin(); it != v.end(); ++it, ++i) {
      std::string lead(indent + step_, ' ');
      if (object) lead += json(it.key()).dump(-1, ' ', false, kInvalidUtf8) + ": ";
      literal(lead);
      add(*it, indent + step_, depth + 1);
      literal(i + 1 < v.size() ? ",\n" : "\n");
    }
    literal(std::string(indent, ' ') + (object ? "}" : "]"));
  }

  std::vector<Part>& parts() { return parts_; }

 private:
  void literal(const std::string& s) {
    if (parts_.empty() || parts_.back().value) parts_.push_back(Part{});
    parts_.back().text += s;
  }

  unsigned step_;
  std::vector<Part> parts_;
};

struct Task {
  size_t begin = 0, end = 0;  // parts
  std::string text;
};

void render(const std::vector<Part>& parts, unsigned step, Task* t) {
  using Serializer = nlohmann::detail::serializer<json>;
  Serializer s(nlohmann::detail::output_adapter<char, std::string>(t->text), ' ', kInvalidUtf8);
  for (size_t i = t->begin; i < t->end; ++i) {
    const Part& p = parts[i];
    if (p.value)
      s.dump(*p.value, true, false, step, p.indent);
    else
      t->text += p.text;
  }
}

}  // namespace

bool write_json(const json& doc, int indent, std::ostream& out, unsigned threads) {
  if (indent < 0) return static_cast<bool>(out << doc.dump(indent, ' ', false, kInvalidUtf8));
  const unsigned step = static_cast<unsigned>(indent);
  Parts cut(step);
  cut.add(doc, 0, 0);
  const std::vector<Part>& parts = cut.parts();
  std::vector<Task> tasks;
  for (size_t i = 0; i < parts.size();) {
    Task t;
    t.begin = i;
    for (size_t values = 0; i < parts.size() && values < kValuesPerTask; ++i)
      values += parts[i].value != nullptr;
    t.end = i;
    tasks.push_back(std::move(t));
  }
  // Written in order; each task's text is freed once written. What a task threw is thrown here,
  // as nlohmann's dump would have thrown it, once every worker has stopped.
  fr::parallel::for_each_index_ordered(
      tasks.size(), threads, [&](size_t t) { render(parts, step, &tasks[t]); },
      [&](size_t t) {
        if (out)
          out.write(tasks[t].text.data(), static_cast<std::streamsize>(tasks[t].text.size()));
        std::string().swap(tasks[t].text);
      });
  return static_cast<bool>(out);
}

}  // namespace fr::analyzer
