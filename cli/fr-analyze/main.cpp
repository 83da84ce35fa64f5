// fr-analyze: from a dump set (or single dumps, or PyTorch Flight Recorder dumps) to a verdict.
//
//   fr-analyze [--json] [--trace FILE] [--html FILE] [--comm ID] [--rank R]... PATH...
//   fr-analyze export --format torch-json|torch-pickle DIR OUT
//
// Exit codes (docs/fr-analyze.md): 0 the analysis finished, whatever the verdict; 2 bad usage;
// 3 unusable input (nothing readable); 4 an output could not be written; 5 the analysis finished
// on a dump set that mixes jobs (the verdict covers one of them); 1 an internal error.
#include <malloc.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <CLI/CLI.hpp>

#include "analyzer/analyze.h"
#include "analyzer/html.h"
#include "analyzer/json_text.h"
#include "analyzer/model.h"
#include "analyzer/torch/torch_dump.h"
#include "analyzer/trace.h"
#include "fr/version.h"
#include "log/snapshot.h"

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitInput = 3;
constexpr int kExitOutput = 4;
constexpr int kExitInternal = 1;
constexpr int kExitMixedJobs = 5;

namespace fs = std::filesystem;

bool write_text_file(const std::string& path, const std::string& text, std::string* error) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    *error = path + ": cannot write: " + std::strerror(errno);
    return false;
  }
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) {
    *error = path + ": writing failed: " + std::strerror(errno);
    return false;
  }
  return true;
}

int run_export(const std::string& format, const std::string& dir, const std::string& out) {
  if (format != "torch-json" && format != "torch-pickle") {
    std::cerr << "fr-analyze export: unknown format '" << format
              << "' (known: torch-json, torch-pickle)\n";
    return kExitUsage;
  }
  // The dump files: those the manifest lists, else every flight log in the directory.
  std::vector<std::string> files;
  fr::log::Manifest m;
  std::string err;
  std::error_code ec;
  if (fs::is_directory(dir, ec) && fs::exists(fs::path(dir) / "manifest.json", ec)) {
    if (!fr::log::read_manifest(dir, &m, &err)) {
      std::cerr << "fr-analyze export: " << err << "\n";
      return kExitInput;
    }
    for (const auto& p : m.processes) files.push_back((fs::path(dir) / p.file).string());
  } else if (fs::is_directory(dir, ec)) {
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == FR_LOG_FILE_SUFFIX) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
  } else if (fs::exists(dir, ec)) {
    files.push_back(dir);
  } else {
    std::cerr << "fr-analyze export: " << dir << ": no such file or directory\n";
    return kExitInput;
  }
  std::vector<fr::log::LogFile> logs;
  for (const auto& f : files) {
    auto r = fr::log::read_log(f);
    if (!r.ok()) {
      std::cerr << "fr-analyze export: skipped " << r.message << "\n";
      continue;
    }
    logs.push_back(std::move(*r.log));
  }
  if (logs.empty()) {
    std::cerr << "fr-analyze export: nothing readable in " << dir << "\n";
    return kExitInput;
  }
  // fr_trace itself loads the pickle form; other tooling often reads the JSON form.
  const bool pickle = format == "torch-pickle";
  bool written = pickle ? fr::analyzer::torch::export_torch_pickle(logs, out, &err)
                        : fr::analyzer::torch::export_torch_json(logs, out, &err);
  if (!written) {
    std::cerr << "fr-analyze export: " << err << "\n";
    return kExitOutput;
  }
  std::cout << "wrote " << logs.size() << " PyTorch Flight Recorder "
            << (pickle ? "pickle" : "JSON") << " file" << (logs.size() == 1 ? "" : "s") << " to "
            << out << "\n";
  return 0;
}

// Whether the process may end without destructors once its output is out. The analysis and its
// document are millions of small allocations (at 16,384 ranks freeing them takes longer than
// writing the document); every file fr-analyze writes is closed by then. Sanitizer builds free
// everything, so their leak check still sees all of it.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kFastExit = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
constexpr bool kFastExit = false;
#else
constexpr bool kFastExit = true;
#endif
#else
constexpr bool kFastExit = true;
#endif

// Flushes standard output; with the fast exit, ends the process there with the exit code
// (`done`, or kExitOutput when the output could not be written).
void finish(int done) {
  std::cout.flush();
  if (!kFastExit) return;
  std::fflush(stdout);
  std::_Exit(std::cout && !std::ferror(stdout) ? done : kExitOutput);
}

