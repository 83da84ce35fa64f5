// Prometheus's text exposition format (version 0.0.4), written one way for every /metrics page
// (the node daemon's, the coordinator's state and its server's): each family opens with its
// HELP and TYPE lines, then its samples, `name value` or `name{label="value"} value`. Integers
// print in full, floating-point values as `%g` does (as an ostream does by default), text values
// as given; label values are escaped as the format asks (backslash, quote, newline).
#pragma once

#include <cstdio>
#include <initializer_list>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace fr {

class PrometheusText {
 public:
  // Opens a family: `type` is "gauge" or "counter"; the samples that follow belong to it.
  PrometheusText& family(std::string_view name, std::string_view type, std::string_view help) {
    name_.assign(name);
    out_.append("# HELP ").append(name).append(" ").append(help).append("\n");
    out_.append("# TYPE ").append(name).append(" ").append(type).append("\n");
    return *this;
  }

  // One sample of the open family.
  template <typename T>
  PrometheusText& sample(const T& value) {
    out_.append(name_).append(" ").append(text(value)).append("\n");
    return *this;
  }
  template <typename T>
  PrometheusText& sample(std::string_view label, std::string_view label_value, const T& value) {
    return sample({{label, label_value}}, value);
  }
  // One sample with several labels, in the order given.
  template <typename T>
  PrometheusText& sample(
      std::initializer_list<std::pair<std::string_view, std::string_view>> labels, const T& value) {
    out_.append(name_).append("{");
    const char* sep = "";
    for (const auto& [label, label_value] : labels) {
      out_.append(sep).append(label).append("=\"");
      sep = ",";
      for (char c : label_value) {
        if (c == '\\' || c == '"') out_.push_back('\\');
        if (c == '\n') {
          out_.append("\\n");
          continue;
        }
        out_.push_back(c);
      }
      out_.append("\"");
    }
    out_.append("} ").append(text(value)).append("\n");
    return *this;
  }

  // A family of one sample.
  template <typename T>
  PrometheusText& gauge(std::string_view name, std::string_view help, const T& value) {
    return family(name, "gauge", help).sample(value);
  }
  template <typename T>
  PrometheusText& counter(std::string_view name, std::string_view help, const T& value) {
    return family(name, "counter", help).sample(value);
  }

  const std::string& str() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  template <typename T>
  static std::string text(const T& value) {
    if constexpr (std::is_same_v<T, bool>) {
      return value ? "1" : "0";
    } else if constexpr (std::is_integral_v<T>) {
      return std::to_string(value);
    } else if constexpr (std::is_floating_point_v<T>) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", double(value));
      return buf;
    } else {
      return std::string(std::string_view(value));
    }
  }

  std::string out_;
  std::string name_;
};

}  // namespace fr
