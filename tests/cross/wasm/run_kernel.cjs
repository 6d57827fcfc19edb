// Runs the wasm32 kernel written by wasm_kernel + wasm-ld in node, with the kernel ABI
// void(void* const* args, int64_t begin, int64_t end) over [0, parallel_extent), and compares
// every output with the reference interpreter's (expected bytes from wasm_kernel).
//   node run_kernel.cjs kernel.wasm plan.txt   (.cjs: CommonJS wherever a package.json says "module")
'use strict';
const fs = require('fs');
const [wasmPath, planPath] = process.argv.slice(2);
const lines = fs.readFileSync(planPath, 'utf8').trim().split('\n');
const extent = BigInt(lines[0]);
const args = lines.slice(1).map((line) => {
  const [role, file, bytes, dtype] = line.split(' ');
  return {role, file, bytes: Number(bytes), dtype};
});

// Math that wasm has no instruction for arrives as imports (fmaf from ExpandMath's polynomials,
// fmod, ...). fmaf: the f32 product is exact in a double, so one rounding of a*b+c to double and
// one to f32 (Math.fround); that double rounding can differ from a fused f32 fma in the last bit
// in rare ties, far inside the test's tolerance. fma (f64) is not fused here.
const math = (name) => {
  if (name === 'fmod' || name === 'fmodf') return (a, b) => a % b;
  if (name === 'fmaf') return (a, b, c) => Math.fround(a * b + c);
  if (name === 'fma') return (a, b, c) => a * b + c;
  const f = Math[name.replace(/f$/, '')] || Math[name];
  if (typeof f !== 'function') throw new Error(`kernel imports unknown function ${name}`);
  return f;
};
const env = new Proxy({}, {get: (_, name) => math(String(name))});

const wasmModule = new WebAssembly.Module(fs.readFileSync(wasmPath));
const instance = new WebAssembly.Instance(wasmModule, {env});
const {memory, kernel_0: kernel, __heap_base: heapBase} = instance.exports;

// Lay the buffers out after the heap base, 64-byte aligned, then the pointer table.
let next = Number(heapBase.value);
const align = (n) => Math.ceil(n / 64) * 64;
const place = (bytes) => {
  const at = align(next);
  next = at + bytes;
  const need = next - memory.buffer.byteLength;
  if (need > 0) memory.grow(Math.ceil(need / 65536));
  return at;
};
for (const arg of args) arg.at = place(Math.max(arg.bytes, 1));
const table = place(4 * args.length);
for (const [i, arg] of args.entries()) {
  const bytes = new Uint8Array(memory.buffer, arg.at, arg.bytes);
  if (arg.role === 'in') bytes.set(fs.readFileSync(arg.file));
  else bytes.fill(0);
  new Uint32Array(memory.buffer, table, args.length)[i] = arg.at;
}

kernel(table, 0n, extent);

const view = (dtype, buffer, offset, bytes) => {
  switch (dtype) {
    case 'f32': return new Float32Array(buffer, offset, bytes / 4);
    case 'f64': return new Float64Array(buffer, offset, bytes / 8);
    case 'i32': return new Int32Array(buffer, offset, bytes / 4);
    case 'i64': return Array.from(new BigInt64Array(buffer, offset, bytes / 8), Number);
    default: return new Uint8Array(buffer, offset, bytes);
  }
};
let failures = 0;
for (const arg of args.filter((a) => a.role === 'out')) {
  const want = fs.readFileSync(arg.file);
  const w = view(arg.dtype, want.buffer, want.byteOffset, arg.bytes);
  const g = view(arg.dtype, memory.buffer, arg.at, arg.bytes);
  let worst = 0, bad = 0;
  for (let k = 0; k < w.length; ++k) {
    const err = Math.abs(Number(w[k]) - Number(g[k]));
    worst = Math.max(worst, err);
    if (!(err <= 1e-5 + 1e-4 * Math.abs(Number(w[k])))) ++bad;
  }
  console.log(`run_kernel: ${arg.file}: ${w.length} ${arg.dtype} elements, max |error| vs ` +
              `interpreter ${worst.toPrecision(3)}, ${bad} bad`);
  if (bad > 0) ++failures;
}
process.exit(failures === 0 ? 0 : 1);
