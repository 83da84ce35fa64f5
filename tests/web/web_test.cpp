// The pages an operator reads. First without a browser: the incident page and the live job from
// JSON (escaping, stacks, consequences), frd's log format and its throttle. Then what a person
// sees: headless Chromium loads `fr-analyze --html`'s file and a real coordinator's /, /incidents/ID
// (checked: the verdict sentence is on the page, the screenshot is not blank, the console is
// quiet), /api/v1/status answers JSON, and off loopback the listener asks for the token. Last, a
// node daemon with no coordinator and no log directory says so at once, then at a bounded rate.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "analyzer/html.h"
#include "daemon/base/logger.h"
#include "daemon/http/web.h"
#include "proc.h"
#include "skip.h"
#include "testing/files.h"
#include "testing/wait.h"

namespace fs = std::filesystem;
using namespace fr::clitest;
using fr::test::slurp;
using fr::test::spit;
using fr::test::wait_for;
using nlohmann::json;

namespace {

const std::string kBuild = FR_BUILD_DIR;
const std::string kFrd = kBuild + "/bin/frd";
const std::string kAnalyze = kBuild + "/bin/fr-analyze";
const std::string kSimjob = kBuild + "/bin/fr-simjob";

void need(const std::vector<std::string>& paths) {
  for (const auto& p : paths)
    if (::access(p.c_str(), X_OK) != 0) FR_SKIP(p << " is not built (build the target first)");
}

size_t count(const std::string& text, const std::string& word) {
  size_t n = 0;
  for (size_t pos = text.find(word); pos != std::string::npos; pos = text.find(word, pos + 1)) ++n;
  return n;
}

json stuck_analysis() {
  json ev = json::array();
  for (int r : {4, 5}) {
    json op = {{"seq", 9},
               {"kind", "coll"},
               {"op", "AllReduce"},
               {"dtype", "float32"},
               {"count", 8},
               {"state", r == 5 ? "enqueued" : "started"},
               {"call_ns", 1'000'000'000 + r},
               {"duration_ns", 2000}};
    json e = {{"rank", r},
              {"rank_in_comm", r - 4},
              {"host", "node<1>"},
              {"state", r == 5 ? "enqueued" : "started"},
              {"last_enqueued", op},
              {"last_started", r == 5 ? json(nullptr) : op},
              {"last_completed", nullptr},
              {"recent_ops", json::array({op})},
              {"read_ns", 3'000'000'000}};
    if (r == 5) {
      e["culprit"] = true;
      e["stack"] = json::array({{{"function", "ncclAllReduce"},
                                 {"file", "nccl.cc"},
                                 {"line", 42},
                                 {"module", "libnccl.so.2"},
                                 {"kind", "native"}},
                                {{"function", "train_step<float>"},
                                 {"file", "train.py"},
                                 {"line", 7},
                                 {"module", ""},
                                 {"kind", "python"}}});
    }
    ev.push_back(e);
  }
  return {
      {"schema", "fr-analysis/1"},
      {"verdict",
       {{"kind", "stuck_in_collective"},
        {"summary",
         "all members entered AllReduce #9 on comm dp<0>; the GPU of rank 5 never started it"},
        {"comm", {{"id", "0x00000000000000ab"}, {"name", "dp<0>"}, {"size", 2}}},
        {"seq", 9},
        {"seq_kind", "coll"},
        {"op", "AllReduce"},
        {"culprit_ranks", {5}},
        {"evidence", ev}}},
      {"findings",
       json::array(
           {{{"kind", "not_entered"}, {"summary", "pipeline waits"}, {"consequence", true}}})},
      {"ranks",
       {{"expected", 2}, {"found", {4, 5}}, {"missing", json::array()}, {"dead", json::array()}}},
      {"inputs", {{"clock", "aligned"}, {"skipped", json::array()}, {"warnings", json::array()}}}};
}

// --- A browser ----------------------------------------------------------------------------------

std::string chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    Result r = run({"/bin/sh", "-c", std::string("command -v ") + name}, {}, "/tmp");
    if (r.status == 0 && !r.out.empty()) return r.out.substr(0, r.out.find('\n'));
  }
  FR_SKIP("no chromium on PATH (scripts/install-deps.sh installs Debian's chromium)");
}

struct Seen {
  std::string dom;      // the DOM after load
  std::string console;  // console lines and load failures the browser reported for the page
  std::string ink;      // png_check.py's "colors=N ink=F"
};

// Loads `url` twice in headless Chromium: once for a screenshot, once for the DOM.
Seen look(const std::string& url, const std::string& dir, const std::string& name) {
  const std::string browser = chromium();
  std::vector<std::string> base = {browser,
                                   "--headless=new",
                                   "--no-sandbox",
                                   "--disable-gpu",
                                   "--hide-scrollbars",
                                   "--no-first-run",
                                   "--enable-logging=stderr",
                                   "--v=0",
                                   "--window-size=1300,1400",
                                   "--user-data-dir=" + dir + "/chromium-" + name};
  std::vector<std::string> shot = base, dom = base;
  const std::string png = dir + "/" + name + ".png";
  shot.push_back("--screenshot=" + png);
  shot.push_back(url);
  dom.push_back("--dump-dom");
  dom.push_back(url);
  const std::map<std::string, std::string> env = {{"HOME", dir}};
  Result a = run(shot, env, dir, "", 120);
  INFO(a.err);
  REQUIRE(a.status == 0);
  REQUIRE(fs::exists(png));
  Result b = run(dom, env, dir, "", 120);
  REQUIRE(b.status == 0);
  Seen s;
  s.dom = b.out;
  for (const std::string* err : {&a.err, &b.err}) {
    std::istringstream lines(*err);
    for (std::string line; std::getline(lines, line);)
      if (line.find("CONSOLE") != std::string::npos ||
          line.find("Failed to load") != std::string::npos ||
          line.find("Refused to") != std::string::npos)
        s.console += line + "\n";
  }
  Result c = run({"/usr/bin/env", "python3", FR_PNG_CHECK, png}, {}, dir);
  REQUIRE(c.status == 0);
  s.ink = c.out;
  return s;
}

// What a person must see: the sentence, a drawn page, a quiet console.
void check_page(const Seen& s, const std::string& sentence) {
  INFO(s.dom.substr(0, 4000));
  std::string text;  // as a DOM serializer writes text
  for (char c : sentence)
    text += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : std::string(1, c);
  CHECK(s.dom.find(text) != std::string::npos);
  INFO("console: " << s.console);
  CHECK(s.console.empty());
  std::smatch m;
  REQUIRE(std::regex_search(s.ink, m, std::regex("colors=(\\d+) ink=([0-9.]+)")));
  INFO(s.ink);
  CHECK(std::stoi(m[1]) > 20);    // text, badges, a timeline: many colors
  CHECK(std::stod(m[2]) > 0.02);  // and not an empty canvas
}

// A plain GET on 127.0.0.1: the status code and body (enough for our listener).
std::pair<int, std::string> http_get(int port, const std::string& path,
                                     const std::string& headers = "") {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return {-1, ""};
  }
  std::string req =
      "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n" + headers + "\r\n";
  if (::write(fd, req.data(), req.size()) != ssize_t(req.size())) {
    ::close(fd);
    return {-1, ""};
  }
  std::string resp;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) resp.append(buf, size_t(n));
  ::close(fd);
  int code = resp.size() > 12 ? std::atoi(resp.c_str() + 9) : -1;
  size_t body = resp.find("\r\n\r\n");
  return {code, body == std::string::npos ? "" : resp.substr(0, body + 4) + resp.substr(body + 4)};
}

