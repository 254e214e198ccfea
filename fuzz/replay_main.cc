// Replays fuzz inputs through a target's LLVMFuzzerTestOneInput without
// libFuzzer, so that `make test` (GCC, no clang) re-runs the seed corpus and
// every crash reproducer kept in it. Arguments are files or directories
// (whose regular files are replayed in name order). Exits non-zero when no
// input was found, so that a missing corpus cannot pass silently; a failing
// property aborts the process (FUZZ_CHECK).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<std::filesystem::path> InputsOf(const std::filesystem::path& arg) {
  std::vector<std::filesystem::path> inputs;
  if (std::filesystem::is_directory(arg)) {
    for (const auto& entry : std::filesystem::directory_iterator(arg)) {
      if (entry.is_regular_file()) inputs.push_back(entry.path());
    }
    std::sort(inputs.begin(), inputs.end());
  } else if (std::filesystem::is_regular_file(arg)) {
    inputs.push_back(arg);
  }
  return inputs;
}

}  // namespace

int main(int argc, char** argv) {
  int replayed = 0;
  for (int i = 1; i < argc; ++i) {
    for (const std::filesystem::path& path : InputsOf(argv[i])) {
      std::ifstream in(path, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      if (!in.good() && !in.eof()) {
        std::fprintf(stderr, "cannot read %s\n", path.c_str());
        return 1;
      }
      std::fprintf(stderr, "replay %s (%zu bytes)\n", path.c_str(),
                   bytes.size());
      // A copy in its own allocation, so ASan catches reads past the end.
      std::vector<uint8_t> input(bytes.begin(), bytes.end());
      LLVMFuzzerTestOneInput(input.data(), input.size());
      ++replayed;
    }
  }
  if (replayed == 0) {
    std::fprintf(stderr, "no fuzz inputs found in the arguments\n");
    return 1;
  }
  std::printf("replayed %d inputs, all properties held\n", replayed);
  return 0;
}
