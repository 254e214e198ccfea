// A worker built against an installed shardq::remote_client: without an
// address it is refused (FAILED_PRECONDITION naming shardq::remote_client),
// as it links no coordinator. Exits 0 and prints "remote-only: refused"
// exactly then; 1 otherwise.
#include <iostream>

#include "shardq/work_queue.h"

int main() {
  shardq::WorkQueueOptions options;
  options.name = "remote";
  options.works = {"/dev/null"};
  auto queue = shardq::WorkQueue::Create(options);
  if (!queue.ok() && absl::IsFailedPrecondition(queue.status()) &&
      queue.status().message().find("shardq::remote_client") != absl::string_view::npos) {
    std::cout << "remote-only: refused\n";
    return 0;
  }
  std::cerr << "expected FAILED_PRECONDITION naming shardq::remote_client, got "
            << (queue.ok() ? "a queue" : queue.status().ToString()) << "\n";
  return 1;
}
