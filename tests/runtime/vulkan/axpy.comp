#version 450
// out = alpha * x + y, alpha read from a one-float buffer (a scalar slot), n a push constant.
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer Y { float y[]; };
layout(set = 0, binding = 2) readonly buffer Alpha { float alpha; };
layout(set = 0, binding = 3) writeonly buffer Out { float result[]; };
layout(push_constant) uniform Push { uint n; };
void main() {
  const uint i = gl_GlobalInvocationID.x;
  if (i < n) result[i] = alpha * x[i] + y[i];
}
