// See comm_table.h. learn() is the heartbeat's pass over the communicators: each (process,
// communicator) member's progress into its model, the members that left, and slow members.
#include "daemon/logic/comm_table.h"

#include <algorithm>
#include <cstdio>

#include "daemon/base/names.h"
#include "daemon/logic/coordinator_helpers.h"

namespace fr::daemon {

using namespace coordinator_helpers;

namespace {

uint64_t member_key(uint64_t log_hash, uint64_t comm_id) {
  return log_hash * 0x9E3779B97F4A7C15ull ^ comm_id;
}

StallPolicy policy_of(const CoordinatorConfig& cfg) {
  StallPolicy p;
  p.automatic = cfg.stall_auto;
  p.fixed_ns = cfg.stall_after_ns;
  p.floor_ns = cfg.stall_floor_ns;
  p.cap_ns = std::max(cfg.stall_cap_ns, cfg.stall_floor_ns);
  p.factor = cfg.stall_factor;
  p.warmup = cfg.stall_warmup;
  return p;
}

}  // namespace

CommTable::CommTable(const CoordinatorConfig& cfg) : cfg_(cfg), policy_(policy_of(cfg)) {}

const CommModel* CommTable::model(uint64_t comm_id) const {
  auto it = models_.find(comm_id);
  return it == models_.end() ? nullptr : &it->second;
}

int64_t CommTable::stall_threshold_ns(uint64_t comm_id) const {
  const CommModel* m = model(comm_id);
  return m ? m->threshold_ns(policy_) : unlearned_threshold_ns(policy_);
}

void CommTable::learn(const std::string& node, std::vector<MemberTrack>* tracks,
                      const NodeReport& report, int64_t now_mono) {
  std::vector<MemberTrack>& members = *tracks;
  std::vector<MemberTrack>& next = next_members_;
  next.clear();
  std::vector<char>& kept = members_kept_;  // old members that report again
  kept.assign(members.size(), 0);
  for (const auto& p : report.processes) {
    if (!p.alive) continue;
    const uint64_t log_hash = std::hash<std::string>()(p.log);
    // NIXL agent pairs as members of their own model (nixl_model_id), beside the communicators.
    auto nixl_progress = [](const XferProgress& x) {
      CommProgress c;
      c.comm_id = nixl_model_id(x.local_agent, x.remote_agent);
      c.oldest_age_ns = x.oldest_age_ns;
      c.oldest_seq = x.oldest_key;
      c.completed = x.completed;
      c.name = "NIXL " + x.local_agent + " -> " + x.remote_agent;
      return c;
    };
    std::vector<CommProgress> pairs;
    for (const auto& x : p.xfers) pairs.push_back(nixl_progress(x));
    for (size_t ci = 0; ci < p.comms.size() + pairs.size(); ++ci) {
      const CommProgress& c = ci < p.comms.size() ? p.comms[ci] : pairs[ci - p.comms.size()];
      if (next.size() >= cfg_.max_members_per_node) break;
      auto model = models_.find(c.comm_id);
      if (model == models_.end()) {
        if (models_.size() >= cfg_.max_comm_models) continue;
        model = models_.emplace(c.comm_id, CommModel{}).first;
      }
      if (model->second.name.empty() && !c.name.empty()) model->second.name = printable(c.name, 64);
      uint64_t key = member_key(log_hash, c.comm_id);
      auto prev = std::lower_bound(members.begin(), members.end(), key,
                                   [](const MemberTrack& m, uint64_t k) { return m.key < k; });
      const MemberTrack* before = prev != members.end() && prev->key == key ? &*prev : nullptr;
      // A process listing one communicator twice: its first entry counts.
      if (before && kept[size_t(prev - members.begin())]) continue;
      next.push_back(observe(model->second, before, key, p.rank, c.comm_id, c.oldest_seq,
                             c.oldest_age_ns, c.completed, now_mono));
      if (before) kept[size_t(prev - members.begin())] = 1;
      // Reported once it held for a while: ranks slow in turn (random jitter) look slow briefly.
      MemberTrack& m = next.back();
      if (is_slow_member(model->second, m, now_mono, 5 * cfg_.heartbeat_interval_ns))
        m.slow_streak++;
      else
        m.slow_streak = 0;
      if (m.slow_streak >= MemberTrack::kSlowStreak) note_slow(node, m, model->second, now_mono);
    }
  }
  for (size_t i = 0; i < members.size(); ++i)
    if (!kept[i])
      if (auto model = models_.find(members[i].comm_id); model != models_.end())
        leave(model->second, members[i]);
  std::sort(next.begin(), next.end(),
            [](const MemberTrack& a, const MemberTrack& b) { return a.key < b.key; });
  // ... and so for a new member listed twice: the second one leaves again.
  next.erase(std::unique(next.begin(), next.end(),
                         [&](const MemberTrack& a, const MemberTrack& b) {
                           if (a.key != b.key) return false;
                           if (auto model = models_.find(b.comm_id); model != models_.end())
                             leave(model->second, b);
                           return true;
                         }),
             next.end());
  std::swap(members, next);  // the old tracks' memory is the next heartbeat's scratch
}

void CommTable::drop_members(std::vector<MemberTrack>* members) {
  for (const auto& m : *members)
    if (auto model = models_.find(m.comm_id); model != models_.end()) leave(model->second, m);
  members->clear();
}

void CommTable::note_slow(const std::string& node, const MemberTrack& m, const CommModel& model,
                          int64_t now_mono) {
  double peers = peers_waiting(model, m);
  for (auto& f : findings_)
    if (f.node == node && f.rank == m.rank && f.comm_id == m.comm_id) {
      if (!f.active)
        pending_log_.push_back("frd coordinator: rank " + std::to_string(m.rank) +
                               " is slow again on " + f.comm_name);
      findings_dirty_ |= !f.active;
      f.active = true;
      f.last_real = real_ns();
      f.last_mono = now_mono;
      f.rank_waiting = m.waiting;
      f.peers_waiting = peers;
      return;
    }
  if (findings_.size() >= cfg_.max_findings) return;
  Finding f;
  f.rank = m.rank;
  f.node = node;
  f.comm_id = m.comm_id;
  f.comm_name =
      model.name.empty() ? "0x" + hex_id(m.comm_id) : model.name + " (0x" + hex_id(m.comm_id) + ")";
  f.rank_waiting = m.waiting;
  f.peers_waiting = peers;
  f.first_real = f.last_real = real_ns();
  f.last_mono = now_mono;
  char line[160];
  std::snprintf(line, sizeof line, "its peers wait at %.0f%% of heartbeats, it at %.0f%%",
                100 * peers, 100 * double(m.waiting));
  pending_log_.push_back("frd coordinator: slow rank " + std::to_string(m.rank) + " on node " +
                         node + " (communicator " + f.comm_name + "): " + line +
                         "; the job still progresses");
  findings_.push_back(std::move(f));
  findings_dirty_ = true;
}

void CommTable::forget(int64_t now_mono) {
  for (auto it = models_.begin(); it != models_.end();) {
    if (it->second.waiting_members == 0 &&
        now_mono - it->second.last_seen_mono > cfg_.forget_after_ns)
      it = models_.erase(it);
    else
      ++it;
  }
}

void CommTable::age_findings(int64_t now_mono, std::vector<std::string>* log) {
  for (auto& f : findings_)
    if (f.active && now_mono - f.last_mono > 10 * cfg_.heartbeat_interval_ns) {
      f.active = false;
      findings_dirty_ = true;
      log->push_back("frd coordinator: rank " + std::to_string(f.rank) + " on " + f.comm_name +
                     " no longer slow");
    }
  for (auto& line : pending_log_) log->push_back(std::move(line));
  pending_log_.clear();
}

bool CommTable::take_findings_dirty() {
  const bool dirty = findings_dirty_;
  findings_dirty_ = false;
  return dirty;
}

nlohmann::json CommTable::findings_json() const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& f : findings_) list.push_back(coordinator_helpers::finding_status(f));
  return list;
}

}  // namespace fr::daemon
