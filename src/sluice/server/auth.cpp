#include "sluice/server/auth.h"

namespace sluice::server {

bool constant_time_equals(std::string_view expected, std::string_view supplied) {
  volatile unsigned char diff = expected.size() == supplied.size() ? 0 : 1;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const unsigned char s = i < supplied.size() ? static_cast<unsigned char>(supplied[i]) : 0;
    diff = diff | (static_cast<unsigned char>(expected[i]) ^ s);
  }
  return diff == 0;
}

std::string_view supplied_api_key(std::string_view authorization_header, std::string_view x_api_key_header) {
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization_header.size() > kBearer.size() && authorization_header.substr(0, kBearer.size()) == kBearer)
    return authorization_header.substr(kBearer.size());
  return x_api_key_header;
}

}  // namespace sluice::server
