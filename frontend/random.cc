#include "frontend/random.h"

#include <mutex>

namespace kiln {
namespace {

// The state a fresh process starts from (torch's default seed, for familiarity).
constexpr uint64_t kDefaultSeed = 67280421310721ull;

struct Stream {
  std::mutex mutex;
  uint64_t state = kDefaultSeed;
};

Stream& GlobalStream() {
  static Stream stream;
  return stream;
}

}  // namespace

void manual_seed(uint64_t seed) {
  Stream& stream = GlobalStream();
  std::lock_guard<std::mutex> lock(stream.mutex);
  stream.state = seed;
}

namespace detail {

uint64_t NextSeed() {
  Stream& stream = GlobalStream();
  std::lock_guard<std::mutex> lock(stream.mutex);
  // splitmix64 (Steele, Lea, Flood 2014).
  uint64_t z = (stream.state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t RandomStreamState() {
  Stream& stream = GlobalStream();
  std::lock_guard<std::mutex> lock(stream.mutex);
  return stream.state;
}

}  // namespace detail
}  // namespace kiln
