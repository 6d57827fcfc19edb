#include "base/env_flag.h"

#include <cstdlib>
#include <cstring>

namespace kiln::base {

bool EnvFlag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
}

}  // namespace kiln::base
