#include "router/model_catalog.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/engine/model_store.h"
#include "router/api_error.h"

namespace tandem::router {

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::Load(const ServedModelConfig& config) {
  // A model name (smollm2-135m-instruct) is its file in the model cache.
  ASSIGN_OR_RETURN(const std::string path, engine::ResolveModelPath(config.path));
  absl::StatusOr<std::unique_ptr<engine::GgufFile>> file = engine::GgufFile::Open(path);
  if (!file.ok()) {
    return base::Annotate(file.status(), absl::StrCat("model ", path));
  }
  std::string name = config.name;
  if (name.empty()) {
    name = engine::FindKnownModel(config.path) != nullptr
               ? config.path
               : std::filesystem::path(path).stem().string();
  }
  absl::StatusOr<std::unique_ptr<ServedModel>> m =
      FromGguf(name, *std::move(file), config.chat_template,
               std::filesystem::path(path).filename().string(), config.worker_model);
  if (!m.ok()) {
    return base::Annotate(m.status(), absl::StrCat("model ", path));
  }
  return m;
}

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::FromGguf(
    std::string name, std::unique_ptr<engine::GgufFile> file, absl::string_view chat_template_override,
    absl::string_view file_name, absl::string_view worker_model) {
  absl::StatusOr<std::string> gguf_template = file->GetString("tokenizer.chat_template");
  std::string warning;
  ASSIGN_OR_RETURN(ChatTemplate tmpl,
                   ChatTemplate::Resolve(chat_template_override,
                                         gguf_template.ok() ? *gguf_template : "", &warning));
  if (!warning.empty()) {
    LOG(WARNING) << "model " << name << ": " << warning;
  }
  std::unique_ptr<ServedModel> m(new ServedModel(tmpl));
  m->name_ = std::move(name);
  if (!worker_model.empty()) {
    m->worker_model_id_ = std::string(worker_model);
  } else if (absl::StatusOr<std::string> g = file->GetString("general.name"); g.ok()) {
    m->worker_model_id_ = *g;
  } else {
    m->worker_model_id_ = file_name.empty() ? m->name_ : std::string(file_name);
  }
  ASSIGN_OR_RETURN(m->architecture_, file->GetString("general.architecture"));
  absl::StatusOr<int64_t> ctx = file->GetInt(absl::StrCat(m->architecture_, ".context_length"));
  if (!ctx.ok()) {
    return ctx.status();
  }
  if (*ctx < 2 || *ctx > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat(m->architecture_, ".context_length: ", *ctx, " is out of range"));
  }
  m->context_length_ = static_cast<int32_t>(*ctx);
  ASSIGN_OR_RETURN(m->tokenizer_, engine::Tokenizer::FromGguf(*file));
  m->file_ = std::move(file);
  return m;
}

absl::StatusOr<ModelCatalog> ModelCatalog::Load(const std::vector<ServedModelConfig>& configs) {
  std::vector<std::unique_ptr<ServedModel>> models;
  for (const ServedModelConfig& c : configs) {
    ASSIGN_OR_RETURN(std::unique_ptr<ServedModel> m, ServedModel::Load(c));
    for (const auto& other : models) {
      if (other->name() == m->name()) {
        return absl::InvalidArgumentError(
            absl::StrCat("models: the name '", m->name(), "' is used twice"));
      }
    }
    models.push_back(std::move(m));
  }
  return ModelCatalog(std::move(models));
}

absl::StatusOr<const ServedModel*> ModelCatalog::Find(absl::string_view name) const {
  if (name.empty() && models_.size() == 1) {
    return models_[0].get();
  }
  for (const auto& m : models_) {
    if (m->name() == name) {
      return m.get();
    }
  }
  std::vector<std::string> names;
  for (const auto& m : models_) {
    names.push_back(m->name());
  }
  if (name.empty()) {
    return InvalidParam("model",
                        absl::StrCat("model is required (served: ", absl::StrJoin(names, ", "),
                                     ")"),
                        "model_not_found");
  }
  return InvalidParam("model",
                      absl::StrCat("The model '", name, "' does not exist (served: ",
                                   absl::StrJoin(names, ", "), ")"),
                      "model_not_found");
}

int32_t ModelCatalog::RoutedContextLength() const {
  int32_t ctx = 0;
  for (const std::string& name : routed_models_) {
    for (const auto& m : models_) {
      if (m->name() == name && (ctx == 0 || m->context_length() < ctx)) {
        ctx = m->context_length();
      }
    }
  }
  return ctx;
}

}  // namespace tandem::router
