/* run_blob: loads a .kiln blob with libkiln_runtime (the C API), prints its signature, runs it
 * once and prints a summary of each output.
 *
 *   run_blob model.kiln [input0.bin ...]
 *
 * Each inputN.bin holds the raw bytes of input N (dense, row-major, little-endian, exactly
 * size_bytes of them). Without them the inputs are filled with a fixed pattern (floats in
 * [-1, 1), integers 0..6), so a run is reproducible. Exit status 0 on success, 1 on any error
 * (the message from kiln_last_error on stderr). $KILN_BLOB_DEVICE chooses the device ("cpu",
 * "vulkan", "vulkan:<index|name>"; kiln_model_load_file_on); unset means the CPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_runtime.h"

static void print_info(const char* what, size_t index, const kiln_tensor_info* info) {
  size_t d;
  printf("%s %zu: %s %s[", what, index, info->name, kiln_dtype_name(info->dtype));
  for (d = 0; d < info->rank; ++d) printf(d == 0 ? "%lld" : ",%lld", (long long)info->shape[d]);
  printf("] (%zu bytes)\n", info->size_bytes);
}

static void fill_pattern(void* data, const kiln_tensor_info* info) {
  size_t i, n = info->size_bytes / kiln_dtype_size(info->dtype);
  for (i = 0; i < n; ++i) {
    const int v = (int)(i % 7);
    switch (info->dtype) {
      case KILN_DTYPE_F32:
        ((float*)data)[i] = (float)v / 3.5f - 1.0f;
        break;
      case KILN_DTYPE_F64:
        ((double*)data)[i] = (double)v / 3.5 - 1.0;
        break;
      case KILN_DTYPE_I32:
        ((int*)data)[i] = v;
        break;
      case KILN_DTYPE_I64:
        ((long long*)data)[i] = v;
        break;
      default:
        ((unsigned char*)data)[i * kiln_dtype_size(info->dtype)] = (unsigned char)(v & 1);
    }
  }
}

static int read_file(const char* path, void* data, size_t size) {
  FILE* f = fopen(path, "rb");
  size_t got;
  long length;
  if (f == NULL) {
    fprintf(stderr, "run_blob: cannot open %s\n", path);
    return 0;
  }
  fseek(f, 0, SEEK_END);
  length = ftell(f);
  fseek(f, 0, SEEK_SET);
  if (length != (long)size) {
    fprintf(stderr, "run_blob: %s has %ld bytes, the input needs %zu\n", path, length, size);
    fclose(f);
    return 0;
  }
  got = fread(data, 1, size, f);
  fclose(f);
  return got == size;
}

int main(int argc, char** argv) {
  kiln_model* model = NULL;
  size_t i, num_inputs, num_outputs;
  void** inputs;
  void** outputs;
  int status = 1;
  if (argc < 2) {
    fprintf(stderr, "usage: run_blob model.kiln [input0.bin ...]\n");
    return 1;
  }
  if (kiln_model_load_file_on(argv[1], getenv("KILN_BLOB_DEVICE"), &model) != KILN_OK) {
    fprintf(stderr, "run_blob: %s\n", kiln_last_error());
    return 1;
  }
  printf("device: %s\n", kiln_model_device(model));
  num_inputs = kiln_model_num_inputs(model);
  num_outputs = kiln_model_num_outputs(model);
  printf("model %s: %zu inputs, %zu outputs\n", kiln_model_name(model), num_inputs, num_outputs);
  inputs = calloc(num_inputs + 1, sizeof(void*));
  outputs = calloc(num_outputs + 1, sizeof(void*));
  for (i = 0; i < num_inputs; ++i) {
    kiln_tensor_info info;
    kiln_model_input_info(model, i, &info);
    print_info("input", i, &info);
    inputs[i] = malloc(info.size_bytes + 1);
    if (argc > 2 + (int)i) {
      if (!read_file(argv[2 + i], inputs[i], info.size_bytes)) goto done;
    } else {
      fill_pattern(inputs[i], &info);
    }
  }
  for (i = 0; i < num_outputs; ++i) {
    kiln_tensor_info info;
    kiln_model_output_info(model, i, &info);
    print_info("output", i, &info);
    outputs[i] = malloc(info.size_bytes + 1);
  }
  if (kiln_model_run(model, (const void* const*)inputs, outputs) != KILN_OK) {
    fprintf(stderr, "run_blob: %s\n", kiln_last_error());
    goto done;
  }
  for (i = 0; i < num_outputs; ++i) {
    kiln_tensor_info info;
    size_t j, n;
    kiln_model_output_info(model, i, &info);
    n = info.size_bytes / kiln_dtype_size(info.dtype);
    printf("%s:", info.name);
    for (j = 0; j < n && j < 10; ++j) {
      if (info.dtype == KILN_DTYPE_F32)
        printf(" %.6g", ((float*)outputs[i])[j]);
      else if (info.dtype == KILN_DTYPE_F64)
        printf(" %.9g", ((double*)outputs[i])[j]);
      else if (info.dtype == KILN_DTYPE_I64)
        printf(" %lld", ((long long*)outputs[i])[j]);
      else if (info.dtype == KILN_DTYPE_I32)
        printf(" %d", ((int*)outputs[i])[j]);
    }
    printf(n > 10 ? " ...\n" : "\n");
  }
  status = 0;
done:
  for (i = 0; i < num_inputs; ++i) free(inputs[i]);
  for (i = 0; i < num_outputs; ++i) free(outputs[i]);
  free(inputs);
  free(outputs);
  kiln_model_free(model);
  return status;
}
