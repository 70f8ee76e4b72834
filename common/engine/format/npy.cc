#include "common/engine/format/npy.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tandem::engine {

absl::Status WriteNpy(const std::string& path, absl::Span<const int64_t> shape,
                      absl::Span<const float> data) {
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  if (count != static_cast<int64_t>(data.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy ", path, ": shape holds ", count, " values but data has ", data.size()));
  }
  std::string shape_text = absl::StrJoin(shape, ", ");
  if (shape.size() == 1) shape_text += ",";
  std::string header =
      absl::StrCat("{'descr': '<f4', 'fortran_order': False, 'shape': (", shape_text, "), }");
  // Magic (6) + version (2) + header length (2) + header + '\n', padded to 64.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::PermissionDeniedError(absl::StrCat("cannot open ", path, " for writing"));
  }
  const char magic[] = "\x93NUMPY\x01\x00";
  out.write(magic, 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  out.write(reinterpret_cast<const char*>(&len), 2);
  out.write(header.data(), header.size());
  out.write(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  if (!out) {
    return absl::DataLossError(absl::StrCat("short write to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<NpyArray> ReadNpy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string bytes = ss.str();
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a .npy file (bad magic)"));
  }
  uint8_t major = bytes[6];
  size_t header_len, header_start;
  if (major == 1) {
    uint16_t l;
    std::memcpy(&l, bytes.data() + 8, 2);
    header_len = l;
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return absl::InvalidArgumentError(absl::StrCat(path, ": truncated"));
    uint32_t l;
    std::memcpy(&l, bytes.data() + 8, 4);
    header_len = l;
    header_start = 12;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(path, ": unsupported npy version ", major));
  }
  if (header_start + header_len > bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header past end of file"));
  }
  std::string header = bytes.substr(header_start, header_len);
  if (!absl::StrContains(header, "'descr': '<f4'")) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": only '<f4' arrays are supported: ", header));
  }
  if (!absl::StrContains(header, "'fortran_order': False")) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": Fortran-order arrays are not supported"));
  }
  size_t open = header.find("'shape': (");
  size_t close = open == std::string::npos ? open : header.find(')', open);
  if (close == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no shape in header"));
  }
  NpyArray array;
  std::string dims = header.substr(open + 10, close - open - 10);
  int64_t count = 1;
  for (absl::string_view part : absl::StrSplit(dims, ',', absl::SkipWhitespace())) {
    int64_t d;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &d) || d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": bad shape '", dims, "'"));
    }
    array.shape.push_back(d);
    count *= d;
  }
  size_t data_start = header_start + header_len;
  if (bytes.size() - data_start != static_cast<size_t>(count) * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", bytes.size() - data_start,
                                                   " data bytes for shape (", dims, ")"));
  }
  array.data.resize(count);
  std::memcpy(array.data.data(), bytes.data() + data_start, count * sizeof(float));
  return array;
}

}  // namespace tandem::engine
