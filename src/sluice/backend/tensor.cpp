#include "sluice/backend/tensor.h"

#include <fmt/format.h>

namespace sluice {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::f8_e4m3: return "F8_E4M3";
    case DType::f8_e8m0: return "F8_E8M0";
    case DType::i8: return "I8";
    case DType::u8: return "U8";
  }
  return "?";
}

std::string Shape::str() const {
  std::string out = "[";
  for (int i = 0; i < rank; ++i) out += fmt::format("{}{}", i ? ", " : "", dims[i]);
  return out + "]";
}

}  // namespace sluice
