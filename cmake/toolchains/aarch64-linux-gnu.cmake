# Cross-compiling for aarch64 Linux with Debian's g++-aarch64-linux-gnu (libc and libstdc++ in
# /usr/aarch64-linux-gnu). Third-party aarch64 libraries (abseil, xxHash) come from the sysroot
# that scripts/cross_sysroot.sh unpacks (KILN_AARCH64_SYSROOT, default /opt/kiln/sysroot-aarch64).
# Programs run under qemu-user: CMAKE_CROSSCOMPILING_EMULATOR. Used by tests/cross/.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

if(NOT DEFINED KILN_AARCH64_SYSROOT)
  if(DEFINED ENV{KILN_AARCH64_SYSROOT})
    set(KILN_AARCH64_SYSROOT "$ENV{KILN_AARCH64_SYSROOT}")
  else()
    set(KILN_AARCH64_SYSROOT /opt/kiln/sysroot-aarch64)
  endif()
endif()
set(KILN_AARCH64_SYSROOT "${KILN_AARCH64_SYSROOT}" CACHE PATH "aarch64 libraries (scripts/cross_sysroot.sh)")
# Try-compile projects see the variable too.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES KILN_AARCH64_SYSROOT)

set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu "${KILN_AARCH64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
# Package config files from the sysroot only: a host config (even a header-only one) would add
# -isystem /usr/include, the host's libc headers.
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