// A finished simulated job whose rank 3's GPU stalls: its logs stay in OUT/nodeK/shm.
void simulated_hang(const std::string& out) {
  Result r = run({kSimjob, "--nodes", "2", "--ranks-per-node", "2", "--steps", "5", "--fault",
                  "rank=3,step=2,kind=gpu-stall", "--snapshot-after", "1", "--out", out, "--quiet"},
                 {}, "/tmp", "", 180);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
}

}  // namespace

// --- Without a browser ----------------------------------------------------------------------------

TEST_CASE("incident page: verdict, timeline, evidence with global and comm-local ranks, stacks",
          "[web]") {
  const std::string page = fr::analyzer::render_incident_html(stuck_analysis(), {});
  CHECK(page.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(page.find("id=\"verdict-sentence\">all members entered AllReduce #9 on comm dp&lt;0&gt;") !=
        std::string::npos);
  CHECK(page.find("dp&lt;0&gt; (0x00000000000000ab)") != std::string::npos);  // name (id)
  CHECK(page.find("<svg class=\"timeline\"") != std::string::npos);
  CHECK(page.find("▲ rank 5 (1)") != std::string::npos);  // culprit row, comm rank 1
  CHECK(page.find("class=\"culprit\"") != std::string::npos);
  CHECK(page.find("train_step&lt;float&gt;") != std::string::npos);  // the stack, escaped
  CHECK(page.find("libnccl.so.2") != std::string::npos);
  CHECK(page.find("consequence of the verdict") != std::string::npos);
  CHECK(page.find("node&lt;1&gt;") != std::string::npos);
  CHECK(page.find("<script") == std::string::npos);  // nothing to run
  CHECK(page.find("src=") == std::string::npos);     // nothing fetched
  CHECK(page.find("<link") == std::string::npos);
}

TEST_CASE("incident page: analysis-level stack groups are drawn once per group", "[web]") {
  json a = stuck_analysis();
  a["stack_groups"] =
      json::array({{{"ranks", {4}}, {"frames", {{{"function", "wait_a"}}}}},
                   {{"ranks", {5}}, {"frames", {{{"function", "spin_b"}, {"line", 3}}}}}});
  const std::string page = fr::analyzer::render_incident_html(a, {});
  CHECK(count(page, "wait_a") == 1);
  CHECK(count(page, "spin_b") == 1);
  CHECK(page.find("ncclAllReduce") == std::string::npos);  // groups replace the per-rank stacks
}

TEST_CASE("incident page: no analysis and odd documents give a page, not a crash", "[web]") {
  for (const json& a :
       {json(nullptr), json::object(), json{{"verdict", 3}}, json{{"verdict", {{"evidence", 1}}}},
        json{{"verdict", {{"kind", "no_hang"}, {"evidence", {{{"recent_ops", "x"}}}}}}}}) {
    const std::string page = fr::analyzer::render_incident_html(a, {});
    CHECK(page.find("</html>") != std::string::npos);
  }
}

TEST_CASE("live page: ranks, communicators with name (0x id), the oldest op in flight, incidents",
          "[web]") {
  json s = {{"job_id", "train<7>"},
            {"ranks", {{"expected", 2}, {"known", 2}, {"alive", 2}, {"dead", 0}}},
            {"node_counts", {{"known", 1}, {"connected", 1}, {"lost", 0}}},
            {"nodes",
             {{{"name", "n0"},
               {"host", "h0"},
               {"connected", true},
               {"lost", false},
               {"heartbeat_age_s", 0.5},
               {"processes",
                {{{"rank", 0},
                  {"pid", 10},
                  {"alive", true},
                  {"comms",
                   {{{"id", "00000000000000ab"},
                     {"name", "dp0"},
                     {"rank", 0},
                     {"completed", 5},
                     {"enqueued", 6},
                     {"oldest_in_flight_s", 42.0}}}}},
                 {{"rank", 1},
                  {"pid", 11},
                  {"alive", true},
                  {"comms",
                   {{{"id", "00000000000000ab"},
                     {"name", "dp0"},
                     {"rank", 1},
                     {"completed", 6},
                     {"enqueued", 6},
                     {"oldest_in_flight_s", 0.0}}}}}}}}}},
            {"incidents",
             {{{"id", "incident-0001"},
               {"kind", "stall"},
               {"state", "closed"},
               {"reason", "old"},
               {"verdict", "no_hang"},
               {"summary", "resolved"}},
              {{"id", "incident-0002"},
               {"kind", "stall"},
               {"state", "open"},
               {"reason", "AllReduce #6 stuck"},
               {"verdict", "stuck_in_collective"},
               {"summary", "the GPU of rank 0 never started it"}}}}};
  const std::string page = fr::daemon::render_live_page(s.get<fr::daemon::CoordinatorStatus>());
  CHECK(page.find("train&lt;7&gt;") != std::string::npos);
  CHECK(page.find("dp0 (0x00000000000000ab)") != std::string::npos);
  CHECK(page.find("incident-0002: the GPU of rank 0 never started it") != std::string::npos);
  CHECK(page.find("42.0 s") != std::string::npos);
  CHECK(page.find("href=\"/incidents/incident-0001\"") != std::string::npos);
  // The open incident is listed before the past one.
  CHECK(page.find("/incidents/incident-0002") < page.find("/incidents/incident-0001"));
  CHECK(page.find("http-equiv=\"refresh\"") != std::string::npos);
}

TEST_CASE("live page: the ranks and links found slow, with their evidence", "[web]") {
  json s = {{"job_id", "j"}, {"ranks", {{"alive", 4}, {"known", 4}}}, {"nodes", json::array()}};
  REQUIRE(
      fr::daemon::render_live_page(s.get<fr::daemon::CoordinatorStatus>()).find("slow-findings") ==
      std::string::npos);
  s["slow"] = {{{"cause", "link"},
                {"evidence", "channel 1's rank 2 -> rank 3 steps take 10.0x the others <NET>"}},
               {{"cause", "host"}, {"evidence", "rank 6 arrives late at 97% of dp collectives"}}};
  const std::string page = fr::daemon::render_live_page(s.get<fr::daemon::CoordinatorStatus>());
  CHECK(page.find("id=\"slow-findings\"") != std::string::npos);
  CHECK(page.find("link: channel 1&#39;s rank 2 -&gt; rank 3 steps take 10.0x the others "
                  "&lt;NET&gt;") != std::string::npos);
  CHECK(page.find("host: rank 6 arrives late at 97% of dp collectives") != std::string::npos);
}

TEST_CASE("frd log lines: UTC timestamp, level, text", "[web][log]") {
  // 2026-12-03T03:40:37.123Z
  const int64_t t = 1796269237'123'000'000LL;
  CHECK(fr::daemon::format_log_line(fr::daemon::LogLevel::kWarn, "frd node n1: x", t) ==
        "2026-12-03T03:40:37.123Z WARN  frd node n1: x");
  CHECK(fr::daemon::format_log_line(fr::daemon::LogLevel::kError, "y", t).find(" ERROR y") !=
        std::string::npos);
}

TEST_CASE("log throttle: at once, then once per interval with the count, again after it clears",
          "[web][log]") {
  fr::daemon::LogThrottle th(10);
  uint64_t n = 99;
  CHECK(th.due(100, &n));
  CHECK(n == 0);
  CHECK_FALSE(th.due(101, &n));
  CHECK_FALSE(th.due(109, &n));
  CHECK(th.due(110, &n));
  CHECK(n == 2);
  CHECK(th.clear());
  CHECK_FALSE(th.clear());
  CHECK(th.due(111, &n));  // a new episode is said at once
  CHECK(n == 0);
}

// --- In a browser, from real processes ------------------------------------------------------------

TEST_CASE("fr-analyze --html: one self-contained page that Chromium draws", "[web][browser]") {
  need({kAnalyze, kSimjob});
  chromium();
  TempDir tmp;
  simulated_hang(tmp.path + "/job");
  Result j = run({kAnalyze, "--json", tmp.path + "/job/dumps"}, {}, tmp.path);
  REQUIRE(j.status == 0);
  const json a = json::parse(j.out);
  const std::string sentence = a["verdict"]["summary"];
  REQUIRE(a["verdict"]["kind"] == "stuck_in_collective");
  const std::string html = tmp.path + "/incident.html";
  Result h = run({kAnalyze, "--html", html, tmp.path + "/job/dumps"}, {}, tmp.path);
  REQUIRE(h.status == 0);
  const std::string text = slurp(html);
  CHECK(text.find("<link") == std::string::npos);  // self-contained
  CHECK(text.find("src=") == std::string::npos);
  check_page(look("file://" + html, tmp.path, "analyze"), sentence);

  // An unwritable target is exit 4 with the path named.
  Result bad = run({kAnalyze, "--html", tmp.path + "/no/such/dir/x.html", tmp.path + "/job/dumps"},
                   {}, tmp.path);
  CHECK(bad.status == 4);
  CHECK(bad.err.find("no/such/dir/x.html") != std::string::npos);
}

TEST_CASE("frd coordinator: the live page, the incident page and /api/v1/status",
          "[web][browser]") {
  need({kFrd, kSimjob});
  chromium();
  TempDir tmp;
  simulated_hang(tmp.path + "/job");
  Proc coord(
      {kFrd, "coordinator", "--insecure", "--listen", "127.0.0.1:0", "--port-file",
       tmp.path + "/port", "--metrics-listen", "127.0.0.1:0", "--dump-dir", tmp.path + "/dumps"},
      {}, tmp.path, "coord");
  REQUIRE(wait_for(
      [&] {
        return fs::exists(tmp.path + "/port") &&
               coord.err().find("metrics on port") != std::string::npos;
      },
      20));
  const std::string port =
      slurp(tmp.path + "/port").substr(0, slurp(tmp.path + "/port").find('\n'));
  std::smatch m;
  const std::string log = coord.err();
  REQUIRE(std::regex_search(log, m, std::regex("metrics on port (\\d+)")));
  const int http = std::stoi(m[1]);
  // The daemon's log: timestamped and levelled.
  CHECK(std::regex_search(
      log,
      std::regex(
          "\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z INFO  frd coordinator: serving")));
  std::vector<std::unique_ptr<Proc>> nodes;
  for (int k = 0; k < 2; ++k)
    nodes.push_back(std::make_unique<Proc>(
        std::vector<std::string>{kFrd, "node", "--insecure", "--coordinator", "127.0.0.1:" + port,
                                 "--log-dir", tmp.path + "/job/node" + std::to_string(k) + "/shm",
                                 "--node-name", "node" + std::to_string(k), "--dump-dir",
                                 tmp.path + "/spool" + std::to_string(k)},
        std::map<std::string, std::string>{}, tmp.path, "node" + std::to_string(k)));
  REQUIRE(wait_for(
      [&] {
        return http_get(http, "/api/v1/status").second.find("\"connected\":2") != std::string::npos;
      },
      20));
  Result d = run(
      {kFrd, "dump", "--insecure", "--coordinator", "127.0.0.1:" + port, "--reason", "page check"},
      {}, tmp.path);
  REQUIRE(d.status == 0);
  const std::string id =
      d.out.substr(d.out.find(": ") + 2, d.out.find('\n') - d.out.find(": ") - 2);
  json incident;
  REQUIRE(wait_for(
      [&] {
        auto [code, body] = http_get(http, "/api/v1/status");
        if (code != 200) return false;
        json s = json::parse(body.substr(body.find("\r\n\r\n") + 4), nullptr, false);
        if (s.is_discarded()) return false;
        for (const auto& i : s["incidents"])
          if (i["id"] == id && !i["verdict"].get<std::string>().empty()) incident = i;
        return !incident.is_null();
      },
      60));
  CHECK(incident["verdict"] == "stuck_in_collective");
  const std::string sentence = incident["summary"];

  Seen page =
      look("http://127.0.0.1:" + std::to_string(http) + "/incidents/" + id, tmp.path, "incident");
  check_page(page, sentence);
  // What opened the incident is labelled as the trigger, below the verdict.
  const size_t trigger = page.dom.find("id=\"trigger\"");
  REQUIRE(trigger != std::string::npos);
  CHECK(trigger > page.dom.find("id=\"verdict-sentence\""));
  CHECK(page.dom.find("page check", trigger) != std::string::npos);
  Seen live = look("http://127.0.0.1:" + std::to_string(http) + "/", tmp.path, "live");
  check_page(live, sentence);  // the incident is listed with its verdict
  // Without a token no node may name the job, and the page does not make one up.
  CHECK(live.dom.find("Job job") == std::string::npos);
  CHECK(live.dom.find("Job not named yet") != std::string::npos);
  CHECK(live.dom.find("Communicators") != std::string::npos);
  CHECK(live.dom.find("rank 3") != std::string::npos);

  auto paged = http_get(http, "/api/v1/status?offset=1&limit=1&summary=1");
  CHECK(paged.first == 200);
  CHECK(paged.second.find("\"returned\":1") != std::string::npos);
  CHECK(paged.second.find("\"offset\":1") != std::string::npos);
  CHECK(http_get(http, "/api/v1/status?offset=-1").first == 400);
  CHECK(http_get(http, "/api/v1/status?limit=x").first == 400);
  CHECK(http_get(http, "/incidents/incident-9999").first == 404);
  CHECK(http_get(http, "/incidents/..%2F..%2Fetc").first == 404);
  auto metrics = http_get(http, "/metrics");
  CHECK(metrics.first == 200);
  CHECK(metrics.second.find("frd_incidents_total{kind=\"manual\"} 1") != std::string::npos);
}

TEST_CASE("HTTP listener off loopback: the token as a header or a cookie, refused without one",
          "[web]") {
  need({kFrd});
  TempDir tmp;
  spit(tmp.path + "/token", "s3cret-token\n");
  ::chmod((tmp.path + "/token").c_str(), 0600);
  Proc coord({kFrd, "coordinator", "--token-file", tmp.path + "/token", "--listen", "127.0.0.1:0",
              "--port-file", tmp.path + "/port", "--metrics-listen", "0.0.0.0:0", "--dump-dir",
              tmp.path + "/dumps"},
             {}, tmp.path, "coord");
  REQUIRE(wait_for([&] { return coord.err().find("metrics on port") != std::string::npos; }, 20));
  std::smatch m;
  const std::string log = coord.err();
  REQUIRE(std::regex_search(log, m, std::regex("metrics on port (\\d+)")));
  const int http = std::stoi(m[1]);
  CHECK(log.find("WARN  frd coordinator: the token travels in cleartext to the pages") !=
        std::string::npos);
  CHECK(http_get(http, "/api/v1/status").first == 401);
  CHECK(http_get(http, "/metrics").first == 401);
  CHECK(http_get(http, "/", "Authorization: Bearer wrong\r\n").first == 401);
  CHECK(http_get(http, "/api/v1/status", "Authorization: Bearer s3cret-token\r\n").first == 200);
  CHECK(http_get(http, "/metrics", "Cookie: a=b; fr_token=s3cret-token\r\n").first == 200);
  auto login = http_get(http, "/?token=s3cret-token");
  CHECK(login.first == 303);
  CHECK(login.second.find("fr_token=s3cret-token") != std::string::npos);
  CHECK(http_get(http, "/?token=nope").first == 401);

  // --insecure cannot serve off loopback: the pages show the whole job.
  Result r = run({kFrd, "coordinator", "--insecure", "--listen", "127.0.0.1:0", "--metrics-listen",
                  "0.0.0.0:0", "--dump-dir", tmp.path + "/dumps2"},
                 {}, tmp.path, "", 20);
  CHECK(r.status == 1);
  CHECK(r.err.find("needs a shared token") != std::string::npos);
}

TEST_CASE(
    "frd node: /metrics, and no coordinator and no log dir said at once, then at a bounded rate",
    "[web][log]") {
  need({kFrd});
  TempDir tmp;
  // Port 1 on loopback: nothing listens, every attempt is refused at once.
  Proc node({kFrd, "node", "--insecure", "--coordinator", "127.0.0.1:1", "--log-dir",
             tmp.path + "/no-such-dir", "--node-name", "n1", "--dump-dir", tmp.path + "/spool",
             "--metrics-listen", "127.0.0.1:0"},
            {}, tmp.path, "node");
  REQUIRE(wait_for(
      [&] {
        const std::string e = node.err();
        return e.find("cannot reach the coordinator") != std::string::npos &&
               e.find("cannot read the log directory") != std::string::npos;
      },
      5));
  std::smatch m;
  std::string log = node.err();
  CHECK(std::regex_search(
      log, std::regex("Z WARN  frd node n1: cannot reach the coordinator at 127.0.0.1:1")));
  CHECK(std::regex_search(
      log, std::regex(
               "Z WARN  frd node n1: cannot read the log directory .*no-such-dir: No such file")));
  REQUIRE(std::regex_search(log, m, std::regex("metrics on port (\\d+)")));
  const int http = std::stoi(m[1]);
  auto metrics = http_get(http, "/metrics");
  CHECK(metrics.first == 200);
  CHECK(metrics.second.find("frd_node_connected 0") != std::string::npos);
  CHECK(metrics.second.find("frd_node_log_dir_readable 0") != std::string::npos);
  // Several seconds of retries later (the backoff reaches 5 s): still one line each.
  std::this_thread::sleep_for(std::chrono::seconds(6));
  log = node.err();
  CHECK(count(log, "cannot reach the coordinator") == 1);
  CHECK(count(log, "cannot read the log directory") == 1);
  CHECK(http_get(http, "/metrics").second.find("frd_node_connect_failures_total 0") ==
        std::string::npos);
  // The directory appears: said once.
  fs::create_directories(tmp.path + "/no-such-dir");
  REQUIRE(wait_for([&] { return node.err().find("is readable again") != std::string::npos; }, 10));
}

TEST_CASE(
    "fr-analyze --trace: the slices of every track nest, and no track for a fake communicator",
    "[web][trace]") {
  need({kAnalyze, kSimjob});
  TempDir tmp;
  // TP 2 and PP 2: collectives, grouped point-to-point exchanges, a rank stuck on the host.
  Result r = run({kSimjob, "--nodes", "2", "--ranks-per-node", "4", "--tp", "2", "--pp", "2",
                  "--steps", "8", "--fault", "rank=5,step=3,kind=hang-host", "--snapshot-after",
                  "1", "--out", tmp.path + "/job", "--quiet"},
                 {}, "/tmp", "", 180);
  REQUIRE(r.status == 0);
  const std::string trace = tmp.path + "/trace.json";
  Result a = run({kAnalyze, "--trace", trace, tmp.path + "/job/dumps"}, {}, tmp.path);
  REQUIRE(a.status == 0);
  const json t = json::parse(slurp(trace));
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;  // (start, end) us
  std::map<std::string, int> async_open;
  bool groups = false, stall = false;
  for (const auto& e : t["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "process_name") {
      const std::string name = e["args"]["name"];
      INFO(name);
      CHECK(name.find("0x0000000000000000") == std::string::npos);
      CHECK(name.find("size -1") == std::string::npos);
      groups |= name.rfind("NCCL groups", 0) == 0;
    } else if (ph == "X") {
      const double ts = std::stod(e["ts"].dump()), dur = std::stod(e["dur"].dump());
      CHECK(dur >= 0);
      tracks[{e["pid"].get<int>(), e["tid"].get<int>()}].push_back({ts, ts + dur});
      stall |= e["name"].get<std::string>().rfind("STALL", 0) == 0;
    } else if (ph == "b" || ph == "e") {
      async_open[e["id"].get<std::string>()] += ph == "b" ? 1 : -1;
    }
  }
  CHECK(groups);
  CHECK(!tracks.empty());
  size_t slices = 0, overlaps = 0;
  for (auto& [track, s] : tracks) {
    // Sorted by start, the longer first: each slice must end inside every slice it starts in.
    std::sort(s.begin(), s.end(), [](const auto& x, const auto& y) {
      return x.first != y.first ? x.first < y.first : x.second > y.second;
    });
    std::vector<double> ends;
    for (const auto& [start, end] : s) {
      ++slices;
      while (!ends.empty() && ends.back() <= start + 1e-6) ends.pop_back();
      if (!ends.empty() && end > ends.back() + 1e-6) {
        ++overlaps;
        UNSCOPED_INFO("track pid " << track.first << " tid " << track.second << ": [" << start
                                   << ", " << end << ") crosses the end of its parent at "
                                   << ends.back());
      }
      ends.push_back(end);
    }
  }
  INFO(slices << " slices");
  CHECK(overlaps == 0);
  for (const auto& [id, n] : async_open) CHECK(n == 0);  // every async slice ends
  (void)stall;
}

TEST_CASE(
    "one dialect: name (0x id), global ranks with comm-local ones, the op's state, consequences",
    "[web][dialect]") {
  need({kAnalyze, kSimjob});
  TempDir tmp;
  Result r = run({kSimjob, "--nodes", "2", "--ranks-per-node", "4", "--tp", "2", "--pp", "2",
                  "--steps", "8", "--fault", "rank=5,step=3,kind=hang-host", "--snapshot-after",
                  "1", "--out", tmp.path + "/job", "--quiet"},
                 {}, "/tmp", "", 180);
  REQUIRE(r.status == 0);
  Result j = run({kAnalyze, "--json", tmp.path + "/job/dumps"}, {}, tmp.path);
  REQUIRE(j.status == 0);
  const json a = json::parse(j.out);
  REQUIRE(a["verdict"]["kind"] == "not_entered");
  // Rank 5 hangs on the host: everything else that waits does so because of it.
  size_t consequences = 0;
  for (const auto& f : a["findings"]) {
    INFO(f["summary"]);
    if (f["kind"] == "skew") {
      CHECK_FALSE(f.contains("consequence"));
      continue;
    }
    CHECK(f.value("consequence", false));
    CHECK(f["consequence_of"] == "not_entered");
    ++consequences;
    // Named communicators read `name (0x…)` in every sentence.
    if (f.contains("comm") && !f["comm"]["name"].get<std::string>().empty())
      CHECK(f["summary"].get<std::string>().find(f["comm"]["name"].get<std::string>() + " (0x") !=
            std::string::npos);
  }
  CHECK(consequences >= 2);
  Result t = run({kAnalyze, tmp.path + "/job/dumps"}, {}, tmp.path);
  REQUIRE(t.status == 0);
  INFO(t.out);
  CHECK(t.out.find("(consequence of the verdict)") != std::string::npos);
  CHECK(t.out.find("ranks: state | AllReduce #7 | last enqueued") != std::string::npos);
  CHECK(t.out.find("AllReduce #7: not called") != std::string::npos);
  // Peers are global ranks with the comm-local one in parentheses: never a bare comm-local number.
  CHECK(std::regex_search(t.out, std::regex("(to|from) rank \\d+ \\(\\d+\\)")));
  CHECK_FALSE(std::regex_search(t.out, std::regex("(to|from|root) \\d")));
}

TEST_CASE(
    "HTTP listener with the coordinator's TLS: HTTPS, and client certificates under mutual TLS",
    "[web]") {
  need({kFrd});
  TempDir tmp;
  const std::string d = tmp.path;
  const std::string script =
      "cd " + d +
      " && "
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.pem -days 2 "
      "-subj /CN=fr-test-ca && "
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key -out server.csr "
      "-subj /CN=localhost && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost' > ext && "
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile ext && "
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout client.key -out client.csr "
      "-subj /CN=node0 && "
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2";
  if (run({"/bin/sh", "-c", script}, {}, d).status != 0)
    FR_SKIP("no openssl: it could not make test certificates");
  Proc coord({kFrd, "coordinator", "--insecure", "--listen", "127.0.0.1:0", "--metrics-listen",
              "127.0.0.1:0", "--dump-dir", d + "/dumps", "--tls-cert", d + "/server.pem",
              "--tls-key", d + "/server.key", "--tls-client-ca", d + "/ca.pem"},
             {}, d, "coord");
  REQUIRE(wait_for([&] { return coord.err().find("metrics on port") != std::string::npos; }, 20));
  std::smatch m;
  const std::string log = coord.err();
  REQUIRE(std::regex_search(log, m, std::regex("metrics on port (\\d+)")));
  const std::string port = m[1];
  auto https = [&](const std::string& client_flags) {
    return run(
        {"/bin/sh", "-c",
         "cd " + d +
             " && printf 'GET /metrics HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: close\\r\\n\\r\\n' | "
             "timeout 10 openssl s_client -quiet -connect 127.0.0.1:" +
             port + " -CAfile ca.pem " + client_flags},
        {}, d, "", 20);
  };
  Result with_cert = https("-cert client.pem -key client.key");
  INFO(with_cert.out << with_cert.err);
  CHECK(with_cert.out.find("HTTP/1.1 200") != std::string::npos);
  CHECK(with_cert.out.find("frd_nodes") != std::string::npos);
  Result without = https("");
  CHECK(without.out.find("HTTP/1.1 200") == std::string::npos);
  // Plain HTTP on the TLS port gets no page.
  CHECK(http_get(std::stoi(port), "/metrics").first != 200);
}

TEST_CASE("live page: a job whose processes record nothing says so, not a green running badge",
          "[web]") {
  const std::string summary =
      "4 processes under fr-run on 1 node; none has called NCCL or NIXL yet";
  json s = {{"job_id", "gloo"},
            {"ranks", {{"expected", 4}, {"known", 0}, {"alive", 0}, {"dead", 0}}},
            {"processes", {{"total", 4}, {"recording", 0}, {"summary", summary}}},
            {"node_counts", {{"known", 1}, {"connected", 1}, {"lost", 0}}},
            {"nodes", json::array()},
            {"incidents", json::array()}};
  std::string page = fr::daemon::render_live_page(s.get<fr::daemon::CoordinatorStatus>());
  CHECK(page.find(summary + "; no incident open") != std::string::npos);
  CHECK(page.find("not recording") != std::string::npos);
  CHECK(page.find("card verdict ok") == std::string::npos);
  CHECK(page.find("processes <b>4</b>, recording NCCL or NIXL <b>0</b>") != std::string::npos);
  // Once they record, the usual view.
  s["processes"] = {{"total", 4}, {"recording", 4}, {"summary", "..."}};
  s["ranks"] = {{"expected", 4}, {"known", 4}, {"alive", 4}, {"dead", 0}};
  page = fr::daemon::render_live_page(s.get<fr::daemon::CoordinatorStatus>());
  CHECK(page.find("card verdict ok") != std::string::npos);
  CHECK(page.find("4 of 4 ranks alive") != std::string::npos);
}
