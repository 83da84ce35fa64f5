// fr::PrometheusText (common/prometheus.h): the text every /metrics page is written in.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "common/prometheus.h"

TEST_CASE("prometheus text: families, samples, labels and numbers", "[common]") {
  fr::PrometheusText o;
  o.gauge("frd_x", "An x.", uint64_t{18446744073709551615u});
  o.family("frd_nodes", "gauge", "Node daemons.")
      .sample("state", "connected", 2)
      .sample("state", "lost", size_t{0});
  o.counter("frd_total", "A count.", true);
  o.gauge("frd_seconds", "Seconds, as an ostream prints them.", 0.25);
  o.gauge("frd_small", "Six significant digits.", 1234567.0);
  o.gauge("frd_text", "Given as text.", std::string("0.500000"));
  o.family("frd_odd", "gauge", "Label values escaped.").sample("path", "a\"b\\c\nd", -3);
  const std::string want =
      "# HELP frd_x An x.\n# TYPE frd_x gauge\nfrd_x 18446744073709551615\n"
      "# HELP frd_nodes Node daemons.\n# TYPE frd_nodes gauge\n"
      "frd_nodes{state=\"connected\"} 2\nfrd_nodes{state=\"lost\"} 0\n"
      "# HELP frd_total A count.\n# TYPE frd_total counter\nfrd_total 1\n"
      "# HELP frd_seconds Seconds, as an ostream prints them.\n# TYPE frd_seconds gauge\n"
      "frd_seconds 0.25\n"
      "# HELP frd_small Six significant digits.\n# TYPE frd_small gauge\nfrd_small 1.23457e+06\n"
      "# HELP frd_text Given as text.\n# TYPE frd_text gauge\nfrd_text 0.500000\n"
      "# HELP frd_odd Label values escaped.\n# TYPE frd_odd gauge\n"
      "frd_odd{path=\"a\\\"b\\\\c\\nd\"} -3\n";
  CHECK(o.str() == want);
  CHECK(o.take() == want);
}
