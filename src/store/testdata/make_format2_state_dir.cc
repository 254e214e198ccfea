// Writes src/store/testdata/format2/: a state dir as shardq wrote it before
// compact queue state (state dir format 2; creation updates and snapshots in
// format 1, the plan as item strings), for legacy_state_dir_test.cc.
//
// Not built with the project: it must be built against that older code,
// e.g. a worktree of main at 8e58587 (the commit before compact queue
// state), by adding it there as an executable linked to
// shardq_coordinator. Then:
//   make_format2_state_dir OUT_DIR
// The items, operations and expectations are mirrored in
// legacy_state_dir_test.cc; change both together.
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "src/server/coordinator_impl.h"

namespace fs = std::filesystem;
using shardq::CoordinatorImpl;
using shardq::CoordinatorOptions;
using shardq::QueueConfig;

namespace {

std::vector<std::string> Items() {
  return {"data/a.tfrecord?start=0&end=1000",
          "data/a.tfrecord?start=1000&end=2000",
          "data/whole.txt",
          "sqlite:data/t.db?table=clicks&start=0&end=500",
          "data/odd.txt?end=300&start=0",
          "data/half.txt?start=7",
          "data/bad.txt?start=x",
          "data/b.tfrecord?start=0&end=4096"};
}

QueueConfig Config(const std::string& name) {
  QueueConfig c;
  c.name = name;
  c.items = Items();
  c.num_epochs = 2;
  c.seed = 7;
  c.num_clients = 8;
  c.lease_timeout = absl::Seconds(3600);
  return c;
}

void Check(bool ok, const char* what) {
  if (!ok) {
    std::cerr << "failed: " << what << "\n";
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_format2_state_dir OUT_DIR\n";
    return 2;
  }
  const std::string work = std::string(argv[1]) + ".work";
  fs::remove_all(work);
  CoordinatorOptions options;
  options.state_dir = work;
  {
    // Queue "legacy": taken, completed, split and failed, then closed
    // cleanly: a format 1 snapshot.
    auto c = CoordinatorImpl::Create(options);
    Check(c.ok() && (*c)->CreateQueue(Config("legacy")).ok(), "create legacy");
    auto taken = (*c)->Take("legacy", "w1", 4, absl::InfinitePast());
    Check(taken.ok() && taken->size() == 4, "take 4");
    Check((*c)->Complete("legacy", "w1", (*taken)[0].lease_id).ok(), "complete");
    Check((*c)->Complete("legacy", "w1", (*taken)[1].lease_id).ok(), "complete");
    // Split the first held item that has a range, in its middle.
    for (int i = 2; i < 4; ++i) {
      auto spec = shardq::ParseItem((*taken)[i].item);
      if (!spec.ok() || !spec->start || !spec->end || *spec->end - *spec->start < 2) continue;
      auto accepted = (*c)->AcceptSplit("legacy", "w1", (*taken)[i].lease_id,
                                        *spec->start + (*spec->end - *spec->start) / 2);
      Check(accepted.ok() && *accepted, "split");
      break;
    }
    Check((*c)->Fail("legacy", "w1", (*taken)[3].lease_id, "bad record").ok(), "fail");
  }
  {
    // More on "legacy" after its snapshot, and queue "fresh" with only its
    // creation in the journal; then a crash copy (no closing snapshot).
    auto c = CoordinatorImpl::Create(options);
    Check(c.ok(), "reopen");
    auto taken = (*c)->Take("legacy", "w2", 2, absl::InfinitePast());
    Check(taken.ok() && taken->size() == 2, "take 2");
    Check((*c)->Complete("legacy", "w2", (*taken)[0].lease_id).ok(), "complete");
    Check((*c)->CreateQueue(Config("fresh")).ok(), "create fresh");
    auto fresh = (*c)->Take("fresh", "w3", 1, absl::InfinitePast());
    Check(fresh.ok() && fresh->size() == 1, "take fresh");
    Check((*c)->Complete("fresh", "w3", (*fresh)[0].lease_id).ok(), "complete fresh");
    Check((*c)->Flush().ok(), "flush");
    fs::remove_all(argv[1]);
    fs::create_directories(argv[1]);
    for (const char* f : {"COMMITTED", "state.db", "state.db-wal"}) {
      if (fs::exists(work + "/" + f)) fs::copy_file(work + "/" + f, std::string(argv[1]) + "/" + f);
    }
  }
  fs::remove_all(work);
  std::cout << "wrote " << argv[1] << "\n";
  return 0;
}
