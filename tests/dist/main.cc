// The tests' main: MPI starts before googletest (every rank runs every test; mpirun's exit status
// is non-zero when any rank fails) and is finalized at exit by kiln::dist.
#include <gtest/gtest.h>

#include "frontend/dist/process_group.h"

int main(int argc, char** argv) {
  kiln::dist::ProcessGroup::Init(&argc, &argv);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