// 0, or kExitMixedJobs for a dump set that mixes jobs, said on stderr too (the JSON and the
// views say it in full, first).
int exit_code_of(const fr::analyzer::Analysis& analysis) {
  if (analysis.inputs.other_jobs.empty()) return 0;
  std::cerr << "fr-analyze: " << fr::analyzer::mixed_jobs_text(analysis.inputs) << "\n";
  return kExitMixedJobs;
}

}  // namespace

int main(int argc, char** argv) {
  // Each reader thread copies a whole log before reducing it; with the default threshold every
  // such buffer is a fresh mmap whose pages the kernel must clear. Reusing heap memory instead
  // saves about a third of the time on large dump sets.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  CLI::App app{"fr-analyze: name the communicator, the collective and the ranks that hung a job"};
  app.set_version_flag("--version", FR_VERSION_LINE("fr-analyze"));
  bool json_out = false;
  std::string trace_file, html_file;
  fr::analyzer::Options opts;
  std::vector<std::string> paths;
  app.add_flag("--json", json_out, "print the fr-analysis/1 JSON document");
  app.add_option("--trace", trace_file, "write a Chrome trace / Perfetto timeline to FILE");
  app.add_option("--html", html_file,
                 "write the incident page (one self-contained HTML file) to FILE");
  app.add_option("--comm", opts.comm, "show only this communicator (hex id prefix or name)");
  app.add_option("--rank", opts.ranks, "show only these global ranks (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--threads", opts.threads, "reader threads (0: one per core)");
  double nixl_stall_s = double(opts.nixl_stall_ns) / 1e9;
  app.add_option("--nixl-stall-after", nixl_stall_s,
                 "a NIXL transfer in flight this many seconds at the dump is stalled (default 1)")
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("PATH", paths,
                 "dump-set directories, dump files or PyTorch Flight Recorder dumps");

  auto* exp = app.add_subcommand("export", "write dumps in another tool's format");
  std::string format, exp_dir, exp_out;
  exp->add_option("--format", format, "torch-json or torch-pickle (what fr_trace loads)")
      ->required();
  exp->add_option("DIR", exp_dir, "dump set")->required();
  exp->add_option("OUT", exp_out, "output directory")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  opts.nixl_stall_ns = static_cast<int64_t>(nixl_stall_s * 1e9);
  try {
    if (*exp) return run_export(format, exp_dir, exp_out);
    if (paths.empty()) {
      std::cerr
          << "fr-analyze: no input: give a dump-set directory, a dump file or a PyTorch dump\n"
          << app.help();
      return kExitUsage;
    }
    // The trace draws every record; the analysis alone reads the recent ones (docs/fr-analyze.md).
    const auto mode =
        trace_file.empty() ? fr::analyzer::LoadMode::kWindow : fr::analyzer::LoadMode::kFull;
    fr::analyzer::Model model = fr::analyzer::load_model(paths, opts.threads, mode);
    if (model.procs.empty() && model.rankless.empty()) {
      std::string why = model.skipped.empty()
                            ? "no dump files found"
                            : model.skipped.front().file + ": " + model.skipped.front().error;
      if (model.skipped.size() > 1)
        why += " (and " + std::to_string(model.skipped.size() - 1) + " more)";
      std::cerr << "fr-analyze: nothing readable in the input: " << why << "\n";
      return kExitInput;
    }
    fr::analyzer::Analysis analysis = fr::analyzer::analyze_model(model, opts);
    const int done = exit_code_of(analysis);
    if (!trace_file.empty()) {
      std::string err;
      if (!fr::analyzer::write_trace(model, analysis, opts, trace_file, &err)) {
        std::cerr << "fr-analyze: " << err << "\n";
        return kExitOutput;
      }
    }
    model = fr::analyzer::Model{};  // the document and the views need the analysis alone
    if (!html_file.empty()) {
      fr::analyzer::HtmlPage page;
      page.heading = "fr-analyze " + paths.front() +
                     (paths.size() > 1 ? " and " + std::to_string(paths.size() - 1) + " more" : "");
      std::string err;
      if (!write_text_file(html_file, fr::analyzer::render_incident_html(analysis, page), &err)) {
        std::cerr << "fr-analyze: " << err << "\n";
        return kExitOutput;
      }
    }
    if (json_out) {
      const nlohmann::json doc = analysis.take_json();
      fr::analyzer::write_json(doc, 2, std::cout, opts.threads);
      std::cout << "\n";
      finish(done);  // with the fast exit, `doc` and `analysis` are never freed
    } else {
      std::cout << fr::analyzer::render_text(analysis, isatty(STDOUT_FILENO) == 1);
      finish(done);
    }
    if (!std::cout) return kExitOutput;
    return done;
  } catch (const std::exception& e) {
    std::cerr << "fr-analyze: internal error: " << e.what() << "\n";
    return kExitInternal;
  }
}
