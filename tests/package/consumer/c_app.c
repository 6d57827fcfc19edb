/* A C program on the installed libkiln_runtime.so: runs the blob app wrote on x = [1, 2, 3, 4]
 * and prints its output the way app prints the C++ result, so the driver can compare them.
 * Built three ways by run_consumer.cmake: CMake's kiln::runtime, plain cc -lkiln_runtime, and
 * pkg-config kiln_runtime. */
#include <stdio.h>

#include <kiln_runtime.h>

int main(int argc, char** argv) {
  kiln_model* model = NULL;
  const float x[4] = {1.f, 2.f, 3.f, 4.f};
  float y[2] = {0.f, 0.f};
  const void* inputs[1] = {x};
  void* outputs[1] = {y};
  if (argc != 2) {
    fprintf(stderr, "usage: c_app net.kiln\n");
    return 2;
  }
  if (kiln_model_load_file(argv[1], &model) != KILN_OK ||
      kiln_model_run(model, inputs, outputs) != KILN_OK) {
    fprintf(stderr, "c_app: %s\n", kiln_last_error());
    kiln_model_free(model);
    return 1;
  }
  kiln_model_free(model);
  printf("y = %.6g %.6g\n", y[0], y[1]);
  return 0;
}
