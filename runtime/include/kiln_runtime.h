/* kiln_runtime.h: the C API of libkiln_runtime, which loads and runs `.kiln` blobs written by
 * kiln::aot::Compile (codegen/aot/aot.h) or `kiln compile`. The library contains no compiler
 * (no LLVM, MLIR, NVRTC or shaderc): a blob carries its own machine code. See docs/deploy.md.
 *
 *   kiln_model* model = NULL;
 *   if (kiln_model_load_file("mlp.kiln", &model) != KILN_OK) {
 *     fprintf(stderr, "%s\n", kiln_last_error());
 *     return 1;
 *   }
 *   kiln_tensor_info in;
 *   kiln_model_input_info(model, 0, &in);        // name, dtype, rank, shape, size_bytes
 *   ... const void* inputs[] = {x}; void* outputs[] = {y};
 *   kiln_model_run(model, inputs, outputs);
 *   kiln_model_free(model);
 *
 * Loading validates the whole file (magic, format version, section bounds, XXH3 checksums, the
 * signature and every index of the launch plan) before any code is mapped; a truncated, corrupted
 * or hostile file gives KILN_ERROR_BAD_BLOB with a message naming the section and byte offset,
 * never a crash. Thread safety: a loaded model may be run from several threads at once (each run
 * takes its own scratch memory); kiln_last_error is per thread.
 *
 * Plain C (C99); every function is safe to call with NULL pointers (they return
 * KILN_ERROR_INVALID_ARGUMENT, or 0 / NULL for the accessors). */
#ifndef KILN_RUNTIME_H_
#define KILN_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The blob format version this runtime reads (a blob of another version is refused with
 * "blob format version N, this runtime reads M"). */
#define KILN_BLOB_FORMAT_VERSION 2

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERROR_INVALID_ARGUMENT = 1, /* a NULL pointer, an index out of range, a wrong count */
  KILN_ERROR_IO = 2,               /* the file cannot be opened or read */
  KILN_ERROR_BAD_BLOB = 3,         /* not a valid blob: magic, bounds, checksum, plan ... */
  KILN_ERROR_UNSUPPORTED = 4,      /* another format version, or no code for this CPU */
  KILN_ERROR_RUN = 5,              /* a kernel reported an error (e.g. an index out of range) */
  KILN_ERROR_INTERNAL = 6          /* out of memory, or a bug */
} kiln_status;

/* Element types, as the IR names them (docs/ir.md). */
typedef enum kiln_dtype {
  KILN_DTYPE_F32 = 0,
  KILN_DTYPE_F64 = 1,
  KILN_DTYPE_F16 = 2,
  KILN_DTYPE_BF16 = 3,
  KILN_DTYPE_I32 = 4,
  KILN_DTYPE_I64 = 5,
  KILN_DTYPE_U8 = 6,
  KILN_DTYPE_BOOL = 7, /* one byte holding 0 or 1 */
  KILN_DTYPE_I8 = 8,
  KILN_DTYPE_I16 = 9,
  KILN_DTYPE_U16 = 10,
  KILN_DTYPE_U32 = 11,
  KILN_DTYPE_U64 = 12
} kiln_dtype;

/* A loaded blob. Opaque. */
typedef struct kiln_model kiln_model;

/* One input or output of a model. The pointers stay valid until kiln_model_free. */
typedef struct kiln_tensor_info {
  const char* name; /* as given to kiln::trace / the graph's parameter and output names */
  kiln_dtype dtype;
  size_t rank;
  const int64_t* shape; /* rank entries; dense row-major layout */
  size_t size_bytes;    /* product(shape) * element size */
} kiln_tensor_info;

/* "ok", "invalid argument", "i/o error", "bad blob", "unsupported", "run error", "internal". */
KILN_API const char* kiln_status_string(kiln_status status);
/* "f32", "f64", "f16", "bf16", "i32", "i64", "u8", "bool"; "?" for other values. */
KILN_API const char* kiln_dtype_name(kiln_dtype dtype);
/* Bytes per element of `dtype` (0 for unknown values). */
KILN_API size_t kiln_dtype_size(kiln_dtype dtype);

/* The message of the last failed call on this thread ("" when none failed yet). */
KILN_API const char* kiln_last_error(void);

/* Loads a blob from a file. The weights section is used in place from a read-only mapping of
 * the file. On success *out owns the model; on failure *out is NULL. */
KILN_API kiln_status kiln_model_load_file(const char* path, kiln_model** out);
/* Loads a blob from memory; the bytes are copied, so `data` may be freed afterwards. */
KILN_API kiln_status kiln_model_load_memory(const void* data, size_t size, kiln_model** out);
/* Load on a chosen device. `device` NULL, "" or "cpu": the code section for this CPU (what the
 * two functions above do). "vulkan": the blob's Vulkan section on the default Vulkan device
 * ($KILN_VULKAN_DEVICE, else the first discrete GPU, integrated GPU, any device);
 * "vulkan:<index>" or "vulkan:<name substring>" picks one. KILN_ERROR_UNSUPPORTED, with a
 * message saying which, when the blob has no Vulkan section (compile with `kiln compile --target
 * vulkan`), this library was built without Vulkan, there is no such Vulkan device, or the device
 * lacks a feature the section requires (e.g. shaderFloat64); KILN_ERROR_INVALID_ARGUMENT for an
 * unknown device string. Vulkan's loader (libvulkan.so.1) is opened at run time, so the library
 * does not depend on it. */
KILN_API kiln_status kiln_model_load_file_on(const char* path, const char* device,
                                             kiln_model** out);
KILN_API kiln_status kiln_model_load_memory_on(const void* data, size_t size, const char* device,
                                               kiln_model** out);
/* Where the model runs: "cpu (x86_64-unknown-linux-gnu)" or "vulkan: 0: llvmpipe (...)"; NULL
 * for a NULL model. Valid until kiln_model_free. */
KILN_API const char* kiln_model_device(const kiln_model* model);

/* Frees a model (NULL is accepted). */
KILN_API void kiln_model_free(kiln_model* model);

/* The model's name (CompileOptions::name), or NULL for a NULL model. */
KILN_API const char* kiln_model_name(const kiln_model* model);
KILN_API size_t kiln_model_num_inputs(const kiln_model* model);
KILN_API size_t kiln_model_num_outputs(const kiln_model* model);
KILN_API kiln_status kiln_model_input_info(const kiln_model* model, size_t index,
                                           kiln_tensor_info* out);
KILN_API kiln_status kiln_model_output_info(const kiln_model* model, size_t index,
                                            kiln_tensor_info* out);

/* Runs the model once: inputs[i] points to input i's size_bytes bytes (dense, row-major),
 * outputs[i] to output i's. Any alignment works (64-byte aligned data avoids a copy). Outputs are
 * unspecified after an error. */
KILN_API kiln_status kiln_model_run(const kiln_model* model, const void* const* inputs,
                                    void* const* outputs);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_RUNTIME_H_ */
