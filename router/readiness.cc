#include "router/readiness.h"

#include "absl/strings/str_cat.h"

namespace tandem::router {
namespace {

// "no live prefill or decode worker", "no live decode worker", "".
std::string MissingPair(const ModelReadiness& m) {
  if (m.prefill == 0 && m.decode == 0) {
    return "no live prefill or decode worker";
  }
  if (m.prefill == 0) {
    return "no live prefill worker";
  }
  if (m.decode == 0) {
    return "no live decode worker";
  }
  return "";
}

}  // namespace

std::vector<ModelReadiness> CheckReadiness(const ModelCatalog& catalog, RoutingMode mode,
                                           const RegistrySnapshot& snapshot, absl::Time now) {
  std::vector<ModelReadiness> out;
  out.reserve(catalog.models().size());
  for (const auto& served : catalog.models()) {
    ModelReadiness m;
    m.model = served->name();
    for (const WorkerInfo& w : snapshot.workers) {
      if (w.desc.model != served->worker_model_id() || !snapshot.IsLive(w, now)) {
        continue;
      }
      m.prefill += w.desc.role == WorkerRole::kPrefill ? 1 : 0;
      m.decode += w.desc.role == WorkerRole::kDecode ? 1 : 0;
      m.colocated += w.desc.role == WorkerRole::kColocated ? 1 : 0;
    }
    const std::string missing_pair = MissingPair(m);
    switch (mode) {
      case RoutingMode::kDisaggregated:
        m.ready = missing_pair.empty();
        m.reason = missing_pair;
        break;
      case RoutingMode::kColocated:
        m.ready = m.colocated > 0;
        m.reason = m.ready ? "" : "no live colocated worker";
        break;
      case RoutingMode::kAuto:
        m.ready = missing_pair.empty() || m.colocated > 0;
        m.reason = m.ready ? "" : absl::StrCat(missing_pair, " and no live colocated worker");
        break;
    }
    if (!m.ready) {
      absl::StrAppend(&m.reason, " (mode ", RoutingModeName(mode), "; live for this model: ",
                      m.prefill, " prefill, ", m.decode, " decode, ", m.colocated, " colocated)");
    }
    out.push_back(std::move(m));
  }
  return out;
}

bool AllReady(const std::vector<ModelReadiness>& models) {
  for (const ModelReadiness& m : models) {
    if (!m.ready) {
      return false;
    }
  }
  return true;
}

}  // namespace tandem::router
