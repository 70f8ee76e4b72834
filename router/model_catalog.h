#pragma once
// The models this router serves: for each, the tokenizer, context length and
// chat template read from its GGUF (metadata only; the router never touches
// weights). Workers announce the model they serve by the same name.
//
// Immutable after construction; any thread.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/engine/format/gguf.h"
#include "common/engine/tokenizer/tokenizer.h"
#include "router/chat_template.h"
#include "router/config.h"

namespace tandem::router {

class ServedModel {
 public:
  // Opens config.path. Errors name the file: a missing file, no tokenizer
  // metadata, an unrecognised chat_template override.
  static absl::StatusOr<std::unique_ptr<ServedModel>> Load(const ServedModelConfig& config);
  // From an open GGUF (tests).
  // `file_name` stands in for general.name in the worker model id.
  static absl::StatusOr<std::unique_ptr<ServedModel>> FromGguf(
      std::string name, std::unique_ptr<engine::GgufFile> file, absl::string_view chat_template_override,
      absl::string_view file_name = "", absl::string_view worker_model = "");

  const std::string& name() const { return name_; }
  // What workers serving this model announce as ModelInfo.id (they take
  // general.name, else the GGUF file name).
  const std::string& worker_model_id() const { return worker_model_id_; }
  const std::string& architecture() const { return architecture_; }
  int32_t context_length() const { return context_length_; }
  int32_t vocab_size() const { return tokenizer_->vocab_size(); }
  const engine::Tokenizer& tokenizer() const { return *tokenizer_; }
  const ChatTemplate& chat_template() const { return chat_template_; }

 private:
  ServedModel(ChatTemplate t) : chat_template_(t) {}

  std::string name_;
  std::string worker_model_id_;
  std::string architecture_;
  int32_t context_length_ = 0;
  std::unique_ptr<engine::GgufFile> file_;
  std::unique_ptr<engine::Tokenizer> tokenizer_;
  ChatTemplate chat_template_;
};

class ModelCatalog {
 public:
  ModelCatalog() = default;
  explicit ModelCatalog(std::vector<std::unique_ptr<ServedModel>> models)
      : models_(std::move(models)) {}
  static absl::StatusOr<ModelCatalog> Load(const std::vector<ServedModelConfig>& configs);

  // The model named `name`; an empty name means the only model when there is
  // exactly one. InvalidArgument (param "model", code "model_not_found")
  // listing the served names otherwise.
  absl::StatusOr<const ServedModel*> Find(absl::string_view name) const;
  const std::vector<std::unique_ptr<ServedModel>>& models() const { return models_; }

  // Complexity routing's alias (router/complexity.h) and the served models
  // it routes to, cheapest first: /v1/models and ListModels list it after the
  // models. Find() does not know it (the router resolves it first).
  void SetRoutedAlias(std::string alias, std::vector<std::string> models) {
    routed_alias_ = std::move(alias);
    routed_models_ = std::move(models);
  }
  const std::string& routed_alias() const { return routed_alias_; }  // "" = none
  const std::vector<std::string>& routed_models() const { return routed_models_; }
  // The smallest context length of the routed models (0 without an alias).
  int32_t RoutedContextLength() const;

 private:
  std::vector<std::unique_ptr<ServedModel>> models_;
  std::string routed_alias_;
  std::vector<std::string> routed_models_;
};

}  // namespace tandem::router
