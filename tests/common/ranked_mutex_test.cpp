// The lock order kept in code (common/ranked_mutex.h): in order passes, out of order aborts.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <csignal>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/ranked_mutex.h"

namespace {

struct Died {
  bool aborted = false;
  std::string err;
};

// Runs `body` in a child process; whether it died of SIGABRT, and what it wrote to stderr.
Died in_child(const std::function<void()>& body) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::signal(SIGABRT, SIG_DFL);  // the test framework's handler would report it as a failure
    dup2(fds[1], 2);
    close(fds[0]);
    body();
    _exit(0);
  }
  close(fds[1]);
  Died d;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) d.err.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  d.aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  return d;
}

}  // namespace

TEST_CASE("ranked mutex: locks taken in increasing rank, in any number of turns", "[common]") {
  fr::RankedMutex a(1, "a"), b(2, "b"), c(3, "c");
  CHECK(fr::RankedMutex::highest_held() == 0);
  {
    std::lock_guard<fr::RankedMutex> la(a);
    std::lock_guard<fr::RankedMutex> lc(c);
    CHECK(fr::RankedMutex::highest_held() == 3);
  }
  CHECK(fr::RankedMutex::highest_held() == 0);
  {
    // Released out of order, the highest still held is what counts.
    std::unique_lock<fr::RankedMutex> la(a);
    std::unique_lock<fr::RankedMutex> lb(b);
    la.unlock();
    CHECK(fr::RankedMutex::highest_held() == 2);
    std::lock_guard<fr::RankedMutex> lc(c);
    CHECK(fr::RankedMutex::highest_held() == 3);
  }
  // try_lock cannot wait, so it may go against the order; it counts as held.
  {
    std::lock_guard<fr::RankedMutex> lc(c);
    std::unique_lock<fr::RankedMutex> la(a, std::try_to_lock);
    CHECK(la.owns_lock());
  }
  CHECK(fr::RankedMutex::highest_held() == 0);
}

TEST_CASE("ranked mutex: a condition variable's wait keeps the bookkeeping", "[common]") {
  fr::RankedMutex a(1, "a"), b(2, "b");
  std::condition_variable_any cv;
  bool ready = false;
  std::thread t([&] {
    std::lock_guard<fr::RankedMutex> lb(b);
    ready = true;
    cv.notify_all();
  });
  {
    std::unique_lock<fr::RankedMutex> lb(b);
    cv.wait(lb, [&] { return ready; });
    CHECK(fr::RankedMutex::highest_held() == 2);
  }
  t.join();
  std::lock_guard<fr::RankedMutex> la(a);  // nothing held after the wait's lock went
  CHECK(fr::RankedMutex::highest_held() == 1);
}

TEST_CASE("ranked mutex: a lock taken out of order aborts and names both locks", "[common]") {
  fr::RankedMutex state(2, "state"), queue(3, "queue");
  const Died inverted = in_child([&] {
    std::lock_guard<fr::RankedMutex> lq(queue);
    std::lock_guard<fr::RankedMutex> ls(state);  // the inversion: rank 2 under rank 3
  });
  CHECK(inverted.aborted);
  CHECK(inverted.err.find("taking state (rank 2) while holding queue (rank 3)") !=
        std::string::npos);
  // The same rank twice (two locks of one rank, or one lock again) is out of order too.
  fr::RankedMutex other(3, "other queue");
  const Died twice = in_child([&] {
    std::lock_guard<fr::RankedMutex> lq(queue);
    std::lock_guard<fr::RankedMutex> lo(other);
  });
  CHECK(twice.aborted);
  CHECK(twice.err.find("taking other queue (rank 3) while holding queue (rank 3)") !=
        std::string::npos);
  // In order, the child exits normally.
  const Died in_order = in_child([&] {
    std::lock_guard<fr::RankedMutex> ls(state);
    std::lock_guard<fr::RankedMutex> lq(queue);
  });
  CHECK_FALSE(in_order.aborted);
  CHECK(in_order.err.empty());
}
