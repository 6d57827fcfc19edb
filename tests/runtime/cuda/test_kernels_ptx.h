// Hand-written PTX for the CUDA driver's tests (kernels as codegen/cuda's contract has them:
// extern "C" entry points whose parameters are only device pointers). PTX ISA 7.0 for sm_80, so
// that any driver since CUDA 11.0 JIT-compiles it for the GPU at hand; check an edit with
//   /usr/local/cuda/bin/ptxas -arch=sm_90 <file>.ptx -o /dev/null
// (tests/runtime/cuda/cuda_header_cmake_only_test.cc runs ptxas on it where the toolkit is).
#pragma once

namespace kiln::runtime::cuda::testing {

// kiln_add(const float* a, const float* b, float* out, const int64_t* n):
//   out[i] = a[i] + b[i] for i < *n; one thread per element, 1-D grid.
// kiln_gather(const float* table, const int64_t* indices, float* out, const int64_t* sizes,
//             int64_t* flag):
//   sizes = {number of indices, table length}; out[i] = table[indices[i]] for i < sizes[0]; an
//   index outside [0, sizes[1]) writes flag = {1 (kKernelIndexOutOfRange), the index} and 0 to
//   out[i].
inline constexpr char kTestKernelsPtx[] = R"ptx(
.version 7.0
.target sm_80
.address_size 64

.visible .entry kiln_add(
	.param .u64 kiln_add_a,
	.param .u64 kiln_add_b,
	.param .u64 kiln_add_out,
	.param .u64 kiln_add_n
)
{
	.reg .pred 	%p<2>;
	.reg .f32 	%f<4>;
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<12>;

	ld.param.u64 	%rd1, [kiln_add_a];
	ld.param.u64 	%rd2, [kiln_add_b];
	ld.param.u64 	%rd3, [kiln_add_out];
	ld.param.u64 	%rd4, [kiln_add_n];
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd2, %rd2;
	cvta.to.global.u64 	%rd3, %rd3;
	cvta.to.global.u64 	%rd4, %rd4;
	// i = blockIdx.x * blockDim.x + threadIdx.x, as a 64-bit index
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mov.u32 	%r3, %tid.x;
	mul.wide.u32 	%rd5, %r1, %r2;
	cvt.u64.u32 	%rd6, %r3;
	add.s64 	%rd5, %rd5, %rd6;
	ld.global.u64 	%rd7, [%rd4];
	setp.ge.s64 	%p1, %rd5, %rd7;
	@%p1 bra 	ADD_DONE;
	shl.b64 	%rd8, %rd5, 2;
	add.s64 	%rd9, %rd1, %rd8;
	add.s64 	%rd10, %rd2, %rd8;
	add.s64 	%rd11, %rd3, %rd8;
	ld.global.f32 	%f1, [%rd9];
	ld.global.f32 	%f2, [%rd10];
	add.rn.f32 	%f3, %f1, %f2;
	st.global.f32 	[%rd11], %f3;
ADD_DONE:
	ret;
}

.visible .entry kiln_gather(
	.param .u64 kiln_gather_table,
	.param .u64 kiln_gather_indices,
	.param .u64 kiln_gather_out,
	.param .u64 kiln_gather_sizes,
	.param .u64 kiln_gather_flag
)
{
	.reg .pred 	%p<4>;
	.reg .f32 	%f<2>;
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<20>;

	ld.param.u64 	%rd1, [kiln_gather_table];
	ld.param.u64 	%rd2, [kiln_gather_indices];
	ld.param.u64 	%rd3, [kiln_gather_out];
	ld.param.u64 	%rd4, [kiln_gather_sizes];
	ld.param.u64 	%rd5, [kiln_gather_flag];
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd2, %rd2;
	cvta.to.global.u64 	%rd3, %rd3;
	cvta.to.global.u64 	%rd4, %rd4;
	cvta.to.global.u64 	%rd5, %rd5;
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mov.u32 	%r3, %tid.x;
	mul.wide.u32 	%rd6, %r1, %r2;
	cvt.u64.u32 	%rd7, %r3;
	add.s64 	%rd6, %rd6, %rd7;
	ld.global.u64 	%rd8, [%rd4];
	setp.ge.s64 	%p1, %rd6, %rd8;
	@%p1 bra 	GATHER_DONE;
	// index = indices[i]; out + 4 * i
	shl.b64 	%rd9, %rd6, 3;
	add.s64 	%rd10, %rd2, %rd9;
	ld.global.u64 	%rd11, [%rd10];
	shl.b64 	%rd12, %rd6, 2;
	add.s64 	%rd13, %rd3, %rd12;
	ld.global.u64 	%rd14, [%rd4+8];
	setp.lt.s64 	%p2, %rd11, 0;
	setp.ge.s64 	%p3, %rd11, %rd14;
	or.pred 	%p2, %p2, %p3;
	@%p2 bra 	GATHER_OUT_OF_RANGE;
	shl.b64 	%rd15, %rd11, 2;
	add.s64 	%rd16, %rd1, %rd15;
	ld.global.f32 	%f1, [%rd16];
	st.global.f32 	[%rd13], %f1;
	bra.uni 	GATHER_DONE;
GATHER_OUT_OF_RANGE:
	st.global.u64 	[%rd5+8], %rd11;
	mov.u64 	%rd17, 1;
	st.global.u64 	[%rd5], %rd17;
	mov.f32 	%f1, 0f00000000;
	st.global.f32 	[%rd13], %f1;
GATHER_DONE:
	ret;
}
)ptx";

}  // namespace kiln::runtime::cuda::testing
