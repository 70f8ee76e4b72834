#pragma once
// Domain <-> wire conversions of the decode worker's gRPC edge.

#include <string>

#include "common/engine/model.h"
#include "decode_worker/decode_engine.h"
#include "kvtransfer/kv_layout.h"
#include "tandem/v1/worker.pb.h"

namespace tandem::decode_worker::internal {

void ToProto(const kvtransfer::KvLayout& layout, tandem::v1::KvLayout* out);
void ToProto(const Reservation& r, const std::string& decode_worker,
             tandem::v1::KvReservation* out);
// One stream message; token texts of top logprobs come from the model's tokenizer.
tandem::v1::GenerateResponse ToProto(const TokenEvent& event, const std::string& request_id,
                                     const engine::Model& model);

}  // namespace tandem::decode_worker::internal
