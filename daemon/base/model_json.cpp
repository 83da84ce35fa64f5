#include "daemon/base/model_json.h"

namespace fr::daemon {

void to_json(nlohmann::json& j, const DumpProcess& p) {
  j = {{"rank", p.rank},       {"world_size", p.world_size},
       {"pid", p.pid},         {"host", p.host},
       {"job_id", p.job_id},   {"file", p.file},
       {"source", p.source},   {"alive", p.alive},
       {"records", p.records}, {"overwritten", p.overwritten},
       {"torn", p.torn}};
}

}  // namespace fr::daemon
