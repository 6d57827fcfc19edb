#version 450
// out[i] = table[index[i]]; an index outside [0, table_size) raises kernel error 1
// (kKernelIndexOutOfRange) with the index as detail: the flag is int64[2] written as four ints.
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer Table { float table[]; };
layout(set = 0, binding = 1) readonly buffer Index { int index[]; };
layout(set = 0, binding = 2) writeonly buffer Out { float result[]; };
layout(set = 0, binding = 3) coherent buffer Flag { int flag[4]; };
layout(push_constant) uniform Push { uint n; int table_size; };
void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i >= n) return;
  const int k = index[i];
  if (k < 0 || k >= table_size) {
    if (atomicCompSwap(flag[0], 0, 1) == 0) {
      flag[2] = k;
      flag[3] = k < 0 ? -1 : 0;
    }
    result[i] = 0.0;
    return;
  }
  result[i] = table[k];
}
