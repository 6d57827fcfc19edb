// kiln's global random stream. Every random op (random_uniform, random_normal, nn initialisers)
// takes the next value of a splitmix64 stream as the seed of its counter-based (Philox) ir node,
// so a program that calls manual_seed(s) first is reproducible on every backend.
#pragma once

#include <cstdint>

namespace kiln {

/// Restarts the global random stream from `seed`. Without a call, the stream starts from a fixed
/// seed (so programs are reproducible by default).
void manual_seed(uint64_t seed);

namespace detail {
/// The next seed of the global stream (thread-safe).
uint64_t NextSeed();
/// The stream's current state; manual_seed(state) resumes the stream exactly there (checkpoints
/// save it so a resumed run draws the same random numbers).
uint64_t RandomStreamState();
}  // namespace detail

}  // namespace kiln
