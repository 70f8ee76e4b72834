#pragma once
// The only logging include: LOG(INFO|WARNING|ERROR), VLOG(n), CHECK, DCHECK as
// absl/log spells them, backed by glog until the pinned Abseil has absl/log.

#include <glog/logging.h>
