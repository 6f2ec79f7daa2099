#include "sluice/loadgen/request_record.h"

namespace sluice::loadgen {

const char* status_name(RequestStatus status) {
  switch (status) {
    case RequestStatus::kCompleted: return "completed";
    case RequestStatus::kFailed: return "failed";
    case RequestStatus::kCancelled: return "cancelled";
    case RequestStatus::kNotSent: return "not_sent";
  }
  return "unknown";
}

}  // namespace sluice::loadgen
