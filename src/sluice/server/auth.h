// API-key checks. The comparison takes the same time whatever the supplied
// key is (CVE-2025-59425 was a timing oracle on exactly this).
#pragma once

#include <string>
#include <string_view>

namespace sluice::server {

// Time depends only on expected.size(), never on where the strings differ.
bool constant_time_equals(std::string_view expected, std::string_view supplied);

// The key from "Authorization: Bearer <key>" or "X-Api-Key: <key>" ("" if neither).
std::string_view supplied_api_key(std::string_view authorization_header, std::string_view x_api_key_header);

}  // namespace sluice::server
