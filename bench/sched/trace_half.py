"""The Mooncake trace's requests, all or one half: the explore scripts develop on the
first half and report on the second (issue 17: fit nothing to the half reported)."""
import json


def read_requests(path, half):
    """The trace's requests in order; half is "first", "second" or "all"."""
    reqs = [json.loads(line) for line in open(path) if line.strip()]
    if half == "first":
        return reqs[: len(reqs) // 2]
    if half == "second":
        return reqs[len(reqs) // 2 :]
    return reqs
