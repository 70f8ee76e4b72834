#pragma once
// Shared helpers for the router tests: the stories260K model as a served
// model, and a catalog around it.

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "router/model_catalog.h"
#include "tests/testing/test_paths.h"

namespace tandem::router::testing {

inline std::string StoriesPath() {
  return tandem::testing::RequireSharedFile("models/stories260K/stories260K.gguf");
}

inline ModelCatalog StoriesCatalog(const std::string& chat_template = "") {
  ServedModelConfig c;
  c.name = "stories260K";
  c.path = StoriesPath();
  c.chat_template = chat_template;
  absl::StatusOr<std::unique_ptr<ServedModel>> m = ServedModel::Load(c);
  EXPECT_TRUE(m.ok()) << m.status();
  std::vector<std::unique_ptr<ServedModel>> models;
  if (m.ok()) {
    models.push_back(*std::move(m));
  }
  return ModelCatalog(std::move(models));
}

}  // namespace tandem::router::testing
