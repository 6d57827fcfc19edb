#!/bin/sh
# Regenerates the SPIR-V headers (*.spv.h) of the Vulkan runtime tests from the GLSL beside this script
# (glslangValidator from Debian's glslang-tools). The runtime takes SPIR-V and never compiles
# GLSL, so its tests carry precompiled shaders: run this after editing a .comp file.
set -eu
cd "$(dirname "$0")"
for source in *.comp; do
  name="${source%.comp}"
  glslangValidator -V --target-env vulkan1.1 --vn "k${name}Spirv" -o "${name}.spv.h" "${source}"
  # glslangValidator's layout, not Google style: make format-check keeps it as it is.
  { echo "// clang-format off"; cat "${name}.spv.h"; echo "// clang-format on"; } >"${name}.spv.h.tmp"
  mv "${name}.spv.h.tmp" "${name}.spv.h"
done
